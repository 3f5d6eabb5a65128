//! Queues and parked waiters (SPEC §5): one FIFO queue per agent name, waiters indexed by
//! filter so a send finds the most specific, oldest waiter in constant time.
//!
//! Owns: which envelope is queued where, which waiter is parked on what, and the per-agent
//! caps. Refuses: IO, clocks, connection state (waiters are plain `ConnId`s here).
//!
//! Cost does not grow with work (docs/performance.md "How cost grows with work"): a queue is
//! sorted by acceptance seq, so one envelope is found by binary search; a filtered await asks
//! the queue's `QueueIndex` for its candidates instead of walking the queue; the total queued is
//! a running count. `Work` counts what each operation looks at, so the core's tests can tell a
//! scan from a lookup without timing anything.

use super::conn_map::ConnId;
use super::id_key::Id;
use super::names::{Name, Names};
use super::queue_index::QueueIndex;
use crate::kernel::fold_hash::FoldMap;
use crate::wire::envelope_text::{split, Parts, Split, Tail};
use crate::wire::Envelope;
use std::cell::Cell;
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

/// An accepted envelope as the router holds it: the routing fields plus what is left of its
/// canonical text (with `from` stamped), the `ts` and the body (`wire::envelope_text::Tail`),
/// from which the delivery line, a forward and the audit record write the whole text back.
///
/// Every string is shared rather than owned (docs/performance.md "How cost grows with work"):
/// a queued envelope's `from`, `to` and `kind` are the router's one copy of each name
/// (`Router::enqueue_back` swaps them in; a staged send and a restored row take them from
/// `Router::name`), and its `id` is the same `Id` the ledger keys its record by (inline when it
/// is a canonical UUID, `hub::id_key`). The names are one-word `Name`s, not `Arc<str>`, which
/// keeps the entry at 88 bytes (the test `a_queue_entry_stays_small`), and the text is not
/// held a second time beside them (docs/performance.md "Memory per envelope").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Queued {
    pub id: Id,
    pub from: Name,
    pub to: Name,
    pub kind: Name,
    pub correlation_id: Option<Name>,
    pub text: Tail,
    /// Acceptance order, stamped by the hub when the envelope is accepted. Every queue is kept
    /// sorted by it, so an envelope that comes back from a failed delivery regains its place.
    pub seq: u64,
    /// Deliveries of this envelope that were handed out and came back (SPEC §12.2).
    pub attempts: u32,
    /// The text's length, counted against the queue's byte cap: set once when the entry is
    /// built (`with_tail`, `stored`), where it was the held text's `len()`, and kept in what
    /// was padding. Private, so no entry is built without it.
    size: u32,
}

impl Queued {
    /// An envelope of these fields and `text`, not yet stamped with its place (`seq` 0) and
    /// never handed out; its size is worked out from the parts.
    pub fn with_tail(
        id: Id,
        from: Name,
        to: Name,
        kind: Name,
        correlation_id: Option<Name>,
        text: Tail,
    ) -> Queued {
        let mut q = Queued {
            id,
            from,
            to,
            kind,
            correlation_id,
            text,
            seq: 0,
            attempts: 0,
            size: 0,
        };
        q.size = size_field(q.with_parts(|p| q.text.text_len(p)));
        q
    }

    /// An envelope read back from the store with its whole `text` and where `split` found
    /// its `ts` and body, if it did. The text written back is `text` either way, so its
    /// length is the size: nothing is worked out per row at a restart.
    pub fn stored(
        id: Id,
        from: Name,
        to: Name,
        kind: Name,
        correlation_id: Option<Name>,
        text: &str,
        split: Option<Split>,
    ) -> Queued {
        Queued {
            id,
            from,
            to,
            kind,
            correlation_id,
            text: Tail::from_stored(text, split),
            seq: 0,
            attempts: 0,
            size: size_field(text.len()),
        }
    }

