//! Durable queues (SPEC §12): what the hub persists, as a list of operations the core emits
//! and the loop applies in one transaction per event-loop iteration (group commit).
//!
//! Owns the `Store` seam and its two implementations: `Memory` (nothing survives a restart,
//! the 004 behaviour) and `sqlite::Sqlite` (WAL), plus `flush`, the thread that flushes
//! SQLite's WAL to disk and checkpoints it off the event loop, `rows`, the checks on what
//! is read back at startup, and `load`, which reads the rows on a thread of their own.
//! Refuses routing decisions: the store records what the core decided, in the order it
//! decided it.

pub mod flush;
mod load;
pub mod rows;
pub mod sqlite;
mod sqlite_wal;

#[cfg(test)]
mod tests;

pub use agent_hub_proto::tasks::{StoredRequest, StoredTask, TaskStoreOp};
// What the core asks the store to keep, and the rows it reads back, are the core's
// vocabulary (`hub::durable`); this module carries them out.
pub use agent_hub_proto::hub::durable::{
    Loaded, QueuedRef, RowRef, RowSink, StoreOp, StoredEnvelope, StoredId,
};
use std::fmt;

#[derive(Debug)]
pub enum StoreError {
    /// The database could not be opened or is not ours.
    Open(String),
    /// The on-disk schema is newer than this binary, or unknown.
    Schema(String),
    /// A write failed (disk full, I/O error); nothing of the transaction was kept.
    Write(String),
    /// A row read back at startup is not one this hub could have written (`rows`).
    Corrupt(rows::RowError),
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::Open(e) => write!(f, "cannot open the queue store: {e}"),
            StoreError::Schema(e) => write!(f, "queue store schema: {e}"),
            StoreError::Write(e) => write!(f, "queue store write failed: {e}"),
            StoreError::Corrupt(e) => write!(
                f,
                "the queue store holds a row this hub cannot have written: {e}; restore the store from a backup, or move it away to start with empty queues"
            ),
        }
    }
}

impl std::error::Error for StoreError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            StoreError::Corrupt(e) => Some(e),
            _ => None,
        }
    }
}

/// A SQLite step failed while opening or loading the store: its error as `StoreError::Open`.
/// Here, beside the error, because the opener, the loader and the WAL hook all map with it.
pub(crate) fn open_err(e: rusqlite::Error) -> StoreError {
    StoreError::Open(e.to_string())
}

/// Durable state behind the hub. `apply` writes a batch atomically and durably, or nothing.
pub trait Store {
    /// Loads what survived the last run.
    fn load(&mut self) -> Result<Loaded, StoreError>;
    /// `load`, a row at a time into `sink` in acceptance order, without the owned lists:
    /// startup's path (docs/performance.md "Restart"). The sink, not the
    /// store, refuses two rows of one sender and id.
    fn load_rows(&mut self, sink: &mut dyn RowSink) -> Result<(), StoreError>;
    /// Loads the delegated tasks that survived the last run, in acceptance order
    /// (docs/delegation.md "Durability"). A store that keeps nothing has none.
    fn load_tasks(&mut self) -> Result<Vec<StoredTask>, StoreError> {
        Ok(Vec::new())
    }
    /// Loads the requests that were held open when the last run stopped (issue 37 design
    /// §4.6): the restart closes each by the fallback. A store that keeps nothing has none.
    fn load_requests(&mut self) -> Result<Vec<StoredRequest>, StoreError> {
        Ok(Vec::new())
    }
    /// Begins a transaction, applies `ops` in order. Nothing is durable until `commit`.
    fn stage(&mut self, ops: &[StoreOp]) -> Result<(), StoreError>;
    /// Makes the staged transaction durable.
    fn commit(&mut self) -> Result<(), StoreError>;
    /// Abandons the staged transaction.
    fn rollback(&mut self);
    /// True when operations matter (false for `Memory`, so the core can skip building them).
    fn is_durable(&self) -> bool;
    /// The file whose flush to disk makes a commit survive a machine crash, when the policy
    /// asks for that (`flush::Flusher` does it off the event loop); None when `commit` is all.
    fn flush_path(&self) -> Option<std::path::PathBuf> {
        None
    }
    /// The write-ahead log's length in frames after the last commit, for the checkpoint
    /// policy (`flush::CheckpointPolicy`); None when the store has no WAL.
    fn wal_frames(&self) -> Option<u32> {
        None
    }
    /// The work for the background thread (flushes, checkpoints), handed over once; None when
    /// the store needs no thread.
    fn take_background(&mut self) -> Option<flush::Background> {
        None
    }
}

/// Nothing persists: the 004 behaviour.
#[derive(Debug, Default)]
pub struct Memory;

impl Store for Memory {
    fn load(&mut self) -> Result<Loaded, StoreError> {
        Ok(Loaded::default())
    }
    fn load_rows(&mut self, _sink: &mut dyn RowSink) -> Result<(), StoreError> {
        Ok(())
    }
    fn stage(&mut self, _ops: &[StoreOp]) -> Result<(), StoreError> {
        Ok(())
    }
    fn commit(&mut self) -> Result<(), StoreError> {
        Ok(())
    }
    fn rollback(&mut self) {}
    fn is_durable(&self) -> bool {
        false
    }
}
