//! `lease_break` (lease design §A.6, SPEC §17): an operator (SPEC §14 "Visibility":
//! `operators` in the config) ends another owner's lease; audited with who broke it (never
//! the reason), and its owner gets `lease_lost` with `why: "broken"`, `by` and the reason.
//!
//! A function over the machines it drives; refuses IO and every lease rule (the machine's).

use super::LeaseWork;
use crate::hub::conn_map::ConnId;
use crate::hub::conns::Conns;
use crate::hub::outbox::Outbox;
use crate::kernel::now::Now;
use crate::wire::lease::{LeaseBreak, LeaseOutcome, LeaseReply};
use crate::wire::HubLine;

pub(in crate::hub) fn handle(
    conns: &mut Conns,
    out: &mut Outbox,
    mut work: LeaseWork<'_>,
    operator: bool,
    conn: ConnId,
    req: LeaseBreak,
    now: Now,
) {
    let asker = conns.asker(conn);
    match work
        .leases
        .break_lease(&asker, operator, &req, now, work.ids)
    {
        Err(why) => conns.fail(out, conn, &why, now),
        Ok(()) => {
            let reply = LeaseReply::Break(LeaseOutcome {
                lease: req.lease,
                outcome: "broken".to_owned(),
            });
            conns.reply(out, conn, &HubLine::Lease(reply), "broken", now);
        }
    }
    work.stage(conns, out, now);
}
