//! Envelopes that come back (SPEC §12.2, §12.4): which returns count as an attempt, the cap on
//! attempts (`limits.max_deliveries`) past which a local envelope is given up and bounced
//! instead of delivered again, and the reason `status` gives for an envelope that is gone.
//!
//! Owns `Hub::give_back`, `Hub::give_up` and the `reasons` of bounced and lost envelopes.
//! Refuses IO, like the rest of the core.
//!
//! An attempt is a delivery that reached its reader — the reader's socket took its first byte —
//! and came back without an ack: the reader closed, sent something other than the ack, or let
//! the ack deadline pass. That is how an envelope that makes its reader crash shows itself.
//! Returns that are not the reader's doing count for nothing: a delivery that never reached the
//! reader (zero bytes written, SPEC §5.3), an ack that was read but whose commit failed, and a
//! delivery still open when a stopping hub released its connection (SPEC §4.6).
//! Forwards to a peer hub count their returns as attempts too (`hub::forward`), but are never
//! given up: a link that drops or a peer whose store fails is not the envelope's fault, and a
//! peer refuses for good any envelope it cannot take, in its ack.

use super::{AuditEvent, ConnId, Hub, Now, Queued, State, StoreOp};
use crate::wire::Envelope;

impl Hub {
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
}
