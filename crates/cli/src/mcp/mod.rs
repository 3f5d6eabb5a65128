//! The hub's MCP server (issue 5 "Reach"; docs/mcp.md): `agent-hub mcp --as NAME --token-file F
//! --port P` speaks MCP (JSON-RPC 2.0, one message per line) on stdio and offers the tools
//! `send`, `await`, `who` and `whoami` over the hub, and for delegated work (issue 11,
//! docs/delegation.md) `delegate`, `task_status`, `tasks`, `cancel` and `task_answer`; run as
//! a task identity (`--as task-…`), also `permission_prompt`, a headless Claude Code's
//! permission prompt tool (issue 37 design §6, `permission`).
//!
//! Owns: `session` (the pure JSON-RPC/MCP state machine: a line in, a reply line or a tool
//! call out), `tools` (the tool list, argument parsing and bounds, also pure) and `serve` (the
//! thin stdio loop that runs tool calls against the hub through `client`). Refuses: reading
//! the token file (the binary does that once, before serving) and printing anything but
//! JSON-RPC lines on stdout.

pub mod permission;
pub mod serve;
pub mod session;
pub mod tools;

pub use serve::{serve, serve_stdio, ServeError};
pub use session::{Session, Step, ToolOutcome};
pub use tools::{AwaitCall, SendCall, StatusCall, ToolCall};
