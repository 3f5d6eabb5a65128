//! Issue 37's clients against a scripted hub on a loopback port (the hub's side of
//! `task_answer` is the task book's, tested with it): `agent-hub task answer` sends the wire's
//! line and prints what was answered, passes a refusal through verbatim, and names what is
//! missing when the hub predates the verb; `delegate --permission/--allow` sends the rules and
//! says so when the hub predates them; `task status` and `task list` show open requests, a
//! hostile title made harmless; the MCP `task_answer` tool does the same for a model. What
//! the client refuses itself is refused before the token file is read or a connection made.
//! Every wait is a read with a timeout (`DEADLINE`).

use crate::harness::*;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::process::{Command, Stdio};

const TASK: &str = "task-6d1f0c523c1e4b7a9f430a4a3b7c1e25";
const REQ: &str = "req-0123456789abcdef";

/// A hub from before issue 37: its decoder's list of tags, without `task_answer`.
const OLD_UNKNOWN_TAG: &str = "malformed line: unknown tag, expected one of `hello`, `send`, `await`, `ack`, `status`, `who`, `delegate`, `task_status`, `tasks`, `cancel`, `turn`, `activity`";
const OLD_UNKNOWN_FIELD: &str = "malformed line: unknown field in `delegate`, expected one of `agent`, `cwd`, `prompt`, `timeoutSecs`, `progressSecs`, `peer`";

/// A hub played by a script: one connection per entry, each answered (after its hello and
/// verb lines) with the entry's lines. Returns the port and a handle giving the lines each
/// connection sent.
fn scripted_hub(script: Vec<Vec<Value>>) -> (u16, std::thread::JoinHandle<Vec<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = std::thread::spawn(move || {
        let mut seen = Vec::new();
        for replies in script {
            let (s, _) = listener.accept().unwrap();
            s.set_read_timeout(Some(DEADLINE)).unwrap();
            let mut w = s.try_clone().unwrap();
            let mut r = BufReader::new(s);
            let mut lines = Vec::new();
            for _ in 0..2 {
                let mut line = String::new();
                r.read_line(&mut line).unwrap();
                lines.push(line.trim_end().to_owned());
            }
            for reply in replies {
                w.write_all(format!("{reply}\n").as_bytes()).unwrap();
            }
            seen.push(lines);
        }
        seen
    });
    (port, server)
}

/// A token file of its own (the scripted hub takes any token).
fn token() -> (TempDir, std::path::PathBuf) {
    let dir = TempDir::new();
    let file = dir.path.join("alpha.token");
    write_file(&file, "tok-SECRET\n", 0o600);
    (dir, file)
}

fn cli(port: u16, token_file: &std::path::Path, args: &[&str]) -> Output {
    let mut c = Command::new(CLIENT);
    c.args(args)
        .args(["--as", "alpha", "--token-file"])
        .arg(token_file)
        .args(["--port", &port.to_string()]);
    run(c, None)
}

fn verb(seen: &[Vec<String>], conn: usize) -> Value {
    serde_json::from_str(&seen[conn][1]).unwrap()
}

#[test]
fn task_answer_sends_the_wire_line_and_prints_the_request_answered() {
    let reply = json!({"task_answer": {"task": TASK, "request": REQ, "option": "allow", "state": "answered"}});
    let (port, server) = scripted_hub(vec![
        vec![json!({"ok": {}}), reply.clone()],
        vec![json!({"ok": {}}), reply.clone()],
    ]);
    let (_dir, tf) = token();
    let out = cli(
        port,
        &tf,
        &[
            "task",
            "answer",
            "--id",
            TASK,
            "--request",
            REQ,
            "--option",
            "allow",
            "--message",
            "fine, but\nno pushes",
        ],
    );
    out.assert_code(0);
    assert_eq!(out.stdout, format!("answered {REQ} with allow\n"));
    assert_eq!(out.stderr, "");
    // Without --request (the hub picks the one open request and says which), and --json.
    let out = cli(
        port,
        &tf,
        &[
            "task", "answer", "--id", TASK, "--option", "allow", "--json",
        ],
    );
    out.assert_code(0);
    let printed: Value = serde_json::from_str(out.stdout.trim()).unwrap();
    assert_eq!(printed, reply["task_answer"]);
    let seen = server.join().unwrap();
    assert_eq!(
        seen[0][1],
        format!(
            r#"{{"task_answer":{{"task":"{TASK}","request":"{REQ}","option":"allow","message":"fine, but\nno pushes"}}}}"#
        ),
        "the wire's line, keys in order"
    );
    assert_eq!(
        verb(&seen, 1),
        json!({"task_answer": {"task": TASK, "option": "allow"}})
    );
}

