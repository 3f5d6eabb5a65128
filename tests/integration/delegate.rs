//! Delegated work through the real binaries (issue 11, docs/delegation.md): the hub runs a
//! task on `fake-acp-agent` (crates/test-fakes/src/bin/fake-acp-agent.rs) named by a manifest in the config's
//! `tasks.manifests_dir`, and the delegator learns the outcome as an envelope from `hub`
//! correlated to the task id. Every wait is an await with a deadline, never a sleep.

use crate::harness::{hello_line, token_of, Hub, Setup, OK};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// A manifest for the fake agent: `run.acp` is its absolute path and a scenario.
pub(crate) fn manifest(name: &str, scenario: &[&str]) -> String {
    format!(
        r#"name = "{name}"
display = "Fake ACP agent ({name})"
binaries = ["fake-acp-agent"]

[observe]
sessions = "none"
transcript = "none"

[run]
acp = {}
headless = []
outcome = "exit-code"

[deliver]
mode = "pull"

[install]
mcp_config = ""
hook = "none"
skills_dir = ""
"#,
        fake_acp(scenario)
    )
}

/// A hub with `[tasks]` on, the fake agent under several scenarios, and `work/` as the only
/// working-directory root. `extra` is appended to the `[tasks]` table.
fn setup_with(extra: &str, sqlite: bool) -> Setup {
    let mut setup = Setup::new();
    if sqlite {
        setup = setup.with_sqlite_store(1 << 30);
    }
    std::fs::create_dir_all(setup.path("work/sub")).unwrap();
    std::fs::create_dir_all(setup.path("manifests")).unwrap();
    for (name, scenario) in [
        ("fake", &["end_turn", "2"][..]),
        ("fakehang", &["hang"][..]),
        ("fakecrash", &["crash", "7"][..]),
        ("fakemcp", &["mcp_call"][..]),
        ("fakesend", &["mcp_send", "alpha"][..]),
        // Start in `auto`, where they mail alpha without asking (docs/acp.md "Session modes").
        ("fakeauto", &["auto_mode", "both", "alpha"][..]),
        ("fakenoask", &["auto_mode", "no_ask", "alpha"][..]),
    ] {
        std::fs::write(
            setup.path(&format!("manifests/{name}.toml")),
            manifest(name, scenario),
        )
        .unwrap();
    }
    let tasks = tasks_section(&setup, extra);
    setup.config_text = Some(format!("{}{tasks}", setup.generated_config()));
    setup
}

pub(crate) fn tasks_section(setup: &Setup, extra: &str) -> String {
    let root = std::fs::canonicalize(setup.path("work")).unwrap();
    format!(
        "\n[tasks]\ncwd_roots = [{:?}]\nmanifests_dir = {:?}\ncredentials_dir = {:?}\n{extra}\n",
        root.to_str().unwrap(),
        setup.path("manifests").to_str().unwrap(),
        setup.path("task-creds").to_str().unwrap(),
    )
}

/// Restarts a stopped hub on its port: the custom config is written again with the port
/// pinned, so the task identities' MCP servers and the test's clients find it.
fn restart(hub: &mut Hub, extra: &str) {
    hub.setup.port = hub.port;
    let text = format!(
        "{}{}",
        hub.setup.generated_config(),
        tasks_section(&hub.setup, extra)
    );
    hub.setup.config_text = Some(text);
    hub.restart();
}

pub(crate) fn work(hub: &Hub) -> PathBuf {
    std::fs::canonicalize(hub.setup.path("work")).unwrap()
}

/// One verb line as `name`; returns the hub's reply.
pub(crate) fn verb(hub: &Hub, name: &str, line: &Value) -> Value {
    let mut r = hub.raw();
    r.write(&format!("{}{line}\n", hello_line(name, token_of(name))));
    r.expect_line(OK);
    r.json()
}

fn delegate(hub: &Hub, from: &str, agent: &str, extra: Value) -> Value {
    let mut req = json!({"agent": agent, "cwd": work(hub), "prompt": "do the thing"});
    for (k, v) in extra.as_object().unwrap() {
        req[k] = v.clone();
    }
    verb(hub, from, &json!({ "delegate": req }))
}

