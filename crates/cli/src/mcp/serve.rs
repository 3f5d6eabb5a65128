//! The thin stdio loop of `agent-hub mcp`: reads one line at a time, lets `Session` decide,
//! writes and flushes each reply, and runs the tool calls against the hub through `client`.
//!
//! Owns: bounded line reading, the hub IO of `send`/`await`/`status`/`who` and of the task tools
//! (`delegate`, `task_status`, `tasks`, `cancel`, `task_answer`, and a task identity's
//! `permission_prompt`, which waits for its decision: `wire::ClientLine` encodes
//! their lines, `client::task` reads the replies), and the ack discipline of
//! `await` (the envelope is acked only after its result line is written and flushed; if the
//! write fails it is released unacked and the hub delivers it again). Calls run one at a
//! time, in order; stdout carries nothing but JSON-RPC lines.

use super::permission;
use super::session::{Session, Step, ToolOutcome};
use super::tools::{AwaitCall, SendCall, StatusCall, ToolCall, NO_MESSAGE};
use crate::client::{self, Acked, ClientError, Endpoint, Taken};
use agent_hub_proto::wire::{AwaitRequest, Envelope, Reader};
use serde_json::Value;
use std::fmt;
use std::io::{BufRead, Read, Write};
use std::time::Duration;

/// Longest request line read; a longer one is skipped and answered with a parse error.
pub const MAX_LINE_BYTES: u64 = 16 * 1024 * 1024;
/// Bound on the hub's `ok` and `accepted`/`acked` replies inside a tool call.
const HUB_REPLY: Duration = Duration::from_secs(10);
/// Added to an await's hub-side timeout before the client stops waiting for a silent hub.
const AWAIT_SLACK: Duration = Duration::from_secs(5);

/// Why serving stopped before stdin ended.
#[derive(Debug)]
pub enum ServeError {
    /// Reading stdin failed.
    Stdin(std::io::Error),
    /// Writing or flushing stdout failed (the client went away).
    Stdout(std::io::Error),
}

impl fmt::Display for ServeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ServeError::Stdin(e) => write!(f, "mcp: cannot read stdin: {e}"),
            ServeError::Stdout(e) => write!(f, "mcp: cannot write stdout: {e}"),
        }
    }
}

impl std::error::Error for ServeError {}

/// Serves on the process's stdin and stdout until stdin ends.
pub fn serve_stdio(ep: &Endpoint) -> Result<(), ServeError> {
    let stdin = std::io::stdin().lock();
    let stdout = std::io::stdout().lock();
    serve(ep, stdin, stdout)
}

/// Serves on `input`/`output` until `input` ends (Ok) or either side fails.
pub fn serve(
    ep: &Endpoint,
    mut input: impl BufRead,
    mut output: impl Write,
) -> Result<(), ServeError> {
    let mut session = Session::new(ep.name.clone(), ep.port);
    let mut line = Vec::new();
    loop {
        line.clear();
        let n = (&mut input)
            .take(MAX_LINE_BYTES + 1)
            .read_until(b'\n', &mut line)
            .map_err(ServeError::Stdin)?;
        if n == 0 {
            return Ok(());
        }
        let step = if line.last() == Some(&b'\n') {
            line.pop();
            session.handle(&line)
        } else if n as u64 > MAX_LINE_BYTES {
            skip_rest_of_line(&mut input)?;
            Step::Reply(too_long_reply())
        } else {
            // The last line, without a newline before end of input.
            session.handle(&line)
        };
        match step {
            Step::Silent => {}
            Step::Reply(text) => write_line(&mut output, &text)?,
            Step::Call { id, call } => run_call(ep, &id, call, &mut output)?,
        }
    }
}

fn skip_rest_of_line(input: &mut impl BufRead) -> Result<(), ServeError> {
    loop {
        let buf = input.fill_buf().map_err(ServeError::Stdin)?;
        if buf.is_empty() {
            return Ok(());
        }
        if let Some(pos) = buf.iter().position(|&b| b == b'\n') {
            input.consume(pos + 1);
            return Ok(());
        }
        let len = buf.len();
        input.consume(len);
    }
}

fn too_long_reply() -> String {
    serde_json::json!({"jsonrpc":"2.0","id":null,"error":{"code":super::session::PARSE_ERROR,
        "message":format!("Parse error: message longer than {MAX_LINE_BYTES} bytes")}})
    .to_string()
}

fn write_line(out: &mut impl Write, text: &str) -> Result<(), ServeError> {
    out.write_all(text.as_bytes())
        .and_then(|()| out.write_all(b"\n"))
        .and_then(|()| out.flush())
        .map_err(ServeError::Stdout)
}

