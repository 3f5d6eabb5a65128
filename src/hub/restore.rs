//! Startup from the durable store (SPEC §12.1): the queues, the ledger of remembered ids and
//! the acceptance order rebuilt from what the store held, before the loop takes connections.
//! Refuses IO: the server loads the store and hands the result in.
//!
//! A restart may bring back a million envelopes (docs/performance.md "How cost grows with
//! work"), so each row costs one pass: one ledger insert (one hash of its id, its names
//! shared), and its queued envelope, if any, queued with the same id, names and text
//! allocations the ledger and the store's row already made.

use super::ledger::{Record, State};
use super::{Hub, Now, Queued};
use crate::store::Loaded;

impl Hub {
    /// Rebuilds queues and the ledger from what the store held at startup (SPEC §12.1).
    /// Envelopes come back in acceptance order; an envelope delivered in ack mode and never
    /// acked is queued again.
    pub fn restore(&mut self, loaded: Loaded, now: Now) {
        self.ledger.reserve(loaded.ids.len());
        let now_ms = now.wall.timestamp_millis();
        // Both lists are in acceptance order and every envelope has its id's row (the store
        // reads them from one row each), so one walk pairs them.
        let mut envelopes = loaded.envelopes.into_iter().peekable();
        for rec in loaded.ids {
            // An envelope whose id row is missing (never from the store) is queued as before,
            // its ledger record left as it is.
            while let Some(e) = envelopes.next_if(|e| e.seq < rec.seq) {
                self.restore_envelope(e, now_ms);
            }
            let queued = envelopes.next_if(|e| e.seq == rec.seq);
            let Some(state) = State::parse(&rec.state) else {
                if let Some(e) = queued {
                    self.restore_envelope(e, now_ms);
                }
                continue;
            };
            self.restore_reason(&rec);
            let mut record = Record {
                to: self.ledger.name(&rec.to),
                digest: rec.digest,
                accepted_ms: rec.accepted_ms,
                state,
                state_ms: rec.state_ms,
                seq: rec.seq,
                ack_pending: false,
                reader: rec.reader,
            };
            if queued.is_some() {
                // Queued it is; keep the time it became so unless a restart is what requeued
                // it (an ack-mode delivery the crash cut off before its ack).
                crate::hub::ledger::queue_again(&mut record, now_ms);
            }
            let id: std::sync::Arc<str> = std::sync::Arc::from(rec.id.as_str());
            let to = record.to.clone();
            self.ledger.remember_interned(&rec.sender, &id, record);
            // Every remembered id holds a place in acceptance order, queued or not.
            self.next_seq = self.next_seq.max(rec.seq + 1);
            if let Some(e) = queued {
                // The queue shares the ledger's copies of the id and the names.
                let from = self.ledger.name(&rec.sender);
                let kind = self.router.name(&e.kind);
                self.router.enqueue_shared(Queued {
                    id,
                    from,
                    to,
                    kind,
                    correlation_id: e.correlation_id.as_deref().map(Into::into),
                    text: e.text,
                    seq: e.seq,
                    attempts: e.attempts,
                });
            }
        }
        for e in envelopes {
            self.restore_envelope(e, now_ms);
        }
    }

    /// An envelope without its id's row in the same walk: its record, if the ledger has one,
    /// is marked queued at its seq.
    fn restore_envelope(&mut self, e: crate::store::StoredEnvelope, now_ms: i64) {
        self.ledger.restore_queued(&e.sender, &e.id, e.seq, now_ms);
        self.enqueue_orphan(e);
    }

    fn enqueue_orphan(&mut self, e: crate::store::StoredEnvelope) {
        self.next_seq = self.next_seq.max(e.seq + 1);
        let mut env = Queued::new(
            &e.id,
            &e.sender,
            &e.agent,
            &e.kind,
            e.correlation_id.as_deref(),
            e.text,
        );
        (env.seq, env.attempts) = (e.seq, e.attempts);
        self.router.enqueue_back(env);
    }
}