pub(crate) fn task_id(reply: &Value) -> String {
    let id = reply["delegated"]["task"]
        .as_str()
        .unwrap_or_else(|| panic!("expected delegated, got {reply}"));
    assert!(id.starts_with("task-") && id.len() == 37, "{id}");
    id.to_owned()
}

/// Waits (a parked await with a deadline, no sleep) for the task's outcome envelope.
pub(crate) fn outcome(hub: &Hub, name: &str, task: &str) -> Value {
    let mut r = hub.raw();
    r.stream()
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    r.write(&format!(
        "{}{}\n",
        hello_line(name, token_of(name)),
        json!({"await": {"replyTo": task, "kind": "task_outcome", "timeoutSecs": 60}})
    ));
    r.expect_line(OK);
    let reply = r.json();
    let env = reply
        .get("envelope")
        .unwrap_or_else(|| panic!("expected the outcome envelope, got {reply}"))
        .clone();
    assert_eq!(env["from"], "hub");
    assert_eq!(env["to"], name);
    assert_eq!(env["kind"], "task_outcome");
    assert_eq!(env["correlationId"], task);
    assert_eq!(env["body"]["task"], task);
    env["body"].clone()
}

pub(crate) fn status(hub: &Hub, name: &str, task: &str) -> Value {
    verb(hub, name, &json!({"task_status": {"task": task}}))["task_status"].clone()
}

/// Polls `task_status` until `pred` holds (bounded; each poll is a round trip, not a sleep).
pub(crate) fn wait_status(
    hub: &Hub,
    name: &str,
    task: &str,
    pred: impl Fn(&Value) -> bool,
) -> Value {
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        let s = status(hub, name, task);
        if pred(&s) {
            return s;
        }
        assert!(Instant::now() < until, "task status never matched: {s}");
        std::thread::yield_now();
    }
}

#[test]
fn a_local_task_runs_to_end_turn_and_its_outcome_reaches_the_delegator() {
    let hub = setup_with("", false).start();
    let reply = delegate(&hub, "alpha", "fake", json!({}));
    let task = task_id(&reply);
    let body = outcome(&hub, "alpha", &task);
    assert_eq!(body["state"], "completed", "{body}");
    assert_eq!(body["stopReason"], "end_turn");
    assert_eq!(body["agent"], "fake");
    assert!(body["text"].as_str().unwrap().contains("chunk"), "{body}");
    // Exactly one outcome: nothing else is queued for alpha.
    assert!(hub.drain("alpha").is_empty());
    let s = status(&hub, "alpha", &task);
    assert_eq!(s["state"], "completed");
    // The task's credential file is removed when the runner ends (just after the outcome),
    // and the folder is private.
    let creds = hub.setup.path("task-creds");
    crate::harness::poll_until("the task's credential file to be removed", || {
        let left = std::fs::read_dir(&creds).map(|d| d.count()).unwrap_or(0);
        (left == 0).then_some(())
    });
    assert_eq!(crate::harness::mode_of(&creds) & 0o777, 0o700);
    // The audit log has the task's life.
    let events: Vec<String> = hub
        .audit()
        .iter()
        .filter_map(|r| r["event"].as_str().map(str::to_owned))
        .filter(|e| e.starts_with("task_"))
        .collect();
    assert!(events.contains(&"task_accepted".to_owned()), "{events:?}");
    assert!(events.contains(&"task_ended".to_owned()), "{events:?}");
}

#[test]
fn only_the_delegator_sees_or_cancels_a_task() {
    let hub = setup_with("", false).start();
    let task = task_id(&delegate(&hub, "alpha", "fakehang", json!({})));
    assert_eq!(
        status(&hub, "beta", &task),
        json!({"task": task, "state": "unknown"})
    );
    let r = verb(&hub, "beta", &json!({"cancel": {"task": task}}));
    assert_eq!(r["cancel"]["state"], "unknown", "{r}");
    wait_status(&hub, "alpha", &task, |s| s["state"] == "running");
    let r = verb(&hub, "alpha", &json!({"cancel": {"task": task}}));
    assert!(
        ["cancelling", "cancelled"].contains(&r["cancel"]["state"].as_str().unwrap()),
        "{r}"
    );
    let body = outcome(&hub, "alpha", &task);
    assert_eq!(body["state"], "cancelled", "{body}");
    // beta's list has nothing; alpha's has the task.
    let l = verb(&hub, "beta", &json!({"tasks": {}}));
    assert_eq!(l["tasks"]["tasks"], json!([]));
    let l = verb(&hub, "alpha", &json!({"tasks": {}}));
    assert_eq!(l["tasks"]["tasks"][0]["task"], task);
}

