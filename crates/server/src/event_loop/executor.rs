//! The task executor: the IO side of delegated work (docs/delegation.md "How a task runs").
//!
//! Owns: turning the core's "start this task" into a running `runner` task (the agent's
//! checked argv from its manifest, the task's cwd checked again on the filesystem, the child's
//! environment, the task's credential file, the hub's own MCP server on the session under the
//! task-unique name of issue 37 design §3, the session's approval settings; for a headless
//! agent whose manifest has `run.headless_mcp`, the same server in an MCP config file written
//! into the task's folder and its permission-prompt tool on the argv, design §6), the
//! `TaskHandle`s of running tasks, a `mio::Waker` the runner threads poke, handing a task's
//! runner the core's answer to a held request (`answer`), and draining their events back to
//! the core. Refuses: deciding anything. Which task starts, when, and what its
//! outcome means are the core's (`tasks`); a start that fails here becomes the same events a
//! run that never got a process produces (`runner::not_started`: its outcome's log line, a
//! `refused` or `failed` outcome, then `Ended`), so the core and the service log see one path
//! for every end.

use crate::runner::{self, TaskCredential, TaskEvent, TaskHandle, TaskSpec};
use agent_hub_proto::acp::permission::{hub_server_name, AllowRule};
use agent_hub_proto::acp::{
    Approval, Failure, McpServer, PermissionPolicy, Refusal, SessionConfig, Status,
};
use agent_hub_proto::tasks::settings::ApprovalSettings;
use agent_hub_proto::tasks::{RequestAnswer, StartSpec};
use std::collections::HashMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// How an agent runs a task, resolved from its manifest (`agents::runnable`): ACP when its
/// `run.acp` program is on PATH, else its headless template. argv[0] is absolute.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AgentRun {
    Acp(Vec<OsString>),
    /// `run.headless` (still holding its `{prompt}` element when the prompt goes on the
    /// argv), `run.outcome`, `run.headless_prompt` and `run.headless_mcp` (placeholders in).
    Headless {
        template: Vec<String>,
        format: agent_hub_host::agents::manifest::Outcome,
        prompt_via: agent_hub_host::agents::manifest::PromptVia,
        mcp: Option<Vec<String>>,
    },
}

/// Why an agent name gives no way to run a task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResolveError {
    /// No runnable manifest by that name (`agents::runnable::resolve`).
    Runnable(agent_hub_host::agents::runnable::RunnableError),
    /// Its manifest resolves, but to neither an ACP program on PATH nor a headless template.
    NotDelegable,
}

impl std::fmt::Display for ResolveError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ResolveError::Runnable(e) => write!(f, "{e}"),
            ResolveError::NotDelegable => {
                write!(f, "it cannot take delegated work on this machine")
            }
        }
    }
}

impl std::error::Error for ResolveError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ResolveError::Runnable(e) => Some(e),
            ResolveError::NotDelegable => None,
        }
    }
}

pub trait ResolveAgent {
    fn resolve(&self, agent: &str) -> Result<AgentRun, ResolveError>;
    /// The agent's manifest, for its sandbox's view of the agent's installed config
    /// (`agents::install::task_view`); None: no view is made.
    fn manifest(&self, _agent: &str) -> Option<agent_hub_host::agents::manifest::Manifest> {
        None
    }
}

/// The parts of the hub's setup every task shares.
#[derive(Debug, Clone)]
pub struct Runtime {
    /// The `agent-hub` client binary the agent runs as its MCP server.
    pub client_binary: PathBuf,
    /// The hub's client port, for the task identity's MCP server.
    pub port: u16,
    /// Where task credential files live (mode 0700; `runner::TaskCredential`).
    pub credentials_dir: PathBuf,
    /// The environment the agent gets: name and value, taken from the hub's own at startup
    /// through `tasks.env_pass` (docs/delegation.md "The agent's environment").
    pub env: Vec<(OsString, OsString)>,
    /// Values of that environment that must never reach a log (API keys, tokens).
    pub secrets: Vec<String>,
    /// Canonical working-directory roots (`tasks.cwd_roots`).
    pub cwd_roots: Vec<PathBuf>,
    pub default_permission: PermissionPolicy,
    pub agent_permission: std::collections::BTreeMap<String, PermissionPolicy>,
    /// `tasks.permission_fallback`, `max_open_requests_per_task` and the rest of issue 37's
    /// keys; the session takes the fallback and its cap from here.
    pub approvals: ApprovalSettings,
    pub limits: agent_hub_proto::acp::Limits,
    /// A headless agent's stdout cap (`tasks.headless_stdout_max_bytes`).
    pub headless_stdout_max_bytes: usize,
    /// The OS sandbox every agent runs in (`tasks.sandbox`, resolved at startup); None:
    /// `tasks.sandbox = "none"`.
    pub sandbox: Option<Arc<agent_hub_host::sandbox::Sandbox>>,
}

