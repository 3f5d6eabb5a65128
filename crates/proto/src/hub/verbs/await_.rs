//! The `await` verb (SPEC §5.2): the first queued envelope that matches the filter is handed
//! over at once, otherwise the await parks with its timeout (`timeoutSecs` 0 answers
//! `timeout` at once); ack mode (SPEC §12.2) is carried into the delivery.

use crate::hub::conns::Phase;
use crate::hub::event::AuditEvent;
use crate::hub::router::Filter;
use crate::hub::{ConnId, Hub, Now};
use crate::wire::{AwaitRequest, HubLine, Reader};
use std::time::Duration;

impl Hub {
    pub(in crate::hub) fn on_await(&mut self, conn: ConnId, req: AwaitRequest, now: Now) {
        let name = self.conns.asker(conn);
        let filter = Filter {
            reply_to: req.reply_to,
            kind: req.kind,
        };
        let ack = req.ack.unwrap_or(false);
        // Checked against the list when the line was decoded; absent: a reader of no kind.
        let reader = req
            .reader
            .as_deref()
            .and_then(Reader::declared)
            .unwrap_or(Reader::Unknown);
        self.conns.get_mut(&conn).expect("caller checked").reader = Some(reader);
        if let Some(env) = self.router.take_first_match(&name, &filter) {
            return self.hand_off(conn, env, ack, now);
        }
        match req.timeout_secs {
            Some(0) => {
                self.outputs.audit(AuditEvent::Timeout { conn, name });
                self.reply(conn, &HubLine::Timeout, "timeout", now);
            }
            secs => {
                // A timeout too far away to represent waits forever.
                let deadline = secs.and_then(|s| now.mono.checked_add(Duration::from_secs(s)));
                let roster = &self.settings.roster;
                self.presence
                    .liveness
                    .note_parking(&name, roster, &self.router, now);
                let parked = self.router.park(&name, filter, conn);
                self.conns.get_mut(&conn).expect("caller checked").phase = Phase::Parked {
                    parked,
                    deadline,
                    ack,
                };
                self.set_deadline(conn, deadline);
            }
        }
    }
}