#[test]
fn a_task_past_its_timeout_ends_timed_out() {
    let hub = setup_with("", false).start();
    let task = task_id(&delegate(
        &hub,
        "alpha",
        "fakehang",
        json!({"timeoutSecs": 1}),
    ));
    let body = outcome(&hub, "alpha", &task);
    assert_eq!(body["state"], "timed_out", "{body}");
}

#[test]
fn an_agent_that_crashes_ends_failed_with_why() {
    let hub = setup_with("", false).start();
    let task = task_id(&delegate(&hub, "alpha", "fakecrash", json!({})));
    let body = outcome(&hub, "alpha", &task);
    assert_eq!(body["state"], "failed", "{body}");
    assert!(!body["reason"].as_str().unwrap_or("").is_empty(), "{body}");
}

#[test]
fn refusals_at_the_verb_are_errors_and_create_no_task() {
    let hub = setup_with("", false).start();
    let outside = hub.setup.path("cwd");
    for (req, want) in [
        (
            json!({"agent": "ghost", "cwd": work(&hub), "prompt": "p"}),
            "invalid delegate:",
        ),
        (
            json!({"agent": "fake", "cwd": outside, "prompt": "p"}),
            "invalid delegate:",
        ),
        (
            json!({"agent": "fake", "cwd": format!("{}/../cwd", work(&hub).display()), "prompt": "p"}),
            "invalid delegate:",
        ),
        (
            json!({"agent": "fake", "cwd": "relative/dir", "prompt": "p"}),
            "invalid delegate:",
        ),
        (
            json!({"agent": "/bin/sh", "cwd": work(&hub), "prompt": "p"}),
            "invalid delegate:",
        ),
        (
            json!({"agent": "fake", "cwd": work(&hub), "prompt": ""}),
            "invalid delegate:",
        ),
    ] {
        let r = verb(&hub, "alpha", &json!({ "delegate": req }));
        let err = r["error"]["message"]
            .as_str()
            .unwrap_or_else(|| panic!("{req}: {r}"));
        assert!(err.starts_with(want), "{req}: {err}");
    }
    let l = verb(&hub, "alpha", &json!({"tasks": {}}));
    assert_eq!(l["tasks"]["tasks"], json!([]));
}

#[test]
fn tasks_beyond_the_concurrency_cap_wait_in_order() {
    let hub = setup_with("max_concurrent = 1", false).start();
    let first = task_id(&delegate(&hub, "alpha", "fakehang", json!({})));
    let second = task_id(&delegate(&hub, "alpha", "fake", json!({})));
    wait_status(&hub, "alpha", &first, |s| s["state"] == "running");
    let s = status(&hub, "alpha", &second);
    assert_eq!(s["state"], "queued", "{s}");
    assert_eq!(s["position"], 1, "{s}");
    verb(&hub, "alpha", &json!({"cancel": {"task": first}}));
    assert_eq!(outcome(&hub, "alpha", &first)["state"], "cancelled");
    assert_eq!(outcome(&hub, "alpha", &second)["state"], "completed");
}

#[test]
fn the_task_agent_mails_its_delegator_through_the_hubs_mcp_server() {
    let hub = setup_with("", false).start();
    // The fake agent starts the hub's MCP server as the session names it and calls `whoami`.
    let task = task_id(&delegate(&hub, "alpha", "fakemcp", json!({})));
    let body = outcome(&hub, "alpha", &task);
    assert_eq!(body["state"], "completed", "{body}");
    // The tool answered with the task identity's name (whoami).
    assert!(body["text"].as_str().unwrap().contains(&task), "{body}");
}

#[test]
fn mid_task_mail_from_the_task_identity_reaches_the_delegator() {
    let hub = setup_with("", false).start();
    let task = task_id(&delegate(&hub, "alpha", "fakesend", json!({})));
    let body = outcome(&hub, "alpha", &task);
    assert_eq!(body["state"], "completed", "{body}");
    let env = hub
        .poll_envelope("alpha", crate::harness::AWAIT_NOW)
        .expect("the task's note");
    assert_eq!(env["from"], task.as_str());
    assert_eq!(env["kind"], "note");
    assert_eq!(env["body"]["from_task"], "hello from the task");
}

