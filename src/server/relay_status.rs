//! The relay's peer table on disk: the running hub rewrites it (atomically) when a peer's
//! state changes or a heartbeat arrives, and `agent-hub-server relay peers` prints it.
//!
//! Owns the file's format (JSON, `"v": 1`). Never holds a key or a proof.

use crate::config::Config;
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Format version of the status file.
pub const STATUS_FORMAT_VERSION: u32 = 1;

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct PeerStatus {
    pub id: String,
    /// `up`, `connecting`, `handshaking`, `backoff`, `down` (accept-only and not connected).
    pub state: String,
    /// `dialled` or `accepted` for the current link.
    pub direction: Option<String>,
    pub proto: Option<u32>,
    pub features: Vec<String>,
    pub peer_version: Option<String>,
    /// RFC 3339 time of the last heartbeat received.
    pub last_heartbeat: Option<String>,
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub reconnects: u64,
    /// The peer's hub directory from its last heartbeat: agent names.
    pub agents: Vec<String>,
    pub last_error: Option<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct RelayStatus {
    pub v: u32,
    pub updated: String,
    pub peer_id: String,
    pub listen: Option<String>,
    pub peers: Vec<PeerStatus>,
}

/// Writes the status file atomically (temp file + rename), mode 600.
pub fn write_status(path: &Path, status: &RelayStatus) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    let text = serde_json::to_string_pretty(status).map_err(std::io::Error::other)?;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(text.as_bytes())?;
    f.write_all(b"\n")?;
    drop(f);
    std::fs::rename(&tmp, path)
}

/// `agent-hub-server relay peers --config PATH`: reads the status file the hub keeps.
pub fn print_peers(config_path: &Path) -> Result<(), String> {
    let config = Config::load(config_path).map_err(|e| e.to_string())?;
    let relay = config
        .relay
        .ok_or_else(|| format!("{} has no [relay] table", config_path.display()))?;
    let text = std::fs::read_to_string(&relay.status_path).map_err(|e| {
        format!(
            "cannot read {}: {e} (is the hub running with this config?)",
            relay.status_path.display()
        )
    })?;
    let status: RelayStatus = serde_json::from_str(&text).map_err(|e| {
        format!(
            "{} is not a relay status file: {e}",
            relay.status_path.display()
        )
    })?;
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
        if let Some(e) = &p.last_error {
            out.push_str(&format!("{:<20} last error: {e}\n", ""));
        }
    }
    print!("{out}");
    Ok(())
}
