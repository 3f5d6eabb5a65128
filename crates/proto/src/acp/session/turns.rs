//! Follow-up turns of one session (issue 38 design §2; docs/delegation.md "Follow-ups"): the
//! turn numbers, keeping the session after a completed turn (`Event::Idle`), sending the next
//! prompt (`Session::prompt`), an interrupt (`session/cancel`, the cancelled turn's outcome,
//! then the queued prompt: ACP has no queueing), and closing a kept session
//! (`Session::close`: `session/close` only when the agent advertised
//! `sessionCapabilities.close`, then the shutdown every session ends with).
//!
//! `Turns` owns the state (a sub-machine, PLAN §14); the `impl Session` below drives it from
//! the session's phases. Refuses: deciding whether a session should be kept or for how long
//! (the task book's `tasks::turns`: the session only keeps when its config says so, and only
//! after a turn the agent ended with a prompt result), and any clock: every instant is given.

use super::{Cause, Event, Level, Phase, Session};
use crate::acp::outcome::{CancelEnd, Status};
use crate::acp::rpc::Reply;
use serde_json::{json, Value};
use std::fmt;
use std::time::{Duration, Instant};

/// The turn bookkeeping of one session.
#[derive(Debug, Clone)]
pub(super) struct Turns {
    /// `SessionConfig::keep_session`.
    keep: bool,
    /// The agent advertised `agentCapabilities.sessionCapabilities.close` (ACP 1.x: an
    /// object when supported). Without it a kept session ends by its stdin closing.
    close_cap: bool,
    /// The open (or last) turn, from 1: the delegation's prompt is turn 1.
    turn: u32,
    /// When the open turn began: its budget and its `elapsedMs` count from here.
    started: Instant,
    /// Each turn's budget (`SessionConfig::task_timeout_ms`), restarted with each turn.
    budget: Duration,
    /// A follow-up sent with `interrupt`, waiting for the turn it interrupts to resolve.
    follow_up: Option<String>,
}

impl Turns {
    pub(super) fn new(keep: bool, budget: Duration, now: Instant) -> Turns {
        Turns {
            keep,
            close_cap: false,
            turn: 1,
            started: now,
            budget,
            follow_up: None,
        }
    }

    /// Reads `initialize`'s `agentCapabilities`: `sessionCapabilities.close` present as an
    /// object means the agent takes `session/close` (the Claude adapters do; Gemini 0.61
    /// advertises no sessionCapabilities, design §0).
    pub(super) fn read_capabilities(&mut self, caps: Option<&Value>) {
        self.close_cap = caps
            .and_then(|c| c.get("sessionCapabilities"))
            .and_then(|c| c.get("close"))
            .is_some_and(Value::is_object);
    }

    pub(super) fn turn(&self) -> u32 {
        self.turn
    }

    pub(super) fn started(&self) -> Instant {
        self.started
    }

    /// The next turn begins now; its number.
    pub(super) fn begin_next(&mut self, now: Instant) -> u32 {
        self.turn = self.turn.saturating_add(1);
        self.started = now;
        self.turn
    }

    /// The deadline of a turn beginning now.
    pub(super) fn deadline_from(&self, now: Instant) -> Instant {
        now + self.budget
    }

    pub(super) fn take_follow_up(&mut self) -> Option<String> {
        self.follow_up.take()
    }

    pub(super) fn drop_follow_up(&mut self) {
        self.follow_up = None;
    }
}

/// Why `Session::prompt` sent nothing. The task book refuses these cases before they reach a
/// session; a refusal here is a race (the session changed while the book's action travelled).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PromptRefusal {
    /// A turn is open and the prompt did not ask to interrupt it.
    TurnOpen { turn: u32 },
    /// The open turn is already being cancelled (its deadline, the caller's cancel, or an
    /// earlier interrupt).
    TurnEnding { turn: u32 },
    /// The session is closing or closed.
    Closed,
}

impl fmt::Display for PromptRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PromptRefusal::TurnOpen { turn } => write!(f, "turn {turn} is still open"),
            PromptRefusal::TurnEnding { turn } => write!(f, "turn {turn} is being cancelled"),
            PromptRefusal::Closed => write!(f, "the session has closed"),
        }
    }
}

impl Session {
    /// True while no turn is open and the session is not shutting down (kept, or closing).
    pub(super) fn between_turns(&self) -> bool {
        matches!(self.phase, Phase::Idle | Phase::Closing { .. })
    }

    /// The number of the open (or last) turn, from 1.
    pub fn turn(&self) -> u32 {
        self.turns.turn()
    }

    /// True while the session is kept between turns (`Event::Idle` was emitted).
    pub fn is_idle(&self) -> bool {
        self.phase == Phase::Idle
    }

