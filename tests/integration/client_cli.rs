//! The `agent-hub` CLI as users and skills run it (SPEC §9 "Client CLI contract"):
//! its output, exit codes 0/1/2, stderr prefix, token-file rules, `--body -`, filters and
//! timeouts.
//!
//! Owns: the process-level contract of the client binary. Refuses: hub behaviour that the raw
//! socket tests in `wire` and `delivery` pin more precisely.

use crate::harness::*;
use serde_json::{json, Value};
use std::process::Command;
use std::time::Duration;

fn client(args: &[&str]) -> Output {
    let mut cmd = Command::new(CLIENT);
    cmd.args(args);
    run(cmd, None)
}

fn parse(stdout: &str) -> Value {
    assert!(
        stdout.ends_with('\n') && stdout.matches('\n').count() == 1,
        "one line expected: {stdout:?}"
    );
    serde_json::from_str(stdout.trim_end())
        .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {stdout}"))
}

#[test]
fn help_and_version_exit_zero() {
    let out = client(&["--help"]);
    out.assert_code(0);
    assert!(
        out.stdout.contains("send") && out.stdout.contains("await"),
        "{}",
        out.stdout
    );
    let out = client(&["--version"]);
    out.assert_code(0);
    assert_eq!(
        out.stdout,
        format!("agent-hub {}\n", env!("CARGO_PKG_VERSION"))
    );
    for verb in ["send", "await"] {
        let out = client(&[verb, "--help"]);
        out.assert_code(0);
        assert!(out.stdout.contains("--token-file"), "{}", out.stdout);
    }
}

#[test]
fn usage_errors_exit_one_with_the_agent_hub_prefix() {
    let cases: &[&[&str]] = &[
        &[],
        &["bogus"],
        &["send"],
        &[
            "send",
            "--as",
            "a",
            "--token-file",
            "t",
            "--port",
            "x",
            "--to",
            "b",
            "--kind",
            "k",
            "--body",
            "{}",
        ],
        &[
            "send",
            "--as",
            "a",
            "--token-file",
            "t",
            "--port",
            "70000",
            "--to",
            "b",
            "--kind",
            "k",
            "--body",
            "{}",
        ],
        &[
            "await",
            "--as",
            "a",
            "--token-file",
            "t",
            "--port",
            "1",
            "--timeout",
            "-1",
        ],
        &[
            "await",
            "--as",
            "a",
            "--token-file",
            "t",
            "--port",
            "1",
            "--colour",
        ],
    ];
    for args in cases {
        let out = client(args);
        assert_eq!(out.code, 1, "{args:?}: {out:?}");
        assert!(
            out.stderr.starts_with("agent-hub: "),
            "{args:?}: {:?}",
            out.stderr
        );
        assert!(out.stdout.is_empty(), "{args:?}: {:?}", out.stdout);
    }
}

#[test]
fn send_prints_the_id_and_await_prints_the_bare_envelope() {
    let hub = Hub::start();
    let out = hub.cli(
        "send",
        "alpha",
        &[
            "--to",
            "beta",
            "--kind",
            "task",
            "--body",
            r#"{"op":"reindex","n":12345678901234567890}"#,
        ],
    );
    out.assert_code(0);
    assert!(out.stderr.is_empty(), "{}", out.stderr);
    let id = out.stdout.trim_end();
    assert_eq!(out.stdout, format!("{id}\n"));
    assert!(
        uuid::Uuid::parse_str(id).is_ok_and(|u| u.get_version_num() == 4),
        "a UUIDv4 id: {id}"
    );

    let out = hub.cli("await", "beta", &[]);
    out.assert_code(0);
    assert!(out.stderr.is_empty(), "{}", out.stderr);
    // The bare envelope, exactly the text the hub sent, without the "envelope" tag.
    assert!(
        out.stdout.starts_with(&format!(
            r#"{{"id":"{id}","from":"alpha","to":"beta","ts":""#
        )),
        "{}",
        out.stdout
    );
    assert!(out.stdout.ends_with(concat!(
        r#","kind":"task","correlationId":null,"body":{"op":"reindex","n":12345678901234567890}}"#,
        "\n"
    )));
    let env = parse(&out.stdout);
    assert!(chrono::DateTime::parse_from_rfc3339(env["ts"].as_str().unwrap()).is_ok());
}

