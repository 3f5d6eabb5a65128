//! `lease_list` (lease design §0, SPEC §17): the active leases matching the filters, each
//! with the claims waiting behind it, and the waiting claims. Every name sees every lease:
//! leases are coordination data (design §A.6).
//!
//! A function over the lease machine, read only; refuses IO.

use crate::hub::conn_map::ConnId;
use crate::hub::conns::Conns;
use crate::hub::leases::Leases;
use crate::hub::outbox::Outbox;
use crate::kernel::now::Now;
use crate::wire::lease::{LeaseList, LeaseReply};
use crate::wire::HubLine;

pub(in crate::hub) fn handle(
    conns: &mut Conns,
    out: &mut Outbox,
    leases: &Leases,
    conn: ConnId,
    req: LeaseList,
    now: Now,
) {
    let reply = LeaseReply::List(leases.list(&req));
    conns.reply(out, conn, &HubLine::Lease(reply), "lease_list", now);
}
