//! `agent-hub-bench`: measures the release `agent-hub-server` from outside, the way agents use
//! it, and reports what the hub itself spends (docs/performance.md).
//!
//! Owns: a throwaway hub (temp dir with config, roster and tokens, the server process), the
//! client side of each benchmark spoken directly over `std::net` with the `agent_hub::wire`
//! types, and the hub's own CPU time and RSS read from `/proc/PID`. Refuses: anything inside
//! the server (it is a black box here) and sleeping to synchronize (only short bounded polls of
//! `/proc` and of the child's exit).
//!
//! Every phase runs once per queue store (`--store memory|sqlite|both`): the in-memory store
//! and the SQLite store (WAL, `sync = "full"`: flushed to disk before `accepted`) side by side in one run, the stores taking
//! turns phase by phase so that a change in the machine's load hits both alike. Before the
//! phases the bench describes the temp dir's filesystem and times raw `fdatasync` calls on it,
//! since a durable send can be no quicker than the flush its commit waits for.
//!
//! Phases, each on a fresh hub (and a fresh database) so one phase's heap and queues never skew
//! the next:
//! 1. connection-per-op sends with C client threads, then the queue drained (a fresh hub per C);
//! 2. handoff latency: a parked await, then a send, timed until the awaiter has the envelope;
//! 3. ack-mode handoff: the same with `"ack":true`, timed until the hub's `acked` line;
//! 4. RSS per parked await;
//! 5. round trips/s of concurrent request → reply pairs;
//! 6. mail across hubs (SPEC §15): a second hub ("west") linked to the first ("east") by the
//!    relay with `forward = true`; handoff latency from a send on east to an await parked on
//!    west, then end-to-end throughput of sends on east drained by awaits on west.
//!
//! Then, in process and without a hub (`--relay-only` runs only this; `--no-relay` skips it),
//! the relay (issue 4; the section "relay" below): the seed's §7.2 LZ4 table on payloads built
//! here, two `relay::Session`s over a real 127.0.0.1 TCP connection with and without frames and
//! lz4, and the bytes of full against delta heartbeats for a 50-agent directory.

use agent_hub::wire::{AwaitRequest, ClientLine, Envelope, Hello, HubLine, IdRequest};
use clap::{Parser, ValueEnum};
use serde_json::json;
use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::fs::{FileExt, OpenOptionsExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

/// Waits for the hub to accept a connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Every socket read and write of the bench gives up after this; nothing here may hang.
const IO_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the server gets to print its ready line.
const READY_TIMEOUT: Duration = Duration::from_secs(15);
/// How long the server gets to exit after SIGTERM before it is killed.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);
/// Bounded poll of `/proc/PID/fd` after closing the parked awaits.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(30);
const POLL_STEP: Duration = Duration::from_millis(5);
/// Threads that drain the queue between send runs.
const DRAIN_THREADS: usize = 4;
/// A body of typical task size (about 100 bytes); its bytes pass through the hub verbatim.
const BODY_NOTE: &str = "benchmark payload: the hub keeps this text byte for byte";
/// The SQLite store's size cap in the bench: far above anything a run writes.
const SQLITE_MAX_BYTES: i64 = 16 << 30;
/// The SQLite store's file in the temp dir (with `-wal` and `-shm` beside it).
const DB_FILE: &str = "queue.db";
/// Bytes written before each timed `fdatasync` of the disk probe (one WAL-frame-sized page).
const PROBE_BLOCK: usize = 4096;
/// A device flush quicker than this did not wait for stable media, unless the device's cache
/// survives power loss (or a hypervisor acknowledges flushes it has not persisted).
const FAST_FLUSH_US: f64 = 100.0;
/// Issue 3's targets: durable send throughput at C=16 at least this share of in-memory …
const TARGET_THROUGHPUT_RATIO: f64 = 0.5;
/// … and durable handoff p50 at most this multiple of in-memory.
const TARGET_HANDOFF_RATIO: f64 = 2.0;
/// The client count issue 3's throughput target names.
const TARGET_CLIENTS: usize = 16;

/// Which queue store(s) to measure.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum StoreChoice {
    Memory,
    Sqlite,
    Both,
}

/// One queue store, as the hub's `[store]` table names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum StoreKind {
    Memory,
    Sqlite,
}

impl StoreKind {
    fn name(self) -> &'static str {
        match self {
            StoreKind::Memory => "memory",
            StoreKind::Sqlite => "sqlite",
        }
    }
}

#[derive(Parser, Debug)]
#[command(
    name = "agent-hub-bench",
    about = "Benchmarks the release agent-hub-server on a throwaway hub (see docs/performance.md)"
)]
struct Opts {
    /// Concurrent client threads for the connection-per-op send phase, comma separated.
    #[arg(long, value_delimiter = ',', default_values_t = [1usize, 4, 16])]
    clients: Vec<usize>,
    /// Queue store(s) to measure; `both` runs every phase on each, side by side.
    #[arg(long, value_enum, default_value_t = StoreChoice::Both)]
    store: StoreChoice,
    /// Sends per client count in the send phase (split across the threads), in-memory store.
    #[arg(long, default_value_t = 20_000)]
    sends: usize,
    /// Sends per client count with the SQLite store (every reply waits for a disk flush).
    #[arg(long, default_value_t = 10_000)]
    sqlite_sends: usize,
    /// Timed handoffs (parked await, then send) in each handoff phase, in-memory store.
    #[arg(long, default_value_t = 2_000)]
    handoffs: usize,
    /// Timed handoffs in each handoff phase with the SQLite store.
    #[arg(long, default_value_t = 1_000)]
    sqlite_handoffs: usize,
    /// The SQLite store's `store.sync` policy: `full` (fsync per commit) or `normal`.
    #[arg(long, default_value = "full", value_parser = ["full", "normal"])]
    sqlite_sync: String,
    /// Timed `fdatasync` calls of each kind in the disk probe (0: skip the probe).
    #[arg(long, default_value_t = 200)]
    fsync_probes: usize,
    /// Create the temp dir (and so the SQLite store) in DIR instead of the system temp dir.
    #[arg(long, value_name = "DIR")]
    work_dir: Option<PathBuf>,
    /// Awaits parked at once in the RSS phase, each on its own connection.
    #[arg(long, default_value_t = 10_000)]
    parked: usize,
    /// Seconds the round-trip phase runs.
    #[arg(long, default_value_t = 5.0)]
    pairs_secs: f64,
    /// Requester/responder pairs in the round-trip phase.
    #[arg(long, default_value_t = 8)]
    pairs: usize,
    /// Timed cross-hub handoffs in the forwarding phase (0 skips the phase).
    #[arg(long, default_value_t = 500)]
    forward_handoffs: usize,
    /// Envelopes sent across hubs in the forwarding phase's throughput run (4 sender threads).
    #[arg(long, default_value_t = 5_000)]
    forward_sends: usize,
    /// Print the results as one JSON object instead of a table.
    #[arg(long)]
    json: bool,
    /// The agent-hub-server binary; default: the one next to this executable.
    #[arg(long, value_name = "PATH")]
    server: Option<PathBuf>,
    /// Keep the temp dir (config, roster, tokens, audit and service logs) and print its path.
    #[arg(long)]
    keep_dir: bool,
    /// Run only the relay benchmarks (in process: no hub, no temp dir, no disk probe).
    #[arg(long)]
    relay_only: bool,
    /// Leave the relay benchmarks out of a full run.
    #[arg(long, conflicts_with = "relay_only")]
    no_relay: bool,
    /// 64 KiB session_transfer chunks per link kind in the relay link phase (and an eighth as
    /// many 512 KiB chunks).
    #[arg(long, default_value_t = 1_000)]
    relay_chunks: usize,
    /// Small task_status messages per link kind in the relay link phase.
    #[arg(long, default_value_t = 100_000)]
    relay_messages: usize,
    /// Write the relay payloads (transcript, heartbeats, bus bodies) into DIR to look at.
    #[arg(long, value_name = "DIR")]
    relay_dump: Option<PathBuf>,
}

impl Opts {
    fn stores(&self) -> Vec<StoreKind> {
        match self.store {
            StoreChoice::Memory => vec![StoreKind::Memory],
            StoreChoice::Sqlite => vec![StoreKind::Sqlite],
            StoreChoice::Both => vec![StoreKind::Memory, StoreKind::Sqlite],
        }
    }
    fn sends_for(&self, kind: StoreKind) -> usize {
        match kind {
            StoreKind::Memory => self.sends,
            StoreKind::Sqlite => self.sqlite_sends,
        }
    }
    fn handoffs_for(&self, kind: StoreKind) -> usize {
        match kind {
            StoreKind::Memory => self.handoffs,
            StoreKind::Sqlite => self.sqlite_handoffs,
        }
    }
}

type Res<T> = Result<T, String>;

fn main() -> ExitCode {
    let opts = Opts::parse();
    match run(&opts) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // A phase that failed because the signal thread killed the hub: let that thread
            // finish its cleanup and exit with 128+signal rather than report a bogus error.
            if INTERRUPTED.load(Ordering::SeqCst) {
                if let Some(h) = SIGNAL_THREAD.lock().ok().and_then(|mut h| h.take()) {
                    let _ = h.join();
                }
            }
            eprintln!("agent-hub-bench: {e}");
            ExitCode::from(1)
        }
    }
}

fn run(opts: &Opts) -> Res<()> {
    validate(opts)?;
    if opts.relay_only {
        let machine = Machine::read();
        let relay = relay_bench(opts)?;
        if opts.json {
            let v = json!({
                "machine": {"nproc": machine.nproc, "cpu_model": machine.cpu_model, "kernel": machine.kernel},
                "relay": relay.to_json(opts),
            });
            println!(
                "{}",
                serde_json::to_string_pretty(&v).map_err(|e| e.to_string())?
            );
        } else {
            println!(
                "agent-hub-bench --relay-only: {} CPUs ({}), kernel {}\n",
                machine.nproc, machine.cpu_model, machine.kernel
            );
            print!("{}", relay.to_table(opts));
        }
        return Ok(());
    }
    // Before any other thread exists, so that every thread inherits the blocked mask.
    install_interrupt_cleanup()?;
    let server = find_server(opts.server.as_deref())?;
    let nofile = raise_nofile()?;
    let needed =
        opts.parked as u64 + 4 * opts.clients.iter().copied().max().unwrap_or(1) as u64 + 256;
    if nofile < needed {
        return Err(format!(
            "RLIMIT_NOFILE hard limit is {nofile}, but --parked {} needs about {needed} descriptors in the bench and in the hub; lower --parked or raise the limit",
            opts.parked
        ));
    }
    let work = WorkDir::create(opts.work_dir.as_deref(), opts.keep_dir)?;
    let fixture = Fixture::write(&work.path, opts)?;
    let machine = Machine::read();
    progress("disk: the temp dir's filesystem and raw fdatasync latency");
    let disk = Disk::probe(&work.path, opts.fsync_probes)?;
    let mut report = Report {
        machine,
        server: server.clone(),
        disk,
        sqlite_sync: opts.sqlite_sync.clone(),
        ..Report::default()
    };
    report.stores = opts.stores().into_iter().map(StoreReport::new).collect();

    // Phases outer, stores inner (and in phase 1 client counts outer): the stores take turns,
    // so drift in the machine's load over the run hits both alike.
    for &c in &opts.clients {
        for r in &mut report.stores {
            let k = r.kind;
            progress(&format!(
                "phase 1 ({}): connection-per-op sends, C={c}",
                k.name()
            ));
            let n = opts.sends_for(k);
            let (send, drain, ticks) = with_hub(&server, &fixture, k, |hub| {
                let send = phase_sends(hub, &fixture, c, n)?;
                let drain = phase_drain(hub, &fixture, c, n)?;
                Ok((send, drain, hub.ticks_per_sec))
            })?;
            r.sends.push(send);
            r.drains.push(drain);
            report.ticks_per_sec = ticks;
        }
    }
    for ack in [false, true] {
        for r in &mut report.stores {
            let k = r.kind;
            let what = if ack {
                "phase 3 ({}): ack-mode handoff latency"
            } else {
                "phase 2 ({}): handoff latency"
            };
            progress(&what.replace("{}", k.name()));
            let h = with_hub(&server, &fixture, k, |hub| {
                phase_handoff(hub, &fixture, opts.handoffs_for(k), ack)
            })?;
            if ack {
                r.ack_handoff = Some(h);
            } else {
                r.handoff = Some(h);
            }
        }
    }
    for r in &mut report.stores {
        let k = r.kind;
        progress(&format!("phase 4 ({}): RSS per parked await", k.name()));
        r.parked = Some(with_hub(&server, &fixture, k, |hub| {
            phase_parked(hub, &fixture, opts.parked)
        })?);
    }
    for r in &mut report.stores {
        let k = r.kind;
        progress(&format!(
            "phase 5 ({}): request/reply round trips",
            k.name()
        ));
        r.pairs = Some(with_hub(&server, &fixture, k, |hub| {
            phase_pairs(hub, &fixture, opts.pairs, opts.pairs_secs)
        })?);
    }
    if opts.forward_handoffs > 0 {
        for r in &mut report.stores {
            let k = r.kind;
            progress(&format!(
                "phase 6 ({}): mail across two linked hubs",
                k.name()
            ));
            r.forward = Some(phase_forward(&server, &work.path, &fixture, opts, k)?);
        }
    }
    if opts.fsync_probes > 0 {
        // Again after the phases: a shared disk's flush latency moves with its other users.
        progress("disk: raw fdatasync latency again");
        report.disk_after = Some(Disk::probe(&work.path, opts.fsync_probes)?);
    }
    if !opts.no_relay {
        report.relay = Some(relay_bench(opts)?);
    }
    if opts.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report.to_json(opts)).map_err(|e| e.to_string())?
        );
    } else {
        print!("{}", report.to_table(opts));
    }
    Ok(())
}

/// Runs one phase on a fresh hub and stops it cleanly. When the phase fails, says whether the
/// hub crashed, which is the more useful error.
fn with_hub<T>(
    server: &Path,
    fx: &Fixture,
    kind: StoreKind,
    phase: impl FnOnce(&HubProcess) -> Res<T>,
) -> Res<T> {
    if kind == StoreKind::Sqlite {
        // A fresh database per phase, like a fresh hub: no queue or remembered id carries over.
        fx.remove_db()?;
    }
    let mut hub = HubProcess::start(server, fx, kind)?;
    match phase(&hub) {
        Ok(v) => {
            hub.stop()?;
            Ok(v)
        }
        Err(e) => match hub.check_alive() {
            Err(crash) => Err(format!("{e}; {crash}")),
            Ok(()) => Err(e),
        },
    }
}

fn validate(opts: &Opts) -> Res<()> {
    if opts.clients.is_empty() || opts.clients.contains(&0) {
        return Err("--clients needs one or more counts, each at least 1".into());
    }
    if opts.sends == 0 || opts.handoffs == 0 || opts.parked == 0 || opts.pairs == 0 {
        return Err("--sends, --handoffs, --parked and --pairs must be at least 1".into());
    }
    if opts.sqlite_sends == 0 || opts.sqlite_handoffs == 0 {
        return Err("--sqlite-sends and --sqlite-handoffs must be at least 1".into());
    }
    if opts.forward_handoffs > 0 && opts.forward_sends == 0 {
        return Err("--forward-sends must be at least 1 (use --forward-handoffs 0 to skip the forwarding phase)".into());
    }
    if !(opts.pairs_secs > 0.0 && opts.pairs_secs.is_finite()) {
        return Err("--pairs-secs must be a positive number of seconds".into());
    }
    if opts.relay_chunks == 0 || opts.relay_messages == 0 {
        return Err("--relay-chunks and --relay-messages must be at least 1".into());
    }
    Ok(())
}

fn progress(msg: &str) {
    eprintln!("agent-hub-bench: {msg}");
}

// ----- setup: binary, limits, temp dir, fixture files -----

/// `--server`, else `agent-hub-server` next to this executable (both are in target/release
/// after `cargo build --release`).
fn find_server(explicit: Option<&Path>) -> Res<PathBuf> {
    if let Some(p) = explicit {
        return if p.is_file() {
            Ok(p.to_owned())
        } else {
            Err(format!("--server {}: no such file", p.display()))
        };
    }
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this executable: {e}"))?;
    let sibling = exe.with_file_name("agent-hub-server");
    if sibling.is_file() {
        Ok(sibling)
    } else {
        Err(format!(
            "no agent-hub-server next to {}; run `cargo build --release` first or pass --server PATH",
            exe.display()
        ))
    }
}

/// Raises this process's soft descriptor limit to the hard one (the hub, our child, inherits
/// it and raises its own too). Returns the limit now in force.
fn raise_nofile() -> Res<u64> {
    // SAFETY: getrlimit/setrlimit with a valid pointer to a local rlimit struct.
    unsafe {
        let mut lim: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return Err(format!("getrlimit: {}", std::io::Error::last_os_error()));
        }
        if lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                return Err(format!("setrlimit: {}", std::io::Error::last_os_error()));
            }
        }
        Ok(lim.rlim_cur as u64)
    }
}

/// The running hubs' pids (two while the forwarding phase links a pair) and the temp dir, for
/// cleanup on SIGINT/SIGTERM/SIGHUP. Whoever holds the `HUB_PIDS` lock and finds a pid there
/// may signal or reap that child; whoever reaps it removes it first. So no thread ever signals
/// a pid that was reaped (and could have been reused).
static HUB_PIDS: Mutex<Vec<i32>> = Mutex::new(Vec::new());
static WORK_PATH: Mutex<Option<PathBuf>> = Mutex::new(None);
/// Set by the signal thread before it cleans up; it then owns the exit.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);
static SIGNAL_THREAD: Mutex<Option<std::thread::JoinHandle<()>>> = Mutex::new(None);

/// Blocks SIGINT, SIGTERM and SIGHUP in every thread and takes them in one thread with
/// sigwait: an interrupted run kills the hub, reaps it, removes the temp dir and exits 128+sig.
/// (Children inherit the blocked mask; `HubProcess::start` clears it in the hub before exec.)
fn install_interrupt_cleanup() -> Res<()> {
    // SAFETY: sigset operations on a local, zero-initialised set; pthread_sigmask with valid
    // pointers. Called before any other thread is spawned.
    let set = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            libc::sigaddset(&mut set, sig);
        }
        let rc = libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        if rc != 0 {
            return Err(format!(
                "pthread_sigmask: {}",
                std::io::Error::from_raw_os_error(rc)
            ));
        }
        set
    };
    let handle = std::thread::spawn(move || {
        let mut sig: libc::c_int = 0;
        // SAFETY: `set` is a valid signal set blocked in all threads; `sig` is a live local.
        if unsafe { libc::sigwait(&set, &mut sig) } != 0 {
            return;
        }
        INTERRUPTED.store(true, Ordering::SeqCst);
        // Held until exit: no other thread touches the child after this.
        let mut pids = hub_pids();
        for pid in pids.drain(..) {
            // SAFETY: `pid` is our unreaped child (see HUB_PIDS); SIGKILL cannot be blocked or
            // ignored, so the blocking waitpid returns promptly.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, std::ptr::null_mut(), 0);
            }
        }
        if let Some(path) = WORK_PATH.lock().ok().and_then(|mut p| p.take()) {
            let _ = std::fs::remove_dir_all(path);
        }
        eprintln!("agent-hub-bench: interrupted by signal {sig}; hub stopped, temp dir removed");
        std::process::exit(128 + sig);
    });
    if let Ok(mut h) = SIGNAL_THREAD.lock() {
        *h = Some(handle);
    }
    Ok(())
}

