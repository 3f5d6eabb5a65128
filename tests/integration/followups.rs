//! Follow-ups continue the session (issue 38 design §2; docs/delegation.md "Follow-ups")
//! through the real binaries: the hub keeps a task's session after a completed turn
//! (`tasks.session_keep_secs`), `task_prompt` sends it another turn, `--interrupt` cancels the
//! open one first, `task_close` and the keep window end it, and the task then settles with its
//! last turn's state. The fake agent's `remember` scenario answers each turn with its number
//! and the earlier prompts of its process, so one process (one `session/new`) taking three
//! prompts is seen in the text. Every wait is an await or a bounded poll, never a sleep.

use crate::delegate::{manifest, outcome, status, task_id, tasks_section, verb, wait_status, work};
use crate::harness::{Hub, Setup};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

const CLIENT: &str = env!("CARGO_BIN_EXE_agent-hub");

/// A hub that keeps sessions `keep` seconds, with `remember` (fake ACP), `fakehang` and a
/// headless agent; `extra` goes into `[tasks]`.
fn hub(keep: u64, extra: &str) -> Hub {
    let mut setup = Setup::new();
    std::fs::create_dir_all(setup.path("work")).unwrap();
    std::fs::create_dir_all(setup.path("manifests")).unwrap();
    for (name, scenario) in [("remember", &["remember"][..]), ("fakehang", &["hang"][..])] {
        std::fs::write(
            setup.path(&format!("manifests/{name}.toml")),
            manifest(name, scenario),
        )
        .unwrap();
    }
    std::fs::write(
        setup.path("manifests/hlclaude.toml"),
        crate::delegate_headless::manifest("hlclaude", &["claude-ok", "{prompt}"], "claude-json"),
    )
    .unwrap();
    let extra = format!("session_keep_secs = {keep}\npermission = \"allow\"\n{extra}");
    let tasks = tasks_section(&setup, &extra);
    setup.config_text = Some(format!("{}{tasks}", setup.generated_config()));
    setup.start()
}

fn delegate(hub: &Hub, agent: &str, prompt: &str, extra: Value) -> String {
    let mut req = json!({"agent": agent, "cwd": work(hub), "prompt": prompt});
    for (k, v) in extra.as_object().unwrap() {
        req[k] = v.clone();
    }
    task_id(&verb(hub, "alpha", &json!({ "delegate": req })))
}

fn prompt(hub: &Hub, name: &str, task: &str, text: &str, interrupt: bool) -> Value {
    let mut p = json!({"task": task, "prompt": text});
    if interrupt {
        p["interrupt"] = json!(true);
    }
    verb(hub, name, &json!({ "task_prompt": p }))
}

fn error(reply: &Value) -> String {
    reply["error"]["message"]
        .as_str()
        .unwrap_or_else(|| panic!("expected an error, got {reply}"))
        .to_owned()
}

/// `agent-hub task <sub> --as alpha …`: (exit code, stdout).
fn task_cli(hub: &Hub, sub: &str, rest: &[&str]) -> (i32, String) {
    let out = Command::new(CLIENT)
        .args(["task", sub, "--as", "alpha", "--token-file"])
        .arg(hub.token_file("alpha"))
        .args(["--port", &hub.port.to_string()])
        .args(rest)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).trim().to_owned(),
    )
}

