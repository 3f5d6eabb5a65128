//! The IO of one headless task (docs/delegation.md "Headless tasks"): the agent's
//! `run.headless` argv, already rendered with the prompt as one element, run once; its stdout
//! captured up to a cap and read back by the manifest's `run.outcome` parser.
//!
//! Owns: the driver thread (spawn through `process::spawn_reaped`, the start the ACP driver
//! shares: argv exec'd directly, never a shell; exactly the given environment; the task cwd;
//! its own process group; its sandbox), writing the prompt to the agent's stdin when its
//! manifest takes it there and closing stdin (a headless agent gets no other input: Codex
//! reads stdin when it is not a terminal), the capped stdout reader, the stderr tail,
//! the reaper, and carrying out `headless::Run`'s signals. Refuses: deciding anything (the
//! deadlines, the escalation and the outcome are `headless::run`'s and
//! `headless::outcome`'s), putting anything but the rendered argv on the command line.

use super::outbox::Outbox;
use super::pipes::{self, Input, PipeError, StderrTail};
use super::{process, TaskEnd, TaskEvent, STDERR_TAIL_LINES};
use agent_hub_host::agents::manifest::Outcome as Format;
use agent_hub_proto::acp::sanitize::Secrets;
use agent_hub_proto::acp::{CancelEnd, ExitStatus, Level, Status};
use agent_hub_proto::headless::{self, Captured, Event, HeadlessLimits, Run};
use std::ffi::OsString;
use std::io::Read;
use std::path::PathBuf;
use std::process::ChildStdout;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, SyncSender};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Everything one headless run needs. The caller resolved argv[0] to an absolute path,
/// substituted the prompt (`agents::argv::render`, which refuses what an argv cannot carry),
/// checked the cwd, and built the environment.
#[derive(Debug)]
pub struct HeadlessSpec {
    pub argv: Vec<OsString>,
    pub env: Vec<(OsString, OsString)>,
    /// The canonical task cwd, also the process's working directory.
    pub cwd: PathBuf,
    /// The manifest's `run.outcome`.
    pub format: Format,
    pub limits: HeadlessLimits,
    /// The final text's cap (the session's `max_text_bytes`).
    pub max_text_bytes: usize,
    /// The stdout cap (`tasks.headless_stdout_max_bytes`).
    pub stdout_max_bytes: usize,
    /// Values redacted from every excerpt (API keys in `env`, the task's token).
    pub secrets: Vec<String>,
    /// The prompt, for an agent that reads it on stdin (`run.headless_prompt = "stdin"`);
    /// None: it is already in `argv`.
    pub stdin_prompt: Option<String>,
    /// Whether the agent was given the hub's MCP server and its permission-prompt tool
    /// (`run.headless_mcp`, issue 37 design §6), for the log.
    pub hub_mcp: bool,
    /// The task's private folder, where its sandbox keeps its copies, and with the hub's MCP
    /// server its token and MCP config file; removed when the task ends.
    pub credential: Option<super::TaskCredential>,
    /// The OS sandbox, as for an ACP task.
    pub sandbox: Option<agent_hub_host::sandbox::TaskSandbox>,
}

pub(super) struct HeadlessDriver {
    spec: HeadlessSpec,
    /// The owner's channel, its wake and the shared flags (`outbox`, as the ACP driver's).
    out: Outbox,
    inputs: Receiver<Input>,
    input_tx: SyncSender<Input>,
}

