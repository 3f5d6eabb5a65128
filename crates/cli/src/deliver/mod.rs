//! Delivery into running agents (docs/delivery.md, issue 5 "Deliver"): getting hub mail in front
//! of a model that is busy in its own loop, without ever breaking that loop.
//!
//! Modes, fastest and safest first:
//! - **stop hook** (`agent-hub hook stop`): Claude Code and Codex `Stop`, Gemini CLI
//!   `AfterAgent`. At the end of a turn the hook takes the identity's waiting mail without
//!   blocking and answers `{"decision":"block","reason":…}`, so the agent continues with the
//!   mail as its next input.
//! - **plugin event** (`agent-hub drain`): an agent's plugin (OpenCode,
//!   `integrations/opencode/agent-hub.js`) runs drain when a session goes idle and prompts the
//!   session with what it prints.
//! - **turn reports** (`agent-hub hook turn-start|turn-end|session-end`, `deliver::turn`):
//!   not delivery but liveness (SPEC §14): the hooks tell the hub when a turn starts and
//!   ends, so `who` can say busy, idle or gone.
//! - **terminal** (`agent-hub nudge`): types a short notice into a tmux pane. Opt-in and the
//!   least safe: it types into a live prompt.
//!
//! Mail is consumed only once handed over: envelopes are taken in ack mode (SPEC §12.2), the
//! output is written and flushed, and only then acked; if the output fails nothing is acked
//! and the hub delivers the same envelopes again.
//!
//! Layout: the pure parts (`hook_input`, `render`, `policy`, `terminal`) decide; `state` and
//! `run` do the IO (files, the hub, stdout, tmux). See docs/delivery.md.

pub mod hook_input;
pub mod policy;
pub mod render;
pub mod run;
pub mod state;
pub mod terminal;
pub mod turn;

/// Envelopes taken per hook or drain run at most: a turn should not drown in mail, and what
/// is left stays queued for the next stop.
pub const DEFAULT_MAX_MESSAGES: usize = 20;
/// Rendered bytes per hook or drain run (the text the model reads), about 16k tokens. The
/// first message is always shown; one whose body alone is larger is cut there and saved whole
/// to a file the model can read.
pub const DEFAULT_MAX_BYTES: usize = 64 * 1024;
/// Consecutive blocks of one session (`stop_hook_active` chains) before the hook lets the
/// agent stop anyway; the mail waits for the next stop. Bounds agent-to-agent ping-pong.
pub const DEFAULT_MAX_BLOCKS: u32 = 5;
