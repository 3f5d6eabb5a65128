//! Interned agent names for the ledger (docs/performance.md "How cost grows with work"): a
//! hub holding a million remembered ids has a few agents, so each record shares its sender's
//! and its recipient's one `Arc<str>` instead of carrying two heap copies of its own.
//!
//! Names come from clients (any `to` may be named), so the set must not grow without bound
//! after the records that used a name are gone: a name held by nothing but this set is
//! dropped at the next sweep, and a sweep runs when the set has doubled since the last one,
//! so interning costs amortized constant time. The set hashes with the standard library's
//! randomly keyed SipHash: names are attacker-chosen, and a fixed hash would let a client
//! choose colliding ones.
//!
//! Owns only the set. Refuses IO.

use std::collections::HashSet;
use std::sync::Arc;

/// Fewest names held before the first sweep: below this a sweep would cost more than the
/// memory it could give back.
const MIN_SWEEP: usize = 64;

#[derive(Debug)]
pub(super) struct Names {
    set: HashSet<Arc<str>>,
    /// Sweep when the set reaches this size (twice what the last sweep kept).
    sweep_at: usize,
}

impl Default for Names {
    fn default() -> Names {
        Names {
            set: HashSet::new(),
            sweep_at: MIN_SWEEP,
        }
    }
}

impl Names {
    /// The shared copy of `name`.
    pub(super) fn intern(&mut self, name: &str) -> Arc<str> {
        if let Some(shared) = self.set.get(name) {
            return shared.clone();
        }
        if self.set.len() >= self.sweep_at {
            // Held only here: no record names it any more.
            self.set.retain(|n| Arc::strong_count(n) > 1);
            self.sweep_at = (self.set.len() * 2).max(MIN_SWEEP);
        }
        let shared: Arc<str> = Arc::from(name);
        self.set.insert(shared.clone());
        shared
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.set.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_copy_per_name() {
        let mut n = Names::default();
        let a = n.intern("alpha");
        let b = n.intern("alpha");
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(n.len(), 1);
    }

    /// A client naming a new recipient in every send must not grow the set past what is
    /// still in use (twice it, plus the minimum).
    #[test]
    fn names_nothing_holds_are_swept() {
        let mut n = Names::default();
        let kept: Vec<Arc<str>> = (0..10).map(|i| n.intern(&format!("kept{i}"))).collect();
        for i in 0..100_000 {
            drop(n.intern(&format!("gone{i}")));
            assert!(n.len() <= MIN_SWEEP.max(2 * kept.len()) + 1, "at {i}");
        }
        for k in &kept {
            assert!(Arc::ptr_eq(k, &n.intern(k)), "names in use survive sweeps");
        }
    }
}
