//! Fuzz target `mcp_session`: the MCP server session (`mcp::Session`, docs/mcp.md)
//! fed arbitrary stdio bytes, split into lines as `mcp::serve` splits them. Every reply is one
//! JSON-RPC 2.0 line that echoes the request's id exactly; silence only for blank lines,
//! notifications and responses; a tool call's arguments always make a line the hub parses
//! (`wire::ClientLine`), so the model can never make the client send what the hub refuses as
//! malformed. Every input runs twice: as a roster agent, and as a task identity, which also has
//! `permission_prompt` (issue 37 design §6), whose answer given without the hub is always
//! Claude's JSON with `isError` false, and an allow only for one of the hub's own tools, with
//! the input sent back unchanged.

use agent_hub_cli::mcp::session::{
    Session, Step, INVALID_PARAMS, INVALID_REQUEST, METHOD_NOT_FOUND, PARSE_ERROR,
    SUPPORTED_VERSIONS,
};
use agent_hub_cli::mcp::tools::AWAIT_MAX_SECS;
use agent_hub_cli::mcp::{ToolCall, ToolOutcome};
use agent_hub_proto::wire::{AwaitRequest, ClientLine, Envelope, StatusRequest, TaskRequest};
use serde_json::{Map, Value};
use std::path::Path;

/// The task identity the second run serves (`hub_server_name` of it names its own tools).
const TASK: &str = "task-0123456789abcdef0123456789abcdef";

pub fn run(data: &[u8]) {
    for name in ["alpha", TASK] {
        let mut session = Session::new(name, 4100);
        // `serve` reads up to each `\n`; input that ends with one has no empty last line.
        let body = data.strip_suffix(b"\n").unwrap_or(data);
        for line in body.split(|&b| b == b'\n') {
            let step = session.handle(line);
            check(line, &step);
            if name == TASK {
                check_prompt(line, &step);
            }
            if let Some(v) = session.version() {
                assert!(SUPPORTED_VERSIONS.contains(&v), "agreed version {v:?}");
            }
        }
    }
}

/// A task identity's `permission_prompt` answered without the hub: Claude's JSON, `isError`
/// false, a deny, or an allow of one of the hub's own tools carrying the input as sent.
fn check_prompt(line: &[u8], step: &Step) {
    let Step::Reply(text) = step else { return };
    let Some(params) = std::str::from_utf8(line)
        .ok()
        .and_then(|t| serde_json::from_str::<Value>(t).ok())
        .filter(|v| v["method"] == "tools/call" && v["params"]["name"] == "permission_prompt")
        .map(|v| v["params"].clone())
    else {
        return;
    };
    let reply: Value = serde_json::from_str(text).expect("checked by `check`");
    if reply.get("error").is_some() {
        return; // not a request the session could answer (bad id, jsonrpc, …)
    }
    assert_eq!(reply["result"]["isError"], false, "{text}");
    let answer: Value = reply["result"]["content"][0]["text"]
        .as_str()
        .and_then(|t| serde_json::from_str(t).ok())
        .unwrap_or_else(|| panic!("not Claude's JSON: {text}"));
    match answer["behavior"].as_str() {
        Some("deny") => assert!(answer["message"].is_string(), "{text}"),
        Some("allow") => {
            let server = agent_hub_proto::acp::permission::hub_server_name(TASK);
            let tool = params["arguments"]["tool_name"]
                .as_str()
                .unwrap_or_default();
            assert!(
                agent_hub_cli::mcp::permission::own_tool(&server, tool),
                "allowed without the hub: {tool:?}"
            );
            assert_eq!(
                answer["updatedInput"], params["arguments"]["input"],
                "{text}"
            );
        }
        _ => panic!("neither allow nor deny: {text}"),
    }
}

