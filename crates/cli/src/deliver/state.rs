//! Files the delivery commands keep under the user's state directory
//! (`$XDG_STATE_HOME/agent-hub/`, else `~/.local/state/agent-hub/`): the per-identity
//! `StopState`, the hook's diagnostic log, and a spool of whole envelopes whose bodies were
//! too large to show in full. Directories are mode 700 and files 600: the spool holds bodies.
//!
//! Owns paths, atomic writes and permissions. Refuses decisions (`policy.rs`) and never
//! writes tokens or bodies to the log.

use super::policy::{StopState, STATE_VERSION};
use sha2::{Digest, Sha256};
use std::ffi::OsString;
use std::fmt;
use std::fs;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// The log is rotated to `hook.log.1` past this size.
pub const MAX_LOG_BYTES: u64 = 1024 * 1024;
/// Spooled envelopes older than this are removed when a new one is written.
pub const SPOOL_KEEP: Duration = Duration::from_secs(7 * 24 * 3600);
/// A state file larger than this is not read (it is a few KiB when healthy).
const MAX_STATE_BYTES: u64 = 1024 * 1024;

/// Where the state directory is: `$XDG_STATE_HOME/agent-hub` when that is an absolute path
/// (the XDG spec says to ignore a relative one), else `$HOME/.local/state/agent-hub`.
pub fn state_dir(xdg_state_home: Option<OsString>, home: Option<OsString>) -> Option<PathBuf> {
    if let Some(x) = xdg_state_home.map(PathBuf::from) {
        if x.is_absolute() {
            return Some(x.join("agent-hub"));
        }
    }
    let home = PathBuf::from(home?);
    home.is_absolute()
        .then(|| home.join(".local").join("state").join("agent-hub"))
}

/// The state directory from this process's environment.
pub fn state_dir_from_env() -> Option<PathBuf> {
    state_dir(std::env::var_os("XDG_STATE_HOME"), std::env::var_os("HOME"))
}

/// The state file of one identity on one hub: `deliver/<name>@<port>.json`. A name is any
/// non-blank string (SPEC §6.1), so unusual characters become `_` and a digest of the real
/// name keeps two such names apart.
pub fn state_file(dir: &Path, name: &str, port: u16) -> PathBuf {
    let plain = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c))
        && !name.starts_with('.');
    let stem = if plain {
        name.to_owned()
    } else {
        let safe: String = name
            .chars()
            .take(32)
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect();
        format!("{safe}-{}", short_digest(name))
    };
    dir.join("deliver").join(format!("{stem}@{port}.json"))
}

fn short_digest(s: &str) -> String {
    let d = Sha256::digest(s.as_bytes());
    d.iter().take(8).map(|b| format!("{b:02x}")).collect()
}

/// Why the state could not be read. The caller starts from an empty state for `Corrupt` and
/// `OtherVersion` (the file holds hints only) and goes on without state for `Io`.
#[derive(Debug)]
pub enum StateError {
    Io(String),
    Corrupt(String),
    OtherVersion(u32),
}

impl fmt::Display for StateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StateError::Io(e) => write!(f, "state file unreadable: {e}"),
            StateError::Corrupt(e) => write!(f, "state file is not valid: {e}"),
            StateError::OtherVersion(v) => {
                write!(
                    f,
                    "state file has version {v}, this agent-hub writes {STATE_VERSION}"
                )
            }
        }
    }
}

impl std::error::Error for StateError {}

/// Reads a state file; a missing file is an empty state.
pub fn load_state(path: &Path) -> Result<StopState, StateError> {
    let meta = match fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(StopState::default()),
        Err(e) => return Err(StateError::Io(e.to_string())),
    };
    if meta.len() > MAX_STATE_BYTES {
        return Err(StateError::Corrupt(format!("{} bytes", meta.len())));
    }
    let text = fs::read_to_string(path).map_err(|e| StateError::Io(e.to_string()))?;
    let state: StopState =
        serde_json::from_str(&text).map_err(|e| StateError::Corrupt(e.to_string()))?;
    if state.version != STATE_VERSION {
        return Err(StateError::OtherVersion(state.version));
    }
    Ok(state)
}

/// Writes a state file atomically (temp file, then rename), mode 600. Two runs for the same
/// identity at once may lose one's update, never corrupt the file.
pub fn save_state(path: &Path, state: &StopState) -> std::io::Result<()> {
    let dir = path
        .parent()
        .ok_or_else(|| std::io::Error::other("state path has no parent"))?;
    ensure_private_dir(dir)?;
    let text = serde_json::to_string(state).map_err(std::io::Error::other)?;
    agent_hub_host::atomic_file::write_atomic(path, text.as_bytes(), 0o600)
}

