//! The relay's peer table on disk: the running hub rewrites it (atomically) when a peer's
//! state changes or a heartbeat arrives, at most once a second, and `agent-hub-server relay
//! peers` prints it.
//!
//! Beside the server and the client rather than in either (PLAN.md §14): the server writes the
//! file, `agent-hub top` and `relay peers` read it, and the two never import each other.
//!
//! Owns the file's format (JSON, `"v": 1`) and `StatusWriter`, the thread that writes it so
//! the event loop never serialises, writes or renames it itself (issue 9: no disk work on the
//! loop). Never holds a key or a proof.

use crate::config::Config;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How long dropping the writer waits for the last snapshot to reach the file (the table
/// written at shutdown); a disk that takes longer does not hold the exit.
const EXIT_WAIT: Duration = Duration::from_secs(2);

/// Write errors kept for the loop to log; more between two looks are counted, not kept.
const MAX_KEPT_ERRORS: usize = 8;

/// Format version of the status file.
pub const STATUS_FORMAT_VERSION: u32 = 1;

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct PeerStatus {
    pub id: String,
    /// `up`, `connecting`, `handshaking`, `backoff`, `down` (accept-only and not connected).
    pub state: String,
    /// `dialled` or `accepted` for the current link.
    pub direction: Option<String>,
    pub proto: Option<u32>,
    /// Whose relay the link speaks: `agent-hub` (transcript proofs) or `claudectl` (v0, or
    /// claudectl's v1 with the nonce proof); docs/relay-protocol.md §2.1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dialect: Option<String>,
    pub features: Vec<String>,
    pub peer_version: Option<String>,
    /// RFC 3339 time of the last heartbeat received.
    pub last_heartbeat: Option<String>,
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub reconnects: u64,
    /// The peer's hub directory from its last heartbeat: agent names (a claudectl peer's
    /// sessions).
    pub agents: Vec<String>,
    /// What a claudectl peer's last beat said of its machine: its sessions, tools, addresses
    /// and headroom (docs/relay-protocol.md §5 "claudectl's heartbeat"); absent for our hubs
    /// and for claudectl 0.64, whose beats are `{}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker: Option<agent_hub_proto::relay::worker::PeerWorker>,
    /// The room the peer's last beat reported (feature `headroom`, either dialect; issue 38):
    /// what `delegate --peer auto` weighs it by. Absent when it reports none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub headroom: Option<agent_hub_proto::relay::worker::Headroom>,
    pub last_error: Option<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct RelayStatus {
    pub v: u32,
    pub updated: String,
    pub peer_id: String,
    pub listen: Option<String>,
    pub peers: Vec<PeerStatus>,
}

#[derive(Default)]
struct Slot {
    /// The newest snapshot not yet taken by the thread: a newer one replaces it, so a slow
    /// disk skips tables instead of queueing them.
    next: Option<RelayStatus>,
    writing: bool,
    closed: bool,
    errors: Vec<String>,
    dropped_errors: u64,
    /// Files written so far.
    written: u64,
}

/// The loop's handle on the status file's writer thread.
pub struct StatusWriter {
    shared: Arc<(Mutex<Slot>, Condvar)>,
}

/// The slot's lock, whoever panicked while holding it: a `Slot` is plain data, consistent
/// after any step.
fn lock(m: &Mutex<Slot>) -> MutexGuard<'_, Slot> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl StatusWriter {
    /// Starts the thread that writes `path`.
    pub fn spawn(path: PathBuf) -> std::io::Result<StatusWriter> {
        let shared = Arc::new((Mutex::new(Slot::default()), Condvar::new()));
        let theirs = shared.clone();
        std::thread::Builder::new()
            .name("relay-status".into())
            .spawn(move || {
                let (m, cv) = &*theirs;
                loop {
                    let status = {
                        let mut slot = lock(m);
                        while slot.next.is_none() && !slot.closed {
                            slot = cv.wait(slot).unwrap_or_else(|p| p.into_inner());
                        }
                        match slot.next.take() {
                            Some(s) => {
                                slot.writing = true;
                                s
                            }
                            None => return,
                        }
                    };
                    let result = write_status(&path, &status);
                    let mut slot = lock(m);
                    slot.writing = false;
                    slot.written += 1;
                    if let Err(e) = result {
                        if slot.errors.len() < MAX_KEPT_ERRORS {
                            slot.errors
                                .push(format!("cannot write {}: {e}", path.display()));
                        } else {
                            slot.dropped_errors += 1;
                        }
                    }
                    cv.notify_all();
                }
            })?;
        Ok(StatusWriter { shared })
    }

    /// Hands over the newest table; the thread writes it when it is free.
    pub fn submit(&self, status: RelayStatus) {
        let (m, cv) = &*self.shared;
        lock(m).next = Some(status);
        cv.notify_all();
    }

    /// Write errors since the last call, for the service log.
    pub fn take_errors(&self) -> Vec<String> {
        let mut slot = lock(&self.shared.0);
        let mut out = std::mem::take(&mut slot.errors);
        let dropped = std::mem::take(&mut slot.dropped_errors);
        if dropped > 0 {
            out.push(format!("{dropped} more status file write errors"));
        }
        out
    }

    /// Files written so far.
    pub fn written(&self) -> u64 {
        lock(&self.shared.0).written
    }

    /// Waits until every submitted table is written, or `deadline`; true if idle.
    pub fn wait_idle(&self, deadline: Instant) -> bool {
        let (m, cv) = &*self.shared;
        let mut slot = lock(m);
        while slot.next.is_some() || slot.writing {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            slot = cv
                .wait_timeout(slot, left)
                .map(|(g, _)| g)
                .unwrap_or_else(|p| p.into_inner().0);
        }
        true
    }
}

impl Drop for StatusWriter {
    /// Lets the last table (the one written at shutdown) reach the file, bounded by
    /// `EXIT_WAIT`, then ends the thread.
    fn drop(&mut self) {
        self.wait_idle(agent_hub_proto::kernel::deadline::after(
            Instant::now(),
            EXIT_WAIT,
        ));
        let (m, cv) = &*self.shared;
        lock(m).closed = true;
        cv.notify_all();
    }
}

/// Writes the status file atomically (`atomic_file`: temp file, fsync, rename), mode 600.
pub fn write_status(path: &Path, status: &RelayStatus) -> std::io::Result<()> {
    let mut text = serde_json::to_string_pretty(status).map_err(std::io::Error::other)?;
    text.push('\n');
    crate::atomic_file::write_atomic(path, text.as_bytes(), 0o600)
}

/// Why the relay status file cannot be found or read (`relay peers`, `agent-hub top
/// --config`).
#[derive(Debug)]
pub enum StatusFileError {
    /// The hub's config would not load: its own message.
    Config(crate::config::ConfigError),
    /// The config has no `[relay]` table, so no status file.
    NoRelay(PathBuf),
    /// The status file could not be read (a hub that is not running has not written it).
    Unreadable(PathBuf, std::io::Error),
    /// The file is not the JSON of a `RelayStatus`.
    NotStatus(PathBuf, serde_json::Error),
}

impl std::fmt::Display for StatusFileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StatusFileError::Config(e) => write!(f, "{e}"),
            StatusFileError::NoRelay(config) => {
                write!(f, "{} has no [relay] table", config.display())
            }
            StatusFileError::Unreadable(path, e) => write!(
                f,
                "cannot read {}: {e} (is the hub running with this config?)",
                path.display()
            ),
            StatusFileError::NotStatus(path, e) => {
                write!(f, "{} is not a relay status file: {e}", path.display())
            }
        }
    }
}

