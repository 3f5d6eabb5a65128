//! The store operations that gate no reply (PLAN.md §2: removals after plain deliveries,
//! attempt counts, state changes, forgotten ids), held from the moment the core emits them
//! until a commit takes them, which while the store keeps failing may be a long time.
//!
//! Owns their compaction and their size. Each later change to an envelope's row replaces the
//! earlier one of its kind (the store applies them as last-writer-wins column updates, so the
//! outcome is the same), and a `Forget` replaces everything before it for its row: the backlog
//! holds at most a few operations per envelope, so it cannot outgrow what the hub already holds
//! in memory. Its estimated size is what `limits.store_backlog_max_bytes` bounds (SPEC §12.1).
//! Refuses deciding what follows from the bound: the commit point (`hub::commit`) refuses
//! sends past it.

use crate::hub::durable::StoreOp;
use crate::kernel::fold_hash::FoldMap;

/// Which column of an envelope's row an operation writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Slot {
    Remove,
    Attempts,
    State,
    Forget,
}

#[derive(Debug, Default)]
pub struct PendingOps {
    /// In emission order; None where a later operation superseded this one.
    ops: Vec<Option<StoreOp>>,
    /// Where the live operation for each (row, column) sits in `ops`.
    at: FoldMap<(u64, Slot), usize>,
    bytes: usize,
}

/// The memory an operation holds, roughly: its own size and its strings.
fn op_bytes(op: &StoreOp) -> usize {
    std::mem::size_of::<StoreOp>()
        + match op {
            StoreOp::Insert {
                agent,
                id,
                sender,
                kind,
                correlation_id,
                text,
                ..
            } => {
                agent.len()
                    + id.len()
                    + sender.len()
                    + kind.len()
                    + correlation_id.as_ref().map_or(0, String::len)
                    + text.len()
            }
            StoreOp::Remove { .. } | StoreOp::Attempts { .. } => 0,
            StoreOp::State {
                sender,
                id,
                state,
                detail,
                ..
            } => sender.len() + id.len() + state.len() + detail.as_ref().map_or(0, String::len),
            StoreOp::Forget { sender, id, .. } => sender.len() + id.len(),
            StoreOp::Task(op) => task_op_bytes(op),
        }
}

/// A task operation's strings (the prompt of an insert among them).
fn task_op_bytes(op: &crate::tasks::TaskStoreOp) -> usize {
    use crate::tasks::TaskStoreOp as T;
    match op {
        T::Insert(t) => {
            t.task.len()
                + t.delegator.len()
                + t.agent.len()
                + t.cwd.len()
                + t.prompt.len()
                + t.allow.as_ref().map_or(0, String::len)
        }
        T::OpenRequest(r) => r.request.len() + r.task.len() + r.kind.len(),
        T::CloseRequest { request } => request.len(),
        T::State { task, state, .. } => task.len() + state.len(),
        T::Pid { task, .. } | T::Forget { task } => task.len(),
        T::Settle {
            task,
            state,
            stop_reason,
            reason,
            ..
        } => {
            task.len()
                + state.len()
                + stop_reason.as_ref().map_or(0, String::len)
                + reason.as_ref().map_or(0, String::len)
        }
    }
}

impl PendingOps {
    pub fn push(&mut self, op: StoreOp) {
        let (seq, slot) = match &op {
            StoreOp::Remove { seq } => (*seq, Slot::Remove),
            StoreOp::Attempts { seq, .. } => (*seq, Slot::Attempts),
            StoreOp::State { seq, .. } => (*seq, Slot::State),
            StoreOp::Forget { seq, .. } => (*seq, Slot::Forget),
            // Inserts travel with the staged sends, never here; keep one in order if it comes.
            // A task's rows are few and written whole: kept in order, never coalesced.
            StoreOp::Insert { .. } | StoreOp::Task(_) => return self.append(op),
        };
        if slot == Slot::Forget {
            // The row is deleted: nothing written to it before matters any more.
            for s in [Slot::Remove, Slot::Attempts, Slot::State] {
                if let Some(i) = self.at.remove(&(seq, s)) {
                    self.drop_at(i);
                }
            }
        }
        match self.at.get(&(seq, slot)) {
            // A removal is idempotent: the first one stands.
            Some(_) if slot == Slot::Remove => {}
            Some(&i) => {
                self.drop_at(i);
                self.bytes += op_bytes(&op);
                self.ops[i] = Some(op);
            }
            None => {
                self.at.insert((seq, slot), self.ops.len());
                self.append(op);
            }
        }
    }

    fn append(&mut self, op: StoreOp) {
        self.bytes += op_bytes(&op);
        self.ops.push(Some(op));
    }

    fn drop_at(&mut self, i: usize) {
        if let Some(old) = self.ops[i].take() {
            self.bytes -= op_bytes(&old);
        }
    }

    pub fn is_empty(&self) -> bool {
        self.bytes == 0
    }

    /// The estimated memory the backlog holds.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// The live operations, in order, for the next transaction.
    pub fn to_vec(&self) -> Vec<StoreOp> {
        self.ops.iter().flatten().cloned().collect()
    }

    #[cfg(test)]
    pub fn clear(&mut self) {
        *self = PendingOps::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(seq: u64, state: &str) -> StoreOp {
        StoreOp::State {
            seq,
            sender: "s".into(),
            id: format!("id-{seq}"),
            state: state.into(),
            detail: None,
            reader: None,
            at_ms: 0,
        }
    }

    #[test]
    fn later_changes_replace_earlier_ones_of_their_kind() {
        let mut p = PendingOps::default();
        p.push(StoreOp::Attempts {
            seq: 1,
            attempts: 1,
        });
        p.push(state(1, "queued"));
        p.push(StoreOp::Remove { seq: 2 });
        p.push(StoreOp::Attempts {
            seq: 1,
            attempts: 2,
        });
        p.push(state(1, "delivered"));
        p.push(StoreOp::Remove { seq: 2 });
        assert_eq!(
            p.to_vec(),
            [
                StoreOp::Attempts {
                    seq: 1,
                    attempts: 2
                },
                state(1, "delivered"),
                StoreOp::Remove { seq: 2 },
            ]
        );
    }

    #[test]
    fn a_forget_supersedes_its_row_and_the_size_follows() {
        let mut p = PendingOps::default();
        p.push(StoreOp::Remove { seq: 5 });
        p.push(state(5, "delivered"));
        p.push(state(6, "delivered"));
        let two = p.bytes();
        p.push(StoreOp::Forget {
            seq: 5,
            sender: "s".into(),
            id: "id-5".into(),
        });
        assert_eq!(
            p.to_vec(),
            [
                state(6, "delivered"),
                StoreOp::Forget {
                    seq: 5,
                    sender: "s".into(),
                    id: "id-5".into()
                }
            ]
        );
        assert!(p.bytes() < two + op_bytes(&state(9, "x")));
        p.clear();
        assert!(p.is_empty() && p.to_vec().is_empty());
    }

    /// However often one envelope goes out and comes back, it holds a bounded backlog.
    #[test]
    fn a_backlog_grows_with_envelopes_not_with_events() {
        let mut p = PendingOps::default();
        for round in 0..10_000u32 {
            p.push(StoreOp::Attempts {
                seq: 1,
                attempts: round,
            });
            p.push(state(1, "queued"));
        }
        assert_eq!(p.to_vec().len(), 2);
        assert_eq!(
            p.bytes(),
            op_bytes(&state(1, "queued"))
                + op_bytes(&StoreOp::Attempts {
                    seq: 1,
                    attempts: 0
                })
        );
    }
}