fn check(line: &[u8], step: &Step) {
    let request: Option<Map<String, Value>> = std::str::from_utf8(line)
        .ok()
        .and_then(|t| serde_json::from_str::<Value>(t).ok())
        .and_then(|v| match v {
            Value::Object(m) => Some(m),
            _ => None,
        });
    // Blank as the session reads it (`str::trim`: Unicode white space).
    let blank = std::str::from_utf8(line).is_ok_and(|t| t.trim().is_empty());
    match step {
        Step::Silent => {
            let quiet = blank
                || request.as_ref().is_some_and(|m| {
                    !m.contains_key("id")
                        || (!m.contains_key("method")
                            && (m.contains_key("result") || m.contains_key("error")))
                });
            assert!(
                quiet,
                "no reply to a request: {:?}",
                String::from_utf8_lossy(line)
            );
        }
        Step::Reply(text) => {
            let reply = one_jsonrpc_line(text);
            let want_id = match request.as_ref().and_then(|m| m.get("id")) {
                Some(v @ (Value::String(_) | Value::Number(_))) => v.clone(),
                _ => Value::Null,
            };
            assert_eq!(reply["id"], want_id, "the id is not echoed exactly: {text}");
            if let Some(e) = reply.get("error") {
                let code = e["code"].as_i64().expect("an error code");
                assert!(
                    [
                        PARSE_ERROR,
                        INVALID_REQUEST,
                        METHOD_NOT_FOUND,
                        INVALID_PARAMS
                    ]
                    .contains(&code),
                    "error code {code}"
                );
                assert!(
                    e["message"].is_string(),
                    "an error without a message: {text}"
                );
            }
        }
        Step::Call { id, call } => {
            let m = request.expect("a tool call comes from a JSON object");
            assert_eq!(m.get("id"), Some(id), "the call's id is not the request's");
            assert_eq!(m.get("method").and_then(Value::as_str), Some("tools/call"));
            check_call(call);
            // Whatever the hub answered (text from anywhere), the result is one JSON-RPC line.
            let outcome = ToolOutcome::error(String::from_utf8_lossy(line).into_owned());
            let reply = one_jsonrpc_line(&Session::tool_result(id, &outcome));
            assert_eq!(&reply["id"], id);
            assert_eq!(reply["result"]["isError"], true);
        }
    }
}

fn one_jsonrpc_line(text: &str) -> Value {
    assert!(!text.contains('\n'), "a reply spans lines: {text:?}");
    let v: Value =
        serde_json::from_str(text).unwrap_or_else(|e| panic!("a reply is not JSON ({e}): {text}"));
    assert_eq!(v["jsonrpc"], "2.0", "{text}");
    assert!(
        v.get("result").is_some() != v.get("error").is_some(),
        "a reply needs exactly one of result and error: {text}"
    );
    assert!(v.get("id").is_some(), "a reply without an id: {text}");
    v
}