impl std::error::Error for StatusFileError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            StatusFileError::Config(e) => Some(e),
            StatusFileError::NoRelay(_) => None,
            StatusFileError::Unreadable(_, e) => Some(e),
            StatusFileError::NotStatus(_, e) => Some(e),
        }
    }
}

/// Where the hub configured at `config_path` keeps its status file.
pub fn status_path_of(config_path: &Path) -> Result<PathBuf, StatusFileError> {
    let config = Config::load(config_path).map_err(StatusFileError::Config)?;
    config
        .relay
        .map(|r| r.status_path)
        .ok_or_else(|| StatusFileError::NoRelay(config_path.to_owned()))
}

/// Reads the status file at `path` (`relay peers`, and `agent-hub top --config`).
pub fn read_status(path: &Path) -> Result<RelayStatus, StatusFileError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| StatusFileError::Unreadable(path.to_owned(), e))?;
    serde_json::from_str(&text).map_err(|e| StatusFileError::NotStatus(path.to_owned(), e))
}

/// `agent-hub-server relay peers --config PATH`: reads the status file the hub keeps.
pub fn print_peers(config_path: &Path) -> Result<(), StatusFileError> {
    let status = read_status(&status_path_of(config_path)?)?;
    // Peers chose some of these strings (a close reason may quote what a peer sent): the one
    // sanitiser keeps their control characters off the operator's terminal.
    for line in render_peers(&status).lines() {
        println!("{}", agent_hub_proto::kernel::text::for_terminal(line));
    }
    Ok(())
}

