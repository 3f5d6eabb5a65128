//! The commit executor (part of the IO shell, `crates/server/src/event_loop/mod.rs`): carries
//! out the core's `Output::Commit` batches against the store and the audit log in the order
//! PLAN.md "How a send becomes durable" gives, and hands the flush thread's reports back to the
//! core. It keeps no pending operation and no rule of its own: every result goes to
//! `Hub::handle_committed` or `Hub::handle_synced`, and the core says what follows.
//!
//! `Commits` owns the queue store and its flush thread; the audit log it writes is the loop's
//! `Records`, and the core it reports to the loop's `Hub`, both handed in per call.

use super::records::Records;
use super::{read_clock, Server};
use crate::store::flush::{FlushResult, Flusher};
use crate::store::{Store, StoreError};
use agent_hub_proto::hub::durable::StoreFailure;
use agent_hub_proto::hub::Hub;
use agent_hub_proto::kernel::now::Now;
use std::io;

/// Why a batch could not be made durable: which write failed, with its error.
#[derive(Debug)]
pub enum CommitError {
    /// The queue store's transaction (its staging or its commit).
    Store(StoreError),
    /// The audit batch's append.
    Audit(io::Error),
}

impl std::fmt::Display for CommitError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CommitError::Store(e) => write!(f, "the queue store could not be written ({e})"),
            CommitError::Audit(e) => write!(f, "the audit log could not be written ({e})"),
        }
    }
}

impl std::error::Error for CommitError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            CommitError::Store(e) => Some(e),
            CommitError::Audit(e) => Some(e),
        }
    }
}

/// The queue store and its flush thread.
pub(super) struct Commits {
    /// Where accepted envelopes and tasks are kept (memory or SQLite).
    pub(super) store: Box<dyn Store>,
    /// The store's background thread: flushes commits to disk (`store.sync = "full"`) and
    /// checkpoints the WAL, off the loop; None for the memory store.
    flusher: Option<Flusher>,
}

impl Commits {
    pub(super) fn new(store: Box<dyn Store>, flusher: Option<Flusher>) -> Commits {
        Commits { store, flusher }
    }

    /// Whether the flush thread holds commits not yet on disk (the core's commit point asks).
    pub(super) fn holds_commits(&self) -> bool {
        self.flusher.as_ref().is_some_and(Flusher::holds_commits)
    }

    /// Carries out one `Output::Commit` exactly as `hub::commit::Batch` says: the store
    /// transaction, the audit batch, the store commit, undoing what was done when a step
    /// fails, then the flush request for a batch that waits for one. Decides nothing: the
    /// core gets the result and says what follows.
    pub(super) fn write_batch(
        &mut self,
        batch: agent_hub_proto::hub::Batch,
        records: &mut Records,
        hub: &mut Hub,
    ) {
        // The core takes the failure as the IO layer's words (`StoreFailure`): it puts them
        // in refusals and the service log and decides nothing by them.
        let failed = |e: &dyn std::error::Error| StoreFailure::new(e.to_string());
        let result = self
            .try_write_batch(&batch, records)
            .map_err(|e| failed(&e));
        let now = read_clock();
        let unflushable = match (&result, batch.sync, &mut self.flusher) {
            (Ok(()), true, Some(f)) => f.request(batch.id).err().map(|e| failed(&e)),
            (Ok(()), true, None) => Some(StoreFailure::new("the store has no flush thread")),
            _ => None,
        };
        hub.handle_committed(batch.id, result, now);
        if let Some(e) = unflushable {
            // No flush will come: the held replies become errors.
            hub.handle_synced(batch.id, Err(e), now);
        }
    }

    fn try_write_batch(
        &mut self,
        batch: &agent_hub_proto::hub::Batch,
        records: &mut Records,
    ) -> Result<(), CommitError> {
        if let Err(e) = self.store.stage(&batch.store_ops) {
            // Records that gate nothing still go out; the refusals are audited after them.
            let _ = records.flush_audit(std::iter::empty());
            return Err(CommitError::Store(e));
        }
        if let Err(e) = records.flush_audit(batch.audit.iter().cloned()) {
            self.store.rollback();
            return Err(CommitError::Audit(e));
        }
        if let Err(e) = self.store.commit() {
            // The audit batch already says `accepted`: take it back out.
            records.undo_last_batch();
            return Err(CommitError::Store(e));
        }
        if let (Some(f), Some(frames)) = (&mut self.flusher, self.store.wal_frames()) {
            f.wal_committed(frames);
        }
        Ok(())
    }

    /// Hands the flush thread's reports to the core, after its log lines.
    fn apply(
        &mut self,
        reports: Vec<(u64, FlushResult)>,
        records: &mut Records,
        hub: &mut Hub,
        now: Now,
    ) {
        if let Some(f) = &mut self.flusher {
            for (level, line) in f.take_logs() {
                records.log(level, &line);
            }
        }
        for (through, result) in reports {
            hub.handle_synced(through, result.map_err(StoreFailure::new), now);
        }
    }

    /// Waits for the flush thread's outstanding flushes up to `give_up` (the stop's last
    /// commits): their reports, and whether it is still busy after; None when it has nothing
    /// outstanding (or there is no flush thread).
    pub(super) fn wait_all(
        &mut self,
        give_up: std::time::Instant,
    ) -> Option<(Vec<(u64, FlushResult)>, bool)> {
        let reports = match &mut self.flusher {
            Some(f) if f.is_busy() => f.wait_all(give_up),
            _ => return None,
        };
        let stuck = self.flusher.as_ref().is_some_and(Flusher::is_busy);
        Some((reports, stuck))
    }
}

impl Server {
    /// Flushes the flush thread reported: their held replies go out (or, after a failed flush,
    /// error lines), and a failed flush stops sends until a restart (`Hub::flush_failed`).
    pub(super) fn take_flushes(&mut self, now: Now) {
        let Some(f) = &mut self.commits.flusher else {
            return;
        };
        let mut reports = Vec::new();
        while let Some(r) = f.completed() {
            reports.push(r);
        }
        self.apply_flushes(reports, now);
    }

    pub(super) fn apply_flushes(&mut self, reports: Vec<(u64, FlushResult)>, now: Now) {
        self.commits
            .apply(reports, &mut self.records, &mut self.hub, now);
        self.drain_outputs();
    }
}
