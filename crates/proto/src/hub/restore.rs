//! Startup from the durable store (SPEC §12.1): the queues, the ledger of remembered ids and
//! the acceptance order rebuilt from what the store held, before the loop takes connections.
//! Refuses IO: the server has the store read its rows into `Restoring`, the hub's sink, which
//! holds the machines a row restores into (the ledger and its reasons, the queues, the
//! acceptance order), borrowed from the hub.
//!
//! A restart may bring back a million envelopes (docs/performance.md "How cost grows with
//! work", "Restart"), so each row costs one pass and as few allocations as
//! it can: the row arrives borrowed from the store's buffer (`store::RowRef`), its names are
//! the ledger's and the router's shared copies (the last row's, without a hash, when they
//! repeat), its id is allocated once for both the ledger's key and the queue entry, and its
//! text's `ts` and body are copied once, into the tail the queue keeps (`Queued::text`). One
//! ledger insert per row, which also finds a repeated sender and id (the store leaves that
//! check to the sink).

use super::commit::Commits;
use super::durable::{Loaded, RowRef, RowSink};
use super::id_key::Id;
use super::ledger::{Record, State};
use super::limits::Limits;
use super::memory::Memory;
use super::names::Name;
use super::router::{Queued, Router};
use crate::kernel::now::Now;

/// The hub's sink for `Store::load_rows` (`Hub::restoring`): each row becomes its ledger
/// record and, when queued, its queue entry.
pub struct Restoring<'h> {
    /// The machines a row restores into: the ledger (and the reasons of gone envelopes), the
    /// queues, the acceptance order; the limits bound what is reserved.
    memory: &'h mut Memory,
    router: &'h mut Router,
    commit: &'h mut Commits,
    limits: &'h Limits,
    now_ms: i64,
    /// Rows restored, and how many of them were queued envelopes.
    ids: usize,
    envelopes: usize,
    /// The last row's names as the ledger and the router share them: a store of a million
    /// rows holds a few agents, so most rows repeat the last one's and cost a comparison
    /// instead of a hash.
    last: Option<LastNames>,
}

struct LastNames {
    sender: Name,
    to: Name,
    /// The router's copies of the sender's name, the recipient's and the kind.
    from_q: Name,
    to_q: Name,
    kind_q: Option<Name>,
}

impl<'h> Restoring<'h> {
    /// A sink that restores the store's rows into these machines (SPEC §12.1), row by row in
    /// acceptance order (`Hub::restoring`). An envelope delivered in ack mode and never acked
    /// is queued again.
    pub(super) fn new(
        memory: &'h mut Memory,
        router: &'h mut Router,
        commit: &'h mut Commits,
        limits: &'h Limits,
        now: Now,
    ) -> Restoring<'h> {
        Restoring {
            memory,
            router,
            commit,
            limits,
            now_ms: now.wall.timestamp_millis(),
            ids: 0,
            envelopes: 0,
            last: None,
        }
    }

    /// Rebuilds queues and the ledger from the owned lists (tests; the server streams rows
    /// through `row` instead). Both lists are in acceptance order; an envelope whose id row
    /// is missing (never from a store) is queued as before, its ledger record left as it is.
    /// A repeated sender and id is the store's to refuse (`rows::check_unique`): here the
    /// later row's record wins, as it always did.
    pub(super) fn restore(mut self, loaded: Loaded) {
        self.expect(loaded.ids.len());
        let mut envelopes = loaded.envelopes.into_iter().peekable();
        for rec in loaded.ids {
            while let Some(e) = envelopes.next_if(|e| e.seq < rec.seq) {
                self.restore_envelope(e);
            }
            let queued = envelopes.next_if(|e| e.seq == rec.seq);
            let row = RowRef {
                seq: rec.seq,
                sender: &rec.sender,
                id: &rec.id,
                to: &rec.to,
                digest: rec.digest,
                accepted_ms: rec.accepted_ms,
                state: &rec.state,
                detail: rec.detail.as_deref(),
                state_ms: rec.state_ms,
                reader: rec.reader,
                queued: queued.as_ref().map(|e| crate::hub::durable::QueuedRef {
                    kind: &e.kind,
                    correlation_id: e.correlation_id.as_deref(),
                    text: &e.text,
                    split: e.split(),
                    attempts: e.attempts,
                }),
            };
            let _ = self.row(row);
        }
        for e in envelopes {
            self.restore_envelope(e);
        }
    }

    /// An envelope without its id's row in the same walk: its record, if the ledger has one,
    /// is marked queued at its seq.
    fn restore_envelope(&mut self, e: crate::hub::durable::StoredEnvelope) {
        let now_ms = self.now_ms;
        self.memory
            .ledger
            .restore_queued(&e.sender, &e.id, e.seq, now_ms);
        self.commit.restored_seq(e.seq);
        let mut env = Queued::new(
            &e.id,
            &e.sender,
            &e.agent,
            &e.kind,
            e.correlation_id.as_deref(),
            &e.text,
        );
        (env.seq, env.attempts) = (e.seq, e.attempts);
        self.router.enqueue_back(env);
    }
}

