//! The IO shell around the hub core: one mio event loop on one thread (PLAN.md §1).
//!
//! Owns sockets, the clock, the record files and signals. Each iteration: wait for events or
//! the next deadline; accept; read lines into the core; expire deadlines; write the audit batch
//! and commit staged sends; apply the core's outputs; flush sockets, tracking the first
//! accepted byte of each delivery. Refuses protocol decisions: those are all in `hub`.
//!
//! `Server` holds the core and one part per job, each owning its state (PLAN.md §14): the
//! listener (`accept::Accepting`), the client connections (`connections::Connections`), the
//! record files (`records::Records`), the queue store and its flush thread
//! (`commit_io::Commits`), the relay (`relay::Relay`), delegated work
//! (`delegation::Delegation`) and signals and the stop (`lifecycle::Lifecycle`). This file is
//! the iteration itself; one file per job beside it: `read` (sockets into the core), `outputs`
//! (the core's outputs applied, the commit point, flushing and closing), the parts' own files,
//! and SIGHUP's two reloads (`roster_reload`, `manifests`). `startup` (above this folder)
//! builds the server; `environment` is what it read from the process.

mod accept;
pub mod audit_chain;
mod commit_io;
pub mod conn;
mod connections;
mod delegation;
pub mod environment;
pub mod executor;
mod lifecycle;
mod listen_level;
pub mod liveness;
pub mod manifests;
mod nodelay;
pub mod os_ids;
mod outputs;
pub mod private_file;
mod read;
pub mod records;
mod relay;
pub mod relay_gate;
pub mod relay_io;
mod roster_reload;
pub mod signal;
mod timestamp;
mod write_buf;

pub use delegation::TaskStartError;

use crate::store::flush::Flusher;
use crate::store::Store;
use accept::Accepting;
use agent_hub_host::config::Limits;
use agent_hub_proto::hub::{ConnId, Hub};
use agent_hub_proto::kernel::now::Now;
use commit_io::Commits;
use connections::Connections;
use delegation::Delegation;
use lifecycle::Lifecycle;
use mio::net::TcpListener;
use mio::{Events, Interest, Poll, Token};
use records::Records;
use relay::Relay;
use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

const LISTENER: Token = Token(0);
const SIGNALS: Token = Token(1);
/// The store's flush thread and the delegated tasks' runner threads report through the one
/// waker on this token: mio allows one `Waker` per `Poll` (a second trips its debug check and
/// is unsupported on some platforms), so each wake drains both channels.
const WAKE: Token = Token(2);

/// How the server run ended.
#[derive(Debug)]
pub enum RunError {
    Io(io::Error),
}

impl std::fmt::Display for RunError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RunError::Io(e) => write!(f, "event loop failed: {e}"),
        }
    }
}

impl std::error::Error for RunError {}

pub struct Server {
    poll: Poll,
    /// The loop's one waker (token `WAKE`), shared by the flush thread and task runners.
    waker: Arc<mio::Waker>,
    hub: Hub,
    limits: Limits,
    /// The audit log and the service log (`records`).
    records: Records,
    /// The client listener and what accepting keeps (`accept`).
    accepting: Accepting,
    /// The client connections and their IO books (`connections`).
    conns: Connections,
    /// The queue store and its flush thread, which the core's batches go to (`commit_io`).
    commits: Commits,
    /// The relay to other hubs, when configured, and the core's outputs for it (`relay`).
    relay: Relay,
    /// Delegated work: the executor, the agent catalogue and its environment (`delegation`).
    tasks: Delegation,
    /// Signals, the roster file SIGHUP reads again, and the stop (`lifecycle`).
    lifecycle: Lifecycle,
}

