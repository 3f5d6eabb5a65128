//! Receipts end to end (issue 12; SPEC §12.4 "Readers", "Waiting for a stage"): the real
//! `agent-hub` reading clients name themselves (`cli-await`, `stop-hook`, `drain`,
//! `plugin-drain`) and `agent-hub status --wait-for` waits hub-side, with its exit codes (0
//! reached, 2 timeout, 3 ended). Exact timing is the simulation's (`crates/proto/src/hub/tests/receipts.rs`);
//! here every wait is a bounded read or poll.

use crate::harness::*;
use serde_json::Value;
use std::process::Command;

fn status_json(out: &Output) -> Value {
    serde_json::from_str(out.stdout.trim_end())
        .unwrap_or_else(|e| panic!("status printed no JSON ({e}): {}", out.stdout))
}

/// (state, reader, wait) of a printed status.
fn stage(v: &Value) -> (String, Option<String>, Option<String>) {
    let s = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_owned);
    (s("state").unwrap_or_default(), s("reader"), s("wait"))
}

fn st(
    state: &str,
    reader: Option<&str>,
    wait: Option<&str>,
) -> (String, Option<String>, Option<String>) {
    (
        state.to_owned(),
        reader.map(str::to_owned),
        wait.map(str::to_owned),
    )
}

/// `agent-hub hook stop` or `drain` for `name`, with its own state directory.
fn deliver_command(hub: &Hub, verb: &[&str], name: &str, rest: &[&str]) -> Command {
    let mut cmd = Command::new(CLIENT);
    cmd.args(verb)
        .arg("--as")
        .arg(name)
        .arg("--token-file")
        .arg(hub.token_file(name))
        .arg("--port")
        .arg(hub.port.to_string())
        .args(rest)
        .env("XDG_STATE_HOME", hub.setup.path("state"))
        .env("HOME", hub.setup.path("cwd"))
        .current_dir(hub.setup.path("cwd"));
    cmd
}

