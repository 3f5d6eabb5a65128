//! The ACP client session: one task, one agent process, one session (docs/acp.md).
//!
//! Sans-IO: agent stdout bytes in through `handle_input` (any split) or `handle_line`, the
//! process's end through `handle_eof`/`handle_exit`, the caller's cancel through `cancel`,
//! time through `handle_timeout` (every instant passed in); lines to write to the agent's
//! stdin out through `poll_transmit`, everything else through `poll_event`, the next deadline
//! through `poll_timeout`. After each `handle_*` or `cancel` the IO layer writes every
//! `poll_transmit` line (each followed by `\n`) and only then acts on the events, so a
//! `CloseStdin` never cuts off a line queued before it.
//!
//! Owns: our request ids (counting from 0, like the agents' own, §1.1), matching responses
//! to them by exact JSON value, the three requests of a task (`initialize`, `session/new`,
//! `session/prompt`) and `session/cancel`, answers to the agent's requests by policy (-32601
//! for anything not advertised), under `Ask` the requests held for the owner (`Event::Request`
//! out, `answer` in; issue 37) and the agent's questions (`elicitation/create` forms, advertised
//! under `Ask` only; design §4b), folding updates into progress, every deadline, and the one
//! outcome of each turn. Refuses: processes, signals, pipes, clocks, threads; authenticating
//! for the user (§1.9 step 3); logging the prompt, the agent's text, or env values.
//! `answers.rs` holds the answers to the agent's requests, `questions.rs` its questions,
//! `pending.rs` the requests held open, `deadlines.rs` the deadlines and the endings,
//! `turns.rs` the follow-up turns of a kept session, its interrupt and its close (issue 38
//! design §2).

use super::config::{
    Approval, Limits, McpServer, PermissionPolicy, SessionConfig, SessionConfigError,
};
use super::outcome::{CancelEnd, ExitStatus, Failure, Outcome, Refusal, Status, Step, StopReason};
use super::permission::ToolNames;
use super::progress::{AgentInfo, Fold, Progress};
use super::request::RequestAsk;
use super::rpc::{self, Incoming, Reply};
use super::sanitize::Secrets;
use crate::wire::LineBuffer;

mod answers;
mod deadlines;
mod mode;
mod pending;
mod questions;
mod turns;
pub use mode::MAX_MODE_RESETS;
use serde_json::{json, Value};
use std::collections::VecDeque;
use std::time::{Duration, Instant};
pub use turns::PromptRefusal;

/// The ACP protocol version we speak (§1.1).
pub const PROTOCOL_VERSION: u64 = 1;
/// Our `clientInfo.name`.
pub const CLIENT_NAME: &str = "agent-hub";
/// Longest request id the agent may use (a string id is echoed in our answer; a megabyte id
/// would make us write a megabyte). Longer ids are answered -32600 with id null.
pub const MAX_AGENT_ID_BYTES: usize = 256;
/// Longest `sessionId` accepted from `session/new`.
pub const MAX_SESSION_ID_BYTES: usize = 1024;
/// Auth methods kept for the "not logged in" reason.
pub const MAX_AUTH_METHODS: usize = 8;
/// Agent request ids remembered to notice reuse (logged only; JSON-RPC ids are the agent's
/// business once answered).
const RECENT_AGENT_IDS: usize = 64;

