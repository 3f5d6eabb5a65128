//! The IO shell around the hub core: one mio event loop on one thread (PLAN.md §1).
//!
//! Owns sockets, the clock, the record files and signals. Each iteration: wait for events or
//! the next deadline; accept; read lines into the core; expire deadlines; write the audit batch
//! and commit staged sends; apply the core's outputs; flush sockets, tracking the first
//! accepted byte of each delivery. Refuses protocol decisions: those are all in `hub`.

mod accept;
pub mod audit_chain;
mod commit_io;
pub mod conn;
pub mod environment;
pub mod executor;
mod listen_level;
pub mod liveness;
pub mod manifests;
mod nodelay;
pub mod os_ids;
pub mod private_file;
pub mod records;
pub mod relay_gate;
pub mod relay_io;
mod roster_reload;
pub mod signal;
mod timestamp;
mod write_buf;

use crate::store::flush::{FlushResult, Flusher};
use crate::store::Store;
use agent_hub_host::config::Limits;
use agent_hub_proto::hub::{ConnId, Hub, Now, Output};
use conn::{Conn, Flush};
use mio::net::TcpListener;
use mio::{Events, Interest, Poll, Token};
use records::Records;
use relay_io::ToHub;
use std::collections::BTreeSet;
use std::fs::File;
use std::io::{self, Read, Write};
use std::net::Shutdown;
use std::sync::Arc;
use std::time::{Duration, Instant};

const LISTENER: Token = Token(0);
const SIGNALS: Token = Token(1);
/// The store's flush thread and the delegated tasks' runner threads report through the one
/// waker on this token: mio allows one `Waker` per `Poll` (a second trips its debug check and
/// is unsupported on some platforms), so each wake drains both channels.
const WAKE: Token = Token(2);
const FIRST_CONN: u64 = 4;

/// Input read from one socket per readiness event before others get a turn.
const READ_BUDGET_BYTES: usize = 1024 * 1024;
/// How long accepting pauses when even the reserve descriptor cannot be had.
const ACCEPT_PAUSE: Duration = Duration::from_millis(100);
/// Minimum gap between two service-log lines about refused connections.
const REFUSAL_LOG_INTERVAL: Duration = Duration::from_secs(5);

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

/// Tallies of refused connections, logged at most every `REFUSAL_LOG_INTERVAL`.
#[derive(Default)]
struct Refusals {
    at_limit: u64,
    no_fds: u64,
    /// Connections without an authenticated hello closed to make room for a newer one.
    evicted: u64,
    last_logged: Option<Instant>,
}

