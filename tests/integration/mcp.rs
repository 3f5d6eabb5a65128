//! The MCP server end to end (issue 5 "Reach"; docs/mcp.md): the real `agent-hub-server` on
//! port 0 and the real `agent-hub mcp` for two identities, driven over piped stdio with
//! JSON-RPC from Rust (initialize → tools/list → send → await → bounded empty await), plus
//! the failure paths (bad token file, hub down, an await whose result cannot be written is
//! not acked) and, when the Python `mcp` SDK is importable, a real SDK client.
//!
//! Owns a small local harness (copied from tests/integration/deliver.rs: a test binary cannot share it).
//! Every wait is bounded.

use crate::common;

use serde_json::{json, Value};
use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;

use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const SERVER: &str = env!("CARGO_BIN_EXE_agent-hub-server");
const CLIENT: &str = env!("CARGO_BIN_EXE_agent-hub");
const DEADLINE: Duration = Duration::from_secs(20);
const AGENTS: [(&str, &str); 2] = [("alpha", "tok-alpha-3e1f"), ("beta", "tok-beta-91aa")];

// ----- harness -----

use common::{write_private, TempDir};

struct Hub {
    dir: TempDir,
    child: Option<Child>,
    port: u16,
}

impl Hub {
    fn start() -> Hub {
        let dir = TempDir::new("mcp");
        let d = &dir.0;
        fs::create_dir(d.join("tokens")).unwrap();
        let mut roster = String::from("[agents]\n");
        for (name, token) in AGENTS {
            roster.push_str(&format!("{name} = \"{token}\"\n"));
            write_private(
                &d.join(format!("tokens/{name}.token")),
                &format!("{token}\n"),
            );
        }
        write_private(&d.join("roster.toml"), &roster);
        write_private(&d.join("config.toml"), &common::memory_config(30000));
        let (child, port) = common::start_server(SERVER, d, DEADLINE);
        Hub {
            dir,
            child: Some(child),
            port,
        }
    }

    fn token_file(&self, name: &str) -> String {
        self.dir
            .0
            .join(format!("tokens/{name}.token"))
            .display()
            .to_string()
    }

    fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn mcp_command(&self, name: &str) -> Command {
        let mut cmd = Command::new(CLIENT);
        cmd.args([
            "mcp",
            "--as",
            name,
            "--token-file",
            &self.token_file(name),
            "--port",
        ])
        .arg(self.port.to_string())
        .current_dir(&self.dir.0);
        cmd
    }

    /// `agent-hub <verb> --as NAME …` run to completion; (exit code, stdout, stderr).
    fn cli(&self, verb: &str, name: &str, rest: &[&str]) -> (i32, String, String) {
        let out = Command::new(CLIENT)
            .arg(verb)
            .args([
                "--as",
                name,
                "--token-file",
                &self.token_file(name),
                "--port",
            ])
            .arg(self.port.to_string())
            .args(rest)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }
}

impl Drop for Hub {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A running `agent-hub mcp` with its stdio piped.
struct Mcp {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
}

impl Mcp {
    fn spawn(hub: &Hub, name: &str) -> Mcp {
        let mut child = hub
            .mcp_command(name)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn agent-hub mcp");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let _ = tx.send(line);
            }
        });
        Mcp {
            stdin: child.stdin.take(),
            child,
            lines: rx,
        }
    }

    fn write(&mut self, msg: &Value) {
        let stdin = self.stdin.as_mut().unwrap();
        writeln!(stdin, "{msg}").unwrap();
        stdin.flush().unwrap();
    }

    fn read(&self, within: Duration) -> Value {
        let line = self
            .lines
            .recv_timeout(within)
            .expect("mcp answered in time");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"))
    }

    fn request(&mut self, id: Value, method: &str, params: Value) -> Value {
        self.write(&json!({"jsonrpc":"2.0","id":id,"method":method,"params":params}));
        let r = self.read(DEADLINE);
        assert_eq!(r["id"], id, "{r}");
        r
    }

    fn call(&mut self, id: u64, tool: &str, args: Value) -> Value {
        let r = self.request(
            json!(id),
            "tools/call",
            json!({"name": tool, "arguments": args}),
        );
        r["result"].clone()
    }

    fn handshake(&mut self, version: &str) {
        let r = self.request(
            json!(0),
            "initialize",
            json!({"protocolVersion": version, "capabilities": {}, "clientInfo": {"name":"test","version":"1"}}),
        );
        assert_eq!(r["result"]["protocolVersion"], version);
        assert_eq!(r["result"]["serverInfo"]["name"], "agent-hub");
        self.write(&json!({"jsonrpc":"2.0","method":"notifications/initialized"}));
    }

    /// Closes stdin and waits for the exit code.
    fn finish(mut self) -> i32 {
        drop(self.stdin.take());
        let started = Instant::now();
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                return st.code().unwrap_or(-1);
            }
            if started.elapsed() > DEADLINE {
                let _ = self.child.kill();
                panic!("agent-hub mcp did not exit after stdin closed");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Mcp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn text(result: &Value) -> &str {
    result["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no text: {result}"))
}

