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
//! Ids come from clients, so what the ledger keeps is charged to a byte budget
//! (`limits.idempotency_max_bytes`, issue 29) besides the count (`idempotency_max_ids`): each
//! record costs `RECORD_BYTES` plus the texts it pins (its id unless a UUID held inline, its
//! sender's and recipient's names). Past either, the purge forgets the earliest-settled
//! records first, exactly as past the count; records not yet settled are never forgotten
//! (their envelopes are queued, and the queue caps bound them). Refusing sends instead would
//! let one sender that filled the budget with settled ids stop every sender for a whole
//! window; forgetting the oldest settled ids keeps every resend the client's own retry makes
//! (within seconds of the first attempt) recognised, which is what exactly-once needs.
//!
//! Owns that bookkeeping. Refuses IO and clocks: times are wall-clock milliseconds passed in.

use super::id_key::{Id, Key as IdKey};
use super::names::{Name, Names};
use crate::kernel::fold_hash::FoldMap;
use crate::wire::Reader;
use sha2::{Digest, Sha256};
use std::cell::Cell;
use std::collections::hash_map::Entry;
use std::collections::BTreeSet;

/// Records forgotten by one `purge` at most: bounded work per event-loop iteration even after
/// a restart that finds a whole window's worth expired. Each one also costs a row delete in
/// the next store commit.
pub const PURGE_BATCH: usize = 4096;

/// Sender and id, shared between the map and the settlement index.
type Key = (Name, Id);

/// What one record costs beside the texts it pins (module doc): its slot in the id table (88
/// bytes, `a_ledger_slot_stays_small`) at the table's load, and its entry in the settlement
/// index (a B-tree node's share of the time, the sender and the id). An estimate on the high
/// side, so the budget bounds the memory it names.
pub const RECORD_BYTES: usize = 192;

/// The bytes `limits.idempotency_max_bytes` is charged for a record (`RECORD_BYTES`, the id's
/// text unless it is a UUID held inline, the sender's and the recipient's names: names are
/// shared between records, but one record may be the only one pinning a long name).
fn record_cost(sender: &str, id: &Id, to: &str) -> usize {
    let id_text = match id {
        Id::Uuid(_) => 0,
        Id::Text(t) => t.len(),
    };
    RECORD_BYTES + id_text + sender.len() + to.len()
}

/// A restored envelope is queued again: a record that said otherwise (an ack-mode delivery
/// the crash cut off before its ack) becomes `queued` at `now_ms` with no reader.
pub(super) fn queue_again(r: &mut Record, now_ms: i64) {
    if r.state != State::Queued {
        r.state = State::Queued;
        r.ack_pending = false;
        r.state_ms = now_ms;
        r.reader = None;
    }
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
    /// The recipient; the ledger keeps one shared copy per name (`names`).
    pub to: Name,
    /// The first half of the envelope's `digest` (`short`): the store keeps all 32 bytes.
    pub digest: [u8; 16],
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

/// The part of a `digest` a ledger record keeps: its first 16 bytes. A million remembered ids
/// each save 16 bytes (docs/performance.md "Memory per envelope"); what the record
/// decides with it is whether a resend under the same sender and id is the same envelope,
/// and both envelopes are the one sender's own, so a collision (about 2^64 work to find)
/// could only make that sender's second, different envelope read as its first: no one else's
/// mail is reachable through it.
pub fn short(digest: &[u8; 32]) -> [u8; 16] {
    let mut half = [0; 16];
    half.copy_from_slice(&digest[..16]);
    half
}

/// An id as a caller holds it: text, made an `Id` by the ledger once, or the queued
/// envelope's `Id` (`Queued::id`), which the ledger's key then shares instead of copying.
pub trait IdText {
    fn key(&self) -> IdKey<'_>;
    fn shared(&self) -> Id;
    /// The id's text, lent to `f` without an allocation.
    fn with_text<R>(&self, f: impl FnOnce(&str) -> R) -> R;
}

impl IdText for str {
    fn key(&self) -> IdKey<'_> {
        IdKey::of(self)
    }
    fn shared(&self) -> Id {
        Id::new(self)
    }
    fn with_text<R>(&self, f: impl FnOnce(&str) -> R) -> R {
        f(self)
    }
}

