//! Presence (SPEC §14, §14.1): what `who` and `activity` show of agents besides their queues.
//! When each name last authenticated and was last delivered to, what its agent's process is
//! doing (`liveness`), the envelopes accepted last (`recent`), and what linked peers say of
//! their own agents (`remote_presence`).
//!
//! Owns those four books and the two times kept here (the others own theirs). Refuses
//! routing and connections: it is told what happened, by the hello and by the delivery's
//! first byte, and never decides anything a client is answered with but what it shows.

use super::liveness::Liveness;
use super::recent::Recent;
use super::remote_presence::RemotePresence;
use crate::kernel::fold_hash::FoldMap;
use crate::kernel::now::Now;

#[derive(Debug, Default)]
pub(super) struct PresenceBook {
    /// Per agent: when it last authenticated and when it was last delivered to (wall ms).
    seen: FoldMap<String, (Option<i64>, Option<i64>)>,
    /// What each roster name's agent process is doing (SPEC §14, `liveness`).
    pub(super) liveness: Liveness,
    /// The last envelopes accepted, as metadata, for `activity` (SPEC §14.1).
    pub(super) recent: Recent,
    /// What linked peers' directories say of their own agents (SPEC §14.1 "Remote names").
    pub(super) remote: RemotePresence,
}

impl PresenceBook {
    /// `name` authenticated at `now`.
    pub(super) fn authenticated(&mut self, name: &str, now: Now) {
        // Looked up before it is inserted: a name seen before (every hello but a name's
        // first) costs no copy of it.
        let at = Some(now.wall.timestamp_millis());
        match self.seen.get_mut(name) {
            Some(seen) => seen.0 = at,
            None => {
                self.seen.insert(name.to_owned(), (at, None));
            }
        }
    }

    /// The reader's socket took the first byte of a delivery to `name` at `now`.
    pub(super) fn delivered_to(&mut self, name: &str, now: Now) {
        let at = Some(now.wall.timestamp_millis());
        match self.seen.get_mut(name) {
            Some(seen) => seen.1 = at,
            None => {
                self.seen.insert(name.to_owned(), (None, at));
            }
        }
    }

    /// When `name` last authenticated and was last delivered to (wall ms), if ever.
    pub(super) fn seen(&self, name: &str) -> (Option<i64>, Option<i64>) {
        self.seen.get(name).copied().unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{DateTime, Utc};

    fn at(ms: i64) -> Now {
        let wall = DateTime::parse_from_rfc3339("2026-07-21T06:40:51Z")
            .expect("fixed time")
            .with_timezone(&Utc);
        Now {
            mono: crate::kernel::deadline::test_origin(),
            wall: wall + chrono::Duration::milliseconds(ms),
        }
    }

    #[test]
    fn a_names_two_times_are_kept_apart_and_the_latest_wins() {
        let mut p = PresenceBook::default();
        assert_eq!(p.seen("bee"), (None, None));
        p.delivered_to("bee", at(5));
        let t0 = at(0).wall.timestamp_millis();
        assert_eq!(p.seen("bee"), (None, Some(t0 + 5)));
        p.authenticated("bee", at(7));
        p.authenticated("bee", at(9));
        assert_eq!(p.seen("bee"), (Some(t0 + 9), Some(t0 + 5)));
        assert_eq!(p.seen("ant"), (None, None), "one name's times are its own");
    }
}
