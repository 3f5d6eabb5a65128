//! What the task book asks to be made durable and recorded (docs/delegation.md "Durability"):
//! the store operations on the tasks table (`TaskStoreOp`), the row the store gives back at
//! startup (`StoredTask`), and the task audit records (`TaskAudit`).
//!
//! Owns the shapes only, with plain fields, so the store (the SQLite side) and the audit
//! writer can take them as they are. A task's token is never in any of them; the prompt is
//! stored only while the task waits to start (it is needed to start it after a restart) and
//! is cleared when the task settles. Refuses IO.

use crate::wire::to_json;
use std::fmt::Write as _;

/// One change to the tasks table. All of one `TaskCommit` go into one store transaction,
/// with its envelope and its audit records.
#[derive(Clone, PartialEq, Eq)]
pub enum TaskStoreOp {
    /// A task was accepted (`queued`).
    Insert(StoredTask),
    /// The task's state changed to `running` (with `started_ms`) or `cancelling`.
    State {
        task: String,
        state: String,
        started_ms: Option<i64>,
        at_ms: i64,
    },
    /// The runner started the agent: its process group, so a restart can make sure it is
    /// gone.
    Pid { task: String, pid: u32 },
    /// The task reached its final state; its prompt is cleared.
    Settle {
        task: String,
        state: String,
        stop_reason: Option<String>,
        reason: Option<String>,
        ended_ms: i64,
        elapsed_ms: u64,
    },
    /// A settled task left the history (`tasks.history_max`).
    Forget { task: String },
}

/// The prompt is shown by size only.
impl std::fmt::Debug for TaskStoreOp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TaskStoreOp::Insert(row) => f.debug_tuple("Insert").field(row).finish(),
            TaskStoreOp::State {
                task,
                state,
                started_ms,
                at_ms,
            } => f
                .debug_struct("State")
                .field("task", task)
                .field("state", state)
                .field("started_ms", started_ms)
                .field("at_ms", at_ms)
                .finish(),
            TaskStoreOp::Pid { task, pid } => f
                .debug_struct("Pid")
                .field("task", task)
                .field("pid", pid)
                .finish(),
            TaskStoreOp::Settle {
                task,
                state,
                stop_reason,
                reason,
                ended_ms,
                elapsed_ms,
            } => f
                .debug_struct("Settle")
                .field("task", task)
                .field("state", state)
                .field("stop_reason", stop_reason)
                .field("reason", reason)
                .field("ended_ms", ended_ms)
                .field("elapsed_ms", elapsed_ms)
                .finish(),
            TaskStoreOp::Forget { task } => f.debug_struct("Forget").field("task", task).finish(),
        }
    }
}

/// A task row: what `Insert` writes and what the store loads at startup, with every later
/// change applied. Wall times are Unix milliseconds.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct StoredTask {
    /// Acceptance order (unique, increasing): the queue order after a restart.
    pub seq: u64,
    pub task: String,
    pub delegator: String,
    pub agent: String,
    pub peer: Option<String>,
    /// The lexically normalised cwd.
    pub cwd: String,
    /// Empty once settled.
    pub prompt: String,
    pub timeout_secs: u64,
    pub progress_secs: u64,
    /// A `TaskState` tag.
    pub state: String,
    pub created_ms: i64,
    pub started_ms: Option<i64>,
    pub ended_ms: Option<i64>,
    pub elapsed_ms: Option<u64>,
    pub stop_reason: Option<String>,
    pub reason: Option<String>,
    pub pid: Option<u32>,
}

impl std::fmt::Debug for StoredTask {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoredTask")
            .field("seq", &self.seq)
            .field("task", &self.task)
            .field("delegator", &self.delegator)
            .field("agent", &self.agent)
            .field("peer", &self.peer)
            .field("cwd", &self.cwd)
            .field("prompt_bytes", &self.prompt.len())
            .field("timeout_secs", &self.timeout_secs)
            .field("progress_secs", &self.progress_secs)
            .field("state", &self.state)
            .field("created_ms", &self.created_ms)
            .field("started_ms", &self.started_ms)
            .field("ended_ms", &self.ended_ms)
            .field("elapsed_ms", &self.elapsed_ms)
            .field("stop_reason", &self.stop_reason)
            .field("reason", &self.reason)
            .field("pid", &self.pid)
            .finish()
    }
}

/// A task audit record. Never holds the prompt, the agent's text or the token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TaskAudit {
    /// `task_accepted`: a delegation was accepted and queued.
    Accepted {
        task: String,
        delegator: String,
        agent: String,
        peer: Option<String>,
        cwd: String,
        prompt_bytes: usize,
    },
    /// `task_started`: the runner is asked to start it.
    Started { task: String, agent: String },
    /// `task_cancel_asked`: the delegator asked a running task to stop.
    CancelAsked { task: String },
    /// `task_ended`: its final state, committed with its outcome envelope.
    Ended {
        task: String,
        state: String,
        stop_reason: Option<String>,
        reason: Option<String>,
        elapsed_ms: u64,
    },
    /// `task_forgotten`: dropped from the history.
    Forgotten { task: String },
}

impl TaskAudit {
    pub fn event(&self) -> &'static str {
        match self {
            TaskAudit::Accepted { .. } => "task_accepted",
            TaskAudit::Started { .. } => "task_started",
            TaskAudit::CancelAsked { .. } => "task_cancel_asked",
            TaskAudit::Ended { .. } => "task_ended",
            TaskAudit::Forgotten { .. } => "task_forgotten",
        }
    }

    /// The record's event and fields as `hub::event::AuditEvent::encode_into` writes them
    /// after `"event":` — `"task_ended","task":"…",…` — for the audit writer to wrap.
    pub fn encode_fields_into(&self, out: &mut String) {
        let opt = |v: &Option<String>| v.as_deref().map_or_else(|| "null".to_owned(), to_json);
        let _ = write!(out, "\"{}\"", self.event());
        let _ = match self {
            TaskAudit::Accepted {
                task,
                delegator,
                agent,
                peer,
                cwd,
                prompt_bytes,
            } => write!(
                out,
                ",\"task\":{},\"delegator\":{},\"agent\":{},\"peer\":{},\"cwd\":{},\"prompt_bytes\":{prompt_bytes}",
                to_json(task),
                to_json(delegator),
                to_json(agent),
                opt(peer),
                to_json(cwd)
            ),
            TaskAudit::Started { task, agent } => write!(
                out,
                ",\"task\":{},\"agent\":{}",
                to_json(task),
                to_json(agent)
            ),
            TaskAudit::CancelAsked { task } | TaskAudit::Forgotten { task } => {
                write!(out, ",\"task\":{}", to_json(task))
            }
            TaskAudit::Ended {
                task,
                state,
                stop_reason,
                reason,
                elapsed_ms,
            } => write!(
                out,
                ",\"task\":{},\"state\":{},\"stop_reason\":{},\"reason\":{},\"elapsed_ms\":{elapsed_ms}",
                to_json(task),
                to_json(state),
                opt(stop_reason),
                opt(reason)
            ),
        };
    }
}
