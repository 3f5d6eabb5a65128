//! What the hub remembers of the envelopes it accepted (SPEC §12.3, §12.4): the ledger of
//! accepted ids (`hub::ledger`), the schedule of its purge of settled ids past the retention
//! window, and why each remembered envelope that is `bounced` or `lost` is gone, by
//! acceptance seq, for `status`; a reason is forgotten with its id.
//!
//! Owns those three and the rules between them: a state change is recorded in the ledger and
//! handed back as the store operation that makes it durable, a purge forgets the ids' reasons
//! with them and says when to come back. Refuses the store and the status waits: the caller
//! commits the operation (`hub::commit`) and wakes the waits (`hub::receipts`), in that order.

use super::durable::StoreOp;
use super::ledger::{IdText, Ledger, State};
use super::router::Queued;
use crate::kernel::fold_hash::FoldMap;
use crate::kernel::names::HUB_NAME;
use crate::kernel::now::Now;
use std::time::{Duration, Instant};

/// How often settled ids are purged from the ledger.
pub(super) const PURGE_INTERVAL: Duration = Duration::from_secs(10);

#[derive(Debug)]
pub(super) struct Memory {
    pub(super) ledger: Ledger,
    /// When the ledger is next purged of settled ids past the retention window.
    next_purge: Option<Instant>,
    /// Why each remembered envelope that is `bounced` or `lost` is gone, by acceptance seq,
    /// for `status` (`hub::routing` records them, `verbs::status` shows them); forgotten with its id.
    reasons: FoldMap<u64, String>,
}

impl Memory {
    pub(super) fn new(ledger: Ledger) -> Memory {
        Memory {
            ledger,
            next_purge: None,
            reasons: FoldMap::default(),
        }
    }

    /// Starts the periodic ledger purge (the loop calls this once it runs).
    pub(super) fn start_purging(&mut self, now: Now) {
        self.next_purge = Some(now.mono + PURGE_INTERVAL);
    }

    /// Brings the next purge forward to `now` (the ledger is over a budget), once purging has
    /// started: before that (a restart restoring rows) the first purge is already due soon.
    pub(super) fn purge_soon(&mut self, now: Now) {
        if let Some(at) = self.next_purge.as_mut() {
            *at = (*at).min(now.mono);
        }
    }

    /// When the next purge is due.
    pub(super) fn poll_timeout(&self) -> Option<Instant> {
        self.next_purge
    }

    /// The purge, when it is due at `now`: the settled ids it forgot, as `(sender, id, seq)`,
    /// each to be forgotten by the store too (`StoreOp::Forget`).
    pub(super) fn purge_due(&mut self, now: Now) -> Vec<(String, String, u64)> {
        if !self.next_purge.is_some_and(|t| t <= now.mono) {
            return Vec::new();
        }
        let now_ms = now.wall.timestamp_millis();
        let forgotten = self.ledger.purge(now_ms);
        for (_, _, seq) in &forgotten {
            self.reasons.remove(seq);
        }
        // A backlog (a restart after a long stop) is forgotten a batch per iteration.
        let wait = if self.ledger.purge_pending(now_ms) {
            Duration::ZERO
        } else {
            PURGE_INTERVAL
        };
        self.next_purge = Some(crate::kernel::deadline::after(now.mono, wait));
        forgotten
    }

    /// Records a state change in the ledger; the store operation that makes it durable, if
    /// the ledger holds the id.
    pub(super) fn set_state<I: IdText + ?Sized>(
        &mut self,
        sender: &str,
        id: &I,
        state: State,
        ack_pending: bool,
        now: Now,
    ) -> Option<StoreOp> {
        let at_ms = now.wall.timestamp_millis();
        let seq = self
            .ledger
            .set_state(sender, id, state, ack_pending, at_ms)?;
        Some(StoreOp::State {
            seq,
            sender: sender.to_owned(),
            id: id.with_text(str::to_owned),
            state: state.as_str().to_owned(),
            detail: None,
            reader: self.ledger.reader_of(sender, id),
            at_ms,
        })
    }

    /// Records that `env` is gone (`Bounced` or `Lost`) and why, so that `status` can say it;
    /// the store operation that keeps both across restarts, if the ledger holds the id.
    pub(super) fn settle_gone(
        &mut self,
        env: &Queued,
        state: State,
        reason: &str,
        now: Now,
    ) -> Option<StoreOp> {
        let at_ms = now.wall.timestamp_millis();
        let seq = self
            .ledger
            .set_state(&env.from, &env.id, state, false, at_ms)?;
        self.reasons.insert(seq, reason.to_owned());
        Some(StoreOp::State {
            seq,
            sender: env.from.to_string(),
            id: env.id.to_string(),
            state: state.as_str().to_owned(),
            detail: Some(reason.to_owned()),
            reader: self.ledger.reader_of(&env.from, &env.id),
            at_ms,
        })
    }