/// Creates `dir` (and parents) and makes the last component mode 700.
pub fn ensure_private_dir(dir: &Path) -> std::io::Result<()> {
    fs::create_dir_all(dir)?;
    fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
}

fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    // The mode above applies only on creation; a file left from before may be wider.
    f.set_permissions(fs::Permissions::from_mode(0o600))?;
    f.write_all(bytes)?;
    f.sync_all()
}

/// Saves a whole envelope whose body is shown cut, before the cut text is handed over, so the
/// model can read the rest. The file name is a digest of the id (ids are sender-chosen
/// strings). Old spool files are removed on the way.
pub fn spool_envelope(
    dir: &Path,
    id: &str,
    text: &str,
    now: SystemTime,
) -> std::io::Result<PathBuf> {
    let spool = dir.join("mail");
    ensure_private_dir(&spool)?;
    prune_spool(&spool, now);
    let path = spool.join(format!("{}.json", short_digest(id)));
    let mut bytes = text.as_bytes().to_vec();
    bytes.push(b'\n');
    write_private(&path, &bytes)?;
    Ok(path)
}

fn prune_spool(spool: &Path, now: SystemTime) {
    let Ok(entries) = fs::read_dir(spool) else {
        return;
    };
    for e in entries.flatten() {
        let old = e
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|m| now.duration_since(m).ok())
            .is_some_and(|age| age > SPOOL_KEEP);
        if old {
            let _ = fs::remove_file(e.path());
        }
    }
}

/// The hook's diagnostics. A hook's stderr is not documented as harmless for every agent
/// (a Claude Code exit-2 hook feeds stderr to the model, others show it to the user), so the
/// hook never writes there; it appends here. Best effort: a log that cannot be written is
/// silently skipped.
#[derive(Debug, Clone)]
pub struct HookLog {
    path: Option<PathBuf>,
}

impl HookLog {
    pub fn new(dir: Option<&Path>) -> HookLog {
        HookLog {
            path: dir.map(|d| d.join("hook.log")),
        }
    }

    /// A log that writes nothing.
    pub fn none() -> HookLog {
        HookLog { path: None }
    }

    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// Appends one line: UTC time, pid, message (control characters escaped).
    pub fn line(&self, msg: &str) {
        let Some(path) = &self.path else { return };
        let _ = self.append(path, msg);
    }

    fn append(&self, path: &Path, msg: &str) -> std::io::Result<()> {
        if let Some(dir) = path.parent() {
            ensure_private_dir(dir)?;
        }
        if fs::metadata(path).is_ok_and(|m| m.len() > MAX_LOG_BYTES) {
            let _ = fs::rename(path, path.with_extension("log.1"));
        }
        let mut f = fs::OpenOptions::new()
            .append(true)
            .create(true)
            .mode(0o600)
            .open(path)?;
        let ts = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        // One record per line: control characters (a newline in a name) are escaped.
        let clean: String = msg
            .chars()
            .flat_map(|c| {
                let escaped: Vec<char> = if c.is_control() {
                    c.escape_default().collect()
                } else {
                    vec![c]
                };
                escaped
            })
            .collect();
        writeln!(f, "{ts} [{}] {clean}", std::process::id())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_dir_prefers_an_absolute_xdg_state_home() {
        assert_eq!(
            state_dir(Some("/x/state".into()), Some("/home/u".into())),
            Some(PathBuf::from("/x/state/agent-hub"))
        );
        assert_eq!(
            state_dir(Some("relative".into()), Some("/home/u".into())),
            Some(PathBuf::from("/home/u/.local/state/agent-hub"))
        );
        assert_eq!(
            state_dir(None, Some("/home/u".into())),
            Some(PathBuf::from("/home/u/.local/state/agent-hub"))
        );
        assert_eq!(state_dir(None, None), None);
        assert_eq!(state_dir(None, Some("rel".into())), None);
    }

    #[test]
    fn state_file_names() {
        let d = Path::new("/s");
        assert_eq!(
            state_file(d, "beta", 7),
            PathBuf::from("/s/deliver/beta@7.json")
        );
        let odd = state_file(d, "../x y", 7);
        let name = odd.file_name().unwrap().to_str().unwrap();
        assert!(
            name.starts_with("___x_y-") && name.ends_with("@7.json"),
            "{name}"
        );
        assert_eq!(odd.parent().unwrap(), Path::new("/s/deliver"));
        assert_ne!(state_file(d, "a b", 7), state_file(d, "a/b", 7));
    }
}
