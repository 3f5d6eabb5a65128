//! Connections that have not authenticated, and how many connections each name holds (SPEC
//! §4.6, §6.2, §8.1, §8.2; issue 29 "Strangers cannot take the hub", "Logs cannot be
//! flooded").
//!
//! Owns three books. The open connections still without an identity, oldest first, so the IO
//! layer can keep them under `limits.max_unauthenticated` and make room for a newcomer by
//! closing the oldest (`oldest_unauthenticated`). The open connections per authenticated
//! name, so a hello past `limits.max_connections_per_agent` is refused. And the records of
//! strangers: a connection that never authenticates gets its `connected` record (with its
//! `auth_failed`, if it failed a hello) and its service-log line only while a token bucket
//! allows (`STRANGER_RECORD_BURST`, then one per `STRANGER_RECORD_REFILL`, shared by all
//! strangers); past that it is counted, and the counts go out as one `strangers` audit record
//! and one service-log line at most every `STRANGER_SUMMARY_INTERVAL`, and at a stop. So every
//! connection and every auth failure is in the audit log, one by one or in a count, and a
//! flood of them costs the disk a bounded number of bytes per hour.
//!
//! The relay throttles its strangers the same way (`event_loop::relay_gate`); the bucket is the
//! relay's `Throttle`. Refuses IO, like the rest of the core: the time comes in as `now`.

use super::conn_map::ConnId;
use super::event::AuditEvent;
use super::outbox::Outbox;
use crate::kernel::fold_hash::FoldMap;
use crate::kernel::now::Now;
use crate::relay::throttle::Throttle;
use crate::roster::Roster;
use crate::tasks::TaskBook;
use chrono::{DateTime, SecondsFormat, Utc};
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

/// Strangers recorded one by one at once (their `connected`, `auth_failed` and service-log
/// line), before the rate below applies: a handful of mistyped tokens or probes is seen in
/// full.
pub const STRANGER_RECORD_BURST: u32 = 20;
/// Then one stranger recorded in full per this period (1,800 an hour at most).
pub const STRANGER_RECORD_REFILL: Duration = Duration::from_secs(2);
/// The counted strangers go out as one `strangers` record and one service-log line this long
/// after the first of them was counted (and at a stop): at most 360 of each an hour.
pub const STRANGER_SUMMARY_INTERVAL: Duration = Duration::from_secs(10);
/// Distinct names a `strangers` record lists with their counts; failures under other names
/// are counted in its `auth_failed` only.
pub const SUMMARY_MAX_NAMES: usize = 16;

/// Whether a connection has an identity, and what its records are (`Conn::standing`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::hub) enum Standing {
    /// Not authenticated, no outcome yet: its `connected` record waits for one.
    Stranger,
    /// Not authenticated; its records and service-log lines are written (within the
    /// strangers' record rate).
    StrangerRecorded,
    /// Not authenticated; counted for the next `strangers` record, nothing written of its own.
    StrangerSummed,
    /// Authenticated; holds one of its name's `limits.max_connections_per_agent` slots.
    Agent,
    /// Its hello was right but its name held every slot it may: refused, holding none.
    AgentRefused,
}

/// The books (module docs).
#[derive(Debug)]
pub(super) struct Strangers {
    /// Open connections that have not authenticated. Connection ids grow with accept order,
    /// so the first is the oldest.
    unauthenticated: BTreeSet<ConnId>,
    /// Open connections per authenticated name. A roster name's entry stays at 0 once used
    /// (a connection-per-op agent would otherwise insert and remove its name on every verb);
    /// a task identity's goes at 0 (`tasks::is_task_name`), so the map is bounded by the
    /// roster plus the tasks holding connections.
    per_agent: FoldMap<String, u32>,
    records: Throttle,
    tally: Tally,
}

/// Strangers counted since the last `strangers` record.
#[derive(Debug, Default)]
struct Tally {
    /// When the first was counted: the monotonic instant (for the due time) and the wall time
    /// (for the record's `since`).
    since: Option<(Instant, DateTime<Utc>)>,
    connections: u64,
    auth_failed: u64,
    names: Vec<(String, u64)>,
}

impl Default for Strangers {
    fn default() -> Strangers {
        Strangers {
            unauthenticated: BTreeSet::new(),
            per_agent: FoldMap::default(),
            records: Throttle::new(STRANGER_RECORD_BURST, STRANGER_RECORD_REFILL),
            tally: Tally::default(),
        }
    }
}

impl Strangers {
    /// When the next `strangers` record is due (None while nothing is counted).
    pub(super) fn poll_timeout(&self) -> Option<Instant> {
        self.tally
            .since
            .map(|(at, _)| crate::kernel::deadline::after(at, STRANGER_SUMMARY_INTERVAL))
    }

