//! The task book's names (docs/delegation.md "Names" and "States"): `TaskId`, the `task-`
//! + 32 hex id that is also the task identity's name, and `TaskState`. Refuses IO.

use crate::kernel::ids::IdSource;
use crate::kernel::names::TASK_PREFIX;
use std::fmt;

/// `task-` + 32 lowercase hex: a UUIDv4 in simple form from the hub's `IdSource`.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TaskId(pub(super) String);

impl TaskId {
    pub fn generate(ids: &mut dyn IdSource) -> TaskId {
        TaskId(format!("{TASK_PREFIX}{}", simple_hex(&ids.next_id())))
    }

    /// The id if `s` has the shape of one.
    pub fn parse(s: &str) -> Option<TaskId> {
        let hex = s.strip_prefix(TASK_PREFIX)?;
        let ok = hex.len() == 32 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
        ok.then(|| TaskId(s.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A hyphenated UUID's hex digits, lowercase.
pub(super) fn simple_hex(id: &str) -> String {
    id.chars()
        .filter(|c| *c != '-')
        .map(|c| c.to_ascii_lowercase())
        .collect()
}

/// Where a task is (docs/delegation.md "States").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TaskState {
    Queued,
    Running,
    /// Cancel asked; the runner's outcome is not in yet.
    Cancelling,
    /// Between turns: the last turn's outcome was sent and the session is kept for a
    /// follow-up (issue 38 design §2). Not final; holds no runner slot.
    Idle,
    Completed,
    Failed,
    Cancelled,
    TimedOut,
    Refused,
    /// It was running when the hub stopped.
    HubRestarted,
}

impl TaskState {
    pub const ALL: [TaskState; 10] = [
        TaskState::Queued,
        TaskState::Running,
        TaskState::Cancelling,
        TaskState::Idle,
        TaskState::Completed,
        TaskState::Failed,
        TaskState::Cancelled,
        TaskState::TimedOut,
        TaskState::Refused,
        TaskState::HubRestarted,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            TaskState::Queued => "queued",
            TaskState::Running => "running",
            TaskState::Cancelling => "cancelling",
            TaskState::Idle => "idle",
            TaskState::Completed => "completed",
            TaskState::Failed => "failed",
            TaskState::Cancelled => "cancelled",
            TaskState::TimedOut => "timed_out",
            TaskState::Refused => "refused",
            TaskState::HubRestarted => "hub_restarted",
        }
    }

    pub fn parse(s: &str) -> Option<TaskState> {
        TaskState::ALL.into_iter().find(|t| t.as_str() == s)
    }

    /// Final: its outcome envelope is committed and nothing changes it again.
    pub fn is_final(self) -> bool {
        !matches!(
            self,
            TaskState::Queued | TaskState::Running | TaskState::Cancelling | TaskState::Idle
        )
    }
}
