//! The `ack` line after an ack-mode delivery (SPEC §12.2): a matching ack is staged for the
//! commit that makes it durable; anything else, or none in time, ends the delivery with an
//! error line and gives the envelope back for another delivery (`hub::redelivery`).

use crate::hub::commit::StagedAck;
use crate::hub::conns::Phase;
use crate::hub::pipeline::{id_digest, AckInput};
use crate::hub::{ConnId, Hub, Now};

impl Hub {
    /// The line after an ack-mode delivery: the ack of the delivered envelope is staged for
    /// the commit; anything else returns the envelope with an error line.
    pub(in crate::hub) fn on_ack_input(&mut self, conn: ConnId, input: AckInput, now: Now) {
        let Some(Phase::Delivering { env, .. }) = self.conns.get(&conn).map(|c| &c.phase) else {
            return;
        };
        let delivered = env.id.clone();
        match input {
            AckInput::Ack(digest) if digest == delivered.with_text(id_digest) => {
                let c = self.conns.get_mut(&conn).expect("checked above");
                let Phase::Delivering { env, .. } =
                    std::mem::replace(&mut c.phase, Phase::AckStaged)
                else {
                    unreachable!("matched above")
                };
                self.set_deadline(conn, None);
                self.commit.stage_ack(StagedAck { conn, env: *env });
            }
            // The acked id is the client's text and is not repeated; the delivered one is
            // what the reader was just given.
            AckInput::Ack(_) => {
                let msg = format!(
                    "ack does not match the delivered envelope {delivered:?}; it will be delivered again"
                );
                self.return_unacked(conn, &msg, now);
            }
            AckInput::NotAck(msg) => self.return_unacked(conn, &msg, now),
        }
    }

    /// Ends an ack-mode delivery without an ack: an error line, and the envelope goes back.
    pub(in crate::hub) fn return_unacked(&mut self, conn: ConnId, message: &str, now: Now) {
        let c = self.conns.get_mut(&conn).expect("caller checked");
        let Phase::Delivering { env, committed, .. } = std::mem::replace(&mut c.phase, Phase::Done)
        else {
            return;
        };
        self.fail(conn, message, now);
        self.give_back(conn, *env, message, committed, now);
    }
}