/// What the IO layer must do or report.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// A coalesced snapshot (at most one per `progress_interval_ms`).
    Progress(Progress),
    /// A line for the service log. Agent strings in it are bounded, sanitized excerpts;
    /// never the prompt, the agent's text, or an env value.
    Log(Log),
    /// Close the agent's stdin (after writing every queued line).
    CloseStdin,
    /// Send this signal to the agent's whole process group (§5.2).
    Signal(Signal),
    /// Under `Ask`: a request the session holds until `Session::answer(seq, …)` (or a
    /// cancel, or the session's end, which answer it `cancelled`). The owner carries it to
    /// whoever may answer (issue 37 design §4).
    Request(RequestAsk),
    /// Under `Ask`: a request the delegator's allow rule number `rule` (from 0) let through;
    /// it was answered allow already. For the record only (design §2: audited, never sent
    /// to the delegator).
    Preapproved { ask: RequestAsk, rule: usize },
    /// A turn's result: one per turn (`Outcome::turn`), always before `Finished` (issue 38
    /// design §2; before it, exactly one per session).
    Outcome(Outcome),
    /// The turn just reported ended with a prompt result and the session is kept
    /// (`SessionConfig::keep_session`): the agent runs on, idle, until `Session::prompt`
    /// sends it another turn or `Session::close` ends it.
    Idle { turn: u32 },
    /// The process has exited and the outcome was emitted: close its pipes, drop the session.
    Finished,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    Term,
    Kill,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Log {
    pub level: Level,
    pub message: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Info,
    Warn,
}

/// Why a prompt is being cancelled; the first cause wins.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Cause {
    Caller,
    Deadline,
    /// The agent left its asking mode for good (`mode::MAX_MODE_RESETS`); the mode it is in.
    LeftAskingMode(String),
    /// A follow-up asked for with `interrupt` (`Session::prompt`): once the turn resolves,
    /// the queued follow-up is sent (`turns.rs`).
    Interrupt,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Phase {
    /// `initialize` sent at `since`.
    Initializing { id: u64, since: Instant },
    /// `session/new` sent at `since`.
    Creating { id: u64, since: Instant },
    /// The request putting the session in mode `target` (where the agent asks) sent at
    /// `since`; the prompt waits for its answer (docs/acp.md "Session modes").
    SettingMode {
        id: u64,
        since: Instant,
        target: String,
    },
    /// `session/prompt` sent; folding updates.
    Prompting { id: u64 },
    /// `session/cancel` sent at `since`; waiting for the prompt to resolve.
    Cancelling {
        id: u64,
        cause: Cause,
        since: Instant,
    },
    /// A turn's outcome was emitted and the session is kept for a follow-up (`turns.rs`).
    Idle,
    /// `session/close` sent at `since` (the agent advertised it); the shutdown follows its
    /// answer or `stdin_grace_ms`, whichever comes first (issue 38 design §2).
    Closing { id: u64, since: Instant },
    /// The last outcome was emitted and the shutdown is under way.
    Done,
}

/// One ACP client session. See the module doc for the driving contract.
#[derive(Debug)]
pub struct Session {
    limits: Limits,
    permission: PermissionPolicy,
    /// The hub's own server, pre-approval rules, fallback and cap (issue 37).
    approval: Approval,
    /// Requests held open under `Ask`.
    pending: pending::Pending,
    /// Tool names by tool call id from the agent's updates, for recognising the hub's own
    /// tools on adapters that name them only there (`permission::own_tool`).
    tool_names: ToolNames,
    cwd: String,
    /// Taken when `session/prompt` is sent.
    prompt: Option<String>,
    /// Taken when `session/new` is sent.
    mcp_servers: Vec<McpServer>,
    /// The mode ids in which the agent asks the client, preferred first.
    ask_modes: Vec<String>,
    /// True when `ask_modes` came from the config (the agent's manifest).
    ask_modes_given: bool,
    /// The session's modes as offered by `session/new`, `current` kept up to date.
    mode: Option<super::modes::Offered>,
    /// Requests sent mid-prompt to put the agent back in an asking mode, not yet answered.
    mode_requests: Vec<u64>,
    /// How many such requests were sent (at most `MAX_MODE_RESETS`).
    mode_resets: u32,
    secrets: Secrets,
    deadline: Instant,
    phase: Phase,
    next_id: u64,
    session_id: Option<String>,
    auth_methods: Vec<String>,
    lines: LineBuffer,
    transmits: VecDeque<String>,
    events: VecDeque<Event>,
    fold: Fold,
    last_progress: Option<Instant>,
    progress_dirty: bool,
    logs_emitted: u32,
    logs_suppressed: u64,
    agent_requests: u64,
    recent_agent_ids: VecDeque<Value>,
    /// The agent closed its stdout.
    eof_seen: bool,
    /// Before the outcome, the agent closed its stdout or exited at this instant, and the
    /// other half (the exit status, or the rest of its output) is awaited until
    /// `eof_exit_wait_ms` later.
    gone_at: Option<Instant>,
    stdin_closed: bool,
    /// The next escalation of the shutdown and when it is due.
    shutdown: Option<(Signal, Instant)>,
    killed: bool,
    exit: Option<ExitStatus>,
    finished: bool,
    lines_after_outcome: u64,
    /// Turn numbers, the keep switch, the agent's `session/close`, a queued follow-up.
    turns: turns::Turns,
}

