//! The IO half of install (docs/agents.md): reads each file for `plan`, re-reads it before
//! writing (refusing if it changed meanwhile), keeps a `.agent-hub.bak` backup, and replaces
//! files through `atomic_file` (through a symlink to its target, the old mode kept). Refuses:
//! deciding what a file should hold (`plan`).

use super::*;

// ----- IO -----

/// Reads a file for `plan`: `Ok(None)` when it does not exist.
pub fn read_file(path: &Path) -> io::Result<Option<String>> {
    match std::fs::read(path) {
        Ok(bytes) => String::from_utf8(bytes)
            .map(Some)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "not UTF-8 text")),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// The backup path for `path`.
pub fn backup_path(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(BACKUP_SUFFIX);
    PathBuf::from(s)
}

/// Writes `plan`'s changes. First re-reads every file and refuses if any differs from what
/// was planned on (an agent rewrote it meanwhile); then, for an install, keeps a backup of
/// each existing file; then writes. Returns the backups written.
pub fn apply(plan: &AgentPlan, action: &Action, home: &Path) -> Result<Vec<String>, String> {
    for c in &plan.changes {
        let now = read_file(&c.path).map_err(|e| format!("{}: cannot read: {e}", c.shown))?;
        if now != c.before {
            return Err(format!(
                "{} changed while it was being edited; nothing was written, run again",
                c.shown
            ));
        }
    }
    let mut backups = Vec::new();
    for c in &plan.changes {
        if action.is_install() {
            if let Some(before) = &c.before {
                let b = backup_path(&c.path);
                write_atomic(&b, before, mode_of(&c.path))
                    .map_err(|e| format!("{}: cannot write the backup: {e}", shown(&b, home)))?;
                backups.push(shown(&b, home));
            }
        }
        match &c.after {
            Some(text) => {
                let mode = mode_of(&c.path).unwrap_or(0o600);
                write_atomic(&c.path, text, Some(mode))
                    .map_err(|e| format!("{}: cannot write: {e}", c.shown))?;
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
                    .map_err(|e| format!("{}: cannot remove: {e}", c.shown))?;
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
    Ok(backups)
}

pub(super) fn mode_of(path: &Path) -> Option<u32> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .ok()
        .map(|m| m.permissions().mode() & 0o7777)
}

/// A symlinked config (dotfile managers do this) is written through to its target, so the
/// link survives.
pub(super) fn resolve(path: &Path) -> PathBuf {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => {
            std::fs::canonicalize(path).unwrap_or_else(|_| path.to_owned())
        }
        _ => path.to_owned(),
    }
}

/// Replaces a config whole through `atomic_file` (fsync of the file and its folder): through
/// a symlink to its target, creating its folder, keeping `mode` (new files are 600).
pub(super) fn write_atomic(path: &Path, text: &str, mode: Option<u32>) -> io::Result<()> {
    let target = resolve(path);
    if let Some(dir) = target.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    crate::atomic_file::write_atomic(&target, text.as_bytes(), mode.unwrap_or(0o600))
}