    /// An envelope not yet stamped with its place (`seq` 0) and never handed out, from its
    /// whole `text` (kept whole unless it is the canonical text of these fields).
    pub fn new(
        id: &str,
        from: &str,
        to: &str,
        kind: &str,
        correlation_id: Option<&str>,
        text: &str,
    ) -> Queued {
        let parts = Parts {
            id,
            from,
            to,
            kind,
            correlation_id,
        };
        Queued::stored(
            Id::new(id),
            Name::new(from),
            Name::new(to),
            Name::new(kind),
            correlation_id.map(Name::new),
            text,
            split(text, &parts),
        )
    }

    /// Lends `f` the fields the text is written from.
    fn with_parts<R>(&self, f: impl FnOnce(&Parts<'_>) -> R) -> R {
        self.id.with_text(|id| {
            f(&Parts {
                id,
                from: &self.from,
                to: &self.to,
                kind: &self.kind,
                correlation_id: self.correlation_id.as_deref(),
            })
        })
    }

    /// The envelope's whole text, shared, as the audit log and a forward take it.
    pub fn shared_text(&self) -> Arc<str> {
        let mut s = String::with_capacity(self.size_bytes());
        self.with_parts(|p| self.text.push_text(&mut s, p));
        Arc::from(s)
    }

    /// The delivery line, `{"envelope":<text>}` and its newline (SPEC §4.2).
    pub fn envelope_line(&self) -> String {
        let mut s = String::with_capacity(self.size_bytes() + 15);
        s.push_str("{\"envelope\":");
        self.with_parts(|p| self.text.push_text(&mut s, p));
        s.push_str("}\n");
        s
    }

    /// Bytes this envelope counts against its queue's byte cap: its text's length.
    pub fn size_bytes(&self) -> usize {
        self.size as usize
    }
}

/// A text's length as `Queued::size` holds it. A text is at most a line
/// (`config::bounds::MAX_LINE_BYTES`, 64 MiB) or a stored text the store bounds as well; the
/// saturation only keeps the add and the subtract of one entry equal.
fn size_field(len: usize) -> u32 {
    len.try_into().unwrap_or(u32::MAX)
}

/// An await's filters; both must pass when set (SPEC §5.2).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Filter {
    pub reply_to: Option<String>,
    pub kind: Option<String>,
}

impl Filter {
    pub fn matches(&self, env: &Queued) -> bool {
        // `map_or(true, …)` rather than `is_none_or`, which needs Rust 1.82 (MSRV is 1.80).
        self.reply_to
            .as_ref()
            .map_or(true, |r| env.correlation_id.as_deref() == Some(r.as_str()))
            && self.kind.as_ref().map_or(true, |k| **k == *env.kind)
    }
}

/// A parked waiter's place: enough to unpark it or put it back where it was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parked {
    pub agent: String,
    pub filter: Filter,
    /// Park order; lower is older. Re-parking with the same seq restores the position.
    pub seq: u64,
}

/// A send refused because the destination's queue, or all queues together, are full.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QueueFull {
    Agent {
        agent: String,
        max_envelopes: usize,
        max_bytes: usize,
    },
    Hub {
        max_total_bytes: usize,
    },
}

impl std::fmt::Display for QueueFull {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            QueueFull::Agent { agent, max_envelopes, max_bytes } => write!(
                f,
                "queue for {agent:?} is full (limit {max_envelopes} envelopes, {max_bytes} bytes); nothing was queued"
            ),
            QueueFull::Hub { max_total_bytes } => write!(
                f,
                "the hub's queues are full (limit {max_total_bytes} bytes across all agents); nothing was queued"
            ),
        }
    }
}

#[derive(Debug, Default)]
struct Mailbox {
    queue: VecDeque<Queued>,
    /// The queue's envelopes by kind and correlation id, for filtered awaits.
    index: QueueIndex,
    queued_bytes: usize,
    /// Envelopes staged for this queue but not yet committed; they count against the caps.
    reserved_envelopes: usize,
    reserved_bytes: usize,
    waiters: FoldMap<Filter, BTreeMap<u64, ConnId>>,
    waiter_count: usize,
}

impl Mailbox {
    fn is_idle(&self) -> bool {
        self.queue.is_empty() && self.waiter_count == 0 && self.reserved_envelopes == 0
    }
}

