//! An envelope's path across the machines (SPEC §5, §5.3, §12.2, §15): an accepted envelope
//! handed to the best waiter, queued, or handed to a peer hub's link; the hand-off of a
//! delivery line and the moment it is consumed (its first byte taken by the socket); an
//! envelope's state in the ledger and the store, which wakes the status waits on it; the
//! loss of a committed delivery and the bounce that tells its sender; envelopes that come
//! back; and the forwarding window's traffic with peer hubs.
//!
//! The hub's own glue, as `impl Hub`: each of these touches the router, the connections, the
//! ledger, the staging and the outputs at once. The rules they apply are the machines'
//! (`router`, `conns`, `memory`, `commit`, `forward`). Refuses IO, like the rest of the core.
//!
//! Envelopes that come back: which returns count as an attempt, the cap on attempts
//! (`limits.max_deliveries`) past which a local envelope is given up and bounced instead of
//! delivered again, and the reason `status` gives for an envelope that is gone
//! (`hub::memory`). An attempt is a delivery that reached its reader — the reader's socket
//! took its first byte — and came back without an ack: the reader closed, sent something
//! other than the ack, or let the ack deadline pass. That is how an envelope that makes its
//! reader crash shows itself. Returns that are not the reader's doing count for nothing: a
//! delivery that never reached the reader (zero bytes written, SPEC §5.3), an ack that was
//! read but whose commit failed, and a delivery still open when a stopping hub released its
//! connection (SPEC §4.6). Forwards to a peer hub count their returns as attempts too
//! (`hub::forward`), but are never given up: a link that drops or a peer whose store fails
//! is not the envelope's fault, and a peer refuses for good any envelope it cannot take, in
//! its ack.
use super::admit::{Admission, Admit};
use super::conn_map::ConnId;
use super::conns::{Conn, Phase};
use super::event::{AuditEvent, Output};
use super::forward::{self, FORWARD_WINDOW_BYTES};
use super::ledger::{IdText, State};
use super::pipeline::AckInput;
use super::router::Queued;
use super::verbs::{self, status};
use super::Hub;
use crate::hub::durable::StoreOp;
use crate::kernel::names::HUB_NAME;
use crate::kernel::now::Now;
use crate::wire::{Envelope, Reader};
use chrono::SecondsFormat;

impl Hub {
    /// The socket accepted the first byte of the delivery: the envelope is consumed (SPEC §5.3).
    /// In ack mode the envelope stays the hub's until the ack (SPEC §12.2).
    pub fn handle_delivery_committed(&mut self, conn: ConnId, now: Now) {
        let Some(Conn {
            phase:
                Phase::Delivering {
                    env,
                    committed,
                    ack,
                },
            ..
        }) = self.conns.get_mut(&conn)
        else {
            return;
        };
        if *committed {
            return;
        }
        *committed = true;
        let ack = *ack;
        self.presence.delivered_to(&env.to, now);
        let (id, to, from, seq) = (env.id.clone(), env.to.clone(), env.from.clone(), env.seq);
        // Every delivery line goes to an await, which declared its kind (or none).
        let reader = self.conns.get(&conn).and_then(|c| c.reader);
        let reader = reader.unwrap_or(Reader::Unknown);
        self.memory.ledger.set_reader(&from, &id, reader);
        self.outputs.audit(AuditEvent::Delivered {
            conn,
            id: id.to_string(),
            to: to.to_string(),
            ack,
        });
        if ack {
            // Only the ledger: on disk the envelope stays queued until its ack is durable,
            // and a restart queues it again anyway, so a durable "delivered" would cost a
            // commit per delivery and say nothing a restart keeps.
            self.memory.ledger.set_state(
                &from,
                &id,
                State::Delivered,
                true,
                now.wall.timestamp_millis(),
            );
            self.receipt_changed(&from, &id, now);
            // The line after this delivery that came before its first byte was taken (while
            // parked, or while the socket was full) is the ack candidate now.
            let held = self.conns.get_mut(&conn).and_then(|c| c.held_ack.take());
            if let Some(input) = held {
                self.ack_input(conn, *input, now);
            }
        } else {
            self.commit.store(StoreOp::Remove { seq });
            self.set_state(&from, &id, State::Delivered, false, now);
        }
    }

