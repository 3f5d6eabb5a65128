//! `fake-acp-agent --stamps PATH` (crates/test-fakes/src/bin/fake-acp-agent.rs), which `agent-hub-bench`'s
//! delegation phase reads (docs/performance.md "Delegation"): one JSON line per run, appended,
//! with the agent's start, `session/prompt` and first `session/update` on the wall clock and
//! the prompt's text; the scenario's own answers unchanged. The agent is spawned and spoken to
//! directly over stdio; every read has the agent's exit as its bound (stdin closed at the end).

use crate::common;

use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{SystemTime, UNIX_EPOCH};

fn wall_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

/// One run of `args` through initialize, session/new and session/prompt; returns every line
/// the agent wrote until the prompt's answer.
fn run(args: &[&str], prompt: &str) -> Vec<Value> {
    let mut child = Command::new(common::fakes::acp_agent())
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut seen = Vec::new();
    for (id, req) in [
        json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1}}),
        json!({"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":"/","mcpServers":[]}}),
        json!({"jsonrpc":"2.0","id":2,"method":"session/prompt","params":{"sessionId":"fake-session-1","prompt":[{"type":"text","text":prompt}]}}),
    ]
    .iter()
    .enumerate()
    {
        writeln!(stdin, "{req}").unwrap();
        stdin.flush().unwrap();
        loop {
            let mut line = String::new();
            assert!(out.read_line(&mut line).unwrap() > 0, "agent closed stdout");
            let v: Value = serde_json::from_str(&line).unwrap();
            let done = v.get("method").is_none() && v["id"] == json!(id);
            seen.push(v);
            if done {
                break;
            }
        }
    }
    drop(stdin);
    assert!(child.wait().unwrap().success());
    seen
}

#[test]
fn stamps_append_one_ordered_line_per_run_and_leave_the_scenario_unchanged() {
    let dir = std::env::temp_dir().join(format!(
        "fake-acp-stamps-{}-{}",
        std::process::id(),
        wall_ns()
    ));
    std::fs::create_dir(&dir).unwrap();
    let path = dir.join("stamps.jsonl");
    let p = path.to_str().unwrap();
    let before = wall_ns();
    let stamped = run(&["--stamps", p, "end_turn", "2"], "first \"quoted\" prompt");
    let plain = run(&["end_turn", "2"], "first \"quoted\" prompt");
    // The same conversation with and without the option.
    assert_eq!(stamped, plain);
    assert_eq!(
        stamped.last().unwrap()["result"]["stopReason"],
        "end_turn",
        "{stamped:?}"
    );
    run(&["--stamps", p, "stop", "max_tokens"], "second");
    let after = wall_ns();
    let text = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2, "{text}");
    for (line, prompt) in lines.iter().zip(["first \"quoted\" prompt", "second"]) {
        assert_eq!(line["prompt"], prompt);
        let ns = |k: &str| line[k].as_u64().unwrap_or_else(|| panic!("{k} in {line}"));
        // Wall-clock readings of this run (an hour's slack either way: a clock adjustment
        // meanwhile must not fail the test), in the order the agent met them.
        let hour = 3_600_000_000_000;
        assert!(
            ns("start_ns") > before - hour && ns("update_ns") < after + hour,
            "{line}"
        );
        assert!(ns("start_ns") <= ns("prompt_ns"), "{line}");
        assert!(ns("prompt_ns") <= ns("update_ns"), "{line}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
