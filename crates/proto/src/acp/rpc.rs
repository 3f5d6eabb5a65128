//! JSON-RPC 2.0 as ACP uses it (docs/acp.md "What we send", "How the agent's messages are
//! answered"): classifying one line from the agent, and building the lines we send. Pure and
//! stateless.
//!
//! Parsing is loose where agents are (a missing `jsonrpc` member is accepted, unknown members
//! are ignored) and strict where a mistake would mis-route a message: an id is a string or a
//! number and is compared by exact JSON value (`0`, `"0"` and `0.0` are three ids); a response
//! carries exactly one of `result` and `error`. Anything else is `Malformed`, which the
//! session counts toward its garbage limit.

use serde_json::{json, Map, Value};

/// JSON-RPC and ACP error codes (§1.8).
pub const INVALID_REQUEST: i64 = -32600;
pub const METHOD_NOT_FOUND: i64 = -32601;
pub const INVALID_PARAMS: i64 = -32602;
pub const AUTH_REQUIRED: i64 = -32000;
pub const REQUEST_CANCELLED: i64 = -32800;

/// One line from the agent, classified.
#[derive(Debug, Clone, PartialEq)]
pub enum Incoming {
    /// A request to us: it must be answered (ACP §1.1: the agent's own id space).
    Request {
        id: Value,
        method: String,
        params: Value,
    },
    Notification {
        method: String,
        params: Value,
    },
    Response {
        id: Value,
        reply: Reply,
    },
    /// A request whose id is neither a string nor a number: answered -32600 with id null.
    BadRequestId {
        method: String,
    },
    Malformed(Malformed),
}

#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    Result(Value),
    Error(RpcError),
}

/// An error object as the agent sent it; `message` is still raw agent text here.
#[derive(Debug, Clone, PartialEq)]
pub struct RpcError {
    pub code: i64,
    pub message: String,
}

/// Why a line is not a JSON-RPC message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Malformed {
    NotUtf8,
    NotJson,
    NotAnObject,
    /// `method` present but not a string.
    BadMethod,
    /// No `method`, and not a well-formed response (id plus exactly one of result/error).
    NotAMessage,
}

impl Malformed {
    pub fn describe(self) -> &'static str {
        match self {
            Malformed::NotUtf8 => "not UTF-8",
            Malformed::NotJson => "not JSON",
            Malformed::NotAnObject => "not a JSON object",
            Malformed::BadMethod => "method is not a string",
            Malformed::NotAMessage => "neither a request, a notification nor a response",
        }
    }
}

/// Classifies one line (without its newline; a trailing `\r` is allowed). `None` for a blank
/// line, which is skipped rather than counted.
pub fn classify(line: &[u8]) -> Option<Incoming> {
    let Ok(text) = std::str::from_utf8(line) else {
        return Some(Incoming::Malformed(Malformed::NotUtf8));
    };
    let text = text.trim();
    if text.is_empty() {
        return None;
    }
    let Ok(value) = serde_json::from_str::<Value>(text) else {
        return Some(Incoming::Malformed(Malformed::NotJson));
    };
    let Value::Object(mut obj) = value else {
        return Some(Incoming::Malformed(Malformed::NotAnObject));
    };
    Some(classify_object(&mut obj))
}

fn classify_object(obj: &mut Map<String, Value>) -> Incoming {
    let id = obj.remove("id");
    match obj.remove("method") {
        Some(Value::String(method)) => {
            let params = obj.remove("params").unwrap_or(Value::Null);
            match id {
                None => Incoming::Notification { method, params },
                Some(id @ (Value::String(_) | Value::Number(_))) => {
                    Incoming::Request { id, method, params }
                }
                Some(_) => Incoming::BadRequestId { method },
            }
        }
        Some(_) => Incoming::Malformed(Malformed::BadMethod),
        None => {
            let Some(id @ (Value::String(_) | Value::Number(_))) = id else {
                return Incoming::Malformed(Malformed::NotAMessage);
            };
            match (obj.remove("result"), obj.remove("error")) {
                (Some(result), None) => Incoming::Response {
                    id,
                    reply: Reply::Result(result),
                },
                (None, Some(err)) => Incoming::Response {
                    id,
                    reply: Reply::Error(parse_error(&err)),
                },
                _ => Incoming::Malformed(Malformed::NotAMessage),
            }
        }
    }
}

/// An error object read loosely: a missing or non-integer code reads as -32603 (internal
/// error), a missing message as empty. The message is cut to a bounded prefix here already so
/// no later step holds a huge agent string.
fn parse_error(err: &Value) -> RpcError {
    const KEEP_BYTES: usize = 4096;
    let code = err.get("code").and_then(Value::as_i64).unwrap_or(-32603);
    let message = err.get("message").and_then(Value::as_str).unwrap_or("");
    let cut = super::sanitize::floor_char_boundary(message, KEEP_BYTES);
    RpcError {
        code,
        message: message[..cut].to_owned(),
    }
}

/// A request line of ours.
pub fn request_line(id: u64, method: &str, params: Value) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string()
}

/// A notification line of ours.
pub fn notification_line(method: &str, params: Value) -> String {
    json!({"jsonrpc": "2.0", "method": method, "params": params}).to_string()
}

