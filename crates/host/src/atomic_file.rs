//! The one way this crate replaces a file whole: write a temporary file beside it, fsync it,
//! rename it over the target, fsync the folder (PLAN.md §8 "Files and secrets"). Used for
//! agent configs (`agents::install`), delivery state (`deliver::state`) and the relay status
//! file (`relay_status`).
//!
//! A reader sees the old file or the new one, never a part. Owns the temporary name (hidden,
//! beside the target, with the process id so two processes never share one), its mode, and
//! removing it when anything fails. Refuses: following symlinks and creating folders (callers
//! decide both: `agents::install` writes through a symlink to its target, `deliver::state`
//! makes its folder private first).

use std::fs::{self, File, OpenOptions, Permissions};
use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Replaces `path` with `bytes`, leaving the file at `mode` (e.g. `0o600`). The file is
/// created 0600 and only then given `mode`, so it is never readable by others while it is
/// written, and a temporary file left wider by an earlier crash is narrowed. On error the
/// target is unchanged and the temporary file is gone.
pub fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        Some(_) => Path::new("."),
        None => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} has no parent directory", path.display()),
            ))
        }
    };
    let tmp = tmp_path(dir, path);
    let result = (|| {
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        // The mode above applies only on creation; a file left from before may be wider.
        f.set_permissions(Permissions::from_mode(mode))?;
        f.write_all(bytes)?;
        f.sync_all()?;
        drop(f);
        fs::rename(&tmp, path)?;
        // Best effort: the rename is durable once the folder is synced, and a folder that
        // cannot be opened for reading still took the rename.
        if let Ok(d) = File::open(dir) {
            let _ = d.sync_all();
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// `.<name>.<pid>.agent-hub.tmp` in `dir`: hidden, recognisably ours, one per process.
fn tmp_path(dir: &Path, path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    dir.join(format!(".{name}.{}.agent-hub.tmp", std::process::id()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "agent-hub-atomic-{tag}-{}-{}",
            std::process::id(),
            uuid::Uuid::new_v4()
        ));
        fs::create_dir_all(&d).unwrap();
        d
    }

    fn leftovers(dir: &Path) -> Vec<String> {
        fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".tmp"))
            .collect()
    }

    #[test]
    fn replaces_the_file_whole_with_its_mode_and_leaves_no_temp() {
        let dir = temp_dir("replace");
        let p = dir.join("state.json");
        fs::write(&p, "old").unwrap();
        fs::set_permissions(&p, Permissions::from_mode(0o644)).unwrap();
        write_atomic(&p, b"new", 0o600).unwrap();
        assert_eq!(fs::read_to_string(&p).unwrap(), "new");
        let mode = fs::metadata(&p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        write_atomic(&p, b"kept wide", 0o640).unwrap();
        let mode = fs::metadata(&p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o640);
        assert!(leftovers(&dir).is_empty());
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_failed_rename_leaves_the_target_and_no_temp() {
        let dir = temp_dir("fail");
        // A directory in the target's place: the rename of a file over it fails.
        let p = dir.join("taken");
        fs::create_dir(&p).unwrap();
        fs::write(p.join("inside"), "x").unwrap();
        assert!(write_atomic(&p, b"new", 0o600).is_err());
        assert!(p.is_dir());
        assert!(leftovers(&dir).is_empty());
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_narrow_temp_left_by_a_crash_is_reused_safely() {
        let dir = temp_dir("stale");
        let p = dir.join("f");
        let stale = tmp_path(&dir, &p);
        fs::write(&stale, "garbage that is longer than the new text").unwrap();
        fs::set_permissions(&stale, Permissions::from_mode(0o666)).unwrap();
        write_atomic(&p, b"ok", 0o600).unwrap();
        assert_eq!(fs::read_to_string(&p).unwrap(), "ok");
        assert!(!stale.exists());
        fs::remove_dir_all(&dir).unwrap();
    }
}