/// The peer table `relay peers` prints.
pub fn render_peers(status: &RelayStatus) -> String {
    let mut out = format!(
        "peer {} listening on {} (as of {})\n{:<20} {:<11} {:<9} {:<5} {:<26} {:<25} {:>10} {:>10} {:>10}\n",
        status.peer_id,
        status.listen.as_deref().unwrap_or("-"),
        status.updated,
        "PEER",
        "STATE",
        "LINK",
        "PROTO",
        "FEATURES",
        "LAST HEARTBEAT",
        "BYTES IN",
        "BYTES OUT",
        "RECONNECTS"
    );
    for p in &status.peers {
        let features = if p.features.is_empty() {
            "-".to_owned()
        } else {
            p.features.join(",")
        };
        out.push_str(&format!(
            "{:<20} {:<11} {:<9} {:<5} {:<26} {:<25} {:>10} {:>10} {:>10}\n",
            p.id,
            p.state,
            p.direction.as_deref().unwrap_or("-"),
            p.proto.map_or("-".to_owned(), |v| v.to_string()),
            features,
            p.last_heartbeat.as_deref().unwrap_or("-"),
            p.bytes_in,
            p.bytes_out,
            p.reconnects
        ));
        if p.dialect.as_deref() == Some("claudectl") {
            out.push_str(&format!("{:<20} dialect: claudectl\n", ""));
        }
        if let Some(w) = &p.worker {
            worker_lines(&mut out, w);
        }
        if let Some(e) = &p.last_error {
            out.push_str(&format!("{:<20} last error: {e}\n", ""));
        }
    }
    out
}

