//! The commit as the core's own output (PLAN.md "How a send becomes durable", SPEC §5.1,
//! §8, §12.1, §12.2): which staged sends, acks and store changes go into the next batch, the
//! `Output::Commit` that asks the IO layer to write it, and what follows from its result
//! (`committed`) and, for a store that flushes to disk, from its flush (`synced`): replies
//! released or held, sends refused, bounces kept for the next batch, the retry without sends
//! when a full store refuses them, the refusal of every send after a failed flush or past
//! `limits.store_backlog_max_bytes`.
//!
//! Owns the staged work (`staged`: sends, acks, task steps), the acceptance order
//! (`Queued::seq`), the batch lifecycle, the replies held for a flush, and the backlog of
//! changes that gate no reply (`pending`). Refuses IO: the loop writes a batch's store
//! operations, then its audit records, then commits the store, in that order, and reports
//! back; it keeps no copy and no rule. Refuses the connections too: what a result means for
//! a sender, a reader or a task is carried out by the hub's glue (`hub::settle`) from the
//! `Settled` this machine hands back.

mod pending;
mod staged;

pub(super) use staged::{Held, HeldReply, Rider, Staged, StagedAck, StagedTask, Target, TaskThen};

use super::conn_map::ConnId;
use super::durable::{StoreFailure, StoreOp};
use super::event::{AuditEvent, Batch, Output, PeerSend};
use super::id_key::Id;
use super::ledger::{self, Ledger, State};
use super::outbox::Outbox;
use super::router::Router;
use crate::kernel::now::Now;
use crate::tasks::{StartSpec, TaskAction, TaskBook, TaskCommit};
use crate::wire::{Envelope, HubLine};
use chrono::{DateTime, Utc};
use pending::PendingOps;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// How soon the loop comes back to commit staged work after a failed (or waiting) commit
/// point, when nothing else wakes it.
pub const COMMIT_RETRY: Duration = Duration::from_millis(500);

/// The core's commit state: what waits for a batch, the batch being written, and what waits
/// for the store's flush.
#[derive(Debug, Default)]
pub(super) struct Commits {
    /// Sends (and the hub's own envelopes) waiting for the next batch.
    staged: Vec<Staged>,
    /// Acks waiting for the next batch.
    staged_acks: Vec<StagedAck>,
    /// Task steps waiting for a batch (`StagedTask`).
    staged_tasks: Vec<StagedTask>,
    /// The next acceptance number (`Queued::seq`).
    next_seq: u64,
    /// Whether store operations are wanted (a durable store is configured).
    durable: bool,
    /// Store changes that gate no reply, waiting for the next batch.
    pending: PendingOps,
    /// The id of the next batch.
    next_id: u64,
    /// The batch the IO layer is writing.
    in_flight: Option<InFlight>,
    /// Whether committed batches wait for a flush to disk (`Hub::with_sync`, `store.sync = "full"`).
    pub(super) sync: bool,
    /// A batch of the current loop iteration failed: no further attempt until the next
    /// iteration (`handle_timeout`) or a flush report, so a failing store cannot spin the loop.
    round_failed: bool,
    /// The last outcome was a failure (for the service log's "succeed again").
    store_failing: bool,
    /// When the loop must come back for work a commit point left behind (a failed batch, or
    /// one held back by a running flush or checkpoint), if no other event wakes it first.
    retry_at: Option<Instant>,
    /// Replies waiting for the store's flush, in commit order.
    held: VecDeque<Held>,
    /// The newest committed batch whose flush has not been reported: while set, every
    /// `accepted` and `acked` reply waits for it (`hold`).
    unsynced: Option<u64>,
    /// Set by a failed flush: a duplicate resend can no longer be confirmed, since the first
    /// copy's pages may never reach the disk (the loop refuses new sends likewise).
    flush_failed: Option<String>,
    /// Tasks whose outcome was staged (their `task_ended` record): their leases end in the
    /// same batch (lease design §A.5; `take_ended_tasks`).
    ended_tasks: Vec<String>,
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

/// A batch's outcome, for the hub to carry out (`hub::settle`): separate outcomes for its
/// sends (and task steps, which share theirs) and its acks, and the time to settle them at.
#[derive(Debug)]
pub(super) struct Settled {
    pub(super) sends: Vec<Staged>,
    pub(super) sends_result: Result<(), String>,
    pub(super) tasks: Vec<StagedTask>,
    pub(super) acks: Vec<StagedAck>,
    pub(super) acks_result: Result<(), String>,
    /// Settled with the time its records were stamped with, as the loop's one commit was.
    pub(super) now: Now,
}

impl Commits {
    /// Asks for store operations in each batch (a durable store is configured).
    pub(super) fn set_durable(&mut self, durable: bool) {
        self.durable = durable;
    }

