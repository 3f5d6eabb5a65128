//! What a driver thread tells its task's owner (docs/acp.md "The runner"): the one `emit`,
//! `log` and `owner_stopped` both drivers (ACP, headless) use, how every run ends (`finish`),
//! and the events of a task that never got a process (`not_started`), the one builder the
//! drivers, the handle (a driver thread that could not start) and the loop's executor (a start
//! it refused before the runner) all use, so each such task logs its outcome the same way.
//!
//! Owns the event channel's sending end and the wake callback called after each send.
//! Refuses: deciding an outcome (the session's, `headless::build`'s, or the caller's status).

use super::control::Control;
use super::{TaskCredential, TaskEnd, TaskEvent};
use agent_hub_proto::acp::{Level, Log, Outcome, Progress, Status};
use std::sync::atomic::Ordering;
use std::sync::mpsc::Sender;
use std::sync::Arc;

/// The driver's side of the channel to the owner, with the flags they share.
pub(super) struct Outbox {
    pub(super) control: Arc<Control>,
    events: Sender<TaskEvent>,
    wake: Box<dyn Fn() + Send>,
}

impl Outbox {
    pub(super) fn new(
        control: Arc<Control>,
        events: Sender<TaskEvent>,
        wake: Box<dyn Fn() + Send>,
    ) -> Outbox {
        Outbox {
            control,
            events,
            wake,
        }
    }

    pub(super) fn emit(&self, ev: TaskEvent) {
        // A gone owner is not an error: the run still ends properly (the handle's drop
        // cancelled it), only nobody listens.
        if self.events.send(ev).is_ok() {
            (self.wake)();
        }
    }

    pub(super) fn log(&self, level: Level, message: String) {
        self.emit(TaskEvent::Log(Log { level, message }));
    }

    /// The owner cancelled the task or dropped its handle.
    pub(super) fn owner_stopped(&self) -> bool {
        self.control.cancel.load(Ordering::Acquire)
            || self.control.abandoned.load(Ordering::Acquire)
    }

    /// How every run ends, ACP or headless: a run that never got a process reports its outcome
    /// first (`not_started`); the credential (and with it the task's folder) goes before
    /// `Ended`, so an owner that saw `Ended` sees no file; then `ended` is set and `Ended` sent.
    pub(super) fn finish(
        &self,
        result: Result<TaskEnd, Status>,
        credential: Option<TaskCredential>,
    ) {
        let end = match result {
            Ok(end) => end,
            Err(status) => {
                let [log, outcome, _ended] = not_started(status);
                self.emit(log);
                self.emit(outcome);
                TaskEnd::default()
            }
        };
        drop(credential);
        self.control.ended.store(true, Ordering::Release);
        self.emit(TaskEvent::Ended(end));
    }
}

/// The events of a task that never got a process: its outcome's log line (which the hub
/// writes to the service log), its outcome, then `Ended`.
pub fn not_started(status: Status) -> [TaskEvent; 3] {
    let level = match status {
        Status::Cancelled { .. } => Level::Info,
        _ => Level::Warn,
    };
    [
        TaskEvent::Log(Log {
            level,
            message: format!("outcome {status}"),
        }),
        TaskEvent::Outcome(Outcome {
            status,
            text: String::new(),
            truncated: false,
            meter: Box::default(),
            progress: Progress::default(),
            turn: 1,
            kept: false,
        }),
        TaskEvent::Ended(TaskEnd::default()),
    ]
}
