//! The ACP runner (crates/server/src/runner, docs/acp.md "The runner") driving the real `fake-acp-agent`
//! (crates/test-fakes/src/bin/fake-acp-agent.rs): spawn, pipes, deadlines, cancel, the shutdown escalation to
//! SIGKILL of the whole process group, reaping, hostile output, spawn failures, and the
//! task's credential file. Nothing sleeps to wait: every wait is on the runner's event
//! channel, or a poll of /proc, with a generous deadline.

use crate::common;

use agent_hub_proto::acp::{
    CancelEnd, ExitStatus, Failure, Level, McpServer, Outcome, PermissionPolicy, Refusal,
    SessionConfig, Signal, Status, Step, StopReason,
};
use agent_hub_server::runner::{self, TaskCredential, TaskEnd, TaskEvent, TaskHandle, TaskSpec};
use std::ffi::OsString;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const HUB: &str = env!("CARGO_BIN_EXE_agent-hub");
const DEADLINE: Duration = Duration::from_secs(60);

pub(crate) fn cfg() -> SessionConfig {
    SessionConfig::new(std::env::temp_dir(), "Say hello.", 30_000)
}

pub(crate) fn spec(args: &[&str], session: SessionConfig) -> TaskSpec {
    let mut argv: Vec<OsString> = vec![common::fakes::acp_agent().into()];
    argv.extend(args.iter().map(OsString::from));
    TaskSpec {
        argv,
        env: vec![("PATH".into(), "/usr/bin:/bin".into())],
        session,
        secrets: Vec::new(),
        credential: None,
        sandbox: None,
    }
}

pub(crate) fn with_env(mut s: TaskSpec, k: &str, v: &str) -> TaskSpec {
    s.env.push((k.into(), v.into()));
    s
}

/// A started task and a count of its wake calls.
pub(crate) struct Task {
    pub(crate) handle: TaskHandle,
    wakes: Arc<AtomicUsize>,
    pub(crate) seen: Vec<TaskEvent>,
}

pub(crate) fn start(spec: TaskSpec) -> Task {
    let wakes = Arc::new(AtomicUsize::new(0));
    let w = Arc::clone(&wakes);
    let handle = runner::start(
        spec,
        Box::new(move || {
            w.fetch_add(1, Ordering::SeqCst);
        }),
    );
    Task {
        handle,
        wakes,
        seen: Vec::new(),
    }
}

impl Task {
    /// Waits for the next event matching `want`, keeping every event seen.
    pub(crate) fn until(&mut self, what: &str, want: impl Fn(&TaskEvent) -> bool) -> TaskEvent {
        let end = Instant::now() + DEADLINE;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            let ev = self.handle.next_event(left).unwrap_or_else(|e| {
                panic!("no {what} within {DEADLINE:?} ({e}); seen {:?}", self.seen)
            });
            self.seen.push(ev.clone());
            if want(&ev) {
                return ev;
            }
        }
    }

    fn pid(&mut self) -> u32 {
        match self.until("Started", |e| matches!(e, TaskEvent::Started { .. })) {
            TaskEvent::Started { pid } => pid,
            _ => unreachable!(),
        }
    }

    /// Runs to `Ended` and checks the event contract: `Started` first (if at all), exactly
    /// one `Outcome`, `Ended` last, nothing after it, one wake per event.
    pub(crate) fn finish(mut self) -> Run {
        self.until("Ended", |e| matches!(e, TaskEvent::Ended(_)));
        assert!(self.handle.has_ended());
        let outcomes: Vec<&Outcome> = self
            .seen
            .iter()
            .filter_map(|e| match e {
                TaskEvent::Outcome(o) => Some(o),
                _ => None,
            })
            .collect();
        assert_eq!(outcomes.len(), 1, "exactly one outcome: {:?}", self.seen);
        let outcome = outcomes[0].clone();
        let starts = self
            .seen
            .iter()
            .filter(|e| matches!(e, TaskEvent::Started { .. }))
            .count();
        assert!(starts <= 1);
        if starts == 1 {
            assert!(matches!(self.seen[0], TaskEvent::Started { .. }));
        }
        let Some(TaskEvent::Ended(end)) = self.seen.last().cloned() else {
            unreachable!()
        };
        // The channel stays open (the handle holds it) but nothing more arrives; the wake
        // for `Ended` is counted right after its send, so allow it a moment.
        let t = Instant::now() + DEADLINE;
        while self.wakes.load(Ordering::SeqCst) < self.seen.len() && Instant::now() < t {
            std::thread::yield_now();
        }
        assert_eq!(self.wakes.load(Ordering::SeqCst), self.seen.len());
        assert!(self.handle.try_event().is_none(), "an event after Ended");
        let logs = self
            .seen
            .iter()
            .filter_map(|e| match e {
                TaskEvent::Log(l) => Some((l.level, l.message.clone())),
                _ => None,
            })
            .collect();
        Run {
            outcome,
            end,
            logs,
            pid: self.handle.pid(),
        }
    }
}