impl Restoring<'_> {
    /// Envelopes queued and ids remembered so far.
    pub fn counts(&self) -> (usize, usize) {
        (self.envelopes, self.ids)
    }

    /// The shared names for a row from `sender` to `to`: the last row's when they match.
    fn names(&mut self, sender: &str, to: &str) -> &mut LastNames {
        let same = self
            .last
            .as_ref()
            .is_some_and(|l| &*l.sender == sender && &*l.to == to);
        if !same {
            let (ledger, router) = (&mut self.memory.ledger, &mut *self.router);
            self.last = Some(LastNames {
                sender: ledger.name(sender),
                to: ledger.name(to),
                from_q: router.name(sender),
                to_q: router.name(to),
                kind_q: None,
            });
        }
        self.last.as_mut().expect("set above")
    }
}

impl RowSink for Restoring<'_> {
    fn expect(&mut self, rows: usize) {
        // A bound, not a count: never more than the ledger holds after a purge (settled ids
        // up to `idempotency_max_ids`) and every queue full.
        let limits = self.limits;
        let most = limits
            .idempotency_max_ids
            .saturating_add(limits.queue_max_envelopes);
        self.memory.ledger.reserve(rows.min(most));
    }

    fn row(&mut self, row: RowRef<'_>) -> Result<(), crate::hub::durable::RowRefused> {
        let now_ms = self.now_ms;
        let Some(state) = State::parse(row.state) else {
            // Never from a store (`rows` checks the state): queued as an envelope without
            // its record, as before.
            if let Some(q) = row.queued {
                self.commit.restored_seq(row.seq);
                let mut env =
                    Queued::new(row.id, row.sender, row.to, q.kind, q.correlation_id, q.text);
                (env.seq, env.attempts) = (row.seq, q.attempts);
                self.router.enqueue_back(env);
            }
            return Ok(());
        };
        self.memory.restore_reason(state, row.seq, row.detail);
        let names = self.names(row.sender, row.to);
        let (sender, to) = (names.sender.clone(), names.to.clone());
        let mut record = Record {
            to,
            digest: super::ledger::short(&row.digest),
            accepted_ms: row.accepted_ms,
            state,
            state_ms: row.state_ms,
            seq: row.seq,
            ack_pending: false,
            reader: row.reader,
        };
        if row.queued.is_some() {
            // Queued it is; keep the time it became so unless a restart is what requeued
            // it (an ack-mode delivery the crash cut off before its ack).
            crate::hub::ledger::queue_again(&mut record, now_ms);
        }
        // One id (inline when it is a canonical UUID), shared by the ledger's key and the
        // queue entry.
        let id = Id::new(row.id);
        let replaced = self
            .memory
            .ledger
            .restore_record(sender, id.clone(), record);
        self.ids += 1;
        // Every remembered id holds a place in acceptance order, queued or not.
        self.commit.restored_seq(row.seq);
        if let Some(q) = row.queued {
            let names = self.last.as_mut().expect("set by names");
            let kind = match &names.kind_q {
                Some(k) if &**k == q.kind => k.clone(),
                _ => {
                    let k = self.router.name(q.kind);
                    names.kind_q = Some(k.clone());
                    k
                }
            };
            let (from, to) = (names.from_q.clone(), names.to_q.clone());
            let mut env = Queued::stored(
                id,
                from,
                to,
                kind,
                q.correlation_id.map(Name::new),
                q.text,
                q.split,
            );
            (env.seq, env.attempts) = (row.seq, q.attempts);
            self.router.enqueue_shared(env);
            self.envelopes += 1;
        }
        match replaced {
            None => Ok(()),
            Some(first) => Err(crate::hub::durable::RowRefused::SameSenderAndId {
                first,
                seq: row.seq,
            }),
        }
    }
}
