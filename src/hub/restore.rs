//! Startup from the durable store (SPEC §12.1): the queues, the ledger of remembered ids and
//! the acceptance order rebuilt from what the store held, before the loop takes connections.
//! Refuses IO: the server loads the store and hands the result in.

use super::ledger::{Record, State};
use super::{Hub, Now, Queued};
use crate::store::Loaded;
use std::sync::Arc;

impl Hub {
    /// Rebuilds queues and the ledger from what the store held at startup (SPEC §12.1).
    /// Envelopes come back in acceptance order; an envelope delivered in ack mode and never
    /// acked is queued again.
    pub fn restore(&mut self, loaded: Loaded, now: Now) {
        self.ledger.reserve(loaded.ids.len());
        for rec in loaded.ids {
            let Some(state) = State::parse(&rec.state) else {
                continue;
            };
            self.restore_reason(&rec);
            self.ledger.remember(
                &rec.sender,
                &rec.id,
                Record {
                    to: rec.to,
                    digest: rec.digest,
                    accepted_ms: rec.accepted_ms,
                    state,
                    state_ms: rec.state_ms,
                    seq: rec.seq,
                    ack_pending: false,
                    reader: rec.reader,
                },
            );
            // Every remembered id holds a place in acceptance order, queued or not.
            self.next_seq = self.next_seq.max(rec.seq + 1);
        }
        let now_ms = now.wall.timestamp_millis();
        for e in loaded.envelopes {
            self.next_seq = self.next_seq.max(e.seq + 1);
            // Queued it is; keep the time it became so unless a restart is what requeued it
            // (an ack-mode delivery the crash cut off before its ack). One ledger lookup per
            // envelope: a restart brings back a million (docs/performance.md "How cost grows
            // with work").
            self.ledger.restore_queued(&e.sender, &e.id, e.seq, now_ms);
            self.router.enqueue_back(Queued {
                id: e.id,
                from: e.sender,
                to: e.agent,
                kind: e.kind,
                correlation_id: e.correlation_id,
                text: Arc::from(e.text),
                seq: e.seq,
                attempts: e.attempts,
            });
        }
    }
}