fn hub_pids() -> std::sync::MutexGuard<'static, Vec<i32>> {
    HUB_PIDS
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// True when the child `pid` has exited (or is not ours to wait for); does not reap it.
fn exited_unreaped(pid: i32) -> bool {
    // SAFETY: waitid with a valid pointer to a local siginfo_t; WNOWAIT leaves the child
    // waitable, so `Child::wait` still reaps it.
    unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        let rc = libc::waitid(
            libc::P_PID,
            pid as libc::id_t,
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        );
        rc != 0 || info.si_pid() != 0
    }
}

/// The temp dir; removed on drop (also when a phase fails or panics) unless kept.
struct WorkDir {
    path: PathBuf,
    keep: bool,
}

impl WorkDir {
    fn create(parent: Option<&Path>, keep: bool) -> Res<WorkDir> {
        let name = format!(
            "agent-hub-bench-{}-{}",
            std::process::id(),
            uuid::Uuid::new_v4().simple()
        );
        let path = parent
            .map_or_else(std::env::temp_dir, Path::to_path_buf)
            .join(name);
        std::fs::create_dir(&path).map_err(|e| format!("cannot create {}: {e}", path.display()))?;
        let dir = WorkDir { path, keep };
        if !keep {
            if let Ok(mut p) = WORK_PATH.lock() {
                *p = Some(dir.path.clone());
            }
        }
        std::fs::set_permissions(&dir.path, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| e.to_string())?;
        Ok(dir)
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        if !self.keep {
            if let Ok(mut p) = WORK_PATH.lock() {
                p.take();
            }
            let _ = std::fs::remove_dir_all(&self.path);
        } else {
            progress(&format!("kept {}", self.path.display()));
        }
    }
}

/// One agent of the bench roster, with its hello line pre-encoded.
#[derive(Clone)]
struct Agent {
    name: String,
    hello: Arc<[u8]>,
}

/// The files a hub runs on, and the agents in its roster.
struct Fixture {
    /// One config per store kind: `config-memory.toml`, `config-sqlite.toml`.
    config_memory: PathBuf,
    config_sqlite: PathBuf,
    /// The SQLite store's database file (`store.path` of the sqlite config).
    db_path: PathBuf,
    stderr_path: PathBuf,
    sender: Agent,
    sink: Agent,
    hand_tx: Agent,
    hand_rx: Agent,
    parker: Agent,
    requesters: Vec<Agent>,
    responders: Vec<Agent>,
}

impl Fixture {
    fn write(dir: &Path, opts: &Opts) -> Res<Fixture> {
        let tokens_dir = dir.join("tokens");
        std::fs::create_dir(&tokens_dir).map_err(|e| e.to_string())?;
        std::fs::set_permissions(&tokens_dir, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| e.to_string())?;
        let mut roster = String::from("[agents]\n");
        let mut make = |name: String| -> Res<Agent> {
            let token = uuid::Uuid::new_v4().simple().to_string();
            let _ = writeln!(roster, "{name} = \"{token}\"");
            write_private(
                &tokens_dir.join(format!("{name}.token")),
                &format!("{token}\n"),
            )?;
            let hello = ClientLine::Hello(Hello {
                name: name.clone(),
                token,
            })
            .encode();
            Ok(Agent {
                name,
                hello: Arc::from(hello.into_bytes()),
            })
        };
        let sender = make("bench-sender".into())?;
        let sink = make("bench-sink".into())?;
        let hand_tx = make("handoff-sender".into())?;
        let hand_rx = make("handoff-awaiter".into())?;
        let parker = make("parker".into())?;
        let requesters = (0..opts.pairs)
            .map(|i| make(format!("requester-{i}")))
            .collect::<Res<Vec<_>>>()?;
        let responders = (0..opts.pairs)
            .map(|i| make(format!("responder-{i}")))
            .collect::<Res<Vec<_>>>()?;
        write_private(&dir.join("roster.toml"), &roster)?;
        let config_memory = dir.join("config-memory.toml");
        write_private(&config_memory, &bench_config(opts, StoreKind::Memory)?)?;
        let config_sqlite = dir.join("config-sqlite.toml");
        write_private(&config_sqlite, &bench_config(opts, StoreKind::Sqlite)?)?;
        Ok(Fixture {
            config_memory,
            config_sqlite,
            db_path: dir.join(DB_FILE),
            stderr_path: dir.join("server-stderr.txt"),
            sender,
            sink,
            hand_tx,
            hand_rx,
            parker,
            requesters,
            responders,
        })
    }

    fn config(&self, kind: StoreKind) -> &Path {
        match kind {
            StoreKind::Memory => &self.config_memory,
            StoreKind::Sqlite => &self.config_sqlite,
        }
    }

    /// Removes the database and its WAL and shared-memory files, if any (no hub is running).
    fn remove_db(&self) -> Res<()> {
        for suffix in ["", "-wal", "-shm", "-journal"] {
            let mut name = self.db_path.clone().into_os_string();
            name.push(suffix);
            match std::fs::remove_file(&name) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(format!("cannot remove {}: {e}", Path::new(&name).display())),
            }
        }
        Ok(())
    }
}

/// The config: `config.example.toml` as compiled into this binary (so a key added to the schema
/// comes along with its recommended value), with the port, the paths, the queue store and the
/// limits the benchmark needs: room for every parked await at once, and queue caps that never
/// refuse a send of the send phase (it queues `--sends` envelopes for one agent before
/// draining). The `[store]` table is written whole, so the example's choice does not matter.
fn bench_config(opts: &Opts, kind: StoreKind) -> Res<String> {
    let mut doc: toml::Table = toml::from_str(include_str!("../../config.example.toml"))
        .map_err(|e| format!("config.example.toml: {e}"))?;
    doc.insert("port".into(), toml::Value::Integer(0));
    for (key, file) in [
        ("audit_log_path", "audit.jsonl"),
        ("service_log_path", "service.log"),
        ("roster_path", "roster.toml"),
    ] {
        doc.insert(key.into(), toml::Value::String(file.into()));
    }
    let mut store = toml::Table::new();
    store.insert("kind".into(), toml::Value::String(kind.name().into()));
    if kind == StoreKind::Sqlite {
        store.insert("path".into(), toml::Value::String(DB_FILE.into()));
        store.insert("max_bytes".into(), toml::Value::Integer(SQLITE_MAX_BYTES));
        store.insert("sync".into(), toml::Value::String(opts.sqlite_sync.clone()));
    }
    doc.insert("store".into(), toml::Value::Table(store));
    let limits = doc
        .get_mut("limits")
        .and_then(toml::Value::as_table_mut)
        .ok_or("config.example.toml has no [limits] table")?;
    // Required keys the bench relies on (ack mode and idempotent sends): fail here, with a
    // clear message, rather than in the hub.
    for key in [
        "ack_timeout_ms",
        "idempotency_window_secs",
        "idempotency_max_ids",
    ] {
        if !limits.contains_key(key) {
            return Err(format!(
                "config.example.toml has no limits.{key}; the hub requires it"
            ));
        }
    }
    let most_sends = opts.sends.max(opts.sqlite_sends) as u64;
    let big: [(&str, u64); 5] = [
        ("max_connections", (opts.parked as u64 + 2_000).max(12_000)),
        ("queue_max_envelopes", (most_sends * 2).max(1_000_000)),
        ("queue_max_bytes", 8 << 30),
        ("hub_max_bytes", 16 << 30),
        // Every send of a run is remembered for the window: keep the cap out of the way.
        (
            "idempotency_max_ids",
            (most_sends * 8 + opts.handoffs as u64 * 4).max(1_000_000),
        ),
    ];
    for (key, value) in big {
        // Only keys the schema has: an unknown key would be fatal to the hub.
        if limits.contains_key(key) {
            limits.insert(key.into(), toml::Value::Integer(value as i64));
        }
    }
    let text = toml::to_string(&doc).map_err(|e| format!("config: {e}"))?;
    Ok(format!(
        "# Written by agent-hub-bench from config.example.toml ({} store).\n{text}",
        kind.name()
    ))
}

fn write_private(path: &Path, text: &str) -> Res<()> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| format!("cannot create {}: {e}", path.display()))?;
    f.write_all(text.as_bytes())
        .map_err(|e| format!("cannot write {}: {e}", path.display()))
}

// ----- the hub process and /proc -----

/// A running hub. Dropping it stops the process (SIGTERM, then SIGKILL after a bounded wait).
struct HubProcess {
    child: Option<Child>,
    pid: i32,
    addr: SocketAddr,
    /// The relay's listen address, when the config has a `[relay]` that listens.
    relay_addr: Option<SocketAddr>,
    ticks_per_sec: u64,
    stderr_path: PathBuf,
}

impl HubProcess {
    fn start(server: &Path, fx: &Fixture, kind: StoreKind) -> Res<HubProcess> {
        HubProcess::start_with(server, fx.config(kind), &fx.stderr_path)
    }

    fn start_with(server: &Path, config: &Path, stderr_path: &Path) -> Res<HubProcess> {
        let stderr = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(stderr_path)
            .map_err(|e| e.to_string())?;
        let mut command = Command::new(server);
        // SAFETY: the closure runs between fork and exec and only calls sigprocmask-style
        // pthread_sigmask on a local set, which is async-signal-safe.
        unsafe {
            command.pre_exec(|| {
                // The bench blocks SIGINT/SIGTERM/SIGHUP for its signal thread; the hub must
                // start with them deliverable so that SIGTERM stops it cleanly.
                let mut set: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&mut set);
                libc::pthread_sigmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
                Ok(())
            });
        }
        // Held across the spawn, so a signal arriving meanwhile still finds the new pid.
        let mut pids = hub_pids();
        let mut child = command
            .arg("--config")
            .arg(config)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(stderr))
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", server.display()))?;
        let pid = child.id() as i32;
        pids.push(pid);
        drop(pids);
        let stdout = child.stdout.take().expect("stdout was piped above");
        // SAFETY: sysconf has no preconditions.
        let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        let mut hub = HubProcess {
            child: Some(child),
            pid,
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            relay_addr: None,
            ticks_per_sec: if ticks > 0 { ticks as u64 } else { 100 },
            stderr_path: stderr_path.to_path_buf(),
        };
        // A reader thread owns stdout for the hub's whole life, so the hub can never block on a
        // full pipe; it hands over the ready line (or the end of stdout) once.
        let (tx, rx) = mpsc::channel::<Option<(String, Option<String>)>>();
        std::thread::spawn(move || {
            let mut reader = BufReader::new(stdout);
            let mut line = String::new();
            let mut reported = false;
            // The server prints the relay's address before its ready line.
            let mut relay = None;
            loop {
                line.clear();
                match reader.read_line(&mut line) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {
                        if let Some(at) = line.trim_end().split("relay listening on ").nth(1) {
                            relay = Some(at.to_owned());
                        }
                        if !reported && line.contains("hub ready") {
                            reported = true;
                            let _ = tx.send(Some((line.trim_end().to_owned(), relay.take())));
                        }
                    }
                }
            }
            if !reported {
                let _ = tx.send(None);
            }
        });
        let (ready, relay) = match rx.recv_timeout(READY_TIMEOUT) {
            Ok(Some(lines)) => lines,
            Ok(None) | Err(mpsc::RecvTimeoutError::Disconnected) => {
                return Err(format!(
                    "the hub exited before it was ready: {}",
                    hub.stderr_tail()
                ));
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                return Err(format!(
                    "the hub printed no ready line within {READY_TIMEOUT:?}: {}",
                    hub.stderr_tail()
                ));
            }
        };
        hub.addr = parse_ready(&ready)?;
        hub.relay_addr = relay
            .map(|a| a.parse().map_err(|e| format!("relay address {a:?}: {e}")))
            .transpose()?;
        Ok(hub)
    }

    /// The hub's CPU time so far (user + system): from `/proc/PID/stat` in clock ticks, and
    /// from the process CPU clock in nanoseconds as a cross-check at fine grain.
    fn cpu(&self) -> Res<Cpu> {
        let text = std::fs::read_to_string(format!("/proc/{}/stat", self.pid))
            .map_err(|e| format!("hub stat: {e}"))?;
        // Fields after the parenthesised command name start at field 3 (state); utime and
        // stime are fields 14 and 15 (proc(5)).
        let rest = text
            .rsplit_once(')')
            .map(|(_, r)| r)
            .ok_or("hub stat: no command field")?;
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let field = |i: usize| -> Res<u64> {
            fields
                .get(i)
                .and_then(|f| f.parse().ok())
                .ok_or_else(|| format!("hub stat: field {} unreadable", i + 3))
        };
        let ticks = field(11)? + field(12)?;
        let stat = Duration::from_nanos(ticks * 1_000_000_000 / self.ticks_per_sec);
        // SAFETY: both calls get valid pointers to locals; a failure is reported, not assumed.
        let clock = unsafe {
            let mut id: libc::clockid_t = 0;
            let mut ts: libc::timespec = std::mem::zeroed();
            if libc::clock_getcpuclockid(self.pid, &mut id) == 0
                && libc::clock_gettime(id, &mut ts) == 0
            {
                Some(Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32))
            } else {
                None
            }
        };
        Ok(Cpu { stat, clock })
    }

    /// The hub's resident set size in bytes, from `VmRSS` in `/proc/PID/status`.
    fn rss_bytes(&self) -> Res<u64> {
        let text = std::fs::read_to_string(format!("/proc/{}/status", self.pid))
            .map_err(|e| format!("hub status: {e}"))?;
        let line = text
            .lines()
            .find(|l| l.starts_with("VmRSS:"))
            .ok_or("hub status: no VmRSS")?;
        let kib: u64 = line
            .split_whitespace()
            .nth(1)
            .and_then(|v| v.parse().ok())
            .ok_or("hub status: VmRSS unreadable")?;
        Ok(kib * 1024)
    }

    /// Open descriptors of the hub: tells when it has closed what the bench closed.
    fn open_fds(&self) -> Res<usize> {
        std::fs::read_dir(format!("/proc/{}/fd", self.pid))
            .map(|d| d.count())
            .map_err(|e| format!("hub fds: {e}"))
    }

    /// Fails when the hub has exited (a crash mid-phase).
    fn check_alive(&mut self) -> Res<()> {
        if let Some(child) = &mut self.child {
            let mut pids = hub_pids();
            if pids.contains(&self.pid) && exited_unreaped(self.pid) {
                pids.retain(|&p| p != self.pid);
                drop(pids);
                let status = child
                    .wait()
                    .map_or_else(|e| e.to_string(), |s| s.to_string());
                self.child = None;
                return Err(format!(
                    "the hub exited during the run ({status}): {}",
                    self.stderr_tail()
                ));
            }
        }
        Ok(())
    }

    /// Clean stop: SIGTERM and a bounded wait for exit 0; the caller learns of a bad exit.
    fn stop(mut self) -> Res<()> {
        let status = self.terminate();
        match status {
            Some(s) if s.success() => Ok(()),
            Some(s) => Err(format!(
                "the hub exited with {s} on SIGTERM: {}",
                self.stderr_tail()
            )),
            None => Err("the hub did not stop on SIGTERM and was killed".into()),
        }
    }

    /// SIGTERM, wait up to `STOP_TIMEOUT`, else SIGKILL. Returns the exit status if it
    /// stopped by itself.
    fn terminate(&mut self) -> Option<std::process::ExitStatus> {
        let mut child = self.child.take()?;
        let pid = self.pid;
        // Signals `sig` while the child is still ours and unreaped; false once it is not.
        let signal = |sig: libc::c_int| -> bool {
            let owned = hub_pids();
            if !owned.contains(&pid) {
                return false;
            }
            // SAFETY: kill(2) on our own unreaped child (we hold the HUB_PIDS lock).
            unsafe {
                libc::kill(pid, sig);
            }
            true
        };
        if !signal(libc::SIGTERM) {
            return None; // the signal thread has it
        }
        let until = Instant::now() + STOP_TIMEOUT;
        while Instant::now() < until {
            let mut owned = hub_pids();
            if !owned.contains(&pid) {
                return None;
            }
            if exited_unreaped(pid) {
                owned.retain(|&p| p != pid);
                drop(owned);
                return child.wait().ok();
            }
            drop(owned);
            std::thread::sleep(POLL_STEP);
        }
        if signal(libc::SIGKILL) {
            hub_pids().retain(|&p| p != pid);
            let _ = child.wait();
        }
        None
    }

    fn stderr_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.stderr_path).unwrap_or_default();
        let text = text.trim();
        if text.is_empty() {
            "(no stderr)".into()
        } else {
            text.lines()
                .rev()
                .take(5)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect::<Vec<_>>()
                .join(" | ")
        }
    }
}

impl Drop for HubProcess {
    fn drop(&mut self) {
        self.terminate();
    }
}

fn parse_ready(line: &str) -> Res<SocketAddr> {
    let rest = line
        .strip_prefix("agent-hub-server: listening on ")
        .ok_or_else(|| format!("unexpected ready line {line:?}"))?;
    let addr = rest.split(';').next().unwrap_or_default();
    addr.parse()
        .map_err(|e| format!("ready line {line:?}: bad address: {e}"))
}

// ----- the wire, client side -----

type Conn = BufReader<TcpStream>;

/// Connects and writes `bytes` (hello and verb) in one write, as the real client does.
fn open(addr: SocketAddr, bytes: &[u8]) -> Res<Conn> {
    let stream = TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT)
        .map_err(|e| format!("connect {addr}: {e}"))?;
    let _ = stream.set_nodelay(true);
    stream
        .set_read_timeout(Some(IO_TIMEOUT))
        .map_err(|e| e.to_string())?;
    stream
        .set_write_timeout(Some(IO_TIMEOUT))
        .map_err(|e| e.to_string())?;
    (&stream)
        .write_all(bytes)
        .map_err(|e| format!("write: {e}"))?;
    Ok(BufReader::with_capacity(1024, stream))
}

/// One raw hub line without its `\n`.
fn read_raw(conn: &mut Conn, buf: &mut Vec<u8>) -> Res<()> {
    buf.clear();
    let n = conn
        .read_until(b'\n', buf)
        .map_err(|e| format!("read: {e}"))?;
    if n == 0 || buf.pop() != Some(b'\n') {
        return Err("the hub closed the connection mid-line".into());
    }
    Ok(())
}

fn read_line(conn: &mut Conn, buf: &mut Vec<u8>) -> Res<HubLine> {
    read_raw(conn, buf)?;
    match HubLine::decode(buf) {
        Ok(HubLine::Error { message }) => Err(format!("hub error: {message}")),
        Ok(line) => Ok(line),
        Err(e) => Err(format!("bad hub line: {e}")),
    }
}

