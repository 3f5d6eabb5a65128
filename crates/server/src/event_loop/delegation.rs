//! Delegated work as the loop holds it (docs/delegation.md "How a task runs"; part of the IO
//! shell, `event_loop/mod.rs`): turning delegation on at startup (the sandbox found by trying
//! it, the stored tasks loaded, the book and the executor built from what `startup` read
//! once), the core's task outputs carried to the executor, the runners' events back to the
//! core, and an orphan agent killed only if it still carries its task's mark.
//!
//! `Delegation` owns the executor, the agent catalogue in force and the environment it is read
//! with; SIGHUP's reload swaps the catalogue (`manifests`). Refuses: deciding anything about a
//! task (the core's `tasks`), and building a run (`executor`).

use super::environment::{AgentEnv, HubEnv};
use super::executor::{pass_env, Catalogue, Executor, Runtime, DEFAULT_ENV_PASS, TASK_MARK};
use super::records::Records;
use super::{read_clock, Server};
use crate::runner;
use agent_hub_host::agents::registry::Registry;
use agent_hub_proto::hub::Hub;
use agent_hub_proto::kernel::now::Now;
use agent_hub_proto::tasks::StartSpec;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Why delegation could not be turned on at startup (`Server::start_tasks`).
#[derive(Debug)]
pub enum TaskStartError {
    /// The store's task rows could not be read back.
    LoadTasks(crate::store::StoreError),
    /// `tasks.credentials_dir` is not a private folder.
    CredentialsDir(runner::CredentialError),
    /// The configured sandbox does not work here (the probe says why).
    Sandbox(agent_hub_host::sandbox::probe::ProbeError),
    /// `tasks.credentials_dir` (canonical) holds `shared`, which every agent needs.
    CredentialsHoldShared {
        credentials: PathBuf,
        shared: PathBuf,
    },
    /// A name in `tasks.approvers` is not on the roster (issue 37 design §5): the operator
    /// meant someone who cannot log in.
    UnknownApprover(String),
}

impl std::fmt::Display for TaskStartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TaskStartError::LoadTasks(e) => write!(f, "loading stored tasks: {e}"),
            TaskStartError::CredentialsDir(e) => write!(f, "tasks.credentials_dir: {e}"),
            TaskStartError::Sandbox(e) => write!(f, "{e}"),
            TaskStartError::CredentialsHoldShared {
                credentials,
                shared,
            } => write!(
                f,
                "tasks.credentials_dir {} holds {}, which every agent needs: give the task credentials a folder of their own",
                credentials.display(),
                shared.display()
            ),
            TaskStartError::UnknownApprover(name) => write!(
                f,
                "tasks.approvers names {name:?}, which is not on the roster; add it to the roster (agent-hub-server roster add) or take it out of tasks.approvers"
            ),
        }
    }
}

impl std::error::Error for TaskStartError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            TaskStartError::LoadTasks(e) => Some(e),
            TaskStartError::CredentialsDir(e) => Some(e),
            TaskStartError::Sandbox(e) => Some(e),
            TaskStartError::CredentialsHoldShared { .. } | TaskStartError::UnknownApprover(_) => {
                None
            }
        }
    }
}

/// The loop's delegated work: empty until `start_tasks` (only with `[tasks]`).
#[derive(Default)]
pub(super) struct Delegation {
    /// Delegated tasks' executor, when `[tasks]` is configured (`executor`).
    pub(super) executor: Option<Executor>,
    /// What the agent catalogue takes from the environment, read once at startup
    /// (`environment`): the task executor, the relay's agent cards and every reload use it.
    pub(super) agent_env: AgentEnv,
    /// The agent catalogue in force, when `[tasks]` is configured; the executor resolves
    /// through the same one (`manifests` swaps both on SIGHUP).
    pub(super) catalogue: Option<Arc<Registry>>,
    /// Where delegated tasks run (the first of `tasks.cwd_roots`) and how many may run at
    /// once, for claudectl's `headroom` (set by `start_tasks`).
    pub(super) task_dir: Option<PathBuf>,
    pub(super) max_tasks: Option<usize>,
}

impl Delegation {
    /// The core's `StartTask`.
    pub(super) fn start(&mut self, spec: StartSpec, records: &mut Records) {
        match self.executor.as_mut() {
            Some(ex) => ex.start(spec),
            None => records.log("ERROR", "a task start without an executor; ignored"),
        }
    }

    /// The core's `CancelTask`.
    pub(super) fn cancel(&self, task: &str) {
        if let Some(ex) = &self.executor {
            ex.cancel(task);
        }
    }

