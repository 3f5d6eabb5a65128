//! The `[tasks]` settings as plain data (docs/delegation.md "Limits", "Task identity"): what the
//! task book and the runner read once the config loader has validated the table.
//!
//! Owns `TasksConfig`, `SandboxMode`, the bound the core shares with the loader
//! (`MAX_TASK_TIMEOUT_SECS`), `ApprovalSettings` (issue 37's keys, design §8, with their
//! defaults and bounds) and `BookConfig`, the part of the table the task book enforces. Reading the table from TOML, its defaults and the checks of each
//! value (and of `cwd_roots` on disk) are the loader's (`config::tasks`), which stands above
//! the core (PLAN.md §14 "The floors").

use crate::acp::{Limits, PermissionFallback, PermissionPolicy};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// The longest `tasks.timeout_secs` (a week): the session's own cap, in seconds.
pub const MAX_TASK_TIMEOUT_SECS: u64 = crate::acp::config::MAX_TASK_TIMEOUT_MS / 1000;

/// A validated `[tasks]` table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TasksConfig {
    /// Tasks running at once; more wait in the queue, in order.
    pub max_concurrent: usize,
    /// Tasks waiting at most; beyond it a delegation is refused. 0: no queue.
    pub queue_max: usize,
    /// Tasks one delegator (a roster name, or a relay peer) may hold queued or running at
    /// once; beyond it its delegation is refused, so one delegator cannot take the whole
    /// queue (docs/delegation.md "Limits").
    pub max_per_delegator: usize,
    /// A task's wall-clock budget unless the delegator asks for less.
    pub timeout_secs: u64,
    /// Largest prompt accepted (also the session's `max_prompt_bytes`).
    pub prompt_max_bytes: usize,
    /// Canonical folders; a task's cwd must lie under one (`check_cwd`).
    pub cwd_roots: Vec<PathBuf>,
    /// How permission requests are answered unless an agent has an override.
    pub permission: PermissionPolicy,
    /// Per manifest name.
    pub agent_permission: BTreeMap<String, PermissionPolicy>,
    /// The session limits every task gets.
    pub limits: Limits,
    /// Names a task's identity may mail besides its delegator (roster names).
    pub may_mail: Vec<String>,
    /// The shortest `progressSecs` a delegation may ask for (0 asks for none).
    pub min_progress_secs: u64,
    /// The cap on the agent's final text in a `task_outcome` envelope.
    pub outcome_text_max_bytes: usize,
    /// Settled tasks kept for `task_status` and `tasks`, oldest dropped first.
    pub history_max: usize,
    /// Seconds between `task_status` messages to a peer that delegated a task here.
    pub peer_status_secs: u64,
    /// An extra folder of agent manifests the runner looks in (absolute).
    pub manifests_dir: Option<PathBuf>,
    /// Where task credential files are written (absolute); None: `task-credentials` beside
    /// the audit log (docs/delegation.md "How a task runs").
    pub credentials_dir: Option<PathBuf>,
    /// Environment names (or `PREFIX*`) passed to agents; None: the default list
    /// (docs/delegation.md "The agent's environment").
    pub env_pass: Option<Vec<String>>,
    /// Bytes of a headless agent's stdout kept for its outcome parser; the rest is dropped
    /// and the outcome says `truncated` (docs/delegation.md "Headless tasks").
    pub headless_stdout_max_bytes: usize,
    /// The OS sandbox every agent runs in: `auto` (the default: bubblewrap, else Landlock),
    /// `bwrap`, `landlock` or `none` (docs/delegation.md "Task identity").
    pub sandbox: SandboxMode,
    /// How requests held for a person are bounded and answered (issue 37 design §8).
    pub approvals: ApprovalSettings,
    /// Follow-up turns: the keep window, the kept sessions' cap, the turns' cap (issue 38).
    pub follow_ups: super::turns::FollowUpSettings,
    /// `[tasks.placement]` (issue 38 design §4): the floors a place must meet for
    /// `delegate --peer auto`.
    pub placement: crate::tasks::placement::Floors,
}

/// `tasks.permission` when the table says nothing (issue 37 design §1): ask a person.
pub const DEFAULT_PERMISSION: PermissionPolicy = PermissionPolicy::Ask;
/// `tasks.permission_timeout_secs`: default and bound.
pub const DEFAULT_PERMISSION_TIMEOUT_SECS: u64 = 600;
pub const MAX_PERMISSION_TIMEOUT_SECS: u64 = 86_400;
/// `tasks.max_open_requests_per_task`: the session's own (`acp::config`).
pub use crate::acp::config::{
    DEFAULT_MAX_OPEN_REQUESTS as DEFAULT_MAX_OPEN_REQUESTS_PER_TASK,
    MAX_OPEN_REQUESTS as MAX_OPEN_REQUESTS_PER_TASK,
};
/// `tasks.max_open_requests` (hub-wide): default and bound.
pub const DEFAULT_MAX_OPEN_REQUESTS: u64 = 256;
pub const MAX_MAX_OPEN_REQUESTS: u64 = 65_536;
/// `tasks.max_request_bytes` (a `task_request` envelope's body): default and bounds.
pub const DEFAULT_MAX_REQUEST_BYTES: u64 = 8192;
pub const MIN_MAX_REQUEST_BYTES: u64 = 1024;
pub const MAX_MAX_REQUEST_BYTES: u64 = 65_536;
/// Entries of `tasks.approvers`.
pub const MAX_APPROVERS: usize = 256;