fn expect_ok(conn: &mut Conn, buf: &mut Vec<u8>) -> Res<()> {
    match read_line(conn, buf)? {
        HubLine::Ok => Ok(()),
        other => Err(format!("expected ok, got {other:?}")),
    }
}

fn expect_accepted(conn: &mut Conn, buf: &mut Vec<u8>, id: &str) -> Res<()> {
    match read_line(conn, buf)? {
        HubLine::Accepted { id: got } if got == id => Ok(()),
        other => Err(format!("expected accepted {id}, got {other:?}")),
    }
}

/// Builds `hello` + `send` bytes for one envelope; returns its id.
fn send_bytes(
    out: &mut Vec<u8>,
    from: &Agent,
    to: &str,
    kind: &str,
    correlation_id: Option<String>,
    ts: &str,
    seq: usize,
) -> Res<String> {
    let id = uuid::Uuid::new_v4().to_string();
    let body = format!("{{\"task\":\"bench\",\"seq\":{seq},\"note\":\"{BODY_NOTE}\"}}");
    let env = Envelope::new(
        id.clone(),
        from.name.clone(),
        to.to_owned(),
        ts.to_owned(),
        kind.to_owned(),
        correlation_id,
        body,
    )
    .map_err(|e| format!("envelope: {e}"))?;
    out.clear();
    out.extend_from_slice(&from.hello);
    out.extend_from_slice(ClientLine::Send(env).encode().as_bytes());
    Ok(id)
}

/// `hello` + `await` bytes; `ack` asks for acknowledged delivery (absent otherwise, so a plain
/// await is the 004 line byte for byte).
fn await_bytes(
    agent: &Agent,
    reply_to: Option<String>,
    timeout_secs: Option<u64>,
    ack: bool,
) -> Vec<u8> {
    let mut out = agent.hello.to_vec();
    let req = AwaitRequest {
        reply_to,
        kind: None,
        timeout_secs,
        ack: ack.then_some(true),
    };
    out.extend_from_slice(ClientLine::Await(req).encode().as_bytes());
    out
}

/// One complete send: connect, hello + send, ok, accepted, close.
fn send_once(addr: SocketAddr, bytes: &[u8], id: &str, buf: &mut Vec<u8>) -> Res<()> {
    let mut conn = open(addr, bytes)?;
    expect_ok(&mut conn, buf)?;
    expect_accepted(&mut conn, buf, id)
}

/// The fields of a delivered envelope the bench checks.
struct Got {
    id: String,
    kind: String,
    correlation_id: Option<String>,
}

fn parse_envelope(text: &str) -> Res<Got> {
    let v: serde_json::Value =
        serde_json::from_str(text).map_err(|e| format!("envelope text: {e}"))?;
    let s = |k: &str| v.get(k).and_then(|x| x.as_str()).map(str::to_owned);
    Ok(Got {
        id: s("id").ok_or("envelope without id")?,
        kind: s("kind").ok_or("envelope without kind")?,
        correlation_id: s("correlationId"),
    })
}

fn now_ts() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// Joins worker threads, turning a panic into an error.
fn join_all<T>(handles: Vec<std::thread::JoinHandle<Res<T>>>) -> Res<Vec<T>> {
    let mut out = Vec::with_capacity(handles.len());
    let mut first_err = None;
    for h in handles {
        match h.join() {
            Ok(Ok(v)) => out.push(v),
            Ok(Err(e)) => {
                first_err.get_or_insert(e);
            }
            Err(_) => {
                first_err.get_or_insert_with(|| "a worker thread panicked".to_owned());
            }
        }
    }
    match first_err {
        Some(e) => Err(e),
        None => Ok(out),
    }
}

/// Splits `total` into `parts` counts that differ by at most one.
fn split(total: usize, parts: usize) -> Vec<usize> {
    (0..parts)
        .map(|i| total / parts + usize::from(i < total % parts))
        .collect()
}

// ----- statistics -----

#[derive(Debug, Clone, Default)]
struct Latency {
    p50_us: f64,
    p99_us: f64,
    max_us: f64,
    mean_us: f64,
}

impl Latency {
    fn of(mut samples: Vec<Duration>) -> Latency {
        if samples.is_empty() {
            return Latency::default();
        }
        samples.sort_unstable();
        // Nearest rank.
        let pct = |p: f64| {
            let rank = ((p / 100.0) * samples.len() as f64).ceil() as usize;
            us(samples[rank.clamp(1, samples.len()) - 1])
        };
        let total: Duration = samples.iter().sum();
        Latency {
            p50_us: pct(50.0),
            p99_us: pct(99.0),
            max_us: us(*samples.last().expect("not empty")),
            mean_us: us(total) / samples.len() as f64,
        }
    }

    fn to_json(&self) -> serde_json::Value {
        json!({"p50_us": round1(self.p50_us), "p99_us": round1(self.p99_us), "max_us": round1(self.max_us), "mean_us": round1(self.mean_us)})
    }
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn round1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

/// Hub CPU time (user + system) by two readings: `stat` from /proc/PID/stat (clock-tick
/// grain, 10 ms at 100 Hz), `clock` from the process CPU clock (nanosecond grain) when the
/// kernel lets us read it.
#[derive(Debug, Clone, Copy, Default)]
struct Cpu {
    stat: Duration,
    clock: Option<Duration>,
}

impl Cpu {
    /// The CPU of every hub in `hubs` together (one or a linked pair).
    fn of(hubs: &[&HubProcess]) -> Res<Cpu> {
        let mut total = Cpu {
            stat: Duration::ZERO,
            clock: Some(Duration::ZERO),
        };
        for h in hubs {
            let c = h.cpu()?;
            total.stat += c.stat;
            total.clock = total.clock.zip(c.clock).map(|(a, b)| a + b);
        }
        Ok(total)
    }
    fn saturating_sub(self, earlier: Cpu) -> Cpu {
        Cpu {
            stat: self.stat.saturating_sub(earlier.stat),
            clock: self
                .clock
                .zip(earlier.clock)
                .map(|(a, b)| a.saturating_sub(b)),
        }
    }
    fn us_per(&self, ops: usize) -> f64 {
        us(self.stat) / ops as f64
    }
    fn clock_us_per(&self, ops: usize) -> Option<f64> {
        self.clock.map(|c| us(c) / ops as f64)
    }
}

/// A timed batch of operations and the hub CPU it cost.
#[derive(Debug, Clone, Default)]
struct Run {
    clients: usize,
    ops: usize,
    wall: Duration,
    hub_cpu: Cpu,
    /// Per-operation latency; None where operations are not timed one by one (the drain).
    latency: Option<Latency>,
    /// Flush requests the temp dir's block device completed meanwhile (/proc/diskstats; every
    /// process's, not only the hub's), when readable.
    flushes: Option<u64>,
}

impl Run {
    fn ops_per_sec(&self) -> f64 {
        self.ops as f64 / self.wall.as_secs_f64()
    }
    fn cpu_us_per_op(&self) -> f64 {
        self.hub_cpu.us_per(self.ops)
    }
    fn flushes_per_op(&self) -> Option<f64> {
        self.flushes.map(|f| f as f64 / self.ops as f64)
    }
    fn to_json(&self) -> serde_json::Value {
        json!({
            "clients": self.clients,
            "ops": self.ops,
            "wall_s": (self.wall.as_secs_f64() * 1000.0).round() / 1000.0,
            "ops_per_s": self.ops_per_sec().round(),
            "hub_cpu_s": (self.hub_cpu.stat.as_secs_f64() * 1000.0).round() / 1000.0,
            "hub_cpu_us_per_op": round1(self.cpu_us_per_op()),
            "hub_cpu_clock_us_per_op": self.hub_cpu.clock_us_per(self.ops).map(round1),
            "latency": self.latency.as_ref().map(Latency::to_json),
            "device_flushes": self.flushes,
            "device_flushes_per_op": self.flushes_per_op().map(|f| (f * 1000.0).round() / 1000.0),
        })
    }
}

// ----- phase 1: connection-per-op sends, then a drain -----

fn phase_sends(hub: &HubProcess, fx: &Fixture, clients: usize, total: usize) -> Res<Run> {
    send_run(&[hub], &fx.sender, &fx.sink.name, clients, total, None)
}

/// Work that runs alongside a send run and ends it (started at the senders' barrier).
type Drain = Box<dyn FnOnce(Arc<Barrier>) -> Res<()> + Send>;

/// `total` connection-per-op sends from `from` to `to` on `hubs[0]`, over `clients` threads.
/// With `until`, the clock runs until that also finishes (it is started with the senders):
/// the forwarding phase's drain on the peer hub. Hub CPU is the sum over `hubs`.
fn send_run(
    hubs: &[&HubProcess],
    from: &Agent,
    to: &str,
    clients: usize,
    total: usize,
    until: Option<Drain>,
) -> Res<Run> {
    let parties = clients + 1 + usize::from(until.is_some());
    let start = Arc::new(Barrier::new(parties));
    let waiter = until.map(|f| {
        let start = start.clone();
        std::thread::spawn(move || f(start))
    });
    let mut handles = Vec::new();
    for count in split(total, clients) {
        let (addr, from, to, start) = (hubs[0].addr, from.clone(), to.to_owned(), start.clone());
        handles.push(std::thread::spawn(move || -> Res<Vec<Duration>> {
            let ts = now_ts();
            let (mut bytes, mut buf) = (Vec::with_capacity(1024), Vec::with_capacity(1024));
            let mut lat = Vec::with_capacity(count);
            start.wait();
            for seq in 0..count {
                let id = send_bytes(&mut bytes, &from, &to, "bench", None, &ts, seq)?;
                let t0 = Instant::now();
                send_once(addr, &bytes, &id, &mut buf)?;
                lat.push(t0.elapsed());
            }
            Ok(lat)
        }));
    }
    let (cpu0, f0) = (Cpu::of(hubs)?, dev_flushes());
    start.wait();
    let t0 = Instant::now();
    let lats = join_all(handles)?;
    if let Some(w) = waiter {
        w.join()
            .map_err(|_| "the drain thread panicked".to_owned())??;
    }
    let wall = t0.elapsed();
    let hub_cpu = Cpu::of(hubs)?.saturating_sub(cpu0);
    let latency = Some(Latency::of(lats.into_iter().flatten().collect()));
    Ok(Run {
        clients,
        ops: total,
        wall,
        hub_cpu,
        latency,
        flushes: flushes_since(f0),
    })
}

/// Takes every queued envelope back with polling awaits (timeoutSecs 0) until each drain
/// thread sees a timeout, and checks that exactly `expected` came out: the queue is empty
/// again for the next run, and the hub neither lost nor duplicated a send.
fn phase_drain(hub: &HubProcess, fx: &Fixture, after_clients: usize, expected: usize) -> Res<Run> {
    let bytes: Arc<[u8]> = Arc::from(await_bytes(&fx.sink, None, Some(0), false));
    let start = Arc::new(Barrier::new(DRAIN_THREADS + 1));
    let mut handles = Vec::new();
    for _ in 0..DRAIN_THREADS {
        let (addr, bytes, start) = (hub.addr, bytes.clone(), start.clone());
        handles.push(std::thread::spawn(move || -> Res<usize> {
            let mut buf = Vec::with_capacity(1024);
            let mut got = 0;
            start.wait();
            loop {
                let mut conn = open(addr, &bytes)?;
                expect_ok(&mut conn, &mut buf)?;
                match read_line(&mut conn, &mut buf)? {
                    HubLine::Envelope(_) => got += 1,
                    HubLine::Timeout => return Ok(got),
                    other => return Err(format!("drain: unexpected {other:?}")),
                }
            }
        }));
    }
    let (cpu0, f0) = (hub.cpu()?, dev_flushes());
    start.wait();
    let t0 = Instant::now();
    let got: usize = join_all(handles)?.into_iter().sum();
    let wall = t0.elapsed();
    let hub_cpu = hub.cpu()?.saturating_sub(cpu0);
    let flushes = flushes_since(f0);
    if got != expected {
        return Err(format!(
            "drain after the C={after_clients} run took {got} envelopes, expected {expected}"
        ));
    }
    // Every drain thread's last await timed out: its cost is in the CPU, not in `ops`.
    Ok(Run {
        clients: DRAIN_THREADS,
        ops: got,
        wall,
        hub_cpu,
        latency: None,
        flushes,
    })
}

// ----- phases 2 and 3: handoff latency, plain and in ack mode -----

/// Per handoff: the awaiter connects and writes hello + await in one write, and reads `ok`.
/// The hub reads both lines in one read and handles them before it flushes anything, so once
/// `ok` is back the await is parked. Then the clock starts, the sender connects and writes
/// hello + send, and the clock stops when the awaiter has read the whole envelope line. The
/// sender's ok/accepted are read after that. Hub CPU covers both connections of every handoff.
///
/// With `ack`, the await carries `"ack":true`; after reading the envelope the awaiter writes
/// `{"ack":{"id":…}}` and the clock stops when it has read `{"acked":{"id":…}}` (the time to
/// the envelope line is kept too).
fn phase_handoff(hub: &HubProcess, fx: &Fixture, handoffs: usize, ack: bool) -> Res<HandoffResult> {
    handoff_between(
        &[hub],
        &fx.hand_tx,
        &fx.hand_rx,
        &fx.hand_rx.name,
        handoffs,
        ack,
    )
}

/// The handoff loop of `phase_handoff`. `hubs[0]` takes the sends; the awaiter parks on the
/// last hub (the same one, or a peer linked by the relay, with `to` naming it `name@peer`).
/// Hub CPU is the sum over `hubs`.
fn handoff_between(
    hubs: &[&HubProcess],
    sender: &Agent,
    awaiter: &Agent,
    to: &str,
    handoffs: usize,
    ack: bool,
) -> Res<HandoffResult> {
    let (tx_hub, rx_hub) = (hubs[0], hubs[hubs.len() - 1]);
    let warmup = (handoffs / 10).clamp(1, 200);
    let ts = now_ts();
    let park = await_bytes(awaiter, None, None, ack);
    let (mut bytes, mut buf, mut rbuf) = (
        Vec::with_capacity(1024),
        Vec::with_capacity(1024),
        Vec::with_capacity(1024),
    );
    let mut lat = Vec::with_capacity(handoffs);
    let mut env_lat = Vec::with_capacity(handoffs);
    let (mut cpu0, mut f0) = (Cpu::of(hubs)?, dev_flushes());
    let mut t_start = Instant::now();
    for i in 0..warmup + handoffs {
        if i == warmup {
            (cpu0, f0) = (Cpu::of(hubs)?, dev_flushes());
            t_start = Instant::now();
        }
        let mut rx = open(rx_hub.addr, &park)?;
        expect_ok(&mut rx, &mut rbuf)?;
        let id = send_bytes(&mut bytes, sender, to, "bench", None, &ts, i)?;
        let t0 = Instant::now();
        let mut tx = open(tx_hub.addr, &bytes)?;
        read_raw(&mut rx, &mut rbuf)?;
        let to_envelope = t0.elapsed();
        match HubLine::decode(&rbuf) {
            Ok(HubLine::Envelope(text)) if parse_envelope(&text)?.id == id => {}
            other => return Err(format!("handoff: expected envelope {id}, got {other:?}")),
        }
        let elapsed = if ack {
            let line = ClientLine::Ack(IdRequest { id: id.clone() }).encode();
            rx.get_mut()
                .write_all(line.as_bytes())
                .map_err(|e| format!("write ack: {e}"))?;
            match read_line(&mut rx, &mut rbuf)? {
                HubLine::Acked { id: got } if got == id => {}
                other => return Err(format!("ack handoff: expected acked {id}, got {other:?}")),
            }
            t0.elapsed()
        } else {
            to_envelope
        };
        expect_ok(&mut tx, &mut buf)?;
        expect_accepted(&mut tx, &mut buf, &id)?;
        if i >= warmup {
            lat.push(elapsed);
            env_lat.push(to_envelope);
        }
    }
    let wall = t_start.elapsed();
    let hub_cpu = Cpu::of(hubs)?.saturating_sub(cpu0);
    Ok(HandoffResult {
        run: Run {
            clients: 1,
            ops: handoffs,
            wall,
            hub_cpu,
            latency: Some(Latency::of(lat)),
            flushes: flushes_since(f0),
        },
        warmup,
        to_envelope: ack.then(|| Latency::of(env_lat)),
    })
}

struct HandoffResult {
    /// Latency: until the envelope line, or in ack mode until the `acked` line.
    run: Run,
    warmup: usize,
    /// Ack mode only: until the envelope line.
    to_envelope: Option<Latency>,
}

impl HandoffResult {
    fn to_json(&self) -> serde_json::Value {
        let mut v = self.run.to_json();
        v["warmup"] = json!(self.warmup);
        if let Some(l) = &self.to_envelope {
            v["latency_to_envelope"] = l.to_json();
        }
        v
    }
}

// ----- phase 4: RSS per parked await -----

struct ParkedResult {
    count: usize,
    rss_before: u64,
    rss_parked: u64,
    rss_after_close: u64,
    park_cpu: Cpu,
    park_wall: Duration,
    close_cpu: Cpu,
}

impl ParkedResult {
    fn bytes_per_await(&self) -> f64 {
        (self.rss_parked as f64 - self.rss_before as f64) / self.count as f64
    }
}

/// Parks `count` awaits (no timeout, each on its own connection, `ok` read so each is parked),
/// reads VmRSS, then closes them all and waits (bounded poll of /proc/PID/fd) until the hub has
/// dropped them.
fn phase_parked(hub: &HubProcess, fx: &Fixture, count: usize) -> Res<ParkedResult> {
    let park = await_bytes(&fx.parker, None, None, false);
    let mut buf = Vec::with_capacity(64);
    let fds_before = hub.open_fds()?;
    let rss_before = hub.rss_bytes()?;
    let cpu0 = hub.cpu()?;
    let t0 = Instant::now();
    let mut conns = Vec::with_capacity(count);
    for _ in 0..count {
        let mut conn = open(hub.addr, &park)?;
        expect_ok(&mut conn, &mut buf)?;
        conns.push(conn);
    }
    let park_wall = t0.elapsed();
    let cpu1 = hub.cpu()?;
    let rss_parked = hub.rss_bytes()?;
    let fds_parked = hub.open_fds()?;
    if fds_parked < fds_before + count {
        return Err(format!(
            "hub holds {fds_parked} descriptors with {count} awaits parked (was {fds_before})"
        ));
    }
    // A parked await has nothing to say: any byte here would be a protocol error.
    for conn in &mut conns {
        conn.get_ref()
            .set_nonblocking(true)
            .map_err(|e| e.to_string())?;
        let mut probe = [0u8; 1];
        match conn.get_mut().read(&mut probe) {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            other => return Err(format!("a parked await got {other:?} instead of waiting")),
        }
    }
    drop(conns);
    let until = Instant::now() + SETTLE_TIMEOUT;
    while hub.open_fds()? > fds_before {
        if Instant::now() >= until {
            return Err(format!(
                "the hub still holds {} descriptors {SETTLE_TIMEOUT:?} after the close",
                hub.open_fds()?
            ));
        }
        std::thread::sleep(POLL_STEP);
    }
    let close_cpu = hub.cpu()?.saturating_sub(cpu1);
    Ok(ParkedResult {
        count,
        rss_before,
        rss_parked,
        rss_after_close: hub.rss_bytes()?,
        park_cpu: cpu1.saturating_sub(cpu0),
        park_wall,
        close_cpu,
    })
}

// ----- phase 5: request/reply round trips -----

/// Pair i is requester-i and responder-i, each on its own thread. One round trip, timed by the
/// requester: (1) send a request to responder-i; (2) await with replyTo = the request's id
/// until (3) the responder, whose unfiltered await delivered the request, (4) has sent a result
/// with correlationId = that id, and the requester has read it. So one round trip is two sends
/// and two awaits: four connections, two envelopes, each audited. The requester stops after
/// `secs` and sends the responder a `stop` envelope.
fn phase_pairs(hub: &HubProcess, fx: &Fixture, pairs: usize, secs: f64) -> Res<Run> {
    let start = Arc::new(Barrier::new(2 * pairs + 1));
    let failed = Arc::new(AtomicBool::new(false));
    let mut requesters = Vec::new();
    let mut responders = Vec::new();
    for i in 0..pairs {
        let (addr, me, peer, go, failed) = (
            hub.addr,
            fx.requesters[i].clone(),
            fx.responders[i].name.clone(),
            start.clone(),
            failed.clone(),
        );
        requesters.push(std::thread::spawn(
            move || -> Res<(Vec<Duration>, Instant)> {
                let ts = now_ts();
                let (mut bytes, mut buf) = (Vec::with_capacity(1024), Vec::with_capacity(1024));
                let mut lat = Vec::new();
                go.wait();
                let deadline = Instant::now() + Duration::from_secs_f64(secs);
                let mut seq = 0;
                let result = (|| -> Res<()> {
                    while Instant::now() < deadline && !failed.load(Ordering::Relaxed) {
                        let id = send_bytes(&mut bytes, &me, &peer, "request", None, &ts, seq)?;
                        let t0 = Instant::now();
                        send_once(addr, &bytes, &id, &mut buf)?;
                        let mut conn =
                            open(addr, &await_bytes(&me, Some(id.clone()), None, false))?;
                        expect_ok(&mut conn, &mut buf)?;
                        match read_line(&mut conn, &mut buf)? {
                            HubLine::Envelope(text) => {
                                let got = parse_envelope(&text)?;
                                if got.correlation_id.as_deref() != Some(id.as_str())
                                    || got.kind != "result"
                                {
                                    return Err(format!(
                                        "requester got a reply to {:?}, wanted {id}",
                                        got.correlation_id
                                    ));
                                }
                            }
                            other => return Err(format!("requester: unexpected {other:?}")),
                        }
                        lat.push(t0.elapsed());
                        seq += 1;
                    }
                    Ok(())
                })();
                let finished = Instant::now();
                if result.is_err() {
                    failed.store(true, Ordering::Relaxed);
                }
                // Always release the responder, even after a failure, so no thread waits forever.
                let id = send_bytes(&mut bytes, &me, &peer, "stop", None, &ts, seq)?;
                send_once(addr, &bytes, &id, &mut buf)?;
                result.map(|()| (lat, finished))
            },
        ));
        let (addr, me, peer, go) = (
            hub.addr,
            fx.responders[i].clone(),
            fx.requesters[i].clone(),
            start.clone(),
        );
        responders.push(std::thread::spawn(move || -> Res<()> {
            let ts = now_ts();
            let park = await_bytes(&me, None, None, false);
            let (mut bytes, mut buf) = (Vec::with_capacity(1024), Vec::with_capacity(1024));
            go.wait();
            for seq in 0.. {
                let mut conn = open(addr, &park)?;
                expect_ok(&mut conn, &mut buf)?;
                let got = match read_line(&mut conn, &mut buf)? {
                    HubLine::Envelope(text) => parse_envelope(&text)?,
                    other => return Err(format!("responder: unexpected {other:?}")),
                };
                drop(conn);
                if got.kind == "stop" {
                    break;
                }
                let id = send_bytes(
                    &mut bytes,
                    &me,
                    &peer.name,
                    "result",
                    Some(got.id),
                    &ts,
                    seq,
                )?;
                send_once(addr, &bytes, &id, &mut buf)?;
            }
            Ok(())
        }));
    }
    let (cpu0, f0) = (hub.cpu()?, dev_flushes());
    start.wait();
    let t0 = Instant::now();
    let req = join_all(requesters);
    let resp = join_all(responders);
    let hub_cpu = hub.cpu()?.saturating_sub(cpu0);
    let flushes = flushes_since(f0);
    let req = req?;
    resp?;
    let end = req.iter().map(|(_, f)| *f).max().unwrap_or(t0);
    let lat: Vec<Duration> = req.into_iter().flat_map(|(l, _)| l).collect();
    let (ops, latency) = (lat.len(), Some(Latency::of(lat)));
    Ok(Run {
        clients: pairs,
        ops,
        wall: end.duration_since(t0),
        hub_cpu,
        latency,
        flushes,
    })
}

// ----- the disk under the temp dir -----

/// The filesystem the temp dir (and so the SQLite store) lives on, and how long a raw flush
/// takes there: the floor under every durable commit.
#[derive(Default)]
struct Disk {
    dir: PathBuf,
    mount_point: String,
    fs_type: String,
    source: String,
    /// `major:minor` of the filesystem's device.
    device: String,
    size_bytes: u64,
    avail_bytes: u64,
    /// `/sys/dev/block/M:m/queue/write_cache` ("write back": the kernel sends flushes).
    write_cache: Option<String>,
    rotational: Option<bool>,
    /// The whole device's name in /proc/diskstats, when there is one.
    diskstats_name: Option<String>,
    probes: usize,
    /// Device flushes completed during the append probe, and the ms the device spent on them.
    probe_flushes: Option<(u64, u64)>,
    /// 4 KiB appended, then `fdatasync` (the file grows: a WAL before its first reset).
    append_sync: Option<Latency>,
    /// 4 KiB rewritten in place, then `fdatasync` (a WAL reused after a checkpoint).
    overwrite_sync: Option<Latency>,
}

impl Disk {
    fn probe(dir: &Path, probes: usize) -> Res<Disk> {
        let dir = std::fs::canonicalize(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let mut disk = Disk {
            dir: dir.clone(),
            probes,
            ..Disk::default()
        };
        // SAFETY: statvfs with a NUL-terminated path and a pointer to a local struct.
        unsafe {
            use std::os::unix::ffi::OsStrExt;
            let c =
                std::ffi::CString::new(dir.as_os_str().as_bytes()).map_err(|e| e.to_string())?;
            let mut st: libc::statvfs = std::mem::zeroed();
            if libc::statvfs(c.as_ptr(), &mut st) == 0 {
                disk.size_bytes = st.f_blocks as u64 * st.f_frsize as u64;
                disk.avail_bytes = st.f_bavail as u64 * st.f_frsize as u64;
            }
        }
        // The mount whose mount point is the longest prefix of the dir (/proc/self/mountinfo:
        // id parent major:minor root mountpoint options ... - fstype source superoptions).
        let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let mut best: Option<(usize, &str)> = None;
        for line in info.lines() {
            let f: Vec<&str> = line.split(' ').collect();
            if f.len() < 5 {
                continue;
            }
            let mp = unescape_mount(f[4]);
            if dir.starts_with(&mp) && best.map_or(true, |(len, _)| mp.len() >= len) {
                best = Some((mp.len(), line));
            }
        }
        if let Some((_, line)) = best {
            let f: Vec<&str> = line.split(' ').collect();
            disk.device = f[2].to_owned();
            disk.mount_point = unescape_mount(f[4]);
            if let Some(dash) = f.iter().position(|x| *x == "-") {
                disk.fs_type = f
                    .get(dash + 1)
                    .map_or_else(String::new, |s| (*s).to_owned());
                disk.source = f
                    .get(dash + 2)
                    .map_or_else(String::new, |s| unescape_mount(s));
            }
            // A partition's queue is its parent device's.
            if let Ok(sys) = std::fs::canonicalize(format!("/sys/dev/block/{}", disk.device)) {
                let whole = if sys.join("partition").exists() {
                    sys.parent().map(Path::to_path_buf)
                } else {
                    Some(sys)
                };
                let whole = whole.unwrap_or_default();
                let queue = whole.join("queue");
                disk.diskstats_name = whole.file_name().map(|n| n.to_string_lossy().into_owned());
                let read = |name: &str| {
                    std::fs::read_to_string(queue.join(name))
                        .ok()
                        .map(|s| s.trim().to_owned())
                };
                disk.write_cache = read("write_cache");
                disk.rotational = read("rotational").map(|r| r == "1");
            }
        }
        if probes > 0 {
            let path = dir.join("fsync-probe");
            let file = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&path)
                .map_err(|e| format!("cannot create {}: {e}", path.display()))?;
            let block = vec![b'x'; PROBE_BLOCK];
            let timed = |offset: &dyn Fn(usize) -> u64| -> Res<Latency> {
                let mut lat = Vec::with_capacity(probes);
                for i in 0..probes {
                    file.write_all_at(&block, offset(i))
                        .map_err(|e| format!("fsync probe write: {e}"))?;
                    let t0 = Instant::now();
                    file.sync_data().map_err(|e| format!("fsync probe: {e}"))?;
                    lat.push(t0.elapsed());
                }
                Ok(Latency::of(lat))
            };
            let before = diskstats(disk.diskstats_name.as_deref());
            let append = timed(&|i| (i * PROBE_BLOCK) as u64);
            let after = diskstats(disk.diskstats_name.as_deref());
            disk.probe_flushes = before
                .zip(after)
                .map(|(b, a)| (a.0.saturating_sub(b.0), a.1.saturating_sub(b.1)));
            let overwrite = append.as_ref().ok().map(|_| timed(&|_| 0));
            drop(file);
            let _ = std::fs::remove_file(&path);
            disk.append_sync = Some(append?);
            disk.overwrite_sync = overwrite.transpose()?;
        }
        let _ = DISKSTATS_NAME.set(disk.diskstats_name.clone());
        Ok(disk)
    }