/// The issue-29 finding: an agent that starts in a mode where it decides by itself (Claude
/// Code's adapter 0.101 starts in `auto`) sent the hub's `send` under `permission = "reject"`
/// without the hub ever being asked. Now the session is switched to the agent's asking mode
/// first, so the hub is asked and rejects; an agent that cannot be switched is refused.
#[test]
fn under_reject_an_agent_starting_in_auto_is_asked_and_its_send_rejected() {
    // `ask` is the default (issue 37); this is about `reject`.
    let hub = setup_with("permission = \"reject\"", false).start();
    let task = task_id(&delegate(&hub, "alpha", "fakeauto", json!({})));
    let body = outcome(&hub, "alpha", &task);
    assert_eq!(body["state"], "completed", "{body}");
    assert_eq!(body["text"], "tool not run: permission reject", "{body}");
    let task2 = task_id(&delegate(&hub, "alpha", "fakenoask", json!({})));
    let body = outcome(&hub, "alpha", &task2);
    assert_eq!(body["state"], "refused", "{body}");
    let reason = body["reason"].as_str().unwrap();
    assert!(reason.contains("mode where it asks"), "{reason}");
    assert!(reason.contains("permission = \"reject\""), "{reason}");
    // Neither agent's mail reached alpha: the only envelopes were the two outcomes.
    assert!(hub.drain("alpha").is_empty());
    let needle = format!("task {task}: permission asked for tool Write notes: rejected");
    hub.wait_service_log("the rejected permission", |log| log.contains(&needle));
}

#[test]
fn under_an_explicit_allow_an_agent_without_an_asking_mode_runs_and_is_logged() {
    let hub = setup_with("agent_permission = { fakenoask = \"allow\" }", false).start();
    let task = task_id(&delegate(&hub, "alpha", "fakenoask", json!({})));
    let body = outcome(&hub, "alpha", &task);
    assert_eq!(body["state"], "completed", "{body}");
    assert!(
        body["text"]
            .as_str()
            .unwrap()
            .starts_with("tool ran unasked in mode auto"),
        "{body}"
    );
    let env = hub
        .poll_envelope("alpha", crate::harness::AWAIT_NOW)
        .expect("the task's note");
    assert_eq!(env["from"], task.as_str());
    hub.wait_service_log("the run-unasked warning", |log| {
        log.contains(&format!("task {task}: the agent will run without asking"))
    });
}

#[test]
fn a_task_identity_may_mail_only_its_delegator() {
    // fakesend mails alpha, but beta delegated: the send is refused and the agent says so.
    let hub = setup_with("", false).start();
    let task = task_id(&delegate(&hub, "beta", "fakesend", json!({})));
    let body = outcome(&hub, "beta", &task);
    assert!(body["text"].as_str().unwrap().contains("failed"), "{body}");
    assert!(hub.drain("alpha").is_empty());
}

#[test]
fn a_task_running_when_the_hub_dies_is_reported_hub_restarted_once() {
    let mut hub = setup_with("", true).start();
    let task = task_id(&delegate(&hub, "alpha", "fakehang", json!({})));
    wait_status(&hub, "alpha", &task, |s| s["state"] == "running");
    hub.kill();
    restart(&mut hub, "");
    let body = outcome(&hub, "alpha", &task);
    assert_eq!(body["state"], "hub_restarted", "{body}");
    assert!(hub.drain("alpha").is_empty());
    // Another restart does not report it again.
    hub.terminate();
    restart(&mut hub, "");
    assert!(hub.drain("alpha").is_empty());
    assert_eq!(status(&hub, "alpha", &task)["state"], "hub_restarted");
}

#[test]
fn a_queued_task_survives_a_restart_and_then_runs() {
    let mut hub = setup_with("max_concurrent = 1", true).start();
    let first = task_id(&delegate(&hub, "alpha", "fakehang", json!({})));
    let second = task_id(&delegate(&hub, "alpha", "fake", json!({})));
    wait_status(&hub, "alpha", &first, |s| s["state"] == "running");
    hub.kill();
    restart(&mut hub, "max_concurrent = 1");
    assert_eq!(outcome(&hub, "alpha", &first)["state"], "hub_restarted");
    assert_eq!(outcome(&hub, "alpha", &second)["state"], "completed");
}