/// The hub's refusals (design §5's texts) pass through verbatim, exit 1; a hub that does not
/// know the verb is named as such, with its own words after.
#[test]
fn a_refusal_is_the_hubs_words_and_an_older_hub_is_named() {
    let refusals = [
        "unknown task".to_owned(),
        format!("invalid task_answer: request {REQ} is not open (expired)"),
        format!("invalid task_answer: {TASK} has 2 open requests; name one with request"),
        "invalid task_answer: option \"always\" was not offered (offered: allow, reject)".into(),
        "invalid task_answer: only the task's delegator or a name in tasks.approvers may answer"
            .into(),
    ];
    let mut script: Vec<Vec<Value>> = refusals
        .iter()
        .map(|m| vec![json!({"ok": {}}), json!({"error": {"message": m}})])
        .collect();
    script.push(vec![
        json!({"ok": {}}),
        json!({"error": {"message": OLD_UNKNOWN_TAG}}),
    ]);
    let (port, server) = scripted_hub(script);
    let (_dir, tf) = token();
    for want in &refusals {
        let out = cli(
            port,
            &tf,
            &["task", "answer", "--id", TASK, "--option", "always"],
        );
        out.assert_code(1);
        assert_eq!(out.stderr, format!("agent-hub: {want}\n"));
        assert_eq!(out.stdout, "");
    }
    let out = cli(
        port,
        &tf,
        &["task", "answer", "--id", TASK, "--option", "allow"],
    );
    out.assert_code(1);
    assert_eq!(
        out.stderr,
        format!("agent-hub: this hub does not take answers to a task's requests (task_answer; an agent-hub from before approvals, whose tasks never wait for one): {OLD_UNKNOWN_TAG}\n")
    );
    assert_eq!(server.join().unwrap().len(), refusals.len() + 1);
}

/// What the wire refuses is refused before the token file is read or the hub contacted: the
/// token file here does not exist and the port has no listener, so any other order shows.
#[test]
fn a_bad_answer_is_refused_before_anything_is_sent() {
    let dir = TempDir::new();
    let missing = dir.path.join("nobody.token");
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let long = "m".repeat(4097);
    for (args, want) in [
        (
            vec!["--option", ""],
            "agent-hub: task answer: option must not be empty\n",
        ),
        (
            vec!["--option", "allow", "--request", ""],
            "agent-hub: task answer: request must not be empty\n",
        ),
        (
            vec!["--option", "allow\u{1b}[2J"],
            "agent-hub: task answer: option must not contain control or invisible formatting characters\n",
        ),
        (
            vec!["--option", "allow", "--message", &long],
            "agent-hub: task answer: message is over 4096 bytes\n",
        ),
    ] {
        let mut all = vec!["task", "answer", "--id", TASK];
        all.extend(args);
        let out = cli(port, &missing, &all);
        out.assert_code(1);
        assert_eq!(out.stderr, want);
    }
    let out = cli(port, &missing, &["task", "answer", "--id", TASK]);
    out.assert_code(1);
    assert!(out.stderr.contains("--option"), "{}", out.stderr);
    // Likewise a bad --allow or --permission for delegate.
    for (args, want) in [
        (
            vec!["--allow", "edit:../.."],
            "agent-hub: --allow edit:../..: under must not leave the task's cwd (the form is KIND[,KIND…][:PATH], PATH relative to --cwd)\n",
        ),
        (
            vec!["--allow", "rm"],
            "agent-hub: --allow rm: kinds must be among read, edit, delete, move, search, execute, think, fetch, switch_mode, other (the form is KIND[,KIND…][:PATH], PATH relative to --cwd)\n",
        ),
    ] {
        let mut all = vec!["delegate", "--agent", "claude", "--cwd", "/w", "--prompt", "p"];
        all.extend(args);
        let out = cli(port, &missing, &all);
        out.assert_code(1);
        assert_eq!(out.stderr, want);
    }
    let out = cli(
        port,
        &missing,
        &[
            "delegate",
            "--agent",
            "claude",
            "--cwd",
            "/w",
            "--prompt",
            "p",
            "--permission",
            "always",
        ],
    );
    out.assert_code(1);
    assert!(
        out.stderr.contains("invalid value 'always'") && out.stderr.contains("ask, reject, allow"),
        "{}",
        out.stderr
    );
}

