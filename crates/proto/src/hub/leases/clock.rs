//! The leases' deadlines as data (lease design §A.1, §A.4): each lease's warn point and its
//! expiry, earliest first, for `poll_timeout` and `handle_timeout`.
//!
//! Owns the ordered set only. Refuses deciding what a due point means (the machine renews,
//! warns or expires) and reading a clock: the instant is passed in.

use std::collections::BTreeSet;
use std::time::Instant;

/// What is due for a lease at an instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(in crate::hub) enum Due {
    /// `expiresAt − min(warn_before, ttl/2)`: renew a live owner's lease, or warn its owner.
    Warn,
    /// `expiresAt`: the lease expires.
    Expire,
}

/// The deadlines (module doc).
#[derive(Debug, Default)]
pub(in crate::hub) struct Clock {
    due: BTreeSet<(Instant, String, Due)>,
}

impl Clock {
    /// Schedules `lease`'s warn point and expiry.
    pub(in crate::hub) fn schedule(&mut self, lease: &str, warn_at: Instant, expires_at: Instant) {
        self.due.insert((warn_at, lease.to_owned(), Due::Warn));
        self.due.insert((expires_at, lease.to_owned(), Due::Expire));
    }

    /// Drops `lease`'s deadlines at these instants (its end, or before a reschedule).
    pub(in crate::hub) fn unschedule(
        &mut self,
        lease: &str,
        warn_at: Instant,
        expires_at: Instant,
    ) {
        self.due.remove(&(warn_at, lease.to_owned(), Due::Warn));
        self.due
            .remove(&(expires_at, lease.to_owned(), Due::Expire));
    }

    pub(in crate::hub) fn poll_timeout(&self) -> Option<Instant> {
        self.due.first().map(|(at, _, _)| *at)
    }

    /// The earliest point due at or before `now`, taken out of the set.
    pub(in crate::hub) fn pop_due(&mut self, now: Instant) -> Option<(String, Due)> {
        if self.due.first().map_or(true, |(at, _, _)| *at > now) {
            return None;
        }
        self.due.pop_first().map(|(_, lease, due)| (lease, due))
    }

    #[cfg(test)]
    pub(in crate::hub) fn is_empty(&self) -> bool {
        self.due.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn points_come_due_in_order_and_once() {
        let t0 = crate::kernel::deadline::test_origin();
        let s = Duration::from_secs;
        let mut c = Clock::default();
        c.schedule("b", t0 + s(5), t0 + s(10));
        c.schedule("a", t0 + s(1), t0 + s(2));
        assert_eq!(c.poll_timeout(), Some(t0 + s(1)));
        assert_eq!(c.pop_due(t0), None);
        assert_eq!(c.pop_due(t0 + s(3)), Some(("a".into(), Due::Warn)));
        assert_eq!(c.pop_due(t0 + s(3)), Some(("a".into(), Due::Expire)));
        assert_eq!(c.pop_due(t0 + s(3)), None);
        c.unschedule("b", t0 + s(5), t0 + s(10));
        assert!(c.is_empty());
    }
}
