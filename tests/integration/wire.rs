//! Every wire line and every bad input, over raw sockets against the real server (SPEC §2
//! "Transport and framing", §3.2 "Rules", §4 "Connection flow").
//!
//! Owns: exact hub replies to good and bad lines, envelope validation, `from` stamping and the
//! byte-for-byte body. Refuses timing (see `limits`) and routing order (see `delivery`).

use crate::harness::*;
use serde_json::json;

#[test]
fn hello_send_and_await_lines_are_exact() {
    let hub = Hub::start();
    let id = "0b0c6f5e-4d4e-4a39-9b5e-2b8f2f8a7f01";
    let mut s = hub.raw();
    s.write(&hello_line("alpha", token_of("alpha")));
    s.expect_line(OK);
    s.write(&send_line(id, "beta", "task", None, r#"{"op":"reindex"}"#));
    s.expect_line(&format!(r#"{{"accepted":{{"id":"{id}"}}}}"#));
    s.expect_eof();

    let mut a = hub.raw();
    a.write(&hello_line("beta", token_of("beta")));
    a.expect_line(OK);
    a.write(&format!("{AWAIT}\n"));
    a.expect_line(&format!(
        r#"{{"envelope":{{"id":"{id}","from":"alpha","to":"beta","ts":"{TS}","kind":"task","correlationId":null,"body":{{"op":"reindex"}}}}}}"#
    ));
    a.expect_eof();

    let mut t = hub.login("beta");
    t.write(&format!("{AWAIT_NOW}\n"));
    t.expect_line(TIMEOUT);
    t.expect_eof();
}

#[test]
fn hello_and_verb_pipelined_in_one_write_work() {
    let hub = Hub::start();
    let mut s = hub.raw();
    let id = "pipelined-1";
    s.write(&format!(
        "{}{}",
        hello_line("alpha", token_of("alpha")),
        send_line(id, "beta", "task", None, "null")
    ));
    s.expect_line(OK);
    s.expect_line(&format!(r#"{{"accepted":{{"id":"{id}"}}}}"#));
    s.expect_eof();
    let env = hub.poll_envelope("beta", AWAIT_NOW).expect("queued");
    assert_eq!(env["id"], id);
    assert_eq!(env["body"], json!(null));
}

#[test]
fn auth_failures_get_one_error_line_and_are_audited() {
    let hub = Hub::start();
    let cases = [
        ("alpha", "wrong-token"),
        ("alpha", token_of("beta")),    // another agent's token
        ("mallory", token_of("alpha")), // not on the roster
        ("alpha", ""),
    ];
    for (name, token) in cases {
        let mut s = hub.raw();
        s.write(&hello_line(name, token));
        assert_eq!(
            s.error(),
            "authentication failed: unknown name or wrong token",
            "hello as {name}"
        );
        s.expect_eof();
    }
    let failed = hub.wait_audit("four auth_failed records", |a| {
        a.iter().filter(|v| v["event"] == "auth_failed").count() == 4
    });
    // The name tried is recorded, on the roster or not (audit v4, SPEC §6.2); a token tried
    // as a name is not (tests/integration/strangers.rs).
    let names: Vec<Option<&str>> = failed
        .iter()
        .filter(|v| v["event"] == "auth_failed")
        .map(|v| v["name"].as_str())
        .collect();
    assert_eq!(
        names,
        [Some("alpha"), Some("alpha"), Some("mallory"), Some("alpha")]
    );
    assert!(hub.audit_events("authenticated").is_empty());
}

#[test]
fn a_first_line_that_is_not_hello_is_refused() {
    let hub = Hub::start();
    let mut s = hub.raw();
    s.write(&format!("{AWAIT}\n"));
    assert_eq!(s.error(), "expected hello as the first line, got await");
    s.expect_eof();

    let mut s = hub.raw();
    s.write(&send_line("not-hello", "beta", "task", None, "1"));
    assert_eq!(s.error(), "expected hello as the first line, got send");
    s.expect_eof();
    assert_eq!(hub.drain("beta"), Vec::<String>::new(), "nothing queued");
}

#[test]
fn a_second_hello_is_refused() {
    let hub = Hub::start();
    let mut s = hub.login("alpha");
    s.write(&hello_line("alpha", token_of("alpha")));
    assert_eq!(s.error(), "a second hello on one connection");
    s.expect_eof();
}

#[test]
fn malformed_lines_are_refused_before_and_after_hello() {
    let hub = Hub::start();
    let bad = [
        "{not json",
        "[]",
        "\"hello\"",
        r#"{"hello":["alpha","tok"]}"#,
        r#"{"bogus":{}}"#,
        r#"{"hello":{"name":"alpha","token":"t","extra":1}}"#,
        r#"{"await":{},"send":{}}"#,
        r#"{"await":{"timeoutSecs":-1}}"#,
        r#"{"await":{"timeoutSecs":1.5}}"#,
        r#"{"await":"now"}"#,
    ];
    for line in bad {
        for authenticated in [false, true] {
            let mut s = if authenticated {
                hub.login("alpha")
            } else {
                hub.raw()
            };
            s.write(&format!("{line}\n"));
            let msg = s.error();
            assert!(
                msg.starts_with("malformed line: "),
                "{line:?} (after hello: {authenticated}) → {msg}"
            );
            s.expect_eof();
        }
    }
    // The hub keeps serving.
    let id = hub.send("alpha", "beta", "task", None, "1");
    assert_eq!(hub.drain("beta"), vec![id]);
}

#[test]
fn invalid_utf8_is_refused_before_and_after_hello() {
    let hub = Hub::start();
    let mut s = hub.raw();
    s.write_bytes(b"{\"hello\":{\"name\":\"al\xffpha\",\"token\":\"t\"}}\n");
    assert_eq!(s.error(), "line is not valid UTF-8");
    s.expect_eof();

    let mut s = hub.login("alpha");
    s.write_bytes(b"{\"await\":{\"kind\":\"\xc3\x28\"}}\n");
    assert_eq!(s.error(), "line is not valid UTF-8");
    s.expect_eof();
    let id = hub.send("alpha", "beta", "task", None, "1");
    assert_eq!(hub.drain("beta"), vec![id]);
}

#[test]
fn a_line_over_the_cap_is_refused_and_the_hub_keeps_serving() {
    let hub = Hub::with_limits(|l| l.max_line_bytes = 1024);
    // Exactly at the cap (not counting the newline): accepted.
    let head = hello_line("alpha", token_of("alpha"));
    let frame = send_line("cap-1", "beta", "task", None, "\"\"");
    let pad = 1024 - (frame.len() - 1);
    let at_cap = send_line(
        "cap-1",
        "beta",
        "task",
        None,
        &format!("\"{}\"", "x".repeat(pad)),
    );
    assert_eq!(at_cap.len(), 1025);
    let mut s = hub.raw();
    s.write(&format!("{head}{at_cap}"));
    s.expect_line(OK);
    s.expect_line(r#"{"accepted":{"id":"cap-1"}}"#);
    s.expect_eof();

    // One byte over: refused, nothing queued.
    let over = send_line(
        "cap-2",
        "beta",
        "task",
        None,
        &format!("\"{}\"", "x".repeat(pad + 1)),
    );
    let mut s = hub.raw();
    s.write(&format!("{head}{over}"));
    s.expect_line(OK);
    assert_eq!(s.error(), "line exceeds the limit of 1024 bytes");
    s.shutdown_write();
    s.expect_eof();

    // Over the cap before hello, too.
    let mut s = hub.raw();
    s.write(&format!("{}\n", "y".repeat(2000)));
    assert_eq!(s.error(), "line exceeds the limit of 1024 bytes");
    s.shutdown_write();
    s.expect_eof();

    assert_eq!(hub.drain("beta"), vec!["cap-1".to_owned()]);
}

#[test]
fn envelope_field_rules_are_enforced_and_nothing_is_queued() {
    let hub = Hub::start();
    let ok = json!({"id":"e1","from":"alpha","to":"beta","ts":TS,"kind":"task","correlationId":null,"body":{}});
    let with = |key: &str, value: serde_json::Value| {
        let mut v = ok.clone();
        v[key] = value;
        v
    };
    let without = |key: &str| {
        let mut v = ok.clone();
        v.as_object_mut().unwrap().remove(key);
        v
    };
    let exact: Vec<(serde_json::Value, &str)> = vec![
        (
            with("id", json!("")),
            "invalid envelope: id must not be empty",
        ),
        (
            with("to", json!("")),
            "invalid envelope: to must not be empty",
        ),
        (
            with("kind", json!("")),
            "invalid envelope: kind must not be empty",
        ),
        (
            with("correlationId", json!("")),
            "invalid envelope: correlationId must not be empty",
        ),
        (
            with("ts", json!("yesterday")),
            "invalid envelope: ts is not an RFC 3339 timestamp",
        ),
        (
            with("ts", json!("2026-07-21 06:40:51")),
            "invalid envelope: ts is not an RFC 3339 timestamp",
        ),
        (
            with("kind", json!("bounce")),
            "invalid envelope: kind \"bounce\" is reserved for the hub",
        ),
        (
            with("to", json!("hub")),
            "invalid envelope: to \"hub\" names the hub itself, which receives nothing",
        ),
        (
            with("to", json!("Hub")),
            "invalid envelope: to \"hub\" names the hub itself, which receives nothing",
        ),
    ];
    let malformed: Vec<(serde_json::Value, &str)> = vec![
        (with("extra", json!(1)), "unknown field in `send`"),
        (without("body"), "missing field `body`"),
        (without("id"), "missing field `id`"),
        (without("from"), "missing field `from`"),
        (without("ts"), "missing field `ts`"),
        (with("id", json!(7)), "invalid type"),
        (with("correlationId", json!(7)), "invalid type"),
        (json!([]), "invalid type"),
    ];
    for (env, want) in exact {
        let mut s = hub.login("alpha");
        s.write(&format!("{}\n", json!({ "send": env })));
        assert_eq!(s.error(), want, "envelope {env}");
        s.expect_eof();
    }
    for (env, want) in malformed {
        let mut s = hub.login("alpha");
        s.write(&format!("{}\n", json!({ "send": env })));
        let msg = s.error();
        assert!(
            msg.starts_with("malformed line: ") && msg.contains(want),
            "envelope {env} → {msg}"
        );
        s.expect_eof();
    }
    // correlationId may be absent (then null on delivery), and the timestamp may carry an offset.
    let mut s = hub.login("alpha");
    let mut env = without("correlationId");
    env["ts"] = json!("2026-07-21T08:40:51.123+02:00");
    s.write(&format!("{}\n", json!({ "send": env })));
    s.expect_line(r#"{"accepted":{"id":"e1"}}"#);
    let got = hub.poll_envelope("beta", AWAIT_NOW).unwrap();
    assert_eq!(got["correlationId"], json!(null));
    assert!(got.as_object().unwrap().contains_key("correlationId"));
    assert_eq!(got["ts"], "2026-07-21T08:40:51.123+02:00");
    assert_eq!(
        hub.drain("beta"),
        Vec::<String>::new(),
        "only the valid envelope was queued"
    );
}

#[test]
fn await_with_an_empty_filter_is_refused() {
    let hub = Hub::start();
    for (line, want) in [
        (
            r#"{"await":{"replyTo":""}}"#,
            "invalid await: replyTo must not be empty",
        ),
        (
            r#"{"await":{"kind":""}}"#,
            "invalid await: kind must not be empty",
        ),
    ] {
        let mut s = hub.login("beta");
        s.write(&format!("{line}\n"));
        assert_eq!(s.error(), want);
        s.expect_eof();
    }
    // Explicit nulls are the same as absent keys.
    let mut s = hub.login("beta");
    s.write(&format!("{}\n", await_line(None, None, Some(0))));
    s.expect_line(TIMEOUT);
}

#[test]
fn from_is_stamped_with_the_authenticated_name() {
    let hub = Hub::start();
    for forged in ["beta", "hub", "HUB", "", "alpha"] {
        let mut env = json!({"id":"f","from":forged,"to":"gamma","ts":TS,"kind":"task","body":{}});
        env["id"] = json!(format!("forged-{forged}"));
        let mut s = hub.login("alpha");
        s.write(&format!("{}\n", json!({ "send": env })));
        assert!(s.json().get("accepted").is_some());
    }
    for _ in 0..5 {
        let env = hub.poll_envelope("gamma", AWAIT_NOW).unwrap();
        assert_eq!(env["from"], "alpha", "{env}");
    }
    for rec in hub.audit_events("accepted") {
        assert_eq!(
            rec["envelope"]["from"], "alpha",
            "the audit holds the stamped envelope: {rec}"
        );
    }
}

#[test]
fn the_body_passes_through_byte_for_byte() {
    let hub = Hub::start();
    let bodies = [
        // Key order, big integers, precision, exponents, escapes, raw non-ASCII, inner spaces.
        r#"{"z":1,"a":[123456789012345678901234567890,-0.0,1e400,1.50,-12E-7],"s":"\u00e9\n\"\\\/ é 😀 \ud83d\ude00","n":{"b":null,"a":true} , "sp" : [ 1 , 2 ] }"#,
        r#""just a string""#,
        "18446744073709551616",
        "null",
        "[]",
        r#"{"dup":1,"dup":2}"#,
    ];
    for (i, body) in bodies.iter().enumerate() {
        let id = format!("body-{i}");
        let mut s = hub.login("alpha");
        s.write(&send_line(&id, "beta", "task", Some("c-1"), body));
        s.expect_line(&format!(r#"{{"accepted":{{"id":"{id}"}}}}"#));
        let mut a = hub.login("beta");
        a.write(&format!("{AWAIT_NOW}\n"));
        a.expect_line(&format!(
            r#"{{"envelope":{{"id":"{id}","from":"alpha","to":"beta","ts":"{TS}","kind":"task","correlationId":"c-1","body":{body}}}}}"#
        ));
    }
    // The audit log holds the same text.
    let audit = std::fs::read_to_string(hub.audit_path()).unwrap();
    for body in bodies {
        assert!(
            audit.contains(&format!(r#""body":{body}}}"#)),
            "audit lacks body {body}"
        );
    }
}

#[test]
fn kind_bounce_is_refused_on_send() {
    let hub = Hub::start();
    let mut s = hub.login("alpha");
    s.write(&send_line("b-1", "beta", "bounce", None, "{}"));
    assert_eq!(
        s.error(),
        "invalid envelope: kind \"bounce\" is reserved for the hub"
    );
    s.expect_eof();
    assert_eq!(hub.drain("beta"), Vec::<String>::new());
    // Other unknown kinds route without complaint.
    let id = hub.send("alpha", "beta", "wake", None, "{}");
    assert_eq!(hub.drain("beta"), vec![id]);
}

#[test]
fn hub_lines_decode_with_the_shared_client_types() {
    // Every line the server sends must be accepted by the client's strict decoder.
    use agent_hub_proto::wire::HubLine;
    let hub = Hub::start();
    let mut s = hub.raw();
    s.write(&format!(
        "{}{}",
        hello_line("alpha", token_of("alpha")),
        send_line("d-1", "beta", "task", None, "{}")
    ));
    let lines = [s.line(), s.line()];
    let mut a = hub.raw();
    a.write(&format!(
        "{}{AWAIT_NOW}\n",
        hello_line("beta", token_of("beta"))
    ));
    let more = [a.line(), a.line()];
    let mut t = hub.raw();
    t.write(&format!(
        "{}{AWAIT_NOW}\n",
        hello_line("beta", token_of("beta"))
    ));
    let last = [t.line(), t.line()];
    let mut e = hub.raw();
    e.write("x\n");
    let err = e.line();
    let decoded: Vec<HubLine> = lines
        .iter()
        .chain(&more)
        .chain(&last)
        .chain([&err])
        .map(|l| HubLine::decode(l.as_bytes()).unwrap())
        .collect();
    assert!(
        matches!(
            decoded[..],
            [
                HubLine::Ok,
                HubLine::Accepted { .. },
                HubLine::Ok,
                HubLine::Envelope(_),
                HubLine::Ok,
                HubLine::Timeout,
                HubLine::Error { .. }
            ]
        ),
        "{decoded:?}"
    );
}
