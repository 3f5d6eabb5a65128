//! The headless fallback through the real binaries (issue 11, docs/delegation.md "Headless
//! tasks"): agents whose manifests (in the config's `tasks.manifests_dir`) have no `run.acp`
//! but a `run.headless` template naming `fake-headless-agent` (crates/test-fakes/src/bin/fake-headless-agent.rs)
//! run that argv with the prompt as one element, and their stdout becomes the outcome. Also
//! `agent-hub agents --config`, which must list what that server finds. Every wait is an
//! await or a poll with a deadline, never a sleep.

use crate::harness::{hello_line, poll_until, token_of, Hub, Setup, OK};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::time::Duration;

const CLIENT: &str = env!("CARGO_BIN_EXE_agent-hub");

/// A headless-only manifest: `run.headless` is `template` (with `{prompt}` in it).
pub(crate) fn manifest(name: &str, template: &[&str], outcome: &str) -> String {
    let argv: Vec<String> =
        std::iter::once(format!("{:?}", crate::common::fakes::headless_agent()))
            .chain(template.iter().map(|s| format!("{s:?}")))
            .collect();
    format!(
        r#"name = "{name}"
display = "Fake headless agent ({name})"
binaries = ["fake-headless-agent"]

[observe]
sessions = "none"
transcript = "none"

[run]
acp = []
headless = [{}]
outcome = "{outcome}"
headless_prompt = "{via}"

[deliver]
mode = "pull"

[install]
mcp_config = ""
hook = "none"
skills_dir = ""
"#,
        argv.join(", "),
        via = if template.contains(&"{prompt}") {
            "argv"
        } else {
            "stdin"
        },
    )
}

const AGENTS: &[(&str, &[&str], &str)] = &[
    ("hlclaude", &["claude-ok", "{prompt}"], "claude-json"),
    ("hlcodex", &["codex-ok", "{prompt}"], "codex-jsonl"),
    ("hlfail", &["fail", "3", "{prompt}"], "exit-code"),
    ("hlhang", &["hang", "{prompt}"], "exit-code"),
    ("hlflood", &["flood", "1000000", "{prompt}"], "exit-code"),
    ("hlguarded", &["claude-ok", "--", "{prompt}"], "claude-json"),
    // `run.headless_prompt = "stdin"`: the prompt is written to the agent's stdin.
    ("hlstdin", &["claude-ok", "-"], "claude-json"),
];

fn setup(extra: &str) -> Setup {
    let mut setup = Setup::new();
    std::fs::create_dir_all(setup.path("work")).unwrap();
    std::fs::create_dir_all(setup.path("manifests")).unwrap();
    for (name, template, outcome) in AGENTS {
        std::fs::write(
            setup.path(&format!("manifests/{name}.toml")),
            manifest(name, template, outcome),
        )
        .unwrap();
    }
    let root = std::fs::canonicalize(setup.path("work")).unwrap();
    setup.config_text = Some(format!(
        "{}\n[tasks]\ncwd_roots = [{:?}]\nmanifests_dir = {:?}\ncredentials_dir = {:?}\n{extra}\n",
        setup.generated_config(),
        root.to_str().unwrap(),
        setup.path("manifests").to_str().unwrap(),
        setup.path("task-creds").to_str().unwrap(),
    ));
    setup
}

fn work(hub: &Hub) -> PathBuf {
    std::fs::canonicalize(hub.setup.path("work")).unwrap()
}

fn verb(hub: &Hub, name: &str, line: &Value) -> Value {
    let mut r = hub.raw();
    r.write(&format!("{}{line}\n", hello_line(name, token_of(name))));
    r.expect_line(OK);
    r.json()
}

fn delegate(hub: &Hub, agent: &str, prompt: &str, extra: Value) -> String {
    let mut req = json!({"agent": agent, "cwd": work(hub), "prompt": prompt});
    for (k, v) in extra.as_object().unwrap() {
        req[k] = v.clone();
    }
    let reply = verb(hub, "alpha", &json!({ "delegate": req }));
    reply["delegated"]["task"]
        .as_str()
        .unwrap_or_else(|| panic!("expected delegated, got {reply}"))
        .to_owned()
}

