//! The `send` verb (SPEC §5.1, §3.2, §12.3): the checks a client's envelope passes before it
//! is staged, the answer to a resend or a conflict, and what the commit of a staged send does
//! with it (`accept`) or how a refused staging is undone (`unstage`, `unclaim`). The
//! `accepted` line's optional `warning` is `hub::recipient`'s.

use crate::hub::admit;
use crate::hub::conns::Phase;
use crate::hub::event::AuditEvent;
use crate::hub::{flush_failed_refusal, ConnId, Hub, Now};
use crate::kernel::names::HUB_NAME;
use crate::wire::Envelope;

impl Hub {
    pub(in crate::hub) fn on_send(&mut self, conn: ConnId, mut env: Envelope, now: Now) {
        let name = self.conns.asker(conn);
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
            admit::Admission::Duplicate if self.commit.flush_failed().is_some() => {
                let why = flush_failed_refusal(self.commit.flush_failed().unwrap_or(""));
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
}
