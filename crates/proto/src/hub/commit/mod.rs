//! The commit as the core's own output (PLAN.md "How a send becomes durable", SPEC §5.1,
//! §8, §12.1, §12.2): which staged sends, acks and store changes go into the next batch, the
//! `Output::Commit` that asks the IO layer to write it, and what follows from its result
//! (`handle_committed`) and, for a store that flushes to disk, from its flush
//! (`handle_synced`): replies released or held, sends refused, bounces kept for the next
//! batch, the retry without sends when a full store refuses them, the refusal of every send
//! after a failed flush or past `limits.store_backlog_max_bytes`.
//!
//! Owns the batch lifecycle and the backlog of changes that gate no reply (`pending`).
//! Refuses IO: the loop writes a batch's store operations, then its audit records, then
//! commits the store, in that order, and reports back; it keeps no copy and no rule.

mod pending;

use super::ledger::State;
use super::{
    Conn, ConnId, Held, HeldReply, Hub, Now, Output, Phase, Staged, StagedAck, StagedTask, Target,
};
use crate::hub::durable::{StoreFailure, StoreOp};
use crate::hub::event::Batch;
use crate::hub::{AuditEvent, Id};
use crate::wire::HubLine;
use chrono::{DateTime, Utc};
use pending::PendingOps;
use std::time::{Duration, Instant};

/// How soon the loop comes back to commit staged work after a failed (or waiting) commit
/// point, when nothing else wakes it.
pub const COMMIT_RETRY: Duration = Duration::from_millis(500);

/// The core's commit state.
#[derive(Debug, Default)]
pub(super) struct Commits {
    /// Store changes that gate no reply, waiting for the next batch.
    pending: PendingOps,
    /// The id of the next batch.
    next_id: u64,
    /// The batch the IO layer is writing.
    in_flight: Option<InFlight>,
    /// Whether committed batches wait for a flush to disk (`Hub::with_sync`).
    pub(super) sync: bool,
    /// A batch of the current loop iteration failed: no further attempt until the next
    /// iteration (`handle_timeout`) or a flush report, so a failing store cannot spin the loop.
    round_failed: bool,
    /// The last outcome was a failure (for the service log's "succeed again").
    store_failing: bool,
    /// When the loop must come back for work a commit point left behind (a failed batch, or
    /// one held back by a running flush or checkpoint), if no other event wakes it first.
    retry_at: Option<Instant>,
}

/// What a batch carries, kept until its result is known.
#[derive(Debug)]
struct InFlight {
    id: u64,
    /// The staged sends; in a retry without sends they ride along unwritten.
    sends: Vec<Staged>,
    /// Task steps, written with the sends (they are new promises too) or not at all.
    tasks: Vec<StagedTask>,
    acks: Vec<StagedAck>,
    /// The pending changes this batch took: given back when it fails.
    ops: PendingOps,
    /// The sends' outcome when already decided (refused before writing, or the first attempt
    /// of a retry without sends failed); None when the batch writes them.
    sends_result: Option<Result<(), String>>,
    sync: bool,
    /// The wall time the batch's records were stamped with.
    wall: DateTime<Utc>,
}

impl Hub {
    /// With `sync`, committed batches wait for `handle_synced` before their `accepted` and
    /// `acked` replies go out (`store.sync = "full"`, SPEC §12.1).
    pub fn with_sync(mut self, sync: bool) -> Hub {
        self.commit.sync = sync;
        self
    }

    /// A store change that gates no reply, committed with the next batch (durable store only).
    pub(super) fn store(&mut self, op: StoreOp) {
        if self.durable {
            self.commit.pending.push(op);
        }
    }

