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
pub(super) mod lease;
pub(super) mod send;
pub(super) mod status;
pub(super) mod task_answer;
pub(super) mod task_close;
pub(super) mod task_permission;
pub(super) mod task_prompt;
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

/// The machines a verb's tests build without a hub.
#[cfg(test)]
pub(in crate::hub) mod fixture {
    use super::View;
    use crate::hub::conn_map::ConnId;
    use crate::hub::conns::{Conns, Phase};
    use crate::hub::limits::Limits;
    use crate::hub::memory::Memory;
    use crate::hub::outbox::Outbox;
    use crate::hub::presence::PresenceBook;
    use crate::hub::router::{Filter, Router};
    use crate::hub::settings::Settings;
    use crate::kernel::now::Now;
    use crate::roster::Roster;
    use chrono::{DateTime, Utc};
    use std::time::Duration;

    /// A roster of `ops` and `bee`, the machines empty.
    pub(in crate::hub) struct Machines {
        pub(in crate::hub) settings: Settings,
        pub(in crate::hub) conns: Conns,
        pub(in crate::hub) router: Router,
        pub(in crate::hub) presence: PresenceBook,
        pub(in crate::hub) memory: Memory,
        pub(in crate::hub) out: Outbox,
        pub(in crate::hub) now: Now,
    }

    impl Machines {
        pub(in crate::hub) fn new() -> Machines {
            let roster = Roster::parse("[agents]\nops = \"tok-ops\"\nbee = \"tok-bee\"\n")
                .expect("test roster is valid");
            let settings = Settings::new(roster, Limits::example());
            let (router, ledger) = (settings.new_router(), settings.new_ledger());
            let wall = DateTime::parse_from_rfc3339("2026-07-21T06:40:51Z")
                .expect("fixed time")
                .with_timezone(&Utc);
            Machines {
                settings,
                conns: Conns::default(),
                router,
                presence: PresenceBook::default(),
                memory: Memory::new(ledger),
                out: Outbox::default(),
                now: Now {
                    mono: crate::kernel::deadline::test_origin(),
                    wall,
                },
            }
        }

        /// `name` authenticated on `conn`, in its verb phase.
        pub(in crate::hub) fn agent(&mut self, conn: ConnId, name: &str) {
            let deadline = self.now.mono + Duration::from_secs(1);
            self.conns.open(conn, deadline, self.now);
            assert!(self.conns.authenticated(&mut self.out, conn, name, 8));
            let c = self.conns.get_mut(&conn).expect("open");
            c.name = Some(name.to_owned());
            c.phase = Phase::Verb;
            while self.out.pop().is_some() {}
        }

        /// `name` parks an await on `conn` for replies to `reply_to`.
        pub(in crate::hub) fn park(&mut self, conn: ConnId, name: &str, reply_to: &str) {
            self.agent(conn, name);
            let filter = Filter {
                reply_to: Some(reply_to.to_owned()),
                kind: None,
            };
            let parked = self.router.park(name, filter, conn);
            self.conns.get_mut(&conn).expect("open").phase = Phase::Parked {
                parked,
                deadline: None,
                ack: false,
            };
        }

        pub(in crate::hub) fn view(&self) -> View<'_> {
            View {
                settings: &self.settings,
                conns: &self.conns,
                router: &self.router,
                presence: &self.presence,
                memory: &self.memory,
                tasks: None,
                forwarding: None,
            }
        }
    }
}
