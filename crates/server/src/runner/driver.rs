//! The driver thread of one task (docs/acp.md "The runner"): it owns the `acp::Session`, feeds
//! it what the pipe threads and the reaper report, the owner's answers to held requests and
//! its follow-up turns and close (issue 38: the session may take more than one turn),
//! with the time read once per step, runs its deadlines, writes its lines, carries out its
//! events and forwards them to the owner.
//!
//! Owns the order of a run: session config checked, reaper thread ready, agent spawned, pipe
//! threads started, then one loop until the session's `Finished`; then the credential
//! removed and `Ended` sent. Refuses: deciding anything itself (every outcome is the
//! session's, except the three a session cannot give: the task is invalid, the agent could
//! not be started, the owner cancelled before it started) and waiting for anything but its
//! one input channel.

use super::outbox::Outbox;
use super::pipes::{self, Input, PipeError, QueueError, StderrTail, StdinQueue};
use super::process;
use super::{TaskEnd, TaskEvent, TaskSpec, STDERR_TAIL_LINES, STDIN_BACKLOG_MAX_BYTES};
use agent_hub_proto::acp::sanitize::Secrets;
use agent_hub_proto::acp::{
    CancelEnd, Event, ExitStatus, Failure, Level, Outcome, Refusal, Session, SessionConfig, Signal,
    Status,
};
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender};
use std::sync::{Arc, Mutex};
use std::time::Instant;

pub(super) struct Driver {
    spec: TaskSpec,
    /// The owner's channel, its wake and the shared flags (`outbox`, as the headless driver's).
    out: Outbox,
    inputs: Receiver<Input>,
    input_tx: SyncSender<Input>,
}

/// The state of a run once the agent was spawned.
struct Running {
    session: Session,
    pgid: u32,
    stdin: Option<StdinQueue>,
    signals: Vec<Signal>,
    exit: Option<ExitStatus>,
}

impl Driver {
    pub(super) fn new(
        spec: TaskSpec,
        out: Outbox,
        inputs: Receiver<Input>,
        input_tx: SyncSender<Input>,
    ) -> Driver {
        Driver {
            spec,
            out,
            inputs,
            input_tx,
        }
    }

    pub(super) fn run(mut self) {
        let result = self.drive();
        let credential = self.spec.credential.take();
        self.out.finish(result, credential);
    }

    /// Runs the task to its end; `Err` is the outcome of a task that never got a process.
    fn drive(&mut self) -> Result<TaskEnd, Status> {
        if self.out.owner_stopped() {
            return Err(Status::Cancelled {
                end: CancelEnd::BeforePrompt,
            });
        }
        let placeholder = SessionConfig::new("/", "", 1);
        let cfg = std::mem::replace(&mut self.spec.session, placeholder);
        let cwd = cfg.cwd.clone();
        let cap = cfg.limits.max_line_bytes;
        let secrets = Secrets::new(
            cfg.mcp_servers
                .iter()
                .flat_map(|s| s.env.iter().map(|(_, v)| v.clone()))
                .chain(self.spec.secrets.iter().cloned()),
        );
        let session = Session::new(cfg, Instant::now())
            .map_err(|e| Status::Refused(Refusal::Invalid(e.to_string())))?;

        let spawned = process::spawn_reaped(
            "acp-reap",
            &self.spec.argv,
            &self.spec.env,
            &cwd,
            self.spec.sandbox.as_ref(),
            &secrets,
            self.input_tx.clone(),
        )?;
        if let Some(line) = spawned.sandboxed {
            self.out.log(Level::Info, line);
        }
        let pgid = spawned.pgid;
        let pipes = (spawned.stdin, spawned.stdout, spawned.stderr);
        self.out.control.pid.store(pgid, Ordering::Release);
        self.out.emit(TaskEvent::Started { pid: pgid });
        self.out
            .log(Level::Info, format!("agent started (pid {pgid})"));

        let tail = Arc::new(Mutex::new(StderrTail::default()));
        let mut run = Running {
            session,
            pgid,
            stdin: None,
            signals: Vec::new(),
            exit: None,
        };
        if let Err(why) = self.start_pipes(pipes, cap, &tail, &mut run) {
            // Without its pipes the agent cannot be driven: end it; the session reports the
            // exit as the outcome.
            self.out
                .log(Level::Warn, format!("{why}; killing the agent"));
            process::signal_group(pgid, Signal::Kill);
            run.signals.push(Signal::Kill);
        }
        self.run_loop(&mut run);

        let (text, stderr_bytes) = match tail.lock() {
            Ok(t) => t.snapshot(),
            Err(_) => (String::new(), 0),
        };
        let mut stderr_tail: Vec<String> = text
            .lines()
            .filter(|l| !l.trim().is_empty())
            .rev()
            .take(STDERR_TAIL_LINES)
            .map(|l| secrets.clean(l))
            .collect();
        stderr_tail.reverse();
        Ok(TaskEnd {
            exit: run.exit,
            signals: run.signals,
            stderr_tail,
            stderr_bytes,
        })
    }