    /// Open connections `name` holds.
    pub(super) fn held_by(&self, name: &str) -> u32 {
        self.per_agent.get(name).copied().unwrap_or(0)
    }

    /// A new connection: a stranger until its hello authenticates it.
    pub(super) fn arrived(&mut self, conn: ConnId) {
        self.unauthenticated.insert(conn);
    }

    /// Open connections that have not authenticated (`limits.max_unauthenticated` bounds them
    /// through the IO layer, SPEC §4.6).
    pub(super) fn unauthenticated(&self) -> usize {
        self.unauthenticated.len()
    }

    /// The oldest open connection that has not authenticated: the one the IO layer closes to
    /// make room for a newer connection (SPEC §4.6).
    pub(super) fn oldest(&self) -> Option<ConnId> {
        self.unauthenticated.first().copied()
    }

    /// `conn`'s hello proved it is `name`. Its `connected` record goes out now, ahead of
    /// `authenticated` (v4: written with the connection's first outcome). Returns false,
    /// taking no slot, when `name` already holds `cap` connections
    /// (`limits.max_connections_per_agent`); the caller sets the connection's standing.
    pub(super) fn authenticated(
        &mut self,
        conn: ConnId,
        name: &str,
        cap: usize,
        out: &mut Outbox,
    ) -> bool {
        out.audit(AuditEvent::Connected { conn });
        let admitted = (self.held_by(name) as usize) < cap;
        if admitted {
            self.take_slot(name);
            // A refused one stays among the unauthenticated: it holds no identity's slot, and
            // while it closes it may be made room for like any stranger.
            self.unauthenticated.remove(&conn);
        }
        admitted
    }

    /// The first outcome of a connection that has not authenticated (`standing`): a failed
    /// hello (`tried` is the name it asserted, written only if `recordable` says so), or its
    /// end without one (a bad first line, the hello deadline, its close, a shutdown). Decides,
    /// once per connection, whether its records are written (within the strangers' rate:
    /// `connected`, then `auth_failed` for a failed hello) or counted for the next `strangers`
    /// record. True when they are written, and so its service-log lines are too; also true
    /// for a connection that is no stranger.
    pub(super) fn outcome(
        &mut self,
        standing: &mut Standing,
        conn: ConnId,
        tried: Option<String>,
        recordable: &dyn Fn(&str) -> bool,
        now: Now,
        out: &mut Outbox,
    ) -> bool {
        match standing {
            Standing::Stranger => {}
            Standing::StrangerSummed => return false,
            Standing::StrangerRecorded | Standing::Agent | Standing::AgentRefused => return true,
        }
        let recorded = self.records.admit(now.mono).is_some();
        *standing = if recorded {
            Standing::StrangerRecorded
        } else {
            Standing::StrangerSummed
        };
        if recorded {
            out.audit(AuditEvent::Connected { conn });
            if let Some(tried) = tried {
                let name = recordable(&tried).then_some(tried);
                out.audit(AuditEvent::AuthFailed { conn, name });
            }
            return true;
        }
        let tally = &mut self.tally;
        tally.since.get_or_insert((now.mono, now.wall));
        tally.connections = tally.connections.saturating_add(1);
        let Some(tried) = tried else {
            return false;
        };
        tally.auth_failed = tally.auth_failed.saturating_add(1);
        // A name already listed passed `recordable` when it was added; a new one is checked
        // only while there is room for it, so a flood of distinct names costs no token scans.
        if let Some((_, count)) = tally.names.iter_mut().find(|(n, _)| *n == tried) {
            *count = count.saturating_add(1);
        } else if tally.names.len() < SUMMARY_MAX_NAMES && recordable(&tried) {
            tally.names.push((tried, 1));
        }
        false
    }

    /// The socket of `conn` is released: it leaves the unauthenticated (its outcome, or its
    /// name's slot, is its connection's to settle first: `Conns::stranger_left`).
    pub(super) fn left(&mut self, conn: ConnId) {
        self.unauthenticated.remove(&conn);
    }

    /// Writes the `strangers` record and its service-log line when one is due at `now`, or
    /// whenever strangers are counted with `force` (a stop: the count must not be lost).
    pub(super) fn sum(&mut self, now: Now, force: bool, out: &mut Outbox) {
        let due = self.poll_timeout();
        if due.is_none() || (!force && due.is_some_and(|d| d > now.mono)) {
            return;
        }
        let t = std::mem::take(&mut self.tally);
        let Some((since_mono, since_wall)) = t.since else {
            return;
        };
        let secs = now.mono.saturating_duration_since(since_mono).as_secs_f64();
        out.log(format!(
            "strangers: {} connections that never authenticated in the last {secs:.1} s ({} failed their hello) were counted rather than recorded one by one; the audit log's strangers record has the counts",
            t.connections, t.auth_failed
        ));
        out.audit(AuditEvent::Strangers {
            since: since_wall.to_rfc3339_opts(SecondsFormat::Micros, true),
            connections: t.connections,
            auth_failed: t.auth_failed,
            names: t.names,
        });
    }

