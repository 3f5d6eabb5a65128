//! What a commit batch's result means across the hub (PLAN.md "How a send becomes durable",
//! SPEC §5.1, §8, §12.1, §12.2; docs/delegation.md "Durability"): a committed send accepted,
//! answered and routed, a refused one undone; an ack settled or its envelope given back; a
//! task step answered, started, sent to its peer or kept; and, once the store's flush is
//! reported, the replies it held released or turned into errors.
//!
//! The hub's own glue, as `impl Hub`: `hub::commit` decides batches and hands back their
//! outcome (`Settled`, the held replies); carrying it out touches the connections, the
//! ledger, the router, the task book and the outputs at once, which is the hub's job and
//! no one machine's. Refuses IO, like the rest of the core.

use super::commit::{Commits, HeldReply, Staged, StagedAck, StagedTask, Target, TaskThen};
use super::conn_map::ConnId;
use super::conns::{Conn, Phase};
use super::durable::StoreFailure;
use super::event::{AuditEvent, Output};
use super::ledger::{Record, State};
use super::recipient::Known;
use super::verbs;
use super::Hub;
use crate::kernel::now::Now;
use crate::wire::HubLine;

impl Hub {
    /// The IO layer's report on batch `id`: written in full (`Ok`), or not at all. On `Ok`
    /// the staged sends are accepted and routed and the acks settled (their replies wait for
    /// `handle_synced` when the batch has `sync`); on `Err` each sender gets an error line,
    /// each acking reader its envelope back, and the changes that gate nothing wait for the
    /// next batch. A failed batch that carried sends is tried once more at once without them:
    /// a full store must still record acks and delivery removals, which are what free its room.
    pub fn handle_committed(&mut self, id: u64, result: Result<(), StoreFailure>, now: Now) {
        let ledger = &self.memory.ledger;
        let Some(s) = self
            .commit
            .committed(id, result, now, ledger, &mut self.outputs)
        else {
            return;
        };
        let failed = s.acks_result.is_err();
        let now = s.now;
        let tasks_result = s.sends_result.clone();
        self.settle_sends(s.sends, s.sends_result, now);
        self.settle_acks(s.acks, s.acks_result, now);
        self.settle_staged_tasks(s.tasks, &tasks_result, now);
        // An answer settled here may decide a parked permission prompt (design §6): it is
        // answered now, not at the next commit point.
        self.answer_prompts(now);
        if failed {
            self.commit.retry_soon(now);
        }
    }

    fn settle_sends(&mut self, sends: Vec<Staged>, result: Result<(), String>, now: Now) {
        for s in sends {
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
                    self.commit.restage_bounce(s)
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
                self.conns.get(&a.conn),
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
        self.commit.synced_begin(&result, &mut self.outputs);
        while let Some(reply) = self.commit.take_held(through) {
            let (conn, line, outcome) = match reply {
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
                self.conns.get(&conn),
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
                    let msg = Commits::flush_failure_text(&line, why);
                    self.fail(conn, &msg, now);
                }
            }
        }
        self.commit.synced_end(through, result);
    }

    /// `reply` for an outcome the store must hold before the peer hears of it
    /// (`verbs::reply_durable`): while a batch is waiting for its flush, the line waits too.
    pub(super) fn reply_durable(
        &mut self,
        conn: ConnId,
        line: HubLine,
        outcome: &'static str,
        now: Now,
    ) {
        let (conns, out, commit) = (&mut self.conns, &mut self.outputs, &mut self.commit);
        verbs::reply_durable(conns, out, commit, conn, line, outcome, now);
    }

    /// The commit of a staged send: the ledger remembers it, its sender is answered (once the
    /// store's flush allows), a forwarding peer acked, and the envelope is handed to its
    /// claimed waiter or routed.
    pub(in crate::hub) fn accept(&mut self, s: Staged, now: Now) {
        let e = &s.env;
        let record = Record {
            to: e.to.clone(),
            digest: crate::hub::ledger::short(&s.digest),
            accepted_ms: now.wall.timestamp_millis(),
            state: State::Queued,
            state_ms: now.wall.timestamp_millis(),
            seq: e.seq,
            ack_pending: false,
            reader: None,
        };
        self.memory.ledger.remember(&e.from, &e.id, record);
        if self.memory.ledger.over_budget() {
            // Past `idempotency_max_ids` or `idempotency_max_bytes`: the earliest settled ids
            // go now, not at the next interval (a flood of sends must not outgrow the budget
            // by ten seconds' worth).
            self.memory.purge_soon(now);
        }
        self.presence.recent.note(e, now.wall.timestamp_millis());
        // A sender that went away while its batch was being written gets no reply.
        if let Some(conn) = s.conn.filter(|c| self.conns.contains(c)) {
            let known = Known {
                roster: &self.settings.roster,
                forwarding: self.forwarding.as_ref(),
                tasks: self.tasks.as_ref(),
            };
            let line = known.accepted_line(&self.conns, conn, s.env.id.to_string(), &s.env.to);
            self.reply_durable(conn, line, "accepted", now);
        }
        if let Some((peer, ack_id)) = &s.from_peer {
            self.outputs.audit(AuditEvent::Received {
                peer: peer.clone(),
                envelope: s.env.shared_text(),
            });
            self.commit
                .ack_forward_durable(peer.clone(), ack_id.clone(), &mut self.outputs);
        }
        match s.target {
            Target::Waiter(waiter) => match self.conns.get(&waiter).map(|c| (&c.phase, c.eof)) {
                Some((&Phase::Claimed { ack, .. }, false)) => {
                    self.hand_off(waiter, s.env, ack, now)
                }
                // The claimed waiter went away meanwhile: route as if it had never parked.
                _ => self.route(s.env, false, now),
            },
            Target::Queue { reserved } => {
                if reserved {
                    self.router.release(&s.env.to, s.env.size_bytes());
                }
                self.route(s.env, false, now);
            }
        }
    }