#[test]
fn a_hub_without_tasks_refuses_delegation_clearly() {
    let hub = Setup::new().start();
    let r = verb(
        &hub,
        "alpha",
        &json!({"delegate": {"agent": "fake", "cwd": "/tmp", "prompt": "p"}}),
    );
    assert!(
        r["error"]["message"]
            .as_str()
            .is_some_and(|e| e.contains("not enabled")),
        "{r}"
    );
}

/// The task identity's token and the delegator's prompt reach no log: the token is read
/// from the credential file while the task runs (as an attacker on the same account could),
/// then searched for in the service log, the audit log and the hub's stderr after the task
/// ended; the prompt, a marker, likewise (the audit log records only its size).
#[test]
fn neither_the_task_token_nor_the_prompt_reaches_a_log() {
    let hub = setup_with("", false).start();
    let prompt = "PROMPT-MARKER-7f3a do the thing";
    let mut req = json!({"agent": "fakehang", "cwd": work(&hub), "prompt": prompt});
    req["timeoutSecs"] = json!(30);
    let task = task_id(&verb(&hub, "alpha", &json!({ "delegate": req })));
    wait_status(&hub, "alpha", &task, |s| s["state"] == "running");
    // The task's own folder (issue 29: never a folder shared by all tasks).
    let cred = hub.setup.path(&format!("task-creds/{task}/token"));
    let token = crate::harness::poll_until("the task's credential file", || {
        std::fs::read_to_string(&cred)
            .ok()
            .filter(|t| !t.trim().is_empty())
    });
    let token = token.trim().to_owned();
    assert_eq!(crate::harness::mode_of(&cred) & 0o777, 0o600);
    assert_eq!(
        crate::harness::mode_of(cred.parent().unwrap()) & 0o777,
        0o700
    );
    // The token works as the task identity while the task runs …
    let mut r = hub.raw();
    r.write(&format!("{}\n", hello_line(&task, &token)));
    r.expect_line(OK);
    // … and a wrong one for the same name is refused.
    let mut r = hub.raw();
    r.write(&format!("{}\n", hello_line(&task, &format!("{token}x"))));
    assert!(r.line().contains("authentication failed"));
    verb(&hub, "alpha", &json!({"cancel": {"task": task}}));
    assert_eq!(outcome(&hub, "alpha", &task)["state"], "cancelled");
    let logs = [
        hub.service_log(),
        std::fs::read_to_string(hub.audit_path()).unwrap(),
    ];
    for text in &logs {
        assert!(!text.contains(&token), "the task token reached a log");
        assert!(!text.contains("PROMPT-MARKER"), "the prompt reached a log");
    }
    assert!(!hub.stderr().contains(&token));
    // After the outcome the identity is gone.
    let mut r = hub.raw();
    r.write(&format!("{}\n", hello_line(&task, &token)));
    assert!(r.line().contains("authentication failed"));
}

/// A prompt one byte over `tasks.prompt_max_bytes` is refused at the verb, one at the cap is
/// accepted: the cap is the config's, exactly.
#[test]
fn the_prompt_cap_is_exact() {
    let hub = setup_with("prompt_max_bytes = 16", false).start();
    let at_cap = "x".repeat(16);
    let over = "x".repeat(17);
    let r = verb(
        &hub,
        "alpha",
        &json!({"delegate": {"agent": "fake", "cwd": work(&hub), "prompt": over}}),
    );
    let err = r["error"]["message"].as_str().unwrap_or_default();
    assert!(err.starts_with("invalid delegate:"), "{r}");
    assert!(
        !err.contains("xxxxxxxxxxxxxxxxx"),
        "the refusal quotes the prompt: {err}"
    );
    let r = verb(
        &hub,
        "alpha",
        &json!({"delegate": {"agent": "fake", "cwd": work(&hub), "prompt": at_cap}}),
    );
    let task = task_id(&r);
    assert_eq!(outcome(&hub, "alpha", &task)["state"], "completed");
}

