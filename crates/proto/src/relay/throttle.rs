//! A token bucket for log lines a peer (or a stranger) can trigger (docs/relay-protocol.md,
//! "Limits"): a burst of lines passes, then one line per refill period; the lines held back
//! are counted, and the next line that passes says how many there were. So a peer that sends a
//! million bad messages costs the service log a bounded number of lines, and the operator still
//! learns how many were dropped.
//!
//! Sans-IO: the caller passes `now` in; nothing here reads a clock, logs or sleeps. Refuses:
//! deciding what is worth a line (the caller asks only for lines a peer triggered).

use std::time::{Duration, Instant};

/// A rate limit on log lines: `burst` at once, then one per `refill`.
#[derive(Debug, Clone)]
pub struct Throttle {
    burst: u32,
    refill: Duration,
    tokens: u32,
    /// When the next token is added; None while the bucket is full.
    next_refill: Option<Instant>,
    /// Lines held back since the last line that passed.
    held_back: u64,
    /// Lines held back over the throttle's life.
    held_back_total: u64,
}

impl Throttle {
    /// A full bucket of `burst` lines (at least 1), refilled by one line every `refill` (at
    /// least 1 ms, so a zero period cannot mean "unlimited" by accident).
    pub fn new(burst: u32, refill: Duration) -> Throttle {
        let burst = burst.max(1);
        Throttle {
            burst,
            refill: refill.max(Duration::from_millis(1)),
            tokens: burst,
            next_refill: None,
            held_back: 0,
            held_back_total: 0,
        }
    }

    /// Whether a line may be written at `now`. `Some(n)`: write it, and say that `n` lines
    /// were held back before it (0 usually). `None`: hold it back (counted).
    pub fn admit(&mut self, now: Instant) -> Option<u64> {
        self.refill_to(now);
        if self.tokens == 0 {
            self.held_back += 1;
            self.held_back_total += 1;
            return None;
        }
        if self.tokens == self.burst {
            // The bucket was full: refilling starts with this line.
            self.next_refill = now.checked_add(self.refill);
        }
        self.tokens -= 1;
        Some(std::mem::take(&mut self.held_back))
    }

    /// Lines held back since the last line that passed (for a closing summary).
    pub fn held_back(&self) -> u64 {
        self.held_back
    }

    /// Lines held back over the throttle's whole life.
    pub fn held_back_total(&self) -> u64 {
        self.held_back_total
    }

    /// Takes the count of lines held back since the last line that passed, as a summary line
    /// does when it reports them.
    pub fn take_held_back(&mut self) -> u64 {
        std::mem::take(&mut self.held_back)
    }

    fn refill_to(&mut self, now: Instant) {
        let Some(due) = self.next_refill else {
            return;
        };
        if now < due {
            return;
        }
        // One token at `due`, one more per whole period after it.
        let periods = (now - due).as_nanos() / self.refill.as_nanos();
        let add = u32::try_from(periods.saturating_add(1)).unwrap_or(u32::MAX);
        self.tokens = self.tokens.saturating_add(add).min(self.burst);
        self.next_refill = if self.tokens == self.burst {
            None
        } else {
            // Keep the phase: the next token comes a whole period after the last one added.
            let elapsed = self
                .refill
                .saturating_mul(u32::try_from(periods).unwrap_or(u32::MAX));
            due.checked_add(elapsed)
                .and_then(|t| t.checked_add(self.refill))
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    fn passed(t: &mut Throttle, now: Instant, n: usize) -> usize {
        (0..n).filter(|_| t.admit(now).is_some()).count()
    }

    #[test]
    fn a_burst_passes_then_one_line_per_period() {
        let t0 = crate::kernel::deadline::test_origin();
        let mut t = Throttle::new(3, S * 10);
        assert_eq!(passed(&mut t, t0, 100), 3, "the burst");
        assert_eq!(t.held_back(), 97);
        // Just before the first refill: still nothing.
        assert_eq!(t.admit(t0 + S * 10 - Duration::from_millis(1)), None);
        // At the refill: one line, which reports what was held back before it.
        assert_eq!(t.admit(t0 + S * 10), Some(98));
        assert_eq!(t.admit(t0 + S * 10), None);
        assert_eq!(t.admit(t0 + S * 20), Some(1));
        assert_eq!(t.held_back_total(), 99);
    }

    #[test]
    fn a_flood_over_a_long_time_passes_burst_plus_one_per_period() {
        // A line every 10 ms for 10 minutes of virtual time: 60,000 attempts.
        let t0 = crate::kernel::deadline::test_origin();
        let mut t = Throttle::new(5, S * 6);
        let mut written = 0;
        for i in 0..60_000u32 {
            if t.admit(t0 + Duration::from_millis(10) * i).is_some() {
                written += 1;
            }
        }
        // 5 at once, then one per 6 s over 600 s: 100 more (the last period may not be due).
        assert!((104..=105).contains(&written), "{written}");
        assert_eq!(t.held_back_total(), 60_000 - written as u64);
    }

    #[test]
    fn a_quiet_peer_gets_its_whole_burst_back() {
        let t0 = crate::kernel::deadline::test_origin();
        let mut t = Throttle::new(4, S);
        assert_eq!(passed(&mut t, t0, 4), 4);
        assert_eq!(t.admit(t0), None);
        // Long after: the bucket is full again, never fuller.
        let later = t0 + S * 3600;
        assert_eq!(t.admit(later), Some(1));
        assert_eq!(passed(&mut t, later, 10), 3);
    }

    #[test]
    fn the_refill_keeps_its_phase_until_the_bucket_is_full() {
        let t0 = crate::kernel::deadline::test_origin();
        let mut t = Throttle::new(2, S);
        assert_eq!(passed(&mut t, t0, 2), 2);
        // Tokens are due at t0+1s, t0+2s: taking one at 1.5 s leaves the next due at 2 s.
        assert_eq!(t.admit(t0 + S + S / 2), Some(0));
        assert_eq!(t.admit(t0 + S * 2 - Duration::from_millis(1)), None);
        assert_eq!(t.admit(t0 + S * 2), Some(1));
        // Once full again, the period starts over with the next line taken.
        let later = t0 + S * 100 + S / 2;
        assert_eq!(passed(&mut t, later, 3), 2);
        assert_eq!(t.admit(later + S - Duration::from_millis(1)), None);
        assert_eq!(t.admit(later + S), Some(2));
    }

    #[test]
    fn degenerate_settings_still_limit() {
        let t0 = crate::kernel::deadline::test_origin();
        let mut t = Throttle::new(0, Duration::ZERO);
        assert_eq!(passed(&mut t, t0, 10), 1, "burst 0 means 1");
        assert_eq!(t.take_held_back(), 9);
        assert_eq!(t.held_back(), 0);
        assert_eq!(passed(&mut t, t0 + Duration::from_millis(1), 10), 1);
        // A clock that goes backwards (it cannot with Instant, but a caller may pass an older
        // instant) changes nothing.
        assert_eq!(t.admit(t0), None);
    }
}