    /// A store change that gates no reply, committed with the next batch (durable store only).
    pub(super) fn store(&mut self, op: StoreOp) {
        if self.durable {
            self.pending.push(op);
        }
    }

    /// The next acceptance number.
    pub(super) fn take_seq(&mut self) -> u64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        seq
    }

    /// A restored envelope or id holds `seq`: every later acceptance comes after it.
    pub(super) fn restored_seq(&mut self, seq: u64) {
        self.next_seq = self.next_seq.max(seq + 1);
    }

    /// Stages a send (or a forwarded envelope) for the next batch.
    pub(super) fn stage(&mut self, staged: Staged) {
        self.staged.push(staged);
    }

    /// Stages an ack for the commit that makes it durable.
    pub(super) fn stage_ack(&mut self, ack: StagedAck) {
        self.staged_acks.push(ack);
    }

    /// Stages an envelope the hub itself sends (a bounce, a task's outcome or progress):
    /// queued for its recipient with a fresh place in acceptance order, waiving the caps
    /// (a notice of the hub's must never be refused, SPEC §5.5), with what rides along.
    pub(super) fn stage_hub_envelope(
        &mut self,
        router: &mut Router,
        env: &Envelope,
        rider: Option<Box<Rider>>,
    ) {
        let digest = ledger::digest(
            &env.to,
            &env.kind,
            env.correlation_id.as_deref(),
            env.body.get(),
        );
        let mut queued = router.queued_from(env, Id::new(&env.id));
        queued.seq = self.take_seq();
        self.staged.push(Staged {
            conn: None,
            from_peer: None,
            env: queued,
            target: Target::Queue { reserved: false },
            digest,
            rider,
        });
    }

    /// One task book commit: with an envelope, the envelope is staged and everything else
    /// rides with it (`Staged::rider`); without one, it is a `StagedTask` (answered to
    /// `reply_to` when given, `TaskThen::Reply`).
    pub(super) fn stage_task_commit(
        &mut self,
        router: &mut Router,
        c: TaskCommit,
        reply_to: Option<TaskThen>,
    ) {
        let store: Vec<StoreOp> = if self.durable {
            c.store.into_iter().map(StoreOp::Task).collect()
        } else {
            Vec::new()
        };
        // A task's outcome: its leases end with it (`take_ended_tasks`).
        for a in &c.audit {
            if let crate::tasks::TaskAudit::Ended { task, .. } = a {
                self.ended_tasks.push(task.clone());
            }
        }
        let audit: Vec<AuditEvent> = c.audit.into_iter().map(AuditEvent::Task).collect();
        let Some(env) = c.envelope else {
            let then = reply_to.unwrap_or(TaskThen::Nothing);
            self.staged_tasks.push(StagedTask { store, audit, then });
            return;
        };
        self.stage_hub_envelope(router, &env, Some(Box::new(Rider { store, audit })));
    }

    /// Starts a task's agent once the step staged last (its `running` state, queued just
    /// before) is written, so a crash in between reports `hub_restarted` instead of running
    /// the work twice.
    pub(super) fn stage_start(&mut self, spec: StartSpec) {
        match self.staged_tasks.last_mut() {
            Some(StagedTask {
                then: then @ TaskThen::Nothing,
                ..
            }) => *then = TaskThen::Start(Box::new(spec)),
            _ => self.staged_tasks.push(StagedTask {
                store: Vec::new(),
                audit: Vec::new(),
                then: TaskThen::Start(Box::new(spec)),
            }),
        }
    }