impl Server {
    /// A server on an already-bound listener. `signals` is None in tests that stop the server
    /// another way.
    /// `hub` holds what the store held (`startup` restores it before the loop exists).
    pub fn new(
        listener: TcpListener,
        signals: Option<signal::Signals>,
        hub: Hub,
        limits: Limits,
        records: Records,
        mut store: Box<dyn Store>,
    ) -> io::Result<Server> {
        let poll = Poll::new()?;
        let accepting = Accepting::new(listener, &poll)?;
        let mut signals = signals;
        if let Some(s) = &mut signals {
            poll.registry()
                .register(&mut s.receiver, SIGNALS, Interest::READABLE)?;
        }
        let now = read_clock();
        let mut hub = hub;
        hub.start_purging(now);
        let waker = Arc::new(mio::Waker::new(poll.registry(), WAKE)?);
        let flusher = match store.take_background() {
            Some(work) => {
                let waker = waker.clone();
                let wake = Arc::new(move || {
                    let _ = waker.wake();
                });
                Some(Flusher::spawn_background(work, wake)?)
            }
            None => None,
        };
        // Replies wait for a flush only where the flush thread makes commits durable on disk.
        let hub = hub.with_sync(flusher.as_ref().is_some_and(Flusher::syncs));
        let mut records = records;
        records.set_service_flush(limits.service_log_flush());
        Ok(Server {
            poll,
            waker,
            hub,
            limits,
            records,
            accepting,
            conns: Connections::new(),
            commits: Commits::new(store, flusher),
            relay: Relay::default(),
            tasks: Delegation::default(),
            lifecycle: Lifecycle::new(signals),
        })
    }

    pub fn records(&mut self) -> &mut Records {
        &mut self.records
    }

    /// Runs until SIGTERM/SIGINT, then shuts down cleanly (SPEC §4.6).
    /// After `run` returned, in a process that exits next: the hub's queues and ledger are
    /// left to the exit to free (`Hub::forget_held`) instead of being freed one by one.
    pub fn forget_held_at_exit(&mut self) {
        self.hub.forget_held();
    }

    pub fn run(&mut self) -> Result<(), RunError> {
        let mut events = Events::with_capacity(1024);
        loop {
            // Only the monotonic clock before the wait: the wall clock (a calendar conversion)
            // is read once per iteration, after it.
            let mono = Instant::now();
            if self.drained(mono) {
                break;
            }
            let timeout = self.next_timeout(mono);
            if let Err(e) = self.poll.poll(&mut events, timeout) {
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(RunError::Io(e));
            }
            let now = read_clock();
            self.accepting.iterations += 1;
            for event in events.iter() {
                match event.token() {
                    LISTENER => self.accept(now),
                    SIGNALS => self.take_signals(now),
                    WAKE => {
                        self.take_flushes(now);
                        self.take_task_events(now);
                    }
                    token if relay_io::RelayIo::owns(token) => {
                        let (r, w) = (
                            event.is_readable() || event.is_read_closed() || event.is_error(),
                            event.is_writable(),
                        );
                        self.relay
                            .handle_event(self.poll.registry(), token, r, w, now.mono);
                    }
                    Token(t) => {
                        let id = t as ConnId;
                        if event.is_readable() || event.is_read_closed() || event.is_error() {
                            // Without a close or an error in the event, a short read has taken
                            // all there is: any later byte or FIN is a new edge (`read`).
                            let short_drains = !(event.is_read_closed() || event.is_error());
                            self.read(id, short_drains, now);
                        }
                        if event.is_writable()
                            && self.conns.map.get(&id).is_some_and(|c| c.has_output())
                        {
                            self.conns.dirty.push(id);
                        }
                    }
                }
            }
            for id in std::mem::take(&mut self.conns.read_again) {
                self.read(id, false, now);
            }
            self.relay.read_pending(self.poll.registry(), now.mono);
            self.accept_after_pause(now);
            self.hub.handle_timeout(now);
            self.expire_io_deadlines(now);
            self.tick_relay(now);
            self.settle(now);
        }
        self.stop();
        Ok(())
    }

    fn next_timeout(&self, now: Instant) -> Option<Duration> {
        let mut next = self.hub.poll_timeout();
        let mut consider = |t: Option<Instant>| {
            if let Some(t) = t {
                next = Some(next.map_or(t, |n| n.min(t)));
            }
        };
        consider(self.conns.first_deadline());
        consider(self.accepting.paused_until);
        consider(self.lifecycle.deadline);
        consider(self.records.due());
        if let Some((relay, directory)) = self.relay.timeouts() {
            consider(relay);
            consider(directory);
        }
        if !self.conns.read_again.is_empty() || self.relay.wants_read() {
            return Some(Duration::ZERO);
        }
        next.map(|t| t.saturating_duration_since(now))
    }
}

/// The clock, read once: both its monotonic and its wall reading.
fn read_clock() -> Now {
    Now {
        mono: Instant::now(),
        wall: chrono::Utc::now(),
    }
}
