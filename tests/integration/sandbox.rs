//! A delegated agent cannot become anyone else (issue 29, "How it is checked"): a hostile
//! agent (`fake-acp-agent attack`, crates/test-fakes/src/bin/fake-acp-agent/attack.rs) run as a delegated task
//! tries to read the roster, the config, the logs, a roster agent's token file and another
//! running task's credential, to list the credentials folder, to read `/proc/<hub>`, and to
//! log in as a roster agent with whatever it found; under the sandbox every step fails while
//! its own identity keeps working. The same attack with `tasks.sandbox = "none"` succeeds, so
//! the attack itself is known to work, and that hub warns at startup and in `agents`.
//!
//! The default sandbox must exist under CI (`.ci/run` installs bubblewrap and sets
//! `AGENT_HUB_REQUIRE_SANDBOX=1`): without one these tests fail there; elsewhere a machine
//! with neither bubblewrap nor Landlock skips them, saying so.

use crate::delegate::{manifest, outcome, task_id, verb, wait_status};
use crate::harness::{Hub, Setup, CLIENT};
use agent_hub_host::sandbox::{probe, Kind, Mode};
use serde_json::{json, Value};

/// The sandbox `mode` finds here, or None when none works and this is not CI (skip).
fn available(mode: Mode) -> Option<Kind> {
    match probe::detect(
        mode,
        &std::env::var("PATH").unwrap_or_default(),
        &std::env::temp_dir(),
    ) {
        Ok((kind, _)) => Some(kind),
        Err(e) => {
            assert!(
                std::env::var_os("AGENT_HUB_REQUIRE_SANDBOX").is_none(),
                "AGENT_HUB_REQUIRE_SANDBOX is set, and tasks.sandbox = {:?} does not work here: {e}",
                mode.tag()
            );
            eprintln!(
                "SKIP: tasks.sandbox = {:?} does not work here: {e}",
                mode.tag()
            );
            None
        }
    }
}

/// A hub with `[tasks]` (`sandbox` line as given), the hostile agent and a parked one.
fn setup(sandbox_line: &str) -> Setup {
    let mut setup = Setup::new();
    std::fs::create_dir_all(setup.path("work")).unwrap();
    std::fs::create_dir_all(setup.path("manifests")).unwrap();
    for (name, scenario) in [("fakeattack", &["attack"][..]), ("fakehang", &["hang"][..])] {
        std::fs::write(
            setup.path(&format!("manifests/{name}.toml")),
            manifest(name, scenario),
        )
        .unwrap();
    }
    let root = std::fs::canonicalize(setup.path("work")).unwrap();
    setup.config_text = Some(format!(
        "{}\n[tasks]\ncwd_roots = [{:?}]\nmanifests_dir = {:?}\ncredentials_dir = {:?}\n{sandbox_line}\n",
        setup.generated_config(),
        root.to_str().unwrap(),
        setup.path("manifests").to_str().unwrap(),
        setup.path("task-creds").to_str().unwrap(),
    ));
    setup
}

fn delegate(hub: &Hub, agent: &str, prompt: &str) -> String {
    let cwd = std::fs::canonicalize(hub.setup.path("work")).unwrap();
    task_id(&verb(
        hub,
        "alpha",
        &json!({"delegate": {"agent": agent, "cwd": cwd, "prompt": prompt}}),
    ))
}

