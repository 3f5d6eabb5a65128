//! The MCP tools the hub offers: their `tools/list` entries (names, descriptions, JSON
//! Schemas), the parsing of `tools/call` arguments into typed calls, and the await bounds.
//!
//! Owns: `ToolCall` and its argument rules. Refuses: any IO (the stdio loop in `serve` runs
//! the calls). Names stay short and free of underscores: every agent prefixes them its own way
//! (`mcp__hub__send`, `mcp_hub_send`, `hub_send`).

use serde_json::{json, Map, Value};
use std::fmt;

/// An `await` without `timeoutSecs` waits this long.
pub const AWAIT_DEFAULT_SECS: u64 = 25;
/// No `await` waits longer than this: below the tool-call timeouts clients use (Codex
/// `tool_timeout_sec` defaults to 60 s), so the answer always arrives before the client gives up.
pub const AWAIT_MAX_SECS: u64 = 50;
/// The text of an await that found nothing (a normal result, not an error).
pub const NO_MESSAGE: &str = "no message yet";

/// One tool call, arguments checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolCall {
    Send(SendCall),
    Await(AwaitCall),
    Who,
    Whoami,
}

/// `send {to, kind, body, correlationId?}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendCall {
    pub to: String,
    pub kind: String,
    /// The body as compact JSON text (a string argument becomes a JSON string).
    pub body: String,
    pub correlation_id: Option<String>,
}

/// `await {replyTo?, kind?, timeoutSecs?}` with the wait already bounded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AwaitCall {
    pub reply_to: Option<String>,
    pub kind: Option<String>,
    /// Hub-side wait in whole seconds, at most `AWAIT_MAX_SECS`.
    pub timeout_secs: u64,
}

/// Why a `tools/call` could not become a `ToolCall`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolArgError {
    /// No tool of that name: a protocol fault (JSON-RPC -32602).
    UnknownTool(String),
    /// The tool exists but its arguments are wrong: a tool failure the model can fix
    /// (result with `isError`).
    BadArgs(String),
}

impl fmt::Display for ToolArgError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ToolArgError::UnknownTool(n) => write!(f, "Unknown tool: {n}"),
            ToolArgError::BadArgs(m) => write!(f, "invalid arguments: {m}"),
        }
    }
}

impl std::error::Error for ToolArgError {}

/// The `tools/list` result.
pub fn list() -> Value {
    json!({ "tools": [
        {
            "name": "send",
            "title": "Send a message",
            "description": "Send a message to another agent through the hub. Returns the id the hub accepted; a reply to it carries that id as its correlationId.",
            "inputSchema": {
                "type": "object",
                "properties": {
                    "to": {"type": "string", "description": "The recipient agent's name (see `who`)."},
                    "kind": {"type": "string", "description": "The message kind, e.g. task, result, question, note."},
                    "body": {"description": "The message body: any JSON value, or a string."},
                    "correlationId": {"type": "string", "description": "The id of the message this one answers."}
                },
                "required": ["to", "kind", "body"]
            },
            "annotations": {"readOnlyHint": false, "destructiveHint": false, "idempotentHint": false, "openWorldHint": false}
        },
        {
            "name": "await",
            "title": "Wait for a message",
            "description": format!("Wait for the next message addressed to you and return it as JSON (id, from, to, ts, kind, correlationId, body). Waits at most timeoutSecs (default {AWAIT_DEFAULT_SECS}, capped at {AWAIT_MAX_SECS}); if nothing arrives it returns \"{NO_MESSAGE}\", and you may call it again. replyTo waits for the reply to one message id; kind filters by kind."),
            "inputSchema": {
                "type": "object",
                "properties": {
                    "replyTo": {"type": "string", "description": "Only a message whose correlationId is this id."},
                    "kind": {"type": "string", "description": "Only a message of this kind."},
                    "timeoutSecs": {"type": "integer", "minimum": 0, "maximum": AWAIT_MAX_SECS, "description": format!("Seconds to wait (default {AWAIT_DEFAULT_SECS}, at most {AWAIT_MAX_SECS}; 0 only checks).")}
                }
            },
            "annotations": {"readOnlyHint": false, "destructiveHint": false, "idempotentHint": false, "openWorldHint": false}
        },
        {
            "name": "who",
            "title": "Who is on the hub",
            "description": "List every agent on the hub's roster: its parked awaits and their filters, queued message count, last seen and last delivery.",
            "inputSchema": {"type": "object", "properties": {}},
            "annotations": {"readOnlyHint": true, "destructiveHint": false, "idempotentHint": true, "openWorldHint": false}
        },
        {
            "name": "whoami",
            "title": "Who am I",
            "description": "Your own agent name on the hub (what others pass as `to`) and the hub's address.",
            "inputSchema": {"type": "object", "properties": {}},
            "annotations": {"readOnlyHint": true, "destructiveHint": false, "idempotentHint": true, "openWorldHint": false}
        }
    ]})
}