    /// The reason a remembered envelope of acceptance `seq` is gone, if it is and one is known.
    pub(super) fn reason_of(&self, seq: u64, state: State) -> Option<String> {
        matches!(state, State::Bounced | State::Lost)
            .then(|| self.reasons.get(&seq).cloned())
            .flatten()
    }

    /// Restores the reason of a remembered id loaded from the store.
    pub(super) fn restore_reason(&mut self, state: State, seq: u64, detail: Option<&str>) {
        let gone = matches!(state, State::Bounced | State::Lost);
        if let (true, Some(detail)) = (gone, detail) {
            self.reasons.insert(seq, detail.to_owned());
        }
    }

    /// Whether the hub's own envelope `id` (a task's outcome or progress) still waits in its
    /// recipient's queue: the task book holds a newer progress back while one does.
    pub(super) fn hub_envelope_queued(&self, id: &str) -> bool {
        self.ledger.state_of(HUB_NAME, id) == Some(State::Queued)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hub::ledger::Record;
    use chrono::{DateTime, Utc};

    /// A virtual clock: `ms` after its origin.
    fn clock() -> impl Fn(u64) -> Now {
        let origin = crate::kernel::deadline::test_origin();
        let wall = DateTime::parse_from_rfc3339("2026-07-21T06:40:51Z")
            .expect("fixed time")
            .with_timezone(&Utc);
        move |ms| Now {
            mono: origin + Duration::from_millis(ms),
            wall: wall + chrono::Duration::milliseconds(ms as i64),
        }
    }

    fn queued(id: &str) -> Queued {
        Queued::stored(
            id.into(),
            "alice".into(),
            "bob".into(),
            "task".into(),
            None,
            "{}",
            None,
        )
    }

    fn remembered(m: &mut Memory, env: &Queued, seq: u64, t: Now) {
        let record = Record {
            to: env.to.clone(),
            digest: [0; 16],
            accepted_ms: t.wall.timestamp_millis(),
            state: State::Queued,
            state_ms: t.wall.timestamp_millis(),
            seq,
            ack_pending: false,
            reader: None,
        };
        m.ledger.remember(&env.from, &env.id, record);
    }

    #[test]
    fn a_gone_envelope_keeps_its_reason_until_the_purge_forgets_its_id() {
        let now = clock();
        let mut m = Memory::new(Ledger::new(1, 100));
        let env = queued("e1");
        remembered(&mut m, &env, 7, now(0));
        let op = m.settle_gone(&env, State::Lost, "reader reset", now(5));
        assert!(matches!(
            op,
            Some(StoreOp::State { seq: 7, ref detail, .. }) if detail.as_deref() == Some("reader reset")
        ));
        assert_eq!(m.reason_of(7, State::Lost).as_deref(), Some("reader reset"));
        assert_eq!(
            m.reason_of(7, State::Queued),
            None,
            "only a gone one has a reason"
        );
        // Nothing is due before purging starts, then the first purge is an interval away.
        assert!(m.purge_due(now(60_000)).is_empty());
        m.start_purging(now(60_000));
        assert_eq!(
            m.poll_timeout(),
            Some(now(60_000).mono + PURGE_INTERVAL),
            "an interval after the start"
        );
        let forgotten = m.purge_due(now(70_000));
        assert_eq!(forgotten, [("alice".to_owned(), "e1".to_owned(), 7)]);
        assert_eq!(m.reason_of(7, State::Lost), None, "forgotten with its id");
        assert_eq!(m.poll_timeout(), Some(now(70_000).mono + PURGE_INTERVAL));
    }

    #[test]
    fn a_purge_brought_forward_is_due_now_once_purging_runs() {
        let now = clock();
        let mut m = Memory::new(Ledger::new(1, 100));
        m.purge_soon(now(0));
        assert_eq!(m.poll_timeout(), None, "not before purging starts");
        m.start_purging(now(0));
        m.purge_soon(now(3));
        assert_eq!(m.poll_timeout(), Some(now(3).mono));
    }

    #[test]
    fn a_state_change_of_an_id_not_remembered_stores_nothing() {
        let now = clock();
        let mut m = Memory::new(Ledger::new(1, 100));
        let op = m.set_state("alice", "nope", State::Delivered, false, now(0));
        assert_eq!(op, None);
        let env = queued("e2");
        remembered(&mut m, &env, 3, now(0));
        let op = m.set_state("alice", "e2", State::Delivered, false, now(9));
        assert!(matches!(
            op,
            Some(StoreOp::State {
                seq: 3,
                detail: None,
                ..
            })
        ));
        m.restore_reason(State::Bounced, 4, Some("refused by west"));
        m.restore_reason(State::Acked, 5, Some("ignored"));
        assert_eq!(
            m.reason_of(4, State::Bounced).as_deref(),
            Some("refused by west")
        );
        assert_eq!(m.reason_of(5, State::Lost), None);
        assert!(!m.hub_envelope_queued("e2"));
    }
}
