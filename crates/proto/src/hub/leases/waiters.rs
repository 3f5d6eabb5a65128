//! The waiters (lease design §A.1, §A.3): claims queued behind a conflict, one FIFO for the
//! whole hub in arrival order (`seq`, stamped at queueing and kept: a waiter put back after
//! a failed commit regains its place), and `ahead`: how many earlier waiters of other owners
//! want an overlapping resource of the same kind.
//!
//! Owns the queue and its counts. Two kinds of waiter for now: one parked on its connection
//! (`Parked`, answered on it) and one detached (`Detached`, a `notify` claim granted by an
//! envelope); task, polled and peer waiters come with delegate leases and the fleet (design
//! §A.10, §D). Refuses deciding grants: the machine walks the queue (`hub::leases`).

use crate::hub::conn_map::ConnId;
use crate::kernel::lease_match;
use crate::wire::lease::LeaseMode;
use std::collections::BTreeMap;
use std::time::Instant;

/// Where a waiter's grant goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::hub) enum WaiterKind {
    /// Parked on its connection (`Phase::LeaseWait`): the grant is its final line.
    Parked(ConnId),
    /// A `notify` claim: the grant is a `lease_granted` envelope to its owner.
    Detached,
}

/// What a claim asked for, kept while it waits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::hub) struct Claim {
    pub(in crate::hub) owner: String,
    pub(in crate::hub) kind: String,
    pub(in crate::hub) value: String,
    pub(in crate::hub) mode: LeaseMode,
    pub(in crate::hub) ttl_secs: u64,
    pub(in crate::hub) reason: String,
    pub(in crate::hub) root: Option<String>,
    /// The lease id asked for; None: one is minted at the grant.
    pub(in crate::hub) lease: Option<String>,
    /// `kind`'s value as compared (`table::resource`).
    pub(in crate::hub) resource: String,
}

/// One queued claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::hub) struct Waiter {
    pub(in crate::hub) id: String,
    pub(in crate::hub) seq: u64,
    pub(in crate::hub) claim: Claim,
    pub(in crate::hub) kind: WaiterKind,
    /// When it was queued: wall (unix ms) for `since` and `waitedMs`, mono for the latter.
    pub(in crate::hub) since_ms: i64,
    pub(in crate::hub) since: Instant,
    /// A parked waiter's deadline (`timeoutSecs`), kept so a waiter put back after a failed
    /// commit waits until the same instant.
    pub(in crate::hub) deadline: Option<Instant>,
}

/// The FIFO (module doc).
#[derive(Debug, Default)]
pub(in crate::hub) struct Waiters {
    by_seq: BTreeMap<u64, Waiter>,
    next_seq: u64,
}

impl Waiters {
    pub(in crate::hub) fn len(&self) -> usize {
        self.by_seq.len()
    }