/// A hub stopped right after a task's outcome still reaps the agent: the outcome comes
/// before the runner's shutdown escalation (close stdin, TERM, KILL), and an agent that
/// ignores stdin EOF (codex-acp does, seen by scripts/e2e-agents.sh) would otherwise outlive
/// the hub, whose runner thread ends with it.
#[test]
fn a_hub_stopped_just_after_an_outcome_still_reaps_the_agent() {
    let setup = setup_with("", false);
    std::fs::write(
        setup.path("manifests/fakeeof.toml"),
        manifest("fakeeof", &["ignore_eof"]),
    )
    .unwrap();
    let mut hub = setup.start();
    let task = task_id(&delegate(&hub, "alpha", "fakeeof", json!({})));
    let log = hub.wait_service_log("the agent's pid", |s| {
        s.contains(&format!("task {task}: agent started (pid "))
    });
    let marker = format!("task {task}: agent started (pid ");
    let at = log.find(&marker).unwrap() + marker.len();
    let pid: libc::pid_t = log[at..at + log[at..].find(')').unwrap()].parse().unwrap();
    assert_eq!(outcome(&hub, "alpha", &task)["state"], "completed");
    // At once: the agent still runs (it ignores EOF; its TERM comes after the stdin grace).
    hub.terminate();
    // SAFETY: kill(2) with signal 0 only checks whether the pid exists.
    let alive = unsafe { libc::kill(pid, 0) } == 0;
    if alive {
        // Not ours to leave behind: the agent the hub started and abandoned.
        // SAFETY: as above; the pid is the fake agent the hub started for this test.
        unsafe { libc::kill(-pid, libc::SIGKILL) };
    }
    assert!(!alive, "the agent (pid {pid}) outlived the hub");
    assert!(
        hub.service_log()
            .contains(&format!("task {task}: agent exited")),
        "{}",
        hub.service_log()
    );
}

/// The fake agent's `run.acp` line for `scenario`, as TOML.
fn fake_acp(scenario: &[&str]) -> String {
    let mut acp = vec![format!("{:?}", crate::common::fakes::acp_agent())];
    acp.extend(scenario.iter().map(|s| format!("{s:?}")));
    format!("[{}]", acp.join(", "))
}

/// Delegates to `agent` (whose manifest the caller wrote) and expects it to complete.
fn runs_to_completion(hub: &Hub, agent: &str) {
    let task = task_id(&delegate(hub, "alpha", agent, json!({})));
    let body = outcome(hub, "alpha", &task);
    assert_eq!(body["state"], "completed", "{body}");
    assert_eq!(body["stopReason"], "end_turn");
    assert_eq!(body["agent"], agent);
}

/// `install.hook`, `hook_config`, `mcp_format` and `trust` are optional (docs/agents.md
/// "Defaults"): a manifest with none of them is still an agent a task can run on.
#[test]
fn a_task_runs_on_a_manifest_without_install_hook_keys() {
    let setup = setup_with("", false);
    let text = format!(
        r#"name = "nohook"
display = "Fake ACP agent without hook keys"
binaries = ["fake-acp-agent"]

[observe]
sessions = "none"
transcript = "none"

[run]
acp = {}
headless = []
outcome = "exit-code"

[deliver]
mode = "pull"

[install]
mcp_config = ""
skills_dir = ""
"#,
        fake_acp(&["end_turn", "2"])
    );
    std::fs::write(setup.path("manifests/nohook.toml"), text).unwrap();
    let hub = setup.start();
    runs_to_completion(&hub, "nohook");
}

/// The seed's §3 example manifest as written (protocol/manifests/valid/opencode.toml), with
/// only `run.acp` pointed at the fake agent: it replaces the built-in opencode, and a task
/// named "opencode" runs on it.
#[test]
fn a_task_runs_on_the_seeds_manifest_layout() {
    let setup = setup_with("", false);
    let seed = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("protocol/manifests/valid/opencode.toml"),
    )
    .unwrap();
    let text = seed.replace("[\"opencode\", \"acp\"]", &fake_acp(&["end_turn", "2"]));
    assert_ne!(text, seed, "the seed's run.acp line was found");
    std::fs::write(setup.path("manifests/opencode.toml"), text).unwrap();
    let hub = setup.start();
    runs_to_completion(&hub, "opencode");
}
