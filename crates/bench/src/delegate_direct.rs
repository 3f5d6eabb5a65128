//! Phase 7's floor: the same fake ACP agent started and spoken to directly by the bench, no
//! hub in between, so the delegation figures can be read as "the agent's own start and
//! handshake" plus "what the hub adds" (docs/performance.md "Delegation").
//!
//! Owns: spawning `fake-acp-agent end_turn 1` from the bench (std's `Command`, as the runner
//! does, in the temp dir's task folder), the ACP exchange the runner makes (`initialize`,
//! `session/new`, `session/prompt`, over stdio NDJSON, docs/acp.md), timed from just before
//! the spawn to its first `session/update` line read and to the prompt's answer read.
//! Refuses: everything the hub does around it (no store, no audit, no task book, no MCP
//! server, no credential file): that difference is the point.

use crate::base::Res;
use crate::stats::Latency;
use serde_json::json;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Per run: time to the first `session/update` read from the agent's stdout, and to the
/// `session/prompt` result read (the end of the turn).
pub(crate) struct DirectResult {
    pub(crate) runs: usize,
    pub(crate) to_first_update: Latency,
    pub(crate) to_end_turn: Latency,
}

pub(crate) fn direct_agent_runs(fake: &Path, cwd: &Path, runs: usize) -> Res<DirectResult> {
    let warmup = (runs / 10).clamp(1, 20);
    let (mut first, mut end) = (Vec::with_capacity(runs), Vec::with_capacity(runs));
    for i in 0..warmup + runs {
        let (f, e) = one_run(fake, cwd, i)?;
        if i >= warmup {
            first.push(f);
            end.push(e);
        }
    }
    Ok(DirectResult {
        runs,
        to_first_update: Latency::of(first),
        to_end_turn: Latency::of(end),
    })
}

fn one_run(fake: &Path, cwd: &Path, i: usize) -> Res<(Duration, Duration)> {
    let t0 = Instant::now();
    let mut child = Command::new(fake)
        .args(["end_turn", "1"])
        .current_dir(cwd)
        .env_clear()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("spawn {}: {e}", fake.display()))?;
    let result = converse(&mut child, cwd, i, t0);
    // Closing stdin ends the fake agent (it exits 0 at EOF); then reap it.
    drop(child.stdin.take());
    let status = child.wait().map_err(|e| format!("wait: {e}"))?;
    let times = result?;
    if !status.success() {
        return Err(format!("the fake agent exited {status} after its turn"));
    }
    Ok(times)
}

fn converse(child: &mut Child, cwd: &Path, i: usize, t0: Instant) -> Res<(Duration, Duration)> {
    let mut stdin = child.stdin.take().ok_or("no stdin")?;
    let mut out = BufReader::new(child.stdout.take().ok_or("no stdout")?);
    let cwd = cwd
        .to_str()
        .ok_or_else(|| format!("{} is not UTF-8", cwd.display()))?;
    let requests = [
        json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1,"clientCapabilities":{"fs":{"readTextFile":false,"writeTextFile":false},"terminal":false}}}),
        json!({"jsonrpc":"2.0","id":1,"method":"session/new","params":{"cwd":cwd,"mcpServers":[]}}),
        json!({"jsonrpc":"2.0","id":2,"method":"session/prompt","params":{"sessionId":"fake-session-1","prompt":[{"type":"text","text":format!("direct run {i}")}]}}),
    ];
    let mut line = String::new();
    let mut first_update = None;
    for (id, req) in requests.iter().enumerate() {
        writeln!(stdin, "{req}").map_err(|e| format!("write to the agent: {e}"))?;
        stdin
            .flush()
            .map_err(|e| format!("write to the agent: {e}"))?;
        loop {
            line.clear();
            let n = out
                .read_line(&mut line)
                .map_err(|e| format!("read from the agent: {e}"))?;
            if n == 0 {
                return Err("the fake agent closed its stdout mid-exchange".into());
            }
            match classify(&line)? {
                Line::Update => {
                    first_update.get_or_insert_with(|| t0.elapsed());
                }
                Line::Result(got) if got == id as u64 => break,
                Line::Result(got) => {
                    return Err(format!("the fake agent answered id {got}, expected {id}"))
                }
                Line::Other => {}
            }
        }
    }
    let end = t0.elapsed();
    let first = first_update.ok_or("the fake agent ended its turn without a session/update")?;
    Ok((first, end))
}

/// What one line from the agent is, as far as the floor needs to know.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Line {
    Update,
    /// A response (result or error) to our request with this id.
    Result(u64),
    Other,
}

/// An error response is an error here: the fake agent answers every request of this exchange.
pub(crate) fn classify(line: &str) -> Res<Line> {
    let v: serde_json::Value = serde_json::from_str(line.trim_end())
        .map_err(|e| format!("the fake agent wrote a non-JSON line: {e}"))?;
    if v["method"] == "session/update" {
        return Ok(Line::Update);
    }
    if v.get("method").is_none() {
        if let Some(id) = v["id"].as_u64() {
            if let Some(e) = v.get("error") {
                return Err(format!(
                    "the fake agent answered id {id} with an error: {e}"
                ));
            }
            return Ok(Line::Result(id));
        }
    }
    Ok(Line::Other)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_updates_results_errors_or_other() {
        let update =
            r#"{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{}}}"#;
        assert_eq!(classify(update).unwrap(), Line::Update);
        assert_eq!(
            classify("{\"jsonrpc\":\"2.0\",\"id\":2,\"result\":{\"stopReason\":\"end_turn\"}}\n")
                .unwrap(),
            Line::Result(2)
        );
        // A request from the agent carries an id too, but a method: not our answer.
        let req = r#"{"jsonrpc":"2.0","id":0,"method":"session/request_permission","params":{}}"#;
        assert_eq!(classify(req).unwrap(), Line::Other);
        let err = r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":"no"}}"#;
        assert!(classify(err).unwrap_err().contains("id 1"));
        assert!(classify("garbage").is_err());
    }
}