#[test]
fn delegate_sends_the_permission_and_allow_rules_and_an_older_hub_is_named() {
    let (port, server) = scripted_hub(vec![
        vec![
            json!({"ok": {}}),
            json!({"delegated": {"task": TASK, "state": "queued"}}),
        ],
        vec![
            json!({"ok": {}}),
            json!({"error": {"message": OLD_UNKNOWN_FIELD}}),
        ],
        vec![
            json!({"ok": {}}),
            json!({"error": {"message": OLD_UNKNOWN_FIELD}}),
        ],
    ]);
    let (_dir, tf) = token();
    let args = [
        "delegate",
        "--agent",
        "claude",
        "--cwd",
        "/w/repo",
        "--prompt",
        "fix it",
        "--permission",
        "ask",
        "--allow",
        "read,search",
        "--allow",
        "edit,delete:src/",
    ];
    let out = cli(port, &tf, &args);
    out.assert_code(0);
    assert_eq!(out.stdout.trim(), TASK);
    let out = cli(port, &tf, &args);
    out.assert_code(1);
    assert_eq!(
        out.stderr,
        format!("agent-hub: this hub does not take a task's permission or allow rules (an agent-hub from before approvals); no task was made: delegate without --permission and --allow to run under the hub's own policy ({OLD_UNKNOWN_FIELD})\n")
    );
    // Without issue 37's keys, the same refusal is the hub's own words (it can only be
    // another key the hub does not know).
    let out = cli(
        port,
        &tf,
        &[
            "delegate", "--agent", "claude", "--cwd", "/w", "--prompt", "p",
        ],
    );
    out.assert_code(1);
    assert_eq!(out.stderr, format!("agent-hub: {OLD_UNKNOWN_FIELD}\n"));
    let seen = server.join().unwrap();
    assert_eq!(
        verb(&seen, 0),
        json!({"delegate": {"agent": "claude", "cwd": "/w/repo", "prompt": "fix it",
            "permission": "ask",
            "allow": [{"kinds": ["read", "search"]}, {"kinds": ["edit", "delete"], "under": "src/"}]}})
    );
    assert_eq!(
        verb(&seen, 2),
        json!({"delegate": {"agent": "claude", "cwd": "/w", "prompt": "p"}})
    );
}

fn record_with_requests(title: &str) -> Value {
    json!({"task": TASK, "agent": "claude", "state": "running",
        "createdAt": "2026-12-01T10:00:00.000Z", "startedAt": "2026-12-01T10:00:00.250Z",
        "elapsedMs": 64000,
        "requests": [{"request": REQ, "type": "permission", "title": title,
            "toolKind": "execute", "options": ["allow", "reject"],
            "openedAt": "2026-12-01T10:01:00.000Z", "expiresAt": "2999-12-01T10:11:00.000Z",
            "waitingMs": 125000}]})
}

/// `task status` prints the record as one JSON line (the requests in it, escapes kept as
/// JSON escapes) and, for the person at the terminal, the open requests on stderr; `task
/// list` shows them under their task. A hostile title (OSC 52, a bidi override) reaches the
/// terminal harmless on both.
#[test]
fn task_status_and_list_show_open_requests_and_how_to_answer() {
    let title = "Run cargo test\u{1b}]52;c;ZXZpbA==\u{7}\u{202e}";
    let record = record_with_requests(title);
    let (port, server) = scripted_hub(vec![
        vec![json!({"ok": {}}), json!({"task_status": record.clone()})],
        vec![
            json!({"ok": {}}),
            json!({"tasks": {"tasks": [record.clone(), {"task": "task-2", "state": "queued", "position": 1}]}}),
        ],
    ]);
    let (_dir, tf) = token();
    let out = cli(port, &tf, &["task", "status", "--id", TASK]);
    out.assert_code(0);
    assert_eq!(out.stdout.lines().count(), 1, "{}", out.stdout);
    let printed: Value = serde_json::from_str(out.stdout.trim()).unwrap();
    assert_eq!(printed, record, "the same JSON value");
    for text in [&out.stdout, &out.stderr] {
        assert!(
            !text.contains('\u{1b}') && !text.contains('\u{202e}'),
            "{text:?}"
        );
    }
    let err: Vec<&str> = out.stderr.lines().collect();
    assert_eq!(err[0], format!("{TASK} waits for an answer to 1 request:"));
    assert!(
        err[1].starts_with(&format!(
            "  request {REQ}: permission (execute) \"Run cargo test?"
        )),
        "{}",
        err[1]
    );
    assert!(
        err[2].starts_with("    options allow, reject; waiting 2m; expires in "),
        "{}",
        err[2]
    );
    assert_eq!(
        err[3],
        format!("  answer: agent-hub task answer --id {TASK} --request {REQ} --option OPTION (its delegator, or a name in the hub's tasks.approvers)")
    );
    let out = cli(port, &tf, &["task", "list"]);
    out.assert_code(0);
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines.len(), 6, "{}", out.stdout);
    assert!(lines[1].starts_with(TASK) && lines[1].contains("running"));
    assert!(lines[2].starts_with(&format!("  request {REQ}: permission (execute)")));
    assert!(lines[3].starts_with("    options allow, reject; waiting 2m;"));
    assert!(lines[4].starts_with("task-2 ") && lines[4].contains("queued #1"));
    assert!(lines[5].starts_with("answer one: agent-hub task answer --id TASK"));
    assert!(!out.stdout.contains('\u{1b}') && !out.stdout.contains('\u{202e}'));
    server.join().unwrap();
}

