//! The session's deadlines and endings (docs/acp.md "Deadlines", "Outcomes", "Shutdown"):
//! which deadline is due, the turn's budget and the per-step waits, the cancel grace, the
//! wait for `session/close`, the agent going away, and emitting a turn's outcome
//! (`emit_outcome`), then either the kept session (`turns.rs`) or the shutdown escalation
//! (`finish`, `shut_down`). Part of `Session`; split out so each file does one job.

use super::{cancelled_status, ms, Cause, Event, Level, Log, Phase, Session, Signal};
use crate::acp::outcome::{CancelEnd, ExitStatus, Failure, Outcome, Status, Step};
use crate::acp::rpc::RpcError;
use std::time::Instant;

impl Session {
    // ----- deadlines -----

    pub(super) fn task_deadline(&self) -> Option<Instant> {
        match self.phase {
            Phase::Initializing { .. }
            | Phase::Creating { .. }
            | Phase::SettingMode { .. }
            | Phase::Prompting { .. } => Some(self.deadline),
            Phase::Cancelling { .. } | Phase::Idle | Phase::Closing { .. } | Phase::Done => None,
        }
    }

    /// The current step's own deadline: a response wait or the cancel grace.
    pub(super) fn step_deadline(&self) -> Option<(Instant, u64)> {
        let l = &self.limits;
        match self.phase {
            Phase::Initializing { since, .. } => {
                Some((since + ms(l.initialize_timeout_ms), l.initialize_timeout_ms))
            }
            // The mode switch is the second half of setting the session up: same wait.
            Phase::Creating { since, .. } | Phase::SettingMode { since, .. } => Some((
                since + ms(l.session_new_timeout_ms),
                l.session_new_timeout_ms,
            )),
            Phase::Cancelling { since, .. } => {
                Some((since + ms(l.cancel_grace_ms), l.cancel_grace_ms))
            }
            // `session/close` is awaited as long as a closed stdin is (design §2).
            Phase::Closing { since, .. } => Some((since + ms(l.stdin_grace_ms), l.stdin_grace_ms)),
            Phase::Prompting { .. } | Phase::Idle | Phase::Done => None,
        }
    }

    pub(super) fn gone_deadline(&self) -> Option<Instant> {
        self.gone_at.map(|t| t + ms(self.limits.eof_exit_wait_ms))
    }

    pub(super) fn progress_due(&self) -> Option<Instant> {
        self.last_progress
            .map(|t| t + ms(self.limits.progress_interval_ms))
    }

    pub(super) fn run_deadlines(&mut self, now: Instant) {
        // When several are due, the earliest decides; on a tie the task's own budget does.
        let mut due: Vec<(Instant, u8)> = Vec::new();
        if let Some(t) = self.task_deadline().filter(|t| now >= *t) {
            due.push((t, 0));
        }
        if let Some((t, _)) = self.step_deadline().filter(|(t, _)| now >= *t) {
            due.push((t, 1));
        }
        if let Some(t) = self.gone_deadline().filter(|t| now >= *t) {
            due.push((t, 2));
        }
        let Some(&(_, which)) = due.iter().min() else {
            return;
        };
        match which {
            0 => self.on_task_deadline(now),
            1 => self.on_step_deadline(now),
            _ => self.agent_gone(self.exit, now),
        }
    }

    pub(super) fn on_task_deadline(&mut self, now: Instant) {
        let secs = self
            .deadline
            .saturating_duration_since(self.turns.started())
            .as_secs_f64();
        match self.phase {
            Phase::Initializing { .. } | Phase::Creating { .. } | Phase::SettingMode { .. } => {
                self.log(
                    Level::Warn,
                    format!("task timed out after {secs} s, before the prompt was sent"),
                );
                self.finish(
                    Status::TimedOut {
                        end: CancelEnd::BeforePrompt,
                    },
                    now,
                );
            }
            Phase::Prompting { id } => {
                self.log(
                    Level::Warn,
                    format!("task timed out after {secs} s; cancelling the prompt"),
                );
                self.send_cancel(id, Cause::Deadline, now);
            }
            Phase::Cancelling { .. } | Phase::Idle | Phase::Closing { .. } | Phase::Done => {}
        }
    }