/// What the router's operations have looked at so far: queue entries (compared against a filter
/// or a seq, including every binary-search probe) and mailboxes (visited by an operation that
/// spans agents). Tests read the difference across one operation (SPEC §5's routing must stay
/// flat in queue length and agent count).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Work {
    pub entries: u64,
    pub mailboxes: u64,
}

/// The position of the envelope of `seq` in `queue`, by binary search (the queue is sorted by
/// seq); each probe counts in `entries`.
fn locate(queue: &VecDeque<Queued>, seq: u64, entries: &Cell<u64>) -> Option<usize> {
    let pos = queue.partition_point(|q| {
        entries.set(entries.get() + 1);
        q.seq < seq
    });
    queue.get(pos).filter(|q| q.seq == seq).map(|_| pos)
}

/// The queue position of the first envelope that `filter` passes among the `candidates` (seqs
/// from the index, oldest first). Each candidate is found by binary search; the entries that
/// share its seq are looked at in turn (a real hub never stamps one seq twice, but the router
/// does not rely on it).
fn first_passing(
    queue: &VecDeque<Queued>,
    candidates: impl Iterator<Item = u64>,
    filter: &Filter,
    entries: &Cell<u64>,
) -> Option<usize> {
    for seq in candidates {
        let start = queue.partition_point(|q| {
            entries.set(entries.get() + 1);
            q.seq < seq
        });
        for (pos, q) in queue.iter().enumerate().skip(start) {
            entries.set(entries.get() + 1);
            if q.seq != seq {
                break;
            }
            if filter.matches(q) {
                return Some(pos);
            }
        }
    }
    None
}

/// `agent`'s mailbox, made if it has none; the name is copied only then (a restart queues a
/// million envelopes, mostly into mailboxes that exist).
fn mailbox<'a>(boxes: &'a mut FoldMap<String, Mailbox>, agent: &str) -> &'a mut Mailbox {
    if !boxes.contains_key(agent) {
        boxes.insert(agent.to_owned(), Mailbox::default());
    }
    // Invariant: present, inserted just above if it was not.
    boxes.get_mut(agent).expect("the mailbox exists")
}

/// Per-agent counts, for presence and operator views.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MailboxStats {
    pub queued: usize,
    pub queued_bytes: usize,
    pub parked: usize,
}

#[derive(Debug)]
pub struct Router {
    boxes: FoldMap<String, Mailbox>,
    next_seq: u64,
    max_envelopes: usize,
    max_bytes: usize,
    /// Bytes queued or reserved across all agents, and its cap.
    total_bytes: usize,
    max_total_bytes: usize,
    /// Envelopes queued across all agents (kept, not summed: `total_queued`).
    total_envelopes: usize,
    /// The names of queued envelopes, one copy each (`share_names`).
    names: Names,
    /// `Work::entries` and `Work::mailboxes` (cells: read-only lookups count too).
    entries: Cell<u64>,
    mailboxes: Cell<u64>,
}

impl Router {
    pub fn new(max_envelopes: usize, max_bytes: usize) -> Router {
        Router {
            boxes: FoldMap::default(),
            next_seq: 0,
            max_envelopes,
            max_bytes,
            total_bytes: 0,
            max_total_bytes: usize::MAX,
            total_envelopes: 0,
            names: Names::default(),
            entries: Cell::new(0),
            mailboxes: Cell::new(0),
        }
    }

    /// What every operation so far has looked at (`Work`).
    pub fn work(&self) -> Work {
        Work {
            entries: self.entries.get(),
            mailboxes: self.mailboxes.get(),
        }
    }

    /// Caps the bytes queued across all agents (`to` may name any agent, so per-agent caps
    /// alone do not bound memory).
    pub fn with_total_cap(mut self, max_total_bytes: usize) -> Router {
        self.max_total_bytes = max_total_bytes;
        self
    }

    /// Parks a new waiter behind every waiter already parked.
    pub fn park(&mut self, agent: &str, filter: Filter, conn: ConnId) -> Parked {
        let seq = self.next_seq;
        self.next_seq += 1;
        let parked = Parked {
            agent: agent.to_owned(),
            filter,
            seq,
        };
        self.repark(&parked, conn);
        parked
    }

