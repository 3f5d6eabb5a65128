//! What the task book answers about tasks (docs/delegation.md "Verbs and replies"):
//! `task_status` and `tasks`, each visible only to the task's delegator, and the record both
//! show. A name in `tasks.approvers` also sees every other task while it has an open request,
//! so it can find what it may answer (issue 37 design §5; `agent-hub top` lists them from
//! `tasks`). Refuses IO.

use super::types::{TaskId, TaskState};
use super::{ms_between, rfc3339, Task, TaskBook};
use crate::kernel::now::Now;
use crate::wire::{TaskList, TaskRecord};

impl TaskBook {
    /// `task_status`: the record if `asker` delegated it (or, for an approver, while it has
    /// an open request), else `unknown`.
    pub fn status(&self, task: &str, asker: &str, now: Now) -> TaskRecord {
        match TaskId::parse(task).and_then(|id| self.tasks.get(&id)) {
            Some(t) if self.visible(t, asker) => self.record(t, now),
            _ => TaskRecord::unknown(task),
        }
    }

    /// Whether `asker` sees `t` in `task_status` and `tasks`.
    pub(super) fn visible(&self, t: &Task, asker: &str) -> bool {
        t.delegator == asker
            || (self.approvals.is_approver(asker) && self.approvals.has_open(&t.id))
    }

    /// `tasks`: the asker's tasks, oldest first (for an approver, with every other task
    /// that has an open request, in the same order).
    pub fn list(&self, asker: &str, now: Now) -> TaskList {
        let mut mine: Vec<&Task> = self
            .tasks
            .values()
            .filter(|t| self.visible(t, asker))
            .collect();
        mine.sort_by_key(|t| t.seq);
        TaskList {
            tasks: mine.into_iter().map(|t| self.record(t, now)).collect(),
        }
    }

    /// `activity` (SPEC §14.1): every task that has not ended, oldest first, as metadata
    /// only — ids, agent, delegator, state and times, never the prompt, progress or text, so
    /// it may be shown to any roster agent, as `who` is.
    pub fn unfinished(&self) -> Vec<crate::wire::TaskMeta> {
        let mut open: Vec<&Task> = self
            .tasks
            .values()
            .filter(|t| !t.state.is_final())
            .collect();
        open.sort_by_key(|t| t.seq);
        open.into_iter()
            .map(|t| crate::wire::TaskMeta {
                task: t.id.0.clone(),
                agent: t.agent.clone(),
                delegator: t.delegator.clone(),
                peer: t.peer.clone(),
                state: t.state.as_str().to_owned(),
                created_at: rfc3339(t.created_ms).unwrap_or_default(),
                started_at: t.started_ms.and_then(rfc3339),
            })
            .collect()
    }

    fn record(&self, t: &Task, now: Now) -> TaskRecord {
        let active = matches!(t.state, TaskState::Running | TaskState::Cancelling);
        // Between turns the record shows the last turn's ending (its stop reason, reason
        // and time) under the state `idle`.
        let position = (t.state == TaskState::Queued)
            .then(|| self.queue.iter().position(|q| *q == t.id))
            .flatten()
            .map(|i| i as u64 + 1);
        let elapsed_ms = match (t.elapsed_ms, t.started_ms) {
            (Some(e), _) => Some(e),
            (None, Some(s)) if active => Some(ms_between(s, now.wall.timestamp_millis())),
            _ => None,
        };
        TaskRecord {
            task: t.id.0.clone(),
            agent: Some(t.agent.clone()),
            peer: t.peer.clone(),
            state: t.state.as_str().to_owned(),
            position,
            created_at: rfc3339(t.created_ms),
            started_at: t.started_ms.and_then(rfc3339),
            ended_at: t.ended_ms.and_then(rfc3339),
            elapsed_ms,
            stop_reason: t.stop_reason.clone(),
            reason: t.reason.clone(),
            progress: if active { t.progress.clone() } else { None },
            requests: self.approvals.records(&t.id, now),
            turn: Some(self.turns.current(&t.id)).filter(|n| *n > 0),
            turns: self.turns.records(&t.id, rfc3339),
            session: Some(self.turns.session(&t.id, t.state)).map(|mut s| {
                s.kept_until = self.turns.kept_until_ms(&t.id).and_then(rfc3339);
                s
            }),
            placement: t.placement.as_ref().map(|p| p.reason.clone()),
            usage: t.metered.meter.usage().map(Box::new),
            cost: t.metered.meter.cost_figures().map(Box::new),
            context: t.metered.meter.context(),
            budget: t.metered.budget_figures().map(Box::new),
        }
    }
}
