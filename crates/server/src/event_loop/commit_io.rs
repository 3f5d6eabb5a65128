//! The commit executor (part of the IO shell, `crates/server/src/event_loop/mod.rs`): carries out the core's
//! `Output::Commit` batches against the store and the audit log in the order PLAN.md "How a
//! send becomes durable" gives, and hands the flush thread's reports back to the core. It keeps
//! no pending operation and no rule of its own: every result goes to `Hub::handle_committed` or
//! `Hub::handle_synced`, and the core says what follows.

use super::*;
use crate::store::StoreError;
use agent_hub_proto::hub::durable::StoreFailure;

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

impl Server {
    /// Carries out one `Output::Commit` exactly as `hub::commit::Batch` says: the store
    /// transaction, the audit batch, the store commit, undoing what was done when a step
    /// fails, then the flush request for a batch that waits for one. Decides nothing: the
    /// core gets the result and says what follows.
    pub(super) fn write_batch(&mut self, batch: agent_hub_proto::hub::Batch) {
        // The core takes the failure as the IO layer's words (`StoreFailure`): it puts them
        // in refusals and the service log and decides nothing by them.
        let failed = |e: &dyn std::error::Error| StoreFailure::new(e.to_string());
        let result = self.try_write_batch(&batch).map_err(|e| failed(&e));
        let now = self.now();
        let unflushable = match (&result, batch.sync, &mut self.flusher) {
            (Ok(()), true, Some(f)) => f.request(batch.id).err().map(|e| failed(&e)),
            (Ok(()), true, None) => Some(StoreFailure::new("the store has no flush thread")),
            _ => None,
        };
        self.hub.handle_committed(batch.id, result, now);
        if let Some(e) = unflushable {
            // No flush will come: the held replies become errors.
            self.hub.handle_synced(batch.id, Err(e), now);
        }
    }

    fn try_write_batch(&mut self, batch: &agent_hub_proto::hub::Batch) -> Result<(), CommitError> {
        if let Err(e) = self.store.stage(&batch.store_ops) {
            // Records that gate nothing still go out; the refusals are audited after them.
            let _ = self.records.flush_audit(std::iter::empty());
            return Err(CommitError::Store(e));
        }
        if let Err(e) = self.records.flush_audit(batch.audit.iter().cloned()) {
            self.store.rollback();
            return Err(CommitError::Audit(e));
        }
        if let Err(e) = self.store.commit() {
            // The audit batch already says `accepted`: take it back out.
            self.records.undo_last_batch();
            return Err(CommitError::Store(e));
        }
        if let (Some(f), Some(frames)) = (&mut self.flusher, self.store.wal_frames()) {
            f.wal_committed(frames);
        }
        Ok(())
    }

    /// Flushes the flush thread reported: their held replies go out (or, after a failed flush,
    /// error lines), and a failed flush stops sends until a restart (`Hub::flush_failed`).
    pub(super) fn take_flushes(&mut self, now: Now) {
        let Some(f) = &mut self.flusher else { return };
        let mut reports = Vec::new();
        while let Some(r) = f.completed() {
            reports.push(r);
        }
        self.apply_flushes(reports, now);
    }

    pub(super) fn apply_flushes(&mut self, reports: Vec<(u64, FlushResult)>, now: Now) {
        if let Some(f) = &mut self.flusher {
            for (level, line) in f.take_logs() {
                self.records.log(level, &line);
            }
        }
        for (through, result) in reports {
            self.hub
                .handle_synced(through, result.map_err(StoreFailure::new), now);
        }
        self.drain_outputs();
    }
}
