//! Agent manifests read again while the hub runs (issue 35; docs/operations.md "Reloading
//! agent manifests", docs/delegation.md "Which agents can take delegated work"), through the
//! real binaries: a manifest added to `tasks.manifests_dir` is refused by `delegate` with the
//! hint until `agent-hub-server reload --config` (or SIGHUP), then runs; a broken manifest or
//! an unreadable folder never takes a working agent away and is named; a removed one makes
//! its agent unknown to new tasks while its running task finishes; and `agent-hub agents
//! --config` lists as delegable exactly what `delegate` accepts, before and after a reload.
//! Every wait is a read with a deadline or a bounded poll, never a sleep.

use crate::delegate::{manifest, outcome, task_id, verb, wait_status};
use crate::harness::{run, Hub, Output, Setup, CLIENT, SERVER};
use serde_json::{json, Value};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The end of every unknown-agent refusal (`tasks::check::MANIFESTS_HINT`).
const HINT: &str = "agent manifests are read when the hub starts and on SIGHUP (agent-hub-server reload --config <the hub's config>)";

/// Writes a manifest as an operator would (mode 644: a group-writable one is refused).
fn write_manifest(dir: &Path, name: &str, text: &str) {
    let p = dir.join(format!("{name}.toml"));
    std::fs::write(&p, text).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
}

