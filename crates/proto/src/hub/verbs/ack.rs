//! The `ack` line after an ack-mode delivery (SPEC §12.2): a matching ack is staged for the
//! commit that makes it durable; anything else, or none in time, ends the delivery with an
//! error line and gives the envelope back for another delivery (`hub::routing`).

//!
//! A function over the machines it drives: the connection (its delivery) and the staging (the
//! ack, for the next batch). Refuses giving the envelope back: that is routing's
//! (`Hub::return_unacked`), with the message this hands back.

use crate::hub::commit::{Commits, StagedAck};
use crate::hub::conn_map::ConnId;
use crate::hub::conns::{Conns, Phase};
use crate::hub::pipeline::{id_digest, AckInput};

/// The line after an ack-mode delivery on `conn`: the ack of the delivered envelope is staged
/// for the commit (None); anything else is the error line the reader gets, its envelope going
/// back for another delivery.
pub(in crate::hub) fn handle(
    conns: &mut Conns,
    commit: &mut Commits,
    conn: ConnId,
    input: AckInput,
) -> Option<String> {
    let Some(Phase::Delivering { env, .. }) = conns.get(&conn).map(|c| &c.phase) else {
        return None;
    };
    let delivered = env.id.clone();
    match input {
        AckInput::Ack(digest) if digest == delivered.with_text(id_digest) => {
            let c = conns.get_mut(&conn)?;
            let Phase::Delivering { env, .. } = std::mem::replace(&mut c.phase, Phase::AckStaged)
            else {
                unreachable!("matched above")
            };
            conns.set_deadline(conn, None);
            commit.stage_ack(StagedAck { conn, env: *env });
            None
        }
        // The acked id is the client's text and is not repeated; the delivered one is
        // what the reader was just given.
        AckInput::Ack(_) => Some(format!(
            "ack does not match the delivered envelope {delivered:?}; it will be delivered again"
        )),
        AckInput::NotAck(msg) => Some(msg),
    }
}