    pub(super) fn on_step_deadline(&mut self, now: Instant) {
        let Some((_, waited_ms)) = self.step_deadline() else {
            return;
        };
        match self.phase.clone() {
            Phase::Initializing { .. } => self.finish(
                Status::Failed(Failure::NoAnswer {
                    step: Step::Initialize,
                    waited_ms,
                }),
                now,
            ),
            Phase::Creating { .. } => self.finish(
                Status::Failed(Failure::NoAnswer {
                    step: Step::SessionNew,
                    waited_ms,
                }),
                now,
            ),
            Phase::SettingMode { .. } => {
                let step = self.mode_step();
                self.finish(Status::Failed(Failure::NoAnswer { step, waited_ms }), now)
            }
            Phase::Cancelling { cause, .. } => {
                self.log(
                    Level::Warn,
                    format!("agent did not answer session/cancel within {waited_ms} ms"),
                );
                self.finish(
                    cancelled_status(cause, CancelEnd::NoAnswer { waited_ms }),
                    now,
                )
            }
            Phase::Closing { .. } => {
                self.log(
                    Level::Info,
                    format!("agent did not answer session/close within {waited_ms} ms"),
                );
                self.shut_down(now);
            }
            Phase::Prompting { .. } | Phase::Idle | Phase::Done => {}
        }
    }

    // ----- endings -----

    /// The agent exited (status known) or closed its output (status None) before the outcome.
    pub(super) fn agent_gone(&mut self, status: Option<ExitStatus>, now: Instant) {
        let status = match self.phase.clone() {
            Phase::Initializing { .. } => Status::Failed(Failure::Exited {
                during: Step::Initialize,
                status,
            }),
            Phase::Creating { .. } => Status::Failed(Failure::Exited {
                during: Step::SessionNew,
                status,
            }),
            Phase::SettingMode { .. } => Status::Failed(Failure::Exited {
                during: self.mode_step(),
                status,
            }),
            Phase::Prompting { .. } => Status::Failed(Failure::Exited {
                during: Step::Prompt,
                status,
            }),
            Phase::Cancelling { cause, .. } => cancelled_status(cause, CancelEnd::Exited(status)),
            // Between turns: its last outcome was given; the session just ends.
            Phase::Idle | Phase::Closing { .. } => {
                let how = match status {
                    Some(s) => format!("exited ({s})"),
                    None => "closed its output".to_owned(),
                };
                self.log(
                    Level::Info,
                    format!("agent {how} between turns; the kept session ends"),
                );
                return self.shut_down(now);
            }
            Phase::Done => return,
        };
        self.finish(status, now);
    }

    pub(super) fn garbage(&mut self, why: String, now: Instant) {
        self.log(Level::Warn, format!("agent spoke garbage: {why}"));
        let status = match self.phase.clone() {
            Phase::Cancelling { cause, .. } => cancelled_status(cause, CancelEnd::Garbage),
            Phase::Idle | Phase::Closing { .. } => return self.shut_down(now),
            Phase::Done => return,
            _ => Status::Failed(Failure::Garbage(why)),
        };
        self.finish(status, now);
    }

    pub(super) fn rpc_failed(&mut self, step: Step, e: RpcError, now: Instant) {
        let message = self.secrets.clean(&e.message);
        self.finish(
            Status::Failed(Failure::Rpc {
                step,
                code: e.code,
                message,
            }),
            now,
        );
    }

