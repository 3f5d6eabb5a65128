//! The agent catalogue of a running hub (docs/delegation.md "Which agents can take delegated
//! work", docs/operations.md "Reloading agent manifests"; issue 35): reading it again on
//! SIGHUP, from the folders and PATH the hub started with (`environment::AgentEnv`, read once
//! at startup and handed in).
//!
//! Owns the IO of a reload: reading the same folders as at startup (`registry::Sources`, the
//! rule `agent-hub agents --config` uses too), finding which agents can run on this PATH, and
//! the service-log lines. What a reload that finds something wrong keeps is decided in
//! `agents::reload`; which delegations are accepted is the core's (`Hub::set_task_agents`).
//! Refuses touching running tasks: each took its argv when it started and keeps it; the new
//! catalogue reaches only tasks that start after it. Refuses reading the environment again:
//! HOME, `$AGENT_HUB_AGENTS_DIR` and PATH are what the hub started with.

use super::Server;
use std::sync::Arc;

/// The start of the INFO line of a reload that took effect, and of the ERROR line of one
/// refused (`admin::running` waits for one of them).
pub const RELOADED: &str = "agent manifests reloaded";
pub const RELOAD_REFUSED: &str = "agent manifests reload refused";

impl Server {
    /// SIGHUP: reads the manifests folders again and puts the result in force for every
    /// delegation and task start from now on (`agents::reload` says what a bad manifest or
    /// folder keeps). One INFO line names what changed; a refused reload is one ERROR line
    /// and changes nothing. Without `[tasks]` only the relay's agent cards are refreshed.
    /// The folders are read on the loop thread, as the roster is on the same signal: a few
    /// small files, at an operator's rate.
    pub(super) fn reload_manifests(&mut self) {
        if self.lifecycle.shutting_down {
            if self.tasks.catalogue.is_none() {
                return;
            }
            self.records.log(
                "INFO",
                "SIGHUP during shutdown: the agent manifests are not reloaded",
            );
            return;
        }
        self.relay.refresh_agent_cards();
        let tasks = &mut self.tasks;
        let (Some(current), Some(executor)) = (tasks.catalogue.clone(), tasks.executor.as_mut())
        else {
            return;
        };
        let fresh = tasks.agent_env.sources.load();
        match agent_hub_host::agents::reload::reload(&current, fresh) {
            Err(refused) => {
                let why: Vec<String> = refused.folders.iter().map(|p| p.to_string()).collect();
                let line = format!(
                    "{RELOAD_REFUSED}, keeping the {} agents in force ({} runnable): {}",
                    current.agents.len(),
                    tasks.agent_env.runnable(&current).len(),
                    why.join("; ")
                );
                self.records.log("ERROR", &line);
            }
            Ok((reg, changes)) => {
                for p in &reg.problems {
                    self.records
                        .log("WARN", &format!("agent manifest skipped: {p}"));
                }
                for (name, file) in &changes.kept {
                    self.records.log(
                        "WARN",
                        &format!(
                            "agent {name:?} keeps the manifest it had: {} no longer loads (fix or remove it)",
                            file.display()
                        ),
                    );
                }
                let runnable = tasks.agent_env.runnable(&reg);
                let reg = Arc::new(reg);
                executor.set_resolver(Box::new(super::executor::Catalogue {
                    reg: Arc::clone(&reg),
                    path_var: tasks.agent_env.path_var.clone(),
                }));
                self.hub.set_task_agents(runnable.clone());
                self.hub.set_task_reports(tasks.agent_env.reports(&reg));
                tasks.catalogue = Some(reg);
                self.records.log("INFO", &reload_line(&runnable, &changes));
            }
        }
        self.records.flush_service();
    }
}

/// `agent manifests reloaded: N runnable agents (a, b); added ["c"]; removed ["d"]; changed
/// ["e"]; kept ["f"]`, or `…; unchanged`. Names only (a manifest name is `[a-z0-9_-]`),
/// never a manifest's content.
fn reload_line(runnable: &[String], changes: &agent_hub_host::agents::reload::Changes) -> String {
    let head = format!(
        "{RELOADED}: {} runnable agents ({})",
        runnable.len(),
        runnable.join(", ")
    );
    if changes.is_empty() {
        return format!("{head}; unchanged");
    }
    let kept: Vec<&str> = changes.kept.iter().map(|(n, _)| n.as_str()).collect();
    format!(
        "{head}; added {:?}; removed {:?}; changed {:?}; kept {kept:?}",
        changes.added, changes.removed, changes.changed
    )
}
