//! The ACP session against a real process: `fake-acp-agent` (crates/test-fakes/src/bin/fake-acp-agent.rs)
//! driven through `agent_hub_proto::acp::Session` by a minimal blocking driver (spawn in its own
//! process group, write the session's lines, feed it stdout bytes, carry out its events).
//! This is a smoke test of the session's contract with real pipes; the behaviour itself is
//! tested in crates/proto/src/acp/tests on a virtual clock. Nothing sleeps or polls: the driver waits on
//! one channel (stdout bytes, EOF, the reaped exit) until the session's next deadline, and
//! every run has an overall deadline.

use crate::common;

use agent_hub_proto::acp::{
    CancelEnd, Event, ExitStatus, Failure, McpServer, Outcome, PermissionPolicy, Refusal, Session,
    SessionConfig, Signal, Status, Step, StopReason,
};
use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const HUB: &str = env!("CARGO_BIN_EXE_agent-hub");
const DEADLINE: Duration = Duration::from_secs(30);

/// Everything the driver waits for, on one channel.
enum Msg {
    Bytes(Vec<u8>),
    Eof,
    Exit(std::process::ExitStatus),
}

/// What one run produced.
struct Run {
    outcome: Outcome,
    signals: Vec<Signal>,
    exit: Option<ExitStatus>,
}

struct Opts {
    cancel_at_first_progress: bool,
}

/// Runs `fake-acp-agent ARGS` under `cfg` until the session says `Finished`: the IO layer a
/// runner would have, reduced to blocking pipes and two threads (stdout reader, reaper).
fn run(args: &[&str], env: &[(&str, &str)], cfg: SessionConfig, opts: Opts) -> Run {
    let mut child = Command::new(common::fakes::acp_agent())
        .args(args)
        .envs(env.iter().copied())
        .current_dir(&cfg.cwd)
        .process_group(0)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn fake-acp-agent");
    let pgid = child.id() as i32;
    let mut stdin = child.stdin.take();
    let mut stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    let out_tx = tx.clone();
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match stdout.read(&mut buf) {
                Ok(0) | Err(_) => {
                    let _ = out_tx.send(Msg::Eof);
                    return;
                }
                Ok(n) => {
                    if out_tx.send(Msg::Bytes(buf[..n].to_vec())).is_err() {
                        return;
                    }
                }
            }
        }
    });
    std::thread::spawn(move || {
        if let Ok(st) = child.wait() {
            let _ = tx.send(Msg::Exit(st));
        }
    });
    let started = Instant::now();
    let mut s = Session::new(cfg, started).expect("config");
    let mut outcome = None;
    let mut signals = Vec::new();
    let mut exit = None;
    let mut cancelled = false;
    'run: loop {
        assert!(
            started.elapsed() < DEADLINE,
            "the session did not finish within {DEADLINE:?}"
        );
        // Lines first, then events (the session's driving contract); repeat while acting on
        // an event (a cancel) queued more lines.
        loop {
            while let Some(line) = s.poll_transmit() {
                if let Some(w) = stdin.as_mut() {
                    // A write to an agent that died fails; the session learns it from the exit.
                    let _ = w.write_all(line.as_bytes());
                    let _ = w.write_all(b"\n");
                    let _ = w.flush();
                }
            }
            let mut again = false;
            while let Some(ev) = s.poll_event() {
                match ev {
                    Event::CloseStdin => stdin = None,
                    Event::Signal(sig) => {
                        let n = match sig {
                            Signal::Term => libc::SIGTERM,
                            Signal::Kill => libc::SIGKILL,
                        };
                        // SAFETY: kill(2) on the group this test created; ESRCH once empty.
                        unsafe { libc::kill(-pgid, n) };
                        signals.push(sig);
                    }
                    Event::Outcome(o) => {
                        assert!(outcome.is_none(), "a second outcome");
                        outcome = Some(o);
                    }
                    // These sessions are not kept (keep_session is false).
                    Event::Idle { .. } => panic!("a session that does not keep went idle"),
                    Event::Progress(_) if opts.cancel_at_first_progress && !cancelled => {
                        cancelled = true;
                        assert!(s.cancel(Instant::now()));
                        again = true;
                    }
                    // No test here runs under `ask`: nothing is held.
                    Event::Progress(_)
                    | Event::Log(_)
                    | Event::Request(_)
                    | Event::Preapproved { .. } => {}
                    Event::Finished => break 'run,
                }
            }
            if !again {
                break;
            }
        }
        let now = Instant::now();
        let wait = s
            .poll_timeout()
            .map_or(DEADLINE, |t| t.saturating_duration_since(now));
        match rx.recv_timeout(wait) {
            Ok(Msg::Bytes(b)) => s.handle_input(&b, Instant::now()),
            Ok(Msg::Eof) => s.handle_eof(Instant::now()),
            Ok(Msg::Exit(st)) => {
                exit = Some(ExitStatus::from(st));
                s.handle_exit(ExitStatus::from(st), Instant::now());
            }
            Err(mpsc::RecvTimeoutError::Timeout) => s.handle_timeout(Instant::now()),
            Err(mpsc::RecvTimeoutError::Disconnected) => panic!("both IO threads ended"),
        }
    }
    Run {
        outcome: outcome.expect("an outcome before Finished"),
        signals,
        exit,
    }
}