impl IdText for String {
    fn key(&self) -> IdKey<'_> {
        self.as_str().key()
    }
    fn shared(&self) -> Id {
        self.as_str().shared()
    }
    fn with_text<R>(&self, f: impl FnOnce(&str) -> R) -> R {
        self.as_str().with_text(f)
    }
}

impl IdText for Id {
    fn key(&self) -> IdKey<'_> {
        match self {
            Id::Uuid(k) => IdKey::Uuid(*k),
            Id::Text(t) => IdKey::Text(t),
        }
    }
    fn shared(&self) -> Id {
        self.clone()
    }
    fn with_text<R>(&self, f: impl FnOnce(&str) -> R) -> R {
        Id::with_text(self, f)
    }
}

/// One remembered (sender, id): the sender's interned name and the record.
#[derive(Debug)]
struct Held {
    sender: Name,
    record: Record,
}

/// The records of one id, one per sender that used it (module doc); almost always one.
#[derive(Debug)]
enum Holders {
    One(Held),
    Many(Vec<Held>),
}

impl Holders {
    fn as_slice(&self) -> &[Held] {
        match self {
            Holders::One(h) => std::slice::from_ref(h),
            Holders::Many(v) => v,
        }
    }

    fn as_mut_slice(&mut self) -> &mut [Held] {
        match self {
            Holders::One(h) => std::slice::from_mut(h),
            Holders::Many(v) => v,
        }
    }

    fn push(&mut self, held: Held) {
        let prev = std::mem::replace(self, Holders::Many(Vec::new()));
        let mut v = match prev {
            Holders::One(first) => vec![first],
            Holders::Many(v) => v,
        };
        v.push(held);
        *self = Holders::Many(v);
    }
}

/// What `Ledger::insert` found under the key.
enum Inserted {
    New,
    /// The key was remembered already: the record it held.
    Replaced(Record),
}

#[derive(Debug)]
pub struct Ledger {
    /// Keyed by id alone, with each sender's record under it: one table serves the sender's
    /// lookups (idempotent resends, receipts) and the recipient's (`status`), which finds
    /// the id's records without a scan (module doc). One hash of the id per operation.
    records: FoldMap<Id, Holders>,
    /// Records held (an id may hold several).
    count: usize,
    /// Senders' and recipients' names, one copy each (`names`).
    names: Names,
    /// Records looked at by every lookup so far (tests count work, not time).
    touched: Cell<u64>,
    /// Probes of `records` (each one hash of an id) by every operation so far: a restart
    /// costs one per row (tests count work, not time).
    probes: Cell<u64>,
    /// Every settled record as (settled at, key): the purge's order (module doc).
    settled: BTreeSet<(i64, Key)>,
    window_ms: i64,
    max_ids: usize,
    /// What the records are charged (`record_cost`), and the budget past which the purge
    /// forgets the earliest settled (`limits.idempotency_max_bytes`).
    bytes: usize,
    max_bytes: usize,
    /// Index entries the purges have looked at (tests count work, not time).
    examined: u64,
}

impl Ledger {
    pub fn new(window_secs: u64, max_ids: usize) -> Ledger {
        Ledger {
            records: FoldMap::default(),
            count: 0,
            names: Names::default(),
            touched: Cell::new(0),
            probes: Cell::new(0),
            settled: BTreeSet::new(),
            window_ms: (window_secs as i64).saturating_mul(1000),
            max_ids,
            bytes: 0,
            max_bytes: usize::MAX,
            examined: 0,
        }
    }

    /// The byte budget (`limits.idempotency_max_bytes`); without it the count alone bounds.
    pub fn with_max_bytes(mut self, max_bytes: usize) -> Ledger {
        self.max_bytes = max_bytes;
        self
    }

    /// What the records held are charged (module doc).
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Over the count or the byte budget: the next purge forgets the earliest settled ids
    /// early (the hub purges at once rather than at its next interval).
    pub fn over_budget(&self) -> bool {
        self.count > self.max_ids || self.bytes > self.max_bytes
    }

    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Index entries looked at by every purge so far.
    pub fn examined(&self) -> u64 {
        self.examined
    }

