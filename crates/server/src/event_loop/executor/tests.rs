//! The task executor's tests (`event_loop::executor`): refusals before a spawn, the MCP server
//! a task gets, headless argv limits, and cwd checks, on real temp dirs without a hub.

use super::*;
use agent_hub_proto::tasks::TaskId;

/// The task id `task-` + `n` in 32 hex digits.
fn tid(n: u8) -> TaskId {
    TaskId::parse(&format!("task-{n:032x}")).expect("a task id")
}

/// A start as the core sends it (`tasks::StartSpec`): the executor takes exactly that.
fn start(n: u8, agent: &str, cwd: PathBuf, prompt: &str) -> StartSpec {
    StartSpec {
        task: tid(n),
        delegator: "boss".into(),
        agent: agent.into(),
        peer: None,
        cwd,
        prompt: prompt.into(),
        timeout_secs: 1,
        token: "tok".into(),
        permission: None,
        allow: Vec::new(),
        keep_session: false,
    }
}

fn os(pairs: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
    pairs
        .iter()
        .map(|(k, v)| (OsString::from(k), OsString::from(v)))
        .collect()
}

#[test]
fn only_admitted_names_pass_and_key_values_become_secrets() {
    let pass: Vec<String> = ["PATH", "ANTHROPIC_*"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let (env, secrets) = pass_env(
        os(&[
            ("PATH", "/usr/bin"),
            ("ANTHROPIC_API_KEY", "sk-ant-SECRET"),
            ("ANTHROPIC_BASE_URL", "http://127.0.0.1:9"),
            ("AWS_SECRET_ACCESS_KEY", "aws-SECRET"),
            ("PATHOLOGICAL", "x"),
            ("LD_PRELOAD", "/tmp/evil.so"),
        ]),
        &pass,
    );
    assert_eq!(
        env,
        os(&[
            ("ANTHROPIC_API_KEY", "sk-ant-SECRET"),
            ("ANTHROPIC_BASE_URL", "http://127.0.0.1:9"),
            ("PATH", "/usr/bin"),
        ])
    );
    assert_eq!(secrets, ["sk-ant-SECRET"]);
}

#[test]
fn the_default_list_never_passes_loader_or_shell_hooks() {
    let pass: Vec<String> = DEFAULT_ENV_PASS.iter().map(|s| s.to_string()).collect();
    let (env, _) = pass_env(
        os(&[
            ("LD_PRELOAD", "/tmp/evil.so"),
            ("LD_LIBRARY_PATH", "/tmp"),
            ("BASH_ENV", "/tmp/rc"),
            ("ENV", "/tmp/rc"),
            ("AGENT_HUB_TOKEN", "hub-secret"),
            ("HOME", "/home/u"),
        ]),
        &pass,
    );
    assert_eq!(env, os(&[("HOME", "/home/u")]));
}

/// Only the server was built: the hub runs, and a task is refused saying what is missing.
#[test]
fn a_missing_client_binary_refuses_the_task_not_the_hub() {
    let dir = std::env::temp_dir().join(format!("agent-hub-exec-nb-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("work")).unwrap();
    let root = std::fs::canonicalize(dir.join("work")).unwrap();
    let mut ex = Executor::new(
        Runtime {
            client_binary: dir.join("no-such-agent-hub"),
            port: 1,
            credentials_dir: dir.join("creds"),
            env: Vec::new(),
            secrets: Vec::new(),
            cwd_roots: vec![root.clone()],
            default_permission: PermissionPolicy::default(),
            agent_permission: Default::default(),
            approvals: ApprovalSettings::default(),
            limits: agent_hub_proto::acp::Limits::default(),
            headless_stdout_max_bytes: 1 << 20,
            sandbox: None,
        },
        Box::new(OneAgent(AgentRun::Acp(vec!["/bin/true".into()]))),
        Arc::new(|| {}),
    );
    ex.start(start(0xc, "ghost", root, "p"));
    let evs = ex.drain();
    // The outcome's log line first, as for every task that never got a process
    // (`runner::not_started`).
    assert!(matches!(&evs[0].1, TaskEvent::Log(l) if l.message.starts_with("outcome refused")));
    match &evs[1].1 {
        TaskEvent::Outcome(o) => {
            assert_eq!(o.status.name(), "refused");
            assert!(
                o.status
                    .to_string()
                    .contains("no-such-agent-hub is missing"),
                "{}",
                o.status
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(evs[2].1, TaskEvent::Ended(_)));
}

#[test]
fn a_start_never_shows_its_token_or_prompt() {
    let mut l = start(1, "fake", "/w".into(), "PROMPT-SECRET");
    l.token = "TOKEN-SECRET".into();
    let shown = format!("{l:?}");
    assert!(!shown.contains("SECRET"), "{shown}");
}

#[test]
fn the_mcp_server_carries_a_token_file_never_a_token() {
    let s = mcp_server(
        "agent-hub-0123456789ab",
        Path::new("/opt/bin/agent-hub"),
        "task-0123",
        Path::new("/run/c/task-0123.token"),
        7411,
    );
    assert_eq!(
        s.args,
        [
            "mcp",
            "--as",
            "task-0123",
            "--token-file",
            "/run/c/task-0123.token",
            "--port",
            "7411"
        ]
    );
    assert!(s.env.is_empty());
    assert_eq!(s.name, "agent-hub-0123456789ab");
}

/// Issue 37 design §3, §4: the hub's MCP server is attached under the task's own name, the
/// session recognises its tools by that name, and the session holds requests under the
/// operator's policy with the fallback and cap of `[tasks]`.
#[test]
fn the_session_gets_the_task_unique_server_and_the_approval_keys() {
    let dir = std::env::temp_dir().join(format!("agent-hub-exec-ap-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("work")).unwrap();
    let root = std::fs::canonicalize(dir.join("work")).unwrap();
    let client = dir.join("agent-hub");
    std::fs::write(&client, "").unwrap();
    let creds = dir.join("creds");
    crate::runner::TaskCredential::check_folder(&creds).unwrap();
    let approvals = ApprovalSettings {
        permission_fallback: agent_hub_proto::acp::PermissionFallback::Cancel,
        max_open_requests_per_task: 3,
        ..ApprovalSettings::default()
    };
    let ex = Executor::new(
        Runtime {
            client_binary: client,
            port: 1,
            credentials_dir: creds,
            env: Vec::new(),
            secrets: Vec::new(),
            cwd_roots: vec![root.clone()],
            default_permission: PermissionPolicy::Ask,
            agent_permission: [("loose".to_owned(), PermissionPolicy::Allow)].into(),
            approvals,
            limits: agent_hub_proto::acp::Limits::default(),
            headless_stdout_max_bytes: 1 << 20,
            sandbox: None,
        },
        Box::new(OneAgent(AgentRun::Acp(vec!["/bin/true".into()]))),
        Arc::new(|| {}),
    );
    for (n, agent, policy) in [
        (0xa1, "fake", PermissionPolicy::Ask),
        (0xa2, "loose", PermissionPolicy::Allow),
    ] {
        let launch = start(n, agent, root.clone(), "p");
        let Ok(Spec::Acp(spec)) = ex.spec(&launch) else {
            panic!("an ACP spec");
        };
        let name = hub_server_name(launch.task.as_str());
        assert_eq!(spec.session.mcp_servers.len(), 1);
        assert_eq!(spec.session.mcp_servers[0].name, name);
        assert_ne!(name, "agent-hub");
        assert_eq!(
            spec.session.approval.hub_server.as_deref(),
            Some(name.as_str())
        );
        assert_eq!(
            spec.session.approval.fallback,
            agent_hub_proto::acp::PermissionFallback::Cancel
        );
        assert_eq!(spec.session.approval.max_open_requests, 3);
        assert!(spec.session.approval.allow_rules.is_empty());
        assert_eq!(spec.session.permission, policy, "{agent}");
        spec.session.validate().unwrap();
    }
    assert!(
        !ex.answer("task-none", 1, RequestAnswer::default()),
        "no such task"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Resolves every name to one way of running.
struct OneAgent(AgentRun);
impl ResolveAgent for OneAgent {
    fn resolve(&self, _agent: &str) -> Result<AgentRun, ResolveError> {
        Ok(self.0.clone())
    }
}

fn headless_executor(dir: &Path, root: &Path) -> Executor {
    Executor::new(
        Runtime {
            // A headless task needs no client binary: it gets no MCP server.
            client_binary: dir.join("no-such-agent-hub"),
            port: 1,
            credentials_dir: dir.join("creds"),
            env: Vec::new(),
            secrets: Vec::new(),
            cwd_roots: vec![root.to_owned()],
            default_permission: PermissionPolicy::default(),
            agent_permission: Default::default(),
            approvals: ApprovalSettings::default(),
            limits: agent_hub_proto::acp::Limits::default(),
            headless_stdout_max_bytes: 1 << 20,
            sandbox: None,
        },
        Box::new(OneAgent(AgentRun::Headless {
            template: ["/bin/echo", "-n", "{prompt}"].map(String::from).to_vec(),
            format: agent_hub_host::agents::manifest::Outcome::ExitCode,
            prompt_via: agent_hub_host::agents::manifest::PromptVia::Argv,
            mcp: None,
        })),
        Arc::new(|| {}),
    )
}

/// Issue 37 design §6: a headless agent with `run.headless_mcp` gets its credential, an MCP
/// config naming `agent-hub mcp` as the task identity under the task-unique server name, and
/// the template's elements before its prompt; the book hears first that it asks through the
/// tool. `/bin/echo` as the agent prints the argv it got, which is the outcome's text.
#[test]
fn a_headless_agent_with_headless_mcp_gets_the_hubs_server_and_its_prompt_tool() {
    let dir = std::env::temp_dir().join(format!("agent-hub-exec-hlmcp-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("work")).unwrap();
    let root = std::fs::canonicalize(dir.join("work")).unwrap();
    let client = dir.join("agent-hub");
    std::fs::write(&client, "").unwrap();
    let mcp = [
        "--mcp-config",
        "{mcp_config}",
        "--permission-prompt-tool",
        "mcp__{server}__permission_prompt",
    ]
    .map(String::from)
    .to_vec();
    let mut ex = Executor::new(
        Runtime {
            client_binary: client.clone(),
            port: 4100,
            credentials_dir: dir.join("creds"),
            env: Vec::new(),
            secrets: Vec::new(),
            cwd_roots: vec![root.clone()],
            default_permission: PermissionPolicy::default(),
            agent_permission: Default::default(),
            approvals: ApprovalSettings::default(),
            limits: agent_hub_proto::acp::Limits::default(),
            headless_stdout_max_bytes: 1 << 20,
            sandbox: None,
        },
        Box::new(OneAgent(AgentRun::Headless {
            template: ["/bin/echo", "-n", "{prompt}"].map(String::from).to_vec(),
            format: agent_hub_host::agents::manifest::Outcome::ExitCode,
            prompt_via: agent_hub_host::agents::manifest::PromptVia::Argv,
            mcp: Some(mcp),
        })),
        Arc::new(|| {}),
    );
    let task = tid(0x21);
    ex.start(start(0x21, "echo", root.clone(), "hello"));
    let server = hub_server_name(task.as_str());
    let config = dir.join("creds").join(task.as_str()).join(MCP_CONFIG_FILE);
    let mut events = Vec::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !events.iter().any(|(_, e)| matches!(e, TaskEvent::Ended(_))) {
        assert!(std::time::Instant::now() < deadline, "{events:?}");
        events.extend(ex.drain());
        std::thread::yield_now();
    }
    assert!(
        matches!(&events[0].1, TaskEvent::PermissionTool { tool_kinds } if tool_kinds.is_empty()),
        "{events:?}"
    );
    let text = events
        .iter()
        .find_map(|(_, e)| match e {
            TaskEvent::Outcome(o) => Some(o.text.clone()),
            _ => None,
        })
        .expect("an outcome");
    assert_eq!(
        text,
        format!(
            "--mcp-config {} --permission-prompt-tool mcp__{server}__permission_prompt hello",
            config.display()
        )
    );
    assert!(!config.exists(), "the task's folder goes with the task");
    let entry = mcp_server(&server, &client, task.as_str(), Path::new("/c/token"), 4100);
    let doc: serde_json::Value = serde_json::from_str(&mcp_config(&entry)).unwrap();
    assert_eq!(
        doc,
        serde_json::json!({"mcpServers": {server.clone(): {
            "command": client.to_string_lossy(),
            "args": ["mcp", "--as", task.as_str(), "--token-file", "/c/token", "--port", "4100"],
            "env": {}
        }}})
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Prompts an argv cannot carry as they are end the task `refused` before any process
/// exists, saying why (docs/delegation.md "Headless tasks").
#[test]
fn headless_prompts_an_argv_cannot_carry_are_refused_before_a_spawn() {
    let dir = std::env::temp_dir().join(format!("agent-hub-exec-hl-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("work")).unwrap();
    let root = std::fs::canonicalize(dir.join("work")).unwrap();
    let mut ex = headless_executor(&dir, &root);
    let huge = "x".repeat(agent_hub_host::agents::argv::MAX_ARG_STRLEN);
    for (id, prompt, why) in [
        (0xd, "--version", "begins with '-'"),
        (
            0xe,
            huge.as_str(),
            "one argument holds at most 131071 bytes",
        ),
        (0xf, "a\0b", "NUL byte"),
    ] {
        ex.start(start(id, "echo", root.clone(), prompt));
        let evs = ex.drain();
        assert_eq!(evs.len(), 3, "{evs:?}");
        assert!(matches!(&evs[0].1, TaskEvent::Log(_)), "{evs:?}");
        match &evs[1].1 {
            TaskEvent::Outcome(o) => {
                assert_eq!(o.status.name(), "refused", "{id}");
                let shown = o.status.to_string();
                assert!(shown.contains(why), "{id}: {shown}");
                assert!(
                    shown.len() < 600,
                    "the prompt is not quoted: {}",
                    shown.len()
                );
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(evs[2].1, TaskEvent::Ended(_)));
    }
    assert_eq!(ex.running(), 0);
}

struct NoAgents;
impl ResolveAgent for NoAgents {
    fn resolve(&self, agent: &str) -> Result<AgentRun, ResolveError> {
        Err(ResolveError::Runnable(
            agent_hub_host::agents::runnable::RunnableError::Unknown(agent.to_owned()),
        ))
    }
}

/// A start refused before any process exists ends like any run that never got a process:
/// its outcome's log line, one outcome, then `Ended`, and the waker is called so the loop
/// drains them.
#[test]
fn a_start_refused_here_ends_with_one_outcome_and_ended() {
    let dir = std::env::temp_dir().join(format!("agent-hub-exec-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("work")).unwrap();
    let roots = vec![std::fs::canonicalize(dir.join("work")).unwrap()];
    let woke = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let w = Arc::clone(&woke);
    let mut ex = Executor::new(
        Runtime {
            client_binary: "/bin/false".into(),
            port: 1,
            credentials_dir: dir.join("creds"),
            env: Vec::new(),
            secrets: Vec::new(),
            cwd_roots: roots.clone(),
            default_permission: PermissionPolicy::default(),
            agent_permission: Default::default(),
            approvals: ApprovalSettings::default(),
            limits: agent_hub_proto::acp::Limits::default(),
            headless_stdout_max_bytes: 1 << 20,
            sandbox: None,
        },
        Box::new(NoAgents),
        Arc::new(move || {
            w.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }),
    );
    // Outside the roots (a symlink out would be caught the same way, canonicalised).
    ex.start(start(0xa, "ghost", dir.clone(), "p"));
    // Inside the roots, but no such agent.
    ex.start(start(0xb, "ghost", roots[0].clone(), "p"));
    let evs = ex.drain();
    assert_eq!(woke.load(std::sync::atomic::Ordering::SeqCst), 2);
    let names: Vec<(&str, &str)> = evs
        .iter()
        .map(|(id, e)| {
            let what = match e {
                TaskEvent::Log(_) => "log",
                TaskEvent::Outcome(o) => o.status.name(),
                TaskEvent::Ended(_) => "ended",
                _ => "other",
            };
            (id.as_str(), what)
        })
        .collect();
    assert_eq!(
        names,
        [
            (tid(0xa).as_str(), "log"),
            (tid(0xa).as_str(), "refused"),
            (tid(0xa).as_str(), "ended"),
            (tid(0xb).as_str(), "log"),
            (tid(0xb).as_str(), "refused"),
            (tid(0xb).as_str(), "ended")
        ]
    );
    // Neither left a credential file behind.
    assert!(std::fs::read_dir(dir.join("creds"))
        .map(|d| d.count() == 0)
        .unwrap_or(true));
    assert_eq!(ex.running(), 0);
}