    /// Emits the open turn's outcome, then a follow-up that can no longer be sent as failed,
    /// and starts the shutdown: the session ends with this turn.
    pub(super) fn finish(&mut self, status: Status, now: Instant) {
        if self.between_turns() {
            return self.shut_down(now);
        }
        if self.phase == Phase::Done {
            return;
        }
        self.emit_outcome(status, false, now);
        if self.turns.take_follow_up().is_some() {
            let why = format!(
                "turn {} did not end in a way that leaves the session usable",
                self.turns.turn()
            );
            self.turns.begin_next(now);
            self.emit_outcome(Status::Failed(Failure::FollowUpNotSent(why)), false, now);
        }
        self.shut_down(now);
    }

    /// Ends the session without another outcome: `Done`, its stdin closed, TERM after
    /// `stdin_grace_ms` (or, when the agent already exited, `Finished`).
    pub(super) fn shut_down(&mut self, now: Instant) {
        if self.phase == Phase::Done {
            return;
        }
        self.phase = Phase::Done;
        self.gone_at = None;
        if self.exit.is_some() {
            self.end_of_process();
        } else if !self.stdin_closed {
            self.stdin_closed = true;
            self.events.push_back(Event::CloseStdin);
            self.shutdown = Some((Signal::Term, now + ms(self.limits.stdin_grace_ms)));
        }
    }

    /// The open turn's outcome (`kept`: the session stays for another turn), with its
    /// summary line; the phase is left to the caller.
    pub(super) fn emit_outcome(&mut self, status: Status, kept: bool, now: Instant) {
        // Nothing is left waiting on an answer once the turn is over (before the stdin is
        // closed, so the answers are written): requests are per turn (design §2).
        self.close_pending("the turn ended");
        self.progress_dirty = false;
        self.gone_at = None;
        self.prompt = None;
        let progress = self.progress(now);
        let (text, truncated) = self.fold.take_text();
        let mut summary = format!(
            "outcome {}{}: {} text bytes{}, {} tool calls, {} permission requests",
            status.name(),
            match self.turns.turn() {
                1 => String::new(),
                n => format!(" of turn {n}"),
            },
            text.len(),
            if truncated { " (truncated)" } else { "" },
            progress.tool_calls.total + progress.tool_calls.untracked,
            progress.permissions.asked,
        );
        if let Some(mode) = &progress.mode {
            summary.push_str(&format!(", session mode {mode}"));
        }
        if progress.notices > 0 {
            summary.push_str(&format!(
                ", {} notices kept out of the text",
                progress.notices
            ));
        }
        if progress.malformed_lines > 0 || progress.anomalies > 0 {
            summary.push_str(&format!(
                ", {} malformed lines, {} anomalies",
                progress.malformed_lines, progress.anomalies
            ));
        }
        if self.logs_suppressed > 0 {
            summary.push_str(&format!(
                ", {} log lines suppressed (max_log_events)",
                self.logs_suppressed
            ));
        }
        let level = match status {
            Status::Completed { .. } | Status::Cancelled { .. } => Level::Info,
            _ => Level::Warn,
        };
        // The summary is past the budget on purpose: it is the one line that must be seen.
        self.events.push_back(Event::Log(Log {
            level,
            message: summary,
        }));
        self.events.push_back(Event::Outcome(Outcome {
            status,
            text,
            truncated,
            meter: Box::new(self.fold.meter.clone()),
            progress,
            turn: self.turns.turn(),
            kept,
        }));
    }

    pub(super) fn end_of_process(&mut self) {
        if self.finished {
            return;
        }
        self.finished = true;
        self.shutdown = None;
        if !self.killed {
            // Whatever the agent left in its group (Gemini's relaunched child, codex-acp's
            // native binary, MCP servers, §5.2) must not outlive the task.
            self.events.push_back(Event::Signal(Signal::Kill));
        }
        let status = self.exit.map_or("unknown status".into(), |s| s.to_string());
        let mut msg = format!("agent exited ({status})");
        if self.lines_after_outcome > 0 {
            msg.push_str(&format!(
                "; {} lines after the outcome ignored",
                self.lines_after_outcome
            ));
        }
        self.events.push_back(Event::Log(Log {
            level: Level::Info,
            message: msg,
        }));
        self.events.push_back(Event::Finished);
    }
}