    /// Whether a flush here reaches stable storage, as far as can be told from outside.
    fn verdict(&self) -> String {
        if self.fs_type == "tmpfs" || self.fs_type == "ramfs" {
            return format!(
                "{}: memory, not a disk; fsync does nothing and nothing survives a reboot",
                self.fs_type
            );
        }
        let Some(l) = &self.append_sync else {
            return "not probed (--fsync-probes 0)".into();
        };
        let cache = match self.write_cache.as_deref() {
            Some(c) => format!("device write cache: {c}"),
            None => "device write cache: unknown".to_owned(),
        };
        let device = match self.probe_flushes {
            Some((0, _)) => "the device completed no flush request during the probe: fdatasync \
                             does not reach it, so nothing is durable across a power loss"
                .to_owned(),
            Some((n, ms)) => {
                let each_us = ms as f64 * 1000.0 / n as f64;
                let judgement = if each_us < FAST_FLUSH_US {
                    "too quick for a write to stable media unless the device's cache survives \
                     power loss; from inside a virtual machine whether the host persists a flush \
                     cannot be told"
                } else {
                    "the device takes real time per flush"
                };
                format!(
                    "fdatasync is real as far as the kernel goes: {:.1} flush requests per \
                     fdatasync, completed by the device in {each_us:.0} µs each on average \
                     (diskstats, 1 ms grain); {judgement}",
                    n as f64 / self.probes as f64
                )
            }
            None => "device flush counts unreadable".to_owned(),
        };
        format!("append+fdatasync p50 {:.0} µs; {cache}; {device}", l.p50_us)
    }

    fn to_json(&self) -> serde_json::Value {
        json!({
            "dir": self.dir.display().to_string(),
            "mount_point": self.mount_point,
            "fs_type": self.fs_type,
            "source": self.source,
            "device": self.device,
            "size_bytes": self.size_bytes,
            "avail_bytes": self.avail_bytes,
            "write_cache": self.write_cache,
            "rotational": self.rotational,
            "diskstats_name": self.diskstats_name,
            "fsync_probes": self.probes,
            "probe_device_flushes": self.probe_flushes.map(|f| f.0),
            "probe_device_flush_ms": self.probe_flushes.map(|f| f.1),
            "append_4k_fdatasync": self.append_sync.as_ref().map(Latency::to_json),
            "overwrite_4k_fdatasync": self.overwrite_sync.as_ref().map(Latency::to_json),
            "fsync_verdict": self.verdict(),
        })
    }
}

/// The temp dir's whole block device in /proc/diskstats (set once by `Disk::probe`).
static DISKSTATS_NAME: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();

/// Flush requests completed by `name`, and milliseconds spent on them: fields 18 and 19 of its
/// /proc/diskstats line (kernel 5.5 and later).
fn diskstats(name: Option<&str>) -> Option<(u64, u64)> {
    let name = name?;
    let text = std::fs::read_to_string("/proc/diskstats").ok()?;
    let line = text
        .lines()
        .find(|l| l.split_whitespace().nth(2) == Some(name))?;
    let f: Vec<u64> = line
        .split_whitespace()
        .skip(3)
        .filter_map(|x| x.parse().ok())
        .collect();
    Some((*f.get(15)?, *f.get(16)?))
}

/// The temp dir's device flush count now, if readable.
fn dev_flushes() -> Option<u64> {
    diskstats(DISKSTATS_NAME.get().and_then(Option::as_deref)).map(|f| f.0)
}

fn flushes_since(before: Option<u64>) -> Option<u64> {
    before.zip(dev_flushes()).map(|(b, a)| a.saturating_sub(b))
}

/// Undoes mountinfo's octal escapes (`\040` for a space, and so on).
fn unescape_mount(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = b[i + 1..i + 4]
                .iter()
                .fold(0u32, |acc, c| acc * 8 + u32::from(c - b'0'));
            out.push(v as u8);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn human_bytes(n: u64) -> String {
    let g = n as f64 / (1u64 << 30) as f64;
    if g >= 1.0 {
        format!("{g:.0} GiB")
    } else {
        format!("{:.0} MiB", n as f64 / 1048576.0)
    }
}

// ----- the report -----

#[derive(Default)]
struct Machine {
    nproc: usize,
    cpu_model: String,
    kernel: String,
}

impl Machine {
    fn read() -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu_model = cpuinfo
            .lines()
            .find_map(|l| {
                l.strip_prefix("model name")
                    .and_then(|r| r.split_once(':'))
                    .map(|(_, m)| m.trim().to_owned())
            })
            .unwrap_or_else(|| "unknown".into());
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|s| s.trim().to_owned())
            .unwrap_or_default();
        Machine {
            nproc: std::thread::available_parallelism().map_or(0, |n| n.get()),
            cpu_model,
            kernel,
        }
    }
}

/// One store's results.
struct StoreReport {
    kind: StoreKind,
    sends: Vec<Run>,
    drains: Vec<Run>,
    handoff: Option<HandoffResult>,
    ack_handoff: Option<HandoffResult>,
    parked: Option<ParkedResult>,
    pairs: Option<Run>,
    forward: Option<ForwardResult>,
}

impl StoreReport {
    fn new(kind: StoreKind) -> StoreReport {
        StoreReport {
            kind,
            sends: Vec::new(),
            drains: Vec::new(),
            handoff: None,
            ack_handoff: None,
            parked: None,
            pairs: None,
            forward: None,
        }
    }

    fn to_json(&self) -> serde_json::Value {
        let parked = self.parked.as_ref().map(|p| {
            json!({
                "count": p.count,
                "rss_before_bytes": p.rss_before,
                "rss_parked_bytes": p.rss_parked,
                "rss_after_close_bytes": p.rss_after_close,
                "rss_bytes_per_await": p.bytes_per_await().round(),
                "park_wall_s": (p.park_wall.as_secs_f64() * 1000.0).round() / 1000.0,
                "hub_cpu_us_per_park": round1(p.park_cpu.us_per(p.count)),
                "hub_cpu_us_per_close": round1(p.close_cpu.us_per(p.count)),
                "hub_cpu_clock_us_per_park": p.park_cpu.clock_us_per(p.count).map(round1),
                "hub_cpu_clock_us_per_close": p.close_cpu.clock_us_per(p.count).map(round1),
            })
        });
        json!({
            "sends": self.sends.iter().map(Run::to_json).collect::<Vec<_>>(),
            "drains": self.drains.iter().map(Run::to_json).collect::<Vec<_>>(),
            "handoff": self.handoff.as_ref().map(HandoffResult::to_json),
            "ack_handoff": self.ack_handoff.as_ref().map(HandoffResult::to_json),
            "parked": parked,
            "round_trips": self.pairs.as_ref().map(Run::to_json),
            "forward": self.forward.as_ref().map(|f| json!({
                "handoff": f.handoff.to_json(),
                "throughput": f.throughput.to_json(),
            })),
        })
    }
}

/// Issue 3's two targets, when both stores ran.
struct Targets {
    /// The client count compared (16, or the largest measured when 16 was not).
    clients: usize,
    memory_ops_s: f64,
    sqlite_ops_s: f64,
    memory_p50_us: f64,
    sqlite_p50_us: f64,
}

impl Targets {
    fn throughput_ratio(&self) -> f64 {
        self.sqlite_ops_s / self.memory_ops_s
    }
    fn handoff_ratio(&self) -> f64 {
        self.sqlite_p50_us / self.memory_p50_us
    }
    fn throughput_met(&self) -> bool {
        self.clients == TARGET_CLIENTS && self.throughput_ratio() >= TARGET_THROUGHPUT_RATIO
    }
    fn handoff_met(&self) -> bool {
        self.handoff_ratio() <= TARGET_HANDOFF_RATIO
    }
}

fn verdict(met: bool) -> &'static str {
    if met {
        "MET"
    } else {
        "MISSED"
    }
}

#[derive(Default)]
struct Report {
    machine: Machine,
    server: PathBuf,
    ticks_per_sec: u64,
    disk: Disk,
    /// The fdatasync probe repeated after the phases.
    disk_after: Option<Disk>,
    stores: Vec<StoreReport>,
    relay: Option<RelayReport>,
    /// `store.sync` of the SQLite runs.
    sqlite_sync: String,
}

impl Report {
    fn store(&self, kind: StoreKind) -> Option<&StoreReport> {
        self.stores.iter().find(|s| s.kind == kind)
    }

    fn targets(&self, opts: &Opts) -> Option<Targets> {
        let (m, q) = (
            self.store(StoreKind::Memory)?,
            self.store(StoreKind::Sqlite)?,
        );
        let i = opts
            .clients
            .iter()
            .position(|&c| c == TARGET_CLIENTS)
            .or_else(|| {
                opts.clients
                    .iter()
                    .enumerate()
                    .max_by_key(|(_, &c)| c)
                    .map(|(i, _)| i)
            })?;
        let lat = |s: &StoreReport| {
            s.handoff
                .as_ref()
                .and_then(|h| h.run.latency.as_ref())
                .map(|l| l.p50_us)
        };
        Some(Targets {
            clients: opts.clients[i],
            memory_ops_s: m.sends.get(i)?.ops_per_sec(),
            sqlite_ops_s: q.sends.get(i)?.ops_per_sec(),
            memory_p50_us: lat(m)?,
            sqlite_p50_us: lat(q)?,
        })
    }