pub struct Executor {
    runtime: Runtime,
    resolve: Box<dyn ResolveAgent>,
    wake: Arc<dyn Fn() + Send + Sync>,
    running: HashMap<String, TaskHandle>,
    /// Events of tasks that ended before a handle existed (start refused here), in order.
    synthetic: Vec<(String, TaskEvent)>,
}

impl Executor {
    pub fn new(
        runtime: Runtime,
        resolve: Box<dyn ResolveAgent>,
        wake: Arc<dyn Fn() + Send + Sync>,
    ) -> Executor {
        Executor {
            runtime,
            resolve,
            wake,
            running: HashMap::new(),
            synthetic: Vec::new(),
        }
    }

    /// Starts `launch` and returns at once. Whatever goes wrong comes back through `drain`
    /// as the task's outcome and `Ended` (`runner::not_started`).
    pub fn start(&mut self, launch: StartSpec) {
        let id = launch.task.as_str().to_owned();
        let wake = Arc::clone(&self.wake);
        let wake: Box<dyn Fn() + Send> = Box::new(move || wake());
        match self.spec(&launch) {
            Ok(Spec::Acp(spec)) => {
                self.running.insert(id, runner::start(spec, wake));
            }
            Ok(Spec::Headless(spec, asks)) => {
                // Before the run's own events (`drain` hands these out first): the book takes
                // the task's permission prompts from now on (design §6).
                if let Some(tool_kinds) = asks {
                    self.synthetic
                        .push((id.clone(), TaskEvent::PermissionTool { tool_kinds }));
                }
                // A headless run has no session to keep or prompt (issue 38 design §2).
                self.synthetic.push((id.clone(), TaskEvent::Headless));
                self.running.insert(id, runner::start_headless(spec, wake));
            }
            Err(status) => {
                // The same three events a run that never got a process sends (its outcome's
                // log line among them), so the core and the service log see one path.
                let events = runner::not_started(status);
                self.synthetic.extend(events.map(|ev| (id.clone(), ev)));
                (self.wake)();
            }
        }
    }

    /// Asks a running task to stop (`session/cancel`, then the runner's shutdown). A task
    /// this executor does not hold has already ended; its outcome is on its way.
    pub fn cancel(&self, id: &str) {
        if let Some(h) = self.running.get(id) {
            h.cancel();
        }
    }

    /// Hands the running task `id` the decision for its held request `seq`. False when the
    /// executor holds no such task (it ended; its session answered what it held
    /// `cancelled`) or its runner could not take the answer.
    pub fn answer(&self, id: &str, seq: u32, answer: RequestAnswer) -> bool {
        self.running.get(id).is_some_and(|h| h.answer(seq, answer))
    }

    /// Hands the running task `id` a follow-up turn (issue 38). False when the executor holds
    /// no such task or its runner could not take it.
    pub fn prompt(&self, id: &str, turn: u32, text: String, interrupt: bool) -> bool {
        self.running
            .get(id)
            .is_some_and(|h| h.prompt(turn, text, interrupt))
    }

    /// Closes the kept session of task `id`; a task not held here has ended already.
    pub fn close(&self, id: &str) {
        if let Some(h) = self.running.get(id) {
            h.close();
        }
    }

