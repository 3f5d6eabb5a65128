//! agent-hub-server's library: the IO around the protocol crate's core (PLAN.md §14 "The
//! floors"). It is the only crate with mio and rusqlite, and it never imports the client crate.
//!
//! `event_loop` is the single-threaded mio event loop and the files it writes (audit log,
//! service log, relay links; SPEC §3, PLAN.md §1); `startup` reads the config, the files and
//! the environment once and builds the loop (SPEC §7); `store` keeps accepted envelopes and tasks in SQLite
//! (docs/durability.md); `runner` starts a delegated agent and drives it over ACP or headless
//! (docs/acp.md, docs/delegation.md); `admin` is the operator's commands (roster, tokens, the
//! demo hub).

pub mod admin;
pub mod app;
pub mod event_loop;
pub mod runner;
pub mod startup;
pub mod store;
