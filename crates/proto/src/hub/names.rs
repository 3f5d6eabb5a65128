//! Interned agent names for the ledger (docs/performance.md "How cost grows with work"): a
//! hub holding a million remembered ids has a few agents, so each record shares its sender's
//! and its recipient's one `Name` instead of carrying two heap copies of its own.
//!
//! Names come from clients (any `to` may be named), so the set must not grow without bound
//! after the records that used a name are gone: a name held by nothing but this set is
//! dropped at the next sweep, and a sweep runs when the set has doubled since the last one,
//! so interning costs amortized constant time. The set hashes with a randomly keyed hash
//! (`fold_hash`): names are attacker-chosen, and a fixed hash would let a client choose
//! colliding ones.
//!
//! Also owns `Name`, the one-pointer shared string the queues and the ledger hold per
//! envelope (docs/performance.md "Memory per envelope"): a queued envelope carries
//! its sender, recipient, kind and correlation id, and a ledger record its sender and
//! recipient, so a fat `Arc<str>` (two words) in each costs a word per field per envelope,
//! while the extra hop to the text is paid only on the rare reads of those fields.
//!
//! Owns only the set and that type. Refuses IO.

use crate::kernel::fold_hash::FoldSet;
use std::borrow::Borrow;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::ops::Deref;
use std::sync::Arc;

/// A shared, immutable string one pointer wide: `Arc<Box<str>>`, so cloning is a count
/// increment and the field costs 8 bytes where `Arc<str>` costs 16. Compares, hashes and
/// borrows as its text, so a `HashSet<Name>` is looked up with a `&str`.
#[derive(Clone)]
pub struct Name(Arc<Box<str>>);

impl Name {
    pub fn new(text: &str) -> Name {
        Name(Arc::new(Box::from(text)))
    }

    /// Whether both are the same allocation (one interned copy), not merely equal text.
    pub fn ptr_eq(a: &Name, b: &Name) -> bool {
        Arc::ptr_eq(&a.0, &b.0)
    }

    fn strong_count(&self) -> usize {
        Arc::strong_count(&self.0)
    }
}

impl Deref for Name {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl Borrow<str> for Name {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl From<&str> for Name {
    fn from(text: &str) -> Name {
        Name::new(text)
    }
}

impl PartialEq for Name {
    fn eq(&self, other: &Name) -> bool {
        Name::ptr_eq(self, other) || **self.0 == **other.0
    }
}

impl Eq for Name {}

impl PartialEq<str> for Name {
    fn eq(&self, other: &str) -> bool {
        **self.0 == *other
    }
}

impl PartialOrd for Name {
    fn partial_cmp(&self, other: &Name) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Name {
    fn cmp(&self, other: &Name) -> std::cmp::Ordering {
        (**self.0).cmp(&**other.0)
    }
}

impl Hash for Name {
    // As the text hashes, which `Borrow<str>` requires.
    fn hash<H: Hasher>(&self, state: &mut H) {
        (**self.0).hash(state)
    }
}

impl fmt::Debug for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self.0, f)
    }
}

impl fmt::Display for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&**self.0, f)
    }
}

/// Fewest names held before the first sweep: below this a sweep would cost more than the
/// memory it could give back.
const MIN_SWEEP: usize = 64;

#[derive(Debug)]
pub(super) struct Names {
    set: FoldSet<Name>,
    /// Sweep when the set reaches this size (twice what the last sweep kept).
    sweep_at: usize,
}

impl Default for Names {
    fn default() -> Names {
        Names {
            set: FoldSet::default(),
            sweep_at: MIN_SWEEP,
        }
    }
}

impl Names {
    /// The shared copy of `name`.
    pub(super) fn intern(&mut self, name: &str) -> Name {
        if let Some(shared) = self.set.get(name) {
            return shared.clone();
        }
        if self.set.len() >= self.sweep_at {
            // Held only here: no record names it any more.
            self.set.retain(|n| n.strong_count() > 1);
            self.sweep_at = (self.set.len() * 2).max(MIN_SWEEP);
        }
        let shared = Name::new(name);
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
        assert!(Name::ptr_eq(&a, &b));
        assert_eq!(n.len(), 1);
    }

    /// A client naming a new recipient in every send must not grow the set past what is
    /// still in use (twice it, plus the minimum).
    #[test]
    fn names_nothing_holds_are_swept() {
        let mut n = Names::default();
        let kept: Vec<Name> = (0..10).map(|i| n.intern(&format!("kept{i}"))).collect();
        for i in 0..100_000 {
            drop(n.intern(&format!("gone{i}")));
            assert!(n.len() <= MIN_SWEEP.max(2 * kept.len()) + 1, "at {i}");
        }
        for k in &kept {
            assert!(Name::ptr_eq(k, &n.intern(k)), "names in use survive sweeps");
        }
    }
}