    /// Every event that arrived since the last call, per task in order. A task's handle is
    /// dropped after its `Ended`.
    pub fn drain(&mut self) -> Vec<(String, TaskEvent)> {
        let mut out = std::mem::take(&mut self.synthetic);
        let mut ended = Vec::new();
        for (id, handle) in &self.running {
            while let Some(ev) = handle.try_event() {
                let last = matches!(ev, TaskEvent::Ended(_));
                out.push((id.clone(), ev));
                if last {
                    ended.push(id.clone());
                    break;
                }
            }
        }
        for id in ended {
            self.running.remove(&id);
        }
        out
    }

    pub fn running(&self) -> usize {
        self.running.len()
    }

    /// Puts a new catalogue in force (the manifests read again on SIGHUP, `manifests`): every
    /// task started from now on resolves its agent there; a running task keeps the argv it
    /// started with, since its spec was built whole at its start.
    pub fn set_resolver(&mut self, resolve: Box<dyn ResolveAgent>) {
        self.resolve = resolve;
    }

    /// Builds the runner's spec, or the status the task ends with when it cannot be run.
    fn spec(&self, launch: &StartSpec) -> Result<Spec, Status> {
        let refuse = |why: String| Status::Refused(Refusal::Invalid(why));
        // The core checked the path lexically; only the filesystem knows where its symlinks
        // lead, so the check is made again on the canonical path, which the task runs in.
        let cwd = agent_hub_host::config::tasks::check_cwd(&self.runtime.cwd_roots, &launch.cwd)
            .map_err(|e| refuse(e.to_string()))?;
        let argv = match self
            .resolve
            .resolve(&launch.agent)
            .map_err(|e| refuse(format!("agent {}: {e}", launch.agent)))?
        {
            AgentRun::Acp(argv) => argv,
            AgentRun::Headless {
                template,
                format,
                prompt_via,
                mcp,
            } => {
                let run = HeadlessRun {
                    template: &template,
                    format,
                    prompt_via,
                    mcp: mcp.as_deref(),
                };
                return self.headless_spec(launch, cwd, run);
            }
        };
        if !self.runtime.client_binary.is_file() {
            return Err(refuse(format!(
                "{} is missing (the task's agent runs it as its MCP server)",
                self.runtime.client_binary.display()
            )));
        }
        let credential = TaskCredential::create(
            &self.runtime.credentials_dir,
            launch.task.as_str(),
            &launch.token,
        )
        .map_err(|e| {
            Status::Failed(Failure::Spawn(format!(
                "cannot write the task's credential file: {e}"
            )))
        })?;
        let mut session = SessionConfig::new(
            &cwd,
            launch.prompt.clone(),
            launch.timeout_secs.saturating_mul(1000),
        );
        // The operator's bound for the agent in force now, narrowed by the delegation's own
        // `permission` (issue 37 design §1): never wider than either, so a bound lowered by
        // a restart since the delegation holds for a task that waited through it.
        let bound = self
            .runtime
            .agent_permission
            .get(&launch.agent)
            .copied()
            .unwrap_or(self.runtime.default_permission);
        session.permission = launch.permission.map_or(bound, |asked| asked.min(bound));
        // Issue 38: the session stays after a completed turn for a follow-up.
        session.keep_session = launch.keep_session;
        // The delegation's pre-approval rules (design §2), checked at the verb; one that does
        // not read here refuses the task rather than run it under other rules.
        let allow_rules = launch
            .allow
            .iter()
            .map(|r| AllowRule::new(&r.kinds, r.under.as_deref()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| refuse(format!("its allow rules: {e}")))?;
        // The session mode ids where the agent asks before acting (its manifest's
        // `run.ask_modes`); None: the hub's default list (docs/acp.md "Session modes").
        session.ask_modes = self
            .resolve
            .manifest(&launch.agent)
            .and_then(|m| m.run.ask_modes);
        session.limits = self.runtime.limits.clone();
        let Some(token_file) = credential.path().map(Path::to_owned) else {
            // `TaskCredential::create` always writes one; kept as a refusal, not a panic.
            return Err(Status::Failed(Failure::Spawn(
                "the task's credential has no token file".into(),
            )));
        };
        // Under a name no user config or model output can know in advance (design §3): the
        // session allows this server's tools under every policy.
        let hub_server = hub_server_name(launch.task.as_str());
        session.mcp_servers = vec![mcp_server(
            &hub_server,
            &self.runtime.client_binary,
            launch.task.as_str(),
            &token_file,
            self.runtime.port,
        )];
        session.approval = Approval {
            hub_server: Some(hub_server),
            allow_rules,
            fallback: self.runtime.approvals.permission_fallback,
            max_open_requests: self.runtime.approvals.max_open_requests_per_task,
        };
        let sandbox = self.task_sandbox(
            &launch.agent,
            credential.dir(),
            Some(token_file),
            Vec::new(),
        );
        let mut secrets = self.runtime.secrets.clone();
        secrets.push(launch.token.clone());
        let mut env = self.runtime.env.clone();
        env.push((TASK_MARK.into(), launch.task.as_str().to_owned().into()));
        Ok(Spec::Acp(TaskSpec {
            argv,
            env,
            session,
            secrets,
            credential: Some(credential),
            sandbox,
        }))
    }

    /// The task's sandbox, when the hub has one: the hub-wide part, the task's own folder
    /// and token, and the agent's manifest for the view of its installed config.
    fn task_sandbox(
        &self,
        agent: &str,
        task_dir: &Path,
        token_file: Option<PathBuf>,
        shown_files: Vec<PathBuf>,
    ) -> Option<agent_hub_host::sandbox::TaskSandbox> {
        let hub = self.runtime.sandbox.as_ref()?;
        Some(agent_hub_host::sandbox::TaskSandbox {
            hub: Arc::clone(hub),
            task_dir: task_dir.to_owned(),
            token_file,
            shown_files,
            manifest: self.resolve.manifest(agent),
        })
    }

    /// The headless fallback (docs/delegation.md "Headless tasks"): the prompt goes to the
    /// agent's stdin when its manifest says it reads it there, else it becomes one argv
    /// element (`argv::render` refuses what it cannot pass as it is). With `run.headless_mcp`
    /// (design §6) the task gets its credential and the hub's MCP server as an ACP task does,
    /// through an MCP config file in its own folder (`mcp_config`, mode 0600) that the
    /// template's elements name, with its permission-prompt tool under the task-unique server
    /// name; the book is told it asks that way (`TaskEvent::PermissionTool`, with the kinds of
    /// the manifest's `[tools]`). Without it: no credential and no MCP server, since nothing
    /// else can hand them to the agent. A sandboxed task gets its private folder either way.
    fn headless_spec(
        &self,
        launch: &StartSpec,
        cwd: PathBuf,
        run: HeadlessRun<'_>,
    ) -> Result<Spec, Status> {
        let (mut argv, stdin_prompt) = match run.prompt_via {
            agent_hub_host::agents::manifest::PromptVia::Stdin => {
                (run.template.to_vec(), Some(launch.prompt.clone()))
            }
            agent_hub_host::agents::manifest::PromptVia::Argv => {
                let argv = agent_hub_host::agents::argv::render(run.template, &launch.prompt)
                    .map_err(|e| {
                        Status::Refused(Refusal::Invalid(format!("agent {}: {e}", launch.agent)))
                    })?;
                (argv, None)
            }
        };
        let spawn_failed = |what: &str, e: runner::CredentialError| {
            Status::Failed(Failure::Spawn(format!("cannot {what}: {e}")))
        };
        let task = launch.task.as_str();
        let (credential, sandbox, asks) = match run.mcp {
            Some(mcp) => {
                if !self.runtime.client_binary.is_file() {
                    return Err(Status::Refused(Refusal::Invalid(format!(
                        "{} is missing (the task's agent runs it as its MCP server)",
                        self.runtime.client_binary.display()
                    ))));
                }
                let credential =
                    TaskCredential::create(&self.runtime.credentials_dir, task, &launch.token)
                        .map_err(|e| spawn_failed("write the task's credential file", e))?;
                let Some(token_file) = credential.path().map(Path::to_owned) else {
                    // `TaskCredential::create` always writes one; kept as a refusal, not a panic.
                    return Err(Status::Failed(Failure::Spawn(
                        "the task's credential has no token file".into(),
                    )));
                };
                let server = hub_server_name(task);
                let entry = mcp_server(
                    &server,
                    &self.runtime.client_binary,
                    task,
                    &token_file,
                    self.runtime.port,
                );
                let config = credential
                    .write_file(MCP_CONFIG_FILE, &mcp_config(&entry))
                    .map_err(|e| spawn_failed("write the task's MCP config file", e))?;
                let extra = agent_hub_host::agents::argv::render_mcp(
                    mcp,
                    &config.to_string_lossy(),
                    &server,
                );
                let at = agent_hub_host::agents::argv::mcp_position(run.template);
                argv.splice(at..at, extra);
                let sandbox = self.task_sandbox(
                    &launch.agent,
                    credential.dir(),
                    Some(token_file),
                    vec![config],
                );
                let kinds = self
                    .resolve
                    .manifest(&launch.agent)
                    .map(|m| {
                        m.tools
                            .iter()
                            .map(|(native, tool)| (native.clone(), tool.acp_kind().to_owned()))
                            .collect()
                    })
                    .unwrap_or_default();
                (Some(credential), sandbox, Some(kinds))
            }
            None => match &self.runtime.sandbox {
                None => (None, None, None),
                Some(_) => {
                    let folder = TaskCredential::folder_only(&self.runtime.credentials_dir, task)
                        .map_err(|e| spawn_failed("make the task's private folder", e))?;
                    let sandbox = self.task_sandbox(&launch.agent, folder.dir(), None, Vec::new());
                    (Some(folder), sandbox, None)
                }
            },
        };
        let mut secrets = self.runtime.secrets.clone();
        secrets.push(launch.token.clone());
        let mut env = self.runtime.env.clone();
        env.push((TASK_MARK.into(), task.to_owned().into()));
        let l = &self.runtime.limits;
        let spec = runner::HeadlessSpec {
            argv: argv.into_iter().map(OsString::from).collect(),
            env,
            cwd,
            format: run.format,
            limits: agent_hub_proto::headless::HeadlessLimits {
                task_timeout_ms: launch.timeout_secs.saturating_mul(1000),
                term_grace_ms: l.term_grace_ms,
                eof_exit_wait_ms: l.eof_exit_wait_ms,
            },
            max_text_bytes: l.max_text_bytes,
            stdout_max_bytes: self.runtime.headless_stdout_max_bytes,
            secrets,
            stdin_prompt,
            hub_mcp: asks.is_some(),
            credential,
            sandbox,
        };
        Ok(Spec::Headless(spec, asks))
    }
}

/// A headless run as the manifest gives it (`AgentRun::Headless`, borrowed).
struct HeadlessRun<'a> {
    template: &'a [String],
    format: agent_hub_host::agents::manifest::Outcome,
    prompt_via: agent_hub_host::agents::manifest::PromptVia,
    mcp: Option<&'a [String]>,
}