    /// Holds a message for a peer until the commit of the step that caused it: it rides on
    /// the last staged task step (that step's, or one staged before it in the same batch), or
    /// on an empty step of its own in the next batch (docs/delegation.md "Across hubs").
    pub(super) fn stage_peer_send(&mut self, send: PeerSend) {
        match self.staged_tasks.last_mut() {
            Some(StagedTask {
                then: then @ TaskThen::Nothing,
                ..
            }) => *then = TaskThen::ToPeer(vec![send]),
            Some(StagedTask {
                then: TaskThen::ToPeer(sends),
                ..
            }) => sends.push(send),
            _ => self.staged_tasks.push(StagedTask {
                store: Vec::new(),
                audit: Vec::new(),
                then: TaskThen::ToPeer(vec![send]),
            }),
        }
    }

    /// Carries out every instruction `book` queued: its commits staged (`stage_task_commit`),
    /// a start after the step before it (`stage_start`), a message to a peer held for its
    /// step's commit (`stage_peer_send`), a cancel and a log line out at once.
    pub(super) fn stage_task_actions(
        &mut self,
        book: &mut TaskBook,
        router: &mut Router,
        out: &mut Outbox,
    ) {
        while let Some(action) = book.poll_action() {
            match action {
                TaskAction::Commit(c) => self.stage_task_commit(router, c, None),
                // Its `running` state was queued just before: the agent starts once that
                // commit is written, so a crash in between reports `hub_restarted` instead of
                // running the work twice.
                TaskAction::Start(spec) => self.stage_start(spec),
                TaskAction::Cancel(task) => out.push(Output::CancelTask { task }),
                TaskAction::Answer { task, seq, answer } => {
                    out.push(Output::AnswerTask { task, seq, answer })
                }
                TaskAction::Log(line) => out.log(line),
                // A follow-up not answered to a verb (none yet): out after the steps before.
                TaskAction::Prompt {
                    task,
                    turn,
                    text,
                    interrupt,
                } => out.push(Output::PromptTask {
                    task,
                    turn,
                    text,
                    interrupt,
                }),
                TaskAction::Close(task) => out.push(Output::CloseTask { task }),
                // A relay peer's answer (issue 37 design §7): the agent hears it only once
                // its `request_answered` is written, as for the `task_answer` verb.
                TaskAction::AnswerCommit {
                    commit,
                    request,
                    decision,
                } => {
                    let then = TaskThen::PeerAnswer { request, decision };
                    self.stage_task_commit(router, commit, Some(then));
                }
                TaskAction::ToPeer {
                    peer,
                    payload,
                    handoff,
                } => self.stage_peer_send(PeerSend {
                    peer,
                    payload,
                    handoff,
                }),
            }
        }
    }

    /// A bounce kept for the next commit is accepted then, behind what is accepted
    /// meanwhile: it gets a fresh place in acceptance order.
    pub(super) fn restage_bounce(&mut self, mut s: Staged) {
        s.env.seq = self.take_seq();
        self.staged.push(s)
    }

    /// Stages a step with no envelope (a lease grant, `hub::verbs::lease`).
    pub(super) fn stage_step(&mut self, t: StagedTask) {
        self.staged_tasks.push(t);
    }

    /// The tasks whose outcome was staged since the last call (lease design §A.5).
    pub(super) fn take_ended_tasks(&mut self) -> Vec<String> {
        std::mem::take(&mut self.ended_tasks)
    }

    /// A task step whose batch failed is kept for the next batch, as a bounce is.
    pub(super) fn restage_task(&mut self, t: StagedTask) {
        self.staged_tasks.push(t);
    }

    /// Takes back the staged send of `conn` (its sender went away before the commit).
    pub(super) fn unstage_send_of(&mut self, conn: ConnId) -> Option<Staged> {
        let pos = self.staged.iter().position(|s| s.conn == Some(conn))?;
        Some(self.staged.remove(pos))
    }

