//! The pure MCP session: one JSON-RPC line in, a reply line, nothing, or a tool call to run
//! out (docs/mcp.md). No IO: the stdio loop (`serve`) feeds lines and writes replies.
//!
//! Owns: JSON-RPC validation and its error codes, the classic `initialize` handshake with
//! version negotiation, `ping`, `tools/list`, turning `tools/call` into a `ToolCall`, and the
//! shape of tool results. Rules: every request with an unknown method gets -32601 at once
//! (new SDK clients probe with `server/discover` and stall 10 s on silence); notifications
//! never get a reply; ids (0 and strings included) are echoed exactly; tool failures are
//! results with `isError`, unknown tools are -32602.
// The sans-IO line (clippy.toml): no sockets, files, processes, threads, clock or OS randomness.
#![deny(clippy::disallowed_methods, clippy::disallowed_types)]

use super::permission::{self, Decided};
use super::tools::{self, ToolArgError, ToolCall};
use serde_json::{json, Value};

/// Handshake-era protocol versions we speak; a client's is echoed if it is one of them.
pub const SUPPORTED_VERSIONS: [&str; 4] = ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"];
/// Our answer to a version we do not know.
pub const LATEST_VERSION: &str = "2025-11-25";

/// JSON-RPC error codes used here.
pub const PARSE_ERROR: i64 = -32700;
pub const INVALID_REQUEST: i64 = -32600;
pub const METHOD_NOT_FOUND: i64 = -32601;
pub const INVALID_PARAMS: i64 = -32602;

/// What the loop must do with one input line.
// One per line a model's client sends, moved once: a `delegate` call (its keys grew with
// issue 38) is worth no box on that path.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// Write this line (no trailing newline included).
    Reply(String),
    /// Write nothing (a notification, a blank line, a response from the client).
    Silent,
    /// Run this tool call against the hub, then write `Session::tool_result(&id, …)`.
    Call { id: Value, call: ToolCall },
}

/// A tool's result as the model sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolOutcome {
    pub text: String,
    pub is_error: bool,
    /// A second text item, `warning: …`, after the result (`send`'s recipient warning,
    /// SPEC §5.1), so the first item stays exactly what the tool returns.
    pub warning: Option<String>,
}

impl ToolOutcome {
    pub fn ok(text: impl Into<String>) -> ToolOutcome {
        ToolOutcome {
            text: text.into(),
            is_error: false,
            warning: None,
        }
    }

    pub fn error(text: impl Into<String>) -> ToolOutcome {
        ToolOutcome {
            text: text.into(),
            is_error: true,
            warning: None,
        }
    }

    /// The same outcome with `warning` (other parties' text, made safe here for whatever
    /// shows it: `kernel::text`).
    pub fn with_warning(mut self, warning: Option<String>) -> ToolOutcome {
        self.warning =
            warning.map(|w| agent_hub_proto::kernel::text::for_terminal(&w).into_owned());
        self
    }
}

/// One MCP session over one stdio pair, for one hub identity.
#[derive(Debug, Clone)]
pub struct Session {
    name: String,
    port: u16,
    version: Option<String>,
    /// For a task identity (`task-…`): the task-unique name the hub's server runs under in
    /// its agent (`acp::permission::hub_server_name`), which makes its own tools' names; the
    /// session then offers `permission_prompt` (design §6). None for everyone else.
    server: Option<String>,
}

impl Session {
    /// `name` and `port` are what `whoami` reports; the token is never given to the session.
    pub fn new(name: impl Into<String>, port: u16) -> Session {
        let name = name.into();
        let server = agent_hub_proto::kernel::names::is_task_name(&name)
            .then(|| agent_hub_proto::acp::permission::hub_server_name(&name));
        Session {
            name,
            port,
            version: None,
            server,
        }
    }

    /// The protocol version agreed in `initialize`, if one has happened.
    pub fn version(&self) -> Option<&str> {
        self.version.as_deref()
    }

