//! The owner's side of a task run: `start` and `TaskHandle` (docs/acp.md "The runner").
//!
//! Owns the channel of `TaskEvent`s, the wake callback called after each send (the mio loop
//! plugs a `mio::Waker` in), and the requests an owner can make: cancel, the answer to a held
//! request (issue 37), a follow-up turn and the close of a kept session (issue 38), and "I am
//! gone" (dropping the handle, which cancels too). Refuses: ever blocking the owner (`start`,
//! `cancel` and drop return at once; the driver thread does the rest).

use super::control::{Control, FollowUp};
use super::driver::Driver;
use super::headless::{HeadlessDriver, HeadlessSpec};
use super::outbox::{self, Outbox};
use super::pipes::Input;
use super::{TaskEvent, TaskSpec, INPUT_QUEUE};
use agent_hub_proto::tasks::RequestAnswer;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender};
use std::sync::Arc;
use std::time::Duration;

/// A running (or ended) task. Dropping it cancels the task; the driver still carries out
/// the shutdown, reaps the child and removes the credential.
pub struct TaskHandle {
    events: Receiver<TaskEvent>,
    control: Arc<Control>,
    poke: SyncSender<Input>,
}

/// Starts one task on its own driver thread and returns at once. The agent is spawned on
/// that thread; a spawn failure arrives as a `failed` outcome like any other end. `wake` is
/// called after each event is sent. If even the thread cannot be started, the outcome and
/// `Ended` are already in the channel when `start` returns (and `wake` is not called).
pub fn start(spec: TaskSpec, wake: Box<dyn Fn() + Send>) -> TaskHandle {
    launch("acp-task", wake, move |out, inputs, poke| {
        Driver::new(spec, out, inputs, poke).run()
    })
}

/// Starts one headless task (`headless.rs`) on its own driver thread, exactly as `start`
/// does an ACP one: the same handle, the same events, the same cancel.
pub fn start_headless(spec: HeadlessSpec, wake: Box<dyn Fn() + Send>) -> TaskHandle {
    launch("headless-task", wake, move |out, inputs, poke| {
        HeadlessDriver::new(spec, out, inputs, poke).run()
    })
}

/// The one start both kinds of task share: the channels, the control flags, the driver's
/// thread named `thread` running `drive`, and the handle. A thread that cannot be started
/// leaves a `failed` outcome and `Ended` in the channel (the closure, with the spec and its
/// credential, is dropped with the error).
fn launch<F>(thread: &str, wake: Box<dyn Fn() + Send>, drive: F) -> TaskHandle
where
    F: FnOnce(Outbox, Receiver<Input>, SyncSender<Input>) + Send + 'static,
{
    let (events_tx, events) = mpsc::channel();
    let (poke, inputs) = mpsc::sync_channel(INPUT_QUEUE);
    let control = Arc::new(Control::default());
    let out = Outbox::new(Arc::clone(&control), events_tx.clone(), wake);
    let driver_poke = poke.clone();
    let spawned = std::thread::Builder::new()
        .name(thread.into())
        .spawn(move || drive(out, inputs, driver_poke));
    if let Err(e) = spawned {
        for ev in outbox::not_started(agent_hub_proto::acp::Status::Failed(
            agent_hub_proto::acp::Failure::Spawn(format!("cannot start the task's thread: {e}")),
        )) {
            let _ = events_tx.send(ev);
        }
        control.ended.store(true, Ordering::Release);
    }
    TaskHandle {
        events,
        control,
        poke,
    }
}

impl TaskHandle {
    /// Asks for the task to stop: `session/cancel` if the prompt runs (the outcome is then
    /// `cancelled`), then the shutdown escalation. Idempotent; never blocks.
    pub fn cancel(&self) {
        self.control.cancel.store(true, Ordering::Release);
        // A full queue means the driver is busy with input and reads the flag right after.
        let _ = self.poke.try_send(Input::Poke);
    }

    /// Hands the driver the decision for the held request `seq` (`TaskEvent::Request`);
    /// the session writes it to the agent, or logs and drops it when the request is no
    /// longer held. Never blocks. False when it could not be queued: the task has ended,
    /// or an owner gone wrong queued `MAX_QUEUED_ANSWERS` the driver has not taken.
    pub fn answer(&self, seq: u32, answer: RequestAnswer) -> bool {
        if self.has_ended() || !self.control.push_answer(seq, answer) {
            return false;
        }
        // A full input queue means the driver is busy and takes the answers right after.
        let _ = self.poke.try_send(Input::Poke);
        true
    }

    /// Hands the driver a follow-up turn for the session (issue 38 design §2): sent to a kept
    /// session at once, or with `interrupt` after the open turn is cancelled. Never blocks.
    /// False when it could not be queued (the task has ended, or an owner gone wrong queued
    /// more than the driver took).
    pub fn prompt(&self, turn: u32, text: String, interrupt: bool) -> bool {
        let follow_up = FollowUp {
            turn,
            text,
            interrupt,
        };
        if self.has_ended() || !self.control.push_prompt(follow_up) {
            return false;
        }
        let _ = self.poke.try_send(Input::Poke);
        true
    }

    /// Closes the kept session (`session/close` when the agent takes it, then the shutdown).
    /// Idempotent; never blocks.
    pub fn close(&self) {
        self.control.close.store(true, Ordering::Release);
        let _ = self.poke.try_send(Input::Poke);
    }

    /// The next event, if one is waiting.
    pub fn try_event(&self) -> Option<TaskEvent> {
        self.events.try_recv().ok()
    }

    /// Waits up to `timeout` for the next event (for tests and simple owners).
    pub fn next_event(&self, timeout: Duration) -> Result<TaskEvent, RecvTimeoutError> {
        self.events.recv_timeout(timeout)
    }

    /// The channel itself, for owners that want to iterate.
    pub fn events(&self) -> &Receiver<TaskEvent> {
        &self.events
    }

    /// True once the driver has sent (or is about to send) `Ended`: nothing more will run.
    pub fn has_ended(&self) -> bool {
        self.control.ended.load(Ordering::Acquire)
    }

    /// The agent's pid (and process group id) once started.
    pub fn pid(&self) -> Option<u32> {
        match self.control.pid.load(Ordering::Acquire) {
            0 => None,
            pid => Some(pid),
        }
    }
}

impl Drop for TaskHandle {
    fn drop(&mut self) {
        self.control.abandoned.store(true, Ordering::Release);
        let _ = self.poke.try_send(Input::Poke);
    }
}
