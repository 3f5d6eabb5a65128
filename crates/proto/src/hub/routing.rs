//! Routing glue between the verbs and the `Router` (SPEC §5, §5.3): an accepted envelope
//! handed to the best waiter or queued, the hand-off of a delivery line and the moment it
//! is consumed (its first byte taken by the socket), an envelope's state in the ledger and
//! the store, the loss of a committed delivery and the bounce that tells its sender, and the
//! acceptance order (`Queued::seq`). Refuses IO, like the rest of the core.

use super::conns::{Conn, Phase};
use super::event::AuditEvent;
use super::ledger::{IdText, State};
use super::router::Queued;
use super::verbs::status;
use super::{ConnId, Hub, Now};
use crate::hub::durable::StoreOp;
use crate::kernel::names::HUB_NAME;
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
                self.on_ack_input(conn, *input, now);
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
}