/// The MCP tool: its result is the hub's payload; a refusal and an older hub are tool errors
/// in words a model can act on.
#[test]
fn the_mcp_task_answer_tool_answers_and_reports_refusals() {
    let (port, server) = scripted_hub(vec![
        vec![
            json!({"ok": {}}),
            json!({"task_answer": {"task": TASK, "request": REQ, "option": "reject", "state": "answered"}}),
        ],
        vec![
            json!({"ok": {}}),
            json!({"error": {"message": format!("invalid task_answer: request {REQ} is not open (answered)")}}),
        ],
        vec![
            json!({"ok": {}}),
            json!({"error": {"message": OLD_UNKNOWN_TAG}}),
        ],
    ]);
    let (_dir, tf) = token();
    let call = |id: u64, args: Value| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "task_answer", "arguments": args}})
        .to_string()
    };
    let input = [
        json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}).to_string(),
        call(1, json!({"task": TASK, "request": REQ, "option": "reject", "message": "not that file"})),
        call(2, json!({"task": TASK, "request": REQ, "option": "allow"})),
        call(3, json!({"task": TASK, "option": "allow"})),
        // Refused by the tool itself: no connection is made for it.
        call(4, json!({"task": TASK, "option": "allow", "requestId": REQ})),
    ]
    .join("\n")
        + "\n";
    let mut c = Command::new(CLIENT);
    c.args(["mcp", "--as", "alpha", "--token-file"])
        .arg(&tf)
        .args(["--port", &port.to_string()])
        .stdin(Stdio::piped());
    let out = run(c, Some(input.as_bytes()));
    out.assert_code(0);
    let replies: Vec<Value> = out
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(replies.len(), 5, "{}", out.stdout);
    let text = |i: usize| {
        replies[i]["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    assert_eq!(replies[1]["result"]["isError"], false);
    assert_eq!(
        serde_json::from_str::<Value>(&text(1)).unwrap(),
        json!({"task": TASK, "request": REQ, "option": "reject", "state": "answered"})
    );
    assert_eq!(replies[2]["result"]["isError"], true);
    assert_eq!(
        text(2),
        format!("task_answer failed: the hub refused it: invalid task_answer: request {REQ} is not open (answered)")
    );
    assert_eq!(replies[3]["result"]["isError"], true);
    assert!(
        text(3).starts_with("task_answer failed: the hub does not support it: this hub does not take answers to a task's requests"),
        "{}",
        text(3)
    );
    assert_eq!(replies[4]["result"]["isError"], true);
    assert!(
        text(4).contains("unknown argument \"requestId\""),
        "{}",
        text(4)
    );
    let seen = server.join().unwrap();
    assert_eq!(seen.len(), 3);
    assert_eq!(
        verb(&seen, 0),
        json!({"task_answer": {"task": TASK, "request": REQ, "option": "reject", "message": "not that file"}})
    );
}

/// Against a real hub (this one's `task_answer` refuses until the book holds requests open):
/// a hub without `[tasks]` says delegation is off, in the words of every task verb.
#[test]
fn a_real_hub_without_tasks_refuses_task_answer_in_the_task_verbs_words() {
    let hub = Hub::start();
    let mut c = Command::new(CLIENT);
    c.args(["task", "answer", "--as", "alpha", "--token-file"])
        .arg(hub.token_file("alpha"))
        .args([
            "--port",
            &hub.port.to_string(),
            "--id",
            TASK,
            "--option",
            "allow",
        ]);
    let out = run(c, None);
    out.assert_code(1);
    assert_eq!(
        out.stderr,
        "agent-hub: invalid task_answer: delegation is not enabled on this hub\n"
    );
}