#[test]
fn a_complete_exchange_with_correlation() {
    let hub = Hub::start();
    let task = hub.cli_send("alpha", "beta", "task", r#"{"op":"reindex"}"#);
    let got = parse(&hub.cli("await", "beta", &["--timeout", "5"]).stdout);
    assert_eq!(got["id"], task.as_str());
    let out = hub.cli(
        "send",
        "beta",
        &[
            "--to",
            "alpha",
            "--kind",
            "result",
            "--correlation-id",
            &task,
            "--body",
            r#"{"status":"done"}"#,
        ],
    );
    out.assert_code(0);
    let out = hub.cli("await", "alpha", &["--reply-to", &task, "--timeout", "5"]);
    out.assert_code(0);
    let result = parse(&out.stdout);
    assert_eq!(result["from"], "beta");
    assert_eq!(result["kind"], "result");
    assert_eq!(result["correlationId"], task.as_str());
    assert_eq!(result["body"], json!({"status": "done"}));
}

#[test]
fn body_dash_reads_the_body_from_stdin() {
    let hub = Hub::start();
    let out = hub.cli_stdin(
        "send",
        "alpha",
        &["--to", "beta", "--kind", "task", "--body", "-"],
        Some(b"{\"k\": [1, 2], \"s\": \"\\u00e9\"}\n"),
    );
    out.assert_code(0);
    let id = out.stdout.trim_end();
    let mut a = hub.login("beta");
    a.write(&format!("{AWAIT_NOW}\n"));
    let line = a.line();
    assert!(
        line.ends_with(r#""body":{"k": [1, 2], "s": "\u00e9"}}}"#),
        "body kept as written: {line}"
    );
    assert!(line.contains(id));
}

/// Regression: a pretty-printed body (raw newlines between tokens) was written into the send
/// line as is, cutting it in two; the hub refused the first half as malformed.
#[test]
fn a_pretty_printed_body_is_sent_on_one_line() {
    let hub = Hub::start();
    let pretty = "{\n  \"k\": [\n    1,\n    12345678901234567890\n  ],\r\n  \"s\": \"a\\nb\"\n}\n";
    let out = hub.cli_stdin(
        "send",
        "alpha",
        &["--to", "beta", "--kind", "task", "--body", "-"],
        Some(pretty.as_bytes()),
    );
    out.assert_code(0);
    let out = hub.cli(
        "send",
        "alpha",
        &[
            "--to",
            "beta",
            "--kind",
            "task",
            "--body",
            pretty.trim_end(),
        ],
    );
    out.assert_code(0);
    for _ in 0..2 {
        let mut a = hub.login("beta");
        a.write(&format!("{AWAIT_NOW}\n"));
        let line = a.line();
        // Only the raw newlines became spaces; every other byte is as written.
        assert!(
            line.ends_with("\"body\":{   \"k\": [     1,     12345678901234567890   ],\r   \"s\": \"a\\nb\" }}}"),
            "{line}"
        );
    }
}

#[test]
fn a_body_that_is_not_json_is_refused_before_connecting() {
    // Nothing listens on the port: the message must be about JSON, not about connecting.
    let hub = Hub::start();
    let mut cmd = Command::new(CLIENT);
    cmd.args(["send", "--as", "alpha", "--token-file"])
        .arg(hub.token_file("alpha"))
        .args([
            "--port",
            &dead_port().to_string(),
            "--to",
            "beta",
            "--kind",
            "task",
            "--body",
            "{not json",
        ]);
    let out = run(cmd, None);
    out.assert_code(1);
    assert!(
        out.stderr.starts_with("agent-hub: --body is not JSON"),
        "{}",
        out.stderr
    );
    assert!(!out.stderr.contains("connect"), "{}", out.stderr);

    // Against the live hub too: it never sees a connection.
    for body in ["{not json", "", "1 2", "{\"a\":1}x"] {
        let out = hub.cli_stdin(
            "send",
            "alpha",
            &["--to", "beta", "--kind", "task", "--body", "-"],
            Some(body.as_bytes()),
        );
        out.assert_code(1);
        assert!(
            out.stderr.starts_with("agent-hub: --body is not JSON"),
            "{body:?}: {}",
            out.stderr
        );
    }
    let id = hub.send("alpha", "beta", "task", None, "{}");
    let audit = hub.wait_audit("the probe send", |a| {
        a.iter().any(|v| v["event"] == "accepted")
    });
    assert_eq!(
        audit.iter().filter(|v| v["event"] == "connected").count(),
        1,
        "only the probe connected: {audit:?}"
    );
    assert_eq!(hub.drain("beta"), vec![id]);
}

#[test]
fn an_unreachable_hub_exits_one() {
    let setup = Setup::new();
    let port = dead_port().to_string();
    let token = setup.path("tokens/alpha.token");
    for verb in [
        &["send", "--to", "beta", "--kind", "task", "--body", "{}"][..],
        &["await", "--timeout", "0"][..],
    ] {
        let mut cmd = Command::new(CLIENT);
        cmd.arg(verb[0])
            .args(["--as", "alpha", "--token-file"])
            .arg(&token)
            .args(["--port", &port])
            .args(&verb[1..]);
        let out = run(cmd, None);
        out.assert_code(1);
        assert!(
            out.stderr.starts_with(&format!(
                "agent-hub: cannot connect to the hub at 127.0.0.1:{port}"
            )),
            "{}",
            out.stderr
        );
        assert!(out.stdout.is_empty());
    }
}

#[test]
fn a_token_file_readable_by_others_is_refused_naming_chmod_600() {
    let hub = Hub::start();
    for mode in [0o644, 0o640, 0o604, 0o660] {
        let path = hub
            .setup
            .write_token("alpha", &format!("{}\n", token_of("alpha")), mode);
        let out = hub.cli(
            "send",
            "alpha",
            &["--to", "beta", "--kind", "task", "--body", "{}"],
        );
        out.assert_code(1);
        assert!(
            out.stderr.starts_with("agent-hub: token file "),
            "{}",
            out.stderr
        );
        assert!(
            out.stderr
                .contains(&format!("fix it with: chmod 600 {}", path.display())),
            "{}",
            out.stderr
        );
    }
    hub.setup.write_token("alpha", token_of("alpha"), 0o400);
    hub.cli_send("alpha", "beta", "task", "{}");
    std::fs::remove_file(hub.token_file("alpha")).unwrap();
    let out = hub.cli("await", "alpha", &["--timeout", "0"]);
    out.assert_code(1);
    assert!(
        out.stderr.starts_with("agent-hub: cannot read token file"),
        "{}",
        out.stderr
    );
}

#[test]
fn token_file_trailing_whitespace_is_trimmed_and_blank_is_refused() {
    let hub = Hub::start();
    hub.setup
        .write_token("alpha", &format!("{} \t\r\n\n", token_of("alpha")), 0o600);
    hub.cli_send("alpha", "beta", "task", "{}");
    hub.setup.write_token("alpha", token_of("alpha"), 0o600); // no newline at all
    hub.cli_send("alpha", "beta", "task", "{}");
    for blank in ["", "\n", "  \n\t\n"] {
        hub.setup.write_token("alpha", blank, 0o600);
        let out = hub.cli(
            "send",
            "alpha",
            &["--to", "beta", "--kind", "task", "--body", "{}"],
        );
        out.assert_code(1);
        assert!(out.stderr.contains("is empty"), "{blank:?}: {}", out.stderr);
    }
}

#[test]
fn hub_errors_pass_through_verbatim() {
    let hub = Hub::start();
    hub.setup.write_token("alpha", "not-the-token\n", 0o600);
    let out = hub.cli(
        "send",
        "alpha",
        &["--to", "beta", "--kind", "task", "--body", "{}"],
    );
    out.assert_code(1);
    assert_eq!(
        out.stderr,
        "agent-hub: authentication failed: unknown name or wrong token\n"
    );
    assert!(out.stdout.is_empty());

    let out = hub.cli(
        "send",
        "gamma",
        &["--to", "beta", "--kind", "bounce", "--body", "{}"],
    );
    out.assert_code(1);
    assert_eq!(
        out.stderr,
        "agent-hub: invalid envelope: kind \"bounce\" is reserved for the hub\n"
    );

    let out = hub.cli("await", "gamma", &["--kind", ""]);
    out.assert_code(1);
    assert_eq!(
        out.stderr,
        "agent-hub: invalid await: kind must not be empty\n"
    );
    assert_eq!(hub.drain("beta"), Vec::<String>::new());
}

#[test]
fn await_timeout_zero_exits_two_silently() {
    let hub = Hub::start();
    let out = hub.cli("await", "beta", &["--timeout", "0"]);
    out.assert_code(2);
    assert!(out.stdout.is_empty() && out.stderr.is_empty(), "{out:?}");
}

#[test]
fn await_timeout_n_exits_two_after_n_seconds_and_consumes_nothing() {
    let hub = Hub::start();
    // A queued envelope the filter does not match must stay queued.
    let id = hub.cli_send("alpha", "beta", "task", "{}");
    let out = hub.cli("await", "beta", &["--kind", "result", "--timeout", "1"]);
    out.assert_code(2);
    assert!(out.stdout.is_empty() && out.stderr.is_empty(), "{out:?}");
    assert!(out.elapsed >= Duration::from_secs(1), "{:?}", out.elapsed);
    assert_eq!(hub.drain("beta"), vec![id]);
}

#[test]
fn await_filters_select_by_kind_and_reply_to() {
    let hub = Hub::start();
    let task = hub.cli_send("alpha", "beta", "task", "1");
    let out = hub.cli(
        "send",
        "alpha",
        &[
            "--to",
            "beta",
            "--kind",
            "result",
            "--correlation-id",
            "C-1",
            "--body",
            "2",
        ],
    );
    out.assert_code(0);
    let result = out.stdout.trim_end().to_owned();
    let wake = hub.cli_send("alpha", "beta", "wake", "3");
    let take = |rest: &[&str]| {
        let mut args = rest.to_vec();
        args.extend(["--timeout", "0"]);
        let out = hub.cli("await", "beta", &args);
        if out.code == 2 {
            return None;
        }
        out.assert_code(0);
        Some(parse(&out.stdout)["id"].as_str().unwrap().to_owned())
    };
    assert_eq!(take(&["--kind", "wake"]), Some(wake));
    assert_eq!(take(&["--reply-to", "C-2"]), None);
    assert_eq!(take(&["--reply-to", "C-1", "--kind", "task"]), None);
    assert_eq!(
        take(&["--reply-to", "C-1", "--kind", "result"]),
        Some(result)
    );
    assert_eq!(take(&[]), Some(task));
    assert_eq!(take(&[]), None);
}
