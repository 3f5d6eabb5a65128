//! The audit log and the service log (SPEC §8): append-only files of mode 600. The audit log
//! is written in one batch per event-loop iteration that has records (a batch that gates
//! replies before they leave); the service log's INFO lines are buffered for up to
//! `limits.service_log_flush_ms` and written in one append (`flush_service_due`).
//!
//! Owns the on-disk form of both records and what happens when a write fails: the audit batch
//! is cut back to its last good length, the sends it carried are refused by the caller, and
//! records that gate nothing are kept (bounded) for the next attempt. Owns the audit log's
//! hash chain as written (`audit_chain` has its rules): each record's `prev` is filled in when
//! its batch is written, never when it is queued, so a failed or undone batch leaves the chain
//! ending at the last record that stayed in the file. Refuses: deciding what to record (the
//! hub core does that). Opening the files at startup (modes, a torn tail, where the chain
//! stands) is `records/open.rs`.

use super::audit_chain::{self, chain_line, chain_start_record, Hash};
use super::timestamp::Stamper;
use agent_hub_proto::hub::event::AUDIT_FORMAT_VERSION;
use agent_hub_proto::hub::AuditEvent;
use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant, SystemTime};

/// Records that gate nothing and could not be written are kept up to this many bytes; past it
/// the oldest are dropped and the drop is counted in the service log.
const MAX_PENDING_AUDIT_BYTES: usize = 16 * 1024 * 1024;

/// Buffered service-log lines are written at once past this many bytes, whatever the flush
/// interval, so a burst of lines costs a bounded amount of memory.
const SERVICE_BUF_FLUSH_BYTES: usize = 64 * 1024;

/// The audit batch buffer is kept for the next flush up to this capacity.
const BATCH_KEEP_BYTES: usize = 256 * 1024;

mod open;
pub use open::{cut_torn_tail, last_line, lines_after, open_chain, open_record_file, Chain};

/// Where records go. A seam so tests can make writes fail like a full disk.
// `len` is a file's size, read to cut a failed append back; an `is_empty` would mean nothing.
#[allow(clippy::len_without_is_empty)]
pub trait Sink {
    fn append(&mut self, bytes: &[u8]) -> io::Result<()>;
    /// Cuts the file back to `len` bytes after a failed append.
    fn truncate(&mut self, len: u64) -> io::Result<()>;
    fn len(&mut self) -> io::Result<u64>;
}

impl Sink for File {
    fn append(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.write_all(bytes)
    }
    fn truncate(&mut self, len: u64) -> io::Result<()> {
        self.set_len(len)
    }
    fn len(&mut self) -> io::Result<u64> {
        Ok(self.metadata()?.len())
    }
}

/// The part of the last batch `undo_last_batch` needs.
struct LastBatch {
    /// The file's length before the batch.
    len: u64,
    /// Its records that gated nothing, as queued (without `prev`).
    ungated: String,
    /// The chain as it stood before the batch.
    head: Option<Hash>,
    start: Option<String>,
}

pub struct Records {
    audit: Box<dyn Sink>,
    /// The audit file's length after the last good append (None until first asked), so a
    /// failed batch can be cut back without an `fstat` before every append.
    audit_len: Option<u64>,
    /// The length before the last append and the part of it that gated nothing.
    last_batch: Option<LastBatch>,
    /// Encoded records that gate nothing, waiting for the next flush (without `prev`).
    pending: String,
    /// Where each record in `pending` ends (after its newline), so a flush splits them
    /// without scanning every byte for newlines, which was the largest part of the records'
    /// own work per W1 op after SHA-256 (docs/performance.md, "Design decisions").
    pending_ends: Vec<usize>,
    /// Where the chain stands (`Chain`).
    chain: Chain,
    head_failing: bool,
    service: Box<dyn Sink>,
    service_buf: String,
    /// How long an INFO line may wait in `service_buf` (`limits.service_log_flush_ms`);
    /// zero writes at the end of every loop iteration.
    service_flush: Duration,
    /// When the buffered lines are written at the latest (`flush_service_due`).
    service_due: Option<Instant>,
    /// A line above INFO is buffered: written at the end of this iteration.
    service_urgent: bool,
    dropped_audit: u64,
    audit_failing: bool,
    /// The chain's head changed since the `.head` file was last written (`record_head_due`).
    head_moved: bool,
    /// When the moved head is written at the latest: one interval after the first move since
    /// the last write (`record_head_due`).
    head_due: Option<Instant>,
    /// The `.head` file's write interval (`limits.service_log_flush_ms`); zero writes it at
    /// the end of every loop iteration that moved it.
    head_every: Duration,
    /// The last audit batch's buffer, reused (`flush_audit`).
    batch_buf: String,
    /// Formats each record's timestamp (`timestamp`), into `ts_buf`.
    stamper: Stamper,
    ts_buf: String,
}