/// Runs the attack while another task holds its credential; returns each step's `ok` by
/// name, the attack's own report, and the hang task's credential path.
fn attack(hub: &Hub) -> (Vec<(String, bool, String)>, Value) {
    // A watcher of this hub, as a user runs one, names beta's token file on its argv: the
    // target of the attack's /proc scan (hidden with the roster's tokens folder).
    let mut watcher = std::process::Command::new(CLIENT)
        .args(["await", "--as", "beta", "--token-file"])
        .arg(hub.token_file("beta"))
        .args([
            "--port",
            &hub.port.to_string(),
            "--kind",
            "never-sent",
            "--timeout",
            "120",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let hang = delegate(hub, "fakehang", "wait");
    wait_status(hub, "alpha", &hang, |s| s["state"] == "running");
    let other_token = hub.setup.path(&format!("task-creds/{hang}/token"));
    crate::harness::poll_until("the other task's credential file", || {
        other_token.exists().then_some(())
    });
    let targets = json!({
        "read": {
            "roster": hub.setup.path("roster.toml"),
            "config": hub.setup.config_path(),
            "audit log": hub.setup.path("audit.jsonl"),
            "service log": hub.setup.path("service.log"),
            "beta's token file": hub.token_file("beta"),
            "another task's token": other_token,
        },
        "list": {
            "the task credentials folder": hub.setup.path("task-creds"),
            "the hub's folder": hub.setup.dir.path,
            "the roster's tokens folder": hub.setup.path("tokens"),
        },
        "hub_pid": hub.pid(),
        "port": hub.port,
        "client": CLIENT,
        "as": "beta",
        "as_token_file": hub.token_file("beta"),
        "peer": "alpha",
    });
    let task = delegate(hub, "fakeattack", &targets.to_string());
    let body = outcome(hub, "alpha", &task);
    assert_eq!(body["state"], "completed", "{body}");
    let report: Value = serde_json::from_str(body["text"].as_str().unwrap())
        .unwrap_or_else(|e| panic!("the attack's report: {e}: {body}"));
    let steps = report["attack"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["step"].as_str().unwrap().to_owned(),
                s["ok"].as_bool().unwrap(),
                s["detail"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect();
    verb(hub, "alpha", &json!({"cancel": {"task": hang}}));
    let _ = watcher.kill();
    let _ = watcher.wait();
    (steps, report)
}

fn show(steps: &[(String, bool, String)]) -> String {
    steps
        .iter()
        .map(|(s, ok, d)| {
            format!(
                "  {} {s}: {d}\n",
                if *ok { "SUCCEEDED" } else { "failed   " }
            )
        })
        .collect()
}

/// Every attack step failed, every control succeeded, and nothing reached alpha from beta.
fn assert_contained(hub: &Hub, which: &str, steps: &[(String, bool, String)]) {
    eprintln!(
        "sandbox {which}: the hostile agent's steps:\n{}",
        show(steps)
    );
    let must_fail = [
        "read roster",
        "read config",
        "read audit log",
        "read service log",
        "read beta's token file",
        "read another task's token",
        "list the task credentials folder",
        "list the roster's tokens folder",
        "/proc/<hub>/environ",
        "/proc/<hub>/mem",
        "/proc/<hub>/cwd",
        "scan /proc for --token-file",
        "log in with a stolen token",
        "agent-hub send as beta",
    ];
    for want in must_fail {
        let step = steps
            .iter()
            .find(|(s, _, _)| s == want)
            .unwrap_or_else(|| panic!("the attack did not try {want:?}:\n{}", show(steps)));
        assert!(
            !step.1,
            "sandbox {which}: {want} succeeded:\n{}",
            show(steps)
        );
    }
    // The hub's folder lists at most what is shown again in it (bubblewrap: the task
    // root and the mount point of the task's own token), never one of the hub's files.
    let hub_dir = steps
        .iter()
        .find(|(s, _, _)| s == "list the hub's folder")
        .unwrap();
    if hub_dir.1 {
        for entry in hub_dir.2.split(',') {
            assert!(
                ["work", "task-creds"].contains(&entry),
                "sandbox {which}: the hub's folder shows {entry:?}:\n{}",
                show(steps)
            );
        }
    }
    // No step the attack improvised (a token read in a listed folder) succeeded either.
    for (s, ok, _) in steps {
        if s.starts_with("read token in") {
            assert!(!ok, "sandbox {which}: {s} succeeded:\n{}", show(steps));
        }
    }
    for control in [
        "control: read own token",
        "control: log in as the task",
        "control: write in cwd",
    ] {
        assert!(
            steps.iter().any(|(s, ok, _)| s == control && *ok),
            "sandbox {which}: {control} failed, so the run proves nothing:\n{}",
            show(steps)
        );
    }
    // beta never spoke: alpha's queue holds nothing from it.
    while let Some(env) = hub.poll_envelope("alpha", crate::harness::AWAIT_NOW) {
        assert_ne!(env["from"], "beta", "{env}");
    }
}

/// The default sandbox (`tasks.sandbox` absent: `auto`) contains the hostile agent; the
/// service log says which sandbox ran it.
#[test]
fn a_hostile_agent_under_the_default_sandbox_fails_at_every_step() {
    let Some(kind) = available(Mode::Auto) else {
        return;
    };
    let hub = setup("").start();
    let (steps, report) = attack(&hub);
    assert_contained(&hub, kind.tag(), &steps);
    let started = format!("delegated agents run in sandbox {}", kind.tag());
    let ran = format!("sandbox {}: hidden", kind.tag());
    hub.wait_service_log("the sandbox's lines", |l| {
        l.contains(&started) && l.contains(&ran)
    });
    eprintln!("the default sandbox here: {}", kind.tag());
    if let Kind::Bwrap { .. } = kind {
        // A private /proc: the agent sees its own processes only, the hub's not at all.
        assert!(
            report["processes_visible"].as_u64().unwrap() < 10,
            "{report}"
        );
        let signal = steps
            .iter()
            .find(|(s, _, _)| s == "signal the hub")
            .unwrap();
        assert!(!signal.1, "{}", show(&steps));
        let cmdline = steps
            .iter()
            .find(|(s, _, _)| s == "/proc/<hub>/cmdline")
            .unwrap();
        assert!(!cmdline.1, "{}", show(&steps));
    }
}

#[test]
fn a_hostile_agent_under_bwrap_fails_at_every_step() {
    let Some(kind) = available(Mode::Bwrap) else {
        return;
    };
    let hub = setup("sandbox = \"bwrap\"").start();
    let (steps, _) = attack(&hub);
    assert_contained(&hub, kind.tag(), &steps);
}

/// Landlock, the fallback where user namespaces are refused: the same steps fail (the hub's
/// `/proc` entry stays, but its environment, memory and links are refused by Landlock's
/// ptrace rule, and nothing of the hub's files can be opened).
#[test]
fn a_hostile_agent_under_landlock_fails_at_every_step() {
    let Some(kind) = available(Mode::Landlock) else {
        return;
    };
    let hub = setup("sandbox = \"landlock\"").start();
    let (steps, _) = attack(&hub);
    assert_contained(&hub, kind.tag(), &steps);
    // Landlock leaves /proc shared: the scan saw this hub's clients' token files (the
    // watcher's, the other task's) named on their argv, and could read none of them.
    let scan = steps
        .iter()
        .find(|(s, _, _)| s == "scan /proc for --token-file")
        .unwrap();
    assert!(
        !scan.2.starts_with("0 other"),
        "the scan found no client of this hub, so it proves nothing: {}",
        scan.2
    );
    hub.wait_service_log("the task's sandbox line", |l| {
        l.contains("sandbox landlock: hidden")
    });
}

/// Without a sandbox the same agent reads the roster and logs in as a roster agent: the
/// attack works, so its failures above are the sandbox's doing. Such a hub warns at
/// startup, and `agent-hub agents --config` says so.
#[test]
fn with_sandbox_none_the_same_attack_succeeds_and_the_hub_warns() {
    let hub = setup("sandbox = \"none\"").start();
    hub.wait_service_log("the WARN line for sandbox none", |l| {
        l.lines().any(|l| {
            l.contains(" WARN ")
                && l.contains("tasks.sandbox = \"none\": delegated agents run unsandboxed")
        })
    });
    let (steps, _) = attack(&hub);
    eprintln!("sandbox none: the hostile agent's steps:\n{}", show(&steps));
    for want in [
        "read roster",
        "read another task's token",
        "log in with a stolen token",
        "agent-hub send as beta",
    ] {
        assert!(
            steps.iter().any(|(s, ok, _)| s == want && *ok),
            "without a sandbox {want} should succeed:\n{}",
            show(&steps)
        );
    }
    let out = std::process::Command::new(CLIENT)
        .args(["agents", "--no-version", "--config"])
        .arg(hub.setup.config_path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stdout.contains("sandbox none") && stdout.contains("UNSANDBOXED"),
        "{stdout}"
    );
    assert!(
        stderr.contains("warning: tasks.sandbox = \"none\""),
        "{stderr}"
    );
}

/// A sandbox that was asked for by name and does not work stops the hub at startup with
/// what to install: never a silent downgrade. Made to fail here with a PATH without bwrap.
#[test]
fn a_configured_bwrap_that_is_missing_stops_the_hub() {
    let setup = setup("sandbox = \"bwrap\"");
    crate::harness::write_file(
        &setup.config_path(),
        setup.config_text.as_deref().unwrap(),
        0o600,
    );
    let out = std::process::Command::new(crate::harness::SERVER)
        .arg("--config")
        .arg(setup.config_path())
        .env("PATH", "/nonexistent")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("startup failed at tasks")
            && stderr.contains("bubblewrap does not work here")
            && stderr.contains("apt-get install bubblewrap"),
        "{stderr}"
    );
}

/// An agent the user also `install`ed (here its config files are given by absolute paths in
/// the manifest, under the task root, filled from the install fixtures with the user's
/// identity `beta`): under bubblewrap the delegated run sees them without agent-hub's MCP
/// server entry and hooks, its writes go to its own copies, and the token file those entries
/// named is hidden. The user's files are byte for byte as they were.
#[test]
fn an_installed_agents_task_sees_its_config_without_the_users_identity() {
    let Some(Kind::Bwrap { .. }) = available(Mode::Bwrap) else {
        return;
    };
    let setup = setup("sandbox = \"bwrap\"");
    let home = std::fs::canonicalize(setup.path("work"))
        .unwrap()
        .join("home");
    std::fs::create_dir_all(home.join(".claude")).unwrap();
    std::fs::create_dir_all(home.join(".agent-hub")).unwrap();
    let user_token = home.join(".agent-hub/beta.token");
    crate::harness::write_file(&user_token, "tok-beta-SECRET-7a21\n", 0o600);
    let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("protocol/install/claude/after-install");
    let fill = |rel: &str| {
        std::fs::read_to_string(fixture.join(rel))
            .unwrap()
            .replace(
                "{HOME}/.agent-hub/worker.token",
                user_token.to_str().unwrap(),
            )
            .replace("--as worker", "--as beta")
            .replace("\"worker\"", "\"beta\"")
    };
    let claude_json = home.join(".claude.json");
    let settings = home.join(".claude/settings.json");
    std::fs::write(&claude_json, fill(".claude.json")).unwrap();
    std::fs::write(&settings, fill(".claude/settings.json")).unwrap();
    let before = (
        std::fs::read(&claude_json).unwrap(),
        std::fs::read(&settings).unwrap(),
    );
    assert!(String::from_utf8_lossy(&before.0).contains("\"agent-hub\""));
    let fake = crate::common::fakes::acp_agent();
    let attack = std::path::Path::new(&fake);
    std::fs::write(
        setup.path("manifests/fakeinst.toml"),
        format!(
            r#"name = "fakeinst"
display = "Fake installed agent"
binaries = ["fake-acp-agent"]

[observe]
sessions = "none"
transcript = "none"

[run]
acp = [{attack:?}, "attack"]
headless = []
outcome = "exit-code"

[deliver]
mode = "stop-hook"

[install]
mcp_config = {claude_json:?}
mcp_format = "claude-json"
hook = "claude-stop"
hook_config = {settings:?}
skills_dir = ""
"#
        ),
    )
    .unwrap();
    let hub = setup.start();
    let targets = json!({
        "read": {"the user's token file": user_token},
        "show": {"claude.json": claude_json, "settings.json": settings},
        "scribble": [settings],
        "port": hub.port,
    });
    let task = delegate(&hub, "fakeinst", &targets.to_string());
    let body = outcome(&hub, "alpha", &task);
    assert_eq!(body["state"], "completed", "{body}");
    let report: Value = serde_json::from_str(body["text"].as_str().unwrap()).unwrap();
    let steps = &report["attack"];
    let read = steps
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["step"] == "read the user's token file")
        .unwrap();
    assert_eq!(read["ok"], false, "{report}");
    let seen: Value = serde_json::from_str(report["shown"]["claude.json"].as_str().unwrap())
        .unwrap_or_else(|e| panic!("{e}: {report}"));
    assert!(seen["mcpServers"].get("agent-hub").is_none(), "{seen}");
    assert!(
        seen["mcpServers"].get("github").is_some(),
        "the user's own server stays: {seen}"
    );
    let settings_seen = report["shown"]["settings.json"].as_str().unwrap();
    for ours in ["hook stop", "hook turn-start", "--token-file"] {
        assert!(!settings_seen.contains(ours), "{ours}: {settings_seen}");
    }
    assert!(settings_seen.contains("notify-send"), "{settings_seen}");
    assert_eq!(report["scribbled"][0]["ok"], true, "{report}");
    // The user's files are untouched: the task's writes went to its copy.
    assert_eq!(std::fs::read(&claude_json).unwrap(), before.0);
    assert_eq!(std::fs::read(&settings).unwrap(), before.1);
    hub.wait_service_log("the task's sandbox line", |l| {
        l.contains("agent-hub entries taken out of") && l.contains(".claude.json")
    });
}

/// A manifest the hub would execute that another user could have written (issue 29): a
/// world-writable file is refused at startup with the fix in the service log, `agents`
/// warns about it, and a task naming it is refused as an unknown agent; it does not fall
/// back to anything of the same name.
#[test]
fn a_world_writable_manifest_is_refused_and_a_task_naming_it_too() {
    use std::os::unix::fs::PermissionsExt;
    let setup = setup("sandbox = \"none\"");
    let path = setup.path("manifests/fakeattack.toml");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
    let hub = setup.start();
    hub.wait_service_log("the refusal", |l| {
        l.contains("agent manifest skipped") && l.contains("mode 666") && l.contains("chmod go-w")
    });
    let cwd = std::fs::canonicalize(hub.setup.path("work")).unwrap();
    let r = verb(
        &hub,
        "alpha",
        &json!({"delegate": {"agent": "fakeattack", "cwd": cwd, "prompt": "{}"}}),
    );
    let e = r["error"]["message"].as_str().unwrap_or_default();
    assert!(
        e.contains("unknown agent") && !e.contains("fakeattack"),
        "{r}"
    );
    // The private one beside it still runs.
    let hang = delegate(&hub, "fakehang", "wait");
    wait_status(&hub, "alpha", &hang, |s| s["state"] == "running");
    let out = std::process::Command::new(CLIENT)
        .args(["agents", "--no-version", "--config"])
        .arg(hub.setup.config_path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("fakeattack.toml") && stderr.contains("mode 666"),
        "{stderr}"
    );
    assert!(!String::from_utf8_lossy(&out.stdout).contains("fakeattack"));
}