    fn to_json(&self, opts: &Opts) -> serde_json::Value {
        let stores: serde_json::Map<String, serde_json::Value> = self
            .stores
            .iter()
            .map(|s| (s.kind.name().to_owned(), s.to_json()))
            .collect();
        let targets = self.targets(opts).map(|t| {
            json!({
                "clients": t.clients,
                "memory_sends_per_s": t.memory_ops_s.round(),
                "sqlite_sends_per_s": t.sqlite_ops_s.round(),
                "throughput_ratio": (t.throughput_ratio() * 1000.0).round() / 1000.0,
                "throughput_target": TARGET_THROUGHPUT_RATIO,
                "throughput_met": t.throughput_met(),
                "memory_handoff_p50_us": round1(t.memory_p50_us),
                "sqlite_handoff_p50_us": round1(t.sqlite_p50_us),
                "handoff_ratio": (t.handoff_ratio() * 100.0).round() / 100.0,
                "handoff_target": TARGET_HANDOFF_RATIO,
                "handoff_met": t.handoff_met(),
            })
        });
        json!({
            "machine": {"nproc": self.machine.nproc, "cpu_model": self.machine.cpu_model, "kernel": self.machine.kernel},
            "server": self.server.display().to_string(),
            "audit_log": "on",
            "clock_ticks_per_s": self.ticks_per_sec,
            "disk": self.disk.to_json(),
            "disk_after": self.disk_after.as_ref().map(Disk::to_json),
            "options": {
                "store": format!("{:?}", opts.store).to_lowercase(),
                "clients": opts.clients, "sends": opts.sends, "sqlite_sends": opts.sqlite_sends,
                "handoffs": opts.handoffs, "sqlite_handoffs": opts.sqlite_handoffs,
                "parked": opts.parked, "pairs": opts.pairs, "pairs_secs": opts.pairs_secs,
                "fsync_probes": opts.fsync_probes,
            },
            "stores": stores,
            "issue3_targets": targets,
            "relay": self.relay.as_ref().map(|r| r.to_json(opts)),
        })
    }

    fn to_table(&self, opts: &Opts) -> String {
        let mut t = String::new();
        let m = &self.machine;
        let _ = writeln!(
            t,
            "agent-hub-bench: {} CPUs ({}), kernel {}",
            m.nproc, m.cpu_model, m.kernel
        );
        let _ = writeln!(
            t,
            "hub: {} (fresh per phase and per send-phase C, audit log on)\nhub µs/op: utime+stime from /proc/PID/stat ({} ticks/s); (clock): the hub's CPU clock, ns grain",
            self.server.display(),
            self.ticks_per_sec
        );
        let d = &self.disk;
        let _ = writeln!(
            t,
            "disk: {} on {} ({}, {}, device {}), {} of {} free; write cache: {}; rotational: {}",
            d.dir.display(),
            d.mount_point,
            d.fs_type,
            d.source,
            d.device,
            human_bytes(d.avail_bytes),
            human_bytes(d.size_bytes),
            d.write_cache.as_deref().unwrap_or("unknown"),
            d.rotational
                .map_or("unknown", |r| if r { "yes" } else { "no" }),
        );
        for (when, d) in [("before", Some(d)), ("after", self.disk_after.as_ref())] {
            let Some(d) = d else { continue };
            for (label, l) in [
                ("append 4 KiB", &d.append_sync),
                ("overwrite 4 KiB", &d.overwrite_sync),
            ] {
                if let Some(l) = l {
                    let _ = writeln!(
                        t,
                        "  {when} the phases: {label} + fdatasync ({} times): p50 {:.0} µs, p99 {:.0} µs, mean {:.0} µs, max {:.0} µs",
                        d.probes, l.p50_us, l.p99_us, l.mean_us, l.max_us
                    );
                }
            }
        }
        let _ = writeln!(t, "  fsync: {}", d.verdict());
        let header = |t: &mut String| {
            let _ = writeln!(
                t,
                "{:<42} {:>7} {:>7} {:>7} {:>8} {:>10} {:>9} {:>8} {:>8} {:>8}",
                "benchmark",
                "clients",
                "ops",
                "wall s",
                "ops/s",
                "hub µs/op",
                "(clock)",
                "p50 µs",
                "p99 µs",
                "flush/op"
            );
        };
        let row = |t: &mut String, label: &str, r: &Run| {
            let clock = r
                .hub_cpu
                .clock_us_per(r.ops)
                .map_or("-".to_owned(), |c| format!("{c:.1}"));
            let (p50, p99) = match &r.latency {
                Some(l) => (format!("{:.0}", l.p50_us), format!("{:.0}", l.p99_us)),
                None => ("-".to_owned(), "-".to_owned()),
            };
            let flush = r
                .flushes_per_op()
                .map_or("-".to_owned(), |f| format!("{f:.3}"));
            let _ = writeln!(
                t,
                "{:<42} {:>7} {:>7} {:>7.2} {:>8.0} {:>10.1} {:>9} {:>8} {:>8} {:>8}",
                label,
                r.clients,
                r.ops,
                r.wall.as_secs_f64(),
                r.ops_per_sec(),
                r.cpu_us_per_op(),
                clock,
                p50,
                p99,
                flush
            );
        };
        for s in &self.stores {
            let _ = writeln!(t);
            let what = match s.kind {
                StoreKind::Memory => "store: memory (queues in the process only)",
                StoreKind::Sqlite => "store: sqlite",
            };
            if s.kind == StoreKind::Sqlite {
                let how = if self.sqlite_sync == "full" {
                    "sync=full: accepted once committed and flushed to disk by the flush thread"
                } else {
                    "sync=normal: accepted once committed, never flushed by the hub"
                };
                let _ = writeln!(t, "{what} (WAL; {how})");
            } else {
                let _ = writeln!(t, "{what}");
            }
            header(&mut t);
            for (r, d) in s.sends.iter().zip(&s.drains) {
                row(&mut t, "send, connection per op", r);
                row(
                    &mut t,
                    &format!("  then drain: await timeoutSecs 0 (C={})", d.clients),
                    d,
                );
            }
            if let Some(h) = &s.handoff {
                row(&mut t, "handoff: parked await, then send", &h.run);
            }
            if let Some(h) = &s.ack_handoff {
                row(&mut t, "ack handoff: send start -> acked", &h.run);
                if let Some(l) = &h.to_envelope {
                    let _ = writeln!(
                        t,
                        "{:<42} {:>7} {:>7} {:>7} {:>8} {:>10} {:>9} {:>8.0} {:>8.0}",
                        "  of which send start -> envelope",
                        "",
                        "",
                        "",
                        "",
                        "",
                        "",
                        l.p50_us,
                        l.p99_us
                    );
                }
            }
            if let Some(r) = &s.pairs {
                row(&mut t, "round trip: send + await, twice", r);
            }
            if let Some(f) = &s.forward {
                row(&mut t, "across hubs: handoff east -> west", &f.handoff.run);
                row(
                    &mut t,
                    "across hubs: sends on east, drained west",
                    &f.throughput,
                );
            }
            if let Some(p) = &s.parked {
                let _ = writeln!(
                    t,
                    "parked awaits: {} (hub VmRSS {:.1} MiB -> {:.1} MiB, {:.1} MiB after closing them)",
                    p.count,
                    p.rss_before as f64 / 1048576.0,
                    p.rss_parked as f64 / 1048576.0,
                    p.rss_after_close as f64 / 1048576.0
                );
                let _ = writeln!(
                    t,
                    "  RSS per parked await: {:.0} bytes; hub CPU {:.1} µs per park, {:.1} µs per close; parked in {:.2} s",
                    p.bytes_per_await(),
                    p.park_cpu.us_per(p.count),
                    p.close_cpu.us_per(p.count),
                    p.park_wall.as_secs_f64()
                );
            }
        }
        if let (Some(mem), Some(sql)) =
            (self.store(StoreKind::Memory), self.store(StoreKind::Sqlite))
        {
            let _ = writeln!(t);
            let _ = writeln!(t, "sqlite against memory");
            for (a, b) in mem.sends.iter().zip(&sql.sends) {
                let _ = writeln!(
                    t,
                    "  send C={:<3} sends/s {:>6.0} vs {:>6.0} ({:.3}x); hub µs/send {:.1} vs {:.1}; p50 {:.0} vs {:.0} µs",
                    a.clients,
                    b.ops_per_sec(),
                    a.ops_per_sec(),
                    b.ops_per_sec() / a.ops_per_sec(),
                    b.cpu_us_per_op(),
                    a.cpu_us_per_op(),
                    b.latency.as_ref().map_or(0.0, |l| l.p50_us),
                    a.latency.as_ref().map_or(0.0, |l| l.p50_us),
                );
            }
            let p50 = |h: &Option<HandoffResult>| {
                h.as_ref()
                    .and_then(|h| h.run.latency.as_ref())
                    .map(|l| (l.p50_us, l.p99_us))
            };
            for (label, a, b) in [
                ("handoff", &mem.handoff, &sql.handoff),
                ("ack handoff (to acked)", &mem.ack_handoff, &sql.ack_handoff),
            ] {
                if let (Some((a50, a99)), Some((b50, b99))) = (p50(a), p50(b)) {
                    let _ = writeln!(
                        t,
                        "  {label}: p50 {b50:.0} vs {a50:.0} µs ({:.1}x), p99 {b99:.0} vs {a99:.0} µs",
                        b50 / a50
                    );
                }
            }
            if let Some(tg) = self.targets(opts) {
                let _ = writeln!(t, "issue 3 targets");
                let note = if tg.clients == TARGET_CLIENTS {
                    String::new()
                } else {
                    format!(" (C={TARGET_CLIENTS} not measured: compared C={}; run with --clients including 16)", tg.clients)
                };
                let _ = writeln!(
                    t,
                    "  durable send throughput >= {:.0} % of in-memory at C={TARGET_CLIENTS}: {:.0} vs {:.0} sends/s = {:.1} %: {}{note}",
                    TARGET_THROUGHPUT_RATIO * 100.0,
                    tg.sqlite_ops_s,
                    tg.memory_ops_s,
                    tg.throughput_ratio() * 100.0,
                    verdict(tg.throughput_met())
                );
                let _ = writeln!(
                    t,
                    "  durable handoff p50 <= {TARGET_HANDOFF_RATIO:.0}x in-memory: {:.0} vs {:.0} µs = {:.1}x: {}",
                    tg.sqlite_p50_us,
                    tg.memory_p50_us,
                    tg.handoff_ratio(),
                    verdict(tg.handoff_met())
                );
            }
        }
        let _ = writeln!(t);
        let _ = writeln!(
            t,
            "send: connect, hello+send in one write, read ok and accepted, close ({} sends per client count in memory, {} with sqlite).",
            opts.sends, opts.sqlite_sends
        );
        let _ = writeln!(
            t,
            "flush/op: flush requests the temp dir's block device completed per op (/proc/diskstats; any process's)."
        );
        let _ = writeln!(t, "handoff latency: sender's connect() until the parked awaiter has read the envelope line;");
        let _ = writeln!(
            t,
            "  its hub CPU covers the awaiter's and the sender's connection."
        );
        let _ = writeln!(
            t,
            "ack handoff: the same with \"ack\":true; the awaiter then writes {{\"ack\":{{\"id\":…}}}} and the clock stops at its acked line."
        );
        let _ = writeln!(
            t,
            "round trip: request send, responder's await gets it, result send, requester's await (replyTo) gets it;"
        );
        let _ = writeln!(
            t,
            "  4 connections and 2 envelopes, over {} s; ops/s = round trips/s over all pairs.",
            opts.pairs_secs
        );
        let _ = writeln!(
            t,
            "across hubs: a second hub linked by the relay on 127.0.0.1 (forward = true, same store);"
        );
        let _ = writeln!(
            t,
            "  handoff: await parked on west, send on east to name@west, timed to the envelope;"
        );
        let _ = writeln!(
            t,
            "  sends: 4 threads send on east while {DRAIN_THREADS} await on west; wall until west has all; hub µs/op sums both hubs."
        );
        if let Some(r) = &self.relay {
            let _ = writeln!(t);
            t.push_str(&r.to_table(opts));
        }
        t
    }
}

// ----- relay (issue 4): the codec table, a loopback link, heartbeat bytes -----
//
// In process, no hub: the relay's sans-IO pieces (`agent_hub::relay`) measured directly. The
// payloads are built here, deterministically (a fixed xorshift seed), so every run measures the
// same bytes; see `docs/performance.md`, "Relay", for what each one holds.

/// The raw size of the transcript payload (and of a v0 `session_transfer` chunk).
const TRANSCRIPT_BYTES: usize = 512 * 1024;
/// The chunk size of the loopback link's main transfer workload.
const CHUNK_BYTES: usize = 64 * 1024;
/// Agents in the directory of the heartbeat-bytes measurement.
const BEAT_AGENTS: usize = 50;
/// Beats sent per configuration in the heartbeat-bytes measurement (three full-snapshot cycles).
const BEATS: usize = 30;
/// The bench writes what a link's session queues once this much has gathered (the server
/// writes whatever one loop iteration queued; this stands in for that coalescing).
const LINK_WRITE_BYTES: usize = 64 * 1024;
/// A fixed wall clock for the in-memory sessions, so ids and timestamps have the same digits
/// in every run: 2025-09-14T10:00:00Z.
const RELAY_T0_MS: i64 = 1_757_844_000_000;
/// The 29-byte bus body: the seed's measured average body size.
const BUS_BODY_29: &str = "Tests pass; ready for review.";
/// The 119-byte bus body: the seed's measured largest body.
const BUS_BODY_119: &str = "Please review PR #142 (relay frames + lz4): frame.rs and session.rs changed; all tests pass, fuzzed 10 min, no crashes.";

use agent_hub::relay::frame::{decode_body, decode_frame, encode_frame, encode_message, FLAG_LZ4};
use agent_hub::relay::heartbeat::{AgentEntry, Beat, Directory};
use agent_hub::relay::{
    Feature, MsgType, PeerAuth, RelayMessage, Session, SessionConfig, SessionEvent, SessionState,
    WallClock,
};
use std::collections::HashMap;
use std::hint::black_box;

/// xorshift64*: the payload generator's only source of variety.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + self.below(hi - lo + 1)
    }
    fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.below(xs.len())]
    }
    /// Skewed towards the front of a list, roughly as word frequencies are (Zipf-like).
    fn skewed<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        let u = (self.next() >> 11) as f64 / (1u64 << 53) as f64;
        &xs[((u.powf(2.2) * xs.len() as f64) as usize).min(xs.len() - 1)]
    }
    fn hex(&mut self, n: usize) -> String {
        (0..n)
            .map(|_| char::from(b"0123456789abcdef"[self.below(16)]))
            .collect()
    }
    fn base62(&mut self, n: usize) -> String {
        const A: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
        (0..n).map(|_| char::from(A[self.below(A.len())])).collect()
    }
    fn uuid(&mut self) -> String {
        format!(
            "{}-{}-4{}-a{}-{}",
            self.hex(8),
            self.hex(4),
            self.hex(3),
            self.hex(3),
            self.hex(12)
        )
    }
}

/// Words of an agent's prose, most frequent first.
const WORDS: &[&str] = &[
    "the",
    "to",
    "and",
    "a",
    "of",
    "is",
    "in",
    "that",
    "it",
    "for",
    "this",
    "I",
    "with",
    "on",
    "be",
    "not",
    "test",
    "file",
    "now",
    "so",
    "we",
    "as",
    "from",
    "the",
    "frame",
    "let",
    "me",
    "check",
    "code",
    "when",
    "which",
    "one",
    "session",
    "error",
    "an",
    "if",
    "are",
    "but",
    "should",
    "can",
    "function",
    "by",
    "all",
    "line",
    "at",
    "change",
    "then",
    "relay",
    "fix",
    "heartbeat",
    "message",
    "there",
    "run",
    "build",
    "its",
    "only",
    "each",
    "type",
    "before",
    "new",
    "what",
    "because",
    "value",
    "still",
    "case",
    "tests",
    "passes",
    "returns",
    "first",
    "bytes",
    "peer",
    "link",
    "handshake",
    "read",
    "write",
    "update",
    "cargo",
    "clippy",
    "looks",
    "good",
    "also",
    "need",
    "add",
    "here",
    "after",
    "field",
    "state",
    "decoder",
    "payload",
    "compressed",
    "size",
    "length",
    "check",
    "buffer",
    "socket",
    "closes",
    "would",
    "could",
    "instead",
    "same",
    "other",
    "both",
    "every",
    "into",
    "about",
    "these",
    "current",
    "struct",
    "enum",
    "match",
    "config",
    "server",
    "client",
    "agent",
    "queue",
    "hub",
    "delta",
    "directory",
    "version",
    "feature",
    "negotiated",
    "agreed",
    "proof",
    "nonce",
    "key",
    "mutual",
    "lines",
    "upgrade",
    "limit",
    "cap",
    "allocate",
    "declared",
    "reserved",
    "flag",
    "bit",
    "protocol",
    "docs",
    "issue",
    "commit",
    "branch",
    "review",
    "failing",
    "assertion",
    "expected",
    "got",
    "panic",
    "unwrap",
    "result",
    "option",
    "trait",
    "impl",
    "module",
    "import",
    "crate",
    "dependency",
    "benchmark",
    "measure",
    "median",
    "latency",
    "throughput",
    "loopback",
    "timeout",
    "interval",
    "liveness",
    "reconnect",
    "backoff",
    "dialer",
    "acceptor",
    "challenge",
    "catalogue",
    "fixture",
    "fuzz",
    "target",
    "corpus",
    "truncated",
    "oversized",
    "bomb",
    "safely",
    "exactly",
    "simply",
    "already",
    "probably",
    "actually",
    "seems",
    "means",
    "makes",
];

/// Tool names of an agent transcript with their share of calls.
const TOOLS: &[&str] = &[
    "Read",
    "Read",
    "Read",
    "Bash",
    "Bash",
    "Edit",
    "Grep",
    "Glob",
    "TodoWrite",
];

const PATHS: &[&str] = &[
    "src/relay/frame.rs",
    "src/relay/session.rs",
    "src/relay/heartbeat.rs",
    "src/relay/message.rs",
    "src/relay/auth.rs",
    "src/relay/links.rs",
    "src/server/relay_io.rs",
    "src/bin/agent-hub-bench.rs",
    "docs/relay-protocol.md",
    "docs/performance.md",
    "tests/relay_fixtures.rs",
    "protocol/relay/heartbeat.json",
    "Cargo.toml",
    "src/lib.rs",
];

