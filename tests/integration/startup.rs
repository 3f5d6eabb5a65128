//! Server startup, records and shutdown (SPEC §7–§8): fatal roster and config errors with
//! exit 1 and the stage named, path resolution, record file modes and content hygiene, a
//! failing audit log, and a clean SIGTERM.
//!
//! Owns: the server process's lifecycle and the files it writes. Refuses: per-line protocol
//! behaviour (see `wire`).

use crate::harness::*;
use std::path::Path;
use std::time::Duration;

const ROSTER_HEAD: &str = "[agents]\nalpha = \"tok-alpha-SECRET-1d9e\"\n";

#[test]
fn a_roster_defining_hub_in_any_letter_case_is_fatal() {
    for name in ["hub", "HUB", "Hub"] {
        let setup = Setup::new();
        setup.write_roster(&format!("{ROSTER_HEAD}{name} = \"tok-x\"\n"), 0o600);
        setup.fails_at("roster", "reserved");
        // Fatal startup errors reach the service log too once it is open.
        let log = std::fs::read_to_string(setup.path("service.log")).unwrap();
        assert!(log.contains("startup failed at roster"), "{log}");
    }
}

#[test]
fn a_roster_readable_by_others_is_refused_naming_chmod_600() {
    for mode in [0o644, 0o640, 0o602] {
        let setup = Setup::new();
        setup.write_roster(ROSTER_HEAD, mode);
        let roster = setup.path("roster.toml");
        setup.fails_at(
            "roster",
            &format!("fix it with: chmod 600 {}", roster.display()),
        );
    }
}

#[test]
fn bad_rosters_are_fatal() {
    let cases = [
        ("[agents]\n", "empty"),
        ("", "no [agents] table"),
        ("[agents]\nalpha = \"\"\n", "blank"),
        ("[agents]\nalpha = \"  \\t\"\n", "blank"),
        (
            "[agents]\nalpha = \"same\"\nbeta = \"same\"\n",
            "share one token",
        ),
        ("port = 1\n[agents]\nalpha = \"t\"\n", "outside [agents]"),
        (
            "[agents]\nalpha = \"t\"\n[extra]\nbeta = \"u\"\n",
            "outside [agents]",
        ),
        ("[agents]\nalpha = 5\n", "must be a string"),
        ("[agents\n", "not valid TOML"),
    ];
    for (text, needle) in cases {
        let setup = Setup::new();
        setup.write_roster(text, 0o600);
        let out = setup.fails_at("roster", needle);
        assert!(
            !out.stderr.contains("SECRET"),
            "no token in errors: {}",
            out.stderr
        );
    }
    let setup = Setup::new();
    std::fs::remove_file(setup.path("roster.toml")).unwrap();
    setup.fails_at("roster", "cannot read roster");
}

/// Issue 35: a first setup's roster (an empty file, `[agents]` naming nobody, or no file at
/// all) is refused with the command that fills it; run as printed, that command makes a
/// roster the hub starts on. A roster broken otherwise gets no such hint.
#[test]
fn a_roster_naming_nobody_names_roster_add_which_then_works() {
    for text in [Some(""), Some("[agents]\n"), None] {
        let setup = Setup::new();
        match text {
            Some(t) => setup.write_roster(t, 0o600),
            None => std::fs::remove_file(setup.path("roster.toml")).unwrap(),
        }
        let config = setup.config_path();
        let hint = format!(
            "; add an agent with: agent-hub-server roster add NAME --config {}",
            config.display()
        );
        let out = setup.fails_at("roster", &hint);
        assert!(out.stderr.trim_end().ends_with(&hint), "{}", out.stderr);
        let mut cmd = std::process::Command::new(SERVER);
        cmd.args(["roster", "add", "newcomer", "--config"])
            .arg(&config)
            .current_dir(setup.path("cwd"));
        run(cmd, None).assert_code(0);
        let hub = setup.start();
        hub.cli("who", "newcomer", &[]).assert_code(0);
    }
    let setup = Setup::new();
    setup.write_roster("[agents]\nalpha = 5\n", 0o600);
    let out = setup.fails_at("roster", "must be a string");
    assert!(!out.stderr.contains("roster add"), "{}", out.stderr);
}