impl Records {
    pub fn new(audit: Box<dyn Sink>, service: Box<dyn Sink>) -> Records {
        Records {
            audit,
            audit_len: None,
            last_batch: None,
            pending: String::new(),
            pending_ends: Vec::new(),
            service,
            service_buf: String::new(),
            service_flush: Duration::ZERO,
            service_due: None,
            service_urgent: false,
            head_moved: false,
            head_due: None,
            head_every: Duration::ZERO,
            batch_buf: String::new(),
            stamper: Stamper::default(),
            ts_buf: String::new(),
            dropped_audit: 0,
            audit_failing: false,
            chain: Chain::new_log(),
            head_failing: false,
        }
    }

    /// Replaces the audit sink and the chain it continues (`open_chain`), keeping the service
    /// log and anything buffered.
    pub fn set_audit(&mut self, audit: Box<dyn Sink>, chain: Chain) {
        // The log being replaced keeps its own head file up to date (the placeholder's chain
        // has none).
        self.record_head_moved();
        self.audit = audit;
        self.audit_len = None;
        self.chain = chain;
    }

    /// The hash of the last record written, for the service log at shutdown.
    pub fn chain_head(&self) -> Option<String> {
        self.chain.head.as_ref().map(audit_chain::hex)
    }

    /// Rewrites the `.head` file now if the chain's head moved: at every stop (`Server::run`'s
    /// end, `Drop`) and before the audit log is replaced (`set_audit`).
    pub fn record_head_moved(&mut self) {
        self.head_due = None;
        if std::mem::take(&mut self.head_moved) {
            self.record_head();
        }
    }

    /// The end of a loop iteration: rewrites the `.head` file if its head moved and the
    /// interval since the first move after the last write is over (`head_due`), so at most
    /// once per `limits.service_log_flush_ms` instead of once per iteration, which cost a
    /// `pwrite64` per iteration under connection-per-op load (docs/performance.md, issue 13,
    /// "Design decisions"). A SIGKILL or crash leaves the head up to one interval behind
    /// the log; the next start (`open_chain`) and `audit verify` say how many records came
    /// after it, which it does not anchor (docs/operations.md, "The hash chain").
    pub fn record_head_due(&mut self, now: Instant) {
        if !self.head_moved {
            return;
        }
        let due = *self.head_due.get_or_insert(now);
        if self.head_every.is_zero() || now >= due {
            self.record_head_moved();
        }
    }

    /// Marks the head moved and, for the first move since the last write, starts the interval
    /// (one clock reading per interval, not per batch): the deadline is known wherever in the
    /// loop iteration the batch was written, so an idle hub's sleep is bounded by it (`due`).
    fn head_has_moved(&mut self) {
        self.head_moved = true;
        if self.head_due.is_none() {
            self.head_due = Some(Instant::now() + self.head_every);
        }
    }

    /// When `record_head_due` must run next to keep the interval, if the head moved.
    pub fn head_due(&self) -> Option<Instant> {
        self.head_due
    }