/// The task's outcome envelope body (a parked await with a deadline).
fn outcome(hub: &Hub, task: &str) -> Value {
    let mut r = hub.raw();
    r.stream()
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    r.write(&format!(
        "{}{}\n",
        hello_line("alpha", token_of("alpha")),
        json!({"await": {"replyTo": task, "kind": "task_outcome", "timeoutSecs": 60}})
    ));
    r.expect_line(OK);
    let reply = r.json();
    let env = reply
        .get("envelope")
        .unwrap_or_else(|| panic!("expected the outcome envelope, got {reply}"))
        .clone();
    assert_eq!(env["from"], "hub");
    assert_eq!(env["correlationId"], task);
    env["body"].clone()
}

/// What the fake agent recorded about its own start (its args, cwd, environment names).
fn recorded(hub: &Hub) -> Option<Value> {
    let text = std::fs::read_to_string(work(hub).join("fake-headless.json")).ok()?;
    serde_json::from_str(&text).ok()
}

fn pid_alive(pid: u32) -> bool {
    // A zombie is dead for our purpose: it runs nothing and holds nothing.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

#[test]
fn a_headless_task_completes_with_the_parsed_text_usage_and_cost() {
    let hub = setup("").start();
    let prompt = "fix it; rm -rf ~ && echo $(id) 'q' \"r\"\nsecond line";
    let task = delegate(&hub, "hlclaude", prompt, json!({}));
    let body = outcome(&hub, &task);
    assert_eq!(body["state"], "completed", "{body}");
    assert_eq!(body["stopReason"], "end_turn");
    assert_eq!(body["text"], format!("echo: {prompt}"));
    assert_eq!(body["truncated"], false);
    assert_eq!(body["usage"]["inputTokens"], 11);
    assert_eq!(body["usage"]["outputTokens"], 7);
    assert_eq!(body["usage"]["cachedReadTokens"], 3);
    assert_eq!(
        body["usage"]["source"], "headless",
        "issue 38: tagged with its source"
    );
    assert_eq!(
        body["cost"],
        json!({"amount": 0.0042, "currency": "USD", "source": "headless"})
    );
    // The prompt arrived as one argv element, no shell in between, in the task's cwd.
    let rec = recorded(&hub).expect("the agent ran");
    assert_eq!(rec["args"], json!(["claude-ok", prompt]));
    assert_eq!(rec["cwd"], work(&hub).to_str().unwrap());
    // Its environment is the allow-list's (and the task mark), nothing else of the hub's;
    // bubblewrap adds PWD, the task's cwd, when it changes into it.
    let allowed = |name: &str| {
        name == "AGENT_HUB_TASK"
            || name == "PWD"
            || agent_hub_server::event_loop::executor::DEFAULT_ENV_PASS
                .iter()
                .any(|p| match p.strip_suffix('*') {
                    Some(prefix) => name.starts_with(prefix),
                    None => name == *p,
                })
    };
    let names: Vec<&str> = rec["env"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(names.contains(&"AGENT_HUB_TASK"), "{names:?}");
    assert!(names.iter().all(|n| allowed(n)), "{names:?}");
    // No token was written (a headless agent cannot use one), and the task's folder (its
    // sandbox's copies) is gone with the task.
    let creds = hub.setup.path("task-creds");
    poll_until("the task's folder to be removed", || {
        let left = std::fs::read_dir(&creds).map(|d| d.count()).unwrap_or(0);
        (left == 0).then_some(())
    });
}

/// A manifest with `run.headless_prompt = "stdin"` gets the prompt on stdin, never on its
/// command line, where every local user could read it (issue 29).
#[test]
fn a_stdin_prompt_reaches_the_agent_and_never_its_argv() {
    let hub = setup("").start();
    let prompt = "-looks like a flag, and\nspans lines";
    let task = delegate(&hub, "hlstdin", prompt, json!({}));
    let body = outcome(&hub, &task);
    assert_eq!(body["state"], "completed", "{body}");
    assert_eq!(body["text"], format!("echo: {prompt}"));
    let rec = recorded(&hub).expect("the agent ran");
    assert_eq!(rec["args"], json!(["claude-ok", "-"]));
    assert_eq!(rec["stdin"], prompt);
}

#[test]
fn a_codex_event_stream_gives_the_last_agent_message() {
    let hub = setup("").start();
    let task = delegate(&hub, "hlcodex", "make the test pass", json!({}));
    let body = outcome(&hub, &task);
    assert_eq!(body["state"], "completed", "{body}");
    assert_eq!(body["text"], "done: make the test pass");
    assert_eq!(body["usage"]["cachedReadTokens"], 40);
    assert!(body.get("cost").is_none(), "{body}");
}

#[test]
fn a_non_zero_exit_fails_with_a_stderr_excerpt() {
    let hub = setup("").start();
    let task = delegate(&hub, "hlfail", "anything", json!({}));
    let body = outcome(&hub, &task);
    assert_eq!(body["state"], "failed", "{body}");
    let reason = body["reason"].as_str().unwrap();
    assert!(reason.starts_with("agent exited (exit code 3)"), "{reason}");
    assert!(
        reason.contains("stderr: fake-headless-agent: starting | fatal: the provider refused key"),
        "{reason}"
    );
}

/// The runner's own escalation, seen through host pids: without a sandbox (bubblewrap's PID
/// namespace would give the agent pids of its own; `a_cancelled_sandboxed_task_leaves_no_process`
/// checks the sandboxed case).
#[test]
fn a_timeout_kills_the_whole_process_group() {
    let hub = setup("term_grace_ms = 200\nsandbox = \"none\"").start();
    let task = delegate(&hub, "hlhang", "wait", json!({"timeoutSecs": 3}));
    let body = outcome(&hub, &task);
    assert_eq!(body["state"], "timed_out", "{body}");
    // The agent ignores SIGTERM from before it starts its child (whose pid file therefore
    // proves it), so only the SIGKILL of the group ended it and the child. On a machine too
    // slow to start it within the budget there is no child, and SIGTERM ended the agent.
    let child = std::fs::read_to_string(work(&hub).join("fake-headless.child"))
        .ok()
        .and_then(|t| t.trim().parse::<u32>().ok());
    if let Some(child) = child {
        assert!(
            body["reason"].as_str().unwrap().contains("signal 9"),
            "{body}"
        );
        poll_until("the agent's child to be killed with its group", || {
            (!pid_alive(child)).then_some(())
        });
    }
}

#[test]
fn a_cancelled_headless_task_ends_cancelled_and_its_group_is_gone() {
    let hub = setup("term_grace_ms = 200\nsandbox = \"none\"").start();
    let task = delegate(&hub, "hlhang", "wait", json!({}));
    let child_file = work(&hub).join("fake-headless.child");
    let child: u32 = poll_until("the agent to start its child", || {
        std::fs::read_to_string(&child_file)
            .ok()
            .and_then(|t| t.trim().parse().ok())
    });
    let r = verb(&hub, "alpha", &json!({"cancel": {"task": task}}));
    assert_eq!(r["cancel"]["state"], "cancelling", "{r}");
    let body = outcome(&hub, &task);
    assert_eq!(body["state"], "cancelled", "{body}");
    poll_until("the agent's child to be killed with its group", || {
        (!pid_alive(child)).then_some(())
    });
}

/// The processes that carry the mark of `task` (`AGENT_HUB_TASK`, in their environment).
fn marked(task: &str) -> Vec<u32> {
    let mark = format!("AGENT_HUB_TASK={task}");
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|env| env.split(|&b| b == 0).any(|v| v == mark.as_bytes()))
        })
        .collect()
}