    /// The loop reached its commit point (after the input of an iteration, and again after
    /// socket writes produced more work): if anything waits and nothing holds it back, the
    /// core emits the next `Output::Commit`. `store_holds` says the store cannot take a commit
    /// now (a checkpoint that must copy the whole WAL runs; `store::flush`).
    ///
    /// While a flush is running, a commit made now could confirm nothing before the next
    /// flush anyway, so the staged work is gathered into one batch once the running flush
    /// reports. Only a handoff to a parked await commits at once, because its reader gets the
    /// envelope at the commit (SPEC §12.1).
    pub fn handle_commit_point(&mut self, now: Now, store_holds: bool) {
        if !self.has_commit_work() {
            self.commit.retry_at = None;
            return;
        }
        let flush_running =
            self.unsynced.is_some() && !self.has_staged_handoff() && self.flush_failed.is_none();
        if self.commit.in_flight.is_some()
            || self.commit.round_failed
            || store_holds
            || flush_running
        {
            self.commit.retry_at = Some(now.mono + COMMIT_RETRY);
            return;
        }
        self.commit.retry_at = None;
        let with_sends = !self.staged.is_empty() || !self.staged_tasks.is_empty();
        let backlog = self.commit.pending.bytes();
        let max = self.settings.limits.store_backlog_max_bytes;
        if let Some(why) = &self.flush_failed {
            // The kernel may have dropped written pages: nothing new may be promised durable
            // until a restart (SPEC §12.1); acks and removals are still written.
            let refused = flush_failed_refusal(why);
            self.emit_batch(false, Some(Err(refused)), now);
        } else if with_sends && backlog > max {
            // The store has been failing long enough that its backlog reached the bound: it
            // is drained (with the acks) before any send is tried again (SPEC §12.1).
            let refused = store_backlog_refusal(backlog, max);
            self.emit_batch(false, Some(Err(refused)), now);
        } else {
            self.emit_batch(true, None, now);
        }
    }

    /// Moves the staged work into a batch and emits it. Without `with_sends` the staged sends
    /// ride along unwritten, their outcome `sends_result`.
    fn emit_batch(&mut self, with_sends: bool, sends_result: Option<Result<(), String>>, now: Now) {
        let sends = std::mem::take(&mut self.staged);
        let acks = std::mem::take(&mut self.staged_acks);
        let tasks = std::mem::take(&mut self.staged_tasks);
        self.emit_batch_of(sends, tasks, acks, with_sends, sends_result, now);
    }

    fn emit_batch_of(
        &mut self,
        sends: Vec<Staged>,
        tasks: Vec<StagedTask>,
        acks: Vec<StagedAck>,
        with_sends: bool,
        sends_result: Option<Result<(), String>>,
        now: Now,
    ) {
        let ops = std::mem::take(&mut self.commit.pending);
        let wall_ms = now.wall.timestamp_millis();
        let mut store_ops = ops.to_vec();
        let mut audit = Vec::new();
        let written: &[Staged] = if with_sends { &sends } else { &[] };
        for s in written {
            let e = &s.env;
            // Written once from the queued copy's parts, shared by the row and the audit
            // record, and let go when both are written (`Queued::text`).
            let text = e.shared_text();
            if self.durable {
                store_ops.push(StoreOp::Insert {
                    seq: e.seq,
                    agent: e.to.to_string(),
                    id: e.id.to_string(),
                    sender: e.from.to_string(),
                    kind: e.kind.to_string(),
                    correlation_id: e.correlation_id.as_deref().map(str::to_owned),
                    text: text.clone(),
                    digest: s.digest,
                    accepted_ms: wall_ms,
                });
            }
            audit.push(AuditEvent::Accepted {
                conn: s.conn,
                envelope: text,
            });
            if let Some(r) = &s.rider {
                store_ops.extend(r.store.iter().cloned());
                audit.extend(r.audit.iter().cloned());
            }
        }
        let written_tasks: &[StagedTask] = if with_sends { &tasks } else { &[] };
        for t in written_tasks {
            store_ops.extend(t.store.iter().cloned());
            audit.extend(t.audit.iter().cloned());
        }
        for a in &acks {
            if self.durable {
                store_ops.push(StoreOp::Remove { seq: a.env.seq });
                store_ops.push(StoreOp::State {
                    seq: a.env.seq,
                    sender: a.env.from.to_string(),
                    id: a.env.id.to_string(),
                    state: State::Acked.as_str().to_owned(),
                    detail: None,
                    reader: self.memory.ledger.reader_of(&a.env.from, &a.env.id),
                    at_ms: wall_ms,
                });
            }
            audit.push(AuditEvent::Acked {
                conn: a.conn,
                id: a.env.id.to_string(),
                to: a.env.to.to_string(),
                attempts: a.env.attempts,
            });
        }
        // A commit that writes something the peers are told about waits for its flush. One
        // holding only changes that gate no reply (removals after plain deliveries, states,
        // forgotten ids) asks for none: the next flush or checkpoint takes it along, and until
        // then it survives a hub crash, which is all its promise is (SPEC §12.1).
        let sync = self.commit.sync
            && (!written.is_empty() || !acks.is_empty() || !written_tasks.is_empty());
        self.commit.next_id = self.commit.next_id.max(1);
        let id = self.commit.next_id;
        self.commit.next_id += 1;
        self.commit.in_flight = Some(InFlight {
            id,
            sends,
            tasks,
            acks,
            ops,
            sends_result,
            sync,
            wall: now.wall,
        });
        self.outputs.push(Output::Commit(Batch {
            id,
            store_ops,
            audit,
            sync,
        }));
    }