    /// The records' next deadline: the buffered service lines' or the `.head` file's
    /// (`flush_due`), whichever is first.
    pub fn due(&self) -> Option<Instant> {
        match (self.service_due, self.head_due) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The end of a loop iteration: the `.head` file and the service log, each when its
    /// interval says (`record_head_due`, `flush_service_due`).
    pub fn flush_due(&mut self, now: Instant) {
        self.record_head_due(now);
        self.flush_service_due(now);
    }

    /// Rewrites the `.head` file with the chain's head (fixed length, in place).
    fn record_head(&mut self) {
        let Some(f) = &self.chain.head_file else {
            return;
        };
        let r = match &self.chain.head {
            Some(h) => {
                let mut line = String::with_capacity(65);
                audit_chain::push_hex(h, &mut line);
                line.push('\n');
                f.write_all_at(line.as_bytes(), 0)
            }
            None => f.set_len(0),
        };
        match r {
            Ok(()) if self.head_failing => {
                self.head_failing = false;
                self.log("INFO", "audit chain head file writable again");
            }
            Err(e) if !self.head_failing => {
                self.head_failing = true;
                self.log(
                    "WARN",
                    &format!("audit chain: cannot record the chain head beside the log: {e}"),
                );
            }
            _ => {}
        }
    }

    /// Sets how long INFO lines may wait before they are written (`flush_service_due`), and
    /// the `.head` file's write interval with them (`record_head_due`): one key bounds what a
    /// SIGKILL leaves unwritten or unanchored (docs/operations.md, "Service log").
    pub fn set_service_flush(&mut self, every: Duration) {
        self.service_flush = every;
        self.head_every = every;
    }

    /// Queues a record that gates nothing.
    pub fn audit(&mut self, event: &AuditEvent) {
        self.ts_buf.clear();
        self.stamper
            .push_system(SystemTime::now(), &mut self.ts_buf);
        event.encode_into(&self.ts_buf, &mut self.pending);
        self.pending_ends.push(self.pending.len());
    }

    /// Queues a service-log line at `level`. It is written by `flush_service_due`: a line
    /// above INFO at the end of this loop iteration, an INFO line within the flush interval.
    pub fn log(&mut self, level: &str, line: &str) {
        if level != "INFO" {
            self.service_urgent = true;
        }
        // The deadline starts with the first waiting line, wherever in the loop iteration it
        // was queued: a line queued after this iteration's `flush_service_due` (a SIGHUP's
        // reload line, say) must still bound the loop's sleep (`service_due`), or an idle hub
        // would hold it until its next event.
        // An INFO line behind one already waiting cannot bring the deadline forward (the
        // first was queued earlier with the same interval): no clock reading for it.
        if level != "INFO" || self.service_due.is_none() {
            let now = Instant::now();
            let due = if level == "INFO" {
                now + self.service_flush
            } else {
                now
            };
            self.service_due = Some(self.service_due.map_or(due, |d| d.min(due)));
        }
        self.stamper
            .push_system(SystemTime::now(), &mut self.service_buf);
        self.service_buf.push(' ');
        self.service_buf.push_str(level);
        self.service_buf.push(' ');
        self.service_buf.push_str(line);
        self.service_buf.push('\n');
    }

    /// Writes the pending records and then `gated` in one append. On failure the file is cut
    /// back, the gated records are discarded (the caller refuses what they carried) and the
    /// pending ones are kept for the next flush.
    pub fn flush_audit<I: IntoIterator<Item = AuditEvent>>(&mut self, gated: I) -> io::Result<()> {
        // Only this call's batch can be taken back: a batch from an earlier call was settled
        // by its own commit (and an empty call must not leave it undoable).
        self.last_batch = None;
        let mut gated = gated.into_iter().peekable();
        // Called at the end of every loop iteration, most often with nothing to write: the
        // clock is read and the time formatted only for records stamped here (the gated ones,
        // a chain_start), into the kept `ts_buf` (docs/performance.md, "Design decisions").
        let stamp =
            gated.peek().is_some() || (self.chain.start.is_some() && !self.pending.is_empty());
        if self.pending.is_empty() && !stamp {
            return Ok(());
        }
        let mut ts = std::mem::take(&mut self.ts_buf);
        if stamp {
            ts.clear();
            self.stamper.push_system(SystemTime::now(), &mut ts);
        }
        let keep = self.pending.len();
        for ev in gated {
            ev.encode_into(&ts, &mut self.pending);
            self.pending_ends.push(self.pending.len());
        }
        let before = match self.audit_len {
            Some(len) => Ok(len),
            None => self.audit.len(),
        };
        // The chain's links are made now, in file order: the chain_start first if one is due.
        // The batch buffer is kept between flushes (cleared, not freed) unless a burst grew it
        // past `BATCH_KEEP_BYTES`: one allocation fewer per loop iteration.
        let mut batch = std::mem::take(&mut self.batch_buf);
        batch.clear();
        batch.reserve(self.pending.len() + 80 * 64);
        let mut head = self.chain.head;
        if let Some(reason) = &self.chain.start {
            let start = chain_start_record(AUDIT_FORMAT_VERSION, &ts, reason);
            head = Some(chain_line(&start, head.as_ref(), &mut batch));
        }
        self.ts_buf = ts;
        debug_assert_eq!(self.pending_ends.last(), Some(&self.pending.len()));
        let mut from = 0;
        for &end in &self.pending_ends {
            head = Some(chain_line(
                &self.pending[from..end],
                head.as_ref(),
                &mut batch,
            ));
            from = end;
        }
        let appended = self.audit.append(batch.as_bytes());
        let written = batch.len() as u64;
        if batch.capacity() <= BATCH_KEEP_BYTES {
            self.batch_buf = batch;
        }
        match appended {
            Ok(()) => {
                self.audit_len = before.as_ref().ok().map(|len| len + written);
                // Kept until the caller's commit settles, so `undo_last_batch` can take the
                // gated records back out, keep the rest and put the chain back where it was.
                self.last_batch = match before {
                    Ok(len) if keep < self.pending.len() => Some(LastBatch {
                        len,
                        ungated: self.pending[..keep].to_owned(),
                        head: self.chain.head,
                        start: self.chain.start.clone(),
                    }),
                    _ => None,
                };
                self.chain.head = head;
                self.chain.start = None;
                self.head_has_moved();
                self.pending.clear();
                self.pending_ends.clear();
                if self.audit_failing {
                    self.audit_failing = false;
                    self.log("INFO", "audit log writable again");
                }
                Ok(())
            }
            Err(e) => {
                if let Ok(len) = before {
                    let _ = self.audit.truncate(len);
                }
                self.audit_len = None;
                self.pending.truncate(keep);
                let kept = self.pending_ends.partition_point(|&end| end <= keep);
                self.pending_ends.truncate(kept);
                self.bound_pending();
                if !self.audit_failing {
                    self.audit_failing = true;
                    self.log(
                        "ERROR",
                        &format!(
                            "audit log write failed: {e}; sends are refused until it recovers"
                        ),
                    );
                }
                Err(e)
            }
        }
    }

    /// Takes the last batch back out of the audit log: the commit it gated failed after the
    /// append (the store's commit), so its `accepted`/`acked` records must not stand. The
    /// batch's records that gated nothing go back to the pending buffer for the next flush.
    pub fn undo_last_batch(&mut self) {
        let Some(last) = self.last_batch.take() else {
            return;
        };
        if self.audit.truncate(last.len).is_ok() {
            self.audit_len = Some(last.len);
            self.pending.insert_str(0, &last.ungated);
            self.index_pending();
            // The next record links to the last one left in the file.
            self.chain.head = last.head;
            self.chain.start = last.start;
            self.head_has_moved();
        } else {
            self.audit_len = None;
            self.log(
                "ERROR",
                "audit log: could not take back a batch whose commit failed",
            );
        }
    }

    /// Finds `pending_ends` again by a scan, after `pending` was changed other than by
    /// appending records (an undone batch, records dropped): rare paths.
    fn index_pending(&mut self) {
        self.pending_ends.clear();
        let mut end = 0;
        for record in self.pending.split_inclusive('\n') {
            end += record.len();
            self.pending_ends.push(end);
        }
    }

    fn bound_pending(&mut self) {
        if self.pending.len() <= MAX_PENDING_AUDIT_BYTES {
            return;
        }
        let excess = self.pending.len() - MAX_PENDING_AUDIT_BYTES;
        let cut = self.pending[excess..]
            .find('\n')
            .map_or(self.pending.len(), |i| excess + i + 1);
        let dropped = self.pending[..cut].matches('\n').count() as u64;
        self.pending.drain(..cut);
        self.index_pending();
        self.dropped_audit += dropped;
        self.log(
            "ERROR",
            &format!(
                "audit log unwritable: dropped {} unwritten records so far",
                self.dropped_audit
            ),
        );
    }

    /// Writes buffered service-log lines. A failing service log cannot be reported in itself;
    /// the lines go to stderr instead so they are not lost silently.
    pub fn flush_service(&mut self) {
        self.service_due = None;
        self.service_urgent = false;
        if self.service_buf.is_empty() {
            return;
        }
        if self.service.append(self.service_buf.as_bytes()).is_err() {
            let _ = io::stderr().write_all(self.service_buf.as_bytes());
        }
        self.service_buf.clear();
    }

    /// The end of a loop iteration: writes the buffered service-log lines if one is above
    /// INFO, the buffer is past `SERVICE_BUF_FLUSH_BYTES`, the flush interval is zero or the
    /// oldest line has waited it out; otherwise arms the interval from `now`. One write per
    /// interval instead of one per iteration: a connection-per-op client costs an iteration
    /// or more per operation, each with its own line (docs/performance.md, issue 13).
    /// What a SIGKILL can lose is at most the interval's INFO lines (docs/operations.md,
    /// "Service log"); SIGTERM, SIGINT and every stop write them first.
    pub fn flush_service_due(&mut self, now: Instant) {
        if self.service_buf.is_empty() {
            return;
        }
        let due = *self.service_due.get_or_insert(now + self.service_flush);
        if self.service_urgent
            || self.service_flush.is_zero()
            || self.service_buf.len() >= SERVICE_BUF_FLUSH_BYTES
            || now >= due
        {
            self.flush_service();
        }
    }

    /// When `flush_service_due` must run next to keep the flush interval, if lines wait.
    pub fn service_due(&self) -> Option<Instant> {
        self.service_due
    }

    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty() || !self.service_buf.is_empty()
    }
}

impl Drop for Records {
    /// A server that ends by an error return (not a signal's orderly stop) still writes the
    /// service-log lines it buffered and the chain head.
    fn drop(&mut self) {
        self.record_head_moved();
        self.flush_service();
    }
}

#[cfg(test)]
mod tests;