    fn start_pipes(
        &self,
        pipes: (
            Option<std::process::ChildStdin>,
            Option<std::process::ChildStdout>,
            Option<std::process::ChildStderr>,
        ),
        cap: usize,
        tail: &Arc<Mutex<StderrTail>>,
        run: &mut Running,
    ) -> Result<(), PipeError> {
        let (Some(stdin), Some(stdout), Some(stderr)) = pipes else {
            return Err(PipeError::Missing);
        };
        let thread_err = PipeError::Thread;
        run.stdin = Some(
            StdinQueue::start(stdin, STDIN_BACKLOG_MAX_BYTES, self.input_tx.clone())
                .map_err(thread_err)?,
        );
        let tx = self.input_tx.clone();
        std::thread::Builder::new()
            .name("acp-stdout".into())
            .spawn(move || pipes::read_stdout(stdout, cap, tx))
            .map_err(thread_err)?;
        let tail = Arc::clone(tail);
        std::thread::Builder::new()
            .name("acp-stderr".into())
            .spawn(move || pipes::read_stderr(stderr, tail))
            .map_err(thread_err)?;
        Ok(())
    }

    /// One step per input (or deadline) until the session is finished.
    fn run_loop(&self, run: &mut Running) {
        let mut cancel_seen = false;
        let mut abandon_seen = false;
        let mut close_seen = false;
        loop {
            let now = Instant::now();
            if !cancel_seen && self.out.control.cancel.load(Ordering::Acquire) {
                cancel_seen = true;
                if run.session.cancel(now) {
                    self.out
                        .log(Level::Info, "the owner cancelled the task".into());
                }
            }
            if !abandon_seen && self.out.control.abandoned.load(Ordering::Acquire) {
                abandon_seen = true;
                if run.session.cancel(now) {
                    self.out.log(
                        Level::Info,
                        "the task's owner is gone; cancelling the task".into(),
                    );
                }
            }
            for (seq, answer) in self.out.control.take_answers() {
                run.session.answer(seq, answer, now);
            }
            for f in self.out.control.take_prompts() {
                self.follow_up(run, f, now);
            }
            if !close_seen && self.out.control.close.load(Ordering::Acquire) {
                close_seen = true;
                run.session.close(now);
            }
            if let Some(due) = run.session.poll_timeout() {
                if due <= now {
                    run.session.handle_timeout(now);
                }
            }
            if self.pump(run) {
                return;
            }
            let input = match run.session.poll_timeout() {
                Some(due) => {
                    let wait = due.saturating_duration_since(Instant::now());
                    match self.inputs.recv_timeout(wait) {
                        Ok(input) => Some(input),
                        Err(RecvTimeoutError::Timeout) => None,
                        // We hold a sender ourselves, so this cannot happen; treat as a tick.
                        Err(RecvTimeoutError::Disconnected) => None,
                    }
                }
                // Nothing is timed: the reaper's exit will come, the process was signalled.
                None => self.inputs.recv().ok(),
            };
            let now = Instant::now();
            match input {
                None => run.session.handle_timeout(now),
                Some(Input::Line(line)) => run.session.handle_line(&line, now),
                Some(Input::LineTooLong) => run.session.handle_line_too_long(now),
                Some(Input::Eof) => run.session.handle_eof(now),
                Some(Input::Exit(status)) => {
                    run.exit = Some(status);
                    run.session.handle_exit(status, now);
                }
                Some(Input::WriteFailed(why)) => self.out.log(
                    Level::Info,
                    format!(
                        "writing to the agent's stdin failed ({}); later lines are dropped",
                        Secrets::default().clean(&why)
                    ),
                ),
                Some(Input::Poke) => {}
            }
        }
    }