    /// Takes back the staged delegation or answer to be answered on `conn` (its asker went
    /// away before the commit).
    pub(super) fn unstage_reply_to(&mut self, conn: ConnId) -> Option<StagedTask> {
        let pos = self.staged_tasks.iter().position(|t| match t.then {
            TaskThen::Reply { conn: c, .. }
            | TaskThen::Answer { conn: c, .. }
            | TaskThen::Prompt { conn: c, .. }
            | TaskThen::Line { conn: c, .. } => c == conn,
            TaskThen::Lease(ref g) => g.to == crate::hub::leases::GrantTo::Conn(conn),
            _ => false,
        })?;
        Some(self.staged_tasks.remove(pos))
    }

    /// The loop reached its commit point (after the input of an iteration, and again after
    /// socket writes produced more work): if anything waits and nothing holds it back, the
    /// core emits the next `Output::Commit`. `store_holds` says the store cannot take a commit
    /// now (a checkpoint that must copy the whole WAL runs; `store::flush`). `backlog_max` is
    /// `limits.store_backlog_max_bytes`; `ledger` names each acked envelope's reader.
    ///
    /// While a flush is running, a commit made now could confirm nothing before the next
    /// flush anyway, so the staged work is gathered into one batch once the running flush
    /// reports. Only a handoff to a parked await commits at once, because its reader gets the
    /// envelope at the commit (SPEC §12.1).
    pub(super) fn commit_point(
        &mut self,
        now: Now,
        store_holds: bool,
        backlog_max: usize,
        ledger: &Ledger,
        out: &mut Outbox,
    ) {
        if !self.has_commit_work() {
            self.retry_at = None;
            return;
        }
        let flush_running =
            self.unsynced.is_some() && !self.has_staged_handoff() && self.flush_failed.is_none();
        if self.in_flight.is_some() || self.round_failed || store_holds || flush_running {
            self.retry_at = Some(now.mono + COMMIT_RETRY);
            return;
        }
        self.retry_at = None;
        let with_sends = !self.staged.is_empty() || !self.staged_tasks.is_empty();
        let backlog = self.pending.bytes();
        let max = backlog_max;
        if let Some(why) = &self.flush_failed {
            // The kernel may have dropped written pages: nothing new may be promised durable
            // until a restart (SPEC §12.1); acks and removals are still written.
            let refused = flush_failed_refusal(why);
            self.emit_batch(false, Some(Err(refused)), now, ledger, out);
        } else if with_sends && backlog > max {
            // The store has been failing long enough that its backlog reached the bound: it
            // is drained (with the acks) before any send is tried again (SPEC §12.1).
            let refused = store_backlog_refusal(backlog, max);
            self.emit_batch(false, Some(Err(refused)), now, ledger, out);
        } else {
            self.emit_batch(true, None, now, ledger, out);
        }
    }

    /// Moves the staged work into a batch and emits it. Without `with_sends` the staged sends
    /// ride along unwritten, their outcome `sends_result`.
    fn emit_batch(
        &mut self,
        with_sends: bool,
        sends_result: Option<Result<(), String>>,
        now: Now,
        ledger: &Ledger,
        out: &mut Outbox,
    ) {
        let work = Work {
            sends: std::mem::take(&mut self.staged),
            acks: std::mem::take(&mut self.staged_acks),
            tasks: std::mem::take(&mut self.staged_tasks),
        };
        self.emit_batch_of(work, with_sends, sends_result, now, ledger, out);
    }

    fn emit_batch_of(
        &mut self,
        work: Work,
        with_sends: bool,
        sends_result: Option<Result<(), String>>,
        now: Now,
        ledger: &Ledger,
        out: &mut Outbox,
    ) {
        let Work { sends, tasks, acks } = work;
        let ops = std::mem::take(&mut self.pending);
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
                    reader: ledger.reader_of(&a.env.from, &a.env.id),
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
        let sync =
            self.sync && (!written.is_empty() || !acks.is_empty() || !written_tasks.is_empty());
        self.next_id = self.next_id.max(1);
        let id = self.next_id;
        self.next_id += 1;
        self.in_flight = Some(InFlight {
            id,
            sends,
            tasks,
            acks,
            ops,
            sends_result,
            sync,
            wall: now.wall,
        });
        out.push(Output::Commit(Batch {
            id,
            store_ops,
            audit,
            sync,
        }));
    }