/// Turns a tool name and its `arguments` (absent or null meaning `{}`) into a `ToolCall`.
pub fn parse_call(name: &str, args: Option<&Value>) -> Result<ToolCall, ToolArgError> {
    let empty = Map::new();
    let args = match args {
        None | Some(Value::Null) => &empty,
        Some(Value::Object(m)) => m,
        Some(_) if is_tool(name) => {
            return Err(ToolArgError::BadArgs("arguments must be an object".into()))
        }
        Some(_) => return Err(ToolArgError::UnknownTool(name.to_owned())),
    };
    match name {
        "send" => {
            let to = required_str(args, "to")?;
            let kind = required_str(args, "kind")?;
            let body = match args.get("body") {
                None => return Err(ToolArgError::BadArgs("body is required".into())),
                Some(v) => v.to_string(),
            };
            let correlation_id = optional_str(args, "correlationId")?;
            Ok(ToolCall::Send(SendCall {
                to,
                kind,
                body,
                correlation_id,
            }))
        }
        "await" => Ok(ToolCall::Await(AwaitCall {
            reply_to: optional_str(args, "replyTo")?,
            kind: optional_str(args, "kind")?,
            timeout_secs: bounded_timeout(args.get("timeoutSecs"))?,
        })),
        "who" => Ok(ToolCall::Who),
        "whoami" => Ok(ToolCall::Whoami),
        other => Err(ToolArgError::UnknownTool(other.to_owned())),
    }
}

fn is_tool(name: &str) -> bool {
    matches!(name, "send" | "await" | "who" | "whoami")
}

fn required_str(args: &Map<String, Value>, key: &str) -> Result<String, ToolArgError> {
    match args.get(key) {
        Some(Value::String(s)) if !s.is_empty() => Ok(s.clone()),
        Some(Value::String(_)) => Err(ToolArgError::BadArgs(format!("{key} must not be empty"))),
        None | Some(Value::Null) => Err(ToolArgError::BadArgs(format!("{key} is required"))),
        Some(_) => Err(ToolArgError::BadArgs(format!("{key} must be a string"))),
    }
}

fn optional_str(args: &Map<String, Value>, key: &str) -> Result<Option<String>, ToolArgError> {
    match args.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if !s.is_empty() => Ok(Some(s.clone())),
        Some(Value::String(_)) => Err(ToolArgError::BadArgs(format!(
            "{key} must not be empty (leave it out instead)"
        ))),
        Some(_) => Err(ToolArgError::BadArgs(format!("{key} must be a string"))),
    }
}