/// The file name of a headless task's MCP config in its folder (design §6).
pub const MCP_CONFIG_FILE: &str = "mcp.json";

/// A headless task's MCP config as Claude Code's `--mcp-config` reads it (the form the capture
/// used, /work/notes/capture37-facts.md §7): the one server, the hub's, under its task-unique
/// name, run as the task identity with its token file; no env (the token is in its file).
fn mcp_config(entry: &McpServer) -> String {
    let mut servers = serde_json::Map::new();
    servers.insert(
        entry.name.clone(),
        serde_json::json!({
            "command": entry.command.to_string_lossy(),
            "args": entry.args,
            "env": {},
        }),
    );
    serde_json::json!({ "mcpServers": servers }).to_string()
}

/// What `Executor::spec` hands the runner: a headless run also the tool kinds when its agent
/// asks through the hub's permission-prompt tool.
enum Spec {
    Acp(TaskSpec),
    Headless(
        runner::HeadlessSpec,
        Option<std::collections::BTreeMap<String, String>>,
    ),
}

/// The hub's MCP server as the agent starts it, named `server`: `agent-hub mcp` as the task
/// identity. The token travels in a file (mode 0600), never on this argv
/// (docs/delegation.md "Names").
fn mcp_server(server: &str, client: &Path, name: &str, token_file: &Path, port: u16) -> McpServer {
    McpServer {
        name: server.to_owned(),
        command: client.to_owned(),
        args: vec![
            "mcp".into(),
            "--as".into(),
            name.into(),
            "--token-file".into(),
            token_file.to_string_lossy().into_owned(),
            "--port".into(),
            port.to_string(),
        ],
        env: Vec::new(),
    }
}