    /// Reverses a staging: frees its reservation or re-parks its claimed waiter in place.
    pub(in crate::hub) fn unstage(&mut self, s: Staged, reason: &str, now: Now) {
        match s.target {
            Target::Queue { reserved: true } => self.router.release(&s.env.to, s.env.size_bytes()),
            Target::Queue { reserved: false } => {}
            Target::Waiter(waiter) => self.unclaim(waiter, now),
        }
        if let Some(conn) = s.conn {
            let reason = reason.to_owned();
            self.outputs.audit(AuditEvent::Refused {
                conn,
                id: s.env.id.to_string(),
                reason,
            });
        }
    }

    /// A claimed waiter whose envelope did not come goes back to its place in its tier.
    pub(in crate::hub) fn unclaim(&mut self, waiter: ConnId, now: Now) {
        let Some(c) = self.conns.get_mut(&waiter) else {
            return;
        };
        let Phase::Claimed {
            parked,
            deadline,
            ack,
        } = std::mem::replace(&mut c.phase, Phase::Done)
        else {
            return;
        };
        if c.eof {
            return; // already finished in handle_eof
        }
        self.router.repark(&parked, waiter);
        c.phase = Phase::Parked {
            parked,
            deadline,
            ack,
        };
        self.set_deadline(waiter, deadline);
        if deadline.is_some_and(|d| d <= now.mono) {
            self.handle_timeout(now);
        }
    }

    /// A grant's record is written (lease design §A.2): its claimer is answered `granted`
    /// (after the store's flush when one runs); a claimer whose connection went away meanwhile
    /// never hears of it, so the lease is released at once (`closed`) and given on.
    fn lease_granted(&mut self, g: crate::hub::leases::Grant, now: Now) {
        let crate::hub::leases::GrantTo::Conn(conn) = g.to else {
            return;
        };
        // A client that half-closed after its line still reads its answer, as a sender's.
        let waiting = matches!(
            self.conns.get(&conn),
            Some(Conn {
                phase: Phase::Staged,
                ..
            })
        );
        if !waiting {
            self.leases.unclaimed(&g.lease, now, &mut *self.ids);
            self.stage_leases(now);
            return;
        }
        let line = HubLine::Lease(crate::wire::lease::LeaseReply::Claim(Box::new(g.reply())));
        self.reply_durable(conn, line, "granted", now);
    }

    /// A grant's commit failed: the lease is taken back; a waiter is parked again in its
    /// place (and its deadline), a claim granted at once is refused with the store's reason.
    fn lease_not_granted(&mut self, g: crate::hub::leases::Grant, why: &str, now: Now) {
        let to = g.to;
        let waiter = self.leases.revoke(g);
        let crate::hub::leases::GrantTo::Conn(conn) = to else {
            return;
        };
        if !self.conns.contains(&conn) {
            if let Some(w) = waiter {
                self.end_lease_wait(&w.id, crate::hub::leases::WaitEnd::Closed, now);
            }
            return;
        }
        match waiter {
            Some(w) => {
                if let Some(c) = self.conns.get_mut(&conn) {
                    c.phase = Phase::LeaseWait { waiter: w.id };
                }
                self.set_deadline(conn, w.deadline);
                // Granted again for the next batch, as a bounce is kept: a free resource
                // must not leave its first waiter waiting for some later release.
                self.leases.regrant(now, &mut *self.ids);
                self.stage_leases(now);
            }
            None => self.fail(conn, &format!("lease_claim not accepted: {why}"), now),
        }
    }

