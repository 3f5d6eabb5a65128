//! The `send` verb (SPEC §5.1, §3.2, §12.3): the checks a client's envelope passes before it
//! is staged, the answer to a resend or a conflict, and what the commit of a staged send does
//! with it (`accept`) or how a refused staging is undone (`unstage`, `unclaim`). The
//! `accepted` line's optional `warning` is `hub::recipient`'s.

use crate::hub::admit;
use crate::hub::event::AuditEvent;
use crate::hub::ledger::{Record, State};
use crate::hub::session::Phase;
use crate::hub::{flush_failed_refusal, ConnId, Hub, Now, Staged, Target};
use crate::kernel::names::HUB_NAME;
use crate::wire::Envelope;

impl Hub {
    pub(in crate::hub) fn on_send(&mut self, conn: ConnId, mut env: Envelope, now: Now) {
        let name = self.conns[&conn]
            .name
            .clone()
            .expect("verb phase is authenticated");
        // Kinds only the hub writes (SPEC §3.4): a bounce, a task's outcome or progress. A
        // `task_outcome` from anyone else would end a delegator's `delegate --wait`.
        if let Some(kind) = crate::wire::envelope::hub_kind(&env.kind) {
            let why = crate::wire::EnvelopeError::ReservedKind(kind);
            return self.fail(conn, &format!("invalid envelope: {why}"), now);
        }
        if env.to.eq_ignore_ascii_case(HUB_NAME) {
            // Nobody can authenticate as the hub, so such an envelope could only pile up.
            return self.fail(
                conn,
                "invalid envelope: to \"hub\" names the hub itself, which receives nothing",
                now,
            );
        }
        if let Some(why) = self.task_send_refusal(&name, &env.to) {
            return self.fail(conn, why, now);
        }
        if let Some(why) = self.task_inbox_refusal(&name, &env.to) {
            return self.fail(conn, why, now);
        }
        env.from = name;
        match self.admit(&mut env, Some(conn), None) {
            admit::Admission::Staged => {
                self.set_deadline(conn, None);
                self.conns.get_mut(&conn).expect("caller checked").phase = Phase::Staged;
            }
            admit::Admission::Duplicate if self.flush_failed.is_some() => {
                let why = flush_failed_refusal(self.flush_failed.as_deref().unwrap_or(""));
                self.fail(conn, &format!("envelope not accepted: {why}"), now)
            }
            admit::Admission::Duplicate => {
                // A resend of an envelope already accepted (and durable): same answer, no copy.
                self.outputs.audit(AuditEvent::Duplicate {
                    conn,
                    id: env.id.clone(),
                });
                let line = self.accepted_line(conn, env.id, &env.to);
                self.reply_durable(conn, line, "duplicate", now)
            }
            admit::Admission::Conflict => {
                let msg = format!(
                    "id {:?} was already accepted from you with another destination, kind, correlationId or body; use a new id",
                    env.id
                );
                self.fail(conn, &msg, now)
            }
            admit::Admission::InProgress => {
                let msg = format!(
                    "a send with id {:?} is being accepted on another connection; retry",
                    env.id
                );
                self.fail(conn, &msg, now)
            }
            admit::Admission::Full(reason) => {
                self.outputs.audit(AuditEvent::Refused {
                    conn,
                    id: env.id,
                    reason: reason.clone(),
                });
                self.fail(conn, &reason, now)
            }
        }
    }

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
        if let Some(conn) = s.conn.filter(|c| self.conns.contains_key(c)) {
            let line = self.accepted_line(conn, s.env.id.to_string(), &s.env.to);
            self.reply_durable(conn, line, "accepted", now);
        }
        if let Some((peer, ack_id)) = &s.from_peer {
            self.outputs.audit(AuditEvent::Received {
                peer: peer.clone(),
                envelope: s.env.shared_text(),
            });
            self.ack_forward_durable(peer.clone(), ack_id.clone());
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
}
