//! The operator's commands of `agent-hub-server` that run beside a hub rather than as one:
//! `roster add|remove|rotate|list` (`roster`), `reload` (`reload`: the roster and the agent
//! manifests read again), `demo`'s set-up (`demo`) and `relay keygen` (`keygen`), with what
//! they share: random tokens and private files (`token`), finding and signalling the hub that
//! runs from a config (`running`), and naming a program in the commands they print for a
//! person to run (`program_word`). docs/operations.md, "Changing the roster", "Reloading
//! agent manifests"; README, "Start a working hub"; docs/relay-setup.md.
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
use std::path::Path;

/// Writes one line to stdout, ignoring failure: a closed stdout (a supervisor that stopped
/// reading) must not stop a command half way, nor a hub started by `demo`.
pub fn say(line: std::fmt::Arguments<'_>) {
    let mut out = std::io::stdout().lock();
    let _ = out
        .write_fmt(line)
        .and_then(|()| out.write_all(b"\n"))
        .and_then(|()| out.flush());
}

/// How a printed command names `name`, a program beside this one: bare when the shell
/// finds that very file under that name on PATH (after `cargo install --path .`, or with
/// `target/release` on PATH), else by its absolute path, so every command runs as printed
/// (issue 35). The second value says whether it is on PATH.
pub fn program_word(name: &str) -> (String, bool) {
    let Some(beside) = std::env::current_exe()
        .ok()
        .map(|me| me.with_file_name(name))
        .filter(|p| p.is_file())
    else {
        // Nothing beside this binary to point at: the bare name is the best guess.
        return (name.to_owned(), false);
    };
    let path_var = std::env::var("PATH").unwrap_or_default();
    let found = agent_hub_host::agents::on_path::which(name, &path_var);
    if found.is_some_and(|f| same_file(&f, &beside)) {
        (name.to_owned(), true)
    } else {
        (
            agent_hub_host::agents::argv::shell_word(&beside.to_string_lossy()),
            false,
        )
    }
}

/// Whether two paths name one file (symlinks followed).
fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
        _ => false,
    }
}