/// `timeoutSecs`: absent → the default; a number ≥ 0 (fractions round down, some models send
/// `10.0`) capped at `AWAIT_MAX_SECS`; a numeric string is accepted too.
fn bounded_timeout(v: Option<&Value>) -> Result<u64, ToolArgError> {
    let secs = match v {
        None | Some(Value::Null) => return Ok(AWAIT_DEFAULT_SECS),
        Some(Value::Number(n)) => n.as_f64(),
        Some(Value::String(s)) => s.trim().parse::<f64>().ok(),
        Some(_) => None,
    };
    match secs {
        Some(s) if s.is_finite() && s >= 0.0 => Ok((s.floor() as u64).min(AWAIT_MAX_SECS)),
        _ => Err(ToolArgError::BadArgs(
            "timeoutSecs must be a number of seconds, 0 or more".into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_has_four_short_tools_with_object_schemas() {
        let l = list();
        let tools = l["tools"].as_array().unwrap();
        let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["send", "await", "who", "whoami"]);
        for t in tools {
            assert_eq!(t["inputSchema"]["type"], "object");
            assert!(!t["description"].as_str().unwrap().is_empty());
            assert!(!t["name"].as_str().unwrap().contains('_'));
        }
    }

    #[test]
    fn send_keeps_the_body_json_and_wraps_strings() {
        let c = parse_call(
            "send",
            Some(&json!({"to":"b","kind":"task","body":{"x":[1,2]},"correlationId":"c1"})),
        )
        .unwrap();
        assert_eq!(
            c,
            ToolCall::Send(SendCall {
                to: "b".into(),
                kind: "task".into(),
                body: r#"{"x":[1,2]}"#.into(),
                correlation_id: Some("c1".into())
            })
        );
        let ToolCall::Send(s) = parse_call(
            "send",
            Some(&json!({"to":"b","kind":"k","body":"hi\nthere"})),
        )
        .unwrap() else {
            panic!()
        };
        assert_eq!(s.body, r#""hi\nthere""#);
        assert_eq!(s.correlation_id, None);
    }

    #[test]
    fn send_argument_errors_are_bad_args() {
        for args in [
            json!({"kind":"k","body":1}),
            json!({"to":"","kind":"k","body":1}),
            json!({"to":5,"kind":"k","body":1}),
            json!({"to":"b","kind":"k"}),
            json!({"to":"b","kind":"k","body":1,"correlationId":7}),
        ] {
            assert!(
                matches!(
                    parse_call("send", Some(&args)),
                    Err(ToolArgError::BadArgs(_))
                ),
                "{args}"
            );
        }
        assert!(matches!(
            parse_call("send", Some(&json!([1]))),
            Err(ToolArgError::BadArgs(_))
        ));
        assert!(matches!(
            parse_call("send", None),
            Err(ToolArgError::BadArgs(_))
        ));
    }

    #[test]
    fn await_is_bounded() {
        let t = |v: Value| match parse_call("await", Some(&v)) {
            Ok(ToolCall::Await(a)) => Ok(a.timeout_secs),
            Ok(other) => panic!("{other:?}"),
            Err(e) => Err(e),
        };
        assert_eq!(t(json!({})), Ok(AWAIT_DEFAULT_SECS));
        assert_eq!(t(json!({"timeoutSecs": null})), Ok(AWAIT_DEFAULT_SECS));
        assert_eq!(t(json!({"timeoutSecs": 0})), Ok(0));
        assert_eq!(t(json!({"timeoutSecs": 7.9})), Ok(7));
        assert_eq!(t(json!({"timeoutSecs": "12"})), Ok(12));
        assert_eq!(t(json!({"timeoutSecs": 3600})), Ok(AWAIT_MAX_SECS));
        assert_eq!(t(json!({"timeoutSecs": u64::MAX})), Ok(AWAIT_MAX_SECS));
        assert!(t(json!({"timeoutSecs": -1})).is_err());
        assert!(t(json!({"timeoutSecs": "soon"})).is_err());
        assert!(t(json!({"timeoutSecs": true})).is_err());
        assert_eq!(
            parse_call("await", Some(&json!({"replyTo":"r","kind":"result"}))).unwrap(),
            ToolCall::Await(AwaitCall {
                reply_to: Some("r".into()),
                kind: Some("result".into()),
                timeout_secs: AWAIT_DEFAULT_SECS
            })
        );
        assert!(parse_call("await", Some(&json!({"replyTo":""}))).is_err());
    }

    #[test]
    fn unknown_tools_and_argless_tools() {
        assert_eq!(
            parse_call("nope", None),
            Err(ToolArgError::UnknownTool("nope".into()))
        );
        assert_eq!(
            parse_call("nope", Some(&json!(3))),
            Err(ToolArgError::UnknownTool("nope".into()))
        );
        assert_eq!(parse_call("who", None), Ok(ToolCall::Who));
        assert_eq!(
            parse_call("whoami", Some(&json!({"extra":1}))),
            Ok(ToolCall::Whoami)
        );
    }
}