impl Session {
    /// Starts a session at `now`: validates `config` and queues `initialize`.
    pub fn new(config: SessionConfig, now: Instant) -> Result<Session, SessionConfigError> {
        config.validate()?;
        let secrets = Secrets::new(
            config
                .mcp_servers
                .iter()
                .flat_map(|s| s.env.iter().map(|(_, v)| v.clone())),
        );
        let cwd = config
            .cwd
            .to_str()
            .ok_or(SessionConfigError::NotUtf8("cwd"))?
            .to_owned();
        let ask_modes_given = config.ask_modes.is_some();
        let ask_modes = config.ask_modes.clone().unwrap_or_else(|| {
            super::modes::FALLBACK_ASK_MODES
                .iter()
                .map(|m| (*m).to_owned())
                .collect()
        });
        let mut s = Session {
            turns: turns::Turns::new(config.keep_session, config.task_timeout(), now),
            deadline: now + config.task_timeout(),
            ask_modes,
            ask_modes_given,
            mode: None,
            mode_requests: Vec::new(),
            mode_resets: 0,
            limits: config.limits.clone(),
            permission: config.permission,
            pending: pending::Pending::new(config.approval.max_open_requests),
            approval: config.approval,
            tool_names: ToolNames::default(),
            cwd,
            prompt: Some(config.prompt),
            mcp_servers: config.mcp_servers,
            secrets,
            phase: Phase::Done,
            next_id: 0,
            session_id: None,
            auth_methods: Vec::new(),
            lines: LineBuffer::new(),
            transmits: VecDeque::new(),
            events: VecDeque::new(),
            fold: Fold::new(config.limits.max_text_bytes),
            last_progress: None,
            progress_dirty: false,
            logs_emitted: 0,
            logs_suppressed: 0,
            agent_requests: 0,
            recent_agent_ids: VecDeque::new(),
            eof_seen: false,
            gone_at: None,
            stdin_closed: false,
            shutdown: None,
            killed: false,
            exit: None,
            finished: false,
            lines_after_outcome: 0,
        };
        // Honest: we serve neither files nor terminals, so the agents use their own tools
        // (§1.9 step 2). A later issue that serves them flips these here and answers them in
        // `on_request`.
        let mut capabilities = json!({
            "fs": {"readTextFile": false, "writeTextFile": false},
            "terminal": false
        });
        if s.permission == PermissionPolicy::Ask {
            // Questions reach a person only under `Ask` (design §4b), and only as forms: a
            // URL for a person to open has no place in a mailed request. Unadvertised, the
            // current Claude adapter blocks its AskUserQuestion tool itself (capture §6).
            capabilities["elicitation"] = json!({"form": {}});
        }
        let id = s.request(
            "initialize",
            json!({
                "protocolVersion": PROTOCOL_VERSION,
                "clientCapabilities": capabilities,
                "clientInfo": {"name": CLIENT_NAME, "title": "agent-hub", "version": crate::VERSION},
            }),
        );
        s.phase = Phase::Initializing { id, since: now };
        Ok(s)
    }

    // ----- inputs -----