    /// Hands an accepted envelope to the best waiter, else queues it (a returned envelope back
    /// in its acceptance place, ahead of newer ones; a new one at the back). Caps are not
    /// checked here: the envelope is already accepted, and refusing it now would lose it.
    pub(super) fn route(&mut self, env: Queued, returned: bool, now: Now) {
        if let Some(peer) = self.remote_peer(&env.to) {
            if returned {
                self.router.requeue_shared(env);
            } else {
                self.router.enqueue_shared(env);
            }
            return self.pump_forward(&peer, now);
        }
        match self.router.claim_waiter(&env) {
            Some((waiter, _)) => {
                let ack = matches!(
                    self.conns.get(&waiter),
                    Some(Conn {
                        phase: Phase::Parked { ack: true, .. },
                        ..
                    })
                );
                self.hand_off(waiter, env, ack, now)
            }
            // Its names are the router's shared copies already (`Router::queued_from`).
            None if returned => self.router.requeue_shared(env),
            None => self.router.enqueue_shared(env),
        }
    }

    /// An envelope handed out (to a reader or a peer hub) came back unconsumed: one more
    /// attempt, durably, and queued again in the ledger.
    pub(super) fn count_return(&mut self, env: &mut Queued, now: Now) {
        env.attempts = env.attempts.saturating_add(1);
        self.commit.store(StoreOp::Attempts {
            seq: env.seq,
            attempts: env.attempts,
        });
        let (from, id) = (env.from.clone(), env.id.clone());
        self.set_state(&from, &id, State::Queued, false, now);
    }

    /// Hands `env` to the await on `conn` (`Conns::hand_off`); in ack mode the ack is due
    /// within `limits.ack_timeout_ms`.
    pub(super) fn hand_off(&mut self, conn: ConnId, env: Queued, ack: bool, now: Now) {
        let ack_timeout = self.settings.limits.ack_timeout();
        let deadline = crate::kernel::deadline::after(now.mono, ack_timeout);
        self.conns
            .hand_off(&mut self.outputs, conn, env, ack, deadline, now);
    }

    /// Records a state change in the ledger and, with a durable store, on disk.
    pub(super) fn set_state<I: IdText + ?Sized>(
        &mut self,
        sender: &str,
        id: &I,
        state: State,
        ack_pending: bool,
        now: Now,
    ) {
        if let Some(op) = self.memory.set_state(sender, id, state, ack_pending, now) {
            self.commit.store(op);
            self.receipt_changed(sender, id, now);
        }
    }

    /// A committed delivery was cut short: audit the loss and bounce it to its sender.
    pub(super) fn lose(&mut self, conn: ConnId, env: Queued, reason: &str, now: Now) {
        let bounced = &*env.kind != Envelope::BOUNCE_KIND;
        let state = if bounced { State::Bounced } else { State::Lost };
        self.settle_gone(&env, state, reason, now);
        self.outputs.audit(AuditEvent::Lost {
            conn,
            id: env.id.to_string(),
            to: env.to.to_string(),
            reason: reason.to_owned(),
            bounced,
        });
        if !bounced {
            return; // a lost bounce is not bounced again
        }
        self.stage_bounce(&env, reason, None, now);
    }

    /// Stages the hub's notice to `env`'s sender that `env` is gone (SPEC §5.3): kind
    /// `bounce`, `from` hub, `correlationId` the lost envelope's id. It waives the caps. A
    /// bounce for an envelope given up after its deliveries (SPEC §12.2) also says how many.
    pub(super) fn stage_bounce(
        &mut self,
        env: &Queued,
        reason: &str,
        attempts: Option<u32>,
        now: Now,
    ) {
        let attempts = attempts.map_or_else(String::new, |n| format!(",\"attempts\":{n}"));
        let body = format!(
            "{{\"id\":{},\"to\":{},\"reason\":{}{attempts}}}",
            env.id.with_text(crate::wire::to_json),
            crate::wire::to_json(&*env.to),
            crate::wire::to_json(reason)
        );
        let bounce = Envelope::new(
            self.ids.next_id(),
            HUB_NAME.to_owned(),
            env.from.to_string(),
            now.wall.to_rfc3339_opts(SecondsFormat::Millis, true),
            Envelope::BOUNCE_KIND.to_owned(),
            Some(env.id.to_string()),
            body,
        )
        .expect("the bounce body is built from JSON strings");
        self.commit
            .stage_hub_envelope(&mut self.router, &bounce, None);
    }