    /// Puts a waiter back at the position its `seq` gives it.
    pub fn repark(&mut self, parked: &Parked, conn: ConnId) {
        let mb = self.boxes.entry(parked.agent.clone()).or_default();
        if mb
            .waiters
            .entry(parked.filter.clone())
            .or_default()
            .insert(parked.seq, conn)
            .is_none()
        {
            mb.waiter_count += 1;
        }
    }

    /// Removes a waiter; false if it was not parked.
    pub fn unpark(&mut self, parked: &Parked) -> bool {
        let Some(mb) = self.boxes.get_mut(&parked.agent) else {
            return false;
        };
        let Some(tier) = mb.waiters.get_mut(&parked.filter) else {
            return false;
        };
        let removed = tier.remove(&parked.seq).is_some();
        if tier.is_empty() {
            mb.waiters.remove(&parked.filter);
        }
        if removed {
            mb.waiter_count -= 1;
        }
        self.gc(&parked.agent);
        removed
    }

    /// Removes and returns the waiter that `env` goes to: the most specific tier whose filters
    /// pass (reply-to + kind, reply-to, kind, unfiltered), oldest first within it.
    pub fn claim_waiter(&mut self, env: &Queued) -> Option<(ConnId, Parked)> {
        let mb = self.boxes.get_mut(&*env.to)?;
        if mb.waiter_count == 0 {
            return None;
        }
        let corr = env.correlation_id.as_deref().map(str::to_owned);
        let kind = Some(env.kind.to_string());
        let tiers = [
            Filter {
                reply_to: corr.clone(),
                kind: kind.clone(),
            },
            Filter {
                reply_to: corr,
                kind: None,
            },
            Filter {
                reply_to: None,
                kind,
            },
            Filter::default(),
        ];
        // Without a correlation id the two reply-to tiers cannot match anything.
        let skip = if env.correlation_id.is_some() { 0 } else { 2 };
        for filter in tiers.into_iter().skip(skip) {
            if let Some(tier) = mb.waiters.get_mut(&filter) {
                if let Some((seq, conn)) = tier.pop_first() {
                    if tier.is_empty() {
                        mb.waiters.remove(&filter);
                    }
                    mb.waiter_count -= 1;
                    return Some((
                        conn,
                        Parked {
                            agent: env.to.to_string(),
                            filter,
                            seq,
                        },
                    ));
                }
            }
        }
        None
    }

    /// Removes and returns the first queued envelope for `agent` that `filter` passes. The
    /// candidates come from the queue's index: with a reply-to filter, only the envelopes of
    /// that correlation id are looked at; with a kind filter alone, the first of that kind; with
    /// none, the front. Each is then found in the queue by binary search.
    pub fn take_first_match(&mut self, agent: &str, filter: &Filter) -> Option<Queued> {
        let mb = self.boxes.get_mut(agent)?;
        let entries = &self.entries;
        let pos = match (&filter.reply_to, &filter.kind) {
            (None, None) => {
                entries.set(entries.get() + 1);
                (!mb.queue.is_empty()).then_some(0)?
            }
            (Some(corr), _) => {
                first_passing(&mb.queue, mb.index.with_correlation(corr), filter, entries)?
            }
            (None, Some(kind)) => {
                first_passing(&mb.queue, mb.index.of_kind(kind), filter, entries)?
            }
        };
        let env = mb.queue.remove(pos)?;
        self.taken(&env);
        self.gc(agent);
        Some(env)
    }

    /// Bookkeeping for an envelope that left `env.to`'s queue: the byte counts, the running
    /// total and the index.
    fn taken(&mut self, env: &Queued) {
        if let Some(mb) = self.boxes.get_mut(&*env.to) {
            mb.queued_bytes -= env.size_bytes();
            mb.index
                .remove(&env.kind, env.correlation_id.as_deref(), env.seq);
        }
        self.total_bytes -= env.size_bytes();
        self.total_envelopes -= 1;
    }

    /// Bookkeeping for an envelope that joined its queue.
    fn joined(mb: &mut Mailbox, env: &Queued) {
        mb.queued_bytes += env.size_bytes();
        mb.index
            .insert(&env.kind, env.correlation_id.as_deref(), env.seq);
    }

