//! The `agents` capability list (000 seed §6.6; docs/relay-protocol.md §5 "Agent cards"),
//! computed off the event loop: one card per agent manifest with a program on this machine's
//! PATH — its name, its binary's `--version` line, whether `run.acp` / `run.headless` can run.
//!
//! Owns the prober thread: it computes the list at startup and again every `REFRESH` (running
//! `<binary> --version`, which may take seconds, is why it is a thread: the loop never runs a
//! binary), and hands each result over a channel that the loop drains in `handle_timeout`.
//! The catalogue is `agent-hub agents`' (built-ins, `~/.agent-hub/agents/`) plus an optional
//! extra folder. Refuses: what the cards mean on the wire (`relay::cards`).

use agent_hub_host::agents::{probe, registry::Registry};
use agent_hub_proto::relay::message::AgentCard;
use std::path::PathBuf;
use std::sync::mpsc;
use std::time::Duration;

/// How often the list is computed again: agents are installed rarely, and each round runs
/// every installed binary's `--version`.
pub const REFRESH: Duration = Duration::from_secs(600);

/// Where the prober looks.
#[derive(Debug, Clone)]
pub struct CardSource {
    /// `$HOME`: the user's manifests folder is `~/.agent-hub/agents/` (or
    /// `$AGENT_HUB_AGENTS_DIR`, as the task runner reads it). None: built-ins only.
    pub home: Option<PathBuf>,
    /// `$AGENT_HUB_AGENTS_DIR`, when set.
    pub agents_dir_env: Option<std::ffi::OsString>,
    pub path_var: String,
    /// A further manifests folder (the server's `tasks.manifests_dir`).
    pub extra_dir: Option<PathBuf>,
}

impl CardSource {
    /// The server process's own `$HOME` and `$PATH`.
    pub fn from_process(extra_dir: Option<PathBuf>) -> CardSource {
        CardSource {
            home: std::env::var_os("HOME")
                .map(PathBuf::from)
                .filter(|h| h.is_absolute()),
            agents_dir_env: std::env::var_os(agent_hub_host::agents::registry::AGENTS_DIR_ENV),
            path_var: std::env::var("PATH").unwrap_or_default(),
            extra_dir,
        }
    }
}

/// The cards for `src`, in the catalogue's order. Runs each installed binary's `--version`
/// (bounded by `probe::VERSION_TIMEOUT`): call it off the loop.
pub fn compute(src: &CardSource) -> Vec<AgentCard> {
    let reg = match &src.home {
        Some(home) => Registry::load_with_extra(
            &agent_hub_host::agents::registry::user_dir(home, src.agents_dir_env.clone()),
            false,
            src.extra_dir.as_deref(),
        ),
        None => Registry::builtin(),
    };
    reg.manifests()
        .map(|m| probe::probe(m, String::new(), &src.path_var, true))
        .filter(|i| i.installed || i.acp_available || i.headless_available)
        .map(|i| AgentCard {
            name: i.name,
            version: i.version,
            acp: i.acp_available,
            headless: i.headless_available,
            // No manifest says yet how to tell whether a credential is present.
            credential: None,
        })
        .collect()
}

/// The prober thread's far end. Dropping it stops the thread at its next wake-up.
pub(super) struct CardProber {
    rx: mpsc::Receiver<Vec<AgentCard>>,
    _stop: mpsc::Sender<()>,
}

impl CardProber {
    pub(super) fn spawn(src: CardSource) -> std::io::Result<CardProber> {
        let (tx, rx) = mpsc::channel();
        let (stop, stopped) = mpsc::channel::<()>();
        std::thread::Builder::new()
            .name("agent-cards".into())
            .spawn(move || loop {
                if tx.send(compute(&src)).is_err() {
                    return;
                }
                // Sleeps until the refresh, or ends when the relay is gone.
                if !matches!(
                    stopped.recv_timeout(REFRESH),
                    Err(mpsc::RecvTimeoutError::Timeout)
                ) {
                    return;
                }
            })?;
        Ok(CardProber { rx, _stop: stop })
    }

    /// The newest list computed since the last call, if any.
    pub(super) fn latest(&self) -> Option<Vec<AgentCard>> {
        self.rx.try_iter().last()
    }
}
