//! The IO half of install (docs/agents.md): reads each file for `plan`, re-reads it before
//! writing (refusing if it changed meanwhile), keeps the first `.agent-hub.bak` backup of a
//! file, records what it created (`state`), and replaces files through `atomic_file` (through a
//! symlink to its target, the old mode kept). Refuses: deciding what a file should hold
//! (`plan`).

use super::files::{read_file, resolve, write_atomic};
use super::state::{missing_dirs, remove_empty_dirs, save_state, InstallState, RecordError};
use super::{shown, Action, AgentPlan, BACKUP_SUFFIX};
use std::collections::BTreeSet;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

// ----- IO -----

/// The backup path for `path`.
pub fn backup_path(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(BACKUP_SUFFIX);
    PathBuf::from(s)
}

/// Why `apply` stopped. `file` is the path as messages show it (`~/…` under home); files
/// written before the error stay written.
#[derive(Debug)]
pub enum ApplyError {
    /// A file could not be read again before writing.
    Read {
        file: String,
        source: io::Error,
    },
    /// A file is no longer what the plan was made from; nothing was written.
    Changed {
        file: String,
    },
    /// The install record could not be saved.
    Record(RecordError),
    /// The first backup of a file could not be written.
    Backup {
        file: String,
        source: io::Error,
    },
    Write {
        file: String,
        source: io::Error,
    },
    Remove {
        file: String,
        source: io::Error,
    },
}

impl fmt::Display for ApplyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ApplyError::Read { file, source } => write!(f, "{file}: cannot read: {source}"),
            ApplyError::Changed { file } => write!(
                f,
                "{file} changed while it was being edited; nothing was written, run again"
            ),
            ApplyError::Record(e) => write!(f, "{e}"),
            ApplyError::Backup { file, source } => {
                write!(f, "{file}: cannot write the backup: {source}")
            }
            ApplyError::Write { file, source } => write!(f, "{file}: cannot write: {source}"),
            ApplyError::Remove { file, source } => write!(f, "{file}: cannot remove: {source}"),
        }
    }
}

impl std::error::Error for ApplyError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ApplyError::Read { source, .. }
            | ApplyError::Backup { source, .. }
            | ApplyError::Write { source, .. }
            | ApplyError::Remove { source, .. } => Some(source),
            ApplyError::Record(e) => Some(e),
            ApplyError::Changed { .. } => None,
        }
    }
}

impl From<RecordError> for ApplyError {
    fn from(e: RecordError) -> Self {
        ApplyError::Record(e)
    }
}

/// What `apply` did besides the files themselves, for the report.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Applied {
    /// Backups written now.
    pub backups: Vec<String>,
    /// Backups that were already there and were kept: the first one holds the user's file.
    pub kept_backups: Vec<String>,
    /// Folders an install had created, removed by uninstall now that they are empty.
    pub removed_dirs: Vec<String>,
}

/// Writes `plan`'s changes. First re-reads every file and refuses if any differs from what
/// was planned on (an agent rewrote it meanwhile). An install records in `state` the folders
/// and files it is about to create (saved before anything is written), and backs up each
/// existing file it changes, once: a backup already there is the user's original and is
/// never overwritten, and a file an install created has no original to keep. An uninstall
/// removes, after the files, the folders installs created that are empty now, and forgets the
/// agent's record.
pub fn apply(
    plan: &AgentPlan,
    action: &Action,
    home: &Path,
    state: &mut InstallState,
) -> Result<Applied, ApplyError> {
    for c in &plan.changes {
        let now = read_file(&c.path).map_err(|source| ApplyError::Read {
            file: c.shown.clone(),
            source,
        })?;
        if now != c.before {
            return Err(ApplyError::Changed {
                file: c.shown.clone(),
            });
        }
    }
    let mut done = Applied::default();
    if action.is_install() {
        let record = state.agents.entry(plan.agent.clone()).or_default();
        let before = record.clone();
        for c in plan.changes.iter().filter(|c| c.after.is_some()) {
            for d in missing_dirs(&c.path) {
                if let Some(d) = d.to_str().map(str::to_owned) {
                    if !record.created_dirs.contains(&d) {
                        record.created_dirs.push(d);
                    }
                }
            }
            if c.before.is_none() {
                if let Some(f) = c.path.to_str().map(str::to_owned) {
                    if !record.created_files.contains(&f) {
                        record.created_files.push(f);
                    }
                }
            }
        }
        if *record != before {
            save_state(home, state)?;
        }
    }
    let created: BTreeSet<PathBuf> = state
        .agents
        .get(&plan.agent)
        .map(|r| r.created_files.iter().map(PathBuf::from).collect())
        .unwrap_or_default();
    for c in &plan.changes {
        if action.is_install() {
            if let Some(before) = &c.before {
                let b = backup_path(&c.path);
                if std::fs::symlink_metadata(&b).is_ok() {
                    done.kept_backups.push(shown(&b, home));
                } else if !created.contains(&c.path) {
                    write_atomic(&b, before, mode_of(&c.path)).map_err(|source| {
                        ApplyError::Backup {
                            file: shown(&b, home),
                            source,
                        }
                    })?;
                    done.backups.push(shown(&b, home));
                }
            }
        }
        match &c.after {
            Some(text) => {
                let mode = mode_of(&c.path).unwrap_or(0o600);
                write_atomic(&c.path, text, Some(mode)).map_err(|source| ApplyError::Write {
                    file: c.shown.clone(),
                    source,
                })?;
            }
            None => {
                let target = resolve(&c.path);
                std::fs::remove_file(&target)
                    .or_else(|e| {
                        if e.kind() == io::ErrorKind::NotFound {
                            Ok(())
                        } else {
                            Err(e)
                        }
                    })
                    .map_err(|source| ApplyError::Remove {
                        file: c.shown.clone(),
                        source,
                    })?;
                if c.remove_empty_dir {
                    if let Some(dir) = c.path.parent() {
                        // Fails, and is meant to, when the folder holds anything else (a
                        // backup, the user's own files): then it stays.
                        let _ = std::fs::remove_dir(dir);
                    }
                }
            }
        }
    }
    if !action.is_install() {
        if let Some(record) = state.agents.remove(&plan.agent) {
            done.removed_dirs = remove_empty_dirs(&record)
                .iter()
                .map(|d| shown(d, home))
                .collect();
            save_state(home, state)?;
        }
    }
    Ok(done)
}

pub(super) fn mode_of(path: &Path) -> Option<u32> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .ok()
        .map(|m| m.permissions().mode() & 0o7777)
}
