//! The bench's fixed parameters (timeouts, the body, the targets) and its command line
//! (`Opts`): which stores, how many clients and operations per phase, what to skip.

use clap::{Parser, ValueEnum};
use std::path::PathBuf;
use std::time::Duration;

/// Waits for the hub to accept a connection.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Every socket read and write of the bench gives up after this; nothing here may hang.
pub(crate) const IO_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the server gets to print its ready line.
pub(crate) const READY_TIMEOUT: Duration = Duration::from_secs(15);
/// How long the server gets to exit after SIGTERM before it is killed.
pub(crate) const STOP_TIMEOUT: Duration = Duration::from_secs(10);
/// Bounded poll of `/proc/PID/fd` after closing the parked awaits.
pub(crate) const SETTLE_TIMEOUT: Duration = Duration::from_secs(30);
pub(crate) const POLL_STEP: Duration = Duration::from_millis(5);
/// Threads that drain the queue between send runs.
pub(crate) const DRAIN_THREADS: usize = 4;
/// A body of typical task size (about 100 bytes); its bytes pass through the hub verbatim.
pub(crate) const BODY_NOTE: &str = "benchmark payload: the hub keeps this text byte for byte";
/// The SQLite store's size cap in the bench: far above anything a run writes.
pub(crate) const SQLITE_MAX_BYTES: i64 = 16 << 30;
/// The SQLite store's file in the temp dir (with `-wal` and `-shm` beside it).
pub(crate) const DB_FILE: &str = "queue.db";
/// Bytes written before each timed `fdatasync` of the disk probe (one WAL-frame-sized page).
pub(crate) const PROBE_BLOCK: usize = 4096;
/// A device flush quicker than this did not wait for stable media, unless the device's cache
/// survives power loss (or a hypervisor acknowledges flushes it has not persisted).
pub(crate) const FAST_FLUSH_US: f64 = 100.0;
/// Issue 3's targets: durable send throughput at C=16 at least this share of in-memory …
pub(crate) const TARGET_THROUGHPUT_RATIO: f64 = 0.5;
/// … and durable handoff p50 at most this multiple of in-memory.
pub(crate) const TARGET_HANDOFF_RATIO: f64 = 2.0;
/// The client count issue 3's throughput target names.
pub(crate) const TARGET_CLIENTS: usize = 16;

/// The delegation phase's `tasks.max_concurrent` can be at most 256 (docs/operations.md
/// "Delegated tasks"); one slot stays free beyond the parked tasks.
pub(crate) const MAX_DELEGATE_RUNNING: usize = 255;

/// Which queue store(s) to measure.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StoreChoice {
    Memory,
    Sqlite,
    Both,
}

/// One queue store, as the hub's `[store]` table names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StoreKind {
    Memory,
    Sqlite,
}

impl StoreKind {
    pub(crate) fn name(self) -> &'static str {
        match self {
            StoreKind::Memory => "memory",
            StoreKind::Sqlite => "sqlite",
        }
    }
}