    /// Records looked at by every `lookup` so far.
    pub fn touched(&self) -> u64 {
        self.touched.get()
    }

    /// Probes of the record table by every operation so far.
    pub fn probes(&self) -> u64 {
        self.probes.get()
    }

    fn probe(&self, n: u64) {
        self.probes.set(self.probes.get() + n);
    }

    fn find<I: IdText + ?Sized>(&self, sender: &str, id: &I) -> Option<&Record> {
        self.probe(1);
        self.records
            .get(id.key().bytes())?
            .as_slice()
            .iter()
            .find(|h| &*h.sender == sender)
            .map(|h| &h.record)
    }

    /// The key of `sender`'s record of `id` (for the settlement index) and the record.
    fn find_mut<I: IdText + ?Sized>(&mut self, sender: &str, id: &I) -> Option<(Key, &mut Record)> {
        self.probe(2);
        // Two probes of the id: the std map lends no mutable value together with its key,
        // and the settlement index needs the key's shared copy.
        let key = id.key();
        let (id_arc, _) = self.records.get_key_value(key.bytes())?;
        let id_arc = id_arc.clone();
        let held = self
            .records
            .get_mut(key.bytes())?
            .as_mut_slice()
            .iter_mut()
            .find(|h| &*h.sender == sender)?;
        Some(((held.sender.clone(), id_arc), &mut held.record))
    }

    pub fn seen<I: IdText + ?Sized>(&self, sender: &str, id: &I, digest: &[u8; 32]) -> Seen {
        match self.find(sender, id) {
            None => Seen::New,
            Some(r) if r.digest == short(digest) => Seen::Duplicate,
            Some(_) => Seen::Conflict,
        }
    }

