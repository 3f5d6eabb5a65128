//! The operator's commands of `agent-hub-server` that run beside a hub rather than as one:
//! `roster add|remove|rotate|list` (`roster`), `reload` (`reload`: the roster and the agent
//! manifests read again), `demo`'s set-up (`demo`) and `relay keygen` (`keygen`), with what
//! they share: random tokens and private files (`token`), and finding and signalling the hub
//! that runs from a config (`running`). docs/operations.md, "Changing the roster",
//! "Reloading agent manifests"; README, "Start a working hub"; docs/relay-setup.md.
//!
//! Owns files the operator asked for and the processes it names; refuses everything the hub
//! decides (the roster's meaning is `roster` and `hub::roster_reload`). No token is ever
//! printed or logged here: output names files, never their contents.

pub mod demo;
pub mod keygen;
pub mod reload;
pub mod roster;
pub mod running;
pub mod token;

use std::io::Write;

/// Writes one line to stdout, ignoring failure: a closed stdout (a supervisor that stopped
/// reading) must not stop a command half way, nor a hub started by `demo`.
pub fn say(line: std::fmt::Arguments<'_>) {
    let mut out = std::io::stdout().lock();
    let _ = out
        .write_fmt(line)
        .and_then(|()| out.write_all(b"\n"))
        .and_then(|()| out.flush());
}
