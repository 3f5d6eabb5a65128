//! The ledger of accepted envelope ids (SPEC §12.3–§12.4): per sender, what was accepted, a
//! digest of it, and where it is now. It answers idempotent resends and `status` queries, and
//! forgets settled ids after the retention window.
//!
//! The purge runs on the event loop, so it must not walk the whole ledger (a million ids):
//! settled records are also kept in an index ordered by settlement time, and a purge takes
//! from its front only what it forgets, at most `PURGE_BATCH` per call (`purge_pending` tells
//! the caller to come back soon for the rest).
//!
//! `status` from a recipient must not walk it either: an index from each id to the senders
//! that used it finds the record in as many lookups as senders share that id (usually one).
//! `touched` counts the records every lookup looked at, so tests can tell (docs/performance.md
//! "How cost grows with work").
//!
//! Owns that bookkeeping. Refuses IO and clocks: times are wall-clock milliseconds passed in.

use crate::wire::Reader;
use sha2::{Digest, Sha256};
use std::cell::Cell;
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

/// Records forgotten by one `purge` at most: bounded work per event-loop iteration even after
/// a restart that finds a whole window's worth expired. Each one also costs a row delete in
/// the next store commit.
pub const PURGE_BATCH: usize = 4096;

/// Sender and id, shared between the map and the settlement index.
type Key = (Arc<str>, Arc<str>);

fn key(sender: &str, id: &str) -> Key {
    (Arc::from(sender), Arc::from(id))
}

/// Where an accepted envelope is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    Queued,
    /// Written to a reader (plain mode: consumed; ack mode: awaiting the ack).
    Delivered,
    Acked,
    /// Taken over by the peer hub it was addressed to (`name@peer`, SPEC §15): that hub
    /// acked it after queueing it durably.
    Forwarded,
    /// Lost after its first byte and bounced to its sender.
    Bounced,
    /// Lost and not bounced (it was itself a bounce).
    Lost,
}