    /// Keeps the settlement index in step with a record's change from `before` to `after`.
    fn reindex(&mut self, k: &Key, before: Option<(i64, bool)>, after: Option<(i64, bool)>) {
        if before == after {
            return;
        }
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

    /// Puts `record` under (sender, id) with one hash of the id, its names interned; the
    /// settlement index follows.
    fn insert<I: IdText + ?Sized>(
        &mut self,
        sender: &str,
        id: &I,
        mut record: Record,
        to_interned: bool,
    ) -> Inserted {
        let sender = self.names.intern(sender);
        if !to_interned {
            record.to = self.names.intern(&record.to);
        }
        self.insert_shared(sender, id.shared(), record)
    }

    /// `insert` with the sender's and the record's names already the ledger's (`name`).
    fn insert_shared(&mut self, sender: Name, id_arc: Id, record: Record) -> Inserted {
        let after = Some(Self::settlement(&record));
        let after_to = record.to.clone();
        self.probe(1);
        let (key, found) = match self.records.entry(id_arc) {
            Entry::Vacant(slot) => {
                let key = (sender.clone(), slot.key().clone());
                slot.insert(Holders::One(Held { sender, record }));
                (key, Inserted::New)
            }
            Entry::Occupied(mut slot) => {
                let key = (sender.clone(), slot.key().clone());
                let holders = slot.get_mut();
                match holders
                    .as_mut_slice()
                    .iter_mut()
                    .find(|h| h.sender == sender)
                {
                    Some(h) => (
                        key,
                        Inserted::Replaced(std::mem::replace(&mut h.record, record)),
                    ),
                    None => {
                        holders.push(Held { sender, record });
                        (key, Inserted::New)
                    }
                }
            }
        };
        let new_cost = record_cost(&key.0, &key.1, &after_to);
        let old_cost = match &found {
            Inserted::New => 0,
            Inserted::Replaced(old) => record_cost(&key.0, &key.1, &old.to),
        };
        self.bytes = self.bytes.saturating_add(new_cost).saturating_sub(old_cost);
        let before = match &found {
            Inserted::New => {
                self.count += 1;
                None
            }
            Inserted::Replaced(old) => Some(Self::settlement(old)),
        };
        self.reindex(&key, before, after);
        found
    }

    /// Remembers `record` under (sender, id); with the queued envelope's own `Id` as
    /// `id`, the record's key shares it.
    pub fn remember<I: IdText + ?Sized>(&mut self, sender: &str, id: &I, record: Record) {
        self.insert(sender, id, record, false);
    }

    /// The ledger's shared copy of an agent's name, for a `Record::to` built at startup
    /// (`remember_interned`).
    pub fn name(&mut self, name: &str) -> Name {
        self.names.intern(name)
    }

    /// `remember` for a record whose `to` came from `name`: a restart remembers a million,
    /// and skipping the second interning saves a hash per record.
    pub fn remember_interned(&mut self, sender: &str, id: &Id, record: Record) {
        self.insert(sender, id, record, true);
    }

    /// A restored row's record (`hub::restore`): `sender` and `record.to` are the ledger's
    /// own copies (`name`), `id` becomes the key. When (sender, id) was remembered already
    /// (a store that repeats a key), the record replaces it and the earlier one's seq is
    /// returned.
    pub fn restore_record(&mut self, sender: Name, id: Id, record: Record) -> Option<u64> {
        match self.insert_shared(sender, id, record) {
            Inserted::New => None,
            Inserted::Replaced(old) => Some(old.seq),
        }
    }

    /// Moves a remembered envelope to `state`; its `seq`, or None if it is not remembered.
    pub fn set_state<I: IdText + ?Sized>(
        &mut self,
        sender: &str,
        id: &I,
        state: State,
        ack_pending: bool,
        at_ms: i64,
    ) -> Option<u64> {
        let (k, r) = self.find_mut(sender, id)?;
        let before = Self::settlement(r);
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

    pub fn state_of<I: IdText + ?Sized>(&self, sender: &str, id: &I) -> Option<State> {
        self.find(sender, id).map(|r| r.state)
    }

    /// Records which kind of reader a remembered envelope is being handed to (before its
    /// `delivered` state is set).
    pub fn set_reader<I: IdText + ?Sized>(&mut self, sender: &str, id: &I, reader: Reader) {
        if let Some((_, r)) = self.find_mut(sender, id) {
            r.reader = Some(reader);
        }
    }

    pub fn reader_of<I: IdText + ?Sized>(&self, sender: &str, id: &I) -> Option<Reader> {
        self.find(sender, id).and_then(|r| r.reader)
    }

    /// The record of exactly this sender's id (no visibility rule: the hub's own use).
    pub fn get<I: IdText + ?Sized>(&self, sender: &str, id: &I) -> Option<&Record> {
        self.find(sender, id)
    }

    /// Room for `n` more records (a restart knows how many it brings back).
    pub fn reserve(&mut self, n: usize) {
        self.records.reserve(n);
    }

    /// A restored envelope is queued at acceptance `seq`: its record says so, with one lookup.
    /// The state's time is kept when it already was `queued`, else it becomes `now_ms` (a
    /// restart is what requeued it). Same as `state_of`, `set_state` and `set_seq` together.
    pub fn restore_queued<I: IdText + ?Sized>(
        &mut self,
        sender: &str,
        id: &I,
        seq: u64,
        now_ms: i64,
    ) {
        let Some((k, r)) = self.find_mut(sender, id) else {
            return;
        };
        let before = Self::settlement(r);
        queue_again(r, now_ms);
        r.seq = seq;
        let after = Self::settlement(r);
        self.reindex(&k, Some(before), Some(after));
    }

    /// Records where a restored envelope sits in acceptance order.
    pub fn set_seq<I: IdText + ?Sized>(&mut self, sender: &str, id: &I, seq: u64) {
        if let Some((_, r)) = self.find_mut(sender, id) {
            r.seq = seq;
        }
    }

    /// The record of `id` that `asker` may see: one it sent, else one addressed to it.
    /// Looks at the id's records only (the asker's own, then each other sender's), never at
    /// the rest of the ledger.
    pub fn lookup<I: IdText + ?Sized>(&self, asker: &str, id: &I) -> Option<(&str, &Record)> {
        let touch = || self.touched.set(self.touched.get() + 1);
        touch();
        self.probe(1);
        let held = self.records.get(id.key().bytes())?.as_slice();
        if let Some(h) = held.iter().find(|h| &*h.sender == asker) {
            return Some((&h.sender, &h.record));
        }
        held.iter().find_map(|h| {
            touch();
            (&*h.record.to == asker).then_some((&*h.sender, &h.record))
        })
    }

    /// Whether the front of the settlement index is due: past the window, or the ledger over
    /// `max_ids`.
    fn front_due(&self, cutoff: i64) -> bool {
        match self.settled.first() {
            Some((ms, _)) => *ms <= cutoff || self.over_budget(),
            None => false,
        }
    }

    /// Forgets records settled longer than the window ago, then the earliest settled ones while
    /// over `max_ids` or the byte budget, at most `PURGE_BATCH` of them. Returns the keys forgotten with their
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
            if let Some(seq) = self.forget(&k) {
                gone.push((k.0.to_string(), k.1.to_string(), seq));
            }
        }
        gone
    }

