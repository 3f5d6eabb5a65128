//! The headless fallback (docs/delegation.md "Headless tasks"): a delegated task on an agent
//! whose manifest has no usable `run.acp` runs its `run.headless` argv once, with the prompt
//! as one argv element, and the agent's stdout is read back by the manifest's `run.outcome`
//! parser.
//!
//! Owns, all pure: `parse` (one reader per `run.outcome` tag: Claude's JSON result, Codex's
//! JSONL events, Gemini's JSON, OpenCode's JSONL, the exit code alone; bounded and tolerant
//! of garbage), `run` (the state machine of one headless process: the task's deadline, the
//! caller's cancel, TERM then KILL of the group after the grace, waiting for the exit and the
//! end of stdout) and `outcome` (turning the run's ending, the captured stdout and the stderr
//! tail into the task's one `acp::Outcome`). Refuses: processes, pipes, signals, clocks and
//! threads (the runner's `crates/server/src/runner/headless.rs` does those), and the prompt's checks, which
//! are `agents::argv::render`'s.

pub mod outcome;
pub mod parse;
pub mod run;

pub use outcome::{build, Captured};
pub use parse::{parse, Parsed};
pub use run::{Cause, Ending, Event, HeadlessLimits, Run};

/// `tasks.headless_stdout_max_bytes`' default: what a headless agent's stdout may hold before
/// the rest is dropped (the outcome is then `truncated`). Claude's one JSON object carries
/// the final text once; Codex's and OpenCode's event streams carry every item, tool output
/// included, so the cap is generous.
pub const DEFAULT_STDOUT_MAX_BYTES: u64 = 8 << 20;
/// Its upper bound: the ACP session's own line-cap bound (`acp::Limits::MAX.max_line_bytes`).
pub const MAX_STDOUT_MAX_BYTES: u64 = 256 << 20;