/// Source text that `Read` and `Edit` results quote: made-up Rust, generated once from a fixed
/// seed (about 4,100 lines), so the transcript is the same bytes in every build.
fn quoted_source() -> &'static str {
    static SOURCE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    SOURCE.get_or_init(|| {
        const IDENTS: &[&str] = &[
            "frame", "body", "len", "buf", "pos", "msg", "peer", "session", "state", "flags",
            "out", "bytes", "payload", "beat", "directory", "agents", "seq", "base", "ack_id",
            "features", "nonce", "proof", "key", "line", "cap", "raw", "declared", "n", "i",
            "now", "deadline", "interval", "stats", "events", "link", "reason", "version",
        ];
        const TYPES: &[&str] = &[
            "Frame", "Session", "RelayMessage", "Directory", "Beat", "Vec<u8>", "String", "usize",
            "Instant", "Duration", "FrameError", "RelayError", "Feature", "SessionEvent", "u32",
        ];
        const METHODS: &[&str] = &[
            "len", "push", "extend_from_slice", "get", "insert", "remove", "clone", "to_owned",
            "as_str", "is_empty", "contains", "iter", "map_err", "unwrap_or", "encode_json",
            "next_frame", "handle_input", "poll_transmit", "decode_line", "push_back",
        ];
        let mut rng = Rng(0x6A09_E667_F3BC_C908);
        let mut s = String::new();
        // Half the identifiers from the relay's own vocabulary, half any lowercase word.
        let id = |rng: &mut Rng| loop {
            let w = if rng.below(2) == 0 { *rng.skewed(IDENTS) } else { *rng.pick(WORDS) };
            if w.bytes().all(|b| b.is_ascii_lowercase() || b == b'_') {
                break w.to_owned();
            }
        };
        for _ in 0..180 {
            let _ = writeln!(s, "/// {}", prose(&mut rng, 6, 20));
            let (a, b, t, u) = (id(&mut rng), id(&mut rng), *rng.pick(TYPES), *rng.pick(TYPES));
            let _ = writeln!(s, "pub fn {a}_{b}(&mut self, {a}: &{t}) -> Result<{u}, RelayError> {{");
            for _ in 0..rng.range(4, 14) {
                let (x, y, m) = (id(&mut rng), id(&mut rng), *rng.pick(METHODS));
                let _ = match rng.below(8) {
                    0 => writeln!(s, "    let {x} = self.{y}.{m}()?;"),
                    1 => writeln!(s, "    if {x}.{m}() > {} {{\n        return Err(RelayError::BadBody(format!(\"{} {{}}\", {y})));\n    }}", rng.range(1, 4096), prose(&mut rng, 3, 7)),
                    2 => writeln!(s, "    // {}", prose(&mut rng, 5, 14)),
                    3 => writeln!(s, "    self.{x}.{m}(&{y});"),
                    4 => writeln!(s, "    match {x} {{\n        Some({y}) => self.{y} = {y},\n        None => return Ok({}::default()),\n    }}", rng.pick(TYPES)),
                    5 => writeln!(s, "    for {x} in &self.{y} {{\n        out.{m}({x});\n    }}"),
                    6 => writeln!(s, "    let {x}: {} = {y}.{m}().unwrap_or({});", rng.pick(TYPES), rng.below(100)),
                    _ => writeln!(s, "    debug_assert!({x}.{m}() <= {y}, \"{}\");", prose(&mut rng, 3, 6)),
                };
            }
            let _ = writeln!(s, "    Ok({})\n}}\n", id(&mut rng));
            if rng.below(5) == 0 {
                let (a, b) = (id(&mut rng), id(&mut rng));
                let _ = writeln!(s, "#[test]\nfn {a}_{b}_{}() {{\n    let {a} = {}::new();\n    assert_eq!({a}.{}(), {});\n}}\n", id(&mut rng), rng.pick(TYPES), rng.pick(METHODS), rng.below(64));
            }
        }
        s
    })
}

fn prose(rng: &mut Rng, lo: usize, hi: usize) -> String {
    let words = rng.range(lo, hi);
    let mut s = String::new();
    let mut sentence = 0;
    for i in 0..words {
        if i > 0 {
            s.push(' ');
        }
        let w = match rng.below(40) {
            0 => format!("`{}`", rng.pick(PATHS)),
            1 => format!(
                "`{}`",
                rng.pick(&[
                    "decode_frame",
                    "encode_message",
                    "BeatSender::next_beat",
                    "handle_input",
                    "poll_transmit",
                    "FrameDecoder",
                    "Session::send",
                    "intersect"
                ])
            ),
            2 => rng.range(2, 4096).to_string(),
            _ => (*rng.skewed(WORDS)).to_owned(),
        };
        if sentence == 0 {
            let mut c = w.chars();
            if let Some(f) = c.next() {
                s.extend(f.to_uppercase());
                s.push_str(c.as_str());
            }
        } else {
            s.push_str(&w);
        }
        sentence += 1;
        if sentence > 6 && rng.below(9) == 0 {
            s.push(*rng.pick(&['.', '.', '.', ':', ',']));
            sentence = if s.ends_with(',') { 1 } else { 0 };
        }
    }
    s.push('.');
    s
}

/// `n` lines of the quoted source from a random line, as `cat -n` numbers them (the form of a
/// `Read` result).
fn source_slice(rng: &mut Rng, lo: usize, hi: usize, numbered: bool) -> String {
    let n = rng.range(lo, hi);
    let lines: Vec<&str> = quoted_source().lines().collect();
    let start = rng.below(lines.len().saturating_sub(n).max(1));
    let mut s = String::new();
    for (i, l) in lines.iter().skip(start).take(n).enumerate() {
        if numbered {
            let _ = writeln!(s, "{:>6}\u{2192}{l}", start + i + 1);
        } else {
            s.push_str(l);
            s.push('\n');
        }
    }
    s
}

fn tool_output(rng: &mut Rng, command: &str) -> String {
    let mut s = String::new();
    match command {
        "cargo test" => {
            let _ = writeln!(s, "   Compiling agent-hub v0.1.0 (/home/dev/agent-hub)\n    Finished `test` profile [unoptimized + debuginfo] target(s) in {}.{:02}s\n     Running unittests src/lib.rs (target/debug/deps/agent_hub-{})\n\nrunning {} tests", rng.range(3, 40), rng.below(100), rng.hex(16), rng.range(20, 60));
            for _ in 0..rng.range(20, 60) {
                let module = rng.pick(&[
                    "relay::frame",
                    "relay::session",
                    "relay::heartbeat",
                    "relay::message",
                    "relay::tests",
                    "relay::auth",
                    "store::sqlite",
                    "hub::core",
                ]);
                let name: Vec<&str> = (0..rng.range(3, 8)).map(|_| *rng.skewed(WORDS)).collect();
                let _ = writeln!(
                    s,
                    "test {module}::tests::{} ... ok",
                    name.join("_").to_lowercase()
                );
            }
            let _ = writeln!(s, "\ntest result: ok. {} passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in {}.{:02}s", rng.range(20, 60), rng.below(3), rng.below(100));
        }
        "git status" => {
            let _ = writeln!(s, "On branch relay-v1\nChanges not staged for commit:\n  (use \"git add <file>...\" to update what will be committed)");
            for _ in 0..rng.range(1, 6) {
                let _ = writeln!(s, "\tmodified:   {}", rng.pick(PATHS));
            }
        }
        _ => {
            for _ in 0..rng.range(3, 25) {
                let line = source_slice(rng, 1, 1, false);
                let _ = write!(s, "{}:{}:{}", rng.pick(PATHS), rng.range(1, 1200), line);
            }
        }
    }
    s
}

/// A synthetic agent transcript: JSON lines shaped like a coding agent's session file (user
/// prompts, assistant text, tool calls and their results with quoted source and command
/// output, token usage, uuids), exactly `bytes` long (the last line is cut).
fn synthetic_transcript(bytes: usize) -> Vec<u8> {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let session_id = rng.uuid();
    let cwd = "/home/dev/agent-hub";
    let mut parent = serde_json::Value::Null;
    let mut ms: i64 = RELAY_T0_MS;
    let mut out = Vec::with_capacity(bytes + 64 * 1024);
    let mut cache_read: u64 = 12_000;
    while out.len() < bytes {
        ms += rng.range(200, 20_000) as i64;
        let ts = chrono::DateTime::from_timestamp_millis(ms)
            .map(|t| t.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string())
            .unwrap_or_default();
        let uuid = rng.uuid();
        let envelope = |kind: &str,
                        message: serde_json::Value,
                        parent: &serde_json::Value,
                        uuid: &str,
                        ts: &str| {
            json!({
                "parentUuid": parent, "isSidechain": false, "userType": "external", "cwd": cwd,
                "sessionId": session_id, "version": "1.0.83", "gitBranch": "relay-v1",
                "type": kind, "message": message, "uuid": uuid, "timestamp": ts,
            })
        };
        cache_read += rng.range(100, 3000) as u64;
        let usage = json!({
            "input_tokens": rng.range(1, 12), "cache_creation_input_tokens": rng.range(0, 4000),
            "cache_read_input_tokens": cache_read, "output_tokens": rng.range(20, 900),
            "service_tier": "standard",
        });
        let assistant = |rng: &mut Rng, content: serde_json::Value| {
            json!({
                "id": format!("msg_01{}", rng.base62(22)), "type": "message", "role": "assistant",
                "model": "claude-sonnet-4-5-20250929", "content": content,
                "stop_reason": null, "stop_sequence": null, "usage": usage,
            })
        };
        let mut lines = Vec::new();
        match rng.below(20) {
            0 => {
                let text = prose(&mut rng, 15, 70);
                lines.push(envelope(
                    "user",
                    json!({"role": "user", "content": text}),
                    &parent,
                    &uuid,
                    &ts,
                ));
            }
            1..=6 => {
                let text = prose(&mut rng, 10, 140);
                let m = assistant(&mut rng, json!([{"type": "text", "text": text}]));
                let mut l = envelope("assistant", m, &parent, &uuid, &ts);
                l["requestId"] = json!(format!("req_011{}", rng.base62(21)));
                lines.push(l);
            }
            _ => {
                let tool = *rng.pick(TOOLS);
                let id = format!("toolu_01{}", rng.base62(22));
                let path = format!("{cwd}/{}", rng.pick(PATHS));
                let (input, result, extra) = match tool {
                    "Read" => {
                        let n = rng.range(20, 160);
                        let text = source_slice(&mut rng, n, n, true);
                        // The result object holds the same lines without their numbers.
                        let plain: String = text
                            .lines()
                            .map(|l| l.split_once('\u{2192}').map_or(l, |(_, code)| code))
                            .fold(String::new(), |mut acc, l| {
                                acc.push_str(l);
                                acc.push('\n');
                                acc
                            });
                        (
                            json!({"file_path": path, "offset": rng.range(1, 900), "limit": n}),
                            text,
                            json!({"type": "text", "file": {"filePath": path, "content": plain, "numLines": n, "startLine": rng.range(1, 900), "totalLines": rng.range(900, 2300)}}),
                        )
                    }
                    "Bash" => {
                        let command =
                            *rng.pick(&["cargo test", "cargo test", "git status", "rg -n"]);
                        let out = tool_output(&mut rng, command);
                        (
                            json!({"command": format!("{command} 2>&1 | tail -80"), "description": prose(&mut rng, 3, 9)}),
                            out.clone(),
                            json!({"stdout": out, "stderr": "", "interrupted": false, "isImage": false}),
                        )
                    }
                    "Edit" => {
                        let old = source_slice(&mut rng, 2, 12, false);
                        let new = source_slice(&mut rng, 2, 14, false);
                        let shown = source_slice(&mut rng, 8, 20, true);
                        (
                            json!({"file_path": path, "old_string": old, "new_string": new}),
                            format!("The file {path} has been updated. Here's the result of running `cat -n` on a snippet of the edited file:\n{shown}"),
                            json!({"filePath": path, "oldString": old, "newString": new, "userModified": false, "replaceAll": false}),
                        )
                    }
                    "Grep" | "Glob" => {
                        let out = tool_output(&mut rng, "rg -n");
                        (
                            json!({"pattern": *rng.skewed(WORDS), "path": cwd, "output_mode": "content", "-n": true}),
                            out.clone(),
                            json!({"mode": "content", "numFiles": rng.range(1, 9), "content": out}),
                        )
                    }
                    _ => {
                        let todos: Vec<serde_json::Value> = (0..rng.range(3, 7))
                            .map(|_| json!({"content": prose(&mut rng, 6, 6), "status": *rng.pick(&["pending", "in_progress", "completed"]), "activeForm": prose(&mut rng, 5, 5)}))
                            .collect();
                        (
                            json!({"todos": todos}),
                            "Todos have been modified successfully. Ensure that you continue to use the todo list to track your progress. Please proceed with the current tasks if applicable".to_owned(),
                            json!({"oldTodos": [], "newTodos": todos}),
                        )
                    }
                };
                let m = assistant(
                    &mut rng,
                    json!([{"type": "tool_use", "id": id, "name": tool, "input": input}]),
                );
                let mut call = envelope("assistant", m, &parent, &uuid, &ts);
                call["requestId"] = json!(format!("req_011{}", rng.base62(21)));
                lines.push(call);
                let result_uuid = rng.uuid();
                let r = json!({"role": "user", "content": [{"tool_use_id": id, "type": "tool_result", "content": result}]});
                let mut l = envelope("user", r, &json!(uuid), &result_uuid, &ts);
                l["toolUseResult"] = extra;
                lines.push(l);
            }
        }
        for l in lines {
            parent = l["uuid"].clone();
            out.extend_from_slice(&serde_json::to_vec(&l).expect("json"));
            out.push(b'\n');
        }
    }
    out.truncate(bytes);
    out
}

/// A directory of `n` agents named as a hub's roster might name them.
fn beat_directory(n: usize) -> Directory {
    const ROLES: &[&str] = &[
        "impl", "reviewer", "tester", "docs", "planner", "triage", "fuzzer", "release", "bench",
        "security",
    ];
    let mut rng = Rng(0xD1B5_4A32_D192_ED03);
    let agents = (0..n)
        .map(|i| {
            let name = format!("{}-{}", ROLES[i % ROLES.len()], i / ROLES.len() + 1);
            (
                name,
                AgentEntry {
                    parked: rng.below(2) as u32,
                    queued: rng.below(4) as u32,
                },
            )
        })
        .collect();
    Directory {
        version: env!("CARGO_PKG_VERSION").to_owned(),
        agents,
    }
}

/// The seed's 7.5 KB heartbeat carried 5 claudectl sessions with their stats in `sessions[]`.
/// This builds a v1 full beat with a 5-agent directory and 5 such sessions (fields of the kind a
/// fleet dashboard shows: ids, project, status, model, tokens, cost, context, files touched,
/// recent tool calls, the last message), so the payload is of the seed's size.
fn rich_heartbeat_payload() -> serde_json::Value {
    let mut rng = Rng(0xA076_1D64_78BD_642F);
    let directory = beat_directory(5);
    let mut v = Beat::Full {
        seq: Some(1),
        directory,
    }
    .to_payload("barrys-mac-74371ce5", RELAY_T0_MS);
    let sessions: Vec<serde_json::Value> = (0..5)
        .map(|i| {
            let project = *rng.pick(&["agent-hub", "claudectl", "website", "infra", "mobile-app"]);
            let files: Vec<String> = (0..rng.range(4, 9)).map(|_| rng.pick(PATHS).to_string()).collect();
            let tools: Vec<serde_json::Value> = (0..6)
                .map(|k| json!({"tool": *rng.pick(TOOLS), "target": *rng.pick(PATHS), "at_ms": RELAY_T0_MS - 4000 * k, "ok": true}))
                .collect();
            json!({
                "pid": 40_000 + rng.below(20_000), "session_id": rng.uuid(), "agent": "claude",
                "project": project, "cwd": format!("/Users/barry/src/{project}"),
                "status": *rng.pick(&["Processing", "WaitingInput", "Idle", "Processing"]),
                "model": "claude-sonnet-4-5-20250929", "git_branch": format!("feat/{}", rng.skewed(WORDS)),
                "started_at_ms": RELAY_T0_MS - 1000 * rng.range(60, 20_000) as i64, "last_activity_ms": RELAY_T0_MS - rng.range(0, 30_000) as i64,
                "elapsed_secs": rng.range(60, 20_000),
                "tokens": {"input": rng.range(1000, 90_000), "output": rng.range(1000, 60_000), "cache_read": rng.range(100_000, 9_000_000), "cache_write": rng.range(10_000, 400_000)},
                "cost_usd": rng.range(10, 2500) as f64 / 100.0, "context_pct": rng.range(5, 95) as f64, "burn_rate_usd_per_hr": rng.range(50, 900) as f64 / 100.0,
                "files_modified": files, "recent_tools": tools,
                "last_message": prose(&mut rng, 25, 45),
                "subagents": rng.below(3), "tty": format!("/dev/ttys00{i}"),
            })
        })
        .collect();
    v["sessions"] = json!(sessions);
    v
}

/// A `session_transfer` payload without its chunk, for chunk `seq` of `total` of a file whose
/// SHA-256 is `digest`: the chunk goes beside it raw (`RelayMessage::with_chunk`), as an
/// application holding the file's bytes sends it.
fn transfer_head(seq: usize, total: usize, digest: &str) -> serde_json::Value {
    json!({
        "session_id": "5f0c1d2e-8a4b-4c6d-9e7f-0a1b2c3d4e5f", "cwd": "/home/dev/agent-hub",
        "seq": seq, "total": total, "digest": digest,
    })
}

fn task_status_payload() -> serde_json::Value {
    json!({
        "task_id": "task_7f3a9c21", "state": "running",
        "stats": {"tokens_used": 48_213, "cost_usd": 0.7342, "context_pct": 41.5,
                  "files_modified": ["src/relay/frame.rs", "docs/performance.md"],
                  "elapsed_secs": 312, "last_activity": "Edit src/relay/frame.rs"},
    })
}

/// Median time of one call of `f` in µs: `samples` timed batches, each of enough calls to
/// last at least 20 µs (so the clock's grain does not matter for small payloads).
fn median_us(samples: usize, mut f: impl FnMut()) -> f64 {
    let mut k = 1usize;
    loop {
        let t = Instant::now();
        for _ in 0..k {
            f();
        }
        if t.elapsed() >= Duration::from_micros(20) || k >= 1 << 20 {
            break;
        }
        k *= 2;
    }
    let mut v: Vec<f64> = (0..samples)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..k {
                f();
            }
            us(t.elapsed()) / k as f64
        })
        .collect();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// What `frame::decode_frame` does with a compressed body: read the declared size, allocate
/// the output, decompress into it (lz4_flex, safe-decode + checked-decode as Cargo.toml has it).
fn lz4_decode(block: &[u8]) -> Vec<u8> {
    let declared = u32::from_le_bytes([block[0], block[1], block[2], block[3]]) as usize;
    let mut out = vec![0u8; declared];
    let n = lz4_flex::block::decompress_into(&block[4..], &mut out).expect("a valid block");
    out.truncate(n);
    out
}

/// One row of the codec table.
struct CodecRow {
    label: String,
    raw: usize,
    /// lz4_flex block alone.
    block: usize,
    /// As `frame::decode_frame` does it: allocate the output, then decompress.
    decode_us: f64,
    encode_us: f64,
    /// The relay message that carries this payload: its name, its frame body's size, and
    /// whether `encode_frame` with lz4 agreed compresses it (the 1 KiB threshold, and only when
    /// smaller).
    carrier: String,
    carrier_body: usize,
    carrier_lz4: bool,
}