// ----- tests -----

#[test]
fn send_then_await_between_two_identities() {
    let hub = Hub::start();
    let mut a = Mcp::spawn(&hub, "alpha");
    let mut b = Mcp::spawn(&hub, "beta");
    a.handshake("2025-11-25");
    b.handshake("2025-06-18");

    // New SDK clients probe first; the answer must come at once.
    let r = a.request(json!(1), "server/discover", json!({"_meta": {}}));
    assert_eq!(r["error"]["code"], -32601);
    let r = a.request(json!("p"), "ping", json!({}));
    assert_eq!(r["result"], json!({}));

    let r = a.request(json!(2), "tools/list", json!({}));
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

    let me = a.call(3, "whoami", json!({}));
    assert_eq!(
        serde_json::from_str::<Value>(text(&me)).unwrap()["name"],
        "alpha"
    );
    assert!(!text(&me).contains("tok-"));

    let sent = a.call(
        4,
        "send",
        json!({"to":"beta","kind":"task","body":{"n":1,"s":"two\nlines"}}),
    );
    assert_eq!(sent["isError"], false, "{sent}");
    let id = text(&sent).to_owned();
    assert_eq!(id.len(), 36, "an id: {id}");

    let got = b.call(5, "await", json!({"timeoutSecs": 10}));
    assert_eq!(got["isError"], false, "{got}");
    let env: Value = serde_json::from_str(text(&got)).unwrap();
    assert_eq!(env["id"], id.as_str());
    assert_eq!(env["from"], "alpha");
    assert_eq!(env["kind"], "task");
    assert_eq!(env["body"], json!({"n":1,"s":"two\nlines"}));

    // A reply correlates; await --replyTo picks it out.
    let reply = b.call(
        6,
        "send",
        json!({"to":"alpha","kind":"result","body":"done","correlationId":id}),
    );
    assert_eq!(reply["isError"], false, "{reply}");
    let back = a.call(7, "await", json!({"replyTo": id, "timeoutSecs": 10}));
    let env: Value = serde_json::from_str(text(&back)).unwrap();
    assert_eq!(env["body"], "done");

    // Consumed: a second await finds nothing, within its bound, and that is not an error.
    let started = Instant::now();
    let empty = b.call(8, "await", json!({"timeoutSecs": 1}));
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "took {:?}",
        started.elapsed()
    );
    assert_eq!(empty["isError"], false);
    assert!(text(&empty).starts_with("no message yet"), "{empty}");

    let who = b.call(9, "who", json!({}));
    let p: Value = serde_json::from_str(text(&who)).unwrap();
    let beta = p["agents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["name"] == "beta")
        .unwrap();
    assert_eq!(beta["queued"], 0);

    // Tool failures are results; unknown tools are -32602.
    let bad = a.call(10, "send", json!({"to":"beta","kind":"bounce","body":1}));
    assert_eq!(bad["isError"], true, "{bad}");
    assert!(text(&bad).contains("refused"), "{bad}");
    let r = a.request(
        json!(11),
        "tools/call",
        json!({"name":"launch","arguments":{}}),
    );
    assert_eq!(r["error"]["code"], -32602);

    assert_eq!(a.finish(), 0);
    assert_eq!(b.finish(), 0);
}