fn run_call(
    ep: &Endpoint,
    id: &Value,
    call: ToolCall,
    out: &mut impl Write,
) -> Result<(), ServeError> {
    let outcome = match call {
        ToolCall::Send(s) => send(ep, s),
        ToolCall::Who => who(ep),
        ToolCall::Status(s) => status(ep, s),
        ToolCall::Await(a) => return await_one(ep, id, a, out),
        ToolCall::Delegate(req) => answered("delegate", client::delegate(ep, req).map(|a| a.text)),
        ToolCall::TaskStatus(t) => {
            answered("task_status", client::task_status(ep, &t).map(|a| a.text))
        }
        ToolCall::Tasks => answered("tasks", client::tasks(ep).map(|a| a.text)),
        ToolCall::Cancel(t) => answered("cancel", client::cancel(ep, &t).map(|a| a.text)),
        ToolCall::TaskAnswer(a) => {
            answered("task_answer", client::task_answer(ep, a).map(|a| a.text))
        }
        ToolCall::TaskPrompt(p) => {
            answered("task_prompt", client::task_prompt(ep, p).map(|a| a.text))
        }
        ToolCall::TaskClose(t) => {
            answered("task_close", client::task_close(ep, &t).map(|a| a.text))
        }
        // Always Claude's JSON with isError false: a hub that refuses or cannot be reached
        // denies (`mcp::permission`).
        ToolCall::PermissionPrompt { call, req } => {
            ToolOutcome::ok(match client::task_permission(ep, req) {
                Ok(reply) => permission::result(&call, &reply),
                Err(e) => permission::unasked(&e.to_string()),
            })
        }
        ToolCall::Whoami => {
            // The session answers whoami itself; kept total for any future caller.
            ToolOutcome::ok(
                serde_json::json!({"name": ep.name, "hub": format!("127.0.0.1:{}", ep.port)})
                    .to_string(),
            )
        }
    };
    write_line(out, &Session::tool_result(id, &outcome))
}

fn hub_failure(tool: &str, e: &ClientError) -> ToolOutcome {
    let what = match e {
        ClientError::Hub(_) => "the hub refused it",
        ClientError::Connect(_) => "the hub is not reachable",
        ClientError::NotAHub(_) => "that port is not the hub's client port",
        ClientError::Unsupported(_) => "the hub does not support it",
        _ => "the exchange with the hub failed",
    };
    ToolOutcome::error(format!("{tool} failed: {what}: {e}"))
}

/// A task verb's result: the hub's JSON payload as it sent it, or the failure in words.
fn answered(tool: &str, r: Result<String, ClientError>) -> ToolOutcome {
    match r {
        Ok(text) => ToolOutcome::ok(text),
        Err(e) => hub_failure(tool, &e),
    }
}

fn send(ep: &Endpoint, s: SendCall) -> ToolOutcome {
    let ts = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let env = match Envelope::new(
        uuid::Uuid::new_v4().to_string(),
        ep.name.clone(),
        s.to,
        ts,
        s.kind,
        s.correlation_id,
        s.body,
    ) {
        Ok(env) => env,
        Err(e) => return ToolOutcome::error(format!("send failed: the body is not JSON: {e}")),
    };
    match client::send_reporting(ep, env) {
        // The id stays the result's first text, alone; a warning about the recipient (SPEC
        // §5.1: queued all the same) is a second one.
        Ok(sent) => ToolOutcome::ok(sent.id).with_warning(sent.warning),
        Err(e) => hub_failure("send", &e),
    }
}

fn who(ep: &Endpoint) -> ToolOutcome {
    match client::who(ep) {
        // The hub's payload as it sent it: the agent reads every key, `offRoster` among them.
        Ok(answer) => ToolOutcome::ok(answer.text),
        Err(e) => hub_failure("who", &e),
    }
}

/// `status`: where a message is, after waiting for a stage when asked (bounded like `await`).
fn status(ep: &Endpoint, s: StatusCall) -> ToolOutcome {
    let answer = match s.wait_for {
        None => client::status(ep, &s.id),
        Some(w) => client::status_wait(
            ep,
            &s.id,
            w,
            Some(Duration::from_secs(s.timeout_secs)),
            AWAIT_SLACK,
        ),
    };
    match answer {
        Ok(st) => match serde_json::to_string(&st) {
            Ok(text) => ToolOutcome::ok(text),
            Err(e) => ToolOutcome::error(format!("status failed: {e}")),
        },
        Err(e) => hub_failure("status", &e),
    }
}