    /// The IO layer's report on batch `id`: written in full (`Ok`), or not at all. On `Ok`
    /// the staged sends are to be accepted and routed and the acks settled (their replies
    /// wait for `synced` when the batch has `sync`); on `Err` each sender gets an error line,
    /// each acking reader its envelope back, and the changes that gate nothing wait for the
    /// next batch. A failed batch that carried sends is tried once more at once without them:
    /// a full store must still record acks and delivery removals, which are what free its
    /// room; then nothing is settled yet. Logs the store's change of health, and returns what
    /// the hub must carry out; None for an unknown batch or a retry.
    pub(super) fn committed(
        &mut self,
        id: u64,
        result: Result<(), StoreFailure>,
        now: Now,
        ledger: &Ledger,
        out: &mut Outbox,
    ) -> Option<Settled> {
        // From here on the failure is the text of the refusals it causes.
        let result = result.map_err(|e| e.to_string());
        let f = self.in_flight.take_if(|f| f.id == id)?;
        // Settled with the time its records were stamped with, as the loop's one commit was.
        let now = Now {
            mono: now.mono,
            wall: f.wall,
        };
        let (sends_result, acks_result) = match result {
            Ok(()) => {
                if f.sync {
                    self.unsynced = Some(id);
                }
                (f.sends_result.unwrap_or(Ok(())), Ok(()))
            }
            Err(e) => {
                // The changes it took wait again, ahead of any emitted meanwhile.
                let newer = std::mem::replace(&mut self.pending, f.ops);
                for op in newer.to_vec() {
                    self.pending.push(op);
                }
                if f.sends_result.is_none() && !(f.sends.is_empty() && f.tasks.is_empty()) {
                    let work = Work {
                        sends: f.sends,
                        tasks: f.tasks,
                        acks: f.acks,
                    };
                    self.emit_batch_of(work, false, Some(Err(e)), now, ledger, out);
                    return None;
                }
                (f.sends_result.unwrap_or_else(|| Err(e.clone())), Err(e))
            }
        };
        match (&sends_result, &acks_result) {
            (Ok(()), Ok(())) => {
                if std::mem::take(&mut self.store_failing) {
                    out.log("commits succeed again".to_owned());
                }
            }
            (Err(e), _) | (_, Err(e)) => {
                self.round_failed = true;
                if !std::mem::replace(&mut self.store_failing, true) {
                    out.log_error(format!(
                        "commit failed: {e}; sends are refused until it succeeds"
                    ));
                }
            }
        }
        Some(Settled {
            sends: f.sends,
            sends_result,
            tasks: f.tasks,
            acks: f.acks,
            acks_result,
            now,
        })
    }

    /// After a failed batch is settled: the loop comes back for what still waits.
    pub(super) fn retry_soon(&mut self, now: Now) {
        if self.has_commit_work() {
            self.retry_at = Some(now.mono + COMMIT_RETRY);
        }
    }

    /// The store's flush to disk of every batch up to some `through` is reported with
    /// `result`: a commit may be tried again (a flush report is news from the store), and the
    /// first failure is logged. Then the hub takes the held replies (`take_held`) and ends
    /// with `synced_end`.
    pub(super) fn synced_begin(&mut self, result: &Result<(), String>, out: &mut Outbox) {
        self.round_failed = false;
        if let Err(e) = result {
            if self.flush_failed.is_none() {
                out.log_error(format!(
                    "flushing the queue store to disk failed: {e}; sends are refused until the hub is restarted (check the disk)"
                ));
            }
        }
    }

    /// The oldest held reply whose batch's flush is reported (`through`), if any.
    pub(super) fn take_held(&mut self, through: u64) -> Option<HeldReply> {
        if !self.held.front().is_some_and(|h| h.batch <= through) {
            return None;
        }
        self.held.pop_front().map(|h| h.reply)
    }

    /// The flush report is carried out: a failure refuses every send from now on until a
    /// restart (SPEC §12.1), and a flush through the last committed batch releases the hold.
    pub(super) fn synced_end(&mut self, through: u64, result: Result<(), String>) {
        if let Err(why) = result {
            self.flush_failed.get_or_insert(why);
        }
        if self.unsynced.is_some_and(|b| b <= through) {
            self.unsynced = None;
        }
    }

