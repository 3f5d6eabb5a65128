//! Drives `acp::Session` without processes: agent lines in, our lines and events out, a
//! virtual clock (an `Instant` base plus offsets; nothing sleeps). Transcripts are in
//! `transcripts.rs`, policies and stop reasons in `policy.rs`, cancel/timeout/shutdown in
//! `timers.rs`, hostile agents in `hostile.rs`, session modes in `modes.rs`, requests held for
//! a person under `ask` (issue 37) in `ask.rs`, the agent's questions (elicitation forms) in
//! `questions.rs`, follow-up turns of a kept session (issue 38) in `turns.rs`.

mod ask;
mod hostile;
mod modes;
mod policy;
mod questions;
mod timers;
mod transcripts;
mod turns;

use super::*;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

pub const SID: &str = "sess-1";
pub const SECRET: &str = "tok-3e1f9a77c0ffee42";

/// A config for a task in /work/proj with the hub's MCP server attached (env carries a
/// secret-looking value so tests can check it never reaches a log).
pub fn config() -> SessionConfig {
    let mut c = SessionConfig::new("/work/proj", "Please CALL_TOOL:echo now", 600_000);
    c.mcp_servers.push(McpServer {
        name: "agent-hub".into(),
        command: "/usr/local/bin/agent-hub".into(),
        args: vec!["mcp".into(), "--as".into(), "task-1".into()],
        env: vec![("AGENT_HUB_TOKEN".into(), SECRET.into())],
    });
    c
}

/// What the IO layer saw, in the order it would act on it.
#[derive(Debug, Clone)]
#[allow(clippy::large_enum_variant)]
pub enum Io {
    Sent(Value),
    Ev(Event),
}

pub struct Drive {
    pub s: Session,
    pub t0: Instant,
    pub now: Instant,
    pub io: Vec<Io>,
    /// Index into `io` of what `take_sent`/`take_events` already returned.
    seen_sent: usize,
    seen_events: usize,
}

impl Drive {
    pub fn new(c: SessionConfig) -> Drive {
        let t0 = crate::kernel::deadline::test_origin();
        let s = Session::new(c, t0).expect("valid config");
        let mut d = Drive {
            s,
            t0,
            now: t0,
            io: Vec::new(),
            seen_sent: 0,
            seen_events: 0,
        };
        d.drain();
        d
    }

    /// Through `session/prompt`: the agent answers initialize (id 0) and session/new (id 1).
    pub fn prompting(c: SessionConfig) -> Drive {
        let mut d = Drive::new(c);
        d.agent(
            r#"{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":1,"agentCapabilities":{}}}"#,
        );
        d.agent(&format!(
            r#"{{"jsonrpc":"2.0","id":1,"result":{{"sessionId":"{SID}"}}}}"#
        ));
        let sent = d.take_sent();
        assert_eq!(sent.last().unwrap()["method"], "session/prompt", "{sent:?}");
        d
    }

    /// Drains like the IO layer: every transmit first, then every event.
    pub fn drain(&mut self) {
        let closed_before = self.closed();
        while let Some(line) = self.s.poll_transmit() {
            assert!(!line.contains('\n'), "a line we send spans lines: {line}");
            assert!(!closed_before, "a line was queued after CloseStdin: {line}");
            let v: Value = serde_json::from_str(&line).expect("we send JSON");
            assert_eq!(v["jsonrpc"], "2.0");
            self.io.push(Io::Sent(v));
        }
        while let Some(e) = self.s.poll_event() {
            self.io.push(Io::Ev(e));
        }
    }

    fn closed(&self) -> bool {
        self.io
            .iter()
            .any(|i| matches!(i, Io::Ev(Event::CloseStdin)))
    }

    /// One agent line, newline-terminated, through `handle_input`.
    pub fn agent(&mut self, line: &str) {
        let mut b = line.as_bytes().to_vec();
        b.push(b'\n');
        self.s.handle_input(&b, self.now);
        self.drain();
    }

    pub fn agent_json(&mut self, v: Value) {
        self.agent(&v.to_string());
    }

    /// A `session/update` for our session.
    pub fn update(&mut self, update: Value) {
        self.agent_json(json!({"jsonrpc":"2.0","method":"session/update","params":{"sessionId":SID,"update":update}}));
    }