pub(crate) struct Run {
    pub(crate) outcome: Outcome,
    pub(crate) end: TaskEnd,
    pub(crate) logs: Vec<(Level, String)>,
    pub(crate) pid: Option<u32>,
}

impl Run {
    pub(crate) fn logged(&self, part: &str) -> bool {
        self.logs.iter().any(|(_, m)| m.contains(part))
    }
}

fn run(spec: TaskSpec) -> Run {
    start(spec).finish()
}

/// Processes of group `pgid` that are alive (zombies awaiting their reaper count as gone:
/// they run nothing).
fn live_members(pgid: u32) -> Vec<u32> {
    let mut live = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // pid (comm) state ppid pgrp ...; comm may hold spaces, so split after the last ')'.
        let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        if fields.len() > 2 && fields[2] == pgid.to_string() && fields[0] != "Z" {
            live.push(pid);
        }
    }
    live
}

fn wait_group_gone(pgid: u32) {
    let end = Instant::now() + DEADLINE;
    loop {
        let live = live_members(pgid);
        if live.is_empty() {
            return;
        }
        assert!(
            Instant::now() < end,
            "group {pgid} still has live members {live:?}"
        );
        std::thread::yield_now();
    }
}

fn wait_until(what: &str, cond: impl Fn() -> bool) {
    let end = Instant::now() + DEADLINE;
    while !cond() {
        assert!(
            Instant::now() < end,
            "{what} did not happen within {DEADLINE:?}"
        );
        std::thread::yield_now();
    }
}

#[test]
fn end_turn_completes_with_the_final_text() {
    let dir = common::TempDir::new("runner");
    let record = dir.0.join("received.jsonl");
    let r = run(with_env(
        spec(&["end_turn", "2"], cfg()),
        "FAKE_ACP_RECORD",
        record.to_str().unwrap(),
    ));
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
    // It exits on stdin EOF; one group kill for stragglers, as the session asks.
    assert_eq!(r.end.exit, Some(ExitStatus::code(0)));
    assert_eq!(r.end.signals, [Signal::Kill]);
    assert!(r.logged("agent started (pid"));
    let sent: Vec<serde_json::Value> = std::fs::read_to_string(&record)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let methods: Vec<&str> = sent.iter().filter_map(|v| v["method"].as_str()).collect();
    assert_eq!(methods, ["initialize", "session/new", "session/prompt"]);
    wait_group_gone(r.pid.unwrap());
}

#[test]
fn permission_requests_under_reject_and_allow() {
    let r = run(spec(&["permission"], cfg()));
    assert!(
        r.outcome.text.ends_with("permission: reject"),
        "{}",
        r.outcome.text
    );
    assert!(r.logged("(policy reject)"), "{:?}", r.logs);
    assert_eq!(r.outcome.progress.permissions.allowed, 0);
    let mut c = cfg();
    c.permission = PermissionPolicy::Allow;
    let r = run(spec(&["permission"], c));
    assert!(
        r.outcome.text.ends_with("permission: allow"),
        "{}",
        r.outcome.text
    );
    assert!(r.logged("(policy allow)"), "{:?}", r.logs);
    assert_eq!(r.outcome.progress.permissions.allowed, 1);
}

