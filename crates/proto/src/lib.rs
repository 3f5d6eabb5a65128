//! agent-hub-proto: every decision of agent-hub that can be made without IO (PLAN.md §14 "The
//! floors", quinn-proto's rule). Nothing here opens a socket or a file, reads a clock or an OS
//! random source, or starts a thread: time and randomness are passed in (clippy.toml holds the
//! line inside the pure modules; this crate's manifest names no mio, rusqlite, libc or clap).
//!
//! Bottom up: `kernel` (time as a value, the id source, deadlines, the keyed hash, one rule for
//! each kind of name, the sanitiser for strings shown to a person; it imports nothing else) →
//! `wire` (the client line types and codecs, SPEC §4) → `roster` (the roster file's pure parse)
//! → `relay` (hub-to-hub handshakes, frames and sessions, docs/relay-protocol.md), `acp` (the
//! ACP client session for a delegated task, docs/acp.md) and `headless` (reading back an agent
//! run without ACP) → `tasks` (the task book, docs/delegation.md) → `hub` (the core: sessions,
//! routing, deadlines, what it asks the store to keep). An import never runs up this list.

// The sans-IO line (clippy.toml), for the whole crate: no sockets, files, processes, threads,
// clock or OS randomness. The one clock read, the tests' virtual-clock origin
// (`kernel::deadline::test_origin`), is allowed where it stands.
#![deny(clippy::disallowed_methods, clippy::disallowed_types)]

pub mod acp;
pub mod headless;
pub mod hub;
pub mod kernel;
pub mod relay;
pub mod roster;
pub mod tasks;
pub mod wire;

// The kernel's modules under the names the code has always used for them.

/// The software version, reported by `--version`, in logs and to peers. Every crate of the
/// workspace has this one version (`[workspace.package]`).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