    /// Removes and returns the oldest envelope (lowest acceptance seq) at the front of any
    /// queue whose name `pick` accepts: how a forwarding link drains every `name@peer` queue
    /// of its peer in acceptance order. Linear in the number of queues (each counts in
    /// `Work::mailboxes`).
    pub fn take_oldest_where(&mut self, pick: impl Fn(&str) -> bool) -> Option<Queued> {
        self.mailboxes
            .set(self.mailboxes.get() + self.boxes.len() as u64);
        let name = self
            .boxes
            .iter()
            .filter(|(name, mb)| !mb.queue.is_empty() && pick(name))
            .min_by_key(|(_, mb)| mb.queue.front().map(|q| q.seq))
            .map(|(name, _)| name.clone())?;
        let mb = self.boxes.get_mut(&name)?;
        let env = mb.queue.pop_front()?;
        self.taken(&env);
        self.gc(&name);
        Some(env)
    }

    /// Reserves room for one envelope of `bytes` in `agent`'s queue, or refuses when the queue
    /// plus what is already reserved would pass a cap.
    pub fn reserve(&mut self, agent: &str, bytes: usize) -> Result<(), QueueFull> {
        let (max_envelopes, max_bytes) = (self.max_envelopes, self.max_bytes);
        let mb = self.boxes.entry(agent.to_owned()).or_default();
        let count = mb.queue.len() + mb.reserved_envelopes;
        let total = mb.queued_bytes + mb.reserved_bytes;
        if count + 1 > max_envelopes || total + bytes > max_bytes {
            self.gc(agent);
            return Err(QueueFull::Agent {
                agent: agent.to_owned(),
                max_envelopes,
                max_bytes,
            });
        }
        if self.total_bytes + bytes > self.max_total_bytes {
            self.gc(agent);
            return Err(QueueFull::Hub {
                max_total_bytes: self.max_total_bytes,
            });
        }
        mb.reserved_envelopes += 1;
        mb.reserved_bytes += bytes;
        self.total_bytes += bytes;
        Ok(())
    }

    /// Gives back a reservation made by `reserve`.
    pub fn release(&mut self, agent: &str, bytes: usize) {
        if let Some(mb) = self.boxes.get_mut(agent) {
            mb.reserved_envelopes -= 1;
            mb.reserved_bytes -= bytes;
            self.total_bytes -= bytes;
        }
        self.gc(agent);
    }

    /// Queues at the back. Caps were checked by `reserve` (or are waived: see `Hub::route`).
    /// `env.seq` must be newer than every queued envelope's.
    pub fn enqueue_back(&mut self, mut env: Queued) {
        self.share_names(&mut env);
        let mb = mailbox(&mut self.boxes, &env.to);
        Router::joined(mb, &env);
        self.total_bytes += env.size_bytes();
        self.total_envelopes += 1;
        mb.queue.push_back(env);
    }

    /// Puts back an envelope that was handed out but never left the hub, ahead of every
    /// envelope accepted after it. Not simply the front: a filtered await may have taken it
    /// from mid-queue, and pushing it to the front would reorder the queue.
    pub fn requeue(&mut self, mut env: Queued) {
        self.share_names(&mut env);
        self.requeue_shared(env);
    }

    /// `requeue` for an envelope whose `from`, `to` and `kind` already are shared copies
    /// (`name`): every envelope the hub routes was built that way (`Router::queued_from`).
    pub fn requeue_shared(&mut self, env: Queued) {
        let mb = mailbox(&mut self.boxes, &env.to);
        Router::joined(mb, &env);
        self.total_bytes += env.size_bytes();
        self.total_envelopes += 1;
        let entries = &self.entries;
        let pos = mb.queue.partition_point(|q| {
            entries.set(entries.get() + 1);
            q.seq < env.seq
        });
        mb.queue.insert(pos, env);
    }

    /// The router's shared copy of a name, for an envelope built for `enqueue_shared`.
    pub fn name(&mut self, name: &str) -> Name {
        self.names.intern(name)
    }