/// The agent starts in a mode where it decides tool calls itself (Claude Code's adapter 0.101
/// starts in `auto`): the session puts it in its asking mode before the prompt, so under
/// `reject` the hub is asked and the tool call is refused (docs/acp.md "Session modes").
#[test]
fn an_agent_starting_unasked_is_switched_and_reject_refuses_its_tool_call() {
    for variant in ["both", "modes"] {
        let dir = common::TempDir::new("runner-mode");
        let mark = dir.0.join("tool-ran");
        let record = dir.0.join("received.jsonl");
        let s = with_env(
            spec(&["auto_mode", variant], cfg()),
            "FAKE_ACP_TOOL_MARK",
            mark.to_str().unwrap(),
        );
        let r = run(with_env(s, "FAKE_ACP_RECORD", record.to_str().unwrap()));
        assert_eq!(
            r.outcome.status,
            Status::Completed {
                stop_reason: StopReason::EndTurn
            },
            "{variant}"
        );
        assert_eq!(
            r.outcome.text, "tool not run: permission reject",
            "{variant}"
        );
        assert!(!mark.exists(), "{variant}: the tool ran");
        let p = r.outcome.progress.permissions;
        assert_eq!((p.asked, p.rejected), (1, 1), "{variant}");
        assert_eq!(r.outcome.progress.mode.as_deref(), Some("default"));
        assert!(r.logged("switching to default"), "{:?}", r.logs);
        let methods: Vec<String> = std::fs::read_to_string(&record)
            .unwrap()
            .lines()
            .filter_map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                v["method"].as_str().map(str::to_owned)
            })
            .collect();
        let set = if variant == "modes" {
            "session/set_mode"
        } else {
            "session/set_config_option"
        };
        assert_eq!(
            methods,
            ["initialize", "session/new", set, "session/prompt"],
            "{variant}"
        );
    }
}

/// Without the switch the same agent runs its tool unasked: what the hub prevents under
/// `reject`, and allows (with a warning) under an explicit `allow` when no asking mode exists.
#[test]
fn an_agent_that_cannot_be_made_to_ask_is_refused_unless_the_policy_is_allow() {
    for variant in ["no_ask", "set_fails"] {
        let dir = common::TempDir::new("runner-mode");
        let mark = dir.0.join("tool-ran");
        let r = run(with_env(
            spec(&["auto_mode", variant], cfg()),
            "FAKE_ACP_TOOL_MARK",
            mark.to_str().unwrap(),
        ));
        match &r.outcome.status {
            Status::Refused(why @ Refusal::Unasked { .. }) => {
                assert!(why.to_string().contains("permission = \"reject\""), "{why}")
            }
            other => panic!("{variant}: expected refused, got {other:?}"),
        }
        assert!(!mark.exists(), "{variant}: the tool ran");
        wait_group_gone(r.pid.unwrap());

        let mut c = cfg();
        c.permission = PermissionPolicy::Allow;
        let r = run(with_env(
            spec(&["auto_mode", variant], c),
            "FAKE_ACP_TOOL_MARK",
            mark.to_str().unwrap(),
        ));
        assert_eq!(r.outcome.text, "tool ran unasked in mode auto", "{variant}");
        assert!(mark.exists(), "{variant}");
        assert!(r.logged("running it anyway"), "{:?}", r.logs);
        assert!(
            r.logs
                .iter()
                .any(|(l, m)| *l == Level::Warn && m.contains("without asking")),
            "{:?}",
            r.logs
        );
    }
    // Switched to its asking mode, the agent asks and `allow` lets the tool run.
    let dir = common::TempDir::new("runner-mode");
    let mark = dir.0.join("tool-ran");
    let mut c = cfg();
    c.permission = PermissionPolicy::Allow;
    let r = run(with_env(
        spec(&["auto_mode"], c),
        "FAKE_ACP_TOOL_MARK",
        mark.to_str().unwrap(),
    ));
    assert_eq!(r.outcome.text, "tool ran after permission allow");
    assert!(mark.exists());
}