/// The call as `mcp::serve` turns it into a client line: the hub must parse that line back to
/// the same request.
fn check_call(call: &ToolCall) {
    match call {
        ToolCall::Send(s) => {
            assert!(!s.to.is_empty() && !s.kind.is_empty(), "{s:?}");
            assert_ne!(s.correlation_id.as_deref(), Some(""));
            let env = Envelope::new(
                "00000000-0000-4000-8000-000000000000".into(),
                "alpha".into(),
                s.to.clone(),
                "2026-07-21T06:40:51Z".into(),
                s.kind.clone(),
                s.correlation_id.clone(),
                s.body.clone(),
            )
            .unwrap_or_else(|e| panic!("a send's body is not JSON ({e}): {:?}", s.body));
            let line = ClientLine::Send(env).encode();
            match ClientLine::decode(line.trim_end_matches('\n').as_bytes()) {
                Ok(ClientLine::Send(back)) => {
                    assert_eq!(back.to, s.to);
                    assert_eq!(back.kind, s.kind);
                    assert_eq!(back.correlation_id, s.correlation_id);
                    assert_eq!(back.body.get(), s.body);
                }
                other => panic!("the hub refuses the line a send makes: {line:?}: {other:?}"),
            }
        }
        ToolCall::Await(a) => {
            assert!(a.timeout_secs <= AWAIT_MAX_SECS, "{a:?}");
            let req = AwaitRequest {
                reply_to: a.reply_to.clone(),
                kind: a.kind.clone(),
                timeout_secs: Some(a.timeout_secs),
                ack: None,
                reader: Some("mcp-await".into()),
            };
            let line = ClientLine::Await(req).encode();
            match ClientLine::decode(line.trim_end_matches('\n').as_bytes()) {
                Ok(ClientLine::Await(back)) => {
                    assert_eq!(back.reply_to, a.reply_to);
                    assert_eq!(back.kind, a.kind);
                    assert_eq!(back.timeout_secs, Some(a.timeout_secs));
                }
                other => panic!("the hub refuses the line an await makes: {line:?}: {other:?}"),
            }
        }
        ToolCall::Status(st) => {
            assert!(
                !st.id.is_empty() && st.timeout_secs <= AWAIT_MAX_SECS,
                "{st:?}"
            );
            let req = StatusRequest {
                id: st.id.clone(),
                wait_for: st.wait_for.map(|w| w.as_str().to_owned()),
                timeout_ms: st.wait_for.map(|_| st.timeout_secs * 1000),
            };
            let line = ClientLine::Status(req.clone()).encode();
            match ClientLine::decode(line.trim_end_matches('\n').as_bytes()) {
                Ok(ClientLine::Status(back)) => assert_eq!(back, req),
                other => panic!("the hub refuses the line a status makes: {line:?}: {other:?}"),
            }
        }
        ToolCall::Who | ToolCall::Whoami | ToolCall::Tasks => {}
        // The task verbs' lines (`wire::ClientLine`'s, as every line the client writes) must
        // be one JSON line that reads back as the same request.
        ToolCall::Delegate(d) => {
            assert!(!d.agent.is_empty() && d.cwd.starts_with('/'), "{d:?}");
            assert!(!d.prompt.trim().is_empty(), "{d:?}");
            assert!(d.timeout_secs != Some(0), "{d:?}");
            assert_ne!(d.peer.as_deref(), Some(""));
            let v = one_client_line(&ClientLine::Delegate(d.clone()).encode())["delegate"].clone();
            assert_eq!(v["agent"], d.agent.as_str());
            assert_eq!(v["cwd"], d.cwd.as_str());
            assert_eq!(v["prompt"], d.prompt.as_str());
            assert_eq!(v["timeoutSecs"].as_u64(), d.timeout_secs);
            assert_eq!(v["progressSecs"].as_u64(), d.progress_secs);
            assert_eq!(v["peer"].as_str(), d.peer.as_deref());
            // Issue 37's keys pass the wire's own bounds: the hub decodes the same request.
            match ClientLine::decode(
                ClientLine::Delegate(d.clone())
                    .encode()
                    .trim_end_matches('\n')
                    .as_bytes(),
            ) {
                Ok(ClientLine::Delegate(back)) => assert_eq!(back, *d),
                other => panic!("the hub refuses the line a delegate makes: {other:?}"),
            }
        }
        ToolCall::TaskAnswer(a) => {
            let line = ClientLine::TaskAnswer(a.clone()).encode();
            one_client_line(&line);
            match ClientLine::decode(line.trim_end_matches('\n').as_bytes()) {
                Ok(ClientLine::TaskAnswer(back)) => assert_eq!(back, *a),
                other => panic!("the hub refuses the line a task_answer makes: {other:?}"),
            }
        }
        // The prompt's line reads back as the same request, its input the tool's exactly.
        ToolCall::PermissionPrompt { call, req } => {
            assert_eq!(req.tool_name, call.tool_name);
            assert_eq!(req.tool_use_id, call.tool_use_id);
            assert!(call.input.is_object(), "{call:?}");
            let line = ClientLine::TaskPermission(req.clone()).encode();
            one_client_line(&line);
            match ClientLine::decode(line.trim_end_matches('\n').as_bytes()) {
                Ok(ClientLine::TaskPermission(back)) => {
                    assert_eq!(back, *req);
                    let input: Value = serde_json::from_str(back.input()).expect("JSON");
                    assert_eq!(input, call.input);
                }
                other => panic!("the hub refuses the line a permission prompt makes: {other:?}"),
            }
        }
        ToolCall::TaskPrompt(p) => {
            let line = ClientLine::TaskPrompt(p.clone()).encode();
            one_client_line(&line);
            match ClientLine::decode(line.trim_end_matches('\n').as_bytes()) {
                Ok(ClientLine::TaskPrompt(back)) => assert_eq!(back, *p),
                Err(_) if p.task.is_empty() => {}
                other => panic!("the hub refuses the line a task_prompt makes: {other:?}"),
            }
        }
        ToolCall::TaskStatus(t) | ToolCall::Cancel(t) | ToolCall::TaskClose(t) => {
            assert!(!t.is_empty());
            let req = TaskRequest { task: t.clone() };
            let (line, tag) = match call {
                ToolCall::Cancel(_) => (ClientLine::Cancel(req).encode(), "cancel"),
                ToolCall::TaskClose(_) => (ClientLine::TaskClose(req).encode(), "task_close"),
                _ => (ClientLine::TaskStatus(req).encode(), "task_status"),
            };
            assert_eq!(one_client_line(&line)[tag]["task"], t.as_str());
        }
    }
}

fn one_client_line(line: &str) -> Value {
    assert!(
        line.ends_with('\n') && line.matches('\n').count() == 1,
        "a task line spans lines: {line:?}"
    );
    serde_json::from_str(line.trim_end_matches('\n'))
        .unwrap_or_else(|e| panic!("a task line is not JSON ({e}): {line:?}"))
}