/// Issue 12 "Typed MCP tools" and "Receipts": every argument of every tool has a JSON-schema
/// type (send's body `object`, so schema-driven clients send it as JSON); a structured body
/// reaches the recipient as an object; `status` says where the message is and which kind of
/// reader took it, and waits for a stage.
#[test]
fn tools_are_typed_and_status_reports_the_stage_and_reader() {
    let hub = Hub::start();
    let mut a = Mcp::spawn(&hub, "alpha");
    let mut b = Mcp::spawn(&hub, "beta");
    a.handshake("2025-11-25");
    b.handshake("2025-11-25");
    let r = a.request(json!(1), "tools/list", json!({}));
    for t in r["result"]["tools"].as_array().unwrap() {
        let name = t["name"].as_str().unwrap();
        for (arg, schema) in t["inputSchema"]["properties"].as_object().unwrap() {
            assert!(schema["type"].is_string(), "{name}.{arg}: {schema}");
            assert!(schema["description"].is_string(), "{name}.{arg}");
        }
    }
    let body = json!({"task": "review", "files": ["a.rs", "b.rs"], "n": 2, "ok": true});
    let sent = a.call(2, "send", json!({"to":"beta","kind":"task","body":body}));
    let id = text(&sent).to_owned();
    let st = a.call(3, "status", json!({"id": id}));
    assert_eq!(st["isError"], false, "{st}");
    let st: Value = serde_json::from_str(text(&st)).unwrap();
    assert_eq!(
        (st["state"].as_str(), st["position"].as_u64()),
        (Some("queued"), Some(1))
    );
    assert!(st.get("reader").is_none(), "{st}");
    // A wait that cannot be met in time says so.
    let w = a.call(
        4,
        "status",
        json!({"id": id, "waitFor": "acked", "timeoutSecs": 0}),
    );
    let w: Value = serde_json::from_str(text(&w)).unwrap();
    assert_eq!(
        (w["state"].as_str(), w["wait"].as_str()),
        (Some("queued"), Some("timeout"))
    );

    let got = b.call(5, "await", json!({"timeoutSecs": 10}));
    let env: Value = serde_json::from_str(text(&got)).unwrap();
    assert_eq!(env["body"], body, "the body arrives as the object it was");
    assert!(env["body"].is_object());
    // The await acks after writing its result; status then names the MCP reader.
    let w = a.call(
        6,
        "status",
        json!({"id": id, "waitFor": "acked", "timeoutSecs": 10}),
    );
    let w: Value = serde_json::from_str(text(&w)).unwrap();
    assert_eq!(
        (
            w["state"].as_str(),
            w["reader"].as_str(),
            w["wait"].as_str()
        ),
        (Some("acked"), Some("mcp-await"), Some("reached")),
        "{w}"
    );
    let bad = a.call(7, "status", json!({"id": id, "waitFor": "read"}));
    assert_eq!(bad["isError"], true);
    assert!(text(&bad).contains("waitFor must be one of"), "{bad}");
    // Someone else's message is unknown, however asked.
    let c = b.call(
        8,
        "status",
        json!({"id": "no-such-id", "waitFor": "delivered"}),
    );
    let c: Value = serde_json::from_str(text(&c)).unwrap();
    assert_eq!(
        (c["state"].as_str(), c["wait"].as_str()),
        (Some("unknown"), Some("ended"))
    );
    assert_eq!(a.finish(), 0);
    assert_eq!(b.finish(), 0);
}

#[test]
fn a_bad_token_file_exits_before_serving() {
    let hub = Hub::start();
    let tf = hub.token_file("alpha");
    fs::set_permissions(&tf, fs::Permissions::from_mode(0o644)).unwrap();
    let out = hub
        .mcp_command("alpha")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("chmod 600"), "{err}");
}

#[test]
fn hub_down_gives_tool_errors_not_protocol_errors() {
    let mut hub = Hub::start();
    let mut a = Mcp::spawn(&hub, "alpha");
    hub.stop();
    a.handshake("2024-11-05");
    for (i, (tool, args)) in [
        ("who", json!({})),
        ("await", json!({"timeoutSecs": 0})),
        ("send", json!({"to":"beta","kind":"k","body":{}})),
    ]
    .into_iter()
    .enumerate()
    {
        let r = a.call(i as u64 + 1, tool, args);
        assert_eq!(r["isError"], true, "{r}");
        assert!(text(&r).contains("not reachable"), "{r}");
    }
}

#[test]
fn an_await_whose_result_cannot_be_written_is_not_acked() {
    let hub = Hub::start();
    let mut child = hub
        .mcp_command("beta")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    // The client goes away before the answer: its end of stdout is closed.
    drop(child.stdout.take());
    writeln!(
        stdin,
        r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"await","arguments":{{"timeoutSecs":15}}}}}}"#
    )
    .unwrap();
    stdin.flush().unwrap();
    // Wait until beta's await is parked, then send.
    let started = Instant::now();
    loop {
        // beta's own `who`: another agent's awaits are not shown (SPEC §14 "Visibility").
        let (code, out, err) = hub.cli("who", "beta", &["--json"]);
        assert_eq!(code, 0, "{err}");
        let p: Value = serde_json::from_str(out.trim()).unwrap();
        if p["agents"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["name"] == "beta" && !a["parked"].as_array().unwrap().is_empty())
        {
            break;
        }
        assert!(started.elapsed() < DEADLINE, "beta never parked");
        std::thread::sleep(Duration::from_millis(20));
    }
    let (code, id, err) = hub.cli(
        "send",
        "alpha",
        &["--to", "beta", "--kind", "task", "--body", "{\"x\":1}"],
    );
    assert_eq!(code, 0, "{err}");
    // The write fails, the envelope is released, and the server stops with an error.
    let started = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        assert!(
            started.elapsed() < DEADLINE,
            "mcp kept running after stdout closed"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(1));
    let (code, out, err) = hub.cli("await", "beta", &["--timeout", "10"]);
    assert_eq!(code, 0, "{err}");
    let env: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(env["id"], id.trim());
}