#[test]
fn config_errors_are_fatal() {
    let base = Setup::new().generated_config();
    let cases = [
        (
            format!("colour = \"red\"\n{base}"),
            "unknown field `colour`",
        ),
        (base.replace("port = 0\n", ""), "missing field `port`"),
        (
            base.replace("roster_path = \"roster.toml\"\n", ""),
            "missing field `roster_path`",
        ),
        (
            base.replace("write_timeout_ms = 30000\n", ""),
            "missing field `write_timeout_ms`",
        ),
        (
            base.replace(
                "max_connections = 1024",
                "max_connections = 1024\nmax_colours = 3",
            ),
            "unknown field `max_colours`",
        ),
        (
            base.replace("max_connections = 1024", "max_connections = 0"),
            "limits.max_connections must be greater than 0",
        ),
        (base.replace("port = 0", "port = \"46110\""), "invalid type"),
        (
            base.replace("audit_log_path = \"audit.jsonl\"", "audit_log_path = \"\""),
            "audit_log_path must not be empty",
        ),
    ];
    for (text, needle) in cases {
        let mut setup = Setup::new();
        setup.config_text = Some(text);
        setup.fails_at("config", needle);
    }
    let setup = Setup::new();
    let out = setup.run_server_with(&setup.path("no-such-config.toml"));
    out.assert_code(1);
    assert!(
        out.stderr
            .starts_with("agent-hub-server: startup failed at config: cannot read config"),
        "{}",
        out.stderr
    );
}

#[test]
fn a_port_in_use_is_fatal_at_listen() {
    let taken = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap();
    let port = taken.local_addr().unwrap().port();
    let mut setup = Setup::new();
    setup.config_text = Some(
        setup
            .generated_config()
            .replace("port = 0", &format!("port = {port}")),
    );
    setup.fails_at("listen", &format!("cannot bind 127.0.0.1:{port}"));
}

#[test]
fn server_usage() {
    let out = run(std::process::Command::new(SERVER), None);
    out.assert_code(2);
    assert!(out.stderr.contains("--config"), "{}", out.stderr);
    let mut cmd = std::process::Command::new(SERVER);
    cmd.arg("--version");
    run(cmd, None).assert_code(0);
}

#[test]
fn relative_paths_resolve_against_the_config_dir_not_the_cwd() {
    let setup = Setup::new();
    let dir = setup.dir.path.clone();
    // Started from cwd/ with a relative --config; the config's relative paths must land next
    // to the config, not in cwd/.
    let hub = setup.start_with_config_arg(Path::new("../config.toml"));
    hub.cli_send("alpha", "beta", "task", "{}");
    assert!(dir.join("audit.jsonl").is_file());
    assert!(dir.join("service.log").is_file());
    let strays: Vec<_> = std::fs::read_dir(dir.join("cwd")).unwrap().collect();
    assert!(strays.is_empty(), "nothing written in the cwd: {strays:?}");
}

#[test]
fn record_files_are_mode_600_even_when_they_existed_wider() {
    let setup = Setup::new();
    write_file(&setup.path("audit.jsonl"), "", 0o644);
    write_file(&setup.path("service.log"), "", 0o666);
    let hub = setup.start();
    hub.cli_send("alpha", "beta", "task", "{}");
    assert_eq!(mode_of(&hub.audit_path()), 0o600);
    assert_eq!(mode_of(&hub.service_log_path()), 0o600);

    let fresh = Hub::start();
    assert_eq!(mode_of(&fresh.audit_path()), 0o600);
    assert_eq!(mode_of(&fresh.service_log_path()), 0o600);
}