#[derive(Parser, Debug, Clone)]
#[command(
    name = "agent-hub-bench",
    about = "Benchmarks the release agent-hub-server on a throwaway hub (see docs/performance.md)",
    after_help = "Side by side with the peers (issue 13): `agent-hub-bench --peers` runs only the \
W1-W4 workloads on agent-hub (in-memory store, audit and service log on) and on each of \
redis-server, beanstalkd and nats-server found on PATH (an absent one is skipped), each \
started by the bench on a free loopback port, a fresh server per repetition; it prints the \
median of --reps repetitions (docs/performance.md, \"Side by side with the peers\"). W4 uses \
--pairs; --json, --server, --work-dir and --keep-dir apply as to the other phases."
)]
pub(crate) struct Opts {
    /// Concurrent client threads for the connection-per-op send phase, comma separated.
    #[arg(long, value_delimiter = ',', default_values_t = [1usize, 4, 16])]
    pub(crate) clients: Vec<usize>,
    /// Queue store(s) to measure; `both` runs every phase on each, side by side.
    #[arg(long, value_enum, default_value_t = StoreChoice::Both)]
    pub(crate) store: StoreChoice,
    /// Sends per client count in the send phase (split across the threads), in-memory store.
    #[arg(long, default_value_t = 20_000)]
    pub(crate) sends: usize,
    /// Sends per client count with the SQLite store (every reply waits for a disk flush).
    #[arg(long, default_value_t = 10_000)]
    pub(crate) sqlite_sends: usize,
    /// Timed handoffs (parked await, then send) in each handoff phase, in-memory store.
    #[arg(long, default_value_t = 2_000)]
    pub(crate) handoffs: usize,
    /// Timed handoffs in each handoff phase with the SQLite store.
    #[arg(long, default_value_t = 1_000)]
    pub(crate) sqlite_handoffs: usize,
    /// The SQLite store's `store.sync` policy: `full` (fsync per commit) or `normal`.
    #[arg(long, default_value = "full", value_parser = ["full", "normal"])]
    pub(crate) sqlite_sync: String,
    /// Timed `fdatasync` calls of each kind in the disk probe (0: skip the probe).
    #[arg(long, default_value_t = 200)]
    pub(crate) fsync_probes: usize,
    /// Create the temp dir (and so the SQLite store) in DIR instead of the system temp dir.
    #[arg(long, value_name = "DIR")]
    pub(crate) work_dir: Option<PathBuf>,
    /// Awaits parked at once in the RSS phase, each on its own connection.
    #[arg(long, default_value_t = 10_000)]
    pub(crate) parked: usize,
    /// Seconds the round-trip phase runs.
    #[arg(long, default_value_t = 5.0)]
    pub(crate) pairs_secs: f64,
    /// Requester/responder pairs in the round-trip phase (and in W4 of --peers).
    #[arg(long, default_value_t = 8)]
    pub(crate) pairs: usize,
    /// Timed cross-hub handoffs in the forwarding phase (0 skips the phase).
    #[arg(long, default_value_t = 500)]
    pub(crate) forward_handoffs: usize,
    /// Envelopes sent across hubs in the forwarding phase's throughput run (4 sender threads).
    #[arg(long, default_value_t = 5_000)]
    pub(crate) forward_sends: usize,
    /// Delegated tasks timed one after another in the delegation phase (phase 7; 0 skips it).
    #[arg(long, default_value_t = 200)]
    pub(crate) delegate_tasks: usize,
    /// Tasks kept running at once in the delegation phase (hub RSS per running task, and the
    /// handoff latency under that load), at most 255.
    #[arg(long, default_value_t = 50)]
    pub(crate) delegate_running: usize,
    /// Run only the delegation phase (no phases 1 to 6, no relay).
    #[arg(long, conflicts_with = "relay_only")]
    pub(crate) delegate_only: bool,
    /// Permission requests answered one after another in the delegation phase's approvals
    /// part (issue 37; each a round trip through the hub); 0 skips it.
    #[arg(long, default_value_t = 500)]
    pub(crate) approval_requests: usize,
    /// Run only the approvals part of the delegation phase, on each store.
    #[arg(long, conflicts_with_all = ["relay_only", "delegate_only"])]
    pub(crate) approvals_only: bool,
    /// The fake ACP agent the delegation phase runs; default: the one next to this executable.
    #[arg(long, value_name = "PATH")]
    pub(crate) fake_agent: Option<PathBuf>,
    /// Print the results as one JSON object instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
    /// The agent-hub-server binary; default: the one next to this executable.
    #[arg(long, value_name = "PATH")]
    pub(crate) server: Option<PathBuf>,
    /// Keep the temp dir (config, roster, tokens, audit and service logs) and print its path.
    #[arg(long)]
    pub(crate) keep_dir: bool,
    /// Run only the relay benchmarks (in process: no hub, no temp dir, no disk probe).
    #[arg(long)]
    pub(crate) relay_only: bool,
    /// Leave the relay benchmarks out of a full run.
    #[arg(long, conflicts_with = "relay_only")]
    pub(crate) no_relay: bool,
    /// 64 KiB session_transfer chunks per link kind in the relay link phase (and an eighth as
    /// many 512 KiB chunks).
    #[arg(long, default_value_t = 1_000)]
    pub(crate) relay_chunks: usize,
    /// Small task_status messages per link kind in the relay link phase.
    #[arg(long, default_value_t = 100_000)]
    pub(crate) relay_messages: usize,
    /// Run only the scale phase (issue 13, docs/performance.md "How cost grows with work"):
    /// restart, memory per queued envelope, send/await with a long queue and many agents,
    /// status/who with a large ledger, each against its target.
    #[arg(long, conflicts_with_all = ["relay_only", "delegate_only", "approvals_only"])]
    pub(crate) scale: bool,
    /// Queued envelopes in the SQLite store for the scale phase's restart (and its ledger).
    #[arg(long, default_value_t = 1_000_000)]
    pub(crate) scale_restart: usize,
    /// Restarts timed in the scale phase (the median is reported).
    #[arg(long, default_value_t = 3)]
    pub(crate) scale_restarts: usize,
    /// With --scale: run only part (a), the restart (and the stop after it), nothing else.
    #[arg(long, requires = "scale")]
    pub(crate) scale_restart_only: bool,
    /// Envelopes sent per memory figure of the scale phase.
    #[arg(long, default_value_t = 50_000)]
    pub(crate) scale_memory: usize,
    /// Envelopes queued for one agent in the scale phase's send/await figure.
    #[arg(long, default_value_t = 100_000)]
    pub(crate) scale_queue: usize,
    /// Agents in the scale phase's many-agents figure.
    #[arg(long, default_value_t = 10_000)]
    pub(crate) scale_agents: usize,
    /// Timed operations per figure in the scale phase.
    #[arg(long, default_value_t = 2_000)]
    pub(crate) scale_ops: usize,
    /// Write the relay payloads (transcript, heartbeats, bus bodies) into DIR to look at.
    #[arg(long, value_name = "DIR")]
    pub(crate) relay_dump: Option<PathBuf>,
    /// Run only the side-by-side comparison with the peers (Redis, beanstalkd, NATS) that are
    /// on PATH: workloads W1-W4 on every target, a fresh server per repetition.
    #[arg(long, conflicts_with_all = ["relay_only", "delegate_only", "approvals_only"])]
    pub(crate) peers: bool,
    /// With --peers: which targets to run (those absent from PATH are skipped).
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = [PeerTarget::Hub, PeerTarget::Redis, PeerTarget::Beanstalkd, PeerTarget::Nats])]
    pub(crate) targets: Vec<PeerTarget>,
    /// With --peers: repetitions; every figure reported is the median over them.
    #[arg(long, default_value_t = 3)]
    pub(crate) reps: usize,
    /// With --peers: bytes of every message body (the same JSON text on every target).
    #[arg(long, default_value_t = 128)]
    pub(crate) body_bytes: usize,
    /// With --peers: concurrent clients of W1 (connection-per-op sends), comma separated.
    #[arg(long, value_delimiter = ',', default_values_t = [1usize, 16])]
    pub(crate) peer_clients: Vec<usize>,
    /// With --peers: seconds of each measured W1 and W4 window (after a warm-up of a fifth of
    /// it, at most one second).
    #[arg(long, default_value_t = 5.0)]
    pub(crate) peer_secs: f64,
    /// With --peers: timed W2 handoffs per target and repetition.
    #[arg(long, default_value_t = 500)]
    pub(crate) peer_handoffs: usize,
    /// With --peers: W3's parked waiters at once, each on its own connection.
    #[arg(long, default_value_t = 10_000)]
    pub(crate) peer_waiters: usize,
}