#[test]
fn python_sdk_client_if_available() {
    let have = Command::new("python3")
        .args(["-c", "import mcp"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !have {
        eprintln!("skipped: the Python mcp SDK is not importable");
        return;
    }
    let hub = Hub::start();
    let script = r#"
import asyncio, json, sys
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

def failed(result):
    # The SDK's attribute is `isError` in 1.x and `is_error` in 2.x.
    return getattr(result, "is_error", getattr(result, "isError", None))

def server(name):
    return StdioServerParameters(command=sys.argv[1], args=["mcp", "--as", name, "--token-file", sys.argv[3 if name == "alpha" else 4], "--port", sys.argv[2]])

async def main():
    async with stdio_client(server("alpha")) as (ra, wa), stdio_client(server("beta")) as (rb, wb):
        async with ClientSession(ra, wa) as a, ClientSession(rb, wb) as b:
            await a.initialize(); await b.initialize()
            names = [t.name for t in (await a.list_tools()).tools]
            assert names == ["send", "await", "status", "who", "whoami", "delegate", "task_status", "tasks", "cancel", "task_answer", "task_prompt", "task_close"], names
            sent = await a.call_tool("send", {"to": "beta", "kind": "task", "body": {"py": True}})
            assert failed(sent) is False, sent
            got = await b.call_tool("await", {"timeoutSecs": 10})
            env = json.loads(got.content[0].text)
            assert env["id"] == sent.content[0].text and env["body"] == {"py": True}, env
            empty = await b.call_tool("await", {"timeoutSecs": 0})
            assert failed(empty) is False and empty.content[0].text.startswith("no message yet"), empty
            print("ok")

asyncio.run(main())
"#;
    let out = Command::new("python3")
        .args([
            "-c",
            script,
            CLIENT,
            &hub.port.to_string(),
            &hub.token_file("alpha"),
            &hub.token_file("beta"),
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("ok"),
        "python driver failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Issue 35: `send` to a name no agent has returns the id and, as a second text, the hub's
/// warning (the message is queued all the same); a roster name returns the id alone.
#[test]
fn send_to_a_misspelt_name_returns_the_id_and_a_warning() {
    let hub = Hub::start();
    let mut a = Mcp::spawn(&hub, "alpha");
    a.handshake("2025-06-18");
    let r = a.call(1, "send", json!({"to": "bta", "kind": "note", "body": {}}));
    assert_eq!(r["isError"], false, "{r}");
    let id = text(&r).to_owned();
    assert_eq!(uuid::Uuid::parse_str(&id).map(|_| ()), Ok(()), "{r}");
    assert_eq!(
        r["content"][1]["text"],
        "warning: no agent named \"bta\" is on this hub's roster (did you mean \"beta\"?); the envelope is queued for that name all the same and waits until an agent of that name connects (status with its id shows where it is)"
    );
    let r = a.call(2, "status", json!({"id": id}));
    assert!(text(&r).contains("\"state\":\"queued\""), "{r}");
    let r = a.call(3, "send", json!({"to": "beta", "kind": "note", "body": {}}));
    assert_eq!(r["content"].as_array().map(Vec::len), Some(1), "{r}");
    assert_eq!(a.finish(), 0);
}

/// Issue 35: a port that answers, but not as a hub's client port, is named in each tool's
/// error, not as a parser's complaint about a line no hub sent.
#[test]
fn a_port_that_is_not_a_hubs_is_named_in_the_tool_error() {
    let fake = crate::client_errors::Fake::start(crate::client_errors::as_http);
    let mut hub = Hub::start();
    hub.port = fake.port;
    let mut a = Mcp::spawn(&hub, "alpha");
    a.handshake("2025-06-18");
    let want = format!(
        "that port is not the hub's client port: 127.0.0.1:{0} is not an agent-hub client port: it answered as an HTTP server where a hub answers a hello with ok; is {0} the `port` in the hub's config?",
        fake.port
    );
    for (i, (tool, args)) in [
        ("who", json!({})),
        ("await", json!({"timeoutSecs": 0})),
        ("send", json!({"to": "beta", "kind": "k", "body": {}})),
        ("status", json!({"id": "e-1"})),
        ("tasks", json!({})),
    ]
    .into_iter()
    .enumerate()
    {
        let r = a.call(i as u64 + 1, tool, args);
        assert_eq!(r["isError"], true, "{r}");
        assert_eq!(text(&r), format!("{tool} failed: {want}"), "{r}");
    }
    assert_eq!(a.finish(), 0);
}