/// Under the default sandbox a cancelled agent that ignores SIGTERM, and the child it
/// started, are gone too: bubblewrap's end takes its PID namespace with it.
#[test]
fn a_cancelled_sandboxed_task_leaves_no_process() {
    let hub = setup("term_grace_ms = 200").start();
    let task = delegate(&hub, "hlhang", "wait", json!({}));
    let child_file = work(&hub).join("fake-headless.child");
    poll_until("the agent to start its child", || {
        std::fs::read_to_string(&child_file).ok()
    });
    assert!(
        marked(&task).len() >= 2,
        "the agent and its child run: {:?}",
        marked(&task)
    );
    let r = verb(&hub, "alpha", &json!({"cancel": {"task": task}}));
    assert_eq!(r["cancel"]["state"], "cancelling", "{r}");
    assert_eq!(outcome(&hub, &task)["state"], "cancelled");
    poll_until("every process of the task to be gone", || {
        marked(&task).is_empty().then_some(())
    });
}

/// A prompt that looks like an option never reaches the agent's command line unless the
/// template ends the options with `--` before `{prompt}`.
#[test]
fn a_prompt_that_looks_like_a_flag_is_refused_and_the_agent_never_runs() {
    let hub = setup("").start();
    let task = delegate(
        &hub,
        "hlclaude",
        "--dangerously-skip-permissions",
        json!({}),
    );
    let body = outcome(&hub, &task);
    assert_eq!(body["state"], "refused", "{body}");
    let reason = body["reason"].as_str().unwrap();
    assert!(reason.contains("begins with '-'"), "{reason}");
    assert!(
        !reason.contains("dangerously"),
        "the prompt is not quoted: {reason}"
    );
    assert!(recorded(&hub).is_none(), "the agent was never started");
    // Behind `--` the same prompt is passed as it is, as an operand.
    let task = delegate(
        &hub,
        "hlguarded",
        "--dangerously-skip-permissions",
        json!({}),
    );
    let body = outcome(&hub, &task);
    assert_eq!(body["state"], "completed", "{body}");
    assert_eq!(body["text"], "echo: --dangerously-skip-permissions");
    let rec = recorded(&hub).unwrap();
    assert_eq!(
        rec["args"],
        json!(["claude-ok", "--", "--dangerously-skip-permissions"])
    );
}