pub struct Server {
    poll: Poll,
    /// The loop's one waker (token `WAKE`), shared by the flush thread and task runners.
    waker: Arc<mio::Waker>,
    listener: Option<TcpListener>,
    signals: Option<signal::Signals>,
    hub: Hub,
    limits: Limits,
    /// Boxed, as the core's (docs/performance.md, "W3: memory per parked await"), and keyed
    /// by the ids this server hands out, so the hub's cheap hasher serves (`hub::conn_map`).
    conns: agent_hub_proto::hub::ConnMap<Box<Conn>>,
    next_conn: ConnId,
    /// IO deadlines (write and linger), by connection.
    deadlines: BTreeSet<(Instant, ConnId)>,
    /// Connections with output to flush this iteration, in the order they got it, repeats
    /// allowed: `settle` sorts, dedups and drops the closed ones, so the flush order is the
    /// ascending one a `BTreeSet` gave, without a tree node allocated per iteration
    /// (docs/performance.md, "Design decisions").
    dirty: Vec<ConnId>,
    /// `dirty`'s buffer while its ids are flushed, kept for its capacity.
    flushing: Vec<ConnId>,
    /// Connections whose read budget ran out: read again next iteration.
    read_again: BTreeSet<ConnId>,
    records: Records,
    store: Box<dyn Store>,
    /// The relay to other hubs, when configured.
    relay: Option<relay_io::RelayIo>,
    /// The core's forwards and forward acks, for the relay (`exchange_with_relay`).
    to_relay: Vec<Output>,
    /// When the relay's heartbeat directory is next refreshed from the hub.
    next_directory: Option<Instant>,
    /// Held open so that at EMFILE one descriptor can be freed to accept-and-close.
    reserve_fd: Option<File>,
    accept_paused_until: Option<Instant>,
    refusals: Refusals,
    shutting_down: bool,
    /// The store's background thread: flushes commits to disk (`store.sync = "full"`) and
    /// checkpoints the WAL, off the loop; None for the memory store.
    flusher: Option<Flusher>,
    /// Delegated tasks' executor, when `[tasks]` is configured (`executor`).
    tasks: Option<executor::Executor>,
    /// What the agent catalogue takes from the environment, read once at startup
    /// (`environment`): the task executor, the relay's agent cards and every reload use it.
    agent_env: environment::AgentEnv,
    /// The agent catalogue in force, when `[tasks]` is configured; the executor resolves
    /// through the same one (`manifests` swaps both on SIGHUP).
    catalogue: Option<Arc<agent_hub_host::agents::registry::Registry>>,
    /// Where delegated tasks run (the first of `tasks.cwd_roots`) and how many may run at
    /// once, for claudectl's `headroom` (set by `start_tasks`).
    task_dir: Option<std::path::PathBuf>,
    max_tasks: Option<usize>,
    shutdown_deadline: Option<Instant>,
    scratch: Vec<u8>,
    /// The roster file, read again on SIGHUP (`roster_reload`); None in tests that build a
    /// server from a parsed roster.
    roster_path: Option<std::path::PathBuf>,
    /// Accepted sockets get TCP_NODELAY from the listener (`nodelay`), not one by one.
    nodelay_inherited: bool,
    /// The listener is watched level-triggered (`listen_level`): an accept pass may stop at
    /// `accept_batch`'s bound instead of at EAGAIN.
    level_listener: bool,
    accept_batch: listen_level::AcceptBatch,
    /// Loop iterations so far (for `accept_batch`).
    iterations: u64,
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
        let mut listener = listener;
        let nodelay_inherited = nodelay::inherit_from_listener(&listener);
        poll.registry()
            .register(&mut listener, LISTENER, Interest::READABLE)?;
        let level_listener = {
            use std::os::fd::AsRawFd;
            listen_level::make_level_triggered(&poll, listener.as_raw_fd(), LISTENER)
        };
        let mut signals = signals;
        if let Some(s) = &mut signals {
            poll.registry()
                .register(&mut s.receiver, SIGNALS, Interest::READABLE)?;
        }
        let now = Now {
            mono: Instant::now(),
            wall: chrono::Utc::now(),
        };
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
            listener: Some(listener),
            signals,
            hub,
            limits,
            conns: agent_hub_proto::hub::ConnMap::default(),
            next_conn: FIRST_CONN,
            deadlines: BTreeSet::new(),
            dirty: Vec::new(),
            flushing: Vec::new(),
            read_again: BTreeSet::new(),
            records,
            store,
            relay: None,
            to_relay: Vec::new(),
            next_directory: None,
            reserve_fd: File::open("/dev/null").ok(),
            accept_paused_until: None,
            refusals: Refusals::default(),
            shutting_down: false,
            flusher,
            tasks: None,
            agent_env: environment::AgentEnv::default(),
            catalogue: None,
            task_dir: None,
            max_tasks: None,
            shutdown_deadline: None,
            scratch: vec![0u8; 64 * 1024],
            roster_path: None,
            nodelay_inherited,
            level_listener,
            accept_batch: listen_level::AcceptBatch::default(),
            iterations: 0,
        })
    }

    /// Starts the relay (its listener and its dials). Errors name the key file or address.
    pub fn start_relay(
        &mut self,
        cfg: agent_hub_host::config::RelayConfig,
    ) -> Result<Option<std::net::SocketAddr>, relay_io::RelayStartError> {
        let forward_peers: Vec<String> = cfg
            .peers
            .iter()
            .filter(|p| p.forward)
            .map(|p| p.id.clone())
            .collect();
        if !forward_peers.is_empty() {
            self.hub
                .enable_forwarding(&cfg.peer_id, forward_peers, cfg.forward_window);
        }
        // Relay connections and client connections must fit in the descriptors together, or
        // a flood of relay connections could take the ones local clients need.
        if let Some(nofile) = relay_gate::nofile_limit() {
            let dials = cfg.peers.iter().filter(|p| p.address.is_some()).count();
            relay_gate::check_descriptors(self.limits.max_connections, &cfg.limits, dials, nofile)
                .map_err(relay_io::RelayStartError::Descriptors)?;
        }
        let cards = relay_io::cards::CardSource {
            sources: self.agent_env.sources.clone(),
            path_var: self.agent_env.path_var.clone(),
        };
        let task_dir = self
            .task_dir
            .clone()
            .unwrap_or_else(|| std::path::PathBuf::from("."));
        let relay =
            relay_io::RelayIo::new(cfg, cards, task_dir, self.poll.registry(), Instant::now())?;
        let addr = relay.local_addr();
        self.relay = Some(relay);
        self.next_directory = Some(Instant::now());
        Ok(addr)
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
            // The drain waits for open connections, for running tasks' outcomes (the cancel
            // asked at shutdown) and for their runners to reap the agents, up to the deadline
            // (SPEC §4.6, docs/delegation.md). An outcome comes before the agent's shutdown
            // escalation; a hub that left then would orphan an agent that ignores stdin EOF
            // (codex-acp, seen by scripts/e2e-agents.sh), as its runner thread dies with us.
            let runners = self.tasks.as_ref().map_or(0, executor::Executor::running);
            if self.shutting_down
                && ((self.conns.is_empty() && self.hub.active_tasks() == 0 && runners == 0)
                    || self.shutdown_deadline.is_some_and(|d| mono >= d))
            {
                break;
            }
            let timeout = self.next_timeout(mono);
            if let Err(e) = self.poll.poll(&mut events, timeout) {
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(RunError::Io(e));
            }
            let now = self.now();
            self.iterations += 1;
            for event in events.iter() {
                match event.token() {
                    LISTENER => self.accept(now),
                    SIGNALS => {
                        let pending = self
                            .signals
                            .as_mut()
                            .map(signal::Signals::drain)
                            .unwrap_or_default();
                        if pending.reload {
                            self.reload_roster(now);
                            self.reload_manifests();
                        }
                        if pending.stop {
                            self.begin_shutdown(now);
                        }
                    }
                    WAKE => {
                        self.take_flushes(now);
                        self.take_task_events(now);
                    }
                    token if relay_io::RelayIo::owns(token) => {
                        if let Some(relay) = &mut self.relay {
                            let (r, w) = (
                                event.is_readable() || event.is_read_closed() || event.is_error(),
                                event.is_writable(),
                            );
                            relay.handle_event(self.poll.registry(), token, r, w, now.mono);
                        }
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
                            && self.conns.get(&id).is_some_and(|c| c.has_output())
                        {
                            self.dirty.push(id);
                        }
                    }
                }
            }
            for id in std::mem::take(&mut self.read_again) {
                self.read(id, false, now);
            }
            if let Some(relay) = &mut self.relay {
                relay.read_pending(self.poll.registry(), now.mono);
            }
            if self.accept_paused_until.is_some_and(|t| now.mono >= t) {
                self.accept_paused_until = None;
                self.accept(now);
            }
            self.hub.handle_timeout(now);
            self.expire_io_deadlines(now);
            self.tick_relay(now);
            self.settle(now);
        }
        // Whatever is staged is committed and flushed, and its replies written, before the
        // process ends; a flush that outlasts the write deadline (a hung disk) is given up on.
        let give_up =
            agent_hub_proto::kernel::deadline::after(Instant::now(), self.limits.write_timeout());
        self.commit_and_flush_all(give_up);
        // The drain deadline passed with connections still open: each is released as a failed
        // write releases it, so a delivery cut short is lost and bounced, one not started goes
        // back to its queue, and an unacked one is returned (SPEC §4.6, §5.3). Their records,
        // and the bounces, are committed like any other before the process ends.
        let now = self.now();
        let left: Vec<ConnId> = self.conns.keys().copied().collect();
        for id in left {
            self.close(
                id,
                false,
                "the hub stopped before this connection finished",
                now,
            );
        }
        self.commit_and_flush_all(give_up);
        if self.hub.has_staged_sends() {
            // Bounces whose commit kept failing: their losses are audited, the notices are not.
            self.records.log(
                "ERROR",
                "stopping with bounces that could not be committed (the queue store or the audit log is failing); their senders are not told",
            );
        }
        // What the strangers' rate counted goes out before the `shutdown` record (SPEC §8.1).
        let now = self.now();
        self.hub.flush_strangers(now);
        self.hub.stopped();
        self.drain_outputs();
        let _ = self.records.flush_audit(std::iter::empty());
        self.records.record_head_moved();
        if let Some(head) = self.records.chain_head() {
            // A copy of the head outside the audit log: `audit verify --anchor` checks it.
            self.records
                .log("INFO", &format!("audit chain head at stop: sha256 {head}"));
        }
        self.records.log("INFO", "hub stopped");
        self.records.flush_service();
        Ok(())
    }

    /// Settles (commit point, socket writes) until nothing is staged, waiting for the store's
    /// flushes up to `give_up`.
    fn commit_and_flush_all(&mut self, give_up: Instant) {
        loop {
            let now = self.now();
            self.settle(now);
            let reports = match &mut self.flusher {
                Some(f) if f.is_busy() => f.wait_all(give_up),
                _ => break,
            };
            let stuck = self.flusher.as_ref().is_some_and(Flusher::is_busy);
            self.apply_flushes(reports, now);
            if stuck {
                self.records.log(
                    "ERROR",
                    &format!(
                        "the queue store's flush did not finish within {} ms; stopping without confirming {} replies",
                        self.limits.write_timeout_ms,
                        self.hub.held_replies()
                    ),
                );
                break;
            }
        }
    }

    fn now(&self) -> Now {
        Now {
            mono: Instant::now(),
            wall: chrono::Utc::now(),
        }
    }

    fn next_timeout(&self, now: Instant) -> Option<Duration> {
        let mut next = self.hub.poll_timeout();
        let mut consider = |t: Option<Instant>| {
            if let Some(t) = t {
                next = Some(next.map_or(t, |n| n.min(t)));
            }
        };
        consider(self.deadlines.first().map(|&(t, _)| t));
        consider(self.accept_paused_until);
        consider(self.shutdown_deadline);
        consider(self.records.due());
        if let Some(relay) = &self.relay {
            consider(relay.poll_timeout());
            consider(self.next_directory);
        }
        if !self.read_again.is_empty() || self.relay.as_ref().is_some_and(|r| r.wants_read()) {
            return Some(Duration::ZERO);
        }
        next.map(|t| t.saturating_duration_since(now))
    }

    // ----- reading -----

    /// Reads what `id`'s socket holds into the core. With `short_drains`, a read that fills
    /// less than the buffer ends it without a further read that would only say WouldBlock:
    /// the caller knows a later byte or FIN will be reported as a new edge (the event had
    /// no close in it, or the socket is registered only after this read).
    fn read(&mut self, id: ConnId, short_drains: bool, now: Now) {
        let max_line = self.limits.max_line_bytes;
        // A connection without its hello yet is held to the hello cap (SPEC §2.1): asked of
        // the core only for input longer than that, so a usual read costs no lookup.
        let hello_cap = agent_hub_proto::wire::HELLO_MAX_LINE_BYTES.min(max_line);
        let mut budget = READ_BUDGET_BYTES;
        loop {
            let Some(conn) = self.conns.get_mut(&id) else {
                return;
            };
            if conn.read_eof {
                return;
            }
            if budget == 0 {
                self.read_again.insert(id);
                return;
            }
            match conn.stream.read(&mut self.scratch) {
                Ok(0) => {
                    conn.read_eof = true;
                    if conn.shut_down || (conn.answered && !conn.has_output()) {
                        // Lingering after an error or an answer: the peer is done too.
                        self.close(id, true, "closed", now);
                    } else {
                        self.hub.handle_eof(id, now);
                        self.drain_outputs();
                    }
                    return;
                }
                Ok(n) => {
                    budget = budget.saturating_sub(n);
                    let drained = short_drains && n < self.scratch.len();
                    if conn.discard_input {
                        if drained {
                            return;
                        }
                        continue;
                    }
                    if conn.input.pending_len() == 0 {
                        // Nothing held from an earlier read (the usual case: a whole line per
                        // read): the lines are taken from the read buffer itself, and only a
                        // partial tail is copied into the connection's own buffer.
                        self.take_lines(id, n, (hello_cap, max_line), now);
                        if drained {
                            return;
                        }
                        continue;
                    }
                    conn.input.push(&self.scratch[..n]);
                    loop {
                        let conn = self.conns.get_mut(&id).expect("conn exists while reading");
                        if conn.discard_input {
                            break;
                        }
                        let cap =
                            if conn.input.pending_len() > hello_cap && self.hub.awaits_hello(id) {
                                hello_cap
                            } else {
                                max_line
                            };
                        match conn.input.next_line(cap) {
                            Ok(Some(line)) => self.hub.handle_line(id, line, now),
                            Ok(None) => break,
                            Err(too_long) => {
                                conn.discard_input = true;
                                conn.input = agent_hub_proto::wire::LineBuffer::new();
                                self.hub.handle_bad_input(id, &too_long.to_string(), now);
                            }
                        }
                        self.drain_outputs();
                    }
                    if let Some(conn) = self.conns.get_mut(&id) {
                        conn.input.shrink();
                    }
                    if drained {
                        return;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    self.close(id, false, &format!("read failed: {e}"), now);
                    return;
                }
            }
        }
    }

    /// Hands the complete lines in `self.scratch[..n]` to the core, as `LineBuffer` would
    /// (same limits, same error), without copying them; a partial last line is kept in the
    /// connection's buffer for the next read. Only called when that buffer holds nothing.
    /// `caps` are the hello cap and `limits.max_line_bytes`: a line (or a partial one) is held
    /// to the first while the connection waits for its hello, so a stranger never makes the
    /// hub keep more than the hello cap of its input (issue 29).
    fn take_lines(&mut self, id: ConnId, n: usize, caps: (usize, usize), now: Now) {
        let (hello_cap, max_line) = caps;
        let line_cap = |len: usize, hub: &Hub| {
            if len > hello_cap && hub.awaits_hello(id) {
                hello_cap
            } else {
                max_line
            }
        };
        let mut start = 0;
        loop {
            let Some(conn) = self.conns.get_mut(&id) else {
                return;
            };
            if conn.discard_input {
                return;
            }
            let pending = &self.scratch[start..n];
            let too_long = match agent_hub_proto::wire::lines::find_newline(pending) {
                Some(k) => {
                    let cap = line_cap(k, &self.hub);
                    if k <= cap {
                        self.hub.handle_line(id, &pending[..k], now);
                        start += k + 1;
                        None
                    } else {
                        Some((k, cap))
                    }
                }
                None => {
                    let cap = line_cap(pending.len(), &self.hub);
                    if pending.len() > cap {
                        Some((pending.len(), cap))
                    } else {
                        if !pending.is_empty() {
                            conn.input.push(pending);
                        }
                        return;
                    }
                }
            };
            if let Some((len_bytes, cap)) = too_long {
                conn.discard_input = true;
                conn.input = agent_hub_proto::wire::LineBuffer::new();
                let e = agent_hub_proto::wire::LineTooLong {
                    max_line_bytes: cap,
                    len_bytes,
                };
                self.hub.handle_bad_input(id, &e.to_string(), now);
            }
            self.drain_outputs();
        }
    }

    // ----- outputs, commit, flush -----

    fn drain_outputs(&mut self) {
        while let Some(out) = self.hub.poll_output() {
            match out {
                Output::Write { conn, line } => {
                    if let Some(c) = self.conns.get_mut(&conn) {
                        c.queue_line(line);
                        self.dirty.push(conn);
                    }
                }
                Output::Handoff { conn, line } => {
                    if let Some(c) = self.conns.get_mut(&conn) {
                        c.queue_delivery(line);
                        self.dirty.push(conn);
                    }
                }
                Output::Answered { conn } => {
                    if let Some(c) = self.conns.get_mut(&conn) {
                        c.closing = true;
                        c.answered = true;
                        self.dirty.push(conn);
                    }
                }
                Output::Close { conn, linger } => {
                    if let Some(c) = self.conns.get_mut(&conn) {
                        c.closing = true;
                        c.linger |= linger;
                        c.discard_input = true;
                        c.answered = false;
                        c.waiting_for_close = false;
                        self.dirty.push(conn);
                    }
                }
                Output::Audit(ev) => self.records.audit(&ev),
                Output::Log(line) => self.records.log("INFO", &line),
                Output::StartTask(spec) => self.start_task(*spec),
                Output::CancelTask { task } => self.cancel_task(task.as_str()),
                Output::KillOrphan { task, pid } => self.kill_orphan(&task, pid),
                Output::LogError(line) => self.records.log("ERROR", &line),
                Output::Commit(batch) => self.write_batch(batch),
                Output::CheckProcesses(watched) => {
                    // A handful of /proc reads per second (one per watched name).
                    let now = self.now();
                    for (name, p) in watched {
                        if !liveness::still_runs(p) {
                            self.hub.handle_process_exited(&name, p, now);
                        }
                    }
                    self.hub.handle_processes_checked(now);
                }
                out @ (Output::Forward { .. } | Output::ForwardAck { .. } | Output::ToPeer(_)) => {
                    self.to_relay.push(out)
                }
            }
        }
    }

    /// Hands the core's forwards and forward acks to the relay, and the relay's events (links
    /// up and down, forwards and acks from peers) to the core. True if the core got input.
    fn exchange_with_relay(&mut self, now: Now) -> bool {
        let Some(relay) = &mut self.relay else {
            self.to_relay.clear();
            return false;
        };
        let registry = self.poll.registry();
        for out in std::mem::take(&mut self.to_relay) {
            match out {
                Output::Forward {
                    peer,
                    seq,
                    envelope,
                } => match relay.forward(registry, &peer, seq, &envelope, now.mono) {
                    relay_io::Forwarded::Sent | relay_io::Forwarded::NoLink => {}
                    relay_io::Forwarded::Refused(why) => relay.inbox.push(ToHub::ForwardAcked {
                        peer,
                        seq,
                        error: Some(why),
                    }),
                },
                Output::ForwardAck {
                    peer,
                    ack_id,
                    error,
                } => relay.ack_forward(registry, &peer, ack_id, error, now.mono),
                // No lasting link after all: the book hears it is down and sends what it must
                // again on the next one.
                Output::ToPeer(send) if !relay.send_task(registry, &send, now.mono) => {
                    relay.inbox.push(ToHub::PeerLink {
                        peer: send.peer,
                        up: false,
                        v1: false,
                    });
                }
                _ => {}
            }
        }
        relay.flush_pending(registry, now.mono);
        for (level, line) in relay.logs.drain(..) {
            self.records.log(level, &line);
        }
        let inbox = std::mem::take(&mut relay.inbox);
        let fed = !inbox.is_empty();
        for ev in inbox {
            match ev {
                ToHub::LinkUp { peer } => self.hub.handle_link_up(&peer, now),
                ToHub::LinkDown { peer, reason } => self.hub.handle_link_down(&peer, &reason, now),
                ToHub::Forwarded {
                    peer,
                    ack_id,
                    envelope,
                    hop,
                } => self.hub.handle_forwarded(&peer, ack_id, &envelope, hop),
                ToHub::ForwardAcked { peer, seq, error } => {
                    self.hub.handle_forward_ack(&peer, seq, error, now)
                }
                ToHub::PeerLink { peer, up, v1 } => self.hub.handle_peer_link(&peer, up, v1, now),
                ToHub::PeerDirectory { peer, agents } => {
                    self.hub.handle_peer_directory(&peer, agents)
                }
                ToHub::PeerTask {
                    peer,
                    msg_id,
                    payload,
                } => self.hub.handle_peer_message(&peer, &msg_id, *payload, now),
                ToHub::PeerTaskAcked { peer, task_id } => {
                    self.hub.handle_peer_task_acked(&peer, &task_id)
                }
            }
        }
        fed
    }

    /// End of an iteration: the core's commit point (it emits the batch to write, if any),
    /// then every dirty socket written, repeating while those writes produce more work
    /// (requeues, bounces).
    fn settle(&mut self, now: Now) {
        loop {
            self.drain_outputs();
            if self.exchange_with_relay(now) {
                continue;
            }
            let holds = self.flusher.as_ref().is_some_and(Flusher::holds_commits);
            self.hub.handle_commit_point(now, holds);
            self.drain_outputs();
            // A closed connection's id is never handed out again, so dropping the ids no longer
            // in `conns` leaves what a set with `remove` on close would hold.
            let conns = &self.conns;
            self.dirty.retain(|id| conns.contains_key(id));
            if self.dirty.is_empty() {
                break;
            }
            let mut batch = std::mem::replace(&mut self.dirty, std::mem::take(&mut self.flushing));
            batch.sort_unstable();
            batch.dedup();
            for &id in &batch {
                self.flush_conn(id, now);
            }
            batch.clear();
            self.flushing = batch;
        }
        let _ = self.records.flush_audit(std::iter::empty());
        self.records.flush_due(now.mono);
    }

    fn flush_conn(&mut self, id: ConnId, now: Now) {
        let Some(conn) = self.conns.get_mut(&id) else {
            return;
        };
        if conn.delivery_unstarted() && conn.peer_gone() {
            // Never write a delivery into a socket whose reader is gone (SPEC §5.4).
            self.close(id, false, "reader gone before delivery", now);
            return;
        }
        let hub = &mut self.hub;
        match conn.flush(|| hub.handle_delivery_committed(id, now)) {
            Flush::Done => {
                self.set_io_deadline(id, None);
                let conn = self.conns.get_mut(&id).expect("flushed conn exists");
                if conn.writable_interest {
                    conn.writable_interest = false;
                    let _ = self.poll.registry().reregister(
                        &mut conn.stream,
                        Token(id as usize),
                        Interest::READABLE,
                    );
                }
                if conn.closing {
                    self.finish_close(id, now);
                }
            }
            Flush::Blocked => {
                if !conn.writable_interest {
                    conn.writable_interest = true;
                    let interest = Interest::READABLE | Interest::WRITABLE;
                    let _ = self.poll.registry().reregister(
                        &mut conn.stream,
                        Token(id as usize),
                        interest,
                    );
                }
                if conn.deadline.is_none() {
                    let at = agent_hub_proto::kernel::deadline::after(
                        now.mono,
                        self.limits.write_timeout(),
                    );
                    self.set_io_deadline(id, Some(at));
                }
            }
            Flush::Failed(e) => self.close(id, false, &format!("write failed: {e}"), now),
        }
    }

    /// Output is flushed and the core is done: close now, linger for the peer's EOF after the
    /// core's `Close { linger: true }` so unread input does not turn our close into a reset,
    /// or, after `Answered`, report the flush to the core and wait for what it decides.
    fn finish_close(&mut self, id: ConnId, now: Now) {
        let Some(conn) = self.conns.get_mut(&id) else {
            return;
        };
        if conn.linger && !conn.read_eof {
            if !conn.shut_down {
                conn.shut_down = true;
                let _ = conn.stream.shutdown(Shutdown::Write);
                let at =
                    agent_hub_proto::kernel::deadline::after(now.mono, self.limits.hello_timeout());
                self.set_io_deadline(id, Some(at));
            }
            return;
        }
        if conn.answered && !conn.read_eof {
            // The reply is in the kernel: the core decides how long the client's lines are
            // still taken and when this side ends (`hub::linger`, SPEC §4.3); its `Close`
            // arrives at once or from `handle_timeout`.
            if !std::mem::replace(&mut conn.waiting_for_close, true) {
                if self.limits.answer_linger_ms == 0 {
                    // No linger: the exchange ends now. Whatever the client wrote that is
                    // already here is read first, so a line that arrived before the reply
                    // went out is answered `a line after the verb` (SPEC §4.3) however the
                    // client's writes were split and whether or not its readiness event was
                    // handled yet. One read; it usually finds nothing (WouldBlock).
                    self.read(id, false, now);
                    let still_answered = self
                        .conns
                        .get(&id)
                        .is_some_and(|c| c.answered && !c.read_eof);
                    if !still_answered {
                        // That line was answered (its error and close are queued), or the
                        // client closed and the read released the connection.
                        return;
                    }
                }
                self.hub.handle_flushed(id, now);
                self.drain_outputs();
            }
            return;
        }
        self.close(id, true, "closed", now);
    }

    fn expire_io_deadlines(&mut self, now: Now) {
        while let Some(&(at, id)) = self.deadlines.first() {
            if at > now.mono {
                break;
            }
            self.deadlines.remove(&(at, id));
            let Some(conn) = self.conns.get_mut(&id) else {
                continue;
            };
            conn.deadline = None;
            if conn.shut_down {
                self.close(id, true, "closed after linger", now);
            } else {
                let msg = format!(
                    "write deadline of {} ms passed",
                    self.limits.write_timeout_ms
                );
                self.close(id, false, &msg, now);
            }
        }
    }

    fn set_io_deadline(&mut self, id: ConnId, at: Option<Instant>) {
        let Some(conn) = self.conns.get_mut(&id) else {
            return;
        };
        if let Some(old) = conn.deadline.take() {
            self.deadlines.remove(&(old, id));
        }
        if let Some(at) = at {
            conn.deadline = Some(at);
            self.deadlines.insert((at, id));
        }
    }

    /// Releases the socket and tells the core. `flushed` is false when output was left
    /// unwritten, which the core turns into a requeue or a loss.
    fn close(&mut self, id: ConnId, flushed: bool, reason: &str, now: Now) {
        self.set_io_deadline(id, None);
        #[allow(unused_mut)]
        let Some(mut conn) = self.conns.remove(&id) else {
            return;
        };
        // On Linux closing the descriptor removes it from epoll; skip the extra epoll_ctl.
        #[cfg(not(target_os = "linux"))]
        let _ = self.poll.registry().deregister(&mut conn.stream);
        let flushed = match conn.delivery {
            // A delivery line the kernel took in full was delivered, whatever came after it.
            Some(d) => d.done,
            None => flushed && !conn.has_output(),
        };
        drop(conn);
        self.read_again.remove(&id);
        self.hub.handle_closed(id, flushed, reason, now);
        self.drain_outputs();
    }

    /// The relay's timers, and its heartbeat directory refreshed from the hub at most once a
    /// second (the directory is a roster-sized walk; per iteration would tax every send).
    fn tick_relay(&mut self, now: Now) {
        let Some(relay) = &mut self.relay else { return };
        if self.next_directory.is_some_and(|t| t <= now.mono) {
            relay.set_directory(self.hub.local_directory());
            relay.set_task_room(self.hub.active_tasks(), self.max_tasks);
            self.next_directory = Some(now.mono + Duration::from_secs(1));
        }
        relay.handle_timeout(self.poll.registry(), now.mono);
        self.drain_relay_logs();
    }

    fn drain_relay_logs(&mut self) {
        if let Some(relay) = &mut self.relay {
            for (level, line) in relay.logs.drain(..) {
                self.records.log(level, &line);
            }
        }
    }

    fn begin_shutdown(&mut self, now: Now) {
        if self.shutting_down {
            return;
        }
        self.shutting_down = true;
        self.records.log(
            "INFO",
            "shutdown requested; no new connections; closing parked awaits",
        );
        if let Some(mut l) = self.listener.take() {
            let _ = self.poll.registry().deregister(&mut l);
        }
        self.shutdown_deadline = Some(agent_hub_proto::kernel::deadline::after(
            now.mono,
            self.limits.write_timeout(),
        ));
        if let Some(relay) = &mut self.relay {
            relay.close_all(self.poll.registry(), now.mono);
        }
        self.drain_relay_logs();
        self.hub.shutdown(now);
        self.log_refusals(now, true);
    }
}