/// Bounded ack-mode await: the result line goes out (written and flushed) before the ack.
fn await_one(
    ep: &Endpoint,
    id: &Value,
    a: AwaitCall,
    out: &mut impl Write,
) -> Result<(), ServeError> {
    let req = AwaitRequest {
        reply_to: a.reply_to,
        kind: a.kind,
        timeout_secs: Some(a.timeout_secs),
        ack: None,
        reader: Some(Reader::McpAwait.as_str().to_owned()),
    };
    let wait = Duration::from_secs(a.timeout_secs).saturating_add(AWAIT_SLACK);
    // A message of a kind only the hub writes (a task's outcome or progress, a bounce) that
    // did not come from the hub is never handed to the model as if it had: it is passed over
    // (consumed, said on stderr) and the wait goes on for the rest of its timeout.
    let taken = client::take_acked_genuine(
        ep,
        req,
        client::CONNECT_TIMEOUT,
        HUB_REPLY,
        Some(wait),
        |why| eprintln!("agent-hub mcp: warning: {why}"),
    );
    match taken {
        Ok(None) => write_line(
            out,
            &Session::tool_result(
                id,
                &ToolOutcome::ok(format!(
                    "{NO_MESSAGE} (waited {} s; call await again to keep waiting)",
                    a.timeout_secs
                )),
            ),
        ),
        Ok(Some(Taken::Plain(text))) => {
            write_line(out, &Session::tool_result(id, &ToolOutcome::ok(text)))
        }
        Ok(Some(Taken::Held(held))) => {
            let line = Session::tool_result(id, &ToolOutcome::ok(held.text()));
            if let Err(e) = write_line(out, &line) {
                // Not acked: the hub delivers the same envelope again.
                held.release();
                return Err(e);
            }
            if let Acked::Unconfirmed(why) = held.ack(HUB_REPLY) {
                eprintln!("agent-hub mcp: warning: ack not confirmed ({why}); the envelope may be delivered again with the same id");
            }
            Ok(())
        }
        Err(e) => write_line(out, &Session::tool_result(id, &hub_failure("await", &e))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A port nothing listens on: bind, read the port, drop the listener.
    fn dead_port() -> u16 {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    }

    /// Runs the loop over `input` against a port where no hub listens; the reply lines.
    fn replies(input: &[u8]) -> Vec<Value> {
        let ep = Endpoint {
            name: "a".into(),
            token: "t".into(),
            port: dead_port(),
        };
        let mut out = Vec::new();
        serve(&ep, input, &mut out).unwrap();
        String::from_utf8(out)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    #[test]
    fn loop_replies_line_by_line_and_ends_at_eof() {
        let input = b"{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"ping\"}\n{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n\n{bad\n{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"server/discover\"}";
        let lines = replies(&input[..]);
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[0]["id"], 0);
        assert_eq!(lines[1]["error"]["code"], -32700);
        assert_eq!(lines[2]["error"]["code"], -32601);
        assert_eq!(lines[2]["id"], 1);
    }

    #[test]
    fn hub_down_is_a_tool_error() {
        let input = b"{\"jsonrpc\":\"2.0\",\"id\":\"w\",\"method\":\"tools/call\",\"params\":{\"name\":\"who\"}}\n{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\"params\":{\"name\":\"await\",\"arguments\":{\"timeoutSecs\":0}}}\n";
        let lines = replies(&input[..]);
        assert_eq!(lines.len(), 2);
        for l in &lines {
            assert_eq!(l["result"]["isError"], true, "{l}");
            assert!(l["result"]["content"][0]["text"]
                .as_str()
                .unwrap()
                .contains("not reachable"));
        }
        assert_eq!(lines[0]["id"], "w");
    }

    #[test]
    fn task_tools_with_the_hub_down_are_tool_errors() {
        let input = concat!(
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"delegate","arguments":{"agent":"codex","cwd":"/w","prompt":"go"}}}"#,
            "\n",
            r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"task_status","arguments":{"task":"task-1"}}}"#,
            "\n",
            r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"tasks"}}"#,
            "\n",
            r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"cancel","arguments":{"task":"task-1"}}}"#,
            "\n",
            r#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"task_answer","arguments":{"task":"task-1","option":"allow"}}}"#,
            "\n",
        );
        let lines = replies(input.as_bytes());
        assert_eq!(lines.len(), 5);
        for (l, tool) in
            lines
                .iter()
                .zip(["delegate", "task_status", "tasks", "cancel", "task_answer"])
        {
            assert_eq!(l["result"]["isError"], true, "{l}");
            let text = l["result"]["content"][0]["text"].as_str().unwrap();
            assert!(
                text.starts_with(&format!("{tool} failed: the hub is not reachable")),
                "{text}"
            );
        }
    }

    #[test]
    fn an_overlong_line_is_skipped() {
        let mut input = vec![b'x'; (MAX_LINE_BYTES + 10) as usize];
        input.extend_from_slice(b"\n{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"ping\"}\n");
        let lines = replies(&input[..]);
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0]["error"]["code"], -32700);
        assert_eq!(lines[1]["id"], 3);
    }
}