    /// One follow-up from the owner. The book sends none the session cannot take but for a
    /// race (the session closed while the prompt travelled): the turn then gets an outcome
    /// of its own saying it was not sent, so the book hears of every turn it numbered.
    fn follow_up(&self, run: &mut Running, f: super::control::FollowUp, now: Instant) {
        match run.session.prompt(f.text, f.interrupt, now) {
            Ok(turn) if turn == f.turn => {}
            Ok(turn) => self.out.log(
                Level::Warn,
                format!(
                    "follow-up numbered {} by the hub is turn {turn} of the session",
                    f.turn
                ),
            ),
            Err(why) => {
                self.out.log(
                    Level::Info,
                    format!("follow-up (turn {}) not sent: {why}", f.turn),
                );
                self.out.emit(TaskEvent::Outcome(Outcome {
                    status: Status::Failed(Failure::FollowUpNotSent(why.to_string())),
                    text: String::new(),
                    truncated: false,
                    meter: Box::default(),
                    progress: run.session.progress(now),
                    turn: f.turn,
                    kept: run.session.is_idle(),
                }));
            }
        }
    }

    /// Writes every queued line, then acts on every event (the session's contract); true at
    /// `Finished`.
    fn pump(&self, run: &mut Running) -> bool {
        while let Some(line) = run.session.poll_transmit() {
            let Some(q) = run.stdin.as_mut() else {
                continue;
            };
            match q.send(line) {
                Ok(()) | Err(QueueError::Closed) => {}
                Err(QueueError::Backlog { pending }) => {
                    // The agent stopped reading while we still have to talk to it: it cannot
                    // be driven any further. Its exit decides the outcome.
                    self.out.log(
                        Level::Warn,
                        format!(
                            "the agent has not read {pending} bytes of its stdin (bound {STDIN_BACKLOG_MAX_BYTES}); killing its process group"
                        ),
                    );
                    run.stdin = None;
                    process::signal_group(run.pgid, Signal::Kill);
                    run.signals.push(Signal::Kill);
                }
            }
        }
        while let Some(ev) = run.session.poll_event() {
            match ev {
                Event::Progress(p) => self.out.emit(TaskEvent::Progress(p)),
                Event::Log(l) => self.out.emit(TaskEvent::Log(l)),
                Event::Request(ask) => self.out.emit(TaskEvent::Request(ask)),
                Event::Preapproved { ask, rule } => {
                    self.out.emit(TaskEvent::Preapproved { ask, rule })
                }
                Event::Outcome(o) => self.out.emit(TaskEvent::Outcome(o)),
                Event::Idle { turn } => self.out.emit(TaskEvent::Idle { turn }),
                Event::CloseStdin => {
                    if let Some(q) = run.stdin.as_mut() {
                        q.close();
                    }
                }
                Event::Signal(s) => {
                    process::signal_group(run.pgid, s);
                    run.signals.push(s);
                }
                Event::Finished => return true,
            }
        }
        false
    }
}
