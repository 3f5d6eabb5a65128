//! The filter index of one agent's queue (SPEC §5.2, docs/performance.md "How cost grows with
//! work"): for each `kind` and each `correlationId` among the queued envelopes, their
//! acceptance seqs in order, so a filtered `await` finds its envelope without walking the
//! queue. The queue itself stays a `VecDeque` sorted by seq (`router`), where a seq is found by
//! binary search.
//!
//! Owns only the seq sets; the router keeps them in step with its queue. Refuses IO.

use crate::kernel::fold_hash::FoldMap;
use std::collections::BTreeMap;

/// The seqs queued under one filter value, each with how many entries carry it (one in a real
/// hub, which never stamps a seq twice). Most correlation ids name one envelope (a reply), so
/// the single case is held inline rather than in a tree of its own.
#[derive(Debug)]
enum Seqs {
    One(u64),
    Many(BTreeMap<u64, u32>),
}

impl Seqs {
    fn insert(&mut self, seq: u64) {
        match self {
            Seqs::One(s) => *self = Seqs::Many(BTreeMap::from([(*s, 1)])),
            Seqs::Many(_) => {}
        }
        if let Seqs::Many(map) = self {
            *map.entry(seq).or_insert(0) += 1;
        }
    }

    /// Removes one entry of `seq`; true when nothing is left.
    fn remove(&mut self, seq: u64) -> bool {
        match self {
            Seqs::One(s) => *s == seq,
            Seqs::Many(map) => {
                if let Some(n) = map.get_mut(&seq) {
                    *n -= 1;
                    if *n == 0 {
                        map.remove(&seq);
                    }
                }
                match map.iter().next() {
                    None => true,
                    Some((&last, &1)) if map.len() == 1 => {
                        *self = Seqs::One(last);
                        false
                    }
                    Some(_) => false,
                }
            }
        }
    }

    /// Each seq once, oldest first.
    fn iter(&self) -> Box<dyn Iterator<Item = u64> + '_> {
        match self {
            Seqs::One(s) => Box::new(std::iter::once(*s)),
            Seqs::Many(map) => Box::new(map.keys().copied()),
        }
    }
}

/// One value's seqs per key (`kind` or `correlationId`).
#[derive(Debug, Default)]
struct ByValue(FoldMap<String, Seqs>);

impl ByValue {
    fn insert(&mut self, key: &str, seq: u64) {
        match self.0.get_mut(key) {
            Some(seqs) => seqs.insert(seq),
            None => {
                self.0.insert(key.to_owned(), Seqs::One(seq));
            }
        }
    }

    fn remove(&mut self, key: &str, seq: u64) {
        if self.0.get_mut(key).is_some_and(|seqs| seqs.remove(seq)) {
            self.0.remove(key);
        }
    }

    fn seqs(&self, key: &str) -> impl Iterator<Item = u64> + '_ {
        self.0.get(key).into_iter().flat_map(Seqs::iter)
    }
}

/// The index of one queue.
#[derive(Debug, Default)]
pub(super) struct QueueIndex {
    by_kind: ByValue,
    by_correlation: ByValue,
}

impl QueueIndex {
    pub(super) fn insert(&mut self, kind: &str, correlation_id: Option<&str>, seq: u64) {
        self.by_kind.insert(kind, seq);
        if let Some(c) = correlation_id {
            self.by_correlation.insert(c, seq);
        }
    }

    pub(super) fn remove(&mut self, kind: &str, correlation_id: Option<&str>, seq: u64) {
        self.by_kind.remove(kind, seq);
        if let Some(c) = correlation_id {
            self.by_correlation.remove(c, seq);
        }
    }

    /// Seqs of the envelopes of this kind, oldest first.
    pub(super) fn of_kind<'a>(&'a self, kind: &str) -> impl Iterator<Item = u64> + 'a {
        self.by_kind.seqs(kind)
    }

    /// Seqs of the envelopes with this correlation id, oldest first.
    pub(super) fn with_correlation<'a>(&'a self, id: &str) -> impl Iterator<Item = u64> + 'a {
        self.by_correlation.seqs(id)
    }

    #[cfg(test)]
    pub(super) fn is_empty(&self) -> bool {
        self.by_kind.0.is_empty() && self.by_correlation.0.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seqs_come_back_in_order_and_empty_keys_go() {
        let mut ix = QueueIndex::default();
        for (seq, kind, corr) in [
            (5, "task", None),
            (2, "result", Some("x")),
            (9, "result", Some("x")),
        ] {
            ix.insert(kind, corr, seq);
        }
        assert_eq!(ix.of_kind("result").collect::<Vec<_>>(), [2, 9]);
        assert_eq!(ix.with_correlation("x").collect::<Vec<_>>(), [2, 9]);
        ix.remove("result", Some("x"), 2);
        assert_eq!(ix.with_correlation("x").collect::<Vec<_>>(), [9]);
        ix.remove("result", Some("x"), 9);
        ix.remove("task", None, 5);
        assert!(ix.is_empty());
        assert_eq!(ix.of_kind("result").count(), 0);
    }

    /// Two entries under one seq (never in a real hub) are both counted: the seq stays
    /// indexed until the second goes.
    #[test]
    fn a_seq_held_twice_stays_until_both_go() {
        let mut ix = QueueIndex::default();
        ix.insert("task", None, 0);
        ix.insert("task", None, 0);
        ix.remove("task", None, 0);
        assert_eq!(ix.of_kind("task").collect::<Vec<_>>(), [0]);
        ix.remove("task", None, 0);
        assert!(ix.is_empty());
    }
}