/// A target of `--peers`.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PeerTarget {
    Hub,
    Redis,
    Beanstalkd,
    Nats,
}

/// Most waiters W3 parks at once: each needs a descriptor in the bench and one in the server,
/// and Redis is started with room for this many clients (docs/performance.md).
pub(crate) const MAX_PEER_WAITERS: usize = 14_000;

impl Opts {
    /// Only (a part of) the delegation phase runs: no phases 1 to 6, no relay.
    pub(crate) fn delegation_only(&self) -> bool {
        self.delegate_only || self.approvals_only
    }

    pub(crate) fn stores(&self) -> Vec<StoreKind> {
        match self.store {
            StoreChoice::Memory => vec![StoreKind::Memory],
            StoreChoice::Sqlite => vec![StoreKind::Sqlite],
            StoreChoice::Both => vec![StoreKind::Memory, StoreKind::Sqlite],
        }
    }
    pub(crate) fn sends_for(&self, kind: StoreKind) -> usize {
        match kind {
            StoreKind::Memory => self.sends,
            StoreKind::Sqlite => self.sqlite_sends,
        }
    }
    pub(crate) fn handoffs_for(&self, kind: StoreKind) -> usize {
        match kind {
            StoreKind::Memory => self.handoffs,
            StoreKind::Sqlite => self.sqlite_handoffs,
        }
    }
}