#[test]
fn every_audit_line_is_versioned_json() {
    let hub = Hub::with_limits(|l| l.queue_max_envelopes = 1);
    let mut bad = hub.raw();
    bad.write(&hello_line("alpha", "wrong"));
    bad.error();
    let id = hub.send(
        "alpha",
        "beta",
        "task",
        Some("c"),
        r#"{"nested":{"deep":[1,"two",null]}}"#,
    );
    let mut full = hub.login("alpha");
    full.write(&send_line("refused-1", "beta", "task", None, "{}"));
    full.error();
    assert_eq!(hub.drain("beta"), vec![id.clone()]);
    let mut junk = hub.raw();
    junk.write("junk\n");
    junk.error();
    let audit = hub.wait_audit("the records of the session", |a| {
        a.iter().filter(|v| v["event"] == "timeout").count() == 1
    });
    for rec in &audit {
        assert_eq!(rec["v"], 4, "{rec}");
        assert!(
            rec["prev"].is_string() || rec["event"] == "chain_start",
            "{rec}"
        );
        assert!(rec["event"].is_string(), "{rec}");
        let ts = rec["ts"].as_str().unwrap_or_else(|| panic!("no ts: {rec}"));
        assert!(chrono::DateTime::parse_from_rfc3339(ts).is_ok(), "{rec}");
    }
    let events: Vec<&str> = audit.iter().map(|v| v["event"].as_str().unwrap()).collect();
    for want in [
        "connected",
        "auth_failed",
        "authenticated",
        "accepted",
        "refused",
        "delivered",
        "timeout",
    ] {
        assert!(events.contains(&want), "no {want} record in {events:?}");
    }
    let accepted = audit.iter().find(|v| v["event"] == "accepted").unwrap();
    assert_eq!(
        accepted["envelope"]["body"],
        serde_json::json!({"nested":{"deep":[1,"two",null]}}),
        "bodies in full"
    );
    // Ordered: the accepted record precedes its delivery.
    let pos = |e: &str| audit.iter().position(|v| v["event"] == e).unwrap();
    assert!(pos("accepted") < pos("delivered"));
}

#[test]
fn the_service_log_never_holds_a_token_or_a_body() {
    let mut hub = Hub::start();
    let marker = "BODY-MARKER-93c1f0";
    hub.cli_send(
        "alpha",
        "beta",
        "task",
        &format!(r#"{{"secret":"{marker}"}}"#),
    );
    let out = hub.cli("await", "beta", &["--timeout", "0"]);
    assert!(out.stdout.contains(marker));
    let mut bad = hub.raw();
    bad.write(&hello_line("alpha", "WRONG-TOKEN-MARKER-55e2"));
    bad.error();
    let mut malformed = hub.login("gamma");
    malformed.write(&format!("{{\"send\":{{\"body\":\"{marker}\"}}}}\n"));
    malformed.error();
    drop((bad, malformed));
    hub.terminate();
    let log = hub.service_log();
    assert!(log.contains("hub stopped"), "{log}");
    for needle in [marker, "SECRET", "WRONG-TOKEN-MARKER"] {
        assert!(
            !log.contains(needle),
            "the service log holds {needle:?}:\n{log}"
        );
    }
    let audit = std::fs::read_to_string(hub.audit_path()).unwrap();
    assert!(audit.contains(marker), "the audit log holds bodies in full");
    assert!(
        !audit.contains("SECRET") && !audit.contains("WRONG-TOKEN-MARKER"),
        "no tokens in the audit log"
    );
}

#[test]
fn an_unwritable_audit_log_refuses_sends_and_still_serves_awaits() {
    if !Path::new("/dev/full").exists() {
        eprintln!("skipped: no /dev/full");
        return;
    }
    let mut setup = Setup::new();
    setup.audit_log_path = "/dev/full".into();
    let hub = setup.start();
    let out = hub.cli(
        "send",
        "alpha",
        &["--to", "beta", "--kind", "task", "--body", "{}"],
    );
    out.assert_code(1);
    assert!(
        out.stderr
            .starts_with("agent-hub: envelope not accepted: the audit log could not be written"),
        "{}",
        out.stderr
    );
    assert!(out.stdout.is_empty());

    let mut s = hub.login("alpha");
    s.write(&send_line("unaudited", "beta", "task", None, "{}"));
    let msg = s.error();
    assert!(msg.contains("audit log"), "{msg}");

    let out = hub.cli("await", "beta", &["--timeout", "0"]);
    out.assert_code(2);
    assert!(out.stderr.is_empty(), "{}", out.stderr);
    hub.wait_service_log("the audit failure to be logged", |s| {
        s.contains("audit log write failed")
    });
}

#[test]
fn sigterm_shuts_down_cleanly() {
    let mut hub = Hub::start();
    hub.send("alpha", "gamma", "task", None, "{}");
    let mut parked = hub.park("beta", AWAIT);
    let cli = spawn(hub.cli_command("await", "delta", &[]));
    hub.wait_audit("the CLI await to be parked", |a| {
        a.iter()
            .any(|v| v["event"] == "authenticated" && v["name"] == "delta")
    });
    hub.signal(libc::SIGTERM);
    assert_eq!(parked.error(), "hub is shutting down; nothing was consumed");
    parked.expect_eof();
    drop(parked);
    let out = cli.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "agent-hub: hub is shutting down; nothing was consumed\n"
    );
    let status = hub.wait_exit();
    assert_eq!(
        status.code(),
        Some(0),
        "{status:?}; stderr: {}",
        hub.stderr()
    );
    let log = hub.service_log();
    let last = log.lines().last().unwrap_or_default();
    assert!(
        last.ends_with("INFO hub stopped"),
        "last service log line: {last:?}"
    );
    let shutdown = hub.audit_events("shutdown");
    assert_eq!(shutdown.len(), 1);
    assert_eq!(shutdown[0]["queued"], 1);
    // Nothing listens any more.
    assert!(std::net::TcpStream::connect_timeout(
        &([127, 0, 0, 1], hub.port).into(),
        Duration::from_secs(1)
    )
    .is_err());
}

