//! The three pipes of a task's agent, each served by its own thread (docs/acp.md "The
//! runner"): stdout split into lines under the session's hard cap, stdin written from a
//! queue, stderr kept as a bounded tail.
//!
//! Owns the bounds: a stdout line is never buffered past `max_line_bytes` (the rest of the
//! stream is then drained and dropped, so the agent never blocks on a full pipe), the stdin
//! queue never past `STDIN_BACKLOG_MAX_BYTES` while a write is stuck, stderr never past
//! `STDERR_TAIL_BYTES`. Refuses: interpreting anything (the session does); blocking the
//! driver (every send to it is the only blocking point of a pipe thread).

use super::STDERR_TAIL_BYTES;
use agent_hub_proto::acp::ExitStatus;
use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{ChildStderr, ChildStdin, ChildStdout};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, Sender, SyncSender};
use std::sync::{Arc, Mutex};

/// What the pipe threads, the reaper and the handle tell the driver.
#[derive(Debug)]
pub(super) enum Input {
    /// One stdout line without its `\n`, at most `max_line_bytes`.
    Line(Vec<u8>),
    /// A stdout line passed `max_line_bytes`; everything after it is dropped.
    LineTooLong,
    /// Stdout reached its end (or failed to read).
    Eof,
    /// The process was reaped.
    Exit(ExitStatus),
    /// A write to stdin failed (the agent closed it or died); later lines are dropped.
    WriteFailed(String),
    /// The handle asks the driver to look at its flags (cancel, owner gone).
    Poke,
}

/// Reads stdout into lines of at most `cap` bytes until EOF, then sends `Eof`. Ends early
/// only when the driver is gone (it has reaped the process and needs nothing more).
pub(super) fn read_stdout(out: ChildStdout, cap: usize, tx: SyncSender<Input>) {
    let mut r = BufReader::with_capacity(64 << 10, out);
    let mut line: Vec<u8> = Vec::new();
    let mut dropping = false;
    loop {
        let buf = match r.fill_buf() {
            Ok([]) => break,
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        let n = buf.len();
        if dropping {
            r.consume(n);
            continue;
        }
        let (part, used, complete) = match buf.iter().position(|&b| b == b'\n') {
            Some(i) => (&buf[..i], i + 1, true),
            None => (buf, n, false),
        };
        if line.len() + part.len() > cap {
            line = Vec::new();
            dropping = true;
            r.consume(n);
            if tx.send(Input::LineTooLong).is_err() {
                return;
            }
            continue;
        }
        line.extend_from_slice(part);
        r.consume(used);
        if complete && tx.send(Input::Line(std::mem::take(&mut line))).is_err() {
            return;
        }
    }
    if !line.is_empty() && !dropping && tx.send(Input::Line(line)).is_err() {
        return;
    }
    let _ = tx.send(Input::Eof);
}

/// Why a driver could not set up its agent's pipes (it then kills the agent).
#[derive(Debug)]
pub(super) enum PipeError {
    /// The child came without one of its piped stdio handles.
    Missing,
    /// A pipe's thread could not be started.
    Thread(std::io::Error),
}

impl std::fmt::Display for PipeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PipeError::Missing => write!(f, "the agent's pipes were not created"),
            PipeError::Thread(e) => write!(f, "cannot start a pipe thread: {e}"),
        }
    }
}

impl std::error::Error for PipeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            PipeError::Missing => None,
            PipeError::Thread(e) => Some(e),
        }
    }
}

/// The driver's end of the stdin writer: a queue with a byte bound.
pub(super) struct StdinQueue {
    tx: Option<Sender<Vec<u8>>>,
    backlog: Arc<AtomicUsize>,
    max_backlog: usize,
}

/// Why a line was not queued.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum QueueError {
    /// `close` was called, or the writer thread is gone.
    Closed,
    /// The agent has not read what was queued before; `pending` bytes wait.
    Backlog { pending: usize },
}

