//! The ledger of accepted envelope ids (SPEC §12.3–§12.4): per sender, what was accepted, a
//! digest of it, and where it is now. It answers idempotent resends and `status` queries, and
//! forgets settled ids after the retention window.
//!
//! Owns that bookkeeping. Refuses IO and clocks: times are wall-clock milliseconds passed in.

use sha2::{Digest, Sha256};
use std::collections::HashMap;

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

#[derive(Debug)]
pub struct Ledger {
    records: HashMap<(String, String), Record>,
    window_ms: i64,
    max_ids: usize,
}

impl Ledger {
    pub fn new(window_secs: u64, max_ids: usize) -> Ledger {
        Ledger {
            records: HashMap::new(),
            window_ms: (window_secs as i64).saturating_mul(1000),
            max_ids,
        }
    }

    pub fn len(&self) -> usize {
        self.records.len()
    }

    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    pub fn seen(&self, sender: &str, id: &str, digest: &[u8; 32]) -> Seen {
        match self.records.get(&(sender.to_owned(), id.to_owned())) {
            None => Seen::New,
            Some(r) if &r.digest == digest => Seen::Duplicate,
            Some(_) => Seen::Conflict,
        }
    }

    pub fn remember(&mut self, sender: &str, id: &str, record: Record) {
        self.records
            .insert((sender.to_owned(), id.to_owned()), record);
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
        let r = self.records.get_mut(&(sender.to_owned(), id.to_owned()))?;
        r.state = state;
        r.ack_pending = ack_pending;
        r.state_ms = at_ms;
        Some(r.seq)
    }

    pub fn state_of(&self, sender: &str, id: &str) -> Option<State> {
        self.records
            .get(&(sender.to_owned(), id.to_owned()))
            .map(|r| r.state)
    }

    /// Records where a restored envelope sits in acceptance order.
    pub fn set_seq(&mut self, sender: &str, id: &str, seq: u64) {
        if let Some(r) = self.records.get_mut(&(sender.to_owned(), id.to_owned())) {
            r.seq = seq;
        }
    }

    /// The record of `id` that `asker` may see: one it sent, else one addressed to it.
    pub fn lookup(&self, asker: &str, id: &str) -> Option<(&str, &Record)> {
        if let Some((k, r)) = self
            .records
            .get_key_value(&(asker.to_owned(), id.to_owned()))
        {
            return Some((k.0.as_str(), r));
        }
        // Linear in the ledger's size; status is an operator-rate query, not a hot path.
        self.records
            .iter()
            .find(|((_, i), r)| i == id && r.to == asker)
            .map(|((s, _), r)| (s.as_str(), r))
    }

    /// Forgets records settled longer than the window ago, then the earliest settled ones while
    /// over `max_ids`. Returns the keys forgotten with their `seq`, earliest settled first. The window runs from
    /// settlement (`state_ms`), not acceptance: an envelope that sat queued for longer than the
    /// window is still remembered for a whole window after it was delivered or acked.
    pub fn purge(&mut self, now_ms: i64) -> Vec<(String, String, u64)> {
        let cutoff = now_ms.saturating_sub(self.window_ms);
        let mut settled: Vec<(i64, (String, String))> = self
            .records
            .iter()
            .filter(|(_, r)| r.state.settled(r.ack_pending))
            .map(|(k, r)| (r.state_ms, k.clone()))
            .collect();
        settled.sort();
        let over = self.records.len().saturating_sub(self.max_ids);
        let mut gone = Vec::new();
        for (i, (settled_ms, key)) in settled.into_iter().enumerate() {
            if settled_ms <= cutoff || i < over {
                if let Some(r) = self.records.remove(&key) {
                    gone.push((key.0, key.1, r.seq));
                }
            } else {
                break;
            }
        }
        gone
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
}