    /// The router's form of an envelope: routing fields plus its `ts` and body
    /// (`Queued::text`, from which the canonical text is written back). Its `from`, `to` and
    /// `kind` are the router's shared copies from the start (one lookup each, no allocation
    /// for a name seen before), so queueing it later swaps nothing in (docs/performance.md,
    /// "Design decisions"). `id` is `env.id` as an `Id`, which the caller may have parsed
    /// already.
    pub fn queued_from(&mut self, env: &Envelope, id: Id) -> Queued {
        // `seq` is stamped at staging.
        Queued::with_tail(
            id,
            self.name(&env.from),
            self.name(&env.to),
            self.name(&env.kind),
            env.correlation_id.as_deref().map(Name::new),
            Tail::new(&env.ts, env.body.get()),
        )
    }

    /// `enqueue_back` for an envelope whose `from`, `to` and `kind` already are shared copies
    /// (a restart queues a million: swapping them in again would cost three hashes each; a
    /// staged send's were taken from `name` when it was staged, `queued_from`).
    pub fn enqueue_shared(&mut self, env: Queued) {
        let mb = mailbox(&mut self.boxes, &env.to);
        Router::joined(mb, &env);
        self.total_bytes += env.size_bytes();
        self.total_envelopes += 1;
        mb.queue.push_back(env);
    }

    /// Swaps a queued envelope's names for the router's shared copies: a queue of a million
    /// holds a few agents' names and kinds once each, not a million copies.
    fn share_names(&mut self, env: &mut Queued) {
        for name in [&mut env.from, &mut env.to, &mut env.kind] {
            let shared = self.names.intern(name);
            *name = shared;
        }
    }

    pub fn stats(&self, agent: &str) -> MailboxStats {
        self.boxes
            .get(agent)
            .map(|mb| MailboxStats {
                queued: mb.queue.len(),
                queued_bytes: mb.queued_bytes,
                parked: mb.waiter_count,
            })
            .unwrap_or_default()
    }

    /// Every name with envelopes queued, with how many, in no particular order (for the
    /// operator views of `who` and `activity`, SPEC §14 "Mail nobody holds"). Each mailbox it
    /// looks at counts in `Work::mailboxes`.
    pub fn with_mail(&self) -> impl Iterator<Item = (&str, usize)> {
        self.boxes
            .iter()
            .inspect(|_| self.mailboxes.set(self.mailboxes.get() + 1))
            .filter(|(_, mb)| !mb.queue.is_empty())
            .map(|(name, mb)| (name.as_str(), mb.queue.len()))
    }

    /// Envelopes queued across all agents.
    pub fn total_queued(&self) -> usize {
        self.total_envelopes
    }

    /// The envelope of acceptance `seq` in `agent`'s queue and its place there (0 is the
    /// front), found by binary search: `status` reports it (SPEC §12.4) without walking the
    /// queue.
    pub fn find(&self, agent: &str, seq: u64) -> Option<(usize, &Queued)> {
        let mb = self.boxes.get(agent)?;
        let pos = locate(&mb.queue, seq, &self.entries)?;
        Some((pos, &mb.queue[pos]))
    }

    /// The queue for `agent`, front first (for tests and operator views). Every entry it yields
    /// counts in `Work::entries`: a walk of a queue on a hot path shows in the core's tests.
    pub fn queued(&self, agent: &str) -> impl Iterator<Item = &Queued> {
        self.boxes
            .get(agent)
            .into_iter()
            .flat_map(|mb| mb.queue.iter())
            .inspect(|_| self.entries.set(self.entries.get() + 1))
    }