#[test]
fn two_follow_ups_continue_one_session_each_turn_with_its_own_outcome() {
    let hub = hub(600, "");
    let task = delegate(&hub, "remember", "first", json!({}));
    let one = outcome(&hub, "alpha", &task);
    assert_eq!(one["turn"], 1, "{one}");
    assert_eq!(one["state"], "completed");
    assert_eq!(one["session"], "kept");
    assert!(one["keptUntil"].is_string(), "{one}");
    assert_eq!(one["text"], "turn 1; earlier: -");
    let s = status(&hub, "alpha", &task);
    assert_eq!(s["state"], "idle", "{s}");
    assert_eq!(s["session"]["state"], "kept");

    let r = prompt(&hub, "alpha", &task, "second", false);
    assert_eq!(
        r["task_prompt"],
        json!({"task": task, "turn": 2, "state": "running"})
    );
    let two = outcome(&hub, "alpha", &task);
    assert_eq!(two["turn"], 2);
    assert_eq!(
        two["text"], "turn 2; earlier: first",
        "the same process remembers"
    );

    // The CLI sends the third.
    let (code, out) = task_cli(&hub, "prompt", &["--id", &task, "--prompt", "third"]);
    assert_eq!((code, out.as_str()), (0, "turn 3"));
    let three = outcome(&hub, "alpha", &task);
    assert_eq!(three["text"], "turn 3; earlier: first | second", "{three}");

    let s = status(&hub, "alpha", &task);
    assert_eq!(s["turn"], 3);
    let turns: Vec<(u64, &str, &str)> = s["turns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["turn"].as_u64().unwrap(),
                t["state"].as_str().unwrap(),
                t["how"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        turns,
        [
            (1, "completed", "prompt"),
            (2, "completed", "prompt"),
            (3, "completed", "prompt")
        ]
    );

    // task close: the kept session ends; the task settles with its last turn's state, and no
    // further envelope comes.
    let (code, out) = task_cli(&hub, "close", &["--id", &task]);
    assert_eq!((code, out.as_str()), (0, "completed"));
    let s = status(&hub, "alpha", &task);
    assert_eq!(s["state"], "completed");
    assert_eq!(s["session"]["state"], "closed");
    let r = prompt(&hub, "alpha", &task, "fourth", false);
    assert_eq!(
        error(&r),
        format!("invalid task_prompt: {task} has no session any more (it ended completed)")
    );
    let closed = hub.wait_audit("task_session_closed", |a| {
        a.iter().any(|e| e["event"] == "task_session_closed")
    });
    let closed: Vec<&Value> = closed
        .iter()
        .filter(|e| e["event"] == "task_session_closed")
        .collect();
    assert_eq!(closed[0]["why"], "closed");
    assert_eq!(hub.audit_events("task_turn_started").len(), 2);
    let audit = std::fs::read_to_string(hub.audit_path()).unwrap();
    assert!(!audit.contains("third"), "no prompt in the audit log");
}

#[test]
fn an_interrupt_cancels_the_open_turn_then_sends_the_follow_up() {
    let hub = hub(600, "");
    let task = delegate(&hub, "remember", "HANG on this", json!({}));
    // The agent has the prompt (its first update came), so the interrupt cancels a turn
    // under way rather than one whose prompt was never sent.
    wait_status(&hub, "alpha", &task, |s| {
        s["progress"]["updates"].as_u64() >= Some(1)
    });
    let r = prompt(&hub, "alpha", &task, "instead", false);
    assert_eq!(
        error(&r),
        format!("invalid task_prompt: {task} has turn 1 open; wait for its outcome or send it with interrupt")
    );
    let (code, out) = task_cli(
        &hub,
        "prompt",
        &["--id", &task, "--prompt", "instead", "--interrupt"],
    );
    assert_eq!((code, out.as_str()), (0, "turn 2"));
    let one = outcome(&hub, "alpha", &task);
    assert_eq!(
        (one["turn"].as_u64(), one["state"].as_str()),
        (Some(1), Some("cancelled")),
        "{one}"
    );
    assert_eq!(one["reason"], "interrupted by a follow-up (turn 2)");
    assert_eq!(one["session"], "kept");
    let two = outcome(&hub, "alpha", &task);
    assert_eq!(two["turn"], 2);
    assert_eq!(two["state"], "completed");
    assert_eq!(two["text"], "turn 2; earlier: HANG on this");
    let s = status(&hub, "alpha", &task);
    assert_eq!(s["turns"][1]["how"], "interrupt", "{s}");
}

#[test]
fn the_keep_window_passes_and_the_task_settles_with_its_last_turns_state() {
    let hub = hub(600, "");
    // keepSecs narrows the hub's window; 601 is past it.
    let r = verb(
        &hub,
        "alpha",
        &json!({"delegate": {"agent": "remember", "cwd": work(&hub), "prompt": "x", "keepSecs": 601}}),
    );
    assert_eq!(
        error(&r),
        "invalid delegate: keepSecs must be 0..=600 (tasks.session_keep_secs)"
    );
    let task = delegate(&hub, "remember", "only", json!({"keepSecs": 1}));
    let one = outcome(&hub, "alpha", &task);
    assert_eq!(one["session"], "kept");
    let s = wait_status(&hub, "alpha", &task, |s| s["state"] != "idle");
    assert_eq!(s["state"], "completed", "{s}");
    assert_eq!(s["stopReason"], "end_turn");
    assert_eq!(s["session"]["state"], "closed");
    hub.wait_audit("task_session_closed keep_expired", |a| {
        a.iter()
            .any(|e| e["event"] == "task_session_closed" && e["why"] == "keep_expired")
    });
}

#[test]
fn without_a_keep_window_a_task_ends_with_its_first_turn_as_before() {
    let hub = hub(0, "");
    let task = delegate(&hub, "remember", "once", json!({}));
    let one = outcome(&hub, "alpha", &task);
    assert_eq!(
        (one["turn"].as_u64(), one["session"].as_str()),
        (Some(1), Some("closed"))
    );
    assert!(one.get("keptUntil").is_none());
    let r = prompt(&hub, "alpha", &task, "more", false);
    assert_eq!(
        error(&r),
        format!("invalid task_prompt: {task} has no session any more (it ended completed)")
    );
}

/// The refusals a hostile or mistaken delegator meets: another agent's task, a queued one,
/// a headless one, past `max_turns`; none reaches the agent.
#[test]
fn follow_ups_are_refused_with_the_designs_words() {
    let hub = hub(600, "max_turns = 2\nmax_concurrent = 1");
    let task = delegate(&hub, "remember", "first", json!({}));
    outcome(&hub, "alpha", &task);
    // Another roster agent sees nothing of it; a made-up id is the same.
    let r = prompt(&hub, "beta", &task, "take over", false);
    assert_eq!(error(&r), "unknown task");
    let r = prompt(
        &hub,
        "alpha",
        "task-00000000000000000000000000000000",
        "x",
        false,
    );
    assert_eq!(error(&r), "unknown task");
    let r = verb(&hub, "beta", &json!({"task_close": {"task": task}}));
    assert_eq!(error(&r), "unknown task");
    // The second turn is the last one max_turns allows.
    prompt(&hub, "alpha", &task, "second", false);
    outcome(&hub, "alpha", &task);
    let r = prompt(&hub, "alpha", &task, "third", false);
    assert_eq!(
        error(&r),
        format!("invalid task_prompt: {task} has had tasks.max_turns (2) turns")
    );
    // Queued: the one slot is free again (idle holds none), so hold it with a hanging task.
    let busy = delegate(&hub, "fakehang", "hold the slot", json!({}));
    wait_status(&hub, "alpha", &busy, |s| s["state"] == "running");
    let queued = delegate(&hub, "remember", "later", json!({}));
    let r = prompt(&hub, "alpha", &queued, "x", false);
    assert_eq!(
        error(&r),
        format!("invalid task_prompt: {queued} is queued; its first turn has not ended")
    );
    verb(&hub, "alpha", &json!({"cancel": {"task": busy}}));
    verb(&hub, "alpha", &json!({"cancel": {"task": queued}}));
    outcome(&hub, "alpha", &busy);
    // Headless: one run, one turn.
    let hl = delegate(&hub, "hlclaude", "headless", json!({}));
    let body = outcome(&hub, "alpha", &hl);
    assert_eq!(body["session"], "closed", "{body}");
    let r = prompt(&hub, "alpha", &hl, "again", false);
    assert_eq!(
        error(&r),
        format!("invalid task_prompt: {hl} ran headless; only an ACP session takes follow-ups")
    );
}

/// `agent-hub mcp` as alpha: initialize, then one `tools/call` per line; the replies.
fn mcp_calls(hub: &Hub, calls: &[(&str, Value)]) -> Vec<Value> {
    let mut child = Command::new(CLIENT)
        .args(["mcp", "--as", "alpha", "--token-file"])
        .arg(hub.token_file("alpha"))
        .args(["--port", &hub.port.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut read = || -> Value {
        serde_json::from_str(&lines.next().expect("mcp answered").unwrap()).unwrap()
    };
    writeln!(stdin, "{}", json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}})).unwrap();
    read();
    writeln!(
        stdin,
        "{}",
        json!({"jsonrpc":"2.0","method":"notifications/initialized"})
    )
    .unwrap();
    let mut out = Vec::new();
    for (i, (tool, args)) in calls.iter().enumerate() {
        writeln!(stdin, "{}", json!({"jsonrpc":"2.0","id":i + 1,"method":"tools/call","params":{"name":tool,"arguments":args}})).unwrap();
        stdin.flush().unwrap();
        out.push(read()["result"].clone());
    }
    drop(stdin);
    let _ = child.wait();
    out
}