    /// The IO layer's report on batch `id`: written in full (`Ok`), or not at all. On `Ok`
    /// the staged sends are accepted and routed and the acks settled (their replies wait for
    /// `handle_synced` when the batch has `sync`); on `Err` each sender gets an error line,
    /// each acking reader its envelope back, and the changes that gate nothing wait for the
    /// next batch. A failed batch that carried sends is tried once more at once without them:
    /// a full store must still record acks and delivery removals, which are what free its room.
    pub fn handle_committed(&mut self, id: u64, result: Result<(), StoreFailure>, now: Now) {
        // From here on the failure is the text of the refusals it causes.
        let result = result.map_err(|e| e.to_string());
        let Some(f) = self.commit.in_flight.take_if(|f| f.id == id) else {
            return;
        };
        // Settled with the time its records were stamped with, as the loop's one commit was.
        let now = Now {
            mono: now.mono,
            wall: f.wall,
        };
        match result {
            Ok(()) => {
                if f.sync {
                    self.unsynced = Some(id);
                }
                let sends = f.sends_result.unwrap_or(Ok(()));
                self.settle_batch(f.sends, f.tasks, sends, f.acks, Ok(()), now);
            }
            Err(e) => {
                // The changes it took wait again, ahead of any emitted meanwhile.
                let newer = std::mem::replace(&mut self.commit.pending, f.ops);
                for op in newer.to_vec() {
                    self.commit.pending.push(op);
                }
                if f.sends_result.is_none() && !(f.sends.is_empty() && f.tasks.is_empty()) {
                    return self.emit_batch_of(f.sends, f.tasks, f.acks, false, Some(Err(e)), now);
                }
                let sends = f.sends_result.unwrap_or_else(|| Err(e.clone()));
                self.settle_batch(f.sends, f.tasks, sends, f.acks, Err(e), now);
                if self.has_commit_work() {
                    self.commit.retry_at = Some(now.mono + COMMIT_RETRY);
                }
            }
        }
    }

    /// Applies a batch's outcome, with separate outcomes for its sends and its acks.
    fn settle_batch(
        &mut self,
        sends: Vec<Staged>,
        tasks: Vec<StagedTask>,
        sends_result: Result<(), String>,
        acks: Vec<StagedAck>,
        acks_result: Result<(), String>,
        now: Now,
    ) {
        match (&sends_result, &acks_result) {
            (Ok(()), Ok(())) => {
                if std::mem::take(&mut self.commit.store_failing) {
                    self.outputs.log("commits succeed again".to_owned());
                }
            }
            (Err(e), _) | (_, Err(e)) => {
                self.commit.round_failed = true;
                if !std::mem::replace(&mut self.commit.store_failing, true) {
                    self.outputs.log_error(format!(
                        "commit failed: {e}; sends are refused until it succeeds"
                    ));
                }
            }
        }
        let tasks_result = sends_result.clone();
        self.settle_sends(sends, sends_result, now);
        self.settle_acks(acks, acks_result, now);
        self.settle_staged_tasks(tasks, &tasks_result, now);
    }