    /// The batch whose flush a final reply must wait for now, if one is running.
    pub(super) fn unsynced(&self) -> Option<u64> {
        self.unsynced
    }

    /// Holds `reply` until the flush of `batch` is reported.
    pub(super) fn hold(&mut self, batch: u64, reply: HeldReply) {
        self.held.push_back(Held { batch, reply });
    }

    /// Answers a peer's forward with "queued" once that is durable (SPEC §12.1): at once, or
    /// with the flush the last commit waits for.
    pub(super) fn ack_forward_durable(&mut self, peer: String, ack_id: String, out: &mut Outbox) {
        match self.unsynced {
            Some(batch) => self.hold(batch, HeldReply::ForwardAck { peer, ack_id }),
            None => out.push(Output::ForwardAck {
                peer,
                ack_id,
                error: None,
            }),
        }
    }

    /// A new loop iteration: a commit that failed in the last one may be tried again.
    pub(super) fn new_round(&mut self) {
        self.round_failed = false;
    }

    /// When the loop must come back to commit what waits, if anything does.
    pub(super) fn poll_timeout(&self) -> Option<Instant> {
        self.retry_at.filter(|_| self.has_commit_work())
    }

    /// Sends, bounces or acks wait for a batch.
    pub(super) fn has_staged(&self) -> bool {
        !self.staged.is_empty() || !self.staged_acks.is_empty() || !self.staged_tasks.is_empty()
    }

    /// Anything waits for a batch: staged sends, acks, or changes that gate nothing.
    pub(super) fn has_commit_work(&self) -> bool {
        self.has_staged() || !self.pending.is_empty()
    }

    /// Sends (or bounces) wait for a batch, or are in the one being written.
    pub(super) fn has_staged_sends(&self) -> bool {
        !self.staged.is_empty() || self.in_flight.as_ref().is_some_and(|f| !f.sends.is_empty())
    }

    /// A batch was emitted and its result is not reported yet.
    pub(super) fn in_flight(&self) -> bool {
        self.in_flight.is_some()
    }

    /// A staged send goes straight to a parked await: its reader waits for the commit, not
    /// only its sender.
    fn has_staged_handoff(&self) -> bool {
        self.staged
            .iter()
            .any(|s| matches!(s.target, Target::Waiter(_)))
    }

    /// A send from `from` with `id` is staged or in the batch being written.
    pub(super) fn is_staged(&self, from: &str, id: &Id) -> bool {
        let in_flight = self.in_flight.iter().flat_map(|f| f.sends.iter());
        self.staged
            .iter()
            .chain(in_flight)
            .any(|s| s.env.id == *id && *s.env.from == *from)
    }

    /// The error of the first failed flush, if one failed: from then on sends are refused
    /// until a restart (SPEC §12.1).
    pub(super) fn flush_failed(&self) -> Option<&str> {
        self.flush_failed.as_deref()
    }

    /// Replies waiting for the store's flush.
    pub(super) fn held_replies(&self) -> usize {
        self.held.len()
    }

    /// The line of a held reply whose flush failed: what was recorded, and that it may not
    /// survive a machine crash (SPEC §12.1).
    pub(super) fn flush_failure_text(line: &HubLine, why: &str) -> String {
        let what = match line {
            HubLine::Acked { id } => format!("the ack of {id:?} was recorded"),
            HubLine::Accepted { id, .. } => format!("envelope {id:?} was queued"),
            _ => "the outcome was recorded".to_owned(),
        };
        format!(
            "{what} but the queue store's flush to disk failed ({why}): it may not survive a machine crash; after the hub is restarted, a resend with the same id is answered as a duplicate if it survived, or accepted anew if not"
        )
    }
}

/// The staged work a batch takes.
struct Work {
    sends: Vec<Staged>,
    tasks: Vec<StagedTask>,
    acks: Vec<StagedAck>,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hub::durable::StoreFailure;