fn private_dir(p: &Path) {
    std::fs::create_dir_all(p).unwrap();
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// A hub with `[tasks]` (`extra` appended to the table), `work/` its one root and
/// `manifests/` its `tasks.manifests_dir`, holding `agents` (name, fake agent scenario).
fn setup(agents: &[(&str, &[&str])], extra: &str) -> Setup {
    let mut setup = Setup::new();
    std::fs::create_dir_all(setup.path("work")).unwrap();
    private_dir(&setup.path("manifests"));
    for (name, scenario) in agents {
        write_manifest(&setup.path("manifests"), name, &manifest(name, scenario));
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

fn manifests(hub: &Hub) -> PathBuf {
    hub.setup.path("manifests")
}

fn work(hub: &Hub) -> PathBuf {
    std::fs::canonicalize(hub.setup.path("work")).unwrap()
}

/// The `delegate` verb's reply for `agent` in `cwd`.
fn delegate_in(hub: &Hub, agent: &str, cwd: &Path) -> Value {
    verb(
        hub,
        "alpha",
        &json!({"delegate": {"agent": agent, "cwd": cwd, "prompt": "do the thing"}}),
    )
}

fn refusal(reply: &Value) -> String {
    reply["error"]["message"]
        .as_str()
        .unwrap_or_else(|| panic!("expected a refusal, got {reply}"))
        .to_owned()
}

/// Delegates to `agent` and returns its outcome's body.
fn run_task(hub: &Hub, agent: &str) -> Value {
    let task = task_id(&delegate_in(hub, agent, &work(hub)));
    outcome(hub, "alpha", &task)
}

/// `agent-hub-server reload --config <the hub's config>`.
fn reload(hub: &Hub) -> Output {
    let mut cmd = Command::new(SERVER);
    cmd.arg("reload")
        .arg("--config")
        .arg(hub.setup.config_path())
        .current_dir(hub.setup.path("cwd"));
    run(cmd, None)
}

/// The agents the hub's refusal says it can run, in its order.
fn hub_can_run(hub: &Hub) -> Vec<String> {
    let err = refusal(&delegate_in(hub, "ghost-35", &work(hub)));
    let list = err
        .strip_prefix("invalid delegate: unknown agent; this hub can run: ")
        .and_then(|rest| rest.strip_suffix(&format!("; {HINT}")))
        .unwrap_or_else(|| panic!("not an unknown-agent refusal with the hint: {err}"));
    list.split(", ").map(str::to_owned).collect()
}

#[test]
fn a_manifest_added_while_the_hub_runs_is_unknown_until_the_hub_reloads_then_runs() {
    let hub = setup(&[("fake", &["end_turn", "2"])], "").start();
    write_manifest(
        &manifests(&hub),
        "late",
        &manifest("late", &["end_turn", "2"]),
    );
    // The user's view: the CLI passes the hub's refusal through, hint and all.
    let out = hub.cli(
        "delegate",
        "alpha",
        &[
            "--agent",
            "late",
            "--cwd",
            work(&hub).to_str().unwrap(),
            "--prompt",
            "p",
        ],
    );
    out.assert_code(1);
    assert!(
        out.stderr
            .starts_with("agent-hub: invalid delegate: unknown agent; this hub can run: ")
            && out.stderr.contains(HINT),
        "{}",
        out.stderr
    );
    let can = hub_can_run(&hub);
    assert!(can.contains(&"fake".to_owned()) && !can.contains(&"late".to_owned()));
    // The one already known changes too: its next task must run the new argv.
    write_manifest(&manifests(&hub), "fake", &manifest("fake", &["crash", "7"]));
    let out = reload(&hub);
    out.assert_code(0);
    let pid = hub.pid();
    assert!(
        out.stdout
            .contains(&format!("the hub (pid {pid}) says: roster reloaded")),
        "{}",
        out.stdout
    );
    let said = format!("the hub (pid {pid}) says: agent manifests reloaded: ");
    let line = out
        .stdout
        .lines()
        .find(|l| l.starts_with(&said))
        .unwrap_or_else(|| panic!("no manifests line: {}", out.stdout));
    assert!(
        line.ends_with(r#"; added ["late"]; removed []; changed ["fake"]; kept []"#),
        "{line}"
    );
    assert!(hub_can_run(&hub).contains(&"late".to_owned()));
    let body = run_task(&hub, "late");
    assert_eq!(body["state"], "completed", "{body}");
    assert_eq!(body["agent"], "late");
    assert_eq!(
        run_task(&hub, "fake")["state"],
        "failed",
        "the new argv ran"
    );
    // The service log holds the same line, at INFO.
    let log = hub.service_log();
    assert!(
        log.lines()
            .any(|l| l.contains(" INFO agent manifests reloaded: ")
                && l.contains(r#"added ["late"]"#)),
        "{log}"
    );
}

#[test]
fn a_broken_manifest_keeps_the_others_working_and_is_named() {
    let hub = setup(
        &[("fake", &["end_turn", "2"]), ("fake2", &["end_turn", "2"])],
        "",
    )
    .start();
    let dir = manifests(&hub);
    write_manifest(&dir, "broken", "name = \"broken\"\n[run\n");
    // A working one edited into a broken one (a half-saved edit) keeps what it was.
    write_manifest(&dir, "fake2", "name = \"fake2\"\nthis is not toml\n");
    let out = reload(&hub);
    out.assert_code(0);
    for file in ["broken.toml", "fake2.toml"] {
        let path = dir.join(file);
        assert!(
            out.stderr.lines().any(|l| l
                .starts_with("agent-hub-server: warning: agent manifest skipped: ")
                && l.contains(path.to_str().unwrap())),
            "{file}: {}",
            out.stderr
        );
    }
    assert!(
        out.stderr.contains(&format!(
            "agent \"fake2\" keeps the manifest it had: {} no longer loads",
            dir.join("fake2.toml").display()
        )),
        "{}",
        out.stderr
    );
    assert!(
        out.stdout
            .contains(r#"added []; removed []; changed []; kept ["fake2"]"#),
        "{}",
        out.stdout
    );
    let log = hub.service_log();
    assert!(
        log.lines()
            .any(|l| l.contains(" WARN agent manifest skipped: ") && l.contains("broken.toml")),
        "{log}"
    );
    assert_eq!(run_task(&hub, "fake")["state"], "completed");
    assert_eq!(run_task(&hub, "fake2")["state"], "completed");
    let err = refusal(&delegate_in(&hub, "broken", &work(&hub)));
    assert!(
        err.contains("unknown agent") && err.ends_with(HINT),
        "{err}"
    );

    // A folder that cannot be read at all: the reload is refused, every agent stays.
    let aside = hub.setup.path("manifests-aside");
    std::fs::rename(&dir, &aside).unwrap();
    let out = reload(&hub);
    out.assert_code(1);
    assert!(
        out.stderr
            .contains("agent manifests reload refused, keeping the ")
            && out.stderr.contains(dir.to_str().unwrap())
            && out.stderr.contains("cannot read the manifests folder"),
        "{}",
        out.stderr
    );
    assert!(hub
        .service_log()
        .lines()
        .any(|l| l.contains(" ERROR agent manifests reload refused, keeping the ")));
    assert_eq!(run_task(&hub, "fake")["state"], "completed");
    assert_eq!(run_task(&hub, "fake2")["state"], "completed");
    std::fs::rename(&aside, &dir).unwrap();
}

/// The task's agent waits, through the hub's MCP `await`, for mail of kind `go` from its
/// delegator; meanwhile its manifest is removed and the hub reloads (SIGHUP this time).
#[test]
fn a_removed_manifest_is_unknown_for_new_tasks_while_its_running_task_finishes() {
    let mut setup = setup(
        &[("fake", &["end_turn", "2"]), ("waiter", &["mcp_call"])],
        "env_pass = [\"PATH\", \"HOME\", \"FAKE_ACP_*\"]",
    );
    setup.env = vec![
        ("FAKE_ACP_TOOL".into(), "await".into()),
        (
            "FAKE_ACP_TOOL_ARGS".into(),
            r#"{"kind":"go","timeoutSecs":60}"#.into(),
        ),
    ];
    let hub = setup.start();
    let task = task_id(&delegate_in(&hub, "waiter", &work(&hub)));
    wait_status(&hub, "alpha", &task, |s| s["state"] == "running");
    std::fs::remove_file(manifests(&hub).join("waiter.toml")).unwrap();
    hub.signal(libc::SIGHUP);
    hub.wait_service_log("the manifests reload", |log| {
        log.contains(r#"agent manifests reloaded: "#) && log.contains(r#"removed ["waiter"]"#)
    });
    let err = refusal(&delegate_in(&hub, "waiter", &work(&hub)));
    assert!(
        err.starts_with("invalid delegate: unknown agent; this hub can run: ")
            && !err.contains("waiter")
            && err.ends_with(HINT),
        "{err}"
    );
    assert_eq!(
        wait_status(&hub, "alpha", &task, |_| true)["state"],
        "running"
    );
    // Now the running task gets its mail and ends as it would have.
    hub.send("alpha", &task, "go", None, r#"{"now":true}"#);
    let body = outcome(&hub, "alpha", &task);
    assert_eq!(body["state"], "completed", "{body}");
    assert_eq!(body["agent"], "waiter");
    assert!(
        body["text"].as_str().unwrap_or("").contains("\"go\""),
        "{body}"
    );
    assert_eq!(run_task(&hub, "fake")["state"], "completed");
}

/// `agent-hub agents --config <hub config> --json`'s delegable agents, in its order, with
/// the same HOME and `$AGENT_HUB_AGENTS_DIR` as the hub.
fn cli_delegable(hub: &Hub, env: &[(String, String)]) -> (Vec<String>, Vec<String>) {
    let mut cmd = Command::new(CLIENT);
    cmd.args(["agents", "--no-version", "--json", "--config"])
        .arg(hub.setup.config_path())
        .envs(env.iter().map(|(k, v)| (k, v)))
        .current_dir(hub.setup.path("cwd"));
    let out = run(cmd, None);
    out.assert_code(0);
    let list: Vec<Value> = serde_json::from_str(&out.stdout).unwrap();
    let all = list
        .iter()
        .map(|a| a["name"].as_str().unwrap().to_owned())
        .collect();
    let delegable = list
        .iter()
        .filter(|a| a["delegate"] != "no")
        .map(|a| a["name"].as_str().unwrap().to_owned())
        .collect();
    (all, delegable)
}

/// Each agent `agents` lists passes `delegate`'s agent check exactly when `agents` says it
/// can take delegated work (the cwd outside the roots stops the accepted ones before any
/// task exists), and the hub's own list is `agents`' list. Returns that list.
fn agree(hub: &Hub, env: &[(String, String)]) -> Vec<String> {
    let (all, delegable) = cli_delegable(hub, env);
    assert_eq!(hub_can_run(hub), delegable, "the hub's list and agents'");
    let outside = hub.setup.path("cwd");
    for name in &all {
        let err = refusal(&delegate_in(hub, name, &outside));
        if delegable.contains(name) {
            assert!(
                err.starts_with("invalid delegate: cwd is under none of tasks.cwd_roots"),
                "{name}: {err}"
            );
        } else {
            assert!(
                err.starts_with("invalid delegate: unknown agent"),
                "{name}: {err}"
            );
        }
    }
    delegable
}

/// The precedence (the hub's folder over the user's over the built-ins) and the user folder's
/// variable are one rule for both (`registry::Sources`).
#[test]
fn agents_and_delegate_agree_before_and_after_a_reload() {
    let mut setup = setup(&[("hubonly", &["end_turn", "2"])], "");
    let user = setup.path("user-agents");
    private_dir(&user);
    private_dir(&setup.path("home"));
    write_manifest(&user, "useronly", &manifest("useronly", &["end_turn", "2"]));
    write_manifest(&user, "shadow", &manifest("shadow", &["end_turn", "2"]));
    // The hub's folder wins, and its shadow has no program on PATH: not delegable.
    let unrunnable = manifest("shadow", &["end_turn"]).replace(
        &crate::common::fakes::acp_agent(),
        "no-such-agent-program-35",
    );
    assert!(unrunnable.contains("no-such-agent-program-35"));
    write_manifest(&setup.path("manifests"), "shadow", &unrunnable);
    let env = vec![
        ("HOME".to_owned(), setup.path("home").display().to_string()),
        (
            "AGENT_HUB_AGENTS_DIR".to_owned(),
            user.display().to_string(),
        ),
    ];
    setup.env = env.clone();
    let hub = setup.start();
    let before = agree(&hub, &env);
    for (name, delegable) in [("useronly", true), ("hubonly", true), ("shadow", false)] {
        assert_eq!(before.contains(&name.to_owned()), delegable, "{name}");
    }
    write_manifest(
        &manifests(&hub),
        "shadow",
        &manifest("shadow", &["end_turn", "2"]),
    );
    std::fs::remove_file(manifests(&hub).join("hubonly.toml")).unwrap();
    write_manifest(&user, "later", &manifest("later", &["end_turn", "2"]));
    reload(&hub).assert_code(0);
    let after = agree(&hub, &env);
    for (name, delegable) in [
        ("useronly", true),
        ("shadow", true),
        ("later", true),
        ("hubonly", false),
    ] {
        assert_eq!(after.contains(&name.to_owned()), delegable, "{name}");
    }
    assert_eq!(run_task(&hub, "later")["state"], "completed");
}
