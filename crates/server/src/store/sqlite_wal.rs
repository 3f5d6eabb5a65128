//! The SQLite store's locks and its second connection: the lock file that keeps a second hub
//! out, the WAL hook that tells the loop how long the WAL is after each commit, and the
//! connection the flush thread checkpoints on (`flush` module doc; docs/operations.md, "The
//! WAL and its checkpoints").
//!
//! Owns those three. Refuses the store's SQL (`sqlite`) and the checkpoint policy (`flush`).

use super::flush::{BackgroundError, Checkpoint, Checkpointed};
use super::open_err;
use super::StoreError;
use rusqlite::{ffi, Connection, OpenFlags};
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

/// The lock file beside the database: the same name with `.lock` appended.
fn lock_path(db: &Path) -> PathBuf {
    let mut name = db.as_os_str().to_owned();
    name.push(".lock");
    PathBuf::from(name)
}

/// Takes an exclusive `flock` on the store's lock file, held for as long as the file stays
/// open. SQLite's own locks cannot say "one hub": the checkpoints' second connection needs
/// SQLite's shared (non-exclusive) locking mode. A separate file, because closing any
/// descriptor of the database itself would drop SQLite's POSIX locks on it.
pub(super) fn lock_store(db: &Path) -> Result<File, StoreError> {
    let path = lock_path(db);
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(&path)
        .map_err(|e| StoreError::Open(format!("{}: {e}", path.display())))?;
    // SAFETY: flock on a descriptor this function owns, open for the call's duration.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc != 0 {
        let e = std::io::Error::last_os_error();
        return Err(StoreError::Open(
            if e.kind() == std::io::ErrorKind::WouldBlock {
                format!(
                    "{} is locked (is another agent-hub-server using this store?)",
                    path.display()
                )
            } else {
                format!("cannot lock {}: {e}", path.display())
            },
        ));
    }
    Ok(file)
}

/// SQLite's WAL hook on the loop's connection: after each commit, the WAL's length in frames,
/// for the checkpoint policy (`flush::CheckpointPolicy`).
///
/// # Safety
/// `arg` is the `AtomicU32` of `Sqlite::wal_frames`, which outlives the hook: `Sqlite`
/// removes the hook in `drop` before its fields go.
pub(super) unsafe extern "C" fn on_wal_commit(
    arg: *mut std::ffi::c_void,
    _db: *mut ffi::sqlite3,
    _name: *const std::ffi::c_char,
    frames: std::ffi::c_int,
) -> std::ffi::c_int {
    let counter = &*(arg as *const AtomicU32);
    counter.store(frames.max(0) as u32, Ordering::Relaxed);
    ffi::SQLITE_OK
}

/// Checkpoints on a connection of their own (the flush thread's).
pub struct SqliteCheckpoint {
    conn: Connection,
}

impl SqliteCheckpoint {
    pub(super) fn open(path: &Path) -> Result<SqliteCheckpoint, StoreError> {
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(open_err)?;
        // NORMAL, not OFF: a checkpoint flushes the WAL before it copies and the database
        // after, which is what lets SQLite reuse the WAL safely.
        conn.pragma_update(None, "synchronous", "NORMAL")
            .map_err(open_err)?;
        conn.pragma_update(None, "wal_autocheckpoint", 0)
            .map_err(open_err)?;
        Ok(SqliteCheckpoint { conn })
    }
}

impl Checkpoint for SqliteCheckpoint {
    fn checkpoint(&mut self) -> Result<Checkpointed, BackgroundError> {
        // PASSIVE never waits for the loop's writes and never makes the loop wait.
        let (busy, log, copied): (i64, i64, i64) = self
            .conn
            .query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            })
            .map_err(BackgroundError::Checkpoint)?;
        if busy != 0 {
            // Another connection held the checkpoint lock for a moment (SQLite's own
            // bookkeeping): nothing was copied; the policy asks again after a later commit.
            return Ok(Checkpointed {
                wal_frames: 0,
                copied: 0,
                busy: true,
            });
        }
        if log < 0 {
            return Err(BackgroundError::NotWal);
        }
        let clamp = |v: i64| v.clamp(0, i64::from(u32::MAX)) as u32;
        Ok(Checkpointed {
            wal_frames: clamp(log),
            copied: clamp(copied),
            busy: false,
        })
    }
}