/// What a claudectl peer's beat said of its machine, one line each (every string in it was
/// bounded and made printable when read, `relay::worker`).
fn worker_lines(out: &mut String, w: &agent_hub_proto::relay::worker::PeerWorker) {
    use agent_hub_proto::relay::worker::ToolState;
    let pad = "";
    if let Some(sessions) = &w.sessions {
        let list: Vec<String> = sessions
            .iter()
            .map(|s| {
                let about: Vec<&str> = [s.project.as_deref(), s.status.as_deref()]
                    .into_iter()
                    .flatten()
                    .collect();
                if about.is_empty() {
                    s.name.clone()
                } else {
                    format!("{} ({})", s.name, about.join(", "))
                }
            })
            .collect();
        let more = if w.sessions_dropped > 0 {
            format!(", {} more not kept", w.sessions_dropped)
        } else {
            String::new()
        };
        out.push_str(&format!(
            "{pad:<20} sessions: {}{more}{}\n",
            sessions.len(),
            if list.is_empty() {
                String::new()
            } else {
                format!(": {}", list.join(", "))
            }
        ));
    }
    if let Some(c) = &w.capabilities {
        let tools: Vec<String> = c
            .tools
            .iter()
            .map(|(name, t)| match t {
                ToolState::Present {
                    version: Some(v), ..
                } => format!("{name} {v}"),
                ToolState::Present { version: None, .. } => name.clone(),
                ToolState::Missing => format!("{name} (missing)"),
            })
            .collect();
        out.push_str(&format!(
            "{pad:<20} software: {} on {}/{}; tools: {}\n",
            c.claudectl_version,
            c.os,
            c.arch,
            if tools.is_empty() {
                "-".to_owned()
            } else {
                tools.join(", ")
            }
        ));
    }
    if !w.listen_addrs.is_empty() {
        out.push_str(&format!(
            "{pad:<20} addresses: {}\n",
            w.listen_addrs.join(", ")
        ));
    }
    if let Some(h) = &w.headroom {
        let opt = |v: Option<u64>, unit: &str| v.map_or("?".to_owned(), |v| format!("{v} {unit}"));
        out.push_str(&format!(
            "{pad:<20} headroom: memory free {}, load {}/core, disk free {}, tasks {} of {}{}\n",
            opt(h.mem_free_mb, "MiB"),
            h.load_per_core
                .map_or("?".to_owned(), |l| format!("{l:.2}")),
            opt(h.disk_free_mb, "MiB"),
            h.running_tasks,
            h.max_tasks.map_or("-".to_owned(), |m| m.to_string()),
            if h.tags.is_empty() {
                String::new()
            } else {
                format!(", tags {}", h.tags.join(","))
            }
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("agent-hub-status-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn table(n: u64) -> RelayStatus {
        RelayStatus {
            v: STATUS_FORMAT_VERSION,
            updated: format!("t{n}"),
            peer_id: "me".into(),
            listen: None,
            peers: vec![PeerStatus {
                id: "p".into(),
                bytes_in: n,
                ..PeerStatus::default()
            }],
        }
    }

    #[test]
    fn a_claudectl_peers_machine_is_shown() {
        let beat = serde_json::json!({
            "sessions": [{"session_id": "s1", "status": "Processing"}, {"pid": 9}],
            "capabilities": {"claudectl_version": "0.92.4", "os": "linux", "arch": "x86_64",
                "tools": {"claude": {"state": "present", "version": "2.1.332"}, "cargo": {"state": "missing"}}},
            "listen_addrs": ["10.0.0.7:9847"],
            "headroom": {"mem_free_mb": 4096, "load_per_core": 0.25, "running_tasks": 1, "max_tasks": 4, "tags": ["gpu"]}
        });
        let (worker, _) = agent_hub_proto::relay::worker::read_beat(&beat, Default::default());
        let mut t = table(1);
        t.peers[0].dialect = Some("claudectl".into());
        t.peers[0].worker = Some(worker);
        let out = render_peers(&t);
        assert!(out.contains("dialect: claudectl"), "{out}");
        assert!(out.contains("sessions: 2: s1 (Processing), pid-9"), "{out}");
        assert!(
            out.contains(
                "software: 0.92.4 on linux/x86_64; tools: cargo (missing), claude 2.1.332"
            ),
            "{out}"
        );
        assert!(out.contains("addresses: 10.0.0.7:9847"), "{out}");
        assert!(out.contains("headroom: memory free 4096 MiB, load 0.25/core, disk free ?, tasks 1 of 4, tags gpu"), "{out}");
        // Round trip through the file's JSON.
        let back: RelayStatus = serde_json::from_str(&serde_json::to_string(&t).unwrap()).unwrap();
        assert_eq!(back, t);
    }

    #[test]
    fn the_writer_thread_writes_the_newest_table_and_skips_the_ones_it_could_not_keep_up_with() {
        let dir = tmp("newest");
        let path = dir.join("relay-status.json");
        let w = StatusWriter::spawn(path.clone()).unwrap();
        for n in 1..=500 {
            w.submit(table(n));
        }
        assert!(w.wait_idle(Instant::now() + Duration::from_secs(10)));
        let back: RelayStatus =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(
            back,
            table(500),
            "the last table submitted is the one on disk"
        );
        assert!(w.written() >= 1 && w.written() <= 500);
        assert!(w.take_errors().is_empty());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn write_errors_come_back_to_the_loop_and_are_bounded() {
        let dir = tmp("errors");
        let w = StatusWriter::spawn(dir.join("no-such-dir").join("s.json")).unwrap();
        for n in 0..20 {
            w.submit(table(n));
            assert!(w.wait_idle(Instant::now() + Duration::from_secs(10)));
        }
        let errors = w.take_errors();
        assert_eq!(errors.len(), MAX_KEPT_ERRORS + 1, "{errors:?}");
        assert!(errors[0].contains("cannot write"), "{errors:?}");
        assert!(errors.last().unwrap().contains("12 more"), "{errors:?}");
        assert!(w.take_errors().is_empty());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn dropping_the_writer_lets_the_last_table_reach_the_file() {
        let dir = tmp("drop");
        let path = dir.join("s.json");
        let w = StatusWriter::spawn(path.clone()).unwrap();
        w.submit(table(7));
        drop(w);
        let back: RelayStatus =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(back, table(7));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