    /// The core's `PromptTask` (issue 38): a follow-up turn for the task's session. A task
    /// whose runner has ended cannot take it; its `Ended` is on its way to the book.
    pub(super) fn prompt(
        &self,
        task: &str,
        turn: u32,
        text: String,
        interrupt: bool,
        records: &mut Records,
    ) {
        let delivered = self
            .executor
            .as_ref()
            .is_some_and(|ex| ex.prompt(task, turn, text, interrupt));
        if !delivered {
            records.log(
                "INFO",
                &format!("task {task}: turn {turn} dropped: the task's runner has ended or cannot take it"),
            );
        }
    }

    /// The core's `CloseTask`: the kept session closes.
    pub(super) fn close(&self, task: &str) {
        if let Some(ex) = &self.executor {
            ex.close(task);
        }
    }

    /// The core's `AnswerTask`: the decision for a held request goes to the task's runner.
    /// A task no longer running has answered what it held `cancelled` already.
    pub(super) fn answer(
        &self,
        task: &str,
        seq: u32,
        answer: agent_hub_proto::tasks::RequestAnswer,
        records: &mut Records,
    ) {
        let delivered = self
            .executor
            .as_ref()
            .is_some_and(|ex| ex.answer(task, seq, answer));
        if !delivered {
            records.log(
                "INFO",
                &format!("task {task}: answer to request {seq} dropped: the task's runner has ended or cannot take it"),
            );
        }
    }

    /// Runner threads still holding an agent (the stop waits for them).
    pub(super) fn running(&self) -> usize {
        self.executor.as_ref().map_or(0, Executor::running)
    }

    /// The runner threads poked the waker: every event goes to the core, in order.
    fn take_events(&mut self, hub: &mut Hub, now: Now) {
        let Some(ex) = self.executor.as_mut() else {
            return;
        };
        for (task, event) in ex.drain() {
            hub.handle_task_event(&task, event, now);
        }
    }
}

