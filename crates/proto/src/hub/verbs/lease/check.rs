//! `lease_check` (lease design §A.7, SPEC §17): the edit guard's one round trip. For each
//! path, the other owners' active exclusive leases that hold it; `self` (a task identity)
//! is honoured only while that task is live, and can only loosen the asker's own check. No
//! store op; a `held` verdict is audited (`lease_guarded`).
//!
//! A function over the machines it drives; refuses IO and every lease rule (the machine's).

use crate::hub::conn_map::ConnId;
use crate::hub::conns::Conns;
use crate::hub::event::AuditEvent;
use crate::hub::leases::{Effect, Leases};
use crate::hub::outbox::Outbox;
use crate::kernel::now::Now;
use crate::wire::lease::{LeaseCheck, LeaseReply};
use crate::wire::HubLine;

pub(in crate::hub) fn handle(
    conns: &mut Conns,
    out: &mut Outbox,
    leases: &mut Leases,
    live_task: &dyn Fn(&str) -> bool,
    conn: ConnId,
    req: LeaseCheck,
    now: Now,
) {
    let asker = conns.asker(conn);
    let self_task = req.self_.as_deref().filter(|t| live_task(t));
    match leases.check(&asker, &req, self_task) {
        Err(why) => conns.fail(out, conn, &why, now),
        Ok(reply) => {
            let verdict = if reply.held.is_empty() {
                "free"
            } else {
                "held"
            };
            conns.reply(
                out,
                conn,
                &HubLine::Lease(LeaseReply::Check(reply)),
                verdict,
                now,
            );
        }
    }
    // A check queues nothing but its `lease_guarded` records.
    while let Some(effect) = leases.poll_effect() {
        if let Effect::Audit(a) = effect {
            out.audit(AuditEvent::Lease(a));
        }
    }
}