    fn clock() -> impl Fn(u64) -> Now {
        let origin = crate::kernel::deadline::test_origin();
        let wall = chrono::DateTime::parse_from_rfc3339("2026-07-21T06:40:51Z")
            .expect("fixed time")
            .with_timezone(&Utc);
        move |ms| Now {
            mono: origin + Duration::from_millis(ms),
            wall: wall + chrono::Duration::milliseconds(ms as i64),
        }
    }

    fn bounce(id: &str) -> Envelope {
        Envelope::new(
            id.into(),
            "hub".into(),
            "alice".into(),
            "2026-07-21T06:40:51Z".into(),
            "bounce".into(),
            None,
            "{}".into(),
        )
        .expect("valid body")
    }

    fn batch(out: &mut Outbox) -> Batch {
        match out.pop() {
            Some(Output::Commit(b)) => b,
            other => panic!("expected a batch, got {other:?}"),
        }
    }

    /// Staged work goes out as one numbered batch (rows only from a durable store); its
    /// result hands the sends back with the time the records were stamped with.
    #[test]
    fn staged_work_becomes_one_batch_and_its_result_is_handed_back() {
        let now = clock();
        let (mut c, mut out, mut router) = (
            Commits::default(),
            Outbox::default(),
            Router::new(10, 1 << 20),
        );
        let ledger = Ledger::new(60, 100);
        c.commit_point(now(0), false, usize::MAX, &ledger, &mut out);
        assert_eq!(out.pop(), None, "nothing waits");
        c.set_durable(true);
        c.stage_hub_envelope(&mut router, &bounce("b1"), None);
        c.store(StoreOp::Remove { seq: 9 });
        assert!(c.has_staged() && c.has_staged_sends());
        assert!(c.is_staged("hub", &Id::new("b1")));
        c.commit_point(now(1), false, usize::MAX, &ledger, &mut out);
        let b = batch(&mut out);
        assert_eq!(b.id, 1);
        assert!(matches!(
            b.store_ops[..],
            [StoreOp::Remove { seq: 9 }, StoreOp::Insert { seq: 0, .. }]
        ));
        assert!(matches!(
            b.audit[..],
            [AuditEvent::Accepted { conn: None, .. }]
        ));
        assert!(c.in_flight() && !c.has_staged());
        assert!(
            c.is_staged("hub", &Id::new("b1")),
            "in the batch being written"
        );
        // A second commit point waits for the first batch's result.
        c.commit_point(now(2), false, usize::MAX, &ledger, &mut out);
        assert_eq!(out.pop(), None);
        assert!(
            c.committed(99, Ok(()), now(3), &ledger, &mut out).is_none(),
            "not ours"
        );
        let s = c
            .committed(1, Ok(()), now(3), &ledger, &mut out)
            .expect("settled");
        assert_eq!(
            (s.sends.len(), s.sends_result, s.acks_result),
            (1, Ok(()), Ok(()))
        );
        assert_eq!(s.now.wall, now(1).wall, "stamped when the batch was made");
        assert!(!c.in_flight() && !c.has_commit_work());
        assert_eq!(out.pop(), None);
    }

    /// A batch with sends that fails is written again at once without them; the sends are
    /// refused, the health change is logged once, and the next success says so.
    #[test]
    fn a_failed_batch_is_retried_without_its_sends_and_the_store_is_watched() {
        let now = clock();
        let (mut c, mut out, mut router) = (
            Commits::default(),
            Outbox::default(),
            Router::new(10, 1 << 20),
        );
        let ledger = Ledger::new(60, 100);
        c.stage_hub_envelope(&mut router, &bounce("b1"), None);
        c.commit_point(now(0), false, usize::MAX, &ledger, &mut out);
        let first = batch(&mut out);
        let full = || Err(StoreFailure::new("disk full"));
        assert!(c
            .committed(first.id, full(), now(1), &ledger, &mut out)
            .is_none());
        let retry = batch(&mut out);
        assert!(retry.audit.is_empty(), "the retry writes no sends");
        let s = c
            .committed(retry.id, full(), now(2), &ledger, &mut out)
            .expect("settled");
        assert_eq!(s.sends_result, Err("disk full".into()));
        assert_eq!(
            out.pop(),
            Some(Output::LogError(
                "commit failed: disk full; sends are refused until it succeeds".into()
            ))
        );
        // The bounce is kept for the next round with a fresh place in acceptance order.
        let mut sends = s.sends;
        c.restage_bounce(sends.pop().expect("the bounce"));
        c.retry_soon(now(2));
        assert_eq!(c.poll_timeout(), Some(now(2).mono + COMMIT_RETRY));
        c.commit_point(now(3), false, usize::MAX, &ledger, &mut out);
        assert_eq!(out.pop(), None, "not again in the round that failed");
        c.new_round();
        c.commit_point(now(4), false, usize::MAX, &ledger, &mut out);
        let third = batch(&mut out);
        assert!(c
            .committed(third.id, Ok(()), now(5), &ledger, &mut out)
            .is_some());
        assert_eq!(out.pop(), Some(Output::Log("commits succeed again".into())));
    }