impl Server {
    /// Turns delegation on (`[tasks]`): finds the sandbox agents run in, takes the agent
    /// catalogue and loads the stored tasks, builds the book and the executor. `port` is the
    /// client port the task identities' MCP servers connect to; `config_path` the file the
    /// hub was started with (hidden from every task, with the rest of the hub's files); `env`
    /// and `reg` what startup read from the environment and the manifests folders, once.
    pub fn start_tasks(
        &mut self,
        config: &agent_hub_host::config::Config,
        config_path: &Path,
        port: u16,
        env: &HubEnv,
        reg: Registry,
    ) -> Result<(), TaskStartError> {
        let Some(cfg) = config.tasks.as_ref() else {
            return Ok(());
        };
        let relay = config.relay.as_ref();
        let audit_log = config.audit_log_path.as_path();
        // The environment was read once, at startup (`environment::HubEnv`); a reload on
        // SIGHUP reads the same folders with it.
        let agent_env = &env.agents;
        let (home, path_var) = (agent_env.home.clone(), agent_env.path_var.clone());
        for p in &reg.problems {
            // A manifest that does not load is not runnable; the operator learns why.
            self.records
                .log("WARN", &format!("agent manifest skipped: {p}"));
        }
        let runnable = agent_env.runnable(&reg);
        let reports = agent_env.reports(&reg);
        // Who may answer requests must be someone who can log in (issue 37 design §5).
        let roster = self.hub.roster();
        if let Some(name) = cfg.approvals.approvers.iter().find(|a| !roster.contains(a)) {
            return Err(TaskStartError::UnknownApprover(name.clone()));
        }
        let rows = self
            .commits
            .store
            .load_tasks()
            .map_err(TaskStartError::LoadTasks)?;
        let requests = self
            .commits
            .store
            .load_requests()
            .map_err(TaskStartError::LoadTasks)?;
        self.tasks.task_dir = cfg.cwd_roots.first().cloned();
        self.tasks.max_tasks = Some(cfg.max_concurrent);
        let credentials_dir = cfg.credentials_dir.clone().unwrap_or_else(|| {
            audit_log
                .parent()
                .unwrap_or(Path::new("."))
                .join("task-credentials")
        });
        let pass: Vec<String> = match &cfg.env_pass {
            Some(names) => names.clone(),
            None => DEFAULT_ENV_PASS.iter().map(|s| s.to_string()).collect(),
        };
        let (mut agent_vars, secrets) = pass_env(env.vars.iter().cloned(), &pass);
        agent_vars.retain(|(k, _)| k != TASK_MARK);
        // The client binary beside the server; when it is missing (only the server was
        // built, as `cargo run --bin agent-hub-server` does) the hub still starts, and each
        // task is refused with the reason (`Executor::spec`) until it is there.
        let client_binary = env
            .exe
            .as_ref()
            .and_then(|p| p.parent().map(|d| d.join("agent-hub")))
            .unwrap_or_else(|| PathBuf::from("agent-hub"));
        if !client_binary.is_file() {
            self.records.log(
                "WARN",
                &format!(
                    "{} is missing: delegated tasks are refused until it is built (their agents run it as their MCP server)",
                    client_binary.display()
                ),
            );
        }
        let sandbox = start_sandbox(
            &mut self.records,
            config,
            config_path,
            &credentials_dir,
            &client_binary,
            env.exe.as_deref(),
            &home,
            &path_var,
            agent_env.sources.user_dir.as_deref(),
        )?;
        let runtime = Runtime {
            sandbox,
            client_binary,
            port,
            credentials_dir,
            env: agent_vars,
            secrets,
            cwd_roots: cfg.cwd_roots.clone(),
            default_permission: cfg.permission,
            agent_permission: cfg.agent_permission.clone(),
            approvals: cfg.approvals.clone(),
            limits: cfg.limits.clone(),
            headless_stdout_max_bytes: cfg.headless_stdout_max_bytes,
        };
        let waker = self.waker.clone();
        let wake: Arc<dyn Fn() + Send + Sync> = Arc::new(move || {
            let _ = waker.wake();
        });
        let reg = Arc::new(reg);
        self.tasks.catalogue = Some(Arc::clone(&reg));
        self.tasks.executor = Some(Executor::new(
            runtime,
            Box::new(Catalogue { reg, path_var }),
            wake,
        ));
        // Any relay peer can be delegated to; only those with `delegate = true` may delegate
        // here (docs/delegation.md "Across hubs").
        let peers: Vec<String> = relay
            .map(|r| r.peers.iter().map(|p| p.id.clone()).collect())
            .unwrap_or_default();
        let accept: Vec<String> = relay
            .map(|r| {
                r.peers
                    .iter()
                    .filter(|p| p.delegate)
                    .map(|p| p.id.clone())
                    .collect()
            })
            .unwrap_or_default();
        let mut book = agent_hub_proto::tasks::TaskBook::new(cfg.into(), runnable.clone(), peers);
        book.set_accept_from(accept);
        if let Some(r) = relay {
            // Placement (issue 38 design §4): a peer is stale after three of our intervals
            // without a beat, and `requires` matches this hub by its `relay.tags`.
            book.set_relay_placement(
                std::time::Duration::from_millis(r.heartbeat_interval_ms),
                r.tags.clone(),
            );
        }
        book.set_reports(reports);
        self.hub.enable_tasks(book);
        let now = read_clock();
        let (n, open) = (rows.len(), requests.len());
        self.hub.restore_tasks(rows, requests, now);
        self.records.log(
            "INFO",
            &format!(
                "delegation on: {} runnable agents ({}); {n} stored tasks; {open} requests left open by the last run, each closed now by the fallback (hub restarted)",
                runnable.len(),
                runnable.join(", ")
            ),
        );
        Ok(())
    }

    /// Without `[tasks]`, tasks a previous run left in the store are kept there untouched
    /// (a later start with `[tasks]` settles them); the operator is told how many wait, so
    /// nothing is left unreported.
    pub fn warn_stored_tasks(&mut self) {
        let open = match self.commits.store.load_tasks() {
            Ok(rows) => rows
                .iter()
                .filter(|r| matches!(r.state.as_str(), "queued" | "running" | "cancelling"))
                .count(),
            Err(e) => {
                self.records
                    .log("ERROR", &format!("loading stored tasks: {e}"));
                return;
            }
        };
        if open > 0 {
            self.records.log(
                "WARN",
                &format!(
                    "{open} delegated tasks in the queue store are unfinished, but [tasks] is not configured: they stay in the store, and their delegators hear nothing until the hub starts with [tasks] again"
                ),
            );
        }
    }

    /// The environment the catalogue is read with (startup hands it in, before
    /// `start_tasks` and `start_relay`; `environment`).
    pub fn set_agent_env(&mut self, env: AgentEnv) {
        self.tasks.agent_env = env;
    }

    /// The runner threads poked the waker (`Delegation::take_events`).
    pub(super) fn take_task_events(&mut self, now: Now) {
        self.tasks.take_events(&mut self.hub, now);
    }
}

