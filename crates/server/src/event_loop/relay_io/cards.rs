//! The `agents` capability list (000 seed §6.6; docs/relay-protocol.md §5 "Agent cards"),
//! computed off the event loop: one card per agent manifest with a program on this machine's
//! PATH — its name, its binary's `--version` line, whether `run.acp` / `run.headless` can run.
//!
//! Owns what the prober thread computes (`prober` runs it): the list at startup, again every
//! `REFRESH` and when the hub reloads its manifests (SIGHUP, `CardProber::refresh`) (running
//! `<binary> --version`, which may take seconds, is why it is a thread: the loop never runs a
//! binary); each result goes over a channel that the loop drains in `handle_timeout`. The catalogue is read
//! from the folders the task executor reads (`registry::Sources`, with the environment the
//! hub started with). Refuses: what the cards mean on the wire (`relay::cards`).

use super::prober::Prober;
use agent_hub_host::agents::{probe, registry::Sources};
use agent_hub_proto::relay::message::AgentCard;
use std::time::Duration;

/// How often the list is computed again: agents are installed rarely, and each round runs
/// every installed binary's `--version`.
pub const REFRESH: Duration = Duration::from_secs(600);

/// Where the prober looks: the hub's manifests folders and PATH, as read at startup
/// (`environment::AgentEnv`).
#[derive(Debug, Clone)]
pub struct CardSource {
    pub sources: Sources,
    pub path_var: String,
}

/// The cards for `src`, in the catalogue's order. Runs each installed binary's `--version`
/// (bounded by `probe::VERSION_TIMEOUT`): call it off the loop.
pub fn compute(src: &CardSource) -> Vec<AgentCard> {
    let reg = src.sources.load();
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

/// The prober thread's far end (`prober`, the shape it shares with `headroom`). Dropping it
/// stops the thread at its next wake-up; `refresh` asks for a new list now (the manifests were
/// reloaded), which arrives through `latest`.
pub(super) type CardProber = Prober<Vec<AgentCard>>;

impl CardProber {
    pub(super) fn spawn(src: CardSource) -> std::io::Result<CardProber> {
        Prober::start("agent-cards", REFRESH, move || compute(&src))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// A manifests reload has the cards computed again at once, not at the next `REFRESH`.
    #[test]
    fn a_refresh_computes_the_cards_again_from_the_same_folders() {
        let dir = std::env::temp_dir().join(format!("agent-hub-cards-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let prober = CardProber::spawn(CardSource {
            sources: Sources::new(None, None, Some(dir.clone())),
            path_var: "/usr/bin:/bin".into(),
        })
        .unwrap();
        let wait = Duration::from_secs(30);
        let first = prober.rx.recv_timeout(wait).expect("the first list");
        assert!(!first.iter().any(|c| c.name == "shelly"), "{first:?}");
        let file = dir.join("shelly.toml");
        std::fs::write(
            &file,
            "name = \"shelly\"\ndisplay = \"S\"\nbinaries = [\"sh\"]\n[observe]\nsessions = \"none\"\ntranscript = \"none\"\n[run]\nacp = []\nheadless = []\noutcome = \"exit-code\"\n[deliver]\nmode = \"pull\"\n[install]\nmcp_config = \"\"\nhook = \"none\"\nskills_dir = \"\"\n",
        )
        .unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        prober.refresh();
        let second = prober
            .rx
            .recv_timeout(wait)
            .expect("a list after the refresh");
        assert!(second.iter().any(|c| c.name == "shelly"), "{second:?}");
        drop(prober);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