/// Our answer to one of the agent's requests; `id` is echoed exactly.
pub fn result_line(id: &Value, result: Value) -> String {
    json!({"jsonrpc": "2.0", "id": id, "result": result}).to_string()
}

pub fn error_line(id: &Value, code: i64, message: &str) -> String {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}}).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(s: &str) -> Incoming {
        classify(s.as_bytes()).expect("not blank")
    }

    #[test]
    fn requests_notifications_responses() {
        assert_eq!(
            c(r#"{"jsonrpc":"2.0","id":0,"method":"session/request_permission","params":{"a":1}}"#),
            Incoming::Request {
                id: json!(0),
                method: "session/request_permission".into(),
                params: json!({"a":1})
            }
        );
        assert_eq!(
            c(r#"{"method":"session/update","params":{}}"#),
            Incoming::Notification {
                method: "session/update".into(),
                params: json!({})
            }
        );
        // codex-acp puts the id last; no jsonrpc member is tolerated (§1.12, A.2).
        assert_eq!(
            c(r#"{"result":{"stopReason":"end_turn"},"id":3}"#),
            Incoming::Response {
                id: json!(3),
                reply: Reply::Result(json!({"stopReason":"end_turn"}))
            }
        );
        assert_eq!(
            c(
                r#"{"jsonrpc":"2.0","id":"s-1","error":{"code":-32000,"message":"Authentication required"}}"#
            ),
            Incoming::Response {
                id: json!("s-1"),
                reply: Reply::Error(RpcError {
                    code: -32000,
                    message: "Authentication required".into()
                })
            }
        );
        assert_eq!(
            c(r#"{"id":1,"result":null}"#),
            Incoming::Response {
                id: json!(1),
                reply: Reply::Result(Value::Null)
            }
        );
    }

    #[test]
    fn ids_keep_their_json_type() {
        for (line, id) in [
            (r#"{"id":0,"result":{}}"#, json!(0)),
            (r#"{"id":"0","result":{}}"#, json!("0")),
            (r#"{"id":0.0,"result":{}}"#, json!(0.0)),
        ] {
            match c(line) {
                Incoming::Response { id: got, .. } => assert_eq!(got, id, "{line}"),
                other => panic!("{line}: {other:?}"),
            }
        }
        assert_ne!(json!(0), json!("0"));
        assert_ne!(json!(0), json!(0.0));
    }

    #[test]
    fn malformed_lines() {
        for (line, want) in [
            ("not json", Malformed::NotJson),
            ("{\"id\":1,", Malformed::NotJson),
            ("[1,2]", Malformed::NotAnObject),
            ("42", Malformed::NotAnObject),
            (r#"{"method":5}"#, Malformed::BadMethod),
            (r#"{}"#, Malformed::NotAMessage),
            (r#"{"id":1}"#, Malformed::NotAMessage),
            (r#"{"id":1,"result":1,"error":{}}"#, Malformed::NotAMessage),
            (r#"{"id":null,"result":1}"#, Malformed::NotAMessage),
            (r#"{"id":[1],"result":1}"#, Malformed::NotAMessage),
        ] {
            assert_eq!(c(line), Incoming::Malformed(want), "{line}");
        }
        assert_eq!(
            classify(&[0xff, b'{']),
            Some(Incoming::Malformed(Malformed::NotUtf8))
        );
        assert_eq!(
            c(r#"{"id":null,"method":"x"}"#),
            Incoming::BadRequestId { method: "x".into() }
        );
        assert_eq!(classify(b""), None);
        assert_eq!(classify(b"  \r"), None);
        let deep = "[".repeat(100_000);
        assert_eq!(c(&deep), Incoming::Malformed(Malformed::NotJson));
    }

    #[test]
    fn error_objects_are_read_loosely_and_bounded() {
        let huge = "m".repeat(1 << 20);
        let line = json!({"id":1,"error":{"code":"x","message":huge}}).to_string();
        match c(&line) {
            Incoming::Response {
                reply: Reply::Error(e),
                ..
            } => {
                assert_eq!(e.code, -32603);
                assert_eq!(e.message.len(), 4096);
            }
            other => panic!("{other:?}"),
        }
        match c(r#"{"id":1,"error":7}"#) {
            Incoming::Response {
                reply: Reply::Error(e),
                ..
            } => assert_eq!((e.code, e.message.as_str()), (-32603, "")),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn lines_we_build_are_one_line_and_echo_ids() {
        let l = result_line(&json!(0), json!({"x":"a\nb"}));
        assert!(!l.contains('\n'));
        let v: Value = serde_json::from_str(&l).unwrap();
        assert_eq!(v["id"], 0);
        assert_eq!(v["jsonrpc"], "2.0");
        let v: Value = serde_json::from_str(&error_line(&json!("q"), -32601, "m")).unwrap();
        assert_eq!(
            v,
            json!({"jsonrpc":"2.0","id":"q","error":{"code":-32601,"message":"m"}})
        );
        let v: Value = serde_json::from_str(&request_line(0, "initialize", json!({}))).unwrap();
        assert_eq!(v["id"], 0);
        let v: Value = serde_json::from_str(&notification_line(
            "session/cancel",
            json!({"sessionId":"s"}),
        ))
        .unwrap();
        assert!(v.get("id").is_none());
    }
}