    pub fn chunk(&mut self, text: &str) {
        self.update(
            json!({"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":text}}),
        );
    }

    /// The prompt's result (our id 2).
    pub fn prompt_result(&mut self, result: Value) {
        self.agent_json(json!({"jsonrpc":"2.0","id":2,"result":result}));
    }

    pub fn cancel(&mut self) -> bool {
        let r = self.s.cancel(self.now);
        self.drain();
        r
    }

    /// Moves the virtual clock to `t0 + ms` and runs deadlines.
    pub fn at(&mut self, ms: u64) {
        let t = self.t0 + Duration::from_millis(ms);
        assert!(t >= self.now, "the clock only moves forward");
        self.now = t;
        self.s.handle_timeout(t);
        self.drain();
    }

    /// Runs every deadline up to `t0 + ms`, in order, as a loop around `poll_timeout` would.
    pub fn run_until(&mut self, ms: u64) {
        let end = self.t0 + Duration::from_millis(ms);
        let mut rounds = 0;
        while let Some(t) = self.s.poll_timeout() {
            if t > end {
                break;
            }
            rounds += 1;
            assert!(rounds < 10_000, "a deadline that never clears: {t:?}");
            self.now = self.now.max(t);
            self.s.handle_timeout(self.now);
            self.drain();
        }
        self.now = self.now.max(end);
    }

    pub fn exit(&mut self, code: i32) {
        self.s.handle_exit(ExitStatus::code(code), self.now);
        self.drain();
    }

    pub fn eof(&mut self) {
        self.s.handle_eof(self.now);
        self.drain();
    }

    /// Lines we sent since the last call.
    pub fn take_sent(&mut self) -> Vec<Value> {
        let out = self.io[self.seen_sent..]
            .iter()
            .filter_map(|i| match i {
                Io::Sent(v) => Some(v.clone()),
                _ => None,
            })
            .collect();
        self.seen_sent = self.io.len();
        out
    }

    /// Events since the last call, logs left out.
    pub fn take_events(&mut self) -> Vec<Event> {
        let out = self.io[self.seen_events..]
            .iter()
            .filter_map(|i| match i {
                Io::Ev(Event::Log(_)) => None,
                Io::Ev(e) => Some(e.clone()),
                _ => None,
            })
            .collect();
        self.seen_events = self.io.len();
        out
    }

    pub fn all_sent(&self) -> Vec<Value> {
        self.io
            .iter()
            .filter_map(|i| match i {
                Io::Sent(v) => Some(v.clone()),
                _ => None,
            })
            .collect()
    }

    pub fn logs(&self) -> Vec<String> {
        self.io
            .iter()
            .filter_map(|i| match i {
                Io::Ev(Event::Log(l)) => Some(l.message.clone()),
                _ => None,
            })
            .collect()
    }

    pub fn progress_events(&self) -> Vec<Progress> {
        self.io
            .iter()
            .filter_map(|i| match i {
                Io::Ev(Event::Progress(p)) => Some(p.clone()),
                _ => None,
            })
            .collect()
    }

    /// The one outcome; panics unless there is exactly one, and checks the ordering rules:
    /// no progress after the outcome, `Finished` last if present.
    pub fn outcome(&self) -> Outcome {
        let outcomes: Vec<(usize, &Outcome)> = self
            .io
            .iter()
            .enumerate()
            .filter_map(|(i, e)| match e {
                Io::Ev(Event::Outcome(o)) => Some((i, o)),
                _ => None,
            })
            .collect();
        assert_eq!(outcomes.len(), 1, "exactly one outcome: {:#?}", self.io);
        let (at, o) = outcomes[0];
        for later in &self.io[at..] {
            assert!(
                !matches!(later, Io::Ev(Event::Progress(_))),
                "progress after the outcome"
            );
        }
        if let Some(f) = self
            .io
            .iter()
            .position(|e| matches!(e, Io::Ev(Event::Finished)))
        {
            assert_eq!(f, self.io.len() - 1, "Finished is the last thing");
            assert!(f > at);
        }
        assert!(self.s.has_outcome());
        o.clone()
    }

    pub fn status(&self) -> Status {
        self.outcome().status
    }

    /// Logs and failure reasons never carry the secret or the prompt, and stay bounded.
    pub fn assert_logs_clean(&self, prompt: &str) {
        for l in self.logs() {
            assert!(!l.contains(SECRET), "secret in a log: {l}");
            assert!(!l.contains(prompt), "prompt in a log: {l}");
            assert!(l.len() < 2000, "log line too long: {}", l.len());
            assert!(!l.contains('\n'), "log line spans lines: {l:?}");
        }
        if let Some(o) = self.io.iter().find_map(|e| match e {
            Io::Ev(Event::Outcome(o)) => Some(o),
            _ => None,
        }) {
            let reason = o.status.to_string();
            assert!(!reason.contains(SECRET), "secret in the reason: {reason}");
            assert!(reason.len() < 2000);
        }
    }
}

/// The text of an outcome's `Completed` stop reason, or a panic.
pub fn completed(o: &Outcome) -> &StopReason {
    match &o.status {
        Status::Completed { stop_reason } => stop_reason,
        other => panic!("expected completed, got {other:?}"),
    }
}