    /// The remembered envelope `(sender, id)` changed: every status wait it ends is answered
    /// now (`verbs::status::changed`). Every ledger change that can end a wait calls it.
    pub(super) fn receipt_changed<I: IdText + ?Sized>(&mut self, sender: &str, id: &I, now: Now) {
        let at = status::Lookup {
            memory: &self.memory,
            router: &self.router,
        };
        status::changed(&mut self.conns, &mut self.outputs, at, sender, id, now);
    }

    // ----- envelopes that come back (SPEC §12.2, §12.4) -----

    /// The line after an ack-mode delivery (`verbs::ack`): a matching ack is staged for the
    /// commit; anything else ends the delivery with an error line, the envelope given back.
    pub(super) fn ack_input(&mut self, conn: ConnId, input: AckInput, now: Now) {
        if let Some(msg) = verbs::ack::handle(&mut self.conns, &mut self.commit, conn, input) {
            self.return_unacked(conn, &msg, now);
        }
    }

    /// Ends an ack-mode delivery without an ack: an error line, and the envelope goes back.
    pub(super) fn return_unacked(&mut self, conn: ConnId, message: &str, now: Now) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        let Phase::Delivering { env, committed, .. } = std::mem::replace(&mut c.phase, Phase::Done)
        else {
            return;
        };
        self.fail(conn, message, now);
        self.give_back(conn, *env, message, committed, now);
    }

    /// A delivery that was not consumed goes back to routing. `reached_reader`: the reader's
    /// socket took its first byte and the reader did not ack (an attempt, counted durably);
    /// an envelope whose attempts reach `limits.max_deliveries` is given up instead.
    pub(super) fn give_back(
        &mut self,
        conn: ConnId,
        mut env: Queued,
        reason: &str,
        reached_reader: bool,
        now: Now,
    ) {
        // A delivery the stopping hub itself ended (SPEC §4.6) is no attempt either.
        if reached_reader && !self.conns.shutting_down() {
            self.count_return(&mut env, now);
            if env.attempts >= self.settings.limits.max_deliveries
                && self.remote_peer(&env.to).is_none()
            {
                return self.give_up(conn, env, reason, now);
            }
        } else {
            let (from, id) = (env.from.clone(), env.id.clone());
            self.set_state(&from, &id, State::Queued, false, now);
        }
        self.outputs.audit(AuditEvent::Requeued {
            conn,
            id: env.id.to_string(),
            to: env.to.to_string(),
            reason: reason.to_owned(),
            attempts: env.attempts,
        });
        self.route(env, true, now);
    }

    /// The envelope reached its reader `limits.max_deliveries` times and was never acked: it
    /// leaves its queue for good, durably, and its sender gets a bounce that says why and how
    /// often (a bounce given up on is not bounced again).
    fn give_up(&mut self, conn: ConnId, env: Queued, last: &str, now: Now) {
        let bounced = &*env.kind != Envelope::BOUNCE_KIND;
        let reason = format!(
            "not acked after {} deliveries, the most limits.max_deliveries allows; the last ended: {last}",
            env.attempts
        );
        let state = if bounced { State::Bounced } else { State::Lost };
        self.commit.store(StoreOp::Remove { seq: env.seq });
        self.settle_gone(&env, state, &reason, now);
        self.outputs.audit(AuditEvent::GivenUp {
            conn,
            id: env.id.to_string(),
            to: env.to.to_string(),
            reason: reason.clone(),
            attempts: env.attempts,
            bounced,
        });
        // No id or name: the service log holds no client value (SPEC §8.2).
        self.outputs.log(format!(
            "conn={conn} an envelope was not acked after {} deliveries (limits.max_deliveries); {}",
            env.attempts,
            if bounced {
                "bounced to its sender"
            } else {
                "it was a bounce: dropped"
            }
        ));
        if bounced {
            self.stage_bounce(&env, &reason, Some(env.attempts), now);
        }
    }

    /// Records that `env` is gone (`Bounced` or `Lost`) and why, in the ledger and the store,
    /// so that `status` can say it, across restarts with a durable store.
    pub(super) fn settle_gone(&mut self, env: &Queued, state: State, reason: &str, now: Now) {
        if let Some(op) = self.memory.settle_gone(env, state, reason, now) {
            self.commit.store(op);
            self.receipt_changed(&env.from, &env.id, now);
        }
    }

    // ----- mail across hubs (SPEC §15; `forward`) -----

    /// The relay link with `peer` is up and agreed `bus-forward`: start handing it mail.
    pub fn handle_link_up(&mut self, peer: &str, now: Now) {
        if !self
            .forwarding
            .as_mut()
            .is_some_and(|f| f.set_up(peer, true))
        {
            return;
        }
        self.pump_forward(peer, now);
    }

    /// The link with `peer` is gone: everything it had not acked is queued again, in
    /// acceptance order, for the next link.
    pub fn handle_link_down(&mut self, peer: &str, reason: &str, now: Now) {
        if !self
            .forwarding
            .as_mut()
            .is_some_and(|f| f.set_up(peer, false))
        {
            return;
        }
        self.requeue_inflight(peer, reason, now);
    }

    /// The peer acked the envelope of acceptance `seq` (`Output::Forward`). `error` None: it
    /// is queued there, durably, and leaves this hub. `error` Some: refused for good (or the
    /// link could not carry it); it is bounced to its sender. An ack for an envelope no longer
    /// in flight (requeued after a deadline, then acked late) is ignored: the copy sent
    /// again is answered as a duplicate.
    pub fn handle_forward_ack(&mut self, peer: &str, seq: u64, error: Option<String>, now: Now) {
        let Some(env) = self.forwarding.as_mut().and_then(|f| f.acked(peer, seq)) else {
            return;
        };
        self.commit.store(StoreOp::Remove { seq });
        let (from, id) = (env.from.clone(), env.id.clone());
        self.outputs.audit(AuditEvent::ForwardAcked {
            peer: peer.to_owned(),
            id: id.to_string(),
            to: env.to.to_string(),
            attempts: env.attempts,
            error: error.clone(),
        });
        match error {
            None => self.set_state(&from, &id, State::Forwarded, false, now),
            Some(why) => {
                let bounced = &*env.kind != Envelope::BOUNCE_KIND;
                let state = if bounced { State::Bounced } else { State::Lost };
                let reason = format!("refused by {peer}: {why}");
                self.settle_gone(&env, state, &reason, now);
                if bounced {
                    self.stage_bounce(&env, &reason, None, now);
                }
            }
        }
        self.pump_forward(peer, now);
    }

    /// A `bus_forward` from `peer` (relay message id `ack_id`) carrying `text`, an envelope
    /// addressed `name@<this hub>`. Checked, restamped (`from` gets `@peer`, `to` loses
    /// `@<this hub>`), deduplicated by sender and id, and staged like a send: the ack goes
    /// out once it is durable. A refusal is acked at once with its reason (the sending hub
    /// bounces the envelope); a failure of this hub's store is not acked at all (the peer
    /// sends it again).
    pub fn handle_forwarded(&mut self, peer: &str, ack_id: String, text: &str, hop: u32) {
        let (roster, max_line) = (&self.settings.roster, self.settings.limits.max_line_bytes);
        let checked = forward::check(self.forwarding.as_ref(), roster, max_line, peer, text, hop);
        let mut env = match checked {
            Ok(env) => env,
            Err((id, reason)) => return self.refuse_forward(peer, ack_id, id, reason),
        };
        if self.commit.flush_failed().is_some() {
            let msg = format!(
                "an envelope from {peer} not queued: an earlier flush of the queue store failed; not acked until the hub is restarted"
            );
            return self.outputs.log(msg);
        }
        let from_peer = Some((peer.to_owned(), ack_id.clone()));
        let mut admit = Admit {
            commit: &mut self.commit,
            ledger: &self.memory.ledger,
            router: &mut self.router,
        };
        let admission = admit.admit(&mut self.conns, &mut env, None, from_peer);
        match admission {
            Admission::Staged => {}
            Admission::Duplicate => {
                self.commit
                    .ack_forward_durable(peer.to_owned(), ack_id, &mut self.outputs)
            }
            Admission::Conflict => {
                let reason = format!(
                    "id {:?} was already accepted from {} with another destination, kind, correlationId or body",
                    env.id, env.from
                );
                self.refuse_forward(peer, ack_id, env.id, reason)
            }
            // A resend while the first copy waits for its commit: that copy's ack answers
            // for both (the sender maps either ack to the same envelope).
            Admission::InProgress => {}
            Admission::Full(reason) => self.refuse_forward(peer, ack_id, env.id, reason),
        }
    }

    /// Hands the link with `peer` the oldest queued envelopes for it while it is up and its
    /// window has room.
    pub(super) fn pump_forward(&mut self, peer: &str, now: Now) {
        loop {
            let Some(f) = &self.forwarding else { return };
            let Some((busy, in_bytes)) = f.room(peer) else {
                return;
            };
            let roster = &self.settings.roster;
            let Some(env) = self
                .router
                .take_oldest_where(|name| forward::queued_for(peer, roster, name))
            else {
                return;
            };
            if busy && in_bytes + env.size_bytes() > FORWARD_WINDOW_BYTES {
                // Its turn comes with the next ack.
                return self.router.requeue(env);
            }
            let ms = now.wall.timestamp_millis();
            // Ledger only, as for an ack-mode delivery: on disk it stays queued until acked.
            self.memory
                .ledger
                .set_state(&env.from, &env.id, State::Delivered, true, ms);
            self.receipt_changed(&env.from, &env.id, now);
            self.outputs.audit(AuditEvent::Forwarded {
                peer: peer.to_owned(),
                id: env.id.to_string(),
                to: env.to.to_string(),
            });
            self.outputs.push(Output::Forward {
                peer: peer.to_owned(),
                seq: env.seq,
                envelope: env.shared_text(),
            });
            if let Some(f) = self.forwarding.as_mut() {
                f.sent(peer, env, now);
            }
        }
    }

    /// A link whose oldest forward went unacked past the deadline has everything in flight
    /// queued again and sent again (the peer answers what it already has as duplicates).
    pub(super) fn expire_forwards(&mut self, now: Now) {
        let Some(f) = &self.forwarding else { return };
        let ack_timeout = f.ack_timeout();
        let stuck = f.stuck(now);
        if stuck.is_empty() {
            return;
        }
        let reason = format!("no ack within {} ms", ack_timeout.as_millis());
        for peer in stuck {
            self.requeue_inflight(&peer, &reason, now);
            self.pump_forward(&peer, now);
        }
    }

    fn refuse_forward(&mut self, peer: &str, ack_id: String, id: String, reason: String) {
        self.outputs.audit(AuditEvent::ForwardRefused {
            peer: peer.to_owned(),
            id,
            reason: reason.clone(),
        });
        self.outputs.push(Output::ForwardAck {
            peer: peer.to_owned(),
            ack_id,
            error: Some(reason),
        });
    }

    /// An unacked forward goes back to its queue in acceptance order, its attempt counted.
    fn forward_back(&mut self, peer: &str, mut env: Queued, reason: &str, now: Now) {
        self.count_return(&mut env, now);
        self.outputs.audit(AuditEvent::ForwardRequeued {
            peer: peer.to_owned(),
            id: env.id.to_string(),
            to: env.to.to_string(),
            reason: reason.to_owned(),
            attempts: env.attempts,
        });
        self.router.requeue(env);
    }

    /// Everything in flight to `peer` goes back to its queues, in acceptance order.
    fn requeue_inflight(&mut self, peer: &str, reason: &str, now: Now) {
        let Some(f) = self.forwarding.as_mut() else {
            return;
        };
        for env in f.take_inflight(peer) {
            self.forward_back(peer, env, reason, now);
        }
    }
}