    /// Bytes read from the agent's stdout, split anywhere.
    pub fn handle_input(&mut self, bytes: &[u8], now: Instant) {
        if self.phase == Phase::Done {
            self.discard(bytes);
            return;
        }
        self.lines.push(bytes);
        loop {
            if self.phase == Phase::Done {
                // The outcome was decided mid-buffer: the rest is not looked at.
                let rest = self.lines.pending_len();
                self.lines = LineBuffer::new();
                if rest > 0 {
                    self.lines_after_outcome += 1;
                }
                return;
            }
            let line = match self.lines.next_line(self.limits.max_line_bytes) {
                Ok(Some(line)) => line.to_vec(),
                Ok(None) => break,
                Err(_) => {
                    self.lines = LineBuffer::new();
                    let why = format!(
                        "a line longer than {} bytes (max_line_bytes)",
                        self.limits.max_line_bytes
                    );
                    self.garbage(why, now);
                    return;
                }
            };
            self.on_line(&line, now);
        }
        self.lines.shrink();
    }

    /// One line (without its `\n`) from the agent's stdout, for IO layers that split lines
    /// themselves. The line cap still applies.
    pub fn handle_line(&mut self, line: &[u8], now: Instant) {
        if self.phase == Phase::Done {
            self.lines_after_outcome += 1;
            return;
        }
        if line.len() > self.limits.max_line_bytes {
            let why = format!(
                "a line of {} bytes; the limit is {} (max_line_bytes)",
                line.len(),
                self.limits.max_line_bytes
            );
            self.garbage(why, now);
            return;
        }
        self.on_line(line, now);
    }

    /// For IO layers that split lines themselves with the same cap (crates/server/src/runner): the line
    /// being read passed `max_line_bytes`. Fails the session as `handle_input` would, without
    /// the caller having to hand over the oversized bytes.
    pub fn handle_line_too_long(&mut self, now: Instant) {
        if self.phase == Phase::Done {
            self.lines_after_outcome += 1;
            return;
        }
        let why = format!(
            "a line longer than {} bytes (max_line_bytes)",
            self.limits.max_line_bytes
        );
        self.garbage(why, now);
    }

    /// The agent closed its stdout. A final line without a newline is still read. Before the
    /// outcome, the session then waits up to `eof_exit_wait_ms` for the exit status, so the
    /// reason can say how the agent ended.
    pub fn handle_eof(&mut self, now: Instant) {
        if self.lines.pending_len() > 0 {
            self.handle_input(b"\n", now);
        }
        if self.eof_seen {
            return;
        }
        self.eof_seen = true;
        if self.phase == Phase::Done {
            return;
        }
        match self.exit {
            Some(status) => self.agent_gone(Some(status), now),
            // Between turns nothing is awaited from its output: the session closes now.
            None if self.between_turns() => self.agent_gone(None, now),
            None => self.gone_at = Some(now),
        }
    }

    /// The agent's process exited (the IO reaped it). Its last lines may still be in the
    /// pipe when the exit is seen (a crash right after a write), so before the outcome the
    /// session keeps reading until `handle_eof`, or for at most `eof_exit_wait_ms`.
    pub fn handle_exit(&mut self, status: ExitStatus, now: Instant) {
        if self.exit.is_some() || self.finished {
            return;
        }
        self.exit = Some(status);
        if self.phase == Phase::Done {
            self.end_of_process();
        } else if self.eof_seen || self.between_turns() {
            self.agent_gone(Some(status), now);
        } else {
            self.gone_at = Some(now);
        }
    }

    /// The caller wants the task stopped. True when this cancel decides the outcome (the
    /// session was still running); false when the outcome was already decided or a cancel
    /// (the caller's or the deadline's) is already under way.
    pub fn cancel(&mut self, now: Instant) -> bool {
        match self.phase {
            Phase::Initializing { .. } | Phase::Creating { .. } | Phase::SettingMode { .. } => {
                self.log(Level::Info, "cancelled before the prompt was sent".into());
                self.finish(
                    Status::Cancelled {
                        end: CancelEnd::BeforePrompt,
                    },
                    now,
                );
                true
            }
            Phase::Prompting { id } => {
                self.send_cancel(id, Cause::Caller, now);
                true
            }
            // A follow-up waits for the turn it interrupts: the caller's cancel replaces it,
            // so the turn ends `cancelled` and nothing more is sent (issue 38 design §2).
            Phase::Cancelling {
                id,
                cause: Cause::Interrupt,
                since,
            } => {
                self.turns.drop_follow_up();
                self.phase = Phase::Cancelling {
                    id,
                    cause: Cause::Caller,
                    since,
                };
                true
            }
            // A kept session has no turn to cancel: it is closed.
            Phase::Idle => {
                self.close(now);
                false
            }
            Phase::Cancelling { .. } | Phase::Closing { .. } | Phase::Done => false,
        }
    }

