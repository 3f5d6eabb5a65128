//! The install record, `~/.agent-hub/installed.json` (issue 12, docs/agents.md "Backups and
//! the install record"): per agent, the folders and files an install created, because they did
//! not exist before it.
//!
//! Why a record: a folder can only be told apart from one the user had by remembering that
//! install made it, and uninstall removes such a folder once it is empty again; a file install
//! created has no original of the user's, so it gets no `.agent-hub.bak`. Uninstall forgets
//! the agent's record: what is left after it belongs to the user. Owns the format, reading and
//! writing it (atomically, mode 600). A record that cannot be read is reported and treated as
//! empty — the only cost is a folder that stays or a backup that is made.

use super::files::{read_file, resolve, write_atomic};
use super::shown;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

/// Where the record lives, under HOME.
pub const STATE_FILE: &str = ".agent-hub/installed.json";
const STATE_VERSION: u32 = 1;

/// What installs created, per agent (manifest name).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstallState {
    pub version: u32,
    #[serde(default)]
    pub agents: BTreeMap<String, AgentRecord>,
}

impl Default for InstallState {
    fn default() -> Self {
        InstallState {
            version: STATE_VERSION,
            agents: BTreeMap::new(),
        }
    }
}

/// One agent's record. Paths are absolute.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentRecord {
    /// Folders install created, parents before children.
    #[serde(default)]
    pub created_dirs: Vec<String>,
    /// Files install created.
    #[serde(default)]
    pub created_files: Vec<String>,
}

/// Why the install record cannot be read or written. `file` is the record's path as messages
/// show it (`~/…`).
#[derive(Debug)]
pub enum RecordError {
    Read {
        file: String,
        source: io::Error,
    },
    /// Not JSON of an install record.
    NotRecord {
        file: String,
        source: serde_json::Error,
    },
    /// A record of another format version.
    Version {
        file: String,
        version: u32,
    },
    Remove {
        file: String,
        source: io::Error,
    },
    Write {
        file: String,
        source: io::Error,
    },
}

impl fmt::Display for RecordError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RecordError::Read { file, source } => write!(f, "{file}: cannot read: {source}"),
            RecordError::NotRecord { file, source } => {
                write!(f, "{file}: not an install record: {source}")
            }
            RecordError::Version { file, version } => write!(
                f,
                "{file}: install record version {version} is not {STATE_VERSION}"
            ),
            RecordError::Remove { file, source } => write!(f, "{file}: cannot remove: {source}"),
            RecordError::Write { file, source } => write!(f, "{file}: cannot write: {source}"),
        }
    }
}

impl std::error::Error for RecordError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            RecordError::Read { source, .. }
            | RecordError::Remove { source, .. }
            | RecordError::Write { source, .. } => Some(source),
            RecordError::NotRecord { source, .. } => Some(source),
            RecordError::Version { .. } => None,
        }
    }
}

pub fn state_path(home: &Path) -> PathBuf {
    home.join(STATE_FILE)
}

/// Reads the record: an empty one when the file does not exist; an error (to report) when it
/// is not a record this version understands.
pub fn load_state(home: &Path) -> Result<InstallState, RecordError> {
    let path = state_path(home);
    let file = shown(&path, home);
    let text = match read_file(&path) {
        Ok(text) => text,
        Err(source) => return Err(RecordError::Read { file, source }),
    };
    match text {
        None => Ok(InstallState::default()),
        Some(text) => {
            let s: InstallState = match serde_json::from_str(&text) {
                Ok(s) => s,
                Err(source) => return Err(RecordError::NotRecord { file, source }),
            };
            if s.version != STATE_VERSION {
                return Err(RecordError::Version {
                    file,
                    version: s.version,
                });
            }
            Ok(s)
        }
    }
}

/// Writes the record; removes the file when no agent is left in it.
pub fn save_state(home: &Path, state: &InstallState) -> Result<(), RecordError> {
    let path = state_path(home);
    let file = shown(&path, home);
    if state.agents.is_empty() {
        return match std::fs::remove_file(&path) {
            Err(source) if source.kind() != io::ErrorKind::NotFound => {
                Err(RecordError::Remove { file, source })
            }
            _ => Ok(()),
        };
    }
    // Serialising plain strings and maps cannot fail.
    let text = serde_json::to_string_pretty(state).unwrap_or_default() + "\n";
    write_atomic(&path, &text, Some(0o600)).map_err(|source| RecordError::Write { file, source })
}

/// The folders writing `path` would create, top down (none when its folder exists).
pub(super) fn missing_dirs(path: &Path) -> Vec<PathBuf> {
    let target = resolve(path);
    let mut out: Vec<PathBuf> = target
        .ancestors()
        .skip(1)
        .take_while(|d| !d.as_os_str().is_empty() && std::fs::symlink_metadata(d).is_err())
        .map(Path::to_path_buf)
        .collect();
    out.reverse();
    out
}

/// Removes the recorded folders that are empty, deepest first; returns those removed. A
/// folder holding anything (the user's files, a backup) stays: `remove_dir` refuses it.
pub(super) fn remove_empty_dirs(record: &AgentRecord) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = record.created_dirs.iter().map(PathBuf::from).collect();
    dirs.sort_by_key(|d| std::cmp::Reverse(d.components().count()));
    dirs.into_iter()
        .filter(|d| {
            std::fs::symlink_metadata(d).is_ok_and(|m| m.is_dir()) && std::fs::remove_dir(d).is_ok()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(tag: &str) -> PathBuf {
        let p = std::env::temp_dir().join(format!("agent-hub-state-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        p
    }

    #[test]
    fn a_record_round_trips_and_an_empty_one_removes_the_file() {
        let home = temp("rt");
        assert_eq!(load_state(&home).unwrap(), InstallState::default());
        let mut s = InstallState::default();
        s.agents.insert(
            "codex".into(),
            AgentRecord {
                created_dirs: vec![home.join(".codex").display().to_string()],
                created_files: vec![],
            },
        );
        save_state(&home, &s).unwrap();
        assert_eq!(load_state(&home).unwrap(), s);
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(state_path(&home))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        s.agents.clear();
        save_state(&home, &s).unwrap();
        assert!(!state_path(&home).exists());
        std::fs::write(state_path(&home), "{nope").unwrap();
        assert!(load_state(&home)
            .unwrap_err()
            .to_string()
            .contains("not an install record"));
        std::fs::write(state_path(&home), "{\"version\": 9}").unwrap();
        assert!(load_state(&home)
            .unwrap_err()
            .to_string()
            .contains("version 9"));
        let _ = std::fs::remove_dir_all(&home);
    }

    #[test]
    fn only_empty_recorded_folders_are_removed_deepest_first() {
        let home = temp("dirs");
        let a = home.join("a");
        let b = a.join("b");
        let keep = home.join("keep");
        std::fs::create_dir_all(&b).unwrap();
        std::fs::create_dir_all(&keep).unwrap();
        std::fs::write(keep.join("mine"), "x").unwrap();
        assert_eq!(
            missing_dirs(&b.join("c/d/f.json")),
            [b.join("c"), b.join("c/d")]
        );
        let rec = AgentRecord {
            created_dirs: [&a, &b, &keep]
                .iter()
                .map(|p| p.display().to_string())
                .collect(),
            created_files: vec![],
        };
        assert_eq!(remove_empty_dirs(&rec), [b.clone(), a.clone()]);
        assert!(keep.join("mine").exists(), "a folder holding a file stays");
        let _ = std::fs::remove_dir_all(&home);
    }
}