    /// Handles one line (without its newline).
    pub fn handle(&mut self, line: &[u8]) -> Step {
        let Ok(text) = std::str::from_utf8(line) else {
            return Step::Reply(error_line(
                &Value::Null,
                PARSE_ERROR,
                "Parse error: not UTF-8",
            ));
        };
        if text.trim().is_empty() {
            return Step::Silent;
        }
        let msg: Value = match serde_json::from_str(text) {
            Ok(v) => v,
            Err(e) => {
                return Step::Reply(error_line(
                    &Value::Null,
                    PARSE_ERROR,
                    &format!("Parse error: {e}"),
                ))
            }
        };
        let Value::Object(obj) = msg else {
            return Step::Reply(error_line(
                &Value::Null,
                INVALID_REQUEST,
                "Invalid Request: a message must be one JSON object (batches are not supported)",
            ));
        };
        let method = obj.get("method");
        if method.is_none()
            && obj.contains_key("id")
            && (obj.contains_key("result") || obj.contains_key("error"))
        {
            // A response to a request of ours; we send none, so there is nothing to match.
            return Step::Silent;
        }
        let id = match obj.get("id") {
            None => None,
            Some(v @ (Value::String(_) | Value::Number(_))) => Some(v.clone()),
            Some(_) => {
                return Step::Reply(error_line(
                    &Value::Null,
                    INVALID_REQUEST,
                    "Invalid Request: id must be a string or a number",
                ))
            }
        };
        let Some(id) = id else {
            // A notification (notifications/initialized, notifications/cancelled, …): no reply,
            // not even an error.
            return Step::Silent;
        };
        if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
            return Step::Reply(error_line(
                &id,
                INVALID_REQUEST,
                "Invalid Request: jsonrpc must be \"2.0\"",
            ));
        }
        let Some(method) = method.and_then(Value::as_str) else {
            return Step::Reply(error_line(
                &id,
                INVALID_REQUEST,
                "Invalid Request: method must be a string",
            ));
        };
        let params = obj.get("params");
        match method {
            "initialize" => Step::Reply(self.initialize(&id, params)),
            "ping" => Step::Reply(result_line(&id, json!({}))),
            "tools/list" => Step::Reply(result_line(&id, self.tools_list())),
            "tools/call" => self.tools_call(id, params),
            other => Step::Reply(error_line(
                &id,
                METHOD_NOT_FOUND,
                &format!("Method not found: {other}"),
            )),
        }
    }

    fn initialize(&mut self, id: &Value, params: Option<&Value>) -> String {
        let asked = params
            .and_then(|p| p.get("protocolVersion"))
            .and_then(Value::as_str);
        let version = match asked {
            Some(v) if SUPPORTED_VERSIONS.contains(&v) => v,
            _ => LATEST_VERSION,
        };
        self.version = Some(version.to_owned());
        result_line(
            id,
            json!({
                "protocolVersion": version,
                "capabilities": {"tools": {"listChanged": false}},
                "serverInfo": {"name": "agent-hub", "version": agent_hub_proto::VERSION},
                "instructions": format!(
                    "You are agent \"{}\" on an agent-hub. Use `send` to message another agent, `await` to read your next message (it returns \"{}\" after at most {} s; call it again to keep waiting), `status` to learn whether a message you sent was delivered or read, `who` to see the agents. `delegate` hands a task to an agent the hub starts; its result comes back as a message you `await` with replyTo = the task id; `task_status`, `tasks` and `cancel` manage your tasks. A task's agent may need an answer first: a {} message (from hub, correlationId = the task id) asks you to allow or refuse what it wants to do; answer it with `task_answer`, or pass it up to whoever you work for.",
                    self.name, tools::NO_MESSAGE, tools::AWAIT_MAX_SECS, crate::client::task::TASK_REQUEST_KIND
                ),
            }),
        )
    }

    /// Every tool, and for a task identity its permission prompt tool after them.
    fn tools_list(&self) -> Value {
        let mut list = tools::list();
        if self.server.is_some() {
            if let Some(Value::Array(all)) = list.get_mut("tools") {
                all.push(permission::entry());
            }
        }
        list
    }

    fn tools_call(&self, id: Value, params: Option<&Value>) -> Step {
        let Some(name) = params.and_then(|p| p.get("name")).and_then(Value::as_str) else {
            return Step::Reply(error_line(
                &id,
                INVALID_PARAMS,
                "Invalid params: tools/call needs params.name, a string",
            ));
        };
        let args = params.and_then(|p| p.get("arguments"));
        if let (permission::TOOL, Some(server)) = (name, &self.server) {
            // Claude's JSON, never a tool error (`mcp::permission`).
            return match permission::decide(server, args) {
                Decided::Here(text) => {
                    Step::Reply(Session::tool_result(&id, &ToolOutcome::ok(text)))
                }
                Decided::Ask(call, req) => Step::Call {
                    id,
                    call: ToolCall::PermissionPrompt { call, req },
                },
            };
        }
        match tools::parse_call(name, args) {
            Ok(ToolCall::Whoami) => {
                let me = json!({
                    "name": self.name,
                    "hub": format!("127.0.0.1:{}", self.port),
                });
                Step::Reply(Session::tool_result(&id, &ToolOutcome::ok(me.to_string())))
            }
            Ok(call) => Step::Call { id, call },
            Err(e @ ToolArgError::UnknownTool(_)) => {
                Step::Reply(error_line(&id, INVALID_PARAMS, &e.to_string()))
            }
            Err(e @ ToolArgError::BadArgs(_)) => Step::Reply(Session::tool_result(
                &id,
                &ToolOutcome::error(format!("{name}: {e}")),
            )),
        }
    }

    /// The reply line carrying a tool's result.
    pub fn tool_result(id: &Value, outcome: &ToolOutcome) -> String {
        let mut content = vec![json!({"type": "text", "text": outcome.text})];
        if let Some(w) = &outcome.warning {
            content.push(json!({"type": "text", "text": format!("warning: {w}")}));
        }
        result_line(
            id,
            json!({
                "content": content,
                "isError": outcome.is_error,
            }),
        )
    }
}

