//! The ACP runner (issue 11; docs/acp.md "The runner"): the IO around one `acp::Session`.
//! One task = one agent process = one session = one driver thread.
//!
//! Owns: spawning the agent from an argv (never a shell) with the task's cwd and an
//! environment the caller gives in full, in its own process group; the pipes (a stdout line
//! reader with the session's hard line cap, a stdin writer thread, a bounded stderr tail);
//! carrying out the session's events (closing stdin, TERM then KILL to the whole group);
//! reaping the child; and handing the owner every event plus exactly one final outcome over
//! a channel, with a wake callback after each send (`handle`). `credential` holds a task's
//! token file for its lifetime. Refuses: deciding anything the session decides (deadlines,
//! answers, outcomes are all `acp::Session`'s), resolving argv[0] or checking the cwd's root
//! (the caller's, see `config::tasks::check_cwd`), putting a token on an argv or in a log.
//! There is no async runtime: threads and blocking pipes, each bounded (docs/acp.md).
//! `headless` is the same for an agent run headless (docs/delegation.md "Headless tasks"):
//! one argv, no protocol, its capped stdout read back by `agent_hub_proto::headless`.

mod control;
mod credential;
mod driver;
mod handle;
mod headless;
mod outbox;
mod pipes;
mod process;

pub use credential::{CredentialError, TaskCredential};
pub use handle::{start, start_headless, TaskHandle};
pub use headless::HeadlessSpec;
pub use outbox::not_started;

use agent_hub_proto::acp::SessionConfig;
use std::ffi::OsString;

/// Lines read from the agent's stdout and waiting for the driver. The reader blocks when the
/// queue is full, so at most `INPUT_QUEUE + 1` lines of at most `max_line_bytes` each are
/// held hub-side per task.
pub const INPUT_QUEUE: usize = 4;
/// Bytes queued for the agent's stdin and not yet written. A line is always queued when
/// nothing is pending (so a large prompt passes); past this bound the agent is taken to have
/// stopped reading its stdin and its process group is killed.
pub const STDIN_BACKLOG_MAX_BYTES: usize = 4 << 20;
/// The tail of the agent's stderr kept for `TaskEnd`: bytes scanned, lines kept.
pub const STDERR_TAIL_BYTES: usize = 8 << 10;
pub const STDERR_TAIL_LINES: usize = 20;

/// Everything one task run needs. The caller has already resolved `argv[0]` to an absolute
/// path (from the agent's manifest, docs/agents.md), checked the cwd against the configured
/// roots, and built the environment: the child gets exactly `env`, nothing inherited.
#[derive(Debug)]
pub struct TaskSpec {
    pub argv: Vec<OsString>,
    pub env: Vec<(OsString, OsString)>,
    /// The session: its `cwd` is also the process's working directory.
    pub session: SessionConfig,
    /// Values to redact from the stderr excerpt besides the MCP servers' env values (which
    /// the session redacts everywhere): API keys in `env`, a token.
    pub secrets: Vec<String>,
    /// Removed when the task ends (before `TaskEvent::Ended` is sent).
    pub credential: Option<TaskCredential>,
    /// The OS sandbox the agent runs in (`sandbox::prepare` on the driver thread, just
    /// before the spawn); None runs it as the hub's user with nothing hidden.
    pub sandbox: Option<agent_hub_host::sandbox::TaskSandbox>,
}

/// What a run reports to its owner: the task book's vocabulary (`tasks::event`), which the
/// runner produces and the book consumes.
pub use agent_hub_proto::tasks::{TaskEnd, TaskEvent};