    fn settle_sends(&mut self, sends: Vec<Staged>, result: Result<(), String>, now: Now) {
        for mut s in sends {
            match &result {
                Ok(()) => self.accept(s, now),
                Err(why) if s.from_peer.is_some() => {
                    // Not acked: the peer keeps the envelope and sends it again after its ack
                    // deadline, so nothing is lost while this store cannot take it.
                    let (peer, _) = s.from_peer.clone().expect("checked");
                    // No id: the service log holds no value a peer sent (SPEC §8.2).
                    let msg = format!(
                        "an envelope from {peer} not queued: {why}; not acked, so {peer} sends it again"
                    );
                    self.outputs.log(msg);
                    self.unstage(s, "", now);
                }
                Err(_) if s.conn.is_none() => {
                    // A bounce kept for the next commit is accepted then, behind what is
                    // accepted meanwhile: give it a fresh place in acceptance order.
                    s.env.seq = self.take_seq();
                    self.staged.push(s)
                }
                Err(why) => {
                    let msg = format!("envelope not accepted: {why}");
                    let conn = s.conn;
                    self.unstage(s, &msg, now);
                    if let Some(conn) = conn {
                        self.fail(conn, &msg, now);
                    }
                }
            }
        }
    }

    fn settle_acks(&mut self, acks: Vec<StagedAck>, result: Result<(), String>, now: Now) {
        for a in acks {
            let live = matches!(
                self.conns.get(&a.conn).map(Box::as_ref),
                Some(Conn {
                    phase: Phase::AckStaged,
                    ..
                })
            );
            match &result {
                Ok(()) => {
                    // The batch already holds the durable `acked` state (`emit_batch_of`):
                    // update the ledger only, or every ack would cost a second store write
                    // (and a second fsync) in a commit of its own.
                    let at_ms = now.wall.timestamp_millis();
                    self.memory.ledger.set_state(
                        &a.env.from,
                        &a.env.id,
                        State::Acked,
                        false,
                        at_ms,
                    );
                    self.receipt_changed(&a.env.from, &a.env.id, now);
                    if live {
                        let line = HubLine::Acked {
                            id: a.env.id.to_string(),
                        };
                        self.reply_durable(a.conn, line, "acked", now);
                    }
                }
                Err(why) => {
                    let msg =
                        format!("ack not recorded: {why}; the envelope will be delivered again");
                    if live {
                        // No longer AckStaged: `finish` keeps that phase, and the close would
                        // then be logged as `acked` for an envelope that was requeued.
                        self.conns.get_mut(&a.conn).expect("live").phase = Phase::Done;
                        self.fail(a.conn, &msg, now);
                    }
                    // The reader did ack: this return is the store's doing, not an attempt.
                    self.give_back(a.conn, a.env, &msg, false, now);
                }
            }
        }
    }

    /// The store's flush to disk of every batch up to `through` finished. On `Ok` the held
    /// replies go out; on `Err` their peers get an error line, since the outcome is in the
    /// store but may not survive a machine crash, and every send is refused from then on until
    /// a restart (SPEC §12.1).
    pub fn handle_synced(&mut self, through: u64, result: Result<(), StoreFailure>, now: Now) {
        let result = result.map_err(|e| e.to_string());
        // A flush report is news from the store: a commit may be tried again.
        self.commit.round_failed = false;
        if let Err(e) = &result {
            if self.flush_failed.is_none() {
                self.outputs.log_error(format!(
                    "flushing the queue store to disk failed: {e}; sends are refused until the hub is restarted (check the disk)"
                ));
            }
        }
        while self.held.front().is_some_and(|h| h.batch <= through) {
            let h = self.held.pop_front().expect("front checked");
            let (conn, line, outcome) = match h.reply {
                HeldReply::Line {
                    conn,
                    line,
                    outcome,
                } => (conn, line, outcome),
                // A failed flush answers the peer nothing: it sends the envelope again after
                // its ack deadline, and that resend is refused until the restart.
                HeldReply::ForwardAck { peer, ack_id } => {
                    if result.is_ok() {
                        self.outputs.push(Output::ForwardAck {
                            peer,
                            ack_id,
                            error: None,
                        });
                    }
                    continue;
                }
            };
            let live = matches!(
                self.conns.get(&conn).map(Box::as_ref),
                Some(Conn {
                    phase: Phase::Syncing { .. },
                    ..
                })
            );
            if !live {
                continue;
            }
            match &result {
                Ok(()) => self.reply(conn, &line, outcome, now),
                Err(why) => {
                    let what = match &line {
                        HubLine::Acked { id } => format!("the ack of {id:?} was recorded"),
                        HubLine::Accepted { id, .. } => format!("envelope {id:?} was queued"),
                        _ => "the outcome was recorded".to_owned(),
                    };
                    let msg = format!(
                        "{what} but the queue store's flush to disk failed ({why}): it may not survive a machine crash; after the hub is restarted, a resend with the same id is answered as a duplicate if it survived, or accepted anew if not"
                    );
                    self.fail(conn, &msg, now);
                }
            }
        }
        if let Err(why) = result {
            self.flush_failed.get_or_insert(why);
        }
        if self.unsynced.is_some_and(|b| b <= through) {
            self.unsynced = None;
        }
    }