impl State {
    pub fn as_str(self) -> &'static str {
        match self {
            State::Queued => "queued",
            State::Delivered => "delivered",
            State::Acked => "acked",
            State::Forwarded => "forwarded",
            State::Bounced => "bounced",
            State::Lost => "lost",
        }
    }

    pub fn parse(s: &str) -> Option<State> {
        Some(match s {
            "queued" => State::Queued,
            "delivered" => State::Delivered,
            "acked" => State::Acked,
            "forwarded" => State::Forwarded,
            "bounced" => State::Bounced,
            "lost" => State::Lost,
            _ => return None,
        })
    }

    /// Settled states can be forgotten after the window; a queued or delivered-unacked
    /// envelope is kept whatever its age.
    fn settled(self, ack_pending: bool) -> bool {
        match self {
            State::Queued => false,
            State::Delivered => !ack_pending,
            State::Acked | State::Forwarded | State::Bounced | State::Lost => true,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub to: String,
    pub digest: [u8; 32],
    pub accepted_ms: i64,
    pub state: State,
    pub state_ms: i64,
    /// Acceptance order of the envelope (`Queued::seq`).
    pub seq: u64,
    /// Delivered in ack mode and not yet acked.
    pub ack_pending: bool,
    /// The kind of reader the envelope was last handed to (SPEC §12.4 "Readers"); cleared
    /// when it comes back to its queue, kept when it is acked or lost at that reader.
    pub reader: Option<Reader>,
}

/// What a send with an id already seen means.
#[derive(Debug, PartialEq, Eq)]
pub enum Seen {
    New,
    /// The same envelope again: answer `accepted`, queue nothing.
    Duplicate,
    /// The same id with another destination, kind, correlation id or body.
    Conflict,
}

/// The digest that tells a resend from a different envelope under the same id. `ts` is left
/// out: a client may restamp it when it retries.
pub fn digest(to: &str, kind: &str, correlation_id: Option<&str>, body: &str) -> [u8; 32] {
    let mut h = Sha256::new();
    for part in [to, kind] {
        h.update((part.len() as u64).to_be_bytes());
        h.update(part.as_bytes());
    }
    match correlation_id {
        Some(c) => {
            h.update([1]);
            h.update((c.len() as u64).to_be_bytes());
            h.update(c.as_bytes());
        }
        None => h.update([0]),
    }
    h.update(body.as_bytes());
    h.finalize().into()
}

/// The senders that used one id (`Ledger::by_id`); almost always one.
#[derive(Debug)]
enum Senders {
    One(Arc<str>),
    Many(Vec<Arc<str>>),
}

impl Senders {
    fn as_slice(&self) -> &[Arc<str>] {
        match self {
            Senders::One(s) => std::slice::from_ref(s),
            Senders::Many(v) => v,
        }
    }
}

#[derive(Debug)]
pub struct Ledger {
    records: HashMap<Key, Record>,
    /// Every remembered id with the senders that used it, in the order they were remembered:
    /// how `lookup` finds a record for its recipient (module doc).
    by_id: HashMap<Arc<str>, Senders>,
    /// Records looked at by every lookup so far (tests count work, not time).
    touched: Cell<u64>,
    /// Every settled record as (settled at, key): the purge's order (module doc).
    settled: BTreeSet<(i64, Key)>,
    window_ms: i64,
    max_ids: usize,
    /// Index entries the purges have looked at (tests count work, not time).
    examined: u64,
}

impl Ledger {
    pub fn new(window_secs: u64, max_ids: usize) -> Ledger {
        Ledger {
            records: HashMap::new(),
            by_id: HashMap::new(),
            touched: Cell::new(0),
            settled: BTreeSet::new(),
            window_ms: (window_secs as i64).saturating_mul(1000),
            max_ids,
            examined: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.records.len()
    }

    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// Index entries looked at by every purge so far.
    pub fn examined(&self) -> u64 {
        self.examined
    }

    /// Records looked at by every `lookup` so far.
    pub fn touched(&self) -> u64 {
        self.touched.get()
    }

    fn index_id(&mut self, k: &Key) {
        match self.by_id.get_mut(&k.1) {
            None => {
                self.by_id.insert(k.1.clone(), Senders::One(k.0.clone()));
            }
            Some(Senders::One(s)) => {
                let first = s.clone();
                self.by_id
                    .insert(k.1.clone(), Senders::Many(vec![first, k.0.clone()]));
            }
            Some(Senders::Many(v)) => v.push(k.0.clone()),
        }
    }

    fn unindex_id(&mut self, k: &Key) {
        let gone = match self.by_id.get_mut(&k.1) {
            None => false,
            Some(Senders::One(s)) => *s == k.0,
            Some(Senders::Many(v)) => {
                v.retain(|s| *s != k.0);
                match v.len() {
                    0 => true,
                    1 => {
                        let last = v[0].clone();
                        self.by_id.insert(k.1.clone(), Senders::One(last));
                        false
                    }
                    _ => false,
                }
            }
        };
        if gone {
            self.by_id.remove(&k.1);
        }
    }

    pub fn seen(&self, sender: &str, id: &str, digest: &[u8; 32]) -> Seen {
        match self.records.get(&key(sender, id)) {
            None => Seen::New,
            Some(r) if &r.digest == digest => Seen::Duplicate,
            Some(_) => Seen::Conflict,
        }
    }

    /// Keeps the settlement index in step with a record's change from `before` to `after`.
    fn reindex(&mut self, k: &Key, before: Option<(i64, bool)>, after: Option<(i64, bool)>) {
        if let Some((ms, true)) = before {
            self.settled.remove(&(ms, k.clone()));
        }
        if let Some((ms, true)) = after {
            self.settled.insert((ms, k.clone()));
        }
    }

    fn settlement(r: &Record) -> (i64, bool) {
        (r.state_ms, r.state.settled(r.ack_pending))
    }

    pub fn remember(&mut self, sender: &str, id: &str, record: Record) {
        let k = key(sender, id);
        let after = Some(Self::settlement(&record));
        let before = self
            .records
            .insert(k.clone(), record)
            .map(|old| Self::settlement(&old));
        if before.is_none() {
            self.index_id(&k);
        }
        self.reindex(&k, before, after);
    }

    /// Moves a remembered envelope to `state`; its `seq`, or None if it is not remembered.
    pub fn set_state(
        &mut self,
        sender: &str,
        id: &str,
        state: State,
        ack_pending: bool,
        at_ms: i64,
    ) -> Option<u64> {
        let (k, r) = self.records.get_key_value(&key(sender, id))?;
        let (k, before) = (k.clone(), Self::settlement(r));
        let r = self.records.get_mut(&k)?;
        r.state = state;
        r.ack_pending = ack_pending;
        r.state_ms = at_ms;
        if state == State::Queued {
            r.reader = None;
        }
        let (seq, after) = (r.seq, Self::settlement(r));
        self.reindex(&k, Some(before), Some(after));
        Some(seq)
    }

    pub fn state_of(&self, sender: &str, id: &str) -> Option<State> {
        self.records.get(&key(sender, id)).map(|r| r.state)
    }

    /// Records which kind of reader a remembered envelope is being handed to (before its
    /// `delivered` state is set).
    pub fn set_reader(&mut self, sender: &str, id: &str, reader: Reader) {
        if let Some(r) = self.records.get_mut(&key(sender, id)) {
            r.reader = Some(reader);
        }
    }

    pub fn reader_of(&self, sender: &str, id: &str) -> Option<Reader> {
        self.records.get(&key(sender, id)).and_then(|r| r.reader)
    }

    /// The record of exactly this sender's id (no visibility rule: the hub's own use).
    pub fn get(&self, sender: &str, id: &str) -> Option<&Record> {
        self.records.get(&key(sender, id))
    }

    /// Room for `n` more records (a restart knows how many it brings back).
    pub fn reserve(&mut self, n: usize) {
        self.records.reserve(n);
        self.by_id.reserve(n);
    }

    /// A restored envelope is queued at acceptance `seq`: its record says so, with one lookup.
    /// The state's time is kept when it already was `queued`, else it becomes `now_ms` (a
    /// restart is what requeued it). Same as `state_of`, `set_state` and `set_seq` together.
    pub fn restore_queued(&mut self, sender: &str, id: &str, seq: u64, now_ms: i64) {
        let Some((k, r)) = self.records.get_key_value(&key(sender, id)) else {
            return;
        };
        let (k, before) = (k.clone(), Self::settlement(r));
        let Some(r) = self.records.get_mut(&k) else {
            return;
        };
        if r.state != State::Queued {
            r.state = State::Queued;
            r.ack_pending = false;
            r.state_ms = now_ms;
            r.reader = None;
        }
        r.seq = seq;
        let after = Self::settlement(r);
        self.reindex(&k, Some(before), Some(after));
    }

    /// Records where a restored envelope sits in acceptance order.
    pub fn set_seq(&mut self, sender: &str, id: &str, seq: u64) {
        if let Some(r) = self.records.get_mut(&key(sender, id)) {
            r.seq = seq;
        }
    }

    /// The record of `id` that `asker` may see: one it sent, else one addressed to it.
    /// Looks at the asker's own record, then at the record of each other sender of that id
    /// (`by_id`), never at the rest of the ledger.
    pub fn lookup(&self, asker: &str, id: &str) -> Option<(&str, &Record)> {
        let touch = || self.touched.set(self.touched.get() + 1);
        touch();
        if let Some((k, r)) = self.records.get_key_value(&key(asker, id)) {
            return Some((&k.0, r));
        }
        let senders = self.by_id.get(id)?;
        let id: Arc<str> = Arc::from(id);
        senders.as_slice().iter().find_map(|sender| {
            touch();
            self.records
                .get_key_value(&(sender.clone(), id.clone()))
                .filter(|(_, r)| r.to == asker)
                .map(|(k, r)| (&*k.0, r))
        })
    }

    /// Whether the front of the settlement index is due: past the window, or the ledger over
    /// `max_ids`.
    fn front_due(&self, cutoff: i64) -> bool {
        match self.settled.first() {
            Some((ms, _)) => *ms <= cutoff || self.records.len() > self.max_ids,
            None => false,
        }
    }

    /// Forgets records settled longer than the window ago, then the earliest settled ones while
    /// over `max_ids`, at most `PURGE_BATCH` of them. Returns the keys forgotten with their
    /// `seq`, earliest settled first. The window runs from settlement (`state_ms`), not
    /// acceptance: an envelope that sat queued for longer than the window is still remembered
    /// for a whole window after it was delivered or acked. Looks at the index entries it
    /// forgets and one more.
    pub fn purge(&mut self, now_ms: i64) -> Vec<(String, String, u64)> {
        let cutoff = now_ms.saturating_sub(self.window_ms);
        let mut gone = Vec::new();
        while gone.len() < PURGE_BATCH {
            self.examined += 1;
            if !self.front_due(cutoff) {
                break;
            }
            let Some((_, k)) = self.settled.pop_first() else {
                break;
            };
            if let Some(r) = self.records.remove(&k) {
                self.unindex_id(&k);
                gone.push((k.0.to_string(), k.1.to_string(), r.seq));
            }
        }
        gone
    }

    /// True when a `purge` at `now_ms` would forget something: the last one stopped at its
    /// batch limit, or more became due.
    pub fn purge_pending(&self, now_ms: i64) -> bool {
        self.front_due(now_ms.saturating_sub(self.window_ms))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(to: &str, d: [u8; 32], ms: i64, state: State) -> Record {
        Record {
            to: to.into(),
            digest: d,
            accepted_ms: ms,
            state,
            state_ms: ms,
            seq: 0,
            ack_pending: false,
            reader: None,
        }
    }

    #[test]
    fn digest_separates_fields() {
        assert_ne!(digest("ab", "c", None, "1"), digest("a", "bc", None, "1"));
        assert_ne!(digest("a", "b", None, "1"), digest("a", "b", Some(""), "1"));
        assert_eq!(
            digest("a", "b", Some("x"), "{}"),
            digest("a", "b", Some("x"), "{}")
        );
    }

    #[test]
    fn seen_tells_duplicates_from_conflicts() {
        let mut l = Ledger::new(60, 100);
        let d = digest("b", "task", None, "1");
        assert_eq!(l.seen("a", "x", &d), Seen::New);
        l.remember("a", "x", rec("b", d, 0, State::Queued));
        assert_eq!(l.seen("a", "x", &d), Seen::Duplicate);
        assert_eq!(
            l.seen("a", "x", &digest("b", "task", None, "2")),
            Seen::Conflict
        );
        assert_eq!(l.seen("other", "x", &d), Seen::New, "ids are per sender");
    }

    #[test]
    fn lookup_only_for_sender_or_recipient() {
        let mut l = Ledger::new(60, 100);
        l.remember("a", "x", rec("b", [0; 32], 0, State::Queued));
        assert_eq!(l.lookup("a", "x").unwrap().0, "a");
        assert_eq!(l.lookup("b", "x").unwrap().0, "a");
        assert!(l.lookup("c", "x").is_none());
    }

    #[test]
    fn purge_keeps_unsettled_and_recent() {
        let mut l = Ledger::new(10, 100);
        l.remember("a", "old-acked", rec("b", [0; 32], 0, State::Acked));
        l.remember("a", "old-queued", rec("b", [0; 32], 0, State::Queued));
        l.remember("a", "new-acked", rec("b", [0; 32], 9_000, State::Acked));
        let mut pending = rec("b", [0; 32], 0, State::Delivered);
        pending.ack_pending = true;
        l.remember("a", "old-unacked", pending);
        let gone = l.purge(10_000);
        assert_eq!(gone, vec![("a".to_owned(), "old-acked".to_owned(), 0)]);
        assert_eq!(l.len(), 3);
    }

    /// Regression: the window ran from acceptance, so an envelope queued for longer than the
    /// window was forgotten at the first purge after it settled.
    #[test]
    fn purge_counts_the_window_from_settlement() {
        let mut l = Ledger::new(10, 100);
        let mut long_queued = rec("b", [0; 32], 0, State::Acked);
        long_queued.state_ms = 25_000;
        l.remember("a", "x", long_queued);
        assert!(l.purge(30_000).is_empty(), "settled 5 s ago");
        assert_eq!(l.purge(35_000), vec![("a".to_owned(), "x".to_owned(), 0)]);
    }

    #[test]
    fn purge_enforces_max_ids_oldest_settled_first() {
        let mut l = Ledger::new(1_000_000, 2);
        for (i, id) in ["p", "q", "r", "s"].iter().enumerate() {
            let mut r = rec("b", [0; 32], i as i64, State::Delivered);
            r.seq = 100 + i as u64;
            l.remember("a", id, r);
        }
        let gone = l.purge(10);
        assert_eq!(
            gone.iter()
                .map(|(_, i, seq)| (i.as_str(), *seq))
                .collect::<Vec<_>>(),
            [("p", 100), ("q", 101)],
            "each forgotten id comes with its seq, which names it on disk"
        );
    }

    /// The purge touches what it forgets and one more entry, however large the ledger.
    #[test]
    fn a_purge_examines_only_what_it_forgets() {
        let mut l = Ledger::new(10, 1_000_000);
        for i in 0..100_000i64 {
            // Ten settled long ago, the rest recently; a few thousand still queued.
            let ms = if i < 10 { i } else { 50_000 + i };
            let state = if i % 20 == 19 {
                State::Queued
            } else {
                State::Acked
            };
            l.remember("a", &format!("id{i}"), rec("b", [0; 32], ms, state));
        }
        let before = l.examined();
        let gone = l.purge(20_000);
        assert_eq!(gone.len(), 10);
        assert_eq!(
            l.examined() - before,
            11,
            "the ten forgotten and the first kept"
        );
        let before = l.examined();
        assert!(l.purge(20_000).is_empty());
        assert_eq!(l.examined() - before, 1);
        assert!(!l.purge_pending(20_000));
        assert_eq!(l.len(), 100_000 - 10);
    }

    #[test]
    fn a_backlog_is_forgotten_in_batches() {
        let mut l = Ledger::new(10, 1_000_000);
        let n = PURGE_BATCH * 2 + 5;
        for i in 0..n {
            l.remember(
                "a",
                &format!("id{i}"),
                rec("b", [0; 32], i as i64, State::Acked),
            );
        }
        assert!(l.purge_pending(1_000_000));
        assert_eq!(l.purge(1_000_000).len(), PURGE_BATCH);
        assert!(
            l.purge_pending(1_000_000),
            "the rest waits for the next call"
        );
        assert_eq!(l.purge(1_000_000).len(), PURGE_BATCH);
        assert_eq!(l.purge(1_000_000).len(), 5);
        assert!(!l.purge_pending(1_000_000) && l.is_empty());
    }

    /// A record that settles, unsettles (ack pending again) or settles again is found by the
    /// purge under its latest settlement time only.
    #[test]
    fn the_index_follows_every_state_change() {
        let mut l = Ledger::new(10, 100);
        l.remember("a", "x", rec("b", [0; 32], 0, State::Queued));
        assert!(l.purge(1_000_000).is_empty(), "queued: never purged");
        l.set_state("a", "x", State::Delivered, true, 1_000);
        assert!(l.purge(1_000_000).is_empty(), "awaiting its ack: kept");
        l.set_state("a", "x", State::Acked, false, 5_000);
        assert!(l.purge(14_000).is_empty(), "acked 9 s ago");
        // Remembered again under the same key (a restore): the old index entry goes.
        l.remember("a", "x", rec("b", [0; 32], 20_000, State::Acked));
        assert!(l.purge(29_000).is_empty());
        assert_eq!(l.purge(30_000).len(), 1);
        assert!(l.settled.is_empty() && l.is_empty());
    }

    /// The reader is the last one the envelope was handed to: kept through the ack and a
    /// loss, cleared when the envelope comes back to its queue.
    #[test]
    fn the_reader_follows_the_handoffs() {
        let mut l = Ledger::new(10, 100);
        l.remember("a", "x", rec("b", [0; 32], 0, State::Queued));
        l.set_reader("a", "x", Reader::StopHook);
        l.set_state("a", "x", State::Delivered, true, 1);
        assert_eq!(l.reader_of("a", "x"), Some(Reader::StopHook));
        l.set_state("a", "x", State::Queued, false, 2);
        assert_eq!(l.reader_of("a", "x"), None, "returned: no reader holds it");
        l.set_reader("a", "x", Reader::McpAwait);
        l.set_state("a", "x", State::Delivered, true, 3);
        l.set_state("a", "x", State::Acked, false, 4);
        assert_eq!(l.reader_of("a", "x"), Some(Reader::McpAwait));
        l.set_reader("nobody", "x", Reader::Drain);
        assert_eq!(l.reader_of("nobody", "x"), None);
    }
}