#[test]
fn status_wait_for_acked_ends_when_a_real_await_acks() {
    let hub = Hub::start();
    let id = hub.cli_send("alpha", "beta", "task", r#"{"n":1}"#);
    // The sender waits; the reader then takes the envelope in ack mode (the default).
    let waiter = spawn(hub.cli_command(
        "status",
        "alpha",
        &["--id", &id, "--wait-for", "acked", "--timeout", "30"],
    ));
    let got = hub.cli("await", "beta", &["--timeout", "5"]);
    got.assert_code(0);
    assert!(got.stdout.contains(&id), "{}", got.stdout);
    let out = waiter.wait_with_output().expect("status exits");
    let out = Output {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        elapsed: std::time::Duration::ZERO,
    };
    out.assert_code(0);
    let v = status_json(&out);
    assert_eq!(stage(&v), st("acked", Some("cli-await"), Some("reached")));
    assert_eq!(v["id"], id.as_str());
    assert_eq!(v["from"], "alpha");
    assert_eq!(v["to"], "beta");
    // Asked again without waiting: the same receipt, no `wait` key, exit 0.
    let again = hub.cli("status", "alpha", &["--id", &id]);
    again.assert_code(0);
    assert_eq!(
        stage(&status_json(&again)),
        st("acked", Some("cli-await"), None)
    );
}

#[test]
fn status_wait_exit_codes_timeout_and_ended() {
    let hub = Hub::start();
    let id = hub.cli_send("alpha", "beta", "task", "{}");
    // Nobody reads: the hub answers at its timeout, exit 2, with where it is now.
    let out = hub.cli(
        "status",
        "alpha",
        &["--id", &id, "--wait-for", "delivered", "--timeout", "1"],
    );
    out.assert_code(2);
    let v = status_json(&out);
    assert_eq!(stage(&v), st("queued", None, Some("timeout")));
    assert_eq!(v["position"], 1);
    // A plain delivery is never acked: waiting for acked ends, exit 3.
    hub.cli("await", "beta", &["--no-ack", "--timeout", "5"])
        .assert_code(0);
    let out = hub.cli(
        "status",
        "alpha",
        &["--id", &id, "--wait-for", "acked", "--timeout", "30"],
    );
    out.assert_code(3);
    assert_eq!(
        stage(&status_json(&out)),
        st("delivered", Some("cli-await"), Some("ended"))
    );
    // Another agent's envelope, or none at all: unknown at once, exit 3.
    for (asker, what) in [("gamma", id.as_str()), ("alpha", "no-such-id")] {
        let out = hub.cli(
            "status",
            asker,
            &["--id", what, "--wait-for", "delivered", "--timeout", "30"],
        );
        out.assert_code(3);
        let v = status_json(&out);
        assert_eq!(stage(&v), st("unknown", None, Some("ended")), "{asker}");
        assert!(v.get("from").is_none() && v.get("to").is_none(), "{v}");
    }
    // Usage: --timeout needs --wait-for; the stage must be one of the list (exit 1).
    let out = hub.cli("status", "alpha", &["--id", &id, "--timeout", "3"]);
    out.assert_code(1);
    let out = hub.cli("status", "alpha", &["--id", &id, "--wait-for", "read"]);
    out.assert_code(1);
    assert!(out.stderr.contains("delivered"), "{}", out.stderr);
}

#[test]
fn the_hook_and_drain_paths_name_their_readers() {
    let hub = Hub::start();
    // The Stop hook: printed as the block decision, then acked as stop-hook.
    let id = hub.cli_send("alpha", "beta", "task", r#"{"q":"hi"}"#);
    let hook = run(
        deliver_command(&hub, &["hook", "stop"], "beta", &[]),
        Some(br#"{"session_id":"s1","hook_event_name":"Stop","stop_hook_active":false}"#),
    );
    hook.assert_code(0);
    assert!(
        hook.stdout.contains("\"decision\":\"block\""),
        "{}",
        hook.stdout
    );
    assert!(hook.stdout.contains(&id), "{}", hook.stdout);
    let out = hub.cli(
        "status",
        "alpha",
        &["--id", &id, "--wait-for", "acked", "--timeout", "10"],
    );
    out.assert_code(0);
    assert_eq!(
        stage(&status_json(&out)),
        st("acked", Some("stop-hook"), Some("reached"))
    );

    // `drain`: printed to stdout, acked as drain.
    let id = hub.cli_send("alpha", "beta", "task", "{}");
    let drained = run(
        deliver_command(&hub, &["drain"], "beta", &["--format", "json"]),
        None,
    );
    drained.assert_code(0);
    assert!(drained.stdout.contains(&id));
    let out = hub.cli("status", "alpha", &["--id", &id]);
    assert_eq!(stage(&status_json(&out)), st("acked", Some("drain"), None));

    // `drain --confirm`, as the OpenCode plugin runs it: acked as plugin-drain once confirmed.
    let id = hub.cli_send("alpha", "beta", "task", "{}");
    let drained = run(
        deliver_command(&hub, &["drain"], "beta", &["--confirm"]),
        Some(b"ok\n"),
    );
    drained.assert_code(0);
    let out = hub.cli("status", "alpha", &["--id", &id]);
    assert_eq!(
        stage(&status_json(&out)),
        st("acked", Some("plugin-drain"), None)
    );

    // Unconfirmed: nothing acked, the envelope is queued again with no reader.
    let id = hub.cli_send("alpha", "beta", "task", "{}");
    let drained = run(
        deliver_command(&hub, &["drain"], "beta", &["--confirm"]),
        Some(b"no\n"),
    );
    drained.assert_code(1);
    let v = poll_until("the unconfirmed envelope back in its queue", || {
        let v = status_json(&hub.cli("status", "alpha", &["--id", &id]));
        (v["state"] == "queued").then_some(v)
    });
    assert!(v.get("reader").is_none(), "{v}");
}

/// With the SQLite store the reader is on disk with the state: a restarted hub still says
/// which reader acked the envelope.
#[test]
fn the_reader_survives_a_restart_with_the_sqlite_store() {
    let mut hub = Setup::new().with_sqlite_store(1 << 30).start();
    let id = hub.cli_send("alpha", "beta", "task", "{}");
    hub.cli("await", "beta", &["--timeout", "5"]).assert_code(0);
    let out = hub.cli(
        "status",
        "alpha",
        &["--id", &id, "--wait-for", "acked", "--timeout", "10"],
    );
    out.assert_code(0);
    hub.kill();
    hub.restart();
    let out = hub.cli("status", "alpha", &["--id", &id]);
    out.assert_code(0);
    assert_eq!(
        stage(&status_json(&out)),
        st("acked", Some("cli-await"), None)
    );
}