    /// A new loop iteration: a commit that failed in the last one may be tried again.
    pub(super) fn new_commit_round(&mut self) {
        self.commit.round_failed = false;
    }

    /// When the loop must come back to commit what waits, if anything does.
    pub(super) fn commit_deadline(&self) -> Option<Instant> {
        self.commit.retry_at.filter(|_| self.has_commit_work())
    }

    /// Sends, bounces or acks wait for a batch.
    pub fn has_staged(&self) -> bool {
        !self.staged.is_empty() || !self.staged_acks.is_empty() || !self.staged_tasks.is_empty()
    }

    /// Anything waits for a batch: staged sends, acks, or changes that gate nothing.
    pub fn has_commit_work(&self) -> bool {
        self.has_staged() || !self.commit.pending.is_empty()
    }

    /// Sends (or bounces) wait for a batch, or are in the one being written.
    pub fn has_staged_sends(&self) -> bool {
        !self.staged.is_empty()
            || self
                .commit
                .in_flight
                .as_ref()
                .is_some_and(|f| !f.sends.is_empty())
    }

    /// A batch was emitted and its result is not reported yet.
    pub fn commit_in_flight(&self) -> bool {
        self.commit.in_flight.is_some()
    }

    /// A staged send goes straight to a parked await: its reader waits for the commit, not
    /// only its sender.
    pub(super) fn has_staged_handoff(&self) -> bool {
        self.staged
            .iter()
            .any(|s| matches!(s.target, Target::Waiter(_)))
    }

    /// A send from `from` with `id` is staged or in the batch being written.
    pub(super) fn is_staged(&self, from: &str, id: &Id) -> bool {
        let in_flight = self.commit.in_flight.iter().flat_map(|f| f.sends.iter());
        self.staged
            .iter()
            .chain(in_flight)
            .any(|s| s.env.id == *id && *s.env.from == *from)
    }

    /// The error of the first failed flush, if one failed: from then on sends are refused
    /// until a restart (SPEC §12.1).
    pub fn flush_failed(&self) -> Option<&str> {
        self.flush_failed.as_deref()
    }

    /// Replies waiting for the store's flush.
    pub fn held_replies(&self) -> usize {
        self.held.len()
    }

    /// `reply` for an outcome the store must hold before the peer hears of it: while a batch
    /// is waiting for its flush, the line waits for that flush too.
    pub(super) fn reply_durable(
        &mut self,
        conn: ConnId,
        line: HubLine,
        outcome: &'static str,
        now: Now,
    ) {
        let Some(batch) = self.unsynced else {
            return self.reply(conn, &line, outcome, now);
        };
        self.set_deadline(conn, None);
        if let Some(c) = self.conns.get_mut(&conn) {
            c.phase = Phase::Syncing { outcome };
        }
        self.held.push_back(Held {
            batch,
            reply: HeldReply::Line {
                conn,
                line,
                outcome,
            },
        });
    }
}

/// Why every send is refused after a failed flush of the queue store (SPEC §12.1); the
/// error line reads `envelope not accepted: <this>`.
pub fn flush_failed_refusal(why: &str) -> String {
    format!(
        "an earlier flush of the queue store to disk failed ({why}); sends are refused until the hub is restarted"
    )
}

/// Why a send is refused while the queue store's backlog of changes is past
/// `limits.store_backlog_max_bytes` (SPEC §12.1); the error line reads
/// `envelope not accepted: <this>`.
pub fn store_backlog_refusal(backlog_bytes: usize, max_bytes: usize) -> String {
    format!(
        "the queue store has been failing and {backlog_bytes} bytes of changes wait for it, past limits.store_backlog_max_bytes ({max_bytes}); sends are refused until a commit succeeds"
    )
}