    /// The next place in the queue.
    pub(in crate::hub) fn take_seq(&mut self) -> u64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        seq
    }

    /// Queues `w` at its `seq` (a fresh one from `take_seq`, or its old one when put back).
    pub(in crate::hub) fn insert(&mut self, w: Waiter) {
        self.by_seq.insert(w.seq, w);
    }

    pub(in crate::hub) fn remove(&mut self, seq: u64) -> Option<Waiter> {
        self.by_seq.remove(&seq)
    }

    pub(in crate::hub) fn find(&self, id: &str) -> Option<&Waiter> {
        self.by_seq.values().find(|w| w.id == id)
    }

    /// The seq of waiter `id`.
    pub(in crate::hub) fn seq_of(&self, id: &str) -> Option<u64> {
        self.find(id).map(|w| w.seq)
    }

    /// Every waiter, first come first.
    pub(in crate::hub) fn iter(&self) -> impl Iterator<Item = &Waiter> {
        self.by_seq.values()
    }

    /// The seqs in queue order (a snapshot, for a walk that removes as it goes).
    pub(in crate::hub) fn seqs(&self) -> Vec<u64> {
        self.by_seq.keys().copied().collect()
    }

    pub(in crate::hub) fn get(&self, seq: u64) -> Option<&Waiter> {
        self.by_seq.get(&seq)
    }

    /// Waits of `owner`.
    pub(in crate::hub) fn count_of(&self, owner: &str) -> usize {
        self.by_seq
            .values()
            .filter(|w| w.claim.owner == owner)
            .count()
    }

    /// The seqs of `owner`'s detached waiters.
    pub(in crate::hub) fn detached_of(&self, owner: &str) -> Vec<u64> {
        self.by_seq
            .values()
            .filter(|w| w.claim.owner == owner && w.kind == WaiterKind::Detached)
            .map(|w| w.seq)
            .collect()
    }

    /// Waiters of `kind` whose resource overlaps `resource`, whoever they are.
    pub(in crate::hub) fn overlapping(&self, kind: &str, resource: &str) -> usize {
        self.by_seq
            .values()
            .filter(|w| {
                w.claim.kind == kind && lease_match::overlaps(kind, &w.claim.resource, resource)
            })
            .count()
    }

    /// `ahead` of a claim by `owner` on `resource` of `kind` that would stand at `before`
    /// (None: at the end): earlier waiters of other owners whose resource overlaps.
    pub(in crate::hub) fn ahead(
        &self,
        owner: &str,
        kind: &str,
        resource: &str,
        before: Option<u64>,
    ) -> u64 {
        let earlier = match before {
            Some(seq) => self.by_seq.range(..seq),
            None => self.by_seq.range(..),
        };
        earlier
            .filter(|(_, w)| {
                w.claim.owner != owner
                    && w.claim.kind == kind
                    && lease_match::overlaps(kind, &w.claim.resource, resource)
            })
            .count() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn waiter(w: &mut Waiters, owner: &str, value: &str) -> u64 {
        let seq = w.take_seq();
        w.insert(Waiter {
            id: format!("wait-{seq}"),
            seq,
            claim: Claim {
                owner: owner.into(),
                kind: "path_glob".into(),
                value: value.into(),
                mode: LeaseMode::Exclusive,
                ttl_secs: 1,
                reason: String::new(),
                root: None,
                lease: None,
                resource: value.into(),
            },
            kind: WaiterKind::Detached,
            since_ms: 0,
            since: crate::kernel::deadline::test_origin(),
            deadline: None,
        });
        seq
    }

    /// `ahead` counts earlier waiters of other owners on overlapping resources only, and a
    /// waiter put back keeps its place.
    #[test]
    fn ahead_counts_earlier_overlapping_waiters_of_others() {
        let mut w = Waiters::default();
        let a = waiter(&mut w, "ant", "src/**");
        let b = waiter(&mut w, "bee", "src/x.rs");
        let _c = waiter(&mut w, "cat", "docs/**");
        assert_eq!(w.ahead("dog", "path_glob", "src/x.rs", None), 2);
        assert_eq!(
            w.ahead("ant", "path_glob", "src/x.rs", None),
            1,
            "own waits"
        );
        assert_eq!(w.ahead("dog", "path_glob", "src/x.rs", Some(b)), 1);
        assert_eq!(w.ahead("dog", "db", "src/x.rs", None), 0, "other kind");
        assert_eq!(w.overlapping("path_glob", "src/q.rs"), 1);
        assert_eq!(w.overlapping("path_glob", "src/x.rs"), 2);
        let back = w.remove(a).expect("queued");
        assert_eq!(w.ahead("dog", "path_glob", "src/x.rs", Some(b)), 0);
        w.insert(back);
        assert_eq!(w.seqs().first(), Some(&a), "its place again");
        assert_eq!(w.count_of("bee"), 1);
        assert_eq!(w.detached_of("cat").len(), 1);
    }
}