    /// Sends a follow-up turn (issue 38 design §2); returns its number. A kept session is
    /// prompted at once. With `interrupt`, an open turn is cancelled first (`session/cancel`,
    /// its outcome `cancelled`), and the prompt is sent once the agent has resolved it; a
    /// first turn whose prompt was not sent yet ends `cancelled` before its prompt and this
    /// text is sent in its place. The turn's budget restarts with each turn.
    pub fn prompt(
        &mut self,
        text: String,
        interrupt: bool,
        now: Instant,
    ) -> Result<u32, PromptRefusal> {
        let turn = self.turns.turn();
        match self.phase.clone() {
            Phase::Idle => {
                let next = self.turns.begin_next(now);
                self.deadline = self.turns.deadline_from(now);
                self.prompt = Some(text);
                self.log(Level::Info, format!("follow-up: turn {next} sent"));
                self.send_prompt();
                Ok(next)
            }
            Phase::Prompting { id } if interrupt => {
                self.turns.follow_up = Some(text);
                self.log(
                    Level::Info,
                    format!("follow-up interrupts turn {turn}; cancelling it first"),
                );
                self.send_cancel(id, Cause::Interrupt, now);
                Ok(turn.saturating_add(1))
            }
            Phase::Initializing { .. } | Phase::Creating { .. } | Phase::SettingMode { .. }
                if interrupt =>
            {
                // Nothing was sent for the first turn: it ends here, and the setup goes on
                // with the follow-up as the prompt it sends.
                self.emit_outcome(
                    Status::Cancelled {
                        end: CancelEnd::BeforePrompt,
                    },
                    true,
                    now,
                );
                let next = self.turns.begin_next(now);
                self.deadline = self.turns.deadline_from(now);
                self.prompt = Some(text);
                Ok(next)
            }
            Phase::Initializing { .. }
            | Phase::Creating { .. }
            | Phase::SettingMode { .. }
            | Phase::Prompting { .. } => Err(PromptRefusal::TurnOpen { turn }),
            // The turn is being cancelled for its deadline (or its mode): the follow-up waits
            // for it as for an interrupt of its own. After the caller's cancel, or with a
            // follow-up already waiting, nothing more is taken.
            Phase::Cancelling { cause, .. }
                if interrupt
                    && self.turns.follow_up.is_none()
                    && matches!(cause, Cause::Deadline | Cause::LeftAskingMode(_)) =>
            {
                self.turns.follow_up = Some(text);
                Ok(turn.saturating_add(1))
            }
            Phase::Cancelling { .. } => Err(PromptRefusal::TurnEnding { turn }),
            Phase::Closing { .. } | Phase::Done => Err(PromptRefusal::Closed),
        }
    }

    /// Ends a kept session (its keep expired, its delegator closed it, the hub's cap, the
    /// hub stopping): `session/close` when the agent advertised it, awaited up to
    /// `stdin_grace_ms`, then the shutdown (stdin closed, TERM, KILL). A session with a turn
    /// open is cancelled instead (its outcome follows, and it closes after it); a closing or
    /// closed one is left as it is.
    pub fn close(&mut self, now: Instant) {
        match self.phase {
            Phase::Idle if self.turns.close_cap => {
                let sid = self.session_id.clone().unwrap_or_default();
                let id = self.request("session/close", json!({"sessionId": sid}));
                self.phase = Phase::Closing { id, since: now };
            }
            Phase::Idle => self.shut_down(now),
            Phase::Closing { .. } | Phase::Done => {}
            _ => {
                self.turns.drop_follow_up();
                self.cancel(now);
            }
        }
    }

    /// The answer to `session/close`: an error is only logged; either way the session ends.
    pub(super) fn on_closed(&mut self, reply: Reply, now: Instant) {
        if let Reply::Error(e) = reply {
            let message = self.secrets.clean(&e.message);
            self.log(
                Level::Info,
                format!(
                    "agent answered session/close with error {}: {message}",
                    e.code
                ),
            );
        }
        self.shut_down(now);
    }

    /// A turn resolved with a prompt result: a follow-up an interrupt queued is sent now;
    /// a completed turn of a session that keeps is followed by `Event::Idle`; anything else
    /// ends the session (`finish`).
    pub(super) fn end_turn(&mut self, status: Status, now: Instant) {
        let alive = self.exit.is_none() && !self.eof_seen;
        if alive {
            if let Some(text) = self.turns.take_follow_up() {
                self.emit_outcome(status, true, now);
                let next = self.turns.begin_next(now);
                self.deadline = self.turns.deadline_from(now);
                self.prompt = Some(text);
                self.log(Level::Info, format!("follow-up: turn {next} sent"));
                return self.send_prompt();
            }
            if self.turns.keep && matches!(status, Status::Completed { .. }) {
                self.emit_outcome(status, true, now);
                self.phase = Phase::Idle;
                let turn = self.turns.turn();
                self.events.push_back(Event::Idle { turn });
                return;
            }
        }
        self.finish(status, now)
    }
}