#[test]
fn a_hanging_prompt_times_out_through_session_cancel() {
    let dir = common::TempDir::new("runner-hang");
    let record = dir.0.join("received.jsonl");
    // The budget must outlast spawning and the handshake on a loaded machine.
    let mut c = cfg();
    c.task_timeout_ms = 5_000;
    let r = run(with_env(
        spec(&["hang"], c),
        "FAKE_ACP_RECORD",
        record.to_str().unwrap(),
    ));
    assert_eq!(
        r.outcome.status,
        Status::TimedOut {
            end: CancelEnd::Stopped(StopReason::Cancelled)
        }
    );
    assert_eq!(r.outcome.text, "working on it");
    let sent = std::fs::read_to_string(&record).unwrap();
    assert!(sent.contains(r#""method":"session/cancel""#), "{sent}");
    assert_eq!(r.end.exit, Some(ExitStatus::code(0)));
}

#[test]
fn cancel_from_the_handle_and_the_environment_is_exactly_the_callers() {
    let mut t = start(with_env(spec(&["hang"], cfg()), "TASK_MARK", "m-1"));
    let pid = t.pid();
    t.until("the first progress", |e| {
        matches!(e, TaskEvent::Progress(_))
    });
    // The agent got the environment the caller built and nothing of ours.
    let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
    let mut vars: Vec<&[u8]> = environ
        .split(|&b| b == 0)
        .filter(|v| !v.is_empty())
        .collect();
    vars.sort();
    assert_eq!(vars, [&b"PATH=/usr/bin:/bin"[..], b"TASK_MARK=m-1"]);
    // Its own process group.
    assert_eq!(live_members(pid), [pid]);
    t.handle.cancel();
    t.handle.cancel(); // idempotent
    let r = t.finish();
    assert_eq!(
        r.outcome.status,
        Status::Cancelled {
            end: CancelEnd::Stopped(StopReason::Cancelled)
        }
    );
    assert_eq!(r.outcome.text, "working on it");
    assert!(r.logged("the owner cancelled the task"));
    wait_group_gone(pid);
}

#[test]
fn a_crash_fails_naming_the_exit() {
    let r = run(spec(&["crash", "7"], cfg()));
    assert_eq!(
        r.outcome.status,
        Status::Failed(Failure::Exited {
            during: Step::Prompt,
            status: Some(ExitStatus::code(7))
        })
    );
    assert!(r.outcome.status.to_string().contains("exit code 7"));
    assert_eq!(r.outcome.text, "about to crash");
    assert_eq!(r.end.exit, Some(ExitStatus::code(7)));
}

#[test]
fn an_agent_ignoring_eof_gets_sigterm() {
    let mut c = cfg();
    c.limits.stdin_grace_ms = 200;
    let r = run(spec(&["ignore_eof"], c));
    assert_eq!(r.outcome.status.name(), "completed");
    assert_eq!(r.end.signals.first(), Some(&Signal::Term));
    assert_eq!(r.end.exit.and_then(|e| e.signal), Some(libc::SIGTERM));
    wait_group_gone(r.pid.unwrap());
}

#[test]
fn an_agent_ignoring_sigterm_and_its_grandchild_end_in_sigkill() {
    let mut c = cfg();
    c.limits.stdin_grace_ms = 200;
    c.limits.term_grace_ms = 300;
    let r = run(spec(&["ignore_term"], c));
    assert_eq!(r.outcome.status.name(), "completed", "{}", r.outcome.status);
    let grandchild: u32 = r
        .outcome
        .text
        .strip_prefix("grandchild ")
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("{}", r.outcome.text));
    assert_eq!(r.end.signals, [Signal::Term, Signal::Kill]);
    assert_eq!(r.end.exit.and_then(|e| e.signal), Some(libc::SIGKILL));
    let pgid = r.pid.unwrap();
    assert_ne!(grandchild, pgid);
    wait_group_gone(pgid);
    assert!(!live_members(pgid).contains(&grandchild));
}

#[test]
fn a_deaf_agent_times_out_and_is_shut_down() {
    let mut c = cfg();
    c.task_timeout_ms = 5_000;
    c.limits.cancel_grace_ms = 200;
    let r = run(spec(&["deaf"], c));
    assert_eq!(
        r.outcome.status,
        Status::TimedOut {
            end: CancelEnd::NoAnswer { waited_ms: 200 }
        }
    );
    assert_eq!(r.outcome.text, "not listening");
}

#[test]
fn an_agent_that_stops_reading_stdin_never_blocks_the_runner() {
    // 2000 answers overflow the pipe, so the writer thread blocks; the deadlines still run
    // on the driver and the escalation unblocks the writer.
    let mut c = cfg();
    c.task_timeout_ms = 5_000;
    c.limits.cancel_grace_ms = 200;
    c.limits.stdin_grace_ms = 200;
    let r = run(spec(&["stdin_deaf", "2000"], c));
    assert_eq!(
        r.outcome.status,
        Status::TimedOut {
            end: CancelEnd::NoAnswer { waited_ms: 200 }
        }
    );
    assert_eq!(r.outcome.progress.permissions.asked, 2000);
    assert_eq!(r.end.signals.first(), Some(&Signal::Term));
    assert_eq!(r.end.exit.and_then(|e| e.signal), Some(libc::SIGTERM));
}

#[test]
fn the_stdin_backlog_is_bounded() {
    // 60 000 answers of ~85 bytes pass STDIN_BACKLOG_MAX_BYTES (4 MiB) while the agent reads
    // none of them: the runner kills the group instead of queueing without end.
    let mut c = cfg();
    c.limits.max_agent_requests = 100_000;
    let r = run(spec(&["stdin_deaf", "60000"], c));
    assert_eq!(
        r.outcome.status,
        Status::Failed(Failure::Exited {
            during: Step::Prompt,
            status: Some(ExitStatus::signal(libc::SIGKILL))
        }),
        "{}",
        r.outcome.status
    );
    assert!(r.logged("has not read"), "{:?}", r.logs);
    assert_eq!(r.end.signals.first(), Some(&Signal::Kill));
}

#[test]
fn garbage_fails() {
    let r = run(spec(&["garbage", "100"], cfg()));
    assert!(
        r.outcome
            .status
            .to_string()
            .starts_with("failed: agent spoke garbage: 17 malformed lines"),
        "{}",
        r.outcome.status
    );
}

#[test]
fn a_huge_line_fails_at_the_cap_and_the_rest_is_drained() {
    let mut c = cfg();
    c.limits.max_line_bytes = 1 << 20;
    c.limits.stdin_grace_ms = 200;
    // 64 MiB against a 1 MiB cap: the reader keeps at most the cap and drops the rest, so
    // the agent finishes its write and exits on stdin EOF.
    let r = run(spec(&["huge_line", "64"], c));
    assert_eq!(
        r.outcome.status.to_string(),
        "failed: agent spoke garbage: a line longer than 1048576 bytes (max_line_bytes)"
    );
    assert!(r.end.exit.is_some());
}

#[test]
fn a_missing_or_relative_binary_is_a_failed_outcome() {
    let mut s = spec(&[], cfg());
    s.argv = vec!["/nonexistent/agent-hub-no-such-agent".into()];
    let r = run(s);
    assert!(
        matches!(&r.outcome.status, Status::Failed(Failure::Spawn(why)) if why.contains("No such file")),
        "{}",
        r.outcome.status
    );
    assert_eq!(r.end, TaskEnd::default());
    assert_eq!(r.pid, None);
    assert!(r.logged("outcome failed: could not start the agent"));

    let mut s = spec(&[], cfg());
    s.argv = vec!["fake-acp-agent".into()];
    let r = run(s);
    assert!(
        r.outcome
            .status
            .to_string()
            .contains("is not an absolute path"),
        "{}",
        r.outcome.status
    );
    let mut s = spec(&[], cfg());
    s.argv = vec![];
    assert!(run(s).outcome.status.to_string().contains("argv is empty"));
    let mut c = cfg();
    c.cwd = PathBuf::from("/nonexistent/cwd-of-a-task");
    let r = run(spec(&["end_turn"], c));
    assert!(r.outcome.status.to_string().contains("not a directory"));
}

#[test]
fn an_invalid_task_is_refused_without_a_process() {
    let r = run(spec(
        &["end_turn"],
        SessionConfig::new("relative", "hi", 1000),
    ));
    assert!(
        matches!(&r.outcome.status, Status::Refused(Refusal::Invalid(why)) if why.contains("absolute")),
        "{}",
        r.outcome.status
    );
    assert_eq!(r.pid, None);
    let mut c = cfg();
    c.prompt = "x".repeat(100);
    c.limits.max_prompt_bytes = 10;
    let r = run(spec(&["end_turn"], c));
    assert_eq!(r.outcome.status.name(), "refused");
    assert!(!r.outcome.status.to_string().contains("xxxx"));
}

#[test]
fn stderr_is_kept_as_a_bounded_sanitized_tail() {
    let mut s = with_env(
        spec(&["end_turn"], cfg()),
        "FAKE_ACP_STDERR",
        "warn: key sk-live-abcdef123456 \u{1b}[31mred",
    );
    s.secrets.push("sk-live-abcdef123456".into());
    let r = run(s);
    assert_eq!(r.end.stderr_tail, ["warn: key [redacted] ?[31mred"]);
    assert!(r.end.stderr_bytes > 20);
    assert!(!r.logs.iter().any(|(_, m)| m.contains("sk-live")));
}

#[test]
fn the_credential_file_is_private_and_gone_after_the_task() {
    let dir = common::TempDir::new("runner-cred");
    let folder = dir.0.join("tokens");
    let cred = TaskCredential::create(&folder, "task-7", "tok-task-7-abcdef").unwrap();
    let path = cred.path().unwrap().to_owned();
    assert_eq!(
        std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert_eq!(
        std::fs::metadata(&folder).unwrap().permissions().mode() & 0o777,
        0o700
    );
    let mut c = cfg();
    // The agent's MCP server reads the token from the file: only its path is on an argv.
    c.mcp_servers.push(McpServer {
        name: "agent-hub".into(),
        command: HUB.into(),
        args: vec![
            "mcp".into(),
            "--as".into(),
            "task-7".into(),
            "--token-file".into(),
            path.to_str().unwrap().into(),
            "--port".into(),
            "1".into(),
        ],
        env: vec![],
    });
    let mut s = spec(&["mcp_call"], c);
    s.credential = Some(cred);
    let r = run(s);
    assert_eq!(r.outcome.status.name(), "completed", "{}", r.outcome.status);
    assert_eq!(
        r.outcome.text,
        r#"tool whoami: {"hub":"127.0.0.1:1","name":"task-7"}"#
    );
    assert!(!path.exists(), "the credential outlived its task");
    assert!(!r.logs.iter().any(|(_, m)| m.contains("tok-task-7")));
}

#[test]
fn dropping_the_handle_cancels_reaps_and_removes_the_credential() {
    let dir = common::TempDir::new("runner-drop");
    let cred = TaskCredential::create(&dir.0.join("tokens"), "t", "tok-dropped-123456").unwrap();
    let path = cred.path().unwrap().to_owned();
    let mut s = spec(&["hang"], cfg());
    s.credential = Some(cred);
    let mut t = start(s);
    let pid = t.pid();
    t.until("the first progress", |e| {
        matches!(e, TaskEvent::Progress(_))
    });
    let wakes = Arc::clone(&t.wakes);
    drop(t);
    wait_until("the credential removal", || !path.exists());
    wait_group_gone(pid);
    assert!(!Path::new(&format!("/proc/{pid}")).exists() || live_members(pid).is_empty());
    // The wake callback still runs; the events go nowhere.
    assert!(wakes.load(Ordering::SeqCst) >= 3);
}

#[test]
fn not_logged_in_is_refused() {
    let r = run(spec(&["not_logged_in"], cfg()));
    assert!(matches!(
        r.outcome.status,
        Status::Refused(Refusal::NotLoggedIn { .. })
    ));
    assert_eq!(r.end.exit, Some(ExitStatus::code(0)));
}
