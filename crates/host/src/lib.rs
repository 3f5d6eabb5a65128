//! agent-hub-host: agent-hub on this machine, used by both binaries (PLAN.md §14 "The floors").
//! It reads and writes the operator's files, searches PATH, reads /proc and prepares the OS
//! sandbox; every decision it feeds stays in agent-hub-proto, which is the only crate it
//! imports.
//!
//! `config` loads config.toml into the protocol crate's settings (docs/config.md); `agents` is
//! the agent manifests, their registry, probing, install and the `agent-hub agents` command
//! (docs/agents.md); `sandbox` confines delegated agents (docs/delegation.md "Task identity");
//! `roster_edit` rewrites the roster file; `atomic_file` writes a file whole or not at all;
//! `relay_status` is the relay status file the server writes and `relay peers`/`top` read;
//! `token_file` reads and writes the roster's token files (SPEC §6.4).

pub mod agents;
pub mod atomic_file;
pub mod config;
pub mod relay_status;
pub mod roster_edit;
pub mod sandbox;
pub mod token_file;