#[test]
fn mcp_task_prompt_and_task_close() {
    let hub = hub(600, "");
    let task = delegate(&hub, "remember", "first", json!({}));
    outcome(&hub, "alpha", &task);
    let r = mcp_calls(
        &hub,
        &[("task_prompt", json!({"task": task, "prompt": "via mcp"}))],
    );
    assert_eq!(r[0]["isError"], false, "{}", r[0]);
    let text: Value = serde_json::from_str(r[0]["content"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(text["turn"], 2);
    let two = outcome(&hub, "alpha", &task);
    assert_eq!(two["text"], "turn 2; earlier: first");
    let r = mcp_calls(
        &hub,
        &[
            (
                "task_prompt",
                json!({"task": task, "prompt": "x", "turn": 9}),
            ),
            ("task_close", json!({"task": task})),
            ("task_prompt", json!({"task": task, "prompt": "after"})),
        ],
    );
    assert_eq!(
        r[0]["isError"], true,
        "an unknown argument is refused: {}",
        r[0]
    );
    assert_eq!(r[1]["isError"], false, "{}", r[1]);
    assert!(r[1]["content"][0]["text"]
        .as_str()
        .unwrap()
        .contains("\"completed\""));
    assert_eq!(r[2]["isError"], true);
    assert!(
        r[2]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("has no session any more"),
        "{}",
        r[2]
    );
}
