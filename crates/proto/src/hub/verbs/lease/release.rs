//! `lease_release` (lease design §A.3, §A.6, SPEC §17): only the holder releases; the lease
//! ends `released`, audited, and the waiters it blocked are granted in the same step. The
//! refusals name the lease and, for another owner's, its holder.
//!
//! A function over the machines it drives; refuses IO and every lease rule (the machine's).

use super::LeaseWork;
use crate::hub::conn_map::ConnId;
use crate::hub::conns::Conns;
use crate::hub::outbox::Outbox;
use crate::kernel::now::Now;
use crate::wire::lease::{LeaseOutcome, LeaseRelease, LeaseReply};
use crate::wire::HubLine;

pub(in crate::hub) fn handle(
    conns: &mut Conns,
    out: &mut Outbox,
    mut work: LeaseWork<'_>,
    conn: ConnId,
    req: LeaseRelease,
    now: Now,
) {
    let asker = conns.asker(conn);
    match work.leases.release(&asker, &req.lease, now, work.ids) {
        Err(why) => conns.fail(out, conn, &why, now),
        Ok(()) => {
            let reply = LeaseReply::Release(LeaseOutcome {
                lease: req.lease,
                outcome: "released".to_owned(),
            });
            conns.reply(out, conn, &HubLine::Lease(reply), "released", now);
        }
    }
    work.stage(conns, out, now);
}
