//! agent-hub-cli: the client side of agent-hub (PLAN.md §14 "The floors"). It never imports the
//! server crate: the wire types, names and the relay status file it shares with the server
//! live in agent-hub-proto and agent-hub-host.
//!
//! `client` is the synchronous client, one short-lived connection per verb (SPEC §12), and the
//! live view `top`; `deliver` gets mail into agents busy in their own loop (stop hooks, plugin
//! drain, terminal nudge; docs/delivery.md); `mcp` offers the client verbs to agents as an MCP
//! server on stdio (docs/mcp.md).

pub mod app;
pub mod client;
pub mod deliver;
pub mod mcp;
