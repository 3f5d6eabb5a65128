//! `agent-hub delegate` and `agent-hub task status|list|cancel` as users and skills run them
//! (issue 11; docs/delegation.md "Clients"): arguments, the checks made before any
//! connection, exit codes, and the exchange with a hub that speaks the verbs.
//!
//! Owns: the process-level contract of the delegation commands. The tests that need the hub's
//! `delegate` verb are `#[ignore]`d until the hub side is wired (they are written to the
//! design's wire shapes and the runner's fake ACP agent); the others run today.

use crate::harness::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

fn client(args: &[&str]) -> Output {
    let mut cmd = Command::new(CLIENT);
    cmd.args(args);
    run(cmd, None)
}

/// `agent-hub task <sub> --as NAME --token-file … --port … <rest…>`.
fn task_cli(hub: &Hub, sub: &str, name: &str, rest: &[&str]) -> Output {
    let mut cmd = Command::new(CLIENT);
    cmd.args(["task", sub, "--as", name, "--token-file"])
        .arg(hub.token_file(name))
        .args(["--port", &hub.port.to_string()])
        .args(rest)
        .current_dir(hub.setup.path("cwd"));
    run(cmd, None)
}

fn is_task_id(s: &str) -> bool {
    s.strip_prefix("task-").is_some_and(|hex| {
        hex.len() == 32
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

fn one_json_line(stdout: &str) -> Value {
    assert!(
        stdout.ends_with('\n') && stdout.matches('\n').count() == 1,
        "one line expected: {stdout:?}"
    );
    serde_json::from_str(stdout.trim_end())
        .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {stdout}"))
}

// ----- without the hub's delegate verb -----

#[test]
fn delegate_and_task_help_name_their_arguments() {
    let out = client(&["--help"]);
    out.assert_code(0);
    assert!(out.stdout.contains("delegate") && out.stdout.contains("task"));
    let out = client(&["delegate", "--help"]);
    out.assert_code(0);
    for flag in [
        "--agent",
        "--cwd",
        "--prompt",
        "--peer",
        "--timeout",
        "--progress",
        "--json",
        "--wait",
        "--token-file",
        "--permission",
        "--allow",
    ] {
        assert!(out.stdout.contains(flag), "{flag}: {}", out.stdout);
    }
    let out = client(&["task", "--help"]);
    out.assert_code(0);
    for sub in ["status", "list", "cancel", "answer"] {
        assert!(out.stdout.contains(sub), "{sub}: {}", out.stdout);
        let out = client(&["task", sub, "--help"]);
        out.assert_code(0);
        assert!(out.stdout.contains("--token-file") && out.stdout.contains("--json"));
    }
}

#[test]
fn delegate_usage_errors_exit_one() {
    let id = ["--as", "a", "--token-file", "t", "--port", "1"];
    let with = |rest: &[&str]| -> Vec<String> {
        let mut v: Vec<String> = vec!["delegate".into()];
        v.extend(id.iter().map(|s| s.to_string()));
        v.extend(rest.iter().map(|s| s.to_string()));
        v
    };
    let cases: Vec<Vec<String>> = vec![
        vec!["delegate".into()],
        with(&["--cwd", "/w", "--prompt", "p"]),
        with(&["--agent", "codex", "--prompt", "p"]),
        with(&["--agent", "codex", "--cwd", "/w"]),
        with(&[
            "--agent",
            "codex",
            "--cwd",
            "/w",
            "--prompt",
            "p",
            "--timeout",
            "0",
        ]),
        with(&[
            "--agent",
            "codex",
            "--cwd",
            "/w",
            "--prompt",
            "p",
            "--timeout",
            "-1",
        ]),
        with(&[
            "--agent",
            "codex",
            "--cwd",
            "/w",
            "--prompt",
            "p",
            "--progress",
            "x",
        ]),
        vec!["task".into()],
        vec!["task".into(), "status".into(), "--as".into(), "a".into()],
        vec!["task".into(), "pause".into()],
    ];
    for args in &cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = client(&args);
        assert_eq!(out.code, 1, "{args:?}: {out:?}");
        assert!(
            out.stderr.starts_with("agent-hub: "),
            "{args:?}: {:?}",
            out.stderr
        );
        assert!(out.stdout.is_empty(), "{args:?}: {:?}", out.stdout);
    }
}

/// The prompt is checked before the token file is read or a connection made: these runs name
/// a token file that does not exist and a port where nothing listens, and must fail on the
/// prompt.
#[test]
fn the_prompt_is_checked_before_the_token_file_and_the_hub() {
    let dir = TempDir::new();
    let missing = dir.path.join("no.token");
    let port = dead_port().to_string();
    let run_with = |prompt: &str, stdin: Option<&[u8]>| {
        let mut cmd = Command::new(CLIENT);
        cmd.args(["delegate", "--as", "alpha", "--token-file"])
            .arg(&missing)
            .args([
                "--port", &port, "--agent", "codex", "--cwd", "/w", "--prompt", prompt,
            ]);
        run(cmd, stdin)
    };
    let over = vec![b'a'; (16 << 20) + 1];
    for (prompt, stdin, needle) in [
        ("-", Some(&over[..]), "over 16777216 bytes (16 MiB)"),
        ("-", Some(&b" \n\t\n"[..]), "the prompt is empty"),
        ("-", Some(&b"\xff\xfe"[..]), "not UTF-8"),
        ("", None, "the prompt is empty"),
    ] {
        let out = run_with(prompt, stdin);
        out.assert_code(1);
        assert!(
            out.stderr.starts_with("agent-hub: ") && out.stderr.contains(needle),
            "{needle}: {}",
            out.stderr
        );
        assert!(!out.stderr.contains("token file"), "{}", out.stderr);
        assert!(out.stdout.is_empty());
    }
    // A good prompt gets as far as the token file.
    let out = run_with("-", Some(b"fix it\n"));
    out.assert_code(1);
    assert!(
        out.stderr.starts_with("agent-hub: cannot read token file"),
        "{}",
        out.stderr
    );
}

#[test]
fn an_unreachable_hub_is_a_plain_connect_error() {
    let dir = TempDir::new();
    let token = dir.path.join("a.token");
    write_file(&token, "secret-token\n", 0o600);
    let port = dead_port().to_string();
    let mut cmd = Command::new(CLIENT);
    cmd.args(["delegate", "--as", "alpha", "--token-file"])
        .arg(&token)
        .args([
            "--port", &port, "--agent", "codex", "--cwd", "/w", "--prompt", "p",
        ]);
    let out = run(cmd, None);
    out.assert_code(1);
    assert!(
        out.stderr.starts_with(&format!(
            "agent-hub: cannot connect to the hub at 127.0.0.1:{port}"
        )),
        "{}",
        out.stderr
    );
    // Nothing reached a hub, so there is no "may have accepted" hint.
    assert!(!out.stderr.contains("may have accepted"), "{}", out.stderr);
    for sub in ["list", "status", "cancel"] {
        let mut cmd = Command::new(CLIENT);
        cmd.args(["task", sub, "--as", "alpha", "--token-file"])
            .arg(&token)
            .args(["--port", &port]);
        if sub != "list" {
            cmd.args(["--id", "task-0"]);
        }
        let out = run(cmd, None);
        out.assert_code(1);
        assert!(
            out.stderr.contains("cannot connect"),
            "{sub}: {}",
            out.stderr
        );
    }
}

/// The verb is pipelined after hello; a wrong token is refused at hello whatever the verb,
/// and the client says so in the hub's words.
#[test]
fn a_wrong_token_is_refused_at_hello_for_every_task_verb() {
    let hub = Hub::start();
    hub.setup.write_token("alpha", "not-the-token\n", 0o600);
    let out = hub.cli(
        "delegate",
        "alpha",
        &["--agent", "codex", "--cwd", "/w", "--prompt", "p"],
    );
    out.assert_code(1);
    assert_eq!(
        out.stderr,
        "agent-hub: authentication failed: unknown name or wrong token\n"
    );
    assert!(out.stdout.is_empty());
    for (sub, rest) in [
        ("status", &["--id", "task-0"][..]),
        ("list", &[][..]),
        ("cancel", &["--id", "task-0"][..]),
    ] {
        let out = task_cli(&hub, sub, "alpha", rest);
        out.assert_code(1);
        assert!(
            out.stderr.starts_with("agent-hub: authentication failed"),
            "{sub}: {}",
            out.stderr
        );
        assert!(out.stdout.is_empty(), "{sub}: {}", out.stdout);
    }
    assert!(!hub.service_log().contains("not-the-token"));
}

// ----- against a hub with delegation on (the lead wires the verb) -----

/// A hub with `[tasks]` on: tasks may run under `<tmp>/work`, and three fake ACP agents
/// (`fake` completes, `fake-hang` waits for a cancel, `fake-crash` dies mid-prompt) are
/// manifests in `<tmp>/manifests`.
fn delegation_hub() -> (Hub, PathBuf) {
    let setup = Setup::new();
    let work = setup.path("work");
    std::fs::create_dir_all(work.join("sub")).unwrap();
    let manifests = setup.path("manifests");
    std::fs::create_dir_all(&manifests).unwrap();
    for (name, scenario) in [
        ("fake", "end_turn"),
        ("fake-hang", "hang"),
        ("fake-crash", "crash"),
    ] {
        write_file(
            &manifests.join(format!("{name}.toml")),
            &fake_manifest(name, scenario),
            0o644,
        );
    }
    let mut setup = setup;
    setup.config_text = Some(format!(
        "{}\n[tasks]\ncwd_roots = [{:?}]\nmanifests_dir = {:?}\n",
        setup.generated_config(),
        work.to_str().unwrap(),
        manifests.to_str().unwrap()
    ));
    (setup.start(), work)
}

fn fake_manifest(name: &str, scenario: &str) -> String {
    let fake_agent = crate::common::fakes::acp_agent();
    format!(
        r#"name = "{name}"
display = "Fake ACP agent ({scenario})"
binaries = ["fake-acp-agent"]

[observe]
sessions = "none"
transcript = "none"

[run]
acp = ["{fake_agent}", "{scenario}"]
headless = ["{fake_agent}", "{{prompt}}"]
outcome = "exit-code"

[deliver]
mode = "pull"

[install]
mcp_config = ""
hook = "none"
skills_dir = ""
trust = []
"#
    )
}

fn delegate(hub: &Hub, name: &str, agent: &str, cwd: &Path, rest: &[&str]) -> Output {
    let mut args = vec!["--agent", agent, "--cwd", cwd.to_str().unwrap()];
    args.extend_from_slice(rest);
    hub.cli("delegate", name, &args)
}

/// The outcome envelope of `task`, through the ordinary await.
fn outcome(hub: &Hub, name: &str, task: &str) -> Value {
    let out = hub.cli(
        "await",
        name,
        &[
            "--reply-to",
            task,
            "--kind",
            "task_outcome",
            "--timeout",
            "8",
        ],
    );
    out.assert_code(0);
    one_json_line(&out.stdout)
}

#[test]
fn delegate_prints_a_task_id_and_the_outcome_is_a_correlated_envelope() {
    let (hub, work) = delegation_hub();
    let out = delegate(&hub, "alpha", "fake", &work, &["--prompt", "say hello"]);
    out.assert_code(0);
    assert!(out.stderr.is_empty(), "{}", out.stderr);
    let task = out.stdout.trim_end();
    assert!(
        is_task_id(task) && out.stdout.ends_with('\n'),
        "{:?}",
        out.stdout
    );
    let env = outcome(&hub, "alpha", task);
    assert_eq!(env["from"], "hub");
    assert_eq!(env["to"], "alpha");
    assert_eq!(env["kind"], "task_outcome");
    assert_eq!(env["correlationId"], task);
    assert_eq!(env["body"]["task"], task);
    assert_eq!(env["body"]["agent"], "fake");
    assert_eq!(env["body"]["state"], "completed");
    // The record says the same.
    let out = task_cli(&hub, "status", "alpha", &["--id", task]);
    out.assert_code(0);
    let rec = one_json_line(&out.stdout);
    assert_eq!(rec["task"], task);
    assert_eq!(rec["agent"], "fake");
    assert_eq!(rec["state"], "completed");
}

#[test]
fn delegate_json_and_a_prompt_from_stdin() {
    let (hub, work) = delegation_hub();
    let out = hub.cli_stdin(
        "delegate",
        "alpha",
        &[
            "--agent",
            "fake",
            "--cwd",
            work.to_str().unwrap(),
            "--prompt",
            "-",
            "--json",
        ],
        Some(b"  a prompt\nover two lines\n"),
    );
    out.assert_code(0);
    let v = one_json_line(&out.stdout);
    let task = v["task"].as_str().unwrap();
    assert!(is_task_id(task), "{v}");
    assert_eq!(v["state"], "queued");
    assert_eq!(outcome(&hub, "alpha", task)["body"]["state"], "completed");
}

#[test]
fn delegate_wait_prints_the_outcome_and_exits_by_its_state() {
    let (hub, work) = delegation_hub();
    let out = delegate(&hub, "alpha", "fake", &work, &["--prompt", "p", "--wait"]);
    out.assert_code(0);
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{}", out.stdout);
    assert!(is_task_id(lines[0]), "{}", lines[0]);
    let env: Value = serde_json::from_str(lines[1]).unwrap();
    assert_eq!(env["correlationId"], lines[0]);
    assert_eq!(env["body"]["state"], "completed");
    // Acked after printing: nothing of that task is left in the queue.
    assert!(hub.poll_envelope("alpha", AWAIT_NOW).is_none());

    let out = delegate(
        &hub,
        "alpha",
        "fake-crash",
        &work,
        &["--prompt", "p", "--wait"],
    );
    out.assert_code(3);
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{}", out.stdout);
    let env: Value = serde_json::from_str(lines[1]).unwrap();
    assert_eq!(env["body"]["state"], "failed");
}

#[test]
fn refusals_are_the_hubs_error_and_create_no_task() {
    let (hub, work) = delegation_hub();
    for (agent, cwd, needle) in [
        ("nosuch", work.clone(), "invalid delegate: "),
        ("fake", PathBuf::from("/"), "invalid delegate: "),
    ] {
        let out = delegate(&hub, "alpha", agent, &cwd, &["--prompt", "p"]);
        out.assert_code(1);
        assert!(
            out.stderr.starts_with(&format!("agent-hub: {needle}")),
            "{agent}: {}",
            out.stderr
        );
        assert!(out.stdout.is_empty());
    }
    let out = task_cli(&hub, "list", "alpha", &["--json"]);
    out.assert_code(0);
    assert_eq!(one_json_line(&out.stdout)["tasks"], serde_json::json!([]));
}

/// `--cwd` is made absolute against the client's working directory: `.` run from inside the
/// allowed root is accepted, `.` run from outside it is refused.
#[test]
fn a_relative_cwd_is_taken_from_the_clients_directory() {
    let (hub, work) = delegation_hub();
    let mut cmd = hub.cli_command(
        "delegate",
        "alpha",
        &["--agent", "fake", "--cwd", "sub", "--prompt", "p"],
    );
    cmd.current_dir(&work);
    let out = run(cmd, None);
    out.assert_code(0);
    let task = out.stdout.trim_end().to_owned();
    assert_eq!(outcome(&hub, "alpha", &task)["body"]["state"], "completed");
    // From the hub's own cwd/ (outside the root) the same argument is refused.
    let out = hub.cli(
        "delegate",
        "alpha",
        &["--agent", "fake", "--cwd", ".", "--prompt", "p"],
    );
    out.assert_code(1);
    assert!(out.stderr.contains("invalid delegate"), "{}", out.stderr);
}

#[test]
fn task_list_status_and_cancel() {
    let (hub, work) = delegation_hub();
    let out = delegate(&hub, "alpha", "fake-hang", &work, &["--prompt", "wait"]);
    out.assert_code(0);
    let task = out.stdout.trim_end().to_owned();

    // Running (or still queued a moment): the table has its row.
    let out = task_cli(&hub, "list", "alpha", &[]);
    out.assert_code(0);
    let rows: Vec<Vec<&str>> = out
        .stdout
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows[0], ["TASK", "AGENT", "PEER", "STATE", "AGE"]);
    assert_eq!(rows.len(), 2, "{}", out.stdout);
    assert_eq!(rows[1][0], task);
    assert_eq!(rows[1][1], "fake-hang");
    assert_eq!(rows[1][2], "-");
    let out = task_cli(&hub, "list", "alpha", &["--json"]);
    out.assert_code(0);
    let list = one_json_line(&out.stdout);
    assert_eq!(list["tasks"][0]["task"], task.as_str());

    // Another agent sees nothing of it.
    let out = task_cli(&hub, "status", "beta", &["--id", &task]);
    out.assert_code(0);
    assert_eq!(
        one_json_line(&out.stdout),
        serde_json::json!({"task": task, "state": "unknown"})
    );
    let out = task_cli(&hub, "cancel", "beta", &["--id", &task]);
    out.assert_code(1);
    assert_eq!(out.stdout, "unknown\n");
    let out = task_cli(&hub, "list", "beta", &["--json"]);
    assert_eq!(one_json_line(&out.stdout)["tasks"], serde_json::json!([]));

    // The delegator cancels it; the outcome says cancelled.
    poll_until("the task to run", || {
        let out = task_cli(&hub, "status", "alpha", &["--id", &task]);
        (one_json_line(&out.stdout)["state"] == "running").then_some(())
    });
    let out = task_cli(&hub, "cancel", "alpha", &["--id", &task]);
    out.assert_code(0);
    assert!(
        out.stdout == "cancelling\n" || out.stdout == "cancelled\n",
        "{}",
        out.stdout
    );
    assert_eq!(outcome(&hub, "alpha", &task)["body"]["state"], "cancelled");
    let out = task_cli(&hub, "cancel", "alpha", &["--id", &task, "--json"]);
    out.assert_code(0);
    assert_eq!(
        one_json_line(&out.stdout),
        serde_json::json!({"task": task, "state": "cancelled"})
    );
}