fn result_line(id: &Value, result: Value) -> String {
    json!({"jsonrpc": "2.0", "id": id, "result": result}).to_string()
}

fn error_line(id: &Value, code: i64, message: &str) -> String {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}}).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mcp::tools::{AwaitCall, SendCall};

    fn session() -> Session {
        Session::new("alpha", 4100)
    }

    fn reply(s: &mut Session, line: &str) -> Value {
        match s.handle(line.as_bytes()) {
            Step::Reply(text) => {
                assert!(!text.contains('\n'), "reply spans lines: {text}");
                serde_json::from_str(&text).unwrap()
            }
            other => panic!("expected a reply to {line}, got {other:?}"),
        }
    }

    fn init(version: &str) -> String {
        format!(
            r#"{{"jsonrpc":"2.0","id":0,"method":"initialize","params":{{"protocolVersion":"{version}","capabilities":{{}},"clientInfo":{{"name":"t","version":"1"}}}}}}"#
        )
    }

    #[test]
    fn initialize_echoes_supported_versions() {
        for v in SUPPORTED_VERSIONS {
            let mut s = session();
            let r = reply(&mut s, &init(v));
            assert_eq!(r["id"], 0);
            assert_eq!(r["jsonrpc"], "2.0");
            assert_eq!(r["result"]["protocolVersion"], v);
            assert_eq!(
                r["result"]["capabilities"],
                json!({"tools":{"listChanged":false}})
            );
            assert_eq!(r["result"]["serverInfo"]["name"], "agent-hub");
            assert_eq!(
                r["result"]["serverInfo"]["version"],
                agent_hub_proto::VERSION
            );
            assert_eq!(s.version(), Some(v));
        }
    }

    #[test]
    fn initialize_answers_unknown_versions_with_our_latest() {
        for v in ["2026-07-28", "1999-01-01", ""] {
            let r = reply(&mut session(), &init(v));
            assert_eq!(r["result"]["protocolVersion"], LATEST_VERSION);
        }
        let r = reply(
            &mut session(),
            r#"{"jsonrpc":"2.0","id":1,"method":"initialize"}"#,
        );
        assert_eq!(r["result"]["protocolVersion"], LATEST_VERSION);
        let r = reply(
            &mut session(),
            r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":20250618}}"#,
        );
        assert_eq!(r["result"]["protocolVersion"], LATEST_VERSION);
    }

    #[test]
    fn notifications_get_no_reply() {
        let mut s = session();
        for line in [
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":3}}"#,
            r#"{"jsonrpc":"2.0","method":"no/such/thing"}"#,
            r#"{"jsonrpc":"2.0","method":"tools/call","params":{"name":"send"}}"#,
            r#"{"jsonrpc":"2.0","id":5,"result":{}}"#,
            r#"{"jsonrpc":"2.0","id":5,"error":{"code":1,"message":"x"}}"#,
            "",
            "   \r",
        ] {
            assert_eq!(s.handle(line.as_bytes()), Step::Silent, "{line:?}");
        }
    }

    #[test]
    fn ping_and_ids_are_echoed_exactly() {
        let mut s = session();
        for (id, want) in [
            ("0", json!(0)),
            ("7", json!(7)),
            ("\"abc-1\"", json!("abc-1")),
            ("\"\"", json!("")),
            ("-3", json!(-3)),
            ("18446744073709551615", json!(18446744073709551615u64)),
        ] {
            let r = reply(
                &mut s,
                &format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#),
            );
            assert_eq!(r["id"], want);
            assert_eq!(r["result"], json!({}));
            assert!(r.get("error").is_none());
        }
    }

    /// Regression (fuzz target `mcp_session`): serde_json's default float parsing may be one
    /// unit in the last place off, so a fractional or huge numeric id came back as another
    /// number than the one a client (which parses correctly rounded, as JavaScript does)
    /// sent, and its response never matched its request. Parsed with `float_roundtrip`, the
    /// echoed text reads back as the correctly rounded value of the id sent.
    #[test]
    fn numeric_ids_come_back_as_the_number_sent() {
        let mut s = session();
        for id in [
            "1.0222222222222222",
            "1.022222222222222222222222222222222222222222222225",
            "0.1",
            "1e300",
            "-2.5e-308",
            "18446744073709551616",
            "123456789012345678901234567890",
        ] {
            let r = reply(
                &mut s,
                &format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#),
            );
            let want: f64 = id.parse().unwrap();
            assert_eq!(
                r["id"].as_f64(),
                Some(want),
                "id {id} came back as {}",
                r["id"]
            );
        }
    }

    #[test]
    fn unknown_methods_get_method_not_found_at_once() {
        let mut s = session();
        for m in [
            "server/discover",
            "resources/list",
            "prompts/list",
            "logging/setLevel",
            "",
        ] {
            let r = reply(
                &mut s,
                &format!(
                    r#"{{"jsonrpc":"2.0","id":"d","method":"{m}","params":{{"_meta":{{}}}}}}"#
                ),
            );
            assert_eq!(r["id"], "d");
            assert_eq!(r["error"]["code"], METHOD_NOT_FOUND, "{m}");
        }
    }

    #[test]
    fn malformed_input() {
        let mut s = session();
        for line in [
            "{not json",
            "{\"jsonrpc\":\"2.0\",\"id\":1,",
            "nul",
            "\u{0}",
        ] {
            let r = reply(&mut s, line);
            assert_eq!(r["error"]["code"], PARSE_ERROR, "{line}");
            assert_eq!(r["id"], Value::Null);
        }
        let r = match s.handle(&[0xff, 0xfe, b'{']) {
            Step::Reply(t) => serde_json::from_str::<Value>(&t).unwrap(),
            o => panic!("{o:?}"),
        };
        assert_eq!(r["error"]["code"], PARSE_ERROR);
        for line in [
            "[]",
            "[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}]",
            "3",
            "\"x\"",
            "null",
        ] {
            let r = reply(&mut s, line);
            assert_eq!(r["error"]["code"], INVALID_REQUEST, "{line}");
            assert_eq!(r["id"], Value::Null);
        }
        for (line, id) in [
            (
                r#"{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}"#,
                Value::Null,
            ),
            (
                r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#,
                Value::Null,
            ),
            (
                r#"{"jsonrpc":"2.0","id":true,"method":"ping"}"#,
                Value::Null,
            ),
            (r#"{"id":4,"method":"ping"}"#, json!(4)),
            (r#"{"jsonrpc":"1.0","id":4,"method":"ping"}"#, json!(4)),
            (r#"{"jsonrpc":"2.0","id":4}"#, json!(4)),
            (r#"{"jsonrpc":"2.0","id":4,"method":7}"#, json!(4)),
        ] {
            let r = reply(&mut s, line);
            assert_eq!(r["error"]["code"], INVALID_REQUEST, "{line}");
            assert_eq!(r["id"], id, "{line}");
        }
    }

    #[test]
    fn tools_list() {
        let r = reply(
            &mut session(),
            r#"{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{"_meta":{"progressToken":1}}}"#,
        );
        let names: Vec<&str> = r["result"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            [
                "send",
                "await",
                "status",
                "who",
                "whoami",
                "delegate",
                "task_status",
                "tasks",
                "cancel",
                "task_answer",
                "task_prompt",
                "task_close"
            ]
        );
    }

    #[test]
    fn task_tools_become_calls_and_bad_arguments_stay_with_the_model() {
        let mut s = session();
        let step = s.handle(br#"{"jsonrpc":"2.0","id":11,"method":"tools/call","params":{"name":"delegate","arguments":{"agent":"codex","cwd":"/w","prompt":"go","progressSecs":30}}}"#);
        assert_eq!(
            step,
            Step::Call {
                id: json!(11),
                call: ToolCall::Delegate(agent_hub_proto::wire::DelegateRequest {
                    agent: "codex".into(),
                    cwd: "/w".into(),
                    prompt: "go".into(),
                    timeout_secs: None,
                    progress_secs: Some(30),
                    peer: None,
                    permission: None,
                    allow: None,
                    ..Default::default()
                })
            }
        );
        let step = s.handle(br#"{"jsonrpc":"2.0","id":14,"method":"tools/call","params":{"name":"delegate","arguments":{"agent":"claude","cwd":"/w","prompt":"go","permission":"ask","allow":[{"kinds":["read","search"]},{"kinds":["edit"],"under":"src"}]}}}"#);
        let Step::Call {
            call: ToolCall::Delegate(d),
            ..
        } = step
        else {
            panic!("{step:?}")
        };
        assert_eq!(d.permission, Some(agent_hub_proto::wire::Permission::Ask));
        assert_eq!(d.allow.as_ref().map(Vec::len), Some(2));
        for (line, call) in [
            (
                r#"{"jsonrpc":"2.0","id":"s","method":"tools/call","params":{"name":"task_status","arguments":{"task":"task-9"}}}"#,
                ToolCall::TaskStatus("task-9".into()),
            ),
            (
                r#"{"jsonrpc":"2.0","id":"s","method":"tools/call","params":{"name":"tasks"}}"#,
                ToolCall::Tasks,
            ),
            (
                r#"{"jsonrpc":"2.0","id":"s","method":"tools/call","params":{"name":"cancel","arguments":{"task":"task-9"}}}"#,
                ToolCall::Cancel("task-9".into()),
            ),
            (
                r#"{"jsonrpc":"2.0","id":"s","method":"tools/call","params":{"name":"task_answer","arguments":{"task":"task-9","request":"req-1","option":"allow"}}}"#,
                ToolCall::TaskAnswer(agent_hub_proto::wire::TaskAnswerRequest {
                    task: "task-9".into(),
                    request: Some("req-1".into()),
                    option: "allow".into(),
                    message: None,
                }),
            ),
        ] {
            assert_eq!(
                s.handle(line.as_bytes()),
                Step::Call {
                    id: json!("s"),
                    call
                },
                "{line}"
            );
        }
        let r = reply(
            &mut s,
            r#"{"jsonrpc":"2.0","id":12,"method":"tools/call","params":{"name":"delegate","arguments":{"agent":"codex","cwd":"repo","prompt":"go"}}}"#,
        );
        assert_eq!(r["result"]["isError"], true);
        let text = r["result"]["content"][0]["text"].as_str().unwrap();
        assert!(
            text.starts_with("delegate: invalid arguments: cwd must be an absolute path"),
            "{text}"
        );
        let r = reply(
            &mut s,
            r#"{"jsonrpc":"2.0","id":13,"method":"tools/call","params":{"name":"cancel","arguments":{}}}"#,
        );
        assert_eq!(r["result"]["isError"], true);
        assert!(r["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("task is required"));
        // Issue 37's arguments: refused with the model's words before any hub sees them.
        for (args, why) in [
            (
                r#"{"task":"task-9"}"#,
                "task_answer: invalid arguments: option is required",
            ),
            (
                r#"{"task":"task-9","option":"allow","requestId":"req-1"}"#,
                "task_answer: invalid arguments: unknown argument \"requestId\" (task_answer takes task, request, option, message)",
            ),
            (
                r#"{"task":"task-9","option":"allow\u001b]0;x\u0007"}"#,
                "task_answer: invalid arguments: option must not contain control or invisible formatting characters",
            ),
        ] {
            let line = format!(
                r#"{{"jsonrpc":"2.0","id":15,"method":"tools/call","params":{{"name":"task_answer","arguments":{args}}}}}"#
            );
            let r = reply(&mut s, &line);
            assert_eq!(r["result"]["isError"], true, "{args}");
            assert_eq!(r["result"]["content"][0]["text"], why, "{args}");
        }
        for (args, why) in [
            (
                r#""permission":"yolo""#,
                "delegate: invalid arguments: permission must be one of ask, reject, allow",
            ),
            (
                r#""allow":[{"kinds":["edit"],"under":"../.."}]"#,
                "delegate: invalid arguments: allow rule 1: under must not leave the task's cwd",
            ),
            (
                r#""allow":"read""#,
                "delegate: invalid arguments: allow: must be a list of rules {kinds, under}",
            ),
        ] {
            let line = format!(
                r#"{{"jsonrpc":"2.0","id":16,"method":"tools/call","params":{{"name":"delegate","arguments":{{"agent":"a","cwd":"/w","prompt":"p",{args}}}}}}}"#
            );
            let r = reply(&mut s, &line);
            assert_eq!(r["result"]["content"][0]["text"], why, "{args}");
        }
    }

    #[test]
    fn tools_call_becomes_a_call() {
        let mut s = session();
        let step = s.handle(br#"{"jsonrpc":"2.0","id":0,"method":"tools/call","params":{"name":"send","arguments":{"to":"beta","kind":"task","body":{"a":1}},"_meta":{"claudecode/toolUseId":"x"}}}"#);
        assert_eq!(
            step,
            Step::Call {
                id: json!(0),
                call: ToolCall::Send(SendCall {
                    to: "beta".into(),
                    kind: "task".into(),
                    body: r#"{"a":1}"#.into(),
                    correlation_id: None
                })
            }
        );
        let step = s.handle(br#"{"jsonrpc":"2.0","id":"w","method":"tools/call","params":{"name":"await","arguments":{"timeoutSecs":999}}}"#);
        assert_eq!(
            step,
            Step::Call {
                id: json!("w"),
                call: ToolCall::Await(AwaitCall {
                    reply_to: None,
                    kind: None,
                    timeout_secs: tools::AWAIT_MAX_SECS
                })
            }
        );
        let step =
            s.handle(br#"{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"who"}}"#);
        assert_eq!(
            step,
            Step::Call {
                id: json!(9),
                call: ToolCall::Who
            }
        );
    }

    #[test]
    fn whoami_is_answered_without_the_hub_and_without_a_token() {
        let r = reply(
            &mut session(),
            r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"whoami","arguments":{}}}"#,
        );
        assert_eq!(r["result"]["isError"], false);
        let text = r["result"]["content"][0]["text"].as_str().unwrap();
        let me: Value = serde_json::from_str(text).unwrap();
        assert_eq!(me, json!({"name":"alpha","hub":"127.0.0.1:4100"}));
    }

    #[test]
    fn bad_arguments_are_tool_errors_and_unknown_tools_are_invalid_params() {
        let mut s = session();
        let r = reply(
            &mut s,
            r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"send","arguments":{"to":"b"}}}"#,
        );
        assert_eq!(r["result"]["isError"], true);
        assert!(r["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("kind is required"));
        let r = reply(
            &mut s,
            r#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"launch","arguments":{}}}"#,
        );
        assert_eq!(r["error"]["code"], INVALID_PARAMS);
        assert!(r["error"]["message"].as_str().unwrap().contains("launch"));
        for line in [
            r#"{"jsonrpc":"2.0","id":6,"method":"tools/call"}"#,
            r#"{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{}}"#,
            r#"{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":3}}"#,
            r#"{"jsonrpc":"2.0","id":6,"method":"tools/call","params":[1]}"#,
        ] {
            let r = reply(&mut s, line);
            assert_eq!(r["error"]["code"], INVALID_PARAMS, "{line}");
            assert_eq!(r["id"], 6);
        }
    }

    /// Design §6: only a task identity is offered `permission_prompt`, after the other tools;
    /// a roster agent's list is unchanged and its call of the tool is an unknown tool. For a
    /// task, its own server's tools are allowed here, the rest becomes a call for the hub,
    /// and bad arguments are denied here, always as Claude's JSON with isError false.
    #[test]
    fn only_a_task_identity_has_the_permission_prompt_tool() {
        const TASK: &str = "task-0123456789abcdef0123456789abcdef";
        let list = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;
        let names = |r: &Value| -> Vec<String> {
            r["result"]["tools"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t["name"].as_str().unwrap().to_owned())
                .collect()
        };
        let roster = names(&reply(&mut session(), list));
        assert_eq!(roster, tools::TOOL_NAMES);
        let mut task = Session::new(TASK, 4100);
        let mut want: Vec<&str> = tools::TOOL_NAMES.to_vec();
        want.push("permission_prompt");
        assert_eq!(names(&reply(&mut task, list)), want);
        let call = |name: &str, tool: &str| {
            format!(
                r#"{{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{{"name":"{name}","arguments":{{"tool_name":"{tool}","input":{{"command":"make"}},"tool_use_id":"toolu_1"}}}}}}"#
            )
        };
        let r = reply(&mut session(), &call("permission_prompt", "Bash"));
        assert_eq!(r["error"]["code"], INVALID_PARAMS, "{r}");
        let server = agent_hub_proto::acp::permission::hub_server_name(TASK);
        let own = format!("mcp__{server}__send");
        let r = reply(&mut task, &call("permission_prompt", &own));
        assert_eq!(r["result"]["isError"], false);
        let text: Value =
            serde_json::from_str(r["result"]["content"][0]["text"].as_str().unwrap()).unwrap();
        assert_eq!(
            text,
            json!({"behavior":"allow","updatedInput":{"command":"make"}})
        );
        match task.handle(call("permission_prompt", "Bash").as_bytes()) {
            Step::Call {
                id,
                call: ToolCall::PermissionPrompt { call, req },
            } => {
                assert_eq!(id, json!(9));
                assert_eq!(call.tool_name, "Bash");
                assert_eq!(req.tool_use_id, "toolu_1");
            }
            other => panic!("{other:?}"),
        }
        let r = reply(
            &mut task,
            r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"permission_prompt","arguments":{"tool_name":"Bash"}}}"#,
        );
        assert_eq!(r["result"]["isError"], false);
        let text: Value =
            serde_json::from_str(r["result"]["content"][0]["text"].as_str().unwrap()).unwrap();
        assert_eq!(text["behavior"], "deny");
    }

    #[test]
    fn tool_result_shape() {
        let line = Session::tool_result(&json!(0), &ToolOutcome::error("hub down\nreally"));
        assert!(!line.contains('\n'));
        let r: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(
            r,
            json!({"jsonrpc":"2.0","id":0,"result":{"content":[{"type":"text","text":"hub down\nreally"}],"isError":true}})
        );
    }

    /// `send`'s recipient warning (SPEC §5.1) is a second text item, made safe for a
    /// terminal; the first item stays the id alone.
    #[test]
    fn a_warning_is_a_second_text_item_after_the_result() {
        let outcome =
            ToolOutcome::ok("e-1").with_warning(Some("no agent named \"x\u{1b}]0;t\u{7}\"".into()));
        let r: Value = serde_json::from_str(&Session::tool_result(&json!(3), &outcome)).unwrap();
        assert_eq!(
            r["result"],
            json!({"content":[{"type":"text","text":"e-1"},{"type":"text","text":"warning: no agent named \"x?]0;t?\""}],"isError":false})
        );
        let plain = ToolOutcome::ok("e-1").with_warning(None);
        let r: Value = serde_json::from_str(&Session::tool_result(&json!(3), &plain)).unwrap();
        assert_eq!(r["result"]["content"].as_array().map(Vec::len), Some(1));
    }

    #[test]
    fn no_input_panics() {
        let mut s = session();
        let samples: [&[u8]; 8] = [
            b"{}",
            b"{\"id\":1}",
            b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":null}",
            b"{\"jsonrpc\":\"2.0\",\"id\":1.5,\"method\":\"ping\"}",
            b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":7}",
            b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"await\",\"arguments\":{\"timeoutSecs\":1e308}}}",
            b"\xef\xbb\xbf{}",
            b"{\"a\":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}",
        ];
        for line in samples {
            let _ = s.handle(line);
        }
        let deep = "[".repeat(100_000);
        assert!(matches!(s.handle(deep.as_bytes()), Step::Reply(_)));
    }
}