    /// Drops the record of `k`; its seq, or None if it was not held.
    fn forget(&mut self, k: &Key) -> Option<u64> {
        self.probe(1);
        let holders = self.records.get_mut(k.1.key())?;
        let (seq, to) = match holders {
            Holders::One(h) => {
                if h.sender != k.0 {
                    return None;
                }
                let (seq, to) = (h.record.seq, h.record.to.clone());
                self.probe(1);
                self.records.remove(k.1.key());
                (seq, to)
            }
            Holders::Many(v) => {
                let i = v.iter().position(|h| h.sender == k.0)?;
                let gone = v.remove(i).record;
                if v.len() == 1 {
                    if let Some(last) = v.pop() {
                        *holders = Holders::One(last);
                    }
                }
                (gone.seq, gone.to)
            }
        };
        self.count -= 1;
        self.bytes = self.bytes.saturating_sub(record_cost(&k.0, &k.1, &to));
        Some(seq)
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
            digest: short(&d),
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
            l.remember("a", *id, r);
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

    /// One id used by two senders: each sees its own record, a recipient sees the first
    /// remembered that is addressed to it, and forgetting one keeps the other.
    #[test]
    fn an_id_shared_by_two_senders() {
        let mut l = Ledger::new(10, 100);
        l.remember("a", "x", rec("b", [1; 32], 0, State::Acked));
        l.remember("c", "x", rec("d", [2; 32], 5_000, State::Queued));
        assert_eq!(l.len(), 2);
        assert_eq!(l.get("a", "x").unwrap().digest, [1; 16]);
        assert_eq!(l.get("c", "x").unwrap().digest, [2; 16]);
        assert_eq!(l.lookup("b", "x").unwrap().0, "a");
        assert_eq!(l.lookup("d", "x").unwrap().0, "c");
        assert_eq!(l.lookup("c", "x").unwrap().0, "c", "the asker's own first");
        assert!(l.lookup("e", "x").is_none());
        assert_eq!(l.purge(20_000), vec![("a".to_owned(), "x".to_owned(), 0)]);
        assert_eq!(l.len(), 1);
        assert!(l.get("a", "x").is_none());
        assert_eq!(l.state_of("c", "x"), Some(State::Queued));
        l.set_state("c", "x", State::Acked, false, 30_000);
        assert_eq!(l.purge(40_000).len(), 1);
        assert!(l.is_empty() && l.records.is_empty());
    }

    /// Every record of one recipient or sender holds the same copy of the name.
    #[test]
    fn names_are_shared_between_records() {
        let mut l = Ledger::new(10, 100);
        for id in ["x", "y", "z"] {
            l.remember("a", id, rec("b", [0; 32], 0, State::Queued));
        }
        let (x, z) = (l.get("a", "x").unwrap(), l.get("a", "z").unwrap());
        assert!(Name::ptr_eq(&x.to, &z.to));
        assert_eq!(l.names.len(), 2, "a and b");
    }

    /// A ledger slot (id key and one sender's record) is what a million remembered ids cost
    /// beside their texts (docs/performance.md "Memory per envelope"): 88 bytes with
    /// an inline id key, one-word names and the digest's first half, 120 with an `Arc<str>`
    /// key, fat names and the whole digest.
    #[test]
    fn a_ledger_slot_stays_small() {
        let slot = std::mem::size_of::<(Id, Holders)>();
        assert!(slot <= 88, "ledger slot grew to {slot} bytes");
        assert_eq!(std::mem::size_of::<Name>(), std::mem::size_of::<usize>());
    }

    /// Only the first half is kept, but a resend that differs anywhere in what is digested
    /// (here one byte of the body) is still a conflict, never a duplicate.
    #[test]
    fn a_short_digest_still_tells_a_changed_resend() {
        let mut l = Ledger::new(60, 100);
        let d = digest("b", "task", None, "{\"n\":1}");
        l.remember("a", "x", rec("b", d, 0, State::Queued));
        assert_eq!(l.seen("a", "x", &d), Seen::Duplicate);
        for body in ["{\"n\":2}", "{\"n\":1} ", "{\"n\":10}"] {
            let other = digest("b", "task", None, body);
            assert_eq!(l.seen("a", "x", &other), Seen::Conflict, "{body}");
        }
    }

    /// The byte budget charges each record `RECORD_BYTES`, its id's text (none for a UUID held
    /// inline) and its two names; a replaced record is charged once; forgetting gives it back.
    /// Past the budget the purge forgets the earliest settled first, never an unsettled one.
    #[test]
    fn the_byte_budget_charges_what_a_record_pins_and_forgets_the_earliest_settled() {
        let uuid = "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d";
        let text = "x".repeat(100);
        let one = RECORD_BYTES + "a".len() + "bb".len();
        let mut l = Ledger::new(1_000_000, 1_000_000).with_max_bytes(3 * one + 100);
        l.remember("a", uuid, rec("bb", [0; 32], 0, State::Acked));
        assert_eq!(l.bytes(), one, "a UUID's text is not held");
        l.remember("a", text.as_str(), rec("bb", [0; 32], 1, State::Acked));
        assert_eq!(l.bytes(), 2 * one + 100);
        l.remember("a", text.as_str(), rec("bbbb", [0; 32], 1, State::Acked));
        assert_eq!(l.bytes(), 2 * one + 102, "replaced, charged once");
        assert!(!l.over_budget());
        l.remember("a", "q", rec("bb", [0; 32], 2, State::Queued));
        l.remember("a", "r", rec("bb", [0; 32], 3, State::Acked));
        assert!(l.over_budget());
        let gone: Vec<String> = l.purge(10).into_iter().map(|(_, id, _)| id).collect();
        assert_eq!(
            gone,
            [uuid.to_owned(), text.clone()],
            "earliest settled first"
        );
        assert!(!l.over_budget());
        assert_eq!(l.get("a", "q").map(|r| r.state), Some(State::Queued));
        l.set_state("a", "q", State::Acked, false, 4);
        assert_eq!(l.purge(i64::MAX).len(), 2);
        assert_eq!((l.bytes(), l.len()), (0, 0), "every byte given back");
    }

    /// A UUID id (held inline) and its upper-case twin (held as text) are two ids, each found
    /// by its own text and by its `Id`, neither by the other's.
    #[test]
    fn a_uuid_id_and_its_text_twin_are_two_records() {
        let lower = "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d";
        let upper = lower.to_uppercase();
        let mut l = Ledger::new(60, 100);
        l.remember("a", lower, rec("b", [1; 32], 0, State::Queued));
        assert_eq!(l.get("a", upper.as_str()), None);
        l.remember("a", upper.as_str(), rec("b", [2; 32], 0, State::Acked));
        assert_eq!(l.len(), 2);
        assert_eq!(l.get("a", lower).unwrap().digest, [1; 16]);
        assert_eq!(l.get("a", &Id::new(lower)).unwrap().digest, [1; 16]);
        assert_eq!(l.get("a", upper.as_str()).unwrap().digest, [2; 16]);
        assert_eq!(l.lookup("b", lower).unwrap().1.state, State::Queued);
        l.set_state("a", &Id::new(lower), State::Acked, false, 5);
        assert_eq!(l.state_of("a", lower), Some(State::Acked));
        let gone = l.purge(i64::MAX);
        let mut ids: Vec<String> = gone.into_iter().map(|(_, id, _)| id).collect();
        ids.sort();
        assert_eq!(ids, [upper.clone(), lower.to_string()]);
        assert!(l.is_empty());
    }
}
