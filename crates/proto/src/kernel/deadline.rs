//! Deadlines that cannot overflow. `Instant + Duration` panics when the sum is not
//! representable, and a duration can come from a client (`await`'s `timeoutSecs`, up to
//! 2^64 - 1 seconds) or from a config value; a peer must never be able to panic the hub
//! (PLAN.md §7). Every deadline computed from such a value goes through `after`.
//!
//! Owns that arithmetic only; pure (the `now` is passed in).

use std::time::{Duration, Instant};

/// `now + wait`, or the latest instant representable after `now` when the sum overflows: a
/// wait that long is "never" for any process, and the deadline stays ordered after every
/// nearer one.
pub fn after(now: Instant, wait: Duration) -> Instant {
    let mut wait = wait;
    loop {
        if let Some(t) = now.checked_add(wait) {
            return t;
        }
        // Halving converges: `now + 0` is always representable.
        wait /= 2;
    }
}

/// The origin instant of the pure modules' tests, which run on a virtual clock from it: the
/// one clock read they make (clippy.toml), so none of them can depend on real time passing.
#[cfg(test)]
#[allow(clippy::disallowed_methods)]
pub fn test_origin() -> Instant {
    Instant::now()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unrepresentable_wait_saturates_instead_of_panicking() {
        let now = test_origin();
        let far = after(now, Duration::MAX);
        assert!(far > now + Duration::from_secs(100 * 365 * 24 * 3600));
        // From the far end, any further wait stays there or a hair later: never a panic.
        assert!(after(far, Duration::MAX) >= far);
        assert!(after(now, Duration::from_secs(u64::MAX)) > now);
        assert_eq!(
            after(now, Duration::from_millis(1500)),
            now + Duration::from_millis(1500)
        );
    }
}