fn cfg() -> SessionConfig {
    SessionConfig::new(std::env::temp_dir(), "Say hello.", 20_000)
}

fn plain() -> Opts {
    Opts {
        cancel_at_first_progress: false,
    }
}

#[test]
fn end_turn_with_chunks_tool_call_and_usage() {
    let dir = common::TempDir::new("acp");
    let record = dir.0.join("received.jsonl");
    let r = run(
        &["end_turn", "2"],
        &[("FAKE_ACP_RECORD", record.to_str().unwrap())],
        cfg(),
        plain(),
    );
    assert_eq!(
        r.outcome.status,
        Status::Completed {
            stop_reason: StopReason::EndTurn
        }
    );
    assert_eq!(r.outcome.text, "chunk 1 chunk 2 ");
    assert_eq!(
        r.outcome.meter.tokens.as_ref().unwrap().value.total_tokens,
        Some(7)
    );
    assert_eq!(r.outcome.progress.tool_calls.completed, 1);
    assert_eq!(r.outcome.progress.context.unwrap().used, None);
    assert_eq!(
        r.outcome.progress.agent.as_ref().unwrap().name,
        "fake-acp-agent"
    );
    // It exits on stdin EOF: no TERM needed, one group kill for stragglers.
    assert_eq!(r.exit, Some(ExitStatus::code(0)));
    assert_eq!(r.signals, [Signal::Kill]);
    // What the agent received, in order.
    let got: Vec<serde_json::Value> = std::fs::read_to_string(&record)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let methods: Vec<&str> = got.iter().filter_map(|v| v["method"].as_str()).collect();
    assert_eq!(methods, ["initialize", "session/new", "session/prompt"]);
    assert_eq!(got[0]["id"], 0);
    assert_eq!(got[0]["params"]["clientInfo"]["name"], "agent-hub");
    assert_eq!(
        got[1]["params"]["cwd"],
        std::env::temp_dir().to_str().unwrap()
    );
    assert_eq!(got[2]["params"]["prompt"][0]["text"], "Say hello.");
}

#[test]
fn stop_reasons_from_a_process() {
    for reason in ["max_tokens", "refusal", "max_turn_requests"] {
        let r = run(&["stop", reason], &[], cfg(), plain());
        assert_eq!(
            r.outcome.status.to_string(),
            format!("completed ({reason})")
        );
    }
}

#[test]
fn permission_under_both_policies() {
    let r = run(&["permission"], &[], cfg(), plain());
    assert!(
        r.outcome.text.ends_with("permission: reject"),
        "{}",
        r.outcome.text
    );
    let mut c = cfg();
    c.permission = PermissionPolicy::Allow;
    let r = run(&["permission"], &[], c, plain());
    assert!(
        r.outcome.text.ends_with("permission: allow"),
        "{}",
        r.outcome.text
    );
    assert_eq!(r.outcome.progress.permissions.allowed, 1);
}

