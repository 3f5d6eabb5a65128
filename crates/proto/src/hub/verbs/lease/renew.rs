//! `lease_renew` (lease design §A.4, SPEC §17): the holder moves its lease's expiry to now +
//! `ttlSecs` (or the lease's own TTL), audited; answered with the record.
//!
//! A function over the machines it drives; refuses IO and every lease rule (the machine's).

use super::LeaseWork;
use crate::hub::conn_map::ConnId;
use crate::hub::conns::Conns;
use crate::hub::outbox::Outbox;
use crate::kernel::now::Now;
use crate::wire::lease::{LeaseRenew, LeaseRenewReply, LeaseReply};
use crate::wire::HubLine;

pub(in crate::hub) fn handle(
    conns: &mut Conns,
    out: &mut Outbox,
    mut work: LeaseWork<'_>,
    conn: ConnId,
    req: LeaseRenew,
    now: Now,
) {
    let asker = conns.asker(conn);
    match work.leases.renew(&asker, &req, now) {
        Err(why) => conns.fail(out, conn, &why, now),
        Ok(lease) => {
            let reply = LeaseReply::Renew(Box::new(LeaseRenewReply { lease }));
            conns.reply(out, conn, &HubLine::Lease(reply), "renewed", now);
        }
    }
    work.stage(conns, out, now);
}
