//! Setup: the server binary, the descriptor limit, the temp dir (removed on exit or signal),
//! the roster, tokens and config of a throwaway hub.

use crate::base::progress;
use crate::base::Res;
use crate::options::{Opts, StoreKind, DB_FILE, POLL_STEP, SQLITE_MAX_BYTES};
use agent_hub_proto::wire::{ClientLine, Hello};
use std::fmt::Write as _;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

// ----- setup: binary, limits, temp dir, fixture files -----

/// `--server`, else `agent-hub-server` next to this executable (both are in target/release
/// after `cargo build --release`).
pub(crate) fn find_server(explicit: Option<&Path>) -> Res<PathBuf> {
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
pub(crate) fn raise_nofile() -> Res<u64> {
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
pub(crate) static HUB_PIDS: Mutex<Vec<i32>> = Mutex::new(Vec::new());
pub(crate) static WORK_PATH: Mutex<Option<PathBuf>> = Mutex::new(None);
/// Set by the signal thread before it cleans up; it then owns the exit.
pub(crate) static INTERRUPTED: AtomicBool = AtomicBool::new(false);
pub(crate) static SIGNAL_THREAD: Mutex<Option<std::thread::JoinHandle<()>>> = Mutex::new(None);

/// Blocks SIGINT, SIGTERM and SIGHUP in every thread and takes them in one thread with
/// sigwait: an interrupted run kills the hub, reaps it, removes the temp dir and exits 128+sig.
/// (Children inherit the blocked mask; `HubProcess::start` clears it in the hub before exec.)
pub(crate) fn install_interrupt_cleanup() -> Res<()> {
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

pub(crate) fn hub_pids() -> std::sync::MutexGuard<'static, Vec<i32>> {
    HUB_PIDS
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// True when the child `pid` has exited (or is not ours to wait for); does not reap it.
pub(crate) fn exited_unreaped(pid: i32) -> bool {
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

/// Stops a child the bench started and registered in `HUB_PIDS`: SIGTERM, up to `timeout` for
/// it to exit, then SIGKILL. Each signal goes only while `pid` is still listed there, so never
/// to a pid the signal thread has reaped and the kernel may have reused; the child is reaped
/// here unless that thread took it over. Returns the exit status when it stopped by itself
/// within `timeout` (None when it was killed, or reaped elsewhere). The one stop routine of
/// the bench, for the hub (`HubProcess`) and the peers (`peers::servers::PeerProcess`).
pub(crate) fn terminate_child(
    mut child: Child,
    pid: i32,
    timeout: Duration,
) -> Option<std::process::ExitStatus> {
    let signal = |sig: libc::c_int| -> bool {
        let owned = hub_pids();
        if !owned.contains(&pid) {
            return false;
        }
        // SAFETY: kill(2) on our own unreaped child: we hold the HUB_PIDS lock and `pid` is
        // listed, and whoever reaps a pid removes it there first.
        unsafe {
            libc::kill(pid, sig);
        }
        true
    };
    if !signal(libc::SIGTERM) {
        return None; // the signal thread has it
    }
    let until = Instant::now() + timeout;
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

/// The temp dir; removed on drop (also when a phase fails or panics) unless kept.
pub(crate) struct WorkDir {
    pub(crate) path: PathBuf,
    pub(crate) keep: bool,
}

impl WorkDir {
    pub(crate) fn create(parent: Option<&Path>, keep: bool) -> Res<WorkDir> {
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
pub(crate) struct Agent {
    pub(crate) name: String,
    pub(crate) hello: Arc<[u8]>,
}

/// The files a hub runs on, and the agents in its roster.
pub(crate) struct Fixture {
    /// One config per store kind: `config-memory.toml`, `config-sqlite.toml`.
    pub(crate) config_memory: PathBuf,
    pub(crate) config_sqlite: PathBuf,
    /// The SQLite store's database file (`store.path` of the sqlite config).
    pub(crate) db_path: PathBuf,
    pub(crate) stderr_path: PathBuf,
    pub(crate) sender: Agent,
    pub(crate) sink: Agent,
    pub(crate) hand_tx: Agent,
    pub(crate) hand_rx: Agent,
    pub(crate) parker: Agent,
    /// Delegates the tasks of the delegation phase and awaits their outcomes.
    pub(crate) delegator: Agent,
    pub(crate) requesters: Vec<Agent>,
    pub(crate) responders: Vec<Agent>,
}

impl Fixture {
    pub(crate) fn write(dir: &Path, opts: &Opts) -> Res<Fixture> {
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
            let hello = ClientLine::Hello(Hello::new(name.clone(), token)).encode();
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
        let delegator = make("delegator".into())?;
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
            delegator,
            requesters,
            responders,
        })
    }

    pub(crate) fn config(&self, kind: StoreKind) -> &Path {
        match kind {
            StoreKind::Memory => &self.config_memory,
            StoreKind::Sqlite => &self.config_sqlite,
        }
    }

    /// Removes the database and its WAL and shared-memory files, if any (no hub is running).
    pub(crate) fn remove_db(&self) -> Res<()> {
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
pub(crate) fn bench_config(opts: &Opts, kind: StoreKind) -> Res<String> {
    let mut doc: toml::Table = toml::from_str(include_str!("../../../config.example.toml"))
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
    // Phase 4 parks every await as one name: let one name hold every connection (the
    // default is a quarter of them, docs/operations.md "Limits"). The key is optional, so
    // config.example.toml only mentions it in a comment.
    let max_connections = big[0].1;
    limits.insert(
        "max_connections_per_agent".into(),
        toml::Value::Integer(max_connections as i64),
    );
    let text = toml::to_string(&doc).map_err(|e| format!("config: {e}"))?;
    Ok(format!(
        "# Written by agent-hub-bench from config.example.toml ({} store).\n{text}",
        kind.name()
    ))
}

pub(crate) fn write_private(path: &Path, text: &str) -> Res<()> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| format!("cannot create {}: {e}", path.display()))?;
    f.write_all(text.as_bytes())
        .map_err(|e| format!("cannot write {}: {e}", path.display()))
}
