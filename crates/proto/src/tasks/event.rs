//! What a task run reports to the task book (docs/delegation.md): the events a runner sends
//! its owner, in order, and how the process ended. Plain data, defined here with the book that
//! consumes them rather than in the runner that produces them, so the book (pure) imports
//! nothing from the IO layer (issue 30; PLAN.md §14).
//!
//! The request types of issue 37 (design §4: `RequestAsk` up, `RequestAnswer` down) are the
//! ACP session's, which produces the one and consumes the other below the book; they are
//! re-exported here, where the book names them.

use crate::acp::{ExitStatus, Log, Outcome, Progress, Signal};
pub use crate::acp::{OptionKind, RequestAnswer, RequestAsk, RequestKind, RequestOption};

/// What the owner receives, in this order: `PermissionTool` when the agent asks through the
/// hub's permission tool, `Started` (unless the agent could not be started), any number of
/// `Progress` and `Log`, one `Outcome` per turn (each kept one followed by `Idle`), more
/// `Log`, then `Ended` last.
#[derive(Debug, Clone, PartialEq)]
pub enum TaskEvent {
    /// The agent process runs, leading its own process group `pid`.
    Started { pid: u32 },
    /// A coalesced progress snapshot from the session.
    Progress(Progress),
    /// A service-log line: the session's (permission decisions, anomalies, the summary) or
    /// the runner's (spawn, pipe failures). Never holds the prompt, text or a secret.
    Log(Log),
    /// The agent asked, and the session holds the request until the book's
    /// `TaskAction::Answer` for its `seq` (or the task's cancel or end, which the session
    /// answers `cancelled` itself). Design §4.
    Request(RequestAsk),
    /// A request the delegator's allow rule number `rule` (from 0, in the order of the
    /// delegation's `allow`) let through; the session answered it allow already. For the
    /// audit record `request_preapproved` only: never sent to the delegator (design §2).
    Preapproved { ask: RequestAsk, rule: usize },
    /// The task's agent asks through the hub's permission-prompt tool (a headless run with
    /// `run.headless_mcp`, design §6): its `task_permission` prompts are taken from now on.
    /// `tool_kinds` maps the agent's native tool names to ACP tool kinds (its manifest's
    /// `[tools]`), the kind a prompt's request shows and a pre-approval rule matches. Sent by
    /// the executor when it starts the task, before the run's own events.
    PermissionTool {
        tool_kinds: std::collections::BTreeMap<String, String>,
    },
    /// The task runs headless (issue 38): one run, one turn, no session a follow-up could
    /// reach. Sent by the executor when it starts the task, before the run's own events.
    Headless,
    /// A turn's outcome (`Outcome::turn`, from 1): one per turn (issue 38 design §2), the
    /// last one final unless `Outcome::kept`.
    Outcome(Outcome),
    /// The turn just reported left the session kept: the agent runs on, idle, holding no
    /// runner slot, until a follow-up (`TaskAction::Prompt`) or a close (`TaskAction::Close`).
    Idle { turn: u32 },
    /// The process was reaped and nothing more will come.
    Ended(TaskEnd),
}

/// How the process ended, sent with `TaskEvent::Ended`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TaskEnd {
    /// None when no process was started.
    pub exit: Option<ExitStatus>,
    /// Signals sent to the process group, in order.
    pub signals: Vec<Signal>,
    /// The last lines of the agent's stderr, each a sanitized excerpt (acp::sanitize).
    pub stderr_tail: Vec<String>,
    /// Every byte the agent wrote to stderr, kept or not.
    pub stderr_bytes: u64,
}
