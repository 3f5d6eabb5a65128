//! Taking back a delegation whose commit failed (docs/delegation.md "Durability"): the
//! delegator was told the delegation was not accepted, so the task must not exist.
//!
//! Owns `TaskBook::withdraw` only. Refuses IO.

use super::{TaskBook, TaskId, TaskState};

impl TaskBook {
    /// Forgets `task` if it is still queued and was never answered `delegated`: its row was
    /// never committed, so nothing of it is in the store. A task in any other state is
    /// left alone (only a fresh submit can be withdrawn).
    pub fn withdraw(&mut self, task: &TaskId) -> bool {
        match self.tasks.get(task) {
            Some(t) if t.state == TaskState::Queued => {}
            _ => return false,
        }
        self.tasks.remove(task);
        self.queue.retain(|q| q != task);
        true
    }
}