    fn gc(&mut self, agent: &str) {
        if self.boxes.get(agent).is_some_and(Mailbox::is_idle) {
            self.boxes.remove(agent);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(to: &str, id: &str, kind: &str, corr: Option<&str>) -> Queued {
        Queued::new(id, "a", to, kind, corr, &format!("{{\"id\":\"{id}\"}}"))
    }

    /// The size counted against the caps is the length of the text the entry writes back,
    /// however it was built: from an envelope's parts, from a canonical stored text (cut) and
    /// from any other stored text (kept whole).
    #[test]
    fn an_entrys_size_is_the_length_of_its_text() {
        let env = crate::wire::Envelope::new(
            "00000000-0000-4000-8000-000000000009".into(),
            "a\u{1}".into(),
            "b".into(),
            "2026-12-03T10:00:00Z".into(),
            "k\"".into(),
            Some("c".into()),
            "{\"x\":[1, 2]}".into(),
        )
        .unwrap();
        let canonical = env.to_json();
        let parts = Queued::with_tail(
            Id::new(&env.id),
            Name::new(&env.from),
            Name::new(&env.to),
            Name::new(&env.kind),
            Some(Name::new("c")),
            Tail::new(&env.ts, env.body.get()),
        );
        let stored = |text: &str| Queued::new(&env.id, &env.from, "b", "k\"", Some("c"), text);
        let spaced = canonical.replacen(",\"to\"", ", \"to\"", 1);
        for (q, text) in [
            (parts, &canonical),
            (stored(&canonical), &canonical),
            (stored(&spaced), &spaced),
        ] {
            assert_eq!(&*q.shared_text(), text.as_str());
            assert_eq!(q.size_bytes(), text.len());
            assert_eq!(q.envelope_line(), format!("{{\"envelope\":{text}}}\n"));
        }
        assert!(!stored(&canonical).text.is_verbatim());
        assert!(stored(&spaced).text.is_verbatim());
    }

    /// A queue entry is what every queued envelope costs beside its text, times the deque's
    /// growth slack (docs/performance.md "Memory per envelope"): 88 bytes with
    /// one-word names and an inline id (which saves the id's heap block), 112 with `Arc<str>`
    /// names.
    #[test]
    fn a_queue_entry_stays_small() {
        let entry = std::mem::size_of::<Queued>();
        assert!(entry <= 88, "Queued grew to {entry} bytes");
    }

    fn f(reply_to: Option<&str>, kind: Option<&str>) -> Filter {
        Filter {
            reply_to: reply_to.map(Into::into),
            kind: kind.map(Into::into),
        }
    }

    #[test]
    fn most_specific_tier_wins_then_oldest() {
        let mut r = Router::new(10, 1000);
        r.park("b", f(None, None), 1);
        r.park("b", f(None, Some("result")), 2);
        r.park("b", f(Some("x"), None), 3);
        r.park("b", f(Some("x"), Some("result")), 4);
        r.park("b", f(Some("x"), Some("result")), 5);
        let e = env("b", "1", "result", Some("x"));
        assert_eq!(r.claim_waiter(&e).unwrap().0, 4);
        assert_eq!(r.claim_waiter(&e).unwrap().0, 5);
        assert_eq!(r.claim_waiter(&e).unwrap().0, 3);
        assert_eq!(r.claim_waiter(&e).unwrap().0, 2);
        assert_eq!(r.claim_waiter(&e).unwrap().0, 1);
        assert!(r.claim_waiter(&e).is_none());
    }

    #[test]
    fn filters_that_fail_are_skipped() {
        let mut r = Router::new(10, 1000);
        r.park("b", f(Some("y"), None), 1);
        r.park("b", f(None, Some("task")), 2);
        assert!(r
            .claim_waiter(&env("b", "1", "result", Some("x")))
            .is_none());
        assert!(r.claim_waiter(&env("b", "1", "result", None)).is_none());
        assert_eq!(
            r.claim_waiter(&env("b", "1", "task", Some("x"))).unwrap().0,
            2
        );
        assert_eq!(
            r.claim_waiter(&env("b", "1", "task", Some("y"))).unwrap().0,
            1
        );
    }

    #[test]
    fn repark_restores_position() {
        let mut r = Router::new(10, 1000);
        let p1 = r.park("b", Filter::default(), 1);
        r.park("b", Filter::default(), 2);
        let (c, p) = r.claim_waiter(&env("b", "1", "task", None)).unwrap();
        assert_eq!((c, &p), (1, &p1));
        r.repark(&p, 1);
        assert_eq!(r.claim_waiter(&env("b", "1", "task", None)).unwrap().0, 1);
    }

    #[test]
    fn take_first_match_is_fifo_within_filter() {
        let mut r = Router::new(10, 1000);
        r.enqueue_back(env("b", "1", "task", None));
        r.enqueue_back(env("b", "2", "result", Some("x")));
        r.enqueue_back(env("b", "3", "result", Some("x")));
        let id = |q: Option<Queued>| q.unwrap().id.to_string();
        assert_eq!(id(r.take_first_match("b", &f(Some("x"), None))), "2");
        assert_eq!(id(r.take_first_match("b", &f(None, None))), "1");
        assert_eq!(id(r.take_first_match("b", &f(None, Some("result")))), "3");
        assert!(r.take_first_match("b", &f(None, None)).is_none());
        assert_eq!(r.stats("b"), MailboxStats::default());
    }

    #[test]
    fn caps_count_reservations() {
        let mut r = Router::new(2, 1000);
        r.reserve("b", 10).unwrap();
        r.enqueue_back(env("b", "1", "t", None));
        r.release("b", 10);
        r.reserve("b", 10).unwrap();
        let full = r.reserve("b", 10).unwrap_err();
        assert!(matches!(
            full,
            QueueFull::Agent {
                max_envelopes: 2,
                ..
            }
        ));
        r.release("b", 10);
        assert!(r.reserve("b", 2000).is_err(), "byte cap");
    }

    #[test]
    fn take_oldest_where_drains_the_picked_queues_in_acceptance_order() {
        let mut r = Router::new(10, 1000);
        for (seq, to) in [
            (3, "b@west"),
            (1, "a@west"),
            (2, "local"),
            (4, "a@west"),
            (0, "c@north"),
        ] {
            let mut e = env(to, &format!("e{seq}"), "k", None);
            e.seq = seq;
            r.enqueue_back(e);
        }
        let west = |name: &str| name.ends_with("@west");
        let order: Vec<u64> = std::iter::from_fn(|| r.take_oldest_where(west))
            .map(|e| e.seq)
            .collect();
        assert_eq!(order, [1, 3, 4]);
        assert_eq!(r.stats("a@west"), MailboxStats::default());
        assert_eq!(r.total_queued(), 2, "other queues untouched");
        assert_eq!(
            r.total_bytes,
            r.queued("local")
                .chain(r.queued("c@north"))
                .map(Queued::size_bytes)
                .sum::<usize>()
        );
    }

    #[test]
    fn total_cap_spans_agents() {
        let mut r = Router::new(10, 1000).with_total_cap(25);
        r.reserve("b", 10).unwrap();
        r.reserve("c", 10).unwrap();
        assert_eq!(
            r.reserve("d", 10).unwrap_err(),
            QueueFull::Hub {
                max_total_bytes: 25
            }
        );
        r.release("c", 10);
        r.reserve("d", 10).unwrap();
    }

    #[test]
    fn unpark_and_gc() {
        let mut r = Router::new(10, 1000);
        let p = r.park("b", f(None, Some("k")), 7);
        assert_eq!(r.stats("b").parked, 1);
        assert!(r.unpark(&p));
        assert!(!r.unpark(&p));
        assert!(r.boxes.is_empty());
    }

    /// A staged send's names are the router's copies from the start: queueing it swaps
    /// nothing in, and a name seen before costs no allocation (operation count: the copies).
    #[test]
    fn a_staged_envelope_holds_the_routers_names() {
        let mut router = Router::new(100, 1 << 20);
        let (a, b, k) = (
            router.name("alice"),
            router.name("bob"),
            router.name("task"),
        );
        let env = crate::wire::Envelope::new(
            "e1".into(),
            "alice".into(),
            "bob".into(),
            "2026-07-21T06:40:51Z".into(),
            "task".into(),
            None,
            "{}".into(),
        )
        .expect("valid body");
        let q = router.queued_from(&env, Id::new(&env.id));
        assert!(Name::ptr_eq(&q.from, &a));
        assert!(Name::ptr_eq(&q.to, &b));
        assert!(Name::ptr_eq(&q.kind, &k));
        assert_eq!(&*q.shared_text(), env.to_json());
        router.enqueue_shared(q);
        let queued = router.find("bob", 0);
        assert!(queued.is_some_and(|(_, e)| Name::ptr_eq(&e.to, &b)));
    }
}