/// Issue 37's `[tasks]` keys (design §8), validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalSettings {
    /// How long a request waits for an answer before the fallback answers it.
    pub permission_timeout_secs: u64,
    /// What a request gets when nobody answers in time, or it cannot be held.
    pub permission_fallback: PermissionFallback,
    /// Requests one task may hold open at once (the session's cap).
    pub max_open_requests_per_task: u32,
    /// Requests open in the whole hub at once (the book's cap).
    pub max_open_requests: usize,
    /// Largest `task_request` envelope body.
    pub max_request_bytes: usize,
    /// Roster names besides a task's delegator that may answer its requests.
    pub approvers: Vec<String>,
}

impl Default for ApprovalSettings {
    fn default() -> ApprovalSettings {
        ApprovalSettings {
            permission_timeout_secs: DEFAULT_PERMISSION_TIMEOUT_SECS,
            permission_fallback: PermissionFallback::default(),
            max_open_requests_per_task: DEFAULT_MAX_OPEN_REQUESTS_PER_TASK,
            // Both fit: far below usize::MAX.
            max_open_requests: DEFAULT_MAX_OPEN_REQUESTS as usize,
            max_request_bytes: DEFAULT_MAX_REQUEST_BYTES as usize,
            approvers: Vec::new(),
        }
    }
}

impl TasksConfig {
    /// The policy for tasks on `agent` (a manifest name).
    pub fn permission_for(&self, agent: &str) -> PermissionPolicy {
        self.agent_permission
            .get(agent)
            .copied()
            .unwrap_or(self.permission)
    }

    /// `timeout_secs` in milliseconds, as `acp::SessionConfig::task_timeout_ms` takes it.
    pub fn timeout_ms(&self) -> u64 {
        // Exact: timeout_secs is at most a week.
        self.timeout_secs * 1000
    }
}

/// `tasks.sandbox`: what the operator asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SandboxMode {
    /// The strongest that works here: bubblewrap, else Landlock; neither is a startup error.
    #[default]
    Auto,
    Bwrap,
    Landlock,
    /// No sandbox: agents run as the hub's user with everything it can read.
    None,
}

impl SandboxMode {
    pub const TAGS: &'static [&'static str] = &["auto", "bwrap", "landlock", "none"];

    pub fn from_tag(tag: &str) -> Option<SandboxMode> {
        Some(match tag {
            "auto" => SandboxMode::Auto,
            "bwrap" => SandboxMode::Bwrap,
            "landlock" => SandboxMode::Landlock,
            "none" => SandboxMode::None,
            _ => return None,
        })
    }

    pub fn tag(self) -> &'static str {
        match self {
            SandboxMode::Auto => "auto",
            SandboxMode::Bwrap => "bwrap",
            SandboxMode::Landlock => "landlock",
            SandboxMode::None => "none",
        }
    }
}

/// What the book is told at construction: the `[tasks]` limits it enforces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BookConfig {
    pub max_concurrent: usize,
    pub queue_max: usize,
    /// Tasks one delegator may hold queued or running (`tasks.max_per_delegator`); a relay
    /// peer's tasks all count as that peer's.
    pub max_per_delegator: usize,
    /// The default and the upper bound of a task's `timeoutSecs`.
    pub timeout_secs: u64,
    pub prompt_max_bytes: usize,
    /// Canonical roots (as `TasksConfig::cwd_roots` are).
    pub cwd_roots: Vec<PathBuf>,
    pub min_progress_secs: u64,
    pub outcome_text_max_bytes: usize,
    pub history_max: usize,
    /// Names a task identity may mail besides its delegator.
    pub may_mail: Vec<String>,
    /// Worker side: seconds between `task_status` messages to a delegating peer.
    pub peer_status_secs: u64,
    /// The operator's bound for every agent (`tasks.permission`) and per agent
    /// (`tasks.agent_permission`): a delegation may narrow it, never widen it (issue 37
    /// design §1).
    pub permission: PermissionPolicy,
    pub agent_permission: BTreeMap<String, PermissionPolicy>,
    /// How held requests are bounded and answered (`tasks::approvals`, design §8).
    pub approvals: ApprovalSettings,
    /// Follow-up turns (`tasks::turns`, issue 38 design §6).
    pub follow_ups: super::turns::FollowUpSettings,
    /// The floors of `delegate --peer auto` (`tasks::placement`, issue 38 design §4).
    pub placement: crate::tasks::placement::Floors,
}

impl BookConfig {
    /// The operator's bound for tasks on `agent` (a manifest name).
    pub fn bound_for(&self, agent: &str) -> PermissionPolicy {
        self.agent_permission
            .get(agent)
            .copied()
            .unwrap_or(self.permission)
    }
}

impl From<&TasksConfig> for BookConfig {
    fn from(t: &TasksConfig) -> BookConfig {
        BookConfig {
            max_concurrent: t.max_concurrent,
            queue_max: t.queue_max,
            max_per_delegator: t.max_per_delegator,
            timeout_secs: t.timeout_secs,
            prompt_max_bytes: t.prompt_max_bytes,
            cwd_roots: t.cwd_roots.clone(),
            min_progress_secs: t.min_progress_secs,
            outcome_text_max_bytes: t.outcome_text_max_bytes,
            history_max: t.history_max,
            may_mail: t.may_mail.clone(),
            peer_status_secs: t.peer_status_secs,
            permission: t.permission,
            agent_permission: t.agent_permission.clone(),
            approvals: t.approvals.clone(),
            follow_ups: t.follow_ups,
            placement: t.placement,
        }
    }
}
