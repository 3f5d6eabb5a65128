//! The ACP client (issue 11; docs/acp.md):
//! the hub drives a delegated task on an agent CLI over the Agent Client Protocol v1.
//!
//! Owns, all pure: `session` (the state machine for one task on one agent process: ids of
//! both directions, the requests, policies, deadlines, the one outcome), `rpc` (classifying
//! JSON-RPC lines and building ours), `progress` (folding `session/update`), `permission`
//! (answering permission requests by policy, the hub's own tools, pre-approval rules),
//! `request` (a request held for a person and its answer, issue 37), `question` (an
//! `elicitation/create` form read as a question and its answer, design §4b), `modes`
//! (reading an agent's session modes and choosing the one where it asks before acting),
//! `outcome` (the outcome types), `usage` (token, cost and context figures tagged with their
//! source, issue 38), `config` (what a session is given, with every limit's
//! default and bound) and `sanitize` (bounded, redacted excerpts of agent strings for logs).
//! Refuses: processes, pipes, signals, clocks and
//! threads; the runner that spawns the agent and carries out `Event`s lives elsewhere.

pub mod config;
pub mod modes;
pub mod outcome;
pub mod permission;
pub mod progress;
pub mod question;
pub mod request;
pub mod rpc;
pub mod sanitize;
pub mod session;
pub mod usage;

#[cfg(test)]
mod tests;

pub use config::{
    Approval, Limits, McpServer, PermissionFallback, PermissionPolicy, SessionConfig,
    SessionConfigError,
};
pub use outcome::{CancelEnd, ExitStatus, Failure, Outcome, Refusal, Status, Step, StopReason};
pub use progress::{AgentInfo, PermissionCounts, PlanEntry, Progress, ToolCounts};
pub use request::{OptionKind, RequestAnswer, RequestAsk, RequestKind, RequestOption};
pub use session::{Event, Level, Log, PromptRefusal, Session, Signal};
pub use usage::{ContextUsage, Cost, Reports, Sourced, TurnMeter, UsageSource};
