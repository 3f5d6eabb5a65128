//! `agent-hub top` (alias `watch`): the operator's live view of a hub (docs/operations.md
//! "Watching a hub"). Every agent's liveness state, queue depth, parked awaits and their
//! filters, the last envelopes' metadata, unfinished tasks and relay links, refreshed about
//! once a second, with keys to sort and to quit; plain lines, one snapshot per interval, when
//! stdout is not a terminal (or with `--once`).
//!
//! One refresh is one connection with one `activity` verb (SPEC §14.1), `who` from a hub
//! without it, plus a read of the relay's status file with `--config`. The rooms:
//! `snapshot` (the view's tolerant reading of what a refresh saw, and who looks stuck),
//! `render` (a snapshot to lines; pure), `keys` (bytes to actions; pure), `answer` (picking
//! a task's request and one of its options, issue 37; pure), `usage` (the tasks' tokens and
//! cost per delegator and per agent, issue 38; pure), `term` (raw mode, alternate
//! screen, restore on every exit) and `run` (the thin loop that fetches, draws, sends an
//! answer and waits).

pub mod answer;
pub mod keys;
pub mod render;
mod run;
pub mod snapshot;
mod term;
pub mod usage;

pub use run::{run, Options, TopError};