    /// Replies held for a flush come out in commit order up to the flushed batch; a failed
    /// flush refuses sends until a restart; a peer's ack is held while a flush runs.
    #[test]
    fn held_replies_wait_for_their_flush() {
        let now = clock();
        let (mut c, mut out, mut router) = (
            Commits::default(),
            Outbox::default(),
            Router::new(10, 1 << 20),
        );
        let ledger = Ledger::new(60, 100);
        c.sync = true;
        c.stage_hub_envelope(&mut router, &bounce("b1"), None);
        c.commit_point(now(0), false, usize::MAX, &ledger, &mut out);
        let b = batch(&mut out);
        assert!(b.sync);
        c.committed(b.id, Ok(()), now(1), &ledger, &mut out);
        assert_eq!(c.unsynced(), Some(b.id));
        c.ack_forward_durable("west".into(), "m1".into(), &mut out);
        assert_eq!(out.pop(), None, "held for the flush");
        assert_eq!(c.held_replies(), 1);
        let failed = Err("EIO".to_owned());
        c.synced_begin(&failed, &mut out);
        assert!(matches!(out.pop(), Some(Output::LogError(l)) if l.contains("EIO")));
        assert!(matches!(
            c.take_held(b.id),
            Some(HeldReply::ForwardAck { ref peer, .. }) if peer == "west"
        ));
        assert!(c.take_held(b.id).is_none());
        c.synced_end(b.id, failed);
        assert_eq!((c.unsynced(), c.flush_failed()), (None, Some("EIO")));
        c.ack_forward_durable("west".into(), "m2".into(), &mut out);
        assert!(matches!(
            out.pop(),
            Some(Output::ForwardAck { error: None, .. })
        ));
        c.stage_hub_envelope(&mut router, &bounce("b2"), None);
        c.commit_point(now(2), false, usize::MAX, &ledger, &mut out);
        let refused = batch(&mut out);
        assert!(
            refused.audit.is_empty(),
            "no send is written after a failed flush"
        );
        let s = c
            .committed(refused.id, Ok(()), now(3), &ledger, &mut out)
            .expect("settled");
        assert_eq!(s.sends_result, Err(flush_failed_refusal("EIO")));
    }

    /// Task steps: a start rides on the step staged before it, peer messages gather on one.
    #[test]
    fn task_steps_gather_what_follows_their_commit() {
        let mut c = Commits::default();
        let send = || PeerSend {
            peer: "west".into(),
            payload: crate::relay::message::Payload::Ack(crate::relay::message::Ack {
                ack_id: "m".into(),
                resync: None,
                error: None,
            }),
            handoff: None,
        };
        c.stage_peer_send(send());
        c.stage_peer_send(send());
        assert_eq!(c.staged_tasks.len(), 1);
        assert!(matches!(&c.staged_tasks[0].then, TaskThen::ToPeer(v) if v.len() == 2));
        assert!(c.unstage_reply_to(7).is_none());
        c.restage_task(StagedTask {
            store: Vec::new(),
            audit: Vec::new(),
            then: TaskThen::Reply {
                conn: 7,
                task: crate::tasks::TaskId::parse("task-0123456789abcdef0123456789abcdef")
                    .expect("a task id"),
            },
        });
        assert!(c.unstage_reply_to(7).is_some());
        assert!(c.unstage_send_of(7).is_none());
    }
}
