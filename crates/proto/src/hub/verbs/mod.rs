//! One file per verb (SPEC §4.3, §5, §12, §14, §16), each holding that verb as functions over
//! the machines it reads and drives, named by the verb (`who::answer`, `send::handle`), and
//! called from the one dispatcher (`hub::session`). The read-only verbs (`who`, `activity`)
//! are functions over a `View` of the machines, testable without a hub; the others take the
//! machines they change. What they share is here: the `View`, and the durable reply.
//!
//! Refuses `impl Hub`: a verb never names the hub, only its machines (PLAN.md §14
//! "Sub-machines"). Refuses IO, like the rest of the core.

pub(super) mod ack;
pub(super) mod activity;
pub(super) mod await_;
pub(super) mod delegate;
pub(super) mod send;
pub(super) mod status;
pub(super) mod turn;
pub(super) mod who;

use super::commit::{Commits, HeldReply};
use super::conn_map::ConnId;
use super::conns::{Conns, Phase};
use super::forward::Forwarding;
use super::memory::Memory;
use super::outbox::Outbox;
use super::presence::PresenceBook;
use super::router::Router;
use super::settings::Settings;
use crate::kernel::now::Now;
use crate::roster::Roster;
use crate::tasks::TaskBook;
use crate::wire::HubLine;

/// What `who` and `activity` read, borrowed shared: every name, state, queue and the last
/// envelopes, never changed by a query.
#[derive(Clone, Copy)]
pub(in crate::hub) struct View<'a> {
    pub(in crate::hub) settings: &'a Settings,
    pub(in crate::hub) conns: &'a Conns,
    pub(in crate::hub) router: &'a Router,
    pub(in crate::hub) presence: &'a PresenceBook,
    pub(in crate::hub) memory: &'a Memory,
    pub(in crate::hub) tasks: Option<&'a TaskBook>,
    pub(in crate::hub) forwarding: Option<&'a Forwarding>,
}

impl View<'_> {
    /// The peer hub `to` belongs to, if this hub forwards to it (`Forwarding::remote_peer`).
    pub(in crate::hub) fn remote_peer(&self, to: &str) -> Option<String> {
        remote_peer(self.forwarding, &self.settings.roster, to)
    }
}

/// The peer hub `to` belongs to: `name@peer` where `peer` is a forwarding peer and `to` is not
/// itself a roster name (`Forwarding::remote_peer`); None without forwarding.
pub(in crate::hub) fn remote_peer(
    forwarding: Option<&Forwarding>,
    roster: &Roster,
    to: &str,
) -> Option<String> {
    forwarding?.remote_peer(roster, to)
}

/// `reply` for an outcome the store must hold before the peer hears of it: while a batch is
/// waiting for its flush, the line waits for that flush too (SPEC §12.1; `Commits::hold`).
pub(in crate::hub) fn reply_durable(
    conns: &mut Conns,
    out: &mut Outbox,
    commit: &mut Commits,
    conn: ConnId,
    line: HubLine,
    outcome: &'static str,
    now: Now,
) {
    let Some(batch) = commit.unsynced() else {
        return conns.reply(out, conn, &line, outcome, now);
    };
    conns.set_deadline(conn, None);
    if let Some(c) = conns.get_mut(&conn) {
        c.phase = Phase::Syncing { outcome };
    }
    commit.hold(
        batch,
        HeldReply::Line {
            conn,
            line,
            outcome,
        },
    );
}
