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
use std::collections::HashSet;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock};

/// The lock file beside the database: the same name with `.lock` appended.
fn lock_path(db: &Path) -> PathBuf {
    let mut name = db.as_os_str().to_owned();
    name.push(".lock");
    PathBuf::from(name)
}

/// The store's lock: the lock file, open, holding a POSIX write lock (`fcntl(F_SETLK)`) over
/// the whole file, and this process's claim on its path. Dropping it closes the file, which
/// releases the lock, and gives up the claim.
#[derive(Debug)]
pub(super) struct StoreLock {
    file: Option<File>,
    path: PathBuf,
}

impl Drop for StoreLock {
    fn drop(&mut self) {
        // The file first (which releases the lock), then the claim: the other order would let
        // another open in this process take the lock and then lose it to this close.
        drop(self.file.take());
        claimed()
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.path);
    }
}

/// The lock files this process holds. POSIX locks belong to the process, so a second open in
/// the same process would be granted the lock and, worse, closing its descriptor would drop
/// the first one's: the claim is checked before the file is even opened.
fn claimed() -> &'static Mutex<HashSet<PathBuf>> {
    static CLAIMED: OnceLock<Mutex<HashSet<PathBuf>>> = OnceLock::new();
    CLAIMED.get_or_init(|| Mutex::new(HashSet::new()))
}

fn locked(path: &Path) -> StoreError {
    StoreError::Open(format!(
        "{} is locked (is another agent-hub-server using this store?)",
        path.display()
    ))
}

/// Takes the store's lock (one hub per store). A POSIX record lock and not `flock(2)`: a
/// `flock` belongs to the open file description, which a child forked to start an agent
/// shares until its `exec` closes it, so a hub killed at that moment left its store locked
/// for a restart that came at once (seen as a flaky restart test, 3 in 25). A POSIX lock
/// belongs to the process: a fork does not inherit it and the kernel drops it when the hub
/// dies. A separate file, because closing any descriptor of the database itself would drop
/// SQLite's own POSIX locks on it.
pub(super) fn lock_store(db: &Path) -> Result<StoreLock, StoreError> {
    let path = lock_path(db);
    // The claim is keyed by the canonical folder (the file may not exist yet), so two
    // spellings of one store are one claim.
    let key = match (path.parent(), path.file_name()) {
        (Some(dir), Some(name)) => std::fs::canonicalize(if dir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            dir
        })
        .map(|d| d.join(name))
        .unwrap_or_else(|_| path.clone()),
        _ => path.clone(),
    };
    if !claimed()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(key.clone())
    {
        return Err(locked(&path));
    }
    // From here every early return gives the claim back through the guard's drop.
    let opened = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(&path);
    let file = match opened {
        Ok(f) => f,
        Err(e) => {
            claimed()
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&key);
            return Err(StoreError::Open(format!("{}: {e}", path.display())));
        }
    };
    let fd = file.as_raw_fd();
    let guard = StoreLock {
        file: Some(file),
        path: key,
    };
    // SAFETY: an all-zero `flock` struct is valid; the fields that matter are set below.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = libc::F_WRLCK as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    fl.l_start = 0;
    fl.l_len = 0; // the whole file, however long
                  // SAFETY: fcntl on a descriptor the guard owns, with a valid `flock` for the call.
    let rc = unsafe { libc::fcntl(fd, libc::F_SETLK, &fl) };
    if rc != 0 {
        let e = std::io::Error::last_os_error();
        return Err(match e.raw_os_error() {
            Some(libc::EACCES) | Some(libc::EAGAIN) => locked(&path),
            _ => StoreError::Open(format!("cannot lock {}: {e}", path.display())),
        });
    }
    Ok(guard)
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