fn codec_row(label: &str, raw: &[u8], carrier: &str, carrier_body: &[u8]) -> Res<CodecRow> {
    let framed = lz4_flex::block::compress_prepend_size(raw);
    if lz4_decode(&framed) != raw {
        return Err(format!("lz4 round trip of {label} differs"));
    }
    let samples = if raw.len() > 64 * 1024 { 501 } else { 301 };
    let decode_us = median_us(samples, || {
        black_box(lz4_decode(black_box(&framed)));
    });
    let encode_us = median_us(samples, || {
        black_box(lz4_flex::block::compress_prepend_size(black_box(raw)));
    });
    let frame = encode_frame(carrier_body, true).map_err(|e| format!("{label}: {e}"))?;
    Ok(CodecRow {
        label: label.to_owned(),
        raw: raw.len(),
        block: framed.len() - 4,
        decode_us,
        encode_us,
        carrier: carrier.to_owned(),
        carrier_body: carrier_body.len(),
        carrier_lz4: frame[4] & FLAG_LZ4 != 0,
    })
}

fn relay_msg(t: MsgType, from: &str, payload: serde_json::Value) -> RelayMessage {
    RelayMessage::new(
        format!("msg_{RELAY_T0_MS}_17_3f9a0c4d2b7e8f15"),
        t,
        from,
        RELAY_T0_MS,
        payload,
    )
}

/// The three payload kinds of the seed's §7.2 table (the bus message and the heartbeat each in
/// two sizes), and for the transcript how v0's base64 line compares with our LZ4 frame.
fn codec_table(transcript: &[u8], dump: Option<&Path>) -> Res<(Vec<CodecRow>, serde_json::Value)> {
    let from = "barrys-mac-74371ce5";
    // The seed's §8 sketch of a forwarded bus message (bus-forward is not built yet): what a
    // frame would carry for a bus message.
    let forward = |body: &str| {
        relay_msg(
            MsgType::Unknown("bus_forward".into()),
            from,
            json!({"to": "reviewer@baradas-mac-mini-508f9c0e", "from": "impl@barrys-mac-74371ce5",
                   "subject": "review.request", "type": "request", "body": body, "hop": 1,
                   "msg_id": "0b6e2f4a-3c1d-4e5f-8a9b-7c6d5e4f3a2b"}),
        )
        .encode_json()
    };
    let beat5 = Beat::Full {
        seq: Some(1),
        directory: beat_directory(5),
    }
    .to_payload(from, RELAY_T0_MS);
    let beat5_bytes = serde_json::to_vec(&beat5).map_err(|e| e.to_string())?;
    let rich = rich_heartbeat_payload();
    let rich_bytes = serde_json::to_vec(&rich).map_err(|e| e.to_string())?;
    let hb = |p: &serde_json::Value| relay_msg(MsgType::Heartbeat, from, p.clone()).encode_json();
    let digest = {
        use sha2::Digest;
        agent_hub::relay::auth::to_hex(&sha2::Sha256::digest(transcript))
    };
    let transfer = relay_msg(MsgType::SessionTransfer, from, transfer_head(0, 1, &digest))
        .with_chunk(transcript);
    let transfer_body =
        agent_hub::relay::frame::encode_body(&transfer).map_err(|e| e.to_string())?;
    let fwd29 = forward(BUS_BODY_29);
    let fwd119 = forward(BUS_BODY_119);
    if let Some(dir) = dump {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        for (name, bytes) in [
            ("bus-body-29.txt", BUS_BODY_29.as_bytes()),
            ("bus-body-119.txt", BUS_BODY_119.as_bytes()),
            ("bus-forward-119.json", &fwd119[..]),
            ("heartbeat-5-agents.json", &beat5_bytes[..]),
            ("heartbeat-5-agents-5-sessions.json", &rich_bytes[..]),
            ("transcript-512k.jsonl", transcript),
        ] {
            let p = dir.join(name);
            std::fs::write(&p, bytes).map_err(|e| format!("{}: {e}", p.display()))?;
        }
    }
    let rows = vec![
        codec_row(
            "bus message body, 29 B (seed's average)",
            BUS_BODY_29.as_bytes(),
            "bus_forward message (seed §8 sketch)",
            &fwd29,
        )?,
        codec_row(
            "bus message body, 119 B (seed's largest)",
            BUS_BODY_119.as_bytes(),
            "bus_forward message (seed §8 sketch)",
            &fwd119,
        )?,
        codec_row(
            "bus_forward message with the 119 B body",
            &fwd119,
            "itself",
            &fwd119,
        )?,
        codec_row(
            "heartbeat, 5 agents (our v1 full beat)",
            &beat5_bytes,
            "heartbeat message",
            &hb(&beat5),
        )?,
        codec_row(
            "heartbeat, 5 agents + 5 rich sessions",
            &rich_bytes,
            "heartbeat message",
            &hb(&rich),
        )?,
        codec_row(
            "transcript 512 KiB (synthetic JSONL)",
            transcript,
            "one 512 KiB session_transfer",
            &transfer_body,
        )?,
    ];
    let line = transfer.encode_line().len();
    let frame = encode_message(&transfer, true)
        .map_err(|e| e.to_string())?
        .len();
    let frame_raw = encode_message(&transfer, false)
        .map_err(|e| e.to_string())?
        .len();
    let transfer_wire = json!({"v0_line_bytes": line, "frame_bytes": frame_raw, "frame_lz4_bytes": frame,
        "line_over_frame_lz4": (line as f64 / frame as f64 * 100.0).round() / 100.0});
    Ok((rows, transfer_wire))
}

fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

const RELAY_KEY: [u8; 32] = [0x5a; 32];

fn relay_sessions(features: &[Feature], t0: Instant) -> (Session, Session) {
    let cfg = |name: &str| {
        let mut c = SessionConfig::new(
            name,
            env!("CARGO_PKG_VERSION"),
            WallClock {
                at: t0,
                unix_ms: RELAY_T0_MS,
            },
        );
        c.features = features.to_vec();
        c
    };
    // A link without frame-mac (the kinds measured here) is allowed only with allow_v0 on
    // (docs/relay-protocol.md §3).
    let strict = agent_hub::relay::framemac::missing_without_v0(features).is_empty();
    let auth = PeerAuth {
        key: RELAY_KEY,
        allow_v0: !strict,
        forward: false,
    };
    let d = Session::dialer(cfg("hubA"), "hubB", auth.clone(), [0x11; 32], 1, t0);
    let a = Session::acceptor(
        cfg("hubB"),
        HashMap::from([("hubA".to_owned(), auth)]),
        [0x22; 32],
        2,
        t0,
    );
    (d, a)
}

fn feature_list(fs: &[Feature]) -> String {
    fs.iter().map(|f| f.as_str()).collect::<Vec<_>>().join(",")
}

/// Moves a session's queued bytes to its socket and reads until the handshake is done.
fn link_handshake(s: &mut Session, sock: &mut TcpStream) -> Res<()> {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        while let Some(b) = s.poll_transmit() {
            sock.write_all(&b)
                .map_err(|e| format!("relay handshake write: {e}"))?;
        }
        while let Some(ev) = s.poll_event() {
            if let SessionEvent::Closed { reason } = ev {
                return Err(format!("relay handshake failed: {reason}"));
            }
        }
        if s.state() == SessionState::Established {
            return Ok(());
        }
        let n = sock
            .read(&mut buf)
            .map_err(|e| format!("relay handshake read: {e}"))?;
        if n == 0 {
            return Err("relay handshake: the peer closed".into());
        }
        s.handle_input(&buf[..n], Instant::now());
    }
}

/// One workload of the loopback link: what is sent and how much of it counts as payload.
struct Workload {
    name: String,
    msg_type: MsgType,
    /// Payloads sent in turn.
    payloads: Vec<serde_json::Value>,
    /// For transfers, the raw chunk that goes with each payload (`with_chunk`); else empty.
    chunks: Vec<Arc<[u8]>>,
    /// Payload bytes per message: the raw chunk for a transfer, the payload's JSON otherwise.
    payload_bytes: usize,
    count: usize,
}

struct LinkRow {
    link: &'static str,
    features: String,
    workload: String,
    msgs: usize,
    payload_bytes: u64,
    wire_bytes: u64,
    wall: Duration,
    send_cpu: Duration,
    recv_cpu: Duration,
}

impl LinkRow {
    fn per_sec(&self) -> f64 {
        self.msgs as f64 / self.wall.as_secs_f64()
    }
    fn payload_mb_s(&self) -> f64 {
        self.payload_bytes as f64 / 1e6 / self.wall.as_secs_f64()
    }
    fn wire_mb_s(&self) -> f64 {
        self.wire_bytes as f64 / 1e6 / self.wall.as_secs_f64()
    }
    fn to_json(&self) -> serde_json::Value {
        json!({
            "link": self.link, "features": self.features, "workload": self.workload,
            "messages": self.msgs, "wall_s": (self.wall.as_secs_f64() * 1000.0).round() / 1000.0,
            "frames_per_s": self.per_sec().round(), "payload_mb_per_s": round1(self.payload_mb_s()),
            "wire_mb_per_s": round1(self.wire_mb_s()), "payload_bytes": self.payload_bytes,
            "wire_bytes": self.wire_bytes,
            "wire_bytes_per_msg": (self.wire_bytes as f64 / self.msgs as f64).round(),
            "send_cpu_us_per_msg": round1(us(self.send_cpu) / self.msgs as f64),
            "recv_cpu_us_per_msg": round1(us(self.recv_cpu) / self.msgs as f64),
        })
    }
}

/// Two sessions over a real 127.0.0.1 TCP connection: the dialer (this thread) sends the
/// workload through `Session::message` + `Session::send`, the acceptor (a second thread) reads
/// the socket into `handle_input` and counts the `Message` events. The clock runs from a barrier
/// after the handshake until the acceptor has the last message.
fn link_run(link: &'static str, features: &[Feature], w: &Workload) -> Res<LinkRow> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")
        .map_err(|e| format!("relay bench listen: {e}"))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let mut dsock = TcpStream::connect(addr).map_err(|e| format!("relay bench connect: {e}"))?;
    let (mut asock, _) = listener
        .accept()
        .map_err(|e| format!("relay bench accept: {e}"))?;
    for s in [&dsock, &asock] {
        s.set_nodelay(true).map_err(|e| e.to_string())?;
        s.set_read_timeout(Some(IO_TIMEOUT))
            .map_err(|e| e.to_string())?;
        s.set_write_timeout(Some(IO_TIMEOUT))
            .map_err(|e| e.to_string())?;
    }
    let (mut d, mut a) = relay_sessions(features, Instant::now());
    let barrier = Arc::new(Barrier::new(2));
    let count = w.count;
    let msg_type = w.msg_type.clone();
    let first = w.payloads[0].clone();
    let first_chunk = w.chunks.first().cloned();
    let b2 = Arc::clone(&barrier);
    let receiver = std::thread::spawn(move || -> Res<(Duration, Duration, Vec<Feature>)> {
        let hs = link_handshake(&mut a, &mut asock);
        b2.wait();
        hs?;
        let features = a.features().to_vec();
        let mut buf = vec![0u8; 256 * 1024];
        let t0 = Instant::now();
        let cpu0 = thread_cpu();
        let mut got = 0;
        while got < count {
            let n = asock
                .read(&mut buf)
                .map_err(|e| format!("relay bench read: {e}"))?;
            if n == 0 {
                return Err(format!(
                    "relay bench: the sender closed after {got} of {count} messages"
                ));
            }
            a.handle_input(&buf[..n], Instant::now());
            while let Some(ev) = a.poll_event() {
                match ev {
                    SessionEvent::Message(m) => {
                        // A transfer arrives holding its chunk raw, from a line or a frame.
                        let same = m.payload == first && m.chunk() == first_chunk.as_ref();
                        if m.msg_type != msg_type || (got == 0 && !same) {
                            return Err(format!("relay bench: message {got} is not the one sent"));
                        }
                        got += 1;
                    }
                    SessionEvent::Closed { reason } => {
                        return Err(format!("relay bench: acceptor closed: {reason}"))
                    }
                    _ => {}
                }
            }
        }
        Ok((t0.elapsed(), thread_cpu() - cpu0, features))
    });
    let hs = link_handshake(&mut d, &mut dsock);
    barrier.wait();
    hs?;
    let bytes0 = d.stats().bytes_out;
    let cpu0 = thread_cpu();
    let mut out = Vec::with_capacity(2 * LINK_WRITE_BYTES);
    let sent: Res<()> = (|| {
        for i in 0..count {
            let now = Instant::now();
            let mut msg = d.message(
                w.msg_type.clone(),
                w.payloads[i % w.payloads.len()].clone(),
                now,
            );
            if !w.chunks.is_empty() {
                msg = msg.with_chunk(Arc::clone(&w.chunks[i % w.chunks.len()]));
            }
            d.send(msg).map_err(|e| format!("relay bench send: {e}"))?;
            while let Some(b) = d.poll_transmit() {
                out.extend_from_slice(&b);
            }
            if out.len() >= LINK_WRITE_BYTES {
                dsock
                    .write_all(&out)
                    .map_err(|e| format!("relay bench write: {e}"))?;
                out.clear();
            }
        }
        dsock
            .write_all(&out)
            .map_err(|e| format!("relay bench write: {e}"))
    })();
    let send_cpu = thread_cpu() - cpu0;
    let wire_bytes = d.stats().bytes_out - bytes0;
    if let Err(e) = sent {
        drop(dsock);
        let _ = receiver.join();
        return Err(e);
    }
    let (wall, recv_cpu, agreed) = receiver
        .join()
        .map_err(|_| "relay bench receiver panicked".to_string())??;
    if agreed != d.features() || d.framed() != features.contains(&Feature::FrameBin) {
        return Err(format!(
            "relay bench: agreed {:?}, asked for {features:?}",
            d.features()
        ));
    }
    Ok(LinkRow {
        link,
        features: feature_list(&agreed),
        workload: w.name.clone(),
        msgs: count,
        payload_bytes: (w.payload_bytes * count) as u64,
        wire_bytes,
        wall,
        send_cpu,
        recv_cpu,
    })
}

/// The link kinds measured: v1 NDJSON lines (frame-bin not agreed), frames, frames with lz4.
/// Every one has mutual-auth and hb-delta, as two current hubs would.
fn link_kinds() -> Vec<(&'static str, Vec<Feature>)> {
    use Feature::*;
    vec![
        ("lines (no frame-bin)", vec![UnknownOk, MutualAuth, HbDelta]),
        ("frames", vec![UnknownOk, MutualAuth, FrameBin, HbDelta]),
        (
            "frames + lz4",
            vec![UnknownOk, MutualAuth, FrameBin, Lz4, HbDelta],
        ),
    ]
}

/// One configuration's heartbeat bytes.
struct BeatRow {
    link: &'static str,
    features: String,
    /// Every beat's size on the wire (dialer → acceptor), in order, and whether it was full.
    beats: Vec<(usize, bool)>,
    /// Every ack's size (acceptor → dialer; hb-delta only).
    acks: Vec<usize>,
    full_payload: usize,
    delta_payload: Option<usize>,
}

impl BeatRow {
    fn full(&self) -> usize {
        self.beats.iter().find(|b| b.1).map_or(0, |b| b.0)
    }
    fn delta(&self) -> Option<usize> {
        let mut d: Vec<usize> = self.beats.iter().filter(|b| !b.1).map(|b| b.0).collect();
        d.sort_unstable();
        d.get(d.len() / 2).copied()
    }
    fn ack(&self) -> Option<usize> {
        let mut a = self.acks.clone();
        a.sort_unstable();
        a.get(a.len() / 2).copied()
    }
    fn mean_beat(&self) -> f64 {
        self.beats.iter().map(|b| b.0).sum::<usize>() as f64 / self.beats.len() as f64
    }
    fn mean_with_acks(&self) -> f64 {
        (self.beats.iter().map(|b| b.0).sum::<usize>() + self.acks.iter().sum::<usize>()) as f64
            / self.beats.len() as f64
    }
    fn to_json(&self) -> serde_json::Value {
        json!({
            "link": self.link, "features": self.features, "beats": self.beats.len(),
            "full_beats": self.beats.iter().filter(|b| b.1).count(),
            "full_beat_bytes": self.full(), "delta_beat_bytes": self.delta(), "ack_bytes": self.ack(),
            "full_payload_json_bytes": self.full_payload, "delta_payload_json_bytes": self.delta_payload,
            "mean_bytes_per_beat": round1(self.mean_beat()),
            "mean_bytes_per_beat_with_acks": round1(self.mean_with_acks()),
        })
    }
}

/// A message's type and payload from one `poll_transmit` unit (a line or a frame).
fn unwrap_unit(bytes: &[u8], framed: bool) -> Res<RelayMessage> {
    if framed {
        let (f, n) = decode_frame(bytes)
            .map_err(|e| e.to_string())?
            .ok_or("a partial frame")?;
        if n != bytes.len() {
            return Err("more than one frame in a unit".into());
        }
        decode_body(&f.body).map_err(|e| e.to_string())
    } else {
        RelayMessage::decode_line(bytes.strip_suffix(b"\n").unwrap_or(bytes))
            .map_err(|e| e.to_string())
    }
}

/// Two sessions in memory on a virtual clock, beating every 30 s for `BEATS` intervals; the
/// dialer's directory has `BEAT_AGENTS` agents and one agent's queue count changes before each
/// beat after the first. Records the size of each beat the dialer sends and each ack it gets
/// back, and checks that the acceptor's copy of the directory is right after every beat.
fn beat_run(link: &'static str, features: &[Feature]) -> Res<BeatRow> {
    let t0 = Instant::now();
    let (mut d, mut a) = relay_sessions(features, t0);
    let move_all = |from: &mut Session, to: &mut Session, now: Instant| {
        while let Some(b) = from.poll_transmit() {
            to.handle_input(&b, now);
        }
    };
    for _ in 0..4 {
        move_all(&mut a, &mut d, t0);
        move_all(&mut d, &mut a, t0);
    }
    if d.state() != SessionState::Established || a.state() != SessionState::Established {
        return Err(format!("heartbeat bench: no link with {features:?}"));
    }
    let framed = d.framed();
    let mut dir = beat_directory(BEAT_AGENTS);
    let names: Vec<String> = dir.agents.keys().cloned().collect();
    let interval = agent_hub::relay::session::DEFAULT_HEARTBEAT_INTERVAL;
    let mut row = BeatRow {
        link,
        features: feature_list(d.features()),
        beats: Vec::new(),
        acks: Vec::new(),
        full_payload: 0,
        delta_payload: None,
    };
    for i in 0..BEATS {
        let now = t0 + interval * i as u32;
        if i > 0 {
            let e = dir
                .agents
                .get_mut(&names[(i * 7) % names.len()])
                .expect("agent");
            e.queued += 1;
        }
        d.set_directory(dir.clone());
        d.handle_timeout(now);
        while let Some(b) = d.poll_transmit() {
            let m = unwrap_unit(&b, framed)?;
            if m.msg_type != MsgType::Heartbeat {
                return Err(format!("heartbeat bench: the dialer sent a {}", m.msg_type));
            }
            let delta = m.payload.get("base").is_some();
            let payload_len = serde_json::to_vec(&m.payload)
                .map_err(|e| e.to_string())?
                .len();
            if delta {
                row.delta_payload.get_or_insert(payload_len);
            } else if row.full_payload == 0 {
                row.full_payload = payload_len;
            }
            row.beats.push((b.len(), !delta));
            a.handle_input(&b, now);
        }
        while let Some(b) = a.poll_transmit() {
            let m = unwrap_unit(&b, framed)?;
            if m.msg_type != MsgType::Ack {
                return Err(format!(
                    "heartbeat bench: expected an ack, got {}",
                    m.msg_type
                ));
            }
            row.acks.push(b.len());
            d.handle_input(&b, now);
        }
        // The acceptor beats too (an empty directory), so neither side's liveness runs out.
        a.handle_timeout(now);
        move_all(&mut a, &mut d, now);
        move_all(&mut d, &mut a, now);
        let mut seen = false;
        while let Some(ev) = a.poll_event() {
            match ev {
                SessionEvent::Heartbeat { directory } => {
                    if directory != dir {
                        return Err(format!("heartbeat bench ({link}): the acceptor's directory differs after beat {}", i + 1));
                    }
                    seen = true;
                }
                SessionEvent::Closed { reason } => {
                    return Err(format!("heartbeat bench: {reason}"))
                }
                _ => {}
            }
        }
        while let Some(ev) = d.poll_event() {
            if let SessionEvent::Closed { reason } = ev {
                return Err(format!("heartbeat bench: {reason}"));
            }
        }
        if !seen {
            return Err(format!(
                "heartbeat bench ({link}): beat {} did not arrive",
                i + 1
            ));
        }
    }
    Ok(row)
}

