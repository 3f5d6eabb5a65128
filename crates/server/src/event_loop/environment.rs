//! What the hub takes from its process environment (docs/operations.md "Reloading agent
//! manifests", docs/delegation.md "The agent's environment"; issue 36): HOME, PATH,
//! `$AGENT_HUB_AGENTS_DIR`, the variables `tasks.env_pass` chooses from, and where this program
//! lives. `startup` reads them once, before the loop exists, and hands them in: the task
//! executor, the relay's agent cards and every manifests reload use what was read then.
//!
//! Owns those reads and the folders the agent catalogue is read from (`registry::Sources`).
//! Refuses reading the environment anywhere else: nothing else in the loop calls `std::env`,
//! so a variable changed under a running hub takes a restart, as docs/operations.md says.
//! Refuses showing a variable's value: `HubEnv`'s `Debug` names them only (API keys are
//! among them).

use agent_hub_host::agents::registry::{self, Registry, Sources};
use agent_hub_host::agents::runnable::{self, Delegate};
use std::ffi::OsString;
use std::path::PathBuf;

/// What the agent catalogue takes from the hub's environment, read once at startup and
/// handed in; the same folders are read again on SIGHUP.
#[derive(Debug, Clone)]
pub struct AgentEnv {
    /// `$HOME` as found (empty when unset): the sandbox's view of the user's files.
    pub home: PathBuf,
    /// `$PATH`: where an agent's program is looked for (`runnable`).
    pub path_var: String,
    /// The manifests folders: the user's and the config's `tasks.manifests_dir`.
    pub sources: Sources,
}

impl Default for AgentEnv {
    /// No environment: the built-ins only, and no program found.
    fn default() -> AgentEnv {
        AgentEnv {
            home: PathBuf::new(),
            path_var: String::new(),
            sources: Sources::new(None, None, None),
        }
    }
}

impl AgentEnv {
    /// Reads `$HOME`, `$PATH` and `$AGENT_HUB_AGENTS_DIR` of this process; `manifests_dir`
    /// is the config's `tasks.manifests_dir`.
    pub fn from_process(manifests_dir: Option<PathBuf>) -> AgentEnv {
        let home = std::env::var_os("HOME")
            .map(PathBuf::from)
            .unwrap_or_default();
        let sources = Sources::new(
            Some(&home),
            std::env::var_os(registry::AGENTS_DIR_ENV),
            manifests_dir,
        );
        AgentEnv {
            home,
            path_var: std::env::var("PATH").unwrap_or_default(),
            sources,
        }
    }

    /// The names of `reg` that can take delegated work on this PATH, in its order.
    pub fn runnable(&self, reg: &Registry) -> Vec<String> {
        runnable::list(reg, &self.path_var)
            .into_iter()
            .filter(|(_, d)| *d != Delegate::No)
            .map(|(name, _)| name)
            .collect()
    }
}

impl AgentEnv {
    /// What each agent of `reg` reports of its usage when it runs on this PATH (issue 38
    /// design §1).
    pub fn reports(&self, reg: &Registry) -> Vec<(String, agent_hub_proto::acp::Reports)> {
        runnable::reports(reg, &self.path_var)
    }
}

/// Everything the hub takes from its process, read once at startup (`startup::start`) and
/// handed to the loop; the task executor's part (`vars`, `exe`) is not kept after delegation
/// is turned on (`Server::start_tasks`).
pub struct HubEnv {
    /// What the agent catalogue takes from the environment.
    pub agents: AgentEnv,
    /// The process's variables, which `tasks.env_pass` chooses the agents' environment from.
    pub vars: Vec<(OsString, OsString)>,
    /// This program (`current_exe`): hidden from every task by the sandbox, and the folder
    /// the client binary is looked for in. None when the OS cannot say.
    pub exe: Option<PathBuf>,
}

impl std::fmt::Debug for HubEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<_> = self.vars.iter().map(|(k, _)| k).collect();
        f.debug_struct("HubEnv")
            .field("agents", &self.agents)
            .field("vars", &names)
            .field("exe", &self.exe)
            .finish()
    }
}

impl HubEnv {
    /// Reads this process's environment; `manifests_dir` is the config's
    /// `tasks.manifests_dir`.
    pub fn from_process(manifests_dir: Option<PathBuf>) -> HubEnv {
        HubEnv {
            agents: AgentEnv::from_process(manifests_dir),
            vars: std::env::vars_os().collect(),
            exe: std::env::current_exe().ok(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_environment_shows_its_names_never_its_values() {
        let env = HubEnv {
            agents: AgentEnv::default(),
            vars: vec![("ANTHROPIC_API_KEY".into(), "sk-VALUE".into())],
            exe: None,
        };
        let shown = format!("{env:?}");
        assert!(shown.contains("ANTHROPIC_API_KEY"), "{shown}");
        assert!(!shown.contains("sk-VALUE"), "{shown}");
    }
}