/// Finds the sandbox `tasks.sandbox` asks for by trying it (`sandbox::probe`), and what
/// it keeps from every task. A configured sandbox that does not work, or `auto` with
/// none, is a startup error naming what to install; `none` is logged as a WARN.
#[allow(clippy::too_many_arguments)]
fn start_sandbox(
    records: &mut Records,
    config: &agent_hub_host::config::Config,
    config_path: &Path,
    credentials_dir: &Path,
    client_binary: &Path,
    server_binary: Option<&Path>,
    home: &Path,
    path_var: &str,
    user_agents_dir: Option<&Path>,
) -> Result<Option<Arc<agent_hub_host::sandbox::Sandbox>>, TaskStartError> {
    use agent_hub_host::sandbox::{self, Kind};
    let Some(cfg) = config.tasks.as_ref() else {
        return Ok(None);
    };
    // The task folders live here: it must exist (private) before the probe hides it.
    crate::runner::TaskCredential::check_folder(credentials_dir)
        .map_err(TaskStartError::CredentialsDir)?;
    let (kind, notes) = sandbox::probe::detect(cfg.sandbox, path_var, credentials_dir)
        .map_err(TaskStartError::Sandbox)?;
    for n in notes {
        records.log("WARN", &n);
    }
    if kind == Kind::None {
        records.log("WARN", sandbox::NONE_WARNING);
        return Ok(None);
    }
    let config_path = std::fs::canonicalize(config_path).unwrap_or_else(|_| config_path.to_owned());
    let store = match &config.store {
        agent_hub_host::config::StoreConfig::Sqlite { path, .. } => Some(path.as_path()),
        agent_hub_host::config::StoreConfig::Memory => None,
    };
    let relay_keys: Vec<&Path> = config
        .relay
        .iter()
        .flat_map(|r| r.peers.iter().map(|p| p.key_file.as_path()))
        .collect();
    let mut manifest_dirs: Vec<&Path> = user_agents_dir.into_iter().collect();
    if let Some(d) = &cfg.manifests_dir {
        manifest_dirs.push(d);
    }
    let paths = sandbox::HubPaths::new(&sandbox::HubFiles {
        config: &config_path,
        roster: &config.roster_path,
        audit_log: &config.audit_log_path,
        service_log: &config.service_log_path,
        store,
        relay_status: config.relay.as_ref().map(|r| r.status_path.as_path()),
        relay_keys,
        credentials_dir,
        server_binary,
        client_binary,
        manifest_dirs,
        cwd_roots: &cfg.cwd_roots,
        home,
        path_var,
    });
    // A credentials folder that holds what every agent needs could not be hidden whole.
    let creds =
        std::fs::canonicalize(credentials_dir).unwrap_or_else(|_| credentials_dir.to_owned());
    if let Some(k) = paths
        .keep_whole
        .iter()
        .chain(cfg.cwd_roots.iter())
        .find(|k| k.starts_with(&creds))
    {
        return Err(TaskStartError::CredentialsHoldShared {
            credentials: creds,
            shared: k.clone(),
        });
    }
    let what = match &kind {
        Kind::Bwrap { program } => format!("bubblewrap ({})", program.display()),
        Kind::Landlock { abi } => format!("Landlock (ABI {abi})"),
        Kind::None => "none".into(),
    };
    records.log(
        "INFO",
        &format!(
            "delegated agents run in sandbox {} (tasks.sandbox = {:?}): {what}; hidden from them: the hub's files ({}) and folders ({}); read-only: {}",
            kind.tag(),
            cfg.sandbox.tag(),
            paths
                .secret_files
                .iter()
                .filter(|p| p.exists())
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", "),
            paths
                .secret_dirs
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", "),
            paths
                .read_only
                .iter()
                .filter(|p| p.exists())
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", "),
        ),
    );
    Ok(Some(Arc::new(sandbox::Sandbox { kind, paths })))
}

/// Kills the process group `pid` if its leader still carries this task's mark: after a
/// crash the group may be gone and its id reused by another program, which must never be
/// signalled (docs/delegation.md "Durability").
pub(super) fn kill_orphan(task: &str, pid: u32, records: &mut Records) {
    let environ = match std::fs::read(format!("/proc/{pid}/environ")) {
        Ok(e) => e,
        Err(_) => return, // gone, or not ours to read: nothing to do
    };
    let mark = format!("{TASK_MARK}={task}");
    let ours = environ.split(|&b| b == 0).any(|v| v == mark.as_bytes());
    let Ok(pgid) = i32::try_from(pid) else {
        return;
    };
    if !ours {
        return;
    }
    // SAFETY: kill(2) with a negative pid signals a process group; no memory is shared.
    let rc = unsafe { libc::kill(-pgid, libc::SIGKILL) };
    records.log(
        if rc == 0 { "WARN" } else { "ERROR" },
        &format!(
            "task {task}: its agent (process group {pid}) outlived the last hub; {}",
            if rc == 0 {
                "killed"
            } else {
                "could not kill it"
            }
        ),
    );
}