#[test]
fn cancel_a_hanging_prompt() {
    let r = run(
        &["hang"],
        &[],
        cfg(),
        Opts {
            cancel_at_first_progress: true,
        },
    );
    assert_eq!(
        r.outcome.status,
        Status::Cancelled {
            end: CancelEnd::Stopped(StopReason::Cancelled)
        }
    );
    assert_eq!(r.outcome.text, "working on it");
}

#[test]
fn a_deaf_agent_times_out() {
    // The budget must outlast spawning and the handshake even on a loaded machine, or the
    // outcome would be `timed_out {before_prompt}`; the deaf prompt then takes the rest.
    let mut c = cfg();
    c.task_timeout_ms = 3_000;
    c.limits.cancel_grace_ms = 200;
    let r = run(&["deaf"], &[], c, plain());
    assert_eq!(
        r.outcome.status,
        Status::TimedOut {
            end: CancelEnd::NoAnswer { waited_ms: 200 }
        }
    );
}

#[test]
fn a_crash_mid_prompt() {
    let r = run(&["crash", "7"], &[], cfg(), plain());
    assert_eq!(
        r.outcome.status,
        Status::Failed(Failure::Exited {
            during: Step::Prompt,
            status: Some(ExitStatus::code(7))
        })
    );
    assert_eq!(r.outcome.text, "about to crash");
}

#[test]
fn not_logged_in_is_refused() {
    let r = run(&["not_logged_in"], &[], cfg(), plain());
    assert!(matches!(
        r.outcome.status,
        Status::Refused(Refusal::NotLoggedIn { .. })
    ));
}

#[test]
fn an_agent_that_ignores_eof_is_terminated() {
    let mut c = cfg();
    c.limits.stdin_grace_ms = 200;
    let r = run(&["ignore_eof"], &[], c, plain());
    assert_eq!(r.outcome.status.name(), "completed");
    assert_eq!(r.signals.first(), Some(&Signal::Term));
    assert_eq!(r.exit.and_then(|e| e.signal), Some(libc::SIGTERM));
}

#[test]
fn garbage_and_huge_lines_fail() {
    let r = run(&["garbage", "100"], &[], cfg(), plain());
    assert!(
        r.outcome
            .status
            .to_string()
            .starts_with("failed: agent spoke garbage: 17 malformed lines"),
        "{}",
        r.outcome.status
    );
    let mut c = cfg();
    c.limits.max_line_bytes = 1 << 20;
    c.limits.stdin_grace_ms = 100;
    let r = run(&["huge_line", "4"], &[], c, plain());
    assert_eq!(
        r.outcome.status.to_string(),
        "failed: agent spoke garbage: a line longer than 1048576 bytes (max_line_bytes)"
    );
}

#[test]
fn the_agent_calls_the_hubs_mcp_server_from_session_new() {
    // `agent-hub mcp` answers whoami without a hub, so no server is needed for this one.
    let dir = common::TempDir::new("acp-mcp");
    let token = dir.0.join("task.token");
    common::write_private(&token, "tok-task-1-abcdef\n");
    let mut c = cfg();
    c.mcp_servers.push(McpServer {
        name: "agent-hub".into(),
        command: HUB.into(),
        args: vec![
            "mcp".into(),
            "--as".into(),
            "task-1".into(),
            "--token-file".into(),
            token.to_str().unwrap().into(),
            "--port".into(),
            "1".into(),
        ],
        env: vec![],
    });
    let r = run(&["mcp_call"], &[], c, plain());
    assert_eq!(r.outcome.status.name(), "completed");
    assert_eq!(
        r.outcome.text,
        r#"tool whoami: {"hub":"127.0.0.1:1","name":"task-1"}"#
    );
}