    fn take_slot(&mut self, name: &str) {
        match self.per_agent.get_mut(name) {
            Some(n) => *n = n.saturating_add(1),
            None => {
                self.per_agent.insert(name.to_owned(), 1);
            }
        }
    }

    pub(super) fn free_slot(&mut self, name: &str) {
        if let Some(n) = self.per_agent.get_mut(name) {
            *n = n.saturating_sub(1);
            if *n == 0 && crate::kernel::names::is_task_name(name) {
                self.per_agent.remove(name);
            }
        }
    }
}

/// Whether the name a failed hello asserted may be recorded (`auth_failed`'s `name`, a
/// `strangers` record's `names`, SPEC §6.2): not when it holds a roster or live task token,
/// so a token pasted in the wrong field is never written, nor when it is longer than any
/// roster name can be (`roster::MAX_NAME_BYTES`), so a stranger's record stays small. The
/// length is checked first: it also bounds the token scan.
pub(super) fn recordable(tried: &str, roster: &Roster, tasks: Option<&TaskBook>) -> bool {
    tried.len() <= crate::roster::MAX_NAME_BYTES
        && !roster.holds_token(tried)
        && !tasks.is_some_and(|b| b.holds_token(tried))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hub::event::Output;
    use chrono::DateTime;

    fn now(ms: u64, origin: Instant) -> Now {
        let wall = DateTime::parse_from_rfc3339("2026-07-21T06:40:51Z")
            .expect("fixed time")
            .with_timezone(&Utc);
        Now {
            mono: origin + Duration::from_millis(ms),
            wall: wall + chrono::Duration::milliseconds(ms as i64),
        }
    }

    /// Strangers are recorded one by one within the burst, then counted, and the counts go out
    /// as one `strangers` record when due; a name holding a token is never written.
    #[test]
    fn strangers_past_the_burst_are_counted_and_summed() {
        let origin = crate::kernel::deadline::test_origin();
        let (mut s, mut out) = (Strangers::default(), Outbox::default());
        let recordable = |tried: &str| !tried.starts_with("tok-");
        for conn in 0..u64::from(STRANGER_RECORD_BURST) {
            let mut standing = Standing::Stranger;
            assert!(s.outcome(
                &mut standing,
                conn,
                None,
                &recordable,
                now(0, origin),
                &mut out
            ));
            assert_eq!(standing, Standing::StrangerRecorded);
        }
        while out.pop().is_some() {}
        let mut standing = Standing::Stranger;
        let tried = Some("tok-secret".to_owned());
        assert!(!s.outcome(
            &mut standing,
            99,
            tried,
            &recordable,
            now(1, origin),
            &mut out
        ));
        assert_eq!(standing, Standing::StrangerSummed);
        assert_eq!(out.pop(), None, "counted, not written");
        assert!(!s.outcome(
            &mut standing,
            99,
            None,
            &recordable,
            now(1, origin),
            &mut out
        ));
        s.sum(now(2, origin), false, &mut out);
        assert_eq!(out.pop(), None, "not due yet");
        assert_eq!(
            s.poll_timeout(),
            Some(now(1, origin).mono + STRANGER_SUMMARY_INTERVAL)
        );
        s.sum(now(2, origin), true, &mut out);
        assert!(matches!(out.pop(), Some(Output::Log(l)) if l.starts_with("strangers: 1 ")));
        assert!(matches!(
            out.pop(),
            Some(Output::Audit(AuditEvent::Strangers { connections: 1, auth_failed: 1, ref names, .. }))
                if names.is_empty()
        ));
        assert_eq!(s.poll_timeout(), None);
    }

    /// A name holds at most `cap` connections; a refused hello stays a stranger to make room
    /// for, and a slot freed is taken again.
    #[test]
    fn a_name_holds_at_most_its_cap_of_connections() {
        let (mut s, mut out) = (Strangers::default(), Outbox::default());
        for conn in 1..=3 {
            s.arrived(conn);
        }
        assert!(s.authenticated(1, "bee", 2, &mut out));
        assert!(s.authenticated(2, "bee", 2, &mut out));
        assert!(!s.authenticated(3, "bee", 2, &mut out));
        assert_eq!(
            (s.held_by("bee"), s.unauthenticated(), s.oldest()),
            (2, 1, Some(3))
        );
        s.free_slot("bee");
        assert_eq!(s.held_by("bee"), 1);
        s.left(3);
        assert_eq!(s.unauthenticated(), 0);
        let records = std::iter::from_fn(|| out.pop()).count();
        assert_eq!(
            records, 3,
            "each hello that proved its name wrote its `connected`"
        );
    }
}
