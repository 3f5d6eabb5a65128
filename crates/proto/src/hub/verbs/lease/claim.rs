//! `lease_claim` (lease design §A.2, SPEC §17): refused with the machine's text, granted
//! after the commit of its record, answered at once (`conflict`, an idempotent re-claim,
//! `queued` for `notify`), or parked on the connection (`Phase::LeaseWait`) until a grant,
//! its `timeoutSecs` (answered with the `timeout` outcome, not the bare `timeout` line, so a
//! client tells it from an await's) or its close.
//!
//! A function over the machines it drives; refuses IO and every lease rule (the machine's).

use super::LeaseWork;
use crate::hub::conn_map::ConnId;
use crate::hub::conns::{Conns, Phase};
use crate::hub::leases::Claimed;
use crate::hub::outbox::Outbox;
use crate::kernel::now::Now;
use crate::wire::lease::{LeaseClaim, LeaseReply};
use crate::wire::HubLine;

pub(in crate::hub) fn handle(
    conns: &mut Conns,
    out: &mut Outbox,
    mut work: LeaseWork<'_>,
    conn: ConnId,
    req: LeaseClaim,
    now: Now,
) {
    let owner = conns.asker(conn);
    if conns.shutting_down() {
        return conns.fail(
            out,
            conn,
            "invalid lease_claim: the hub is shutting down",
            now,
        );
    }
    match work.leases.claim(&owner, &req, conn, now, work.ids) {
        Err(why) => conns.fail(out, conn, &why, now),
        Ok(Claimed::Staged) => {}
        Ok(Claimed::Reply(reply)) => {
            let outcome = if reply.outcome == crate::wire::lease::CONFLICT {
                "conflict"
            } else {
                "lease_claim"
            };
            conns.reply(
                out,
                conn,
                &HubLine::Lease(LeaseReply::Claim(reply)),
                outcome,
                now,
            );
        }
        Ok(Claimed::Park { waiter, deadline }) => {
            conns.set_deadline(conn, deadline);
            if let Some(c) = conns.get_mut(&conn) {
                c.phase = Phase::LeaseWait { waiter };
            }
        }
    }
    work.stage(conns, out, now);
}
