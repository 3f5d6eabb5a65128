//! The `status` verb (SPEC §12.4): what the hub remembers about one of the caller's own
//! envelope ids (SPEC §12.3's ledger): its state, the kind of reader it was handed to, its
//! position in the queue, attempts and the reason it is gone, or `unknown`. With `waitFor` it
//! waits for a stage (`hub::receipts`).

use crate::hub::{ConnId, Hub, Now};
use crate::wire::{HubLine, StatusRequest};

impl Hub {
    pub(in crate::hub) fn on_status(&mut self, conn: ConnId, req: StatusRequest, now: Now) {
        let name = self.conns[&conn]
            .name
            .clone()
            .expect("verb phase is authenticated");
        if let Some(wait_for) = req.stage() {
            return self.status_wait(conn, &name, req.id, wait_for, req.timeout_ms, now);
        }
        let status = match self.memory.ledger.lookup(&name, &req.id) {
            None => Hub::unknown_status(req.id),
            Some((sender, rec)) => self.status_of(sender, &req.id, rec),
        };
        self.reply(conn, &HubLine::Status(status), "status", now);
    }
}
