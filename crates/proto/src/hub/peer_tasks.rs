//! The hub's side of delegated work across hubs (docs/delegation.md "Across hubs"): relay
//! peers' task messages and link changes fed to the task book, and the book's messages for
//! peers held until the commit of the step that caused them.
//!
//! Owns the glue only; `crate::tasks::peer` decides. The rule kept here: a message to a peer
//! (a `delegate_task`, a status, a final handoff, the ack of a peer's handoff) leaves only
//! after the commit of the step that made it, so a peer never hears of a task, or of an
//! outcome, this hub could lose in a crash. Refuses IO.

use super::{Hub, Now, PeerSend};
use crate::relay::message::Payload;
use crate::tasks::peer_refusal as refusal_handoff;

impl Hub {
    /// The lasting relay link with `peer` came up or went down; `v1`: an agent-hub peer,
    /// which reads `agent` and acks handoffs, false for any claudectl (0.92 speaks proto 1 but
    /// acks nothing), see `TaskBook::handle_peer_link`.
    pub fn handle_peer_link(&mut self, peer: &str, up: bool, v1: bool, now: Now) {
        if !up {
            self.presence.remote.forget(peer);
        }
        let Some(book) = self.tasks.as_mut() else {
            return;
        };
        book.handle_peer_link(peer, up, v1, now, &mut *self.ids);
        self.drain_task_actions(now);
    }

    /// A task message (`delegate_task`, `task_status`, `task_handoff`, `task_interrupt`) from
    /// an authenticated connection of `peer`; `msg_id` is its relay message id.
    pub fn handle_peer_message(&mut self, peer: &str, msg_id: &str, payload: Payload, now: Now) {
        let Some(book) = self.tasks.as_mut() else {
            if let Payload::DelegateTask(d) = &payload {
                // Never silence: the delegating peer hears why (claudectl shows it), as a
                // task that could not start (`refused: true`, docs/delegation.md "Across
                // hubs").
                self.commit.stage_peer_send(PeerSend {
                    peer: peer.to_owned(),
                    payload: Payload::TaskHandoff(refusal_handoff(
                        &d.task_id,
                        "delegation is not enabled on this hub",
                    )),
                    handoff: None,
                });
                self.outputs.log(format!(
                    "relay: {peer} sent delegate_task; refused: delegation is not enabled on this hub"
                ));
            } else {
                self.outputs.log(format!(
                    "relay: {peer} sent {}; this hub runs no delegated work",
                    payload.msg_type().as_str()
                ));
            }
            return;
        };
        if self.conns.shutting_down() {
            if let Payload::DelegateTask(d) = &payload {
                self.commit.stage_peer_send(PeerSend {
                    peer: peer.to_owned(),
                    payload: Payload::TaskHandoff(refusal_handoff(
                        &d.task_id,
                        "the hub is shutting down",
                    )),
                    handoff: None,
                });
                return;
            }
        }
        let memory = &self.memory;
        let pending = |envelope_id: &str| memory.hub_envelope_queued(envelope_id);
        book.handle_peer_message(peer, msg_id, payload, now, &mut *self.ids, &pending);
        self.drain_task_actions(now);
        self.start_tasks(now);
    }

    /// A v1 peer acked our final handoff of its task `task_id`.
    pub fn handle_peer_task_acked(&mut self, peer: &str, task_id: &str) {
        if let Some(book) = self.tasks.as_mut() {
            book.handle_peer_acked(peer, task_id);
        }
    }
}