impl StdinQueue {
    /// Starts the writer thread for `stdin`. `tell` reports a failed write to the driver.
    pub(super) fn start(
        stdin: ChildStdin,
        max_backlog: usize,
        tell: SyncSender<Input>,
    ) -> std::io::Result<StdinQueue> {
        let (tx, rx) = std::sync::mpsc::channel::<Vec<u8>>();
        let backlog = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&backlog);
        std::thread::Builder::new()
            .name("acp-stdin".into())
            .spawn(move || write_stdin(stdin, rx, counter, tell))?;
        Ok(StdinQueue {
            tx: Some(tx),
            backlog,
            max_backlog,
        })
    }

    /// Queues `line` and its `\n`. Never blocks.
    pub(super) fn send(&mut self, line: String) -> Result<(), QueueError> {
        let Some(tx) = self.tx.as_ref() else {
            return Err(QueueError::Closed);
        };
        let mut bytes = line.into_bytes();
        bytes.push(b'\n');
        let pending = self.backlog.load(Ordering::Acquire);
        if pending > 0 && pending.saturating_add(bytes.len()) > self.max_backlog {
            return Err(QueueError::Backlog { pending });
        }
        self.backlog.fetch_add(bytes.len(), Ordering::AcqRel);
        tx.send(bytes).map_err(|_| QueueError::Closed)
    }

    /// Closes stdin once every queued line is written (a stuck write holds it open until
    /// the process dies, which the shutdown escalation sees to).
    pub(super) fn close(&mut self) {
        self.tx = None;
    }
}

fn write_stdin(
    mut stdin: ChildStdin,
    rx: Receiver<Vec<u8>>,
    backlog: Arc<AtomicUsize>,
    tell: SyncSender<Input>,
) {
    let mut failed = false;
    for bytes in rx {
        if !failed {
            let result = stdin.write_all(&bytes).and_then(|()| stdin.flush());
            if let Err(e) = result {
                failed = true;
                // The session learns the agent's end from the exit; this is for the log.
                let _ = tell.send(Input::WriteFailed(e.to_string()));
            }
        }
        backlog.fetch_sub(bytes.len(), Ordering::AcqRel);
    }
    drop(stdin);
}

/// The bounded tail of stderr, shared between its reader thread and the driver.
#[derive(Debug, Default)]
pub(super) struct StderrTail {
    bytes: VecDeque<u8>,
    total: u64,
}

impl StderrTail {
    fn push(&mut self, chunk: &[u8]) {
        self.total = self.total.saturating_add(chunk.len() as u64);
        let chunk = &chunk[chunk.len().saturating_sub(STDERR_TAIL_BYTES)..];
        let over = (self.bytes.len() + chunk.len()).saturating_sub(STDERR_TAIL_BYTES);
        self.bytes.drain(..over.min(self.bytes.len()));
        self.bytes.extend(chunk);
    }

    /// The kept bytes as text and the total byte count.
    pub(super) fn snapshot(&self) -> (String, u64) {
        let (a, b) = self.bytes.as_slices();
        let mut v = Vec::with_capacity(a.len() + b.len());
        v.extend_from_slice(a);
        v.extend_from_slice(b);
        (String::from_utf8_lossy(&v).into_owned(), self.total)
    }
}

/// Reads stderr until EOF into `tail`. The drivers wait for this thread's end only for a
/// bounded time (`eof_exit_wait_ms`): a grandchild that keeps stderr open must not hold up the
/// task's end, but the last lines an agent wrote before it exited are kept.
pub(super) fn read_stderr(mut err: ChildStderr, tail: Arc<Mutex<StderrTail>>) {
    let mut buf = vec![0u8; 8 << 10];
    loop {
        match err.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => match tail.lock() {
                Ok(mut t) => t.push(&buf[..n]),
                Err(_) => return,
            },
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stderr_tail_keeps_the_last_bytes_and_counts_all() {
        let mut t = StderrTail::default();
        t.push(b"first line\n");
        t.push(&vec![b'x'; STDERR_TAIL_BYTES]);
        t.push(b"\nlast line\n");
        let (text, total) = t.snapshot();
        assert_eq!(text.len(), STDERR_TAIL_BYTES);
        assert!(text.ends_with("\nlast line\n"));
        assert!(!text.contains("first"));
        assert_eq!(total, (11 + STDERR_TAIL_BYTES + 11) as u64);
        let mut t = StderrTail::default();
        t.push(&vec![b'y'; 3 * STDERR_TAIL_BYTES]);
        assert_eq!(t.snapshot().0.len(), STDERR_TAIL_BYTES);
    }
}