#[derive(Default)]
struct RelayReport {
    transcript_lines: usize,
    codec: Vec<CodecRow>,
    transfer_wire: serde_json::Value,
    /// What the link's per-message steps cost for one 64 KiB chunk, median µs.
    steps: Vec<(&'static str, f64)>,
    links: Vec<LinkRow>,
    beats: Vec<BeatRow>,
}

/// The steps a 64 KiB `session_transfer` goes through on each kind of link, timed alone on one
/// thread, so the link figures can be read: where a chunk's CPU goes. The message holds its
/// chunk raw, as the link's sender gives it.
fn transfer_steps(head: &serde_json::Value, chunk: &Arc<[u8]>) -> Res<Vec<(&'static str, f64)>> {
    let msg =
        relay_msg(MsgType::SessionTransfer, "hubA", head.clone()).with_chunk(Arc::clone(chunk));
    let line = msg.encode_line();
    let from_line =
        RelayMessage::decode_line(&line[..line.len() - 1]).map_err(|e| e.to_string())?;
    let body = agent_hub::relay::frame::encode_body(&msg).map_err(|e| e.to_string())?;
    let frame = encode_frame(&body, true).map_err(|e| e.to_string())?;
    let block = frame[5..].to_vec();
    let n = 201;
    Ok(vec![
        (
            "payload_typed (catalogue check; the chunk is raw: no base64)",
            median_us(n, || {
                black_box(black_box(&msg).payload_typed().is_ok());
            }),
        ),
        (
            "lines: encode_line (JSON + the sender's one base64 encode)",
            median_us(n, || {
                black_box(black_box(&msg).encode_line());
            }),
        ),
        (
            "lines: decode_line (JSON; data stays base64 text)",
            median_us(n, || {
                black_box(RelayMessage::decode_line(black_box(&line[..line.len() - 1])).is_ok());
            }),
        ),
        (
            "lines: make_chunk_raw (the receiver's one base64 decode)",
            median_us(n, || {
                let mut m = black_box(&from_line).clone();
                black_box(m.make_chunk_raw().is_ok());
            }),
        ),
        (
            "frames: encode_body (JSON head, raw tail)",
            median_us(n, || {
                black_box(agent_hub::relay::frame::encode_body(black_box(&msg)).is_ok());
            }),
        ),
        (
            "frames: decode_body (JSON head, raw tail)",
            median_us(n, || {
                black_box(decode_body(black_box(&body)).is_ok());
            }),
        ),
        (
            "lz4: compress the body",
            median_us(n, || {
                black_box(lz4_flex::block::compress_prepend_size(black_box(&body)));
            }),
        ),
        (
            "lz4: decompress the body",
            median_us(n, || {
                black_box(lz4_decode(black_box(&block)));
            }),
        ),
    ])
}

fn relay_bench(opts: &Opts) -> Res<RelayReport> {
    progress("relay: building the payloads");
    let transcript = synthetic_transcript(TRANSCRIPT_BYTES);
    let mut r = RelayReport {
        transcript_lines: transcript.iter().filter(|&&b| b == b'\n').count(),
        ..RelayReport::default()
    };
    progress("relay 1: LZ4 ratio and decode time per payload kind");
    let (codec, transfer_wire) = codec_table(&transcript, opts.relay_dump.as_deref())?;
    r.codec = codec;
    r.transfer_wire = transfer_wire;

    let digest = {
        use sha2::Digest;
        agent_hub::relay::auth::to_hex(&sha2::Sha256::digest(&transcript))
    };
    let total = TRANSCRIPT_BYTES / CHUNK_BYTES;
    let status = task_status_payload();
    let workloads = vec![
        Workload {
            name: "task_status (small)".into(),
            msg_type: MsgType::TaskStatus,
            payload_bytes: serde_json::to_vec(&status)
                .map_err(|e| e.to_string())?
                .len(),
            payloads: vec![status],
            chunks: vec![],
            count: opts.relay_messages,
        },
        Workload {
            name: "session_transfer, 64 KiB chunks".into(),
            msg_type: MsgType::SessionTransfer,
            payloads: (0..total)
                .map(|i| transfer_head(i, total, &digest))
                .collect(),
            chunks: transcript.chunks(CHUNK_BYTES).map(Arc::from).collect(),
            payload_bytes: CHUNK_BYTES,
            count: opts.relay_chunks,
        },
        Workload {
            name: "session_transfer, 512 KiB chunks".into(),
            msg_type: MsgType::SessionTransfer,
            payloads: vec![transfer_head(0, 1, &digest)],
            chunks: vec![Arc::from(&transcript[..])],
            payload_bytes: TRANSCRIPT_BYTES,
            count: (opts.relay_chunks / 8).max(1),
        },
    ];
    progress("relay 2: the steps of one 64 KiB chunk, timed alone");
    r.steps = transfer_steps(&workloads[1].payloads[0], &workloads[1].chunks[0])?;
    for w in &workloads {
        for (link, features) in link_kinds() {
            progress(&format!(
                "relay 2: loopback link, {link}, {} x {}",
                w.count, w.name
            ));
            r.links.push(link_run(link, &features, w)?);
        }
    }
    progress("relay 3: heartbeat bytes, full against delta, 50 agents");
    use Feature::*;
    let beat_kinds: Vec<(&'static str, Vec<Feature>)> = vec![
        ("lines", vec![UnknownOk, MutualAuth]),
        ("lines", vec![UnknownOk, MutualAuth, HbDelta]),
        ("frames", vec![UnknownOk, MutualAuth, FrameBin]),
        ("frames", vec![UnknownOk, MutualAuth, FrameBin, HbDelta]),
        ("frames + lz4", vec![UnknownOk, MutualAuth, FrameBin, Lz4]),
        (
            "frames + lz4",
            vec![UnknownOk, MutualAuth, FrameBin, Lz4, HbDelta],
        ),
    ];
    for (link, f) in beat_kinds {
        r.beats.push(beat_run(link, &f)?);
    }
    Ok(r)
}

impl RelayReport {
    fn to_json(&self, opts: &Opts) -> serde_json::Value {
        let codec: Vec<serde_json::Value> = self
            .codec
            .iter()
            .map(|c| {
                json!({
                    "payload": c.label, "raw_bytes": c.raw, "lz4_block_bytes": c.block,
                    "lz4_framed_bytes": c.block + 4,
                    "ratio": (c.raw as f64 / c.block as f64 * 100.0).round() / 100.0,
                    "ratio_framed": (c.raw as f64 / (c.block + 4) as f64 * 100.0).round() / 100.0,
                    "decode_us_median": (c.decode_us * 100.0).round() / 100.0,
                    "encode_us_median": (c.encode_us * 100.0).round() / 100.0,
                    "carrier": c.carrier, "carrier_body_bytes": c.carrier_body,
                    "carrier_compressed": c.carrier_lz4,
                })
            })
            .collect();
        json!({
            "options": {"relay_chunks": opts.relay_chunks, "relay_messages": opts.relay_messages},
            "transcript": {"bytes": TRANSCRIPT_BYTES, "lines": self.transcript_lines},
            "lz4_crate": "lz4_flex 0.10 (safe-encode, safe-decode, checked-decode)",
            "codec": codec,
            "transcript_transfer_wire": self.transfer_wire,
            "link": self.links.iter().map(LinkRow::to_json).collect::<Vec<_>>(),
            "chunk_64k_steps_us_median": self.steps.iter().map(|(k, v)| (k.to_string(), json!((v * 10.0).round() / 10.0))).collect::<serde_json::Map<_, _>>(),
            "heartbeat": {"agents": BEAT_AGENTS, "changed_per_beat": 1, "beats": BEATS,
                          "runs": self.beats.iter().map(BeatRow::to_json).collect::<Vec<_>>()},
        })
    }

    fn to_table(&self, opts: &Opts) -> String {
        let mut t = String::new();
        let _ = writeln!(
            t,
            "relay 1: LZ4 (lz4_flex block, as frames carry it) on the seed's §7.2 payload kinds"
        );
        let _ = writeln!(
            t,
            "{:<42} {:>7} {:>7} {:>6} {:>8} {:>9} {:>9}  in our frames (lz4 agreed, 1 KiB threshold)",
            "payload", "raw B", "lz4 B", "ratio", "+size", "decode µs", "encode µs"
        );
        for c in &self.codec {
            let _ = writeln!(
                t,
                "{:<42} {:>7} {:>7} {:>5.2}x {:>7.2}x {:>9.2} {:>9.2}  {}: {} B body, {}",
                c.label,
                c.raw,
                c.block,
                c.raw as f64 / c.block as f64,
                c.raw as f64 / (c.block + 4) as f64,
                c.decode_us,
                c.encode_us,
                c.carrier,
                c.carrier_body,
                if c.carrier_lz4 {
                    "compressed"
                } else {
                    "sent raw"
                }
            );
        }
        let w = &self.transfer_wire;
        let _ = writeln!(
            t,
            "  the 512 KiB transcript as one session_transfer: v0 base64 line {} B, frame {} B, frame with lz4 {} B ({}x less than the line)",
            w["v0_line_bytes"], w["frame_bytes"], w["frame_lz4_bytes"], w["line_over_frame_lz4"]
        );
        let _ = writeln!(t, "  ratio: raw / lz4 block; +size: raw / (block + the 4-byte raw size a frame body carries); µs: median of timed batches;");
        let _ = writeln!(
            t,
            "  decode: allocate the output and decompress into it, as frame::decode_frame does"
        );
        let _ = writeln!(t);
        let _ = writeln!(t, "relay 2: one direction over 127.0.0.1 TCP, Session::send -> poll_transmit -> socket -> handle_input -> Message event");
        let _ = writeln!(
            t,
            "{:<34} {:<22} {:>7} {:>7} {:>9} {:>10} {:>9} {:>9} {:>8} {:>8}",
            "workload",
            "link",
            "msgs",
            "wall s",
            "frames/s",
            "payload MB/s",
            "wire B/msg",
            "wire MB/s",
            "send µs",
            "recv µs"
        );
        for l in &self.links {
            let _ = writeln!(
                t,
                "{:<34} {:<22} {:>7} {:>7.2} {:>9.0} {:>10.1} {:>9.0} {:>9.1} {:>8.1} {:>8.1}",
                l.workload,
                l.link,
                l.msgs,
                l.wall.as_secs_f64(),
                l.per_sec(),
                l.payload_mb_s(),
                l.wire_bytes as f64 / l.msgs as f64,
                l.wire_mb_s(),
                us(l.send_cpu) / l.msgs as f64,
                us(l.recv_cpu) / l.msgs as f64
            );
        }
        let _ = writeln!(t, "  payload: the raw chunk (transfers) or the payload object's JSON (task_status); MB = 10^6 bytes; send/recv µs: each thread's CPU per message");
        let _ = writeln!(t, "  one 64 KiB chunk's steps, timed alone (median µs):");
        for (k, v) in &self.steps {
            let _ = writeln!(t, "    {k:<68} {v:>8.1}");
        }
        let _ = writeln!(t, "  counts: --relay-messages {} task_status, --relay-chunks {} 64 KiB chunks, {} 512 KiB chunks; every link also agreed unknown-ok, mutual-auth, hb-delta", opts.relay_messages, opts.relay_chunks, (opts.relay_chunks / 8).max(1));
        let _ = writeln!(t);
        let _ = writeln!(t, "relay 3: heartbeat bytes on the wire, {BEAT_AGENTS}-agent directory, one agent's count changes before each beat, {BEATS} beats (full every 10th under hb-delta)");
        let _ = writeln!(
            t,
            "{:<14} {:<42} {:>9} {:>9} {:>6} {:>11} {:>14}",
            "link", "features", "full B", "delta B", "ack B", "mean B/beat", "with acks B/beat"
        );
        for b in &self.beats {
            let opt = |v: Option<usize>| v.map_or("-".to_owned(), |v| v.to_string());
            let _ = writeln!(
                t,
                "{:<14} {:<42} {:>9} {:>9} {:>6} {:>11.0} {:>14.0}",
                b.link,
                b.features,
                b.full(),
                opt(b.delta()),
                opt(b.ack()),
                b.mean_beat(),
                b.mean_with_acks()
            );
        }
        if let Some(b) = self.beats.iter().find(|b| b.delta_payload.is_some()) {
            let _ = writeln!(t, "  payload JSON alone: full {} B, delta {} B; sizes include the envelope and the line's \\n or the frame's 5-byte header", b.full_payload, b.delta_payload.unwrap_or(0));
        }
        t
    }
}

// ----- phase 6: mail across two linked hubs (SPEC §15) -----

struct ForwardResult {
    handoff: HandoffResult,
    /// Wall: from the first send on east until west's awaits have every envelope.
    throughput: Run,
}

/// The `[relay]` table of one side of the bench's pair; the key file sits next to the config.
fn relay_table(me: &str, listen: &str, peer: &str, address: Option<SocketAddr>) -> String {
    let address = address.map_or_else(String::new, |a| format!("address = \"{a}\"\n"));
    format!(
        "\n[relay]\npeer_id = \"{me}\"\nlisten = \"{listen}\"\nheartbeat_interval_ms = 30000\n\
         handshake_timeout_ms = 10000\nreconnect_backoff_ms = [100, 1000]\n\
         features = [\"unknown-ok\", \"mutual-auth\", \"frame-bin\", \"lz4\", \"hb-delta\", \"bus-forward\"]\n\
         status_path = \"relay-status-{me}.json\"\n\n[[relay.peers]]\nid = \"{peer}\"\n{address}\
         key_file = \"relay-{me}.key\"\nallow_v0 = false\nforward = true\n"
    )
}

/// Starts west (a second fixture in its own folder) and east (the main fixture) linked by the
/// relay, both with store `kind`, then times cross-hub handoffs and a throughput run.
fn phase_forward(
    server: &Path,
    work: &Path,
    fx: &Fixture,
    opts: &Opts,
    kind: StoreKind,
) -> Res<ForwardResult> {
    let west_dir = work.join(format!("west-{}", kind.name()));
    std::fs::create_dir(&west_dir).map_err(|e| format!("{}: {e}", west_dir.display()))?;
    std::fs::set_permissions(&west_dir, std::fs::Permissions::from_mode(0o700))
        .map_err(|e| e.to_string())?;
    let west = Fixture::write(&west_dir, opts)?;
    let key = format!(
        "{}{}\n",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    );
    write_private(&west_dir.join("relay-west.key"), &key)?;
    let east_key = work.join("relay-east.key");
    if !east_key.exists() {
        write_private(&east_key, &key)?;
    } else {
        std::fs::write(&east_key, &key).map_err(|e| e.to_string())?;
    }
    let read = |p: &Path| std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()));
    let west_config = west_dir.join("config-relay.toml");
    let text = read(west.config(kind))? + &relay_table("west", "127.0.0.1:0", "east", None);
    write_private(&west_config, &text)?;
    let west_hub = HubProcess::start_with(server, &west_config, &west.stderr_path)?;
    let at = west_hub
        .relay_addr
        .ok_or("west printed no relay address before its ready line")?;
    let east_config = work.join(format!("config-{}-relay.toml", kind.name()));
    let text = read(fx.config(kind))? + &relay_table("east", "", "west", Some(at));
    write_private(&east_config, &text)?;
    if kind == StoreKind::Sqlite {
        fx.remove_db()?;
    }
    let mut east_hub = HubProcess::start_with(server, &east_config, &fx.stderr_path)?;
    let pair = [&east_hub, &west_hub];
    let result = (|| -> Res<ForwardResult> {
        // The first (warm-up) handoffs wait for the link to come up.
        let to = format!("{}@west", west.hand_rx.name);
        let handoff = handoff_between(
            &pair,
            &fx.hand_tx,
            &west.hand_rx,
            &to,
            opts.forward_handoffs,
            false,
        )?;
        let total = opts.forward_sends;
        let (addr, sink) = (west_hub.addr, west.sink.clone());
        let drain = move |start: Arc<Barrier>| -> Res<()> {
            let bytes: Arc<[u8]> = Arc::from(await_bytes(&sink, None, Some(60), false));
            let handles: Vec<_> = split(total, DRAIN_THREADS)
                .into_iter()
                .map(|n| {
                    let bytes = bytes.clone();
                    std::thread::spawn(move || -> Res<usize> {
                        let mut buf = Vec::with_capacity(1024);
                        for _ in 0..n {
                            let mut conn = open(addr, &bytes)?;
                            expect_ok(&mut conn, &mut buf)?;
                            match read_line(&mut conn, &mut buf)? {
                                HubLine::Envelope(_) => {}
                                other => return Err(format!("west drain: got {other:?}")),
                            }
                        }
                        Ok(n)
                    })
                })
                .collect();
            start.wait();
            let got: usize = join_all(handles)?.into_iter().sum();
            if got != total {
                return Err(format!("west took {got} envelopes, expected {total}"));
            }
            Ok(())
        };
        let to = format!("{}@west", west.sink.name);
        let throughput = send_run(&pair, &fx.sender, &to, 4, total, Some(Box::new(drain)))?;
        Ok(ForwardResult {
            handoff,
            throughput,
        })
    })();
    let stopped = east_hub.terminate();
    drop(west_hub);
    let result = result?;
    match stopped {
        Some(s) if s.success() => Ok(result),
        _ => Err(format!(
            "east did not stop cleanly: {}",
            east_hub.stderr_tail()
        )),
    }
}
