//! `agent-hub-server reload --config PATH`: has the hub running from that config read its
//! roster and its agent manifests again (SIGHUP) and prints what the hub said about each
//! (docs/operations.md "Reloading agent manifests"; issue 35).
//!
//! Owns the command's report and its outcome; finding and signalling the hub is
//! `running`'s, and what a reload does is the hub's (`event_loop::roster_reload`,
//! `event_loop::manifests`). Exit 1 when no hub runs from the config, when the hub refused
//! either reload (it then keeps what it had), or when it said nothing within
//! `running::RELOAD_WAIT`. A manifest the hub skipped is printed as a warning, not a failure:
//! the others were loaded, as `agent-hub agents` reports the same file.

use super::running::{self, is_roster_line, ReloadError};
use super::say;
use crate::event_loop::manifests::{RELOADED, RELOAD_REFUSED};
use agent_hub_host::config::{Config, ConfigError};
use std::fmt;
use std::path::{Path, PathBuf};

/// Why `reload` did not end with both reloads in force.
#[derive(Debug)]
pub enum ReloadCommandError {
    /// The config cannot be read, or the hub would refuse it.
    Config(ConfigError),
    /// No hub of this user runs from the config.
    NoHub(PathBuf),
    Signal(ReloadError),
    /// The hub refused a reload; `says` is its service-log line's text.
    Refused {
        pid: u32,
        says: String,
    },
    /// The hub wrote nothing about `what` within `RELOAD_WAIT`.
    Silent {
        pid: u32,
        what: &'static str,
        service_log: PathBuf,
    },
}

impl fmt::Display for ReloadCommandError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReloadCommandError::Config(e) => write!(f, "{e}"),
            ReloadCommandError::NoHub(config) => write!(
                f,
                "no running hub found for {}; a hub started from it reads the roster and the agent manifests then. A hub running elsewhere reloads with: kill -HUP <pid of agent-hub-server>",
                config.display()
            ),
            ReloadCommandError::Signal(e) => write!(f, "{e}"),
            ReloadCommandError::Refused { pid, says } => {
                write!(f, "the hub (pid {pid}) says: {says}")
            }
            ReloadCommandError::Silent {
                pid,
                what,
                service_log,
            } => write!(
                f,
                "sent SIGHUP to the hub (pid {pid}); it logged nothing about its {what} within {} s: check {}",
                running::RELOAD_WAIT.as_secs(),
                service_log.display()
            ),
        }
    }
}

impl std::error::Error for ReloadCommandError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ReloadCommandError::Config(e) => Some(e),
            ReloadCommandError::Signal(e) => Some(e),
            _ => None,
        }
    }
}

/// A line about the manifests reload: its summary (reloaded or refused).
fn is_manifests_line(line: &str) -> bool {
    line.contains(RELOADED) || line.contains(RELOAD_REFUSED)
}

/// A line the manifests reload writes before its summary: a skipped file, a kept agent.
fn is_manifest_warning(line: &str) -> bool {
    line.contains(" WARN agent manifest skipped: ")
        || (line.contains(" WARN agent ") && line.contains(" keeps the manifest it had: "))
}

/// `<ts> <LEVEL> <text>`: the text is the hub's own words.
fn text_of(line: &str) -> &str {
    line.splitn(3, ' ').nth(2).unwrap_or(line)
}

/// The whole command. Prints each of the hub's lines about the reload, in order.
pub fn reload_command(config: &Path) -> Result<(), ReloadCommandError> {
    let cfg = Config::load(config).map_err(ReloadCommandError::Config)?;
    let service_log = cfg.service_log_path.clone();
    let pid = *running::hubs_for(config, Some(&service_log))
        .first()
        .ok_or_else(|| ReloadCommandError::NoHub(config.to_owned()))?;
    // Only a hub with `[tasks]` holds a catalogue and says anything about it.
    let manifests = cfg.tasks.is_some();
    let lines = running::signal_and_wait(pid, &service_log, |lines| {
        lines.iter().any(|l| is_roster_line(l))
            && (!manifests || lines.iter().any(|l| is_manifests_line(l)))
    })
    .map_err(ReloadCommandError::Signal)?;
    let silent = |what| ReloadCommandError::Silent {
        pid,
        what,
        service_log: service_log.clone(),
    };
    let roster = lines
        .iter()
        .find(|l| is_roster_line(l))
        .ok_or_else(|| silent("roster"))?;
    if running::refused(roster) {
        return Err(ReloadCommandError::Refused {
            pid,
            says: text_of(roster).to_owned(),
        });
    }
    say(format_args!(
        "the hub (pid {pid}) says: {}",
        text_of(roster)
    ));
    if !manifests {
        say(format_args!(
            "the hub has no [tasks] table: it runs no agent, so it holds no agent manifests to reload"
        ));
        return Ok(());
    }
    let summary = lines
        .iter()
        .position(|l| is_manifests_line(l))
        .ok_or_else(|| silent("agent manifests"))?;
    for l in lines[..summary].iter().filter(|l| is_manifest_warning(l)) {
        eprintln!("agent-hub-server: warning: {}", text_of(l));
    }
    let line = &lines[summary];
    if line.contains(RELOAD_REFUSED) {
        return Err(ReloadCommandError::Refused {
            pid,
            says: text_of(line).to_owned(),
        });
    }
    say(format_args!("the hub (pid {pid}) says: {}", text_of(line)));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hubs_lines_are_told_apart() {
        let ts = "2026-12-05T10:00:00.000Z";
        assert!(is_manifests_line(&format!(
            "{ts} INFO agent manifests reloaded: 1 runnable agents (fake); unchanged"
        )));
        assert!(is_manifests_line(&format!(
            "{ts} ERROR agent manifests reload refused, keeping the 6 agents in force (1 runnable): x"
        )));
        assert!(is_manifest_warning(&format!(
            "{ts} WARN agent manifest skipped: /m/x.toml: bad"
        )));
        assert!(is_manifest_warning(&format!(
            "{ts} WARN agent \"w\" keeps the manifest it had: /m/w.toml no longer loads (fix or remove it)"
        )));
        assert!(!is_manifest_warning(&format!(
            "{ts} INFO agent manifests reloaded: 0 runnable agents (); unchanged"
        )));
        assert!(is_roster_line(&format!(
            "{ts} INFO roster reloaded: 2 agents; unchanged"
        )));
        assert_eq!(
            text_of(&format!("{ts} INFO roster reloaded: 2 agents; unchanged")),
            "roster reloaded: 2 agents; unchanged"
        );
    }
}