impl HeadlessDriver {
    pub(super) fn new(
        spec: HeadlessSpec,
        out: Outbox,
        inputs: Receiver<Input>,
        input_tx: SyncSender<Input>,
    ) -> HeadlessDriver {
        HeadlessDriver {
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

    fn drive(&self) -> Result<TaskEnd, Status> {
        if self.out.owner_stopped() {
            return Err(Status::Cancelled {
                end: CancelEnd::BeforePrompt,
            });
        }
        let secrets = Secrets::new(self.spec.secrets.iter().cloned());
        let spawned = process::spawn_reaped(
            "headless-reap",
            &self.spec.argv,
            &self.spec.env,
            &self.spec.cwd,
            self.spec.sandbox.as_ref(),
            &secrets,
            self.input_tx.clone(),
        )?;
        let pgid = spawned.pgid;
        if let Some(line) = spawned.sandboxed {
            self.out.log(Level::Info, line);
        }
        // The prompt, when the manifest takes it on stdin (`run.headless_prompt = "stdin"`),
        // is written on a thread of its own: an agent that reads late, or never, must not
        // hold up this driver; a write to an agent that died fails and ends the thread. Then
        // stdin is closed (an agent such as Codex reads it to its end). Without one, stdin is
        // closed at once: a headless agent gets no other input.
        if let (Some(prompt), Some(mut pipe)) = (self.spec.stdin_prompt.clone(), spawned.stdin) {
            let spawned = std::thread::Builder::new()
                .name("headless-stdin".into())
                .spawn(move || {
                    use std::io::Write;
                    let _ = pipe.write_all(prompt.as_bytes());
                });
            if let Err(e) = spawned {
                self.out.log(
                    Level::Warn,
                    format!("cannot start the thread that writes the prompt: {e}"),
                );
            }
        }
        let (stdout, stderr) = (spawned.stdout, spawned.stderr);
        let started = Instant::now();
        self.out.control.pid.store(pgid, Ordering::Release);
        self.out.emit(TaskEvent::Started { pid: pgid });
        let mcp = if self.spec.hub_mcp {
            "with the hub's MCP server; its permission prompts go to the task's delegator"
        } else {
            "it has no hub MCP server"
        };
        self.out.log(
            Level::Info,
            format!("agent started headless (pid {pgid}); {mcp}"),
        );
        let captured = Arc::new(Mutex::new(Captured {
            cap_bytes: self.spec.stdout_max_bytes as u64,
            ..Captured::default()
        }));
        let tail = Arc::new(Mutex::new(StderrTail::default()));
        let mut run = Run::new(self.spec.limits, started);
        let mut signals = Vec::new();
        let (stderr_done_tx, stderr_done) = mpsc::channel::<()>();
        if let Err(why) = self.start_pipes(stdout, stderr, &captured, &tail, stderr_done_tx) {
            self.out
                .log(Level::Warn, format!("{why}; killing the agent"));
            process::signal_group(pgid, agent_hub_proto::acp::Signal::Kill);
            signals.push(agent_hub_proto::acp::Signal::Kill);
            // Nothing will read stdout: the exit alone decides.
            run.handle_eof(Instant::now());
        }
        let (ending, exit) = self.run_loop(&mut run, pgid, &mut signals);
        // The reason quotes stderr's last lines: give its reader the rest of the pipe, as
        // long as the end of stdout was given (a member of the group may hold it open).
        let _ = stderr_done.recv_timeout(std::time::Duration::from_millis(
            ending.limits.eof_exit_wait_ms,
        ));

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
        let stdout = match captured.lock() {
            Ok(c) => c.clone(),
            Err(_) => Captured::default(),
        };
        if !ending.stdout_complete {
            self.out.log(
                Level::Warn,
                format!(
                    "the agent's stdout was still open {} ms after it exited; its process group was killed",
                    ending.limits.eof_exit_wait_ms
                ),
            );
        }
        if stdout.truncated {
            self.out.log(
                Level::Warn,
                format!(
                    "the agent wrote {} bytes to stdout; only the first {} were kept (tasks.headless_stdout_max_bytes)",
                    stdout.total_bytes, stdout.cap_bytes
                ),
            );
        }
        let outcome = headless::build(
            &ending,
            &stdout,
            &stderr_tail,
            self.spec.format,
            self.spec.max_text_bytes,
            &secrets,
        );
        let level = match outcome.status {
            Status::Completed { .. } | Status::Cancelled { .. } => Level::Info,
            _ => Level::Warn,
        };
        self.out.log(level, format!("outcome {}", outcome.status));
        self.out.emit(TaskEvent::Outcome(outcome));
        Ok(TaskEnd {
            exit: Some(exit),
            signals,
            stderr_tail,
            stderr_bytes,
        })
    }

    fn start_pipes(
        &self,
        stdout: Option<ChildStdout>,
        stderr: Option<std::process::ChildStderr>,
        captured: &Arc<Mutex<Captured>>,
        tail: &Arc<Mutex<StderrTail>>,
        stderr_done: Sender<()>,
    ) -> Result<(), PipeError> {
        let (Some(stdout), Some(stderr)) = (stdout, stderr) else {
            return Err(PipeError::Missing);
        };
        let thread_err = PipeError::Thread;
        let tx = self.input_tx.clone();
        let cap = self.spec.stdout_max_bytes;
        let c = Arc::clone(captured);
        std::thread::Builder::new()
            .name("headless-stdout".into())
            .spawn(move || read_capped(stdout, cap, c, tx))
            .map_err(thread_err)?;
        let tail = Arc::clone(tail);
        std::thread::Builder::new()
            .name("headless-stderr".into())
            .spawn(move || {
                pipes::read_stderr(stderr, tail);
                let _ = stderr_done.send(());
            })
            .map_err(thread_err)?;
        Ok(())
    }

    /// One step per input (or deadline) until the run is finished; the ending and the exit.
    fn run_loop(
        &self,
        run: &mut Run,
        pgid: u32,
        signals: &mut Vec<agent_hub_proto::acp::Signal>,
    ) -> (headless::Ending, ExitStatus) {
        let mut stop_seen = false;
        loop {
            let now = Instant::now();
            if !stop_seen && self.out.owner_stopped() {
                stop_seen = true;
                if run.cancel(now) {
                    self.out.log(
                        Level::Info,
                        "the task is cancelled; stopping the agent".into(),
                    );
                }
            }
            if run.poll_timeout().is_some_and(|due| due <= now) {
                run.handle_timeout(now);
            }
            while let Some(ev) = run.poll_event() {
                match ev {
                    Event::Signal(s) => {
                        process::signal_group(pgid, s);
                        signals.push(s);
                    }
                    Event::Finished(ending) => {
                        let exit = ending.exit;
                        return (ending, exit);
                    }
                }
            }
            let input = match run.poll_timeout() {
                Some(due) => {
                    match self
                        .inputs
                        .recv_timeout(due.saturating_duration_since(Instant::now()))
                    {
                        Ok(i) => Some(i),
                        Err(RecvTimeoutError::Timeout) | Err(RecvTimeoutError::Disconnected) => {
                            None
                        }
                    }
                }
                None => self.inputs.recv().ok(),
            };
            let now = Instant::now();
            match input {
                None => run.handle_timeout(now),
                Some(Input::Exit(status)) => run.handle_exit(status, now),
                Some(Input::Eof) => run.handle_eof(now),
                // Lines are the ACP reader's; a poke only makes the loop look at the flags.
                Some(_) => {}
            }
        }
    }
}

/// Reads stdout to its end, keeping the first `cap` bytes and counting the rest (so the agent
/// never blocks on a full pipe), then sends `Eof`.
fn read_capped(
    mut out: ChildStdout,
    cap: usize,
    captured: Arc<Mutex<Captured>>,
    tx: SyncSender<Input>,
) {
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let n = match out.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        let Ok(mut c) = captured.lock() else {
            break;
        };
        c.total_bytes = c.total_bytes.saturating_add(n as u64);
        let room = cap.saturating_sub(c.bytes.len());
        let keep = room.min(n);
        c.bytes.extend_from_slice(&buf[..keep]);
        if keep < n {
            c.truncated = true;
        }
    }
    let _ = tx.send(Input::Eof);
}