    /// The outcome of a batch for its task steps.
    pub(super) fn settle_staged_tasks(
        &mut self,
        tasks: Vec<StagedTask>,
        result: &Result<(), String>,
        now: Now,
    ) {
        for t in tasks {
            match (result, t.then) {
                (Ok(()), TaskThen::Reply { conn, task }) => {
                    // Committed as queued; starting it is a later step of its own. Where
                    // `auto` placed it rides along (issue 38 design §5).
                    let reply = match self.tasks.as_ref() {
                        Some(book) => book.delegated_reply(&task),
                        None => crate::wire::DelegatedReply {
                            task: task.as_str().to_owned(),
                            state: "queued".to_owned(),
                            ..Default::default()
                        },
                    };
                    let line = HubLine::Delegated(reply);
                    if self.conns.contains(&conn) {
                        self.reply_durable(conn, line, "delegated", now);
                    }
                    let (mut work, out) = self.task_work();
                    work.start(now, out);
                }
                (Ok(()), TaskThen::Start(spec)) => {
                    self.outputs.push(Output::StartTask(spec));
                }
                (Ok(()), TaskThen::Nothing) => {}
                (
                    Ok(()),
                    TaskThen::Answer {
                        conn,
                        request,
                        reply,
                        decision,
                    },
                ) => {
                    let (mut work, out) = self.task_work();
                    if let Some(book) = work.book.as_deref_mut() {
                        book.answer_settled(&request, true, Some(*decision));
                    }
                    work.drain(out);
                    if self.conns.contains(&conn) {
                        let line = HubLine::TaskAnswer(reply);
                        self.reply_durable(conn, line, "task_answer", now);
                    }
                }
                (
                    Ok(()),
                    TaskThen::Prompt {
                        conn, reply, go, ..
                    },
                ) => {
                    // The turn is durable: the runner gets it, then the asker hears.
                    if let crate::tasks::TaskAction::Prompt {
                        task,
                        turn,
                        text,
                        interrupt,
                    } = *go
                    {
                        self.outputs.push(Output::PromptTask {
                            task,
                            turn,
                            text,
                            interrupt,
                        });
                    }
                    if self.conns.contains(&conn) {
                        let line = HubLine::TaskPrompt(reply);
                        self.reply_durable(conn, line, "task_prompt", now);
                    }
                }
                (Err(why), TaskThen::Prompt { conn, undo, .. }) => {
                    if let Some(book) = self.tasks.as_mut() {
                        book.prompt_failed(*undo);
                    }
                    if self.conns.contains(&conn) {
                        self.fail(conn, &format!("task_prompt not accepted: {why}"), now);
                    }
                }
                (Ok(()), TaskThen::Line { conn, line, tag }) => {
                    if self.conns.contains(&conn) {
                        self.reply_durable(conn, *line, tag, now);
                    }
                }
                (Err(why), TaskThen::Line { conn, tag, .. }) => {
                    if self.conns.contains(&conn) {
                        self.fail(conn, &format!("{tag} not accepted: {why}"), now);
                    }
                }
                (Ok(()), TaskThen::PeerAnswer { request, decision }) => {
                    let (mut work, out) = self.task_work();
                    if let Some(book) = work.book.as_deref_mut() {
                        book.answer_settled(&request, true, Some(*decision));
                    }
                    work.drain(out);
                }
                (Err(_), TaskThen::PeerAnswer { request, .. }) => {
                    let (mut work, out) = self.task_work();
                    if let Some(book) = work.book.as_deref_mut() {
                        book.answer_settled(&request, false, None);
                    }
                    work.drain(out);
                }
                (Err(why), TaskThen::Answer { conn, request, .. }) => {
                    let (mut work, out) = self.task_work();
                    if let Some(book) = work.book.as_deref_mut() {
                        book.answer_settled(&request, false, None);
                    }
                    work.drain(out);
                    if self.conns.contains(&conn) {
                        self.fail(conn, &format!("task_answer not accepted: {why}"), now);
                    }
                }
                (Ok(()), TaskThen::Lease(g)) => self.lease_granted(*g, now),
                (Err(why), TaskThen::Lease(g)) => self.lease_not_granted(*g, why, now),
                (Ok(()), TaskThen::ToPeer(sends)) => {
                    for send in sends {
                        self.outputs.push(Output::ToPeer(Box::new(send)));
                    }
                }
                (Err(why), TaskThen::Reply { conn, task }) => {
                    if let Some(book) = self.tasks.as_mut() {
                        book.withdraw(&task);
                    }
                    let msg = format!("delegation not accepted: {why}");
                    if self.conns.contains(&conn) {
                        self.fail(conn, &msg, now);
                    }
                }
                (Err(_), then) => {
                    // Kept for the next batch, as a bounce is: the book already counts the
                    // task as started, and starting it waits for its state to be durable.
                    self.commit.restage_task(StagedTask {
                        store: t.store,
                        audit: t.audit,
                        then,
                    });
                }
            }
        }
    }
}