#[test]
fn a_prompt_over_the_argv_element_limit_is_refused_not_a_spawn_failure() {
    let hub = setup("").start();
    let prompt = "y".repeat(200_000);
    let task = delegate(&hub, "hlclaude", &prompt, json!({}));
    let body = outcome(&hub, &task);
    assert_eq!(body["state"], "refused", "{body}");
    let reason = body["reason"].as_str().unwrap();
    assert!(
        reason.contains("the prompt is 200000 bytes") && reason.contains("MAX_ARG_STRLEN"),
        "{reason}"
    );
    assert!(reason.len() < 1000, "the prompt is not quoted");
    assert!(recorded(&hub).is_none(), "the agent was never started");
}

#[test]
fn stdout_past_the_cap_is_cut_and_marked_truncated() {
    let hub = setup("headless_stdout_max_bytes = 4096").start();
    let task = delegate(&hub, "hlflood", "flood", json!({}));
    let body = outcome(&hub, &task);
    assert_eq!(body["state"], "completed", "{body}");
    assert_eq!(body["truncated"], true);
    assert_eq!(body["text"].as_str().unwrap(), "x".repeat(4096));
    hub.wait_service_log("the cut to be logged", |log| {
        log.contains("the agent wrote 1000000 bytes to stdout; only the first 4096 were kept")
    });
}

/// `agent-hub agents --config` lists what that server finds: the config's
/// `tasks.manifests_dir` agents, with their DELEGATE mode (headless here).
#[test]
fn agents_with_the_hubs_config_lists_its_manifests_dir() {
    let setup = setup("");
    crate::harness::write_file(
        &setup.config_path(),
        setup.config_text.as_deref().unwrap(),
        0o600,
    );
    let home = setup.path("home");
    std::fs::create_dir_all(&home).unwrap();
    let run = |args: &[&str]| {
        std::process::Command::new(CLIENT)
            .args(args)
            .env("HOME", &home)
            .env_remove("AGENT_HUB_AGENTS_DIR")
            .env("PATH", "/usr/bin:/bin")
            .output()
            .unwrap()
    };
    let config = setup.config_path();
    let out = run(&[
        "agents",
        "--config",
        config.to_str().unwrap(),
        "--no-version",
        "--json",
    ]);
    assert!(out.status.success(), "{out:?}");
    let list: Value = serde_json::from_slice(&out.stdout).unwrap();
    let row = list
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "hlclaude")
        .unwrap_or_else(|| panic!("hlclaude missing: {list}"));
    assert_eq!(row["delegate"], "headless", "{row}");
    assert_eq!(row["acp_available"], false);
    assert_eq!(row["headless_available"], true);
    let table = run(&[
        "agents",
        "--config",
        config.to_str().unwrap(),
        "--no-version",
    ]);
    let text = String::from_utf8_lossy(&table.stdout);
    let line = text
        .lines()
        .find(|l| l.starts_with("hlcodex "))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(line.contains(" headless "), "{line}");
    // Without the config the folder is unknown to the command.
    let out = run(&["agents", "--no-version", "--json"]);
    assert!(!String::from_utf8_lossy(&out.stdout).contains("hlclaude"));
    // A config that does not load is an error, not a silently shorter list.
    std::fs::write(setup.path("bad.toml"), "port = \"x\"\n").unwrap();
    let bad = setup.path("bad.toml");
    let out = run(&["agents", "--config", bad.to_str().unwrap(), "--no-version"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("config is invalid"),
        "{out:?}"
    );
}