/// Environment names passed to agents unless `tasks.env_pass` says otherwise: what a CLI
/// needs to find its binaries, its home and its config, plus the provider families' own
/// variables (keys and endpoint overrides), matched as prefixes where they end in `*`.
pub const DEFAULT_ENV_PASS: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "TERM",
    "TMPDIR",
    "TZ",
    "XDG_CONFIG_HOME",
    "XDG_DATA_HOME",
    "XDG_CACHE_HOME",
    "XDG_STATE_HOME",
    "XDG_RUNTIME_DIR",
    "NODE_OPTIONS",
    "NODE_EXTRA_CA_CERTS",
    "SSL_CERT_FILE",
    "HTTPS_PROXY",
    "HTTP_PROXY",
    "NO_PROXY",
    "ANTHROPIC_*",
    "CLAUDE_*",
    "OPENAI_*",
    "CODEX_*",
    "GEMINI_*",
    "GOOGLE_*",
    "OPENCODE_*",
    "FACTORY_*",
    "DROID_*",
];

/// The environment for agents: the variables of `from` whose names `pass` admits (exact
/// names, or prefixes ending in `*`), sorted by name. Values of names that look like
/// credentials are returned as secrets too, so the runner redacts them from every excerpt.
pub fn pass_env(
    from: impl IntoIterator<Item = (OsString, OsString)>,
    pass: &[String],
) -> (Vec<(OsString, OsString)>, Vec<String>) {
    let admitted = |name: &str| {
        pass.iter().any(|p| match p.strip_suffix('*') {
            Some(prefix) => name.starts_with(prefix),
            None => name == p,
        })
    };
    let mut env: Vec<(OsString, OsString)> = from
        .into_iter()
        .filter(|(k, _)| k.to_str().is_some_and(admitted))
        .collect();
    env.sort();
    let secrets = env
        .iter()
        .filter(|(k, v)| {
            let k = k.to_string_lossy().to_ascii_uppercase();
            let looks_secret = ["KEY", "TOKEN", "SECRET", "PASSWORD", "CREDENTIAL"]
                .iter()
                .any(|w| k.contains(w));
            looks_secret && !v.is_empty()
        })
        .map(|(_, v)| v.to_string_lossy().into_owned())
        .collect();
    (env, secrets)
}

