//! Receipts (SPEC §12.4): the `status` line an envelope's sender or recipient is answered with
//! (its stage and, once handed out, the kind of reader that took it), and `status` requests
//! that wait for a stage (`waitFor`): parked on the connection, woken by the ledger change that
//! ends them, or answered at their `timeoutMs` deadline on the core's clock.
//!
//! Owns the index of parked status waits (`Waits`, by the envelope each watches; bounded by
//! `limits.max_status_waits`, which the verb checks) and the rule that ends one (`judge`).
//! The connections hold the index (`Conns::park_status_wait`); the verb parks and answers
//! (`verbs::status`), and every ledger change that can end a wait calls
//! `verbs::status::changed`. Refuses IO, like the rest of the core.

use super::conn_map::ConnId;
use super::ledger::{Record, State};
use crate::kernel::fold_hash::FoldMap;
use crate::wire::{WaitEnd, WaitFor};
use std::collections::BTreeSet;

/// The parked status waits, by the ledger key (sender, id) each watches.
#[derive(Debug, Default)]
pub(in crate::hub) struct Waits {
    by_key: FoldMap<(String, String), BTreeSet<ConnId>>,
    parked: usize,
}

/// Whether a wait for `wait_for` ends with the envelope where `rec` says: reached, or settled
/// where the stage can no longer come (`WaitEnd::Ended`); None while it may still come.
pub(in crate::hub) fn judge(wait_for: WaitFor, rec: &Record) -> Option<WaitEnd> {
    if wait_for.reached_by(rec.state.as_str()) {
        return Some(WaitEnd::Reached);
    }
    let settled = match rec.state {
        State::Queued => false,
        // Ack mode: the reader may still ack it, or give it back.
        State::Delivered => !rec.ack_pending,
        State::Acked | State::Forwarded | State::Bounced | State::Lost => true,
    };
    settled.then_some(WaitEnd::Ended)
}

impl Waits {
    /// `conn` waits on `(sender, id)`.
    pub(in crate::hub) fn watch(&mut self, sender: &str, id: &str, conn: ConnId) {
        self.by_key
            .entry((sender.to_owned(), id.to_owned()))
            .or_default()
            .insert(conn);
        self.parked += 1;
    }

    /// `conn` no longer waits on `(sender, id)`; nothing if it did not.
    pub(in crate::hub) fn unwatch(&mut self, conn: ConnId, sender: &str, id: &str) {
        let key = (sender.to_owned(), id.to_owned());
        if let Some(set) = self.by_key.get_mut(&key) {
            if set.remove(&conn) {
                self.parked -= 1;
            }
            if set.is_empty() {
                self.by_key.remove(&key);
            }
        }
    }

    /// The connections waiting on `(sender, id)`, oldest first.
    pub(in crate::hub) fn watchers(&self, sender: &str, id: &str) -> Option<&BTreeSet<ConnId>> {
        self.by_key.get(&(sender.to_owned(), id.to_owned()))
    }

    /// Waits parked now.
    pub(in crate::hub) fn parked(&self) -> usize {
        self.parked
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hub::names::Name;

    fn record(state: State, ack_pending: bool) -> Record {
        Record {
            to: Name::new("bob"),
            digest: [0; 16],
            accepted_ms: 0,
            state,
            state_ms: 0,
            seq: 1,
            ack_pending,
            reader: None,
        }
    }

    #[test]
    fn a_wait_ends_when_its_stage_is_reached_or_can_no_longer_come() {
        let d = WaitFor::Delivered;
        assert_eq!(judge(d, &record(State::Queued, false)), None);
        assert_eq!(
            judge(d, &record(State::Delivered, true)),
            Some(WaitEnd::Reached)
        );
        assert_eq!(judge(WaitFor::Acked, &record(State::Delivered, true)), None);
        assert_eq!(
            judge(WaitFor::Acked, &record(State::Delivered, false)),
            Some(WaitEnd::Ended),
            "a plain delivery is never acked"
        );
        assert_eq!(judge(d, &record(State::Lost, false)), Some(WaitEnd::Ended));
    }

    #[test]
    fn waits_are_counted_once_and_leave_their_key_when_the_last_goes() {
        let mut w = Waits::default();
        w.watch("alice", "e1", 1);
        w.watch("alice", "e1", 2);
        w.watch("alice", "e2", 3);
        assert_eq!(w.parked(), 3);
        assert_eq!(
            w.watchers("alice", "e1")
                .map(|s| s.iter().copied().collect::<Vec<_>>()),
            Some(vec![1, 2])
        );
        w.unwatch(1, "alice", "e1");
        w.unwatch(1, "alice", "e1");
        assert_eq!(w.parked(), 2, "a second unwatch changes nothing");
        w.unwatch(2, "alice", "e1");
        assert!(w.watchers("alice", "e1").is_none());
        assert_eq!(w.parked(), 1);
    }
}