/// Regression: the ready line went out with `println!`, which panics on a broken pipe, so a
/// hub whose stdout nobody read any more (a supervisor that closed the pipe) died with exit
/// 101 right after logging "hub ready".
#[test]
fn a_hub_whose_stdout_nobody_reads_keeps_serving() {
    let mut hub = Setup::new().start_with_closed_stdout();
    let out = hub.cli("await", "beta", &["--timeout", "0"]);
    assert_eq!(out.code, 2, "{out:?}; server stderr: {}", hub.stderr());
    hub.cli_send("alpha", "beta", "task", "{}");
    assert_eq!(
        hub.terminate().code(),
        Some(0),
        "server stderr: {}",
        hub.stderr()
    );
}

#[test]
fn unopenable_record_files_are_fatal_at_their_stage() {
    let mut setup = Setup::new();
    setup.audit_log_path = "no-such-dir/audit.jsonl".into();
    setup.fails_at("audit log", "cannot open audit log");
    let mut setup = Setup::new();
    setup.service_log_path = "no-such-dir/service.log".into();
    setup.fails_at("service log", "cannot open service log");
}

/// `agent-hub-server demo DIR` accepts delegated work out of the box (issue 11): its config
/// has a `[tasks]` table whose one root is the folder the demo was started from. Probed with
/// the verb: an agent that does not exist is refused as unknown, not "not enabled" (which
/// agents exist depends on the machine).
#[test]
fn the_demo_accepts_delegation_under_the_folder_it_was_started_from() {
    let tmp = TempDir::new();
    let started_in = tmp.path.join("work");
    std::fs::create_dir_all(started_in.join("repo")).unwrap();
    let demo = tmp.path.join("demo");
    let mut cmd = std::process::Command::new(SERVER);
    cmd.args(["demo", demo.to_str().unwrap(), "--port", "0"])
        .current_dir(&started_in)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn().expect("spawn the demo");
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let port = loop {
        let line = rx
            .recv_timeout(DEADLINE)
            .expect("the demo prints its ready line");
        if let Some(p) = parse_ready_line(&line) {
            break p;
        }
    };
    let token = std::fs::read_to_string(demo.join("tokens/orchestrator.token")).unwrap();
    let ask = |cwd: &std::path::Path, agent: &str| {
        let mut r = Raw::connect(port);
        r.write(&format!(
            "{}{}\n",
            hello_line("orchestrator", token.trim()),
            serde_json::json!({"delegate": {"agent": agent, "cwd": cwd, "prompt": "p"}})
        ));
        r.expect_line(OK);
        r.json()["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    let inside = std::fs::canonicalize(started_in.join("repo")).unwrap();
    let err = ask(&inside, "no-such-agent");
    assert!(err.starts_with("invalid delegate: unknown agent"), "{err}");
    let config = std::fs::read_to_string(demo.join("config.toml")).unwrap();
    assert!(config.contains("[tasks]"), "{config}");
    let root = std::fs::canonicalize(&started_in).unwrap();
    assert!(
        config.contains(&format!("cwd_roots = [{:?}]", root.to_str().unwrap())),
        "{config}"
    );
    let _ = child.kill();
    let _ = child.wait();
}