/// Resolves manifest names through the agent catalogue in force, as `agent-hub agents` does
/// (`agents::runnable`): built-ins, the user's folder, `tasks.manifests_dir`. Shared with the
/// server, which compares it with the folders read again on SIGHUP (`manifests`).
pub(super) struct Catalogue {
    pub(super) reg: Arc<agent_hub_host::agents::registry::Registry>,
    pub(super) path_var: String,
}

impl ResolveAgent for Catalogue {
    fn resolve(&self, agent: &str) -> Result<AgentRun, ResolveError> {
        use agent_hub_host::agents::runnable::{self, Delegate};
        let spec =
            runnable::resolve(&self.reg, agent, &self.path_var).map_err(ResolveError::Runnable)?;
        match spec.mode {
            Delegate::Acp => Ok(AgentRun::Acp(
                spec.argv.into_iter().map(OsString::from).collect(),
            )),
            Delegate::Headless => Ok(AgentRun::Headless {
                template: spec.argv,
                format: spec.outcome,
                prompt_via: spec.prompt_via,
                mcp: spec.headless_mcp,
            }),
            Delegate::No => Err(ResolveError::NotDelegable),
        }
    }

    fn manifest(&self, agent: &str) -> Option<agent_hub_host::agents::manifest::Manifest> {
        self.reg.get(agent).cloned()
    }
}

/// The environment variable that marks an agent's processes as a task's, so that after a
/// crash the next hub kills a process group only if it is still that task's
/// (`delegation::kill_orphan`).
pub const TASK_MARK: &str = "AGENT_HUB_TASK";

#[cfg(test)]
mod tests;