    /// Runs every deadline due at `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.finished {
            return;
        }
        if self.phase != Phase::Done {
            self.run_deadlines(now);
        }
        if self.phase != Phase::Done && self.progress_dirty {
            if let Some(due) = self.progress_due() {
                if now >= due {
                    self.emit_progress(now);
                }
            }
        }
        if let Some((signal, at)) = self.shutdown {
            if now >= at {
                self.events.push_back(Event::Signal(signal));
                self.shutdown = match signal {
                    Signal::Term => Some((Signal::Kill, now + ms(self.limits.term_grace_ms))),
                    Signal::Kill => {
                        self.killed = true;
                        None
                    }
                };
            }
        }
    }

    // ----- outputs -----

    /// The next line to write to the agent's stdin (without its `\n`).
    pub fn poll_transmit(&mut self) -> Option<String> {
        self.transmits.pop_front()
    }

    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// The earliest instant `handle_timeout` must be called at; None when nothing is timed.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let mut next: Option<Instant> = None;
        let mut consider = |t: Option<Instant>| {
            if let Some(t) = t {
                next = Some(next.map_or(t, |n| n.min(t)));
            }
        };
        if self.finished {
            return None;
        }
        if self.phase != Phase::Done {
            consider(self.task_deadline());
            consider(self.step_deadline().map(|(t, _)| t));
            consider(self.gone_deadline());
            if self.progress_dirty {
                consider(self.progress_due());
            }
        }
        consider(self.shutdown.map(|(_, t)| t));
        next
    }

    /// The agent's session id, once `session/new` answered.
    pub fn session_id(&self) -> Option<&str> {
        self.session_id.as_deref()
    }

    /// A snapshot now (also what the next `Progress` event would carry).
    pub fn progress(&self, now: Instant) -> Progress {
        let mut p = self.fold.progress.clone();
        // A turn's own time (issue 38): the first turn's counts from the session's start.
        p.elapsed_ms = millis(now.saturating_duration_since(self.turns.started()));
        p
    }

    /// True once the outcome was emitted.
    pub fn has_outcome(&self) -> bool {
        self.phase == Phase::Done
    }

    /// True once `Finished` was emitted: nothing more will happen.
    pub fn is_finished(&self) -> bool {
        self.finished
    }

    // ----- lines from the agent -----

    fn on_line(&mut self, line: &[u8], now: Instant) {
        match rpc::classify(line) {
            None => {}
            Some(Incoming::Malformed(m)) => self.malformed(m.describe(), now),
            Some(Incoming::BadRequestId { method }) => {
                self.answer_error(
                    &Value::Null,
                    rpc::INVALID_REQUEST,
                    "Invalid Request: id must be a string or a number".into(),
                );
                let m = self.secrets.token(&method);
                self.malformed(&format!("request {m} with an invalid id"), now);
            }
            Some(Incoming::Request { id, method, params }) => {
                if matches!(&id, Value::String(s) if s.len() > MAX_AGENT_ID_BYTES) {
                    self.answer_error(
                        &Value::Null,
                        rpc::INVALID_REQUEST,
                        format!("Invalid Request: id longer than {MAX_AGENT_ID_BYTES} bytes"),
                    );
                    self.malformed("request with an oversized id", now);
                    return;
                }
                self.on_request(id, &method, params, now);
            }
            Some(Incoming::Notification { method, params }) => {
                self.on_notification(&method, params, now)
            }
            Some(Incoming::Response { id, reply }) => self.on_response(id, reply, now),
        }
    }

    fn on_notification(&mut self, method: &str, params: Value, now: Instant) {
        if method != "session/update" {
            // `$/cancel_request`, `_`-prefixed extensions and anything new: nothing to do.
            return;
        }
        if self.mode.is_some() && !self.foreign_session(&params) {
            // Mode changes count from `session/new` on: the answer to our switch may come
            // after the agent's own `current_mode_update`.
            if let Some(update) = params.get("update") {
                self.on_mode_update(update, now);
            }
        }
        if !matches!(
            self.phase,
            Phase::Prompting { .. } | Phase::Cancelling { .. }
        ) {
            // Before the prompt (e.g. available_commands_update after session/new): ignored.
            return;
        }
        if self.foreign_session(&params) {
            self.anomaly("session/update for another session ignored".into());
            return;
        }
        let update = params.get("update").unwrap_or(&Value::Null);
        if self.approval.hub_server.is_some() {
            self.tool_names.observe(update);
        }
        if super::progress::informational_notice(update).is_some() {
            // Its words may quote the task's material, which logs never hold: the level only.
            let level = update
                .pointer("/_meta/claudeCode/level")
                .and_then(Value::as_str)
                .map_or_else(|| "?".to_owned(), |l| self.secrets.token(l));
            self.log(
                Level::Info,
                format!("agent notice (level {level}) kept out of the task's text"),
            );
        }
        match self.fold.apply(update, &self.secrets) {
            Ok(()) => self.progress_changed(now),
            Err(e) => self.anomaly(format!("session/update ignored: {}", e.describe())),
        }
    }

    fn on_response(&mut self, id: Value, reply: Reply, now: Instant) {
        if let Some(at) = self
            .mode_requests
            .iter()
            .position(|m| id.as_u64() == Some(*m))
        {
            self.mode_requests.remove(at);
            return self.on_mode_reset_answer(reply, now);
        }
        let awaited = match self.phase {
            Phase::Initializing { id, .. }
            | Phase::Creating { id, .. }
            | Phase::SettingMode { id, .. }
            | Phase::Prompting { id }
            | Phase::Cancelling { id, .. }
            | Phase::Closing { id, .. } => Some(id),
            Phase::Idle | Phase::Done => None,
        };
        if !awaited.is_some_and(|a| id == a) {
            let shown = self.secrets.token(&id.to_string());
            let msg = match id.as_u64() {
                Some(n) if n < self.next_id => {
                    format!("response to request {shown}, which was already answered")
                }
                _ => format!("response to id {shown}, which we never sent"),
            };
            self.anomaly(msg);
            return;
        }
        match self.phase.clone() {
            Phase::Initializing { .. } => self.on_initialized(reply, now),
            Phase::Creating { .. } => self.on_session_created(reply, now),
            Phase::SettingMode { target, .. } => self.on_mode_set(reply, target, now),
            Phase::Prompting { .. } => self.on_prompt_result(reply, None, now),
            Phase::Cancelling { cause, .. } => self.on_prompt_result(reply, Some(cause), now),
            Phase::Closing { .. } => self.on_closed(reply, now),
            Phase::Idle | Phase::Done => {}
        }
    }

    fn on_initialized(&mut self, reply: Reply, now: Instant) {
        let result = match reply {
            Reply::Error(e) => return self.rpc_failed(Step::Initialize, e, now),
            Reply::Result(r) => r,
        };
        match result.get("protocolVersion") {
            Some(v) if v.as_u64() == Some(PROTOCOL_VERSION) => {}
            Some(v) => {
                let version = self.secrets.token(&v.to_string());
                return self.finish(
                    Status::Refused(Refusal::UnsupportedProtocol { version }),
                    now,
                );
            }
            None => {
                return self.finish(
                    Status::Failed(Failure::BadResult {
                        step: Step::Initialize,
                        what: "no protocolVersion",
                    }),
                    now,
                )
            }
        }
        if let Some(info) = result.get("agentInfo") {
            let s = |k: &str| info.get(k).and_then(Value::as_str).unwrap_or("?");
            self.fold.progress.agent = Some(AgentInfo {
                name: self.secrets.token(s("name")),
                version: self.secrets.token(s("version")),
            });
        }
        self.auth_methods = self.read_auth_methods(result.get("authMethods"));
        self.turns
            .read_capabilities(result.get("agentCapabilities"));
        let who = match &self.fold.progress.agent {
            Some(a) => format!("{} {}", a.name, a.version),
            None => "agent (no agentInfo)".into(),
        };
        self.log(Level::Info, format!("{who} speaks ACP {PROTOCOL_VERSION}"));
        let servers: Vec<Value> = std::mem::take(&mut self.mcp_servers)
            .into_iter()
            .map(|s| {
                json!({
                    "name": s.name,
                    "command": s.command.to_string_lossy(),
                    "args": s.args,
                    "env": s.env.into_iter().map(|(name, value)| json!({"name": name, "value": value})).collect::<Vec<_>>(),
                })
            })
            .collect();
        let id = self.request(
            "session/new",
            json!({"cwd": self.cwd, "mcpServers": servers}),
        );
        self.phase = Phase::Creating { id, since: now };
    }

    /// `authMethods` as short descriptions; invalid items are skipped (§1.3), including
    /// codex-acp's `type: "env_var"` ones, which are described rather than refused.
    fn read_auth_methods(&self, methods: Option<&Value>) -> Vec<String> {
        let Some(list) = methods.and_then(Value::as_array) else {
            return Vec::new();
        };
        list.iter()
            .filter_map(|m| {
                let id = self.secrets.token(m.get("id")?.as_str()?);
                let vars: Vec<String> = m
                    .get("vars")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(|v| v.get("name").and_then(Value::as_str))
                    .take(4)
                    .map(|n| self.secrets.token(n))
                    .collect();
                Some(match m.get("type").and_then(Value::as_str) {
                    Some("env_var") if !vars.is_empty() => {
                        format!("{id} (env {})", vars.join(", "))
                    }
                    Some("terminal") => format!("{id} (in a terminal)"),
                    _ => id,
                })
            })
            .take(MAX_AUTH_METHODS)
            .collect()
    }

    fn on_session_created(&mut self, reply: Reply, now: Instant) {
        let result = match reply {
            Reply::Error(e) if e.code == rpc::AUTH_REQUIRED => {
                let message = self.secrets.clean(&e.message);
                let auth_methods = self.auth_methods.clone();
                return self.finish(
                    Status::Refused(Refusal::NotLoggedIn {
                        message,
                        auth_methods,
                    }),
                    now,
                );
            }
            Reply::Error(e) => return self.rpc_failed(Step::SessionNew, e, now),
            Reply::Result(r) => r,
        };
        let sid = result
            .get("sessionId")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty() && s.len() <= MAX_SESSION_ID_BYTES);
        let Some(sid) = sid else {
            return self.finish(
                Status::Failed(Failure::BadResult {
                    step: Step::SessionNew,
                    what: "no sessionId (or one over 1024 bytes)",
                }),
                now,
            );
        };
        self.session_id = Some(sid.to_owned());
        self.choose_mode(&result, now);
    }

    /// Sends the prompt: the session is in a mode where the agent asks, or offers none, or
    /// the policy lets it run unasked (`mode.rs`).
    fn send_prompt(&mut self) {
        let sid = self.session_id.clone().unwrap_or_default();
        let prompt = self.prompt.take().unwrap_or_default();
        let id = self.request(
            "session/prompt",
            json!({"sessionId": sid, "prompt": [{"type": "text", "text": prompt}]}),
        );
        self.phase = Phase::Prompting { id };
    }

    fn on_prompt_result(&mut self, reply: Reply, cause: Option<Cause>, now: Instant) {
        let result = match reply {
            Reply::Error(e) => {
                let Some(cause) = cause else {
                    return self.rpc_failed(Step::Prompt, e, now);
                };
                let end = CancelEnd::Errored {
                    code: e.code,
                    message: self.secrets.clean(&e.message),
                };
                return self.end_turn(cancelled_status(cause, end), now);
            }
            Reply::Result(r) => r,
        };
        self.fold.meter.on_prompt_result(&result);
        let reason = result.get("stopReason").and_then(Value::as_str);
        let status = match (reason, cause) {
            (Some(r), None) => Status::Completed {
                stop_reason: StopReason::parse(r, |s| self.secrets.token(s)),
            },
            (None, None) => Status::Failed(Failure::BadResult {
                step: Step::Prompt,
                what: "no stopReason",
            }),
            (r, Some(cause)) => {
                let r = StopReason::parse(r.unwrap_or("(none)"), |s| self.secrets.token(s));
                cancelled_status(cause, CancelEnd::Stopped(r))
            }
        };
        self.end_turn(status, now)
    }

    // ----- helpers -----

    fn send_cancel(&mut self, id: u64, cause: Cause, now: Instant) {
        let sid = self.session_id.clone().unwrap_or_default();
        self.send(rpc::notification_line(
            "session/cancel",
            json!({"sessionId": sid}),
        ));
        self.phase = Phase::Cancelling {
            id,
            cause,
            since: now,
        };
        // §1.7: after `session/cancel` every pending permission request is answered
        // `cancelled`, and the ones that arrive from now on too (`on_permission`).
        self.close_pending("the turn is being cancelled");
    }

    fn request(&mut self, method: &str, params: Value) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.send(rpc::request_line(id, method, params));
        id
    }

    fn reply(&mut self, id: &Value, result: Value) {
        self.send(rpc::result_line(id, result));
    }

    fn answer_error(&mut self, id: &Value, code: i64, message: String) {
        self.send(rpc::error_line(id, code, &message));
    }

    fn send(&mut self, line: String) {
        if !self.stdin_closed {
            self.transmits.push_back(line);
        }
    }

    fn discard(&mut self, bytes: &[u8]) {
        let n = bytes.iter().filter(|&&b| b == b'\n').count() as u64;
        self.lines_after_outcome += n;
    }

    /// True when `params.sessionId` names a session other than ours.
    fn foreign_session(&self, params: &Value) -> bool {
        match (
            params.get("sessionId").and_then(Value::as_str),
            &self.session_id,
        ) {
            (Some(theirs), Some(ours)) => theirs != ours,
            _ => false,
        }
    }

    fn malformed(&mut self, what: &str, now: Instant) {
        self.fold.progress.malformed_lines += 1;
        let n = self.fold.progress.malformed_lines;
        let max = self.limits.max_malformed_lines;
        if n > max {
            self.garbage(
                format!("{n} malformed lines, the last {what} (max_malformed_lines = {max})"),
                now,
            );
        } else {
            self.log(
                Level::Warn,
                format!("agent sent a malformed line ({what}); {n} of {max} tolerated"),
            );
        }
    }

    fn anomaly(&mut self, what: String) {
        self.fold.progress.anomalies += 1;
        self.log(Level::Warn, format!("protocol anomaly: {what}"));
    }

    fn log(&mut self, level: Level, message: String) {
        if self.logs_emitted >= self.limits.max_log_events {
            self.logs_suppressed += 1;
            return;
        }
        self.logs_emitted += 1;
        self.events.push_back(Event::Log(Log { level, message }));
    }

    fn progress_changed(&mut self, now: Instant) {
        if self.phase == Phase::Done {
            return;
        }
        match self.progress_due() {
            Some(due) if now < due => self.progress_dirty = true,
            _ => self.emit_progress(now),
        }
    }

    fn emit_progress(&mut self, now: Instant) {
        self.progress_dirty = false;
        self.last_progress = Some(now);
        let p = self.progress(now);
        self.events.push_back(Event::Progress(p));
    }
}

fn cancelled_status(cause: Cause, end: CancelEnd) -> Status {
    match cause {
        Cause::Caller => Status::Cancelled { end },
        Cause::Deadline => Status::TimedOut { end },
        Cause::LeftAskingMode(mode) => Status::Failed(Failure::LeftAskingMode { mode, end }),
        Cause::Interrupt => Status::Cancelled { end },
    }
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
