//! The `status` verb (SPEC §12.4): what the hub remembers about one of the caller's own
//! envelope ids (SPEC §12.3's ledger): its state, position in the queue, attempts and the
//! reason it is gone, or `unknown`.

use crate::hub::ledger::State;
use crate::hub::{ConnId, Hub, Now};
use crate::wire::{EnvelopeStatus, HubLine, IdRequest};
use chrono::SecondsFormat;

impl Hub {
    pub(in crate::hub) fn on_status(&mut self, conn: ConnId, req: IdRequest, now: Now) {
        let name = self.conns[&conn]
            .name
            .clone()
            .expect("verb phase is authenticated");
        let status = match self.ledger.lookup(&name, &req.id) {
            None => EnvelopeStatus {
                id: req.id,
                state: "unknown".into(),
                ..EnvelopeStatus::default()
            },
            Some((sender, rec)) => {
                let position = (rec.state == State::Queued)
                    .then(|| {
                        self.router
                            .queued(&rec.to)
                            .position(|q| q.seq == rec.seq && q.id == req.id)
                    })
                    .flatten()
                    .map(|p| p as u64 + 1);
                let attempts = self
                    .router
                    .queued(&rec.to)
                    .find(|q| q.seq == rec.seq)
                    .map(|q| q.attempts);
                EnvelopeStatus {
                    state: rec.state.as_str().into(),
                    from: Some(sender.to_owned()),
                    to: Some(rec.to.clone()),
                    position,
                    at: chrono::DateTime::from_timestamp_millis(rec.state_ms)
                        .map(|t| t.to_rfc3339_opts(SecondsFormat::Millis, true)),
                    attempts: attempts.filter(|&a| a > 0),
                    reason: self.reason_of(rec.seq, rec.state),
                    id: req.id,
                }
            }
        };
        self.reply(conn, &HubLine::Status(status), "status", now);
    }
}
