//! agent-hub: a message hub for AI coding agents (see SPEC-Agent-Comms-Hub.md).
//!
//! Layers, bottom up: `wire` (line types and codecs) → `hub` (the sans-IO core: sessions,
//! routing, deadlines) → `server` (the mio event loop and the files it writes) and `client`
//! (the synchronous CLI side). `config` and `roster` load and validate the operator's files.
//! `deliver` gets mail into agents that are busy in their own loop (stop hooks, plugin drain,
//! terminal nudge). `mcp` offers the client verbs to agents as an MCP server on stdio.
//! `acp` is the pure ACP client session for delegated tasks; `runner` is the IO that runs one on
//! an agent process (docs/acp.md); `headless` reads back an agent run without ACP (its
//! `run.headless` argv) for the same tasks (docs/delegation.md). Under all of them, `kernel`:
//! time as a value, the core's id source, deadlines, the keyed hash, the one rule for each
//! kind of name and the one sanitiser for strings shown to a person; it imports nothing from
//! the rest of the crate.

pub mod acp;
pub mod admin;
pub mod agents;
pub mod atomic_file;
pub mod client;
pub mod config;
pub mod deliver;
pub mod headless;
pub mod hub;
pub mod kernel;
pub mod mcp;
pub mod relay;
pub mod relay_status;
pub mod roster;
pub mod roster_edit;
pub mod runner;
pub mod sandbox;
pub mod server;
pub mod store;
pub mod tasks;
pub mod wire;

// The kernel's modules under the names the crate has always used for them.
pub use kernel::{deadline, names, text};

/// The software version, reported by `--version` and in logs.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