/// A whole session as the MCP clients in tests/integration/mcp.rs and the session's unit tests drive it,
/// and its refusals, one input per shape.
pub fn seeds(_root: &Path) -> Vec<(String, Vec<u8>)> {
    let init = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;
    let session = [
        init,
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"progressToken":1}}}"#,
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"send","arguments":{"to":"beta","kind":"task","body":{"a":1},"correlationId":"c1"}}}"#,
        r#"{"jsonrpc":"2.0","id":"w","method":"tools/call","params":{"name":"await","arguments":{"timeoutSecs":15,"replyTo":"c1","kind":"reply"}}}"#,
        r#"{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"who"}}"#,
        r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"whoami","arguments":{}}}"#,
        r#"{"jsonrpc":"2.0","id":4,"method":"ping"}"#,
        r#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"delegate","arguments":{"agent":"codex","cwd":"/w/repo","prompt":"fix it","timeoutSecs":600,"progressSecs":30,"peer":"lab"}}}"#,
        r#"{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"task_status","arguments":{"task":"task-0123456789abcdef0123456789abcdef"}}}"#,
        r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"tasks"}}"#,
        r#"{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"cancel","arguments":{"task":"task-0123456789abcdef0123456789abcdef"}}}"#,
        r#"{"jsonrpc":"2.0","id":12,"method":"tools/call","params":{"name":"delegate","arguments":{"agent":"claude","cwd":"/w/repo","prompt":"fix it","permission":"ask","allow":[{"kinds":["read","search"]},{"kinds":["edit"],"under":"src"}]}}}"#,
        r#"{"jsonrpc":"2.0","id":13,"method":"tools/call","params":{"name":"task_answer","arguments":{"task":"task-0123456789abcdef0123456789abcdef","request":"req-0123456789abcdef","option":"allow","message":"go on"}}}"#,
        // Issue 37 design §6, as headless Claude Code calls it (capture §7): asked of the
        // hub, and (the hub's own tool under the task's server name) allowed at once.
        r#"{"jsonrpc":"2.0","id":14,"method":"tools/call","params":{"name":"permission_prompt","arguments":{"tool_name":"Bash","input":{"command":"echo capture37 > proof-allow.txt"},"tool_use_id":"toolu_mock_1"},"_meta":{"claudecode/toolUseId":"toolu_mock_1","progressToken":2}}}"#,
        r#"{"jsonrpc":"2.0","id":15,"method":"tools/call","params":{"name":"permission_prompt","arguments":{"tool_name":"mcp__agent-hub-bf0431fb56f9__send","input":{"to":"boss","kind":"note","body":{}},"tool_use_id":"toolu_mock_2"}}}"#,
    ]
    .join("\n");
    let odd = [
        "",
        "{bad",
        "[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}]",
        r#"{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}"#,
        r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#,
        r#"{"jsonrpc":"1.0","id":4,"method":"ping"}"#,
        r#"{"jsonrpc":"2.0","id":4,"method":7}"#,
        r#"{"jsonrpc":"2.0","id":1.5,"method":"server/discover"}"#,
        r#"{"jsonrpc":"2.0","id":5,"result":{}}"#,
        r#"{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"launch","arguments":{}}}"#,
        r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"send","arguments":{"to":"b"}}}"#,
        r#"{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"await","arguments":{"timeoutSecs":"10.5"}}}"#,
        r#"{"jsonrpc":"2.0","id":10,"method":"tools/call","params":{"name":"send","arguments":{"to":"b","kind":"k","body":"text \u2028 with a line separator"}}}"#,
        r#"{"jsonrpc":"2.0","id":11,"method":"tools/call","params":[1]}"#,
        r#"{"jsonrpc":"2.0","id":12,"method":"tools/call","params":{"name":"delegate","arguments":{"agent":"a","cwd":"/w","prompt":"p","permission":"all","allow":[{"kinds":["edit"],"under":"../x"}]}}}"#,
        r#"{"jsonrpc":"2.0","id":13,"method":"tools/call","params":{"name":"task_answer","arguments":{"task":"t","option":"","requestId":7}}}"#,
        r#"{"jsonrpc":"2.0","id":14,"method":"tools/call","params":{"name":"permission_prompt","arguments":{"tool_name":"mcp__agent-hub__send","input":[1],"tool_use_id":""}}}"#,
        r#"{"jsonrpc":"2.0","id":15,"method":"tools/call","params":{"name":"permission_prompt","arguments":{"tool_name":"Bash\u001b[2J","input":{}}}}"#,
    ]
    .join("\n");
    let mut out = vec![
        ("session".to_owned(), session.into_bytes()),
        ("refusals".to_owned(), odd.into_bytes()),
        (
            "not-utf8".to_owned(),
            b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"p\xffng\"}\n".to_vec(),
        ),
    ];
    for v in SUPPORTED_VERSIONS.iter().chain(["1999-01-01"].iter()) {
        out.push((
            format!("initialize-{v}"),
            init.replace("2025-06-18", v).into_bytes(),
        ));
    }
    out
}
