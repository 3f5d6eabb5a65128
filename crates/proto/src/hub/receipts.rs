//! Receipts (SPEC §12.4): the `status` line an envelope's sender or recipient is answered with
//! (its stage and, once handed out, the kind of reader that took it), and `status` requests
//! that wait for a stage (`waitFor`): parked on the connection, woken by the ledger change that
//! ends them, or answered at their `timeoutMs` deadline on the core's clock.
//!
//! Owns the parked status waits (`Waits`, bounded by `limits.max_status_waits`) and the rule
//! that ends one (`judge`). Refuses IO, like the rest of the core; every ledger change that can
//! end a wait calls `Hub::receipt_changed`.

use super::fold_hash::FoldMap;
use super::ledger::{IdText, Record, State};
use super::session::Phase;
use super::{ConnId, Hub, Now};
use crate::wire::{EnvelopeStatus, HubLine, WaitEnd, WaitFor};
use chrono::SecondsFormat;
use std::collections::BTreeSet;
use std::time::Duration;

/// The parked status waits, by the ledger key (sender, id) each watches.
#[derive(Debug, Default)]
pub(super) struct Waits {
    by_key: FoldMap<(String, String), BTreeSet<ConnId>>,
    parked: usize,
}

/// Whether a wait for `wait_for` ends with the envelope where `rec` says: reached, or settled
/// where the stage can no longer come (`WaitEnd::Ended`); None while it may still come.
fn judge(wait_for: WaitFor, rec: &Record) -> Option<WaitEnd> {
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

impl Hub {
    /// The status line of the remembered envelope `(sender, id)` (SPEC §12.4 table).
    pub(super) fn status_of(&self, sender: &str, id: &str, rec: &Record) -> EnvelopeStatus {
        // One binary search in the recipient's queue (sorted by seq), not a walk of it.
        let found = self.router.find(&rec.to, rec.seq);
        let position = (rec.state == State::Queued)
            .then_some(found)
            .flatten()
            .filter(|(_, q)| q.id.is(id))
            .map(|(p, _)| p as u64 + 1);
        let attempts = found.map(|(_, q)| q.attempts);
        // The reader belongs to a hand-off: shown while it holds or consumed the envelope, and
        // for one lost at it (the ledger clears it when the envelope comes back).
        let reader = matches!(
            rec.state,
            State::Delivered | State::Acked | State::Bounced | State::Lost
        )
        .then_some(rec.reader)
        .flatten()
        .map(|r| r.as_str().to_owned());
        EnvelopeStatus {
            id: id.to_owned(),
            state: rec.state.as_str().into(),
            reader,
            from: Some(sender.to_owned()),
            to: Some(rec.to.to_string()),
            position,
            at: chrono::DateTime::from_timestamp_millis(rec.state_ms)
                .map(|t| t.to_rfc3339_opts(SecondsFormat::Millis, true)),
            attempts: attempts.filter(|&a| a > 0),
            reason: self.memory.reason_of(rec.seq, rec.state),
            wait: None,
        }
    }

    /// `{"state":"unknown"}` for `id`: never accepted, forgotten, or not the asker's to see.
    pub(super) fn unknown_status(id: String) -> EnvelopeStatus {
        EnvelopeStatus {
            id,
            state: "unknown".into(),
            ..EnvelopeStatus::default()
        }
    }

    /// A `status` with `waitFor`: answered at once when the stage is reached or can no longer
    /// come (or `timeoutMs` is 0), else parked until one of those or the deadline.
    pub(super) fn status_wait(
        &mut self,
        conn: ConnId,
        asker: &str,
        id: String,
        wait_for: WaitFor,
        timeout_ms: Option<u64>,
        now: Now,
    ) {
        let found = self
            .memory
            .ledger
            .lookup(asker, &id)
            .map(|(sender, rec)| (sender.to_owned(), judge(wait_for, rec)));
        let sender = match found {
            None => {
                // The same line, waited or not, as for an id never sent: nothing is revealed.
                let mut st = Hub::unknown_status(id);
                st.wait = Some(WaitEnd::Ended.as_str().into());
                return self.reply(conn, &HubLine::Status(st), "status", now);
            }
            Some((sender, Some(end))) => return self.answer_wait(conn, &sender, &id, end, now),
            Some((sender, None)) if timeout_ms == Some(0) => {
                return self.answer_wait(conn, &sender, &id, WaitEnd::Timeout, now)
            }
            Some((sender, None)) => sender,
        };
        if self.receipts.parked >= self.settings.limits.max_status_waits {
            let msg = format!(
                "too many status waits: {} are parked, the most limits.max_status_waits allows; ask without waitFor, or wait again later",
                self.settings.limits.max_status_waits
            );
            return self.fail(conn, &msg, now);
        }
        let deadline = timeout_ms
            .map(|ms| crate::kernel::deadline::after(now.mono, Duration::from_millis(ms)));
        self.receipts
            .by_key
            .entry((sender.clone(), id.clone()))
            .or_default()
            .insert(conn);
        self.receipts.parked += 1;
        self.conns.get_mut(&conn).expect("verb phase").phase = Phase::StatusWait {
            sender,
            id,
            wait_for,
        };
        self.set_deadline(conn, deadline);
    }

    /// The remembered envelope `(sender, id)` changed: every wait on it that this ends is
    /// answered now.
    pub(super) fn receipt_changed<I: IdText + ?Sized>(&mut self, sender: &str, id: &I, now: Now) {
        if self.receipts.parked == 0 {
            return;
        }
        id.with_text(|id| self.receipt_changed_text(sender, id, now));
    }

    fn receipt_changed_text(&mut self, sender: &str, id: &str, now: Now) {
        let key = (sender.to_owned(), id.to_owned());
        let Some(conns) = self.receipts.by_key.get(&key) else {
            return;
        };
        let mut ended = Vec::new();
        for &conn in conns {
            let Some(Phase::StatusWait { wait_for, .. }) = self.conns.get(&conn).map(|c| &c.phase)
            else {
                continue;
            };
            // A record no longer remembered cannot be reached: it ends the wait as `unknown`.
            let end = match self.memory.ledger.get(sender, id) {
                Some(rec) => judge(*wait_for, rec),
                None => Some(WaitEnd::Ended),
            };
            if let Some(end) = end {
                ended.push((conn, end));
            }
        }
        for (conn, end) in ended {
            self.unwatch_key(conn, sender, id);
            self.answer_wait(conn, sender, id, end, now);
        }
    }

    /// A parked wait's `timeoutMs` passed: it is answered with where the envelope is now.
    pub(super) fn status_wait_timeout(&mut self, conn: ConnId, now: Now) {
        let Some(Phase::StatusWait { sender, id, .. }) = self.conns.get(&conn).map(|c| &c.phase)
        else {
            return;
        };
        let (sender, id) = (sender.clone(), id.clone());
        self.unwatch_key(conn, &sender, &id);
        self.answer_wait(conn, &sender, &id, WaitEnd::Timeout, now);
    }

    fn answer_wait(&mut self, conn: ConnId, sender: &str, id: &str, end: WaitEnd, now: Now) {
        let mut st = match self.memory.ledger.get(sender, id) {
            Some(rec) => self.status_of(sender, id, rec),
            None => Hub::unknown_status(id.to_owned()),
        };
        st.wait = Some(end.as_str().into());
        self.reply(conn, &HubLine::Status(st), "status", now);
    }

    /// Drops `conn`'s parked wait, if it has one (the connection is ending).
    pub(super) fn unwatch(&mut self, conn: ConnId) {
        if let Some(Phase::StatusWait { sender, id, .. }) = self.conns.get(&conn).map(|c| &c.phase)
        {
            let (sender, id) = (sender.clone(), id.clone());
            self.unwatch_key(conn, &sender, &id);
        }
    }

    pub(super) fn unwatch_key(&mut self, conn: ConnId, sender: &str, id: &str) {
        let key = (sender.to_owned(), id.to_owned());
        if let Some(set) = self.receipts.by_key.get_mut(&key) {
            if set.remove(&conn) {
                self.receipts.parked -= 1;
            }
            if set.is_empty() {
                self.receipts.by_key.remove(&key);
            }
        }
    }

    /// Status waits parked now (tests and the operator's view).
    pub fn parked_status_waits(&self) -> usize {
        self.receipts.parked
    }
}
