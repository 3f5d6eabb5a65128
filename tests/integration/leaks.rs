//! Secrets never reach a log (SPEC §2.4, §6.2, §8.2), tried the way a careless client or an
//! attacker would: every bad input the SPEC names, each carrying a roster token, a near-miss
//! of it and a body marker in the places a value, a key, a tag or a name goes, sent to a real
//! hub. Then neither the service log, the audit log nor the server's stderr may hold any of
//! them, and no error line repeats them either.
//!
//! Owns the end-to-end leak check. The decoder's own texts are unit-tested in
//! `crates/proto/src/wire/decode.rs`; the service-log redaction in `crates/proto/src/hub/pipeline.rs`.

use crate::harness::*;

/// A real roster token: the most valuable string a client can misplace.
fn token() -> &'static str {
    token_of("alpha")
}

/// A wrong token one character off the real one.
const NEAR_TOKEN: &str = "tok-alpha-SECRET-1d9X";
/// The body of every refused or malformed send.
const BODY: &str = "BODY-MARKER-4e1b";
const MAX_LINE: usize = 4096;

fn markers() -> [&'static str; 3] {
    [token(), NEAR_TOKEN, BODY]
}

/// Writes `bytes`, then reads every line the hub sends until it closes (the client says it is
/// done only once an error line came, so a parked await is not ended early).
fn exchange(hub: &Hub, bytes: &[u8]) -> Vec<String> {
    let mut s = hub.raw();
    s.write_bytes(bytes);
    let mut got = Vec::new();
    loop {
        match s.try_line() {
            Ok(Some(l)) => {
                let is_error = l.starts_with(r#"{"error""#);
                got.push(l);
                if is_error {
                    s.expect_eof();
                    return got;
                }
            }
            Ok(None) => return got,
            Err(e) => panic!("{:?}: no answer: {e}", String::from_utf8_lossy(bytes)),
        }
    }
}

fn assert_clean(what: &str, text: &str) {
    for m in markers() {
        assert!(!text.contains(m), "{what} holds {m:?}:\n{text}");
    }
}

/// Each line is the client's first line.
fn first_lines() -> Vec<Vec<u8>> {
    let t = token();
    let mut v: Vec<Vec<u8>> = [
        t.to_owned(),
        format!(r#""{t}""#),
        format!(r#"["{t}","{BODY}"]"#),
        format!(r#"{{"hello":"{t}"}}"#),
        format!(r#"{{"hello":["alpha","{t}"]}}"#),
        format!(r#"{{"hello":{{"name":"alpha","token":["{t}"]}}}}"#),
        format!(r#"{{"hello":{{"name":"alpha","token":{{"t":"{t}"}}}}}}"#),
        format!(r#"{{"hello":{{"name":"alpha","token":"{t}","extra":"{t}"}}}}"#),
        format!(r#"{{"hello":{{"name":"alpha","{t}":"x"}}}}"#),
        format!(r#"{{"hello":{{"name":"alpha","token":"{t}","token":"{NEAR_TOKEN}"}}}}"#),
        // The token where the name goes (arguments swapped), and a body in the name.
        format!(r#"{{"hello":{{"name":"{t}","token":"alpha"}}}}"#),
        format!(r#"{{"hello":{{"name":"{BODY}","token":"{t}"}}}}"#),
        format!(r#"{{"hello":{{"name":"alpha","token":"{NEAR_TOKEN}"}}}}"#),
        format!(r#"{{"hello":{{"name":"alpha","token":"{t}"}},"{t}":1}}"#),
        format!(r#"{{"{t}":{{"name":"alpha"}}}}"#),
        format!(r#"{{"hello":{{"name":"alpha","token":"{t}"}}"#),
        format!("{{\"hello\":{{\"name\":\"alpha\",\"token\":\"{t}\t\"}}}}"),
        format!(r#"{{"hello":{{"name":"alpha","token":"{t}"}}}}{t}"#),
        format!(r#"{{"hello":{{"name":"alpha","token":{t}}}}}"#),
        format!(
            r#"{{"send":{{"id":"{t}","from":"alpha","to":"beta","ts":"{TS}","kind":"task","body":{{"m":"{BODY}"}}}}}}"#
        ),
        format!(r#"{{"await":{{"kind":"{t}"}}}}"#),
        format!(r#"{{"ack":{{"id":"{t}"}}}}"#),
        format!(r#"{{"status":{{"id":"{t}"}}}}"#),
    ]
    .into_iter()
    .map(String::into_bytes)
    .collect();
    // Not UTF-8, with the token around the bad byte.
    let mut bad = format!(r#"{{"hello":{{"name":"alpha","token":"{t}"#).into_bytes();
    bad.push(0xff);
    bad.extend_from_slice(b"\"}}");
    v.push(bad);
    // Over the line cap, token first; the hub answers before the newline.
    let mut long = format!(r#"{{"hello":{{"name":"alpha","token":"{t}","pad":""#).into_bytes();
    long.resize(MAX_LINE + 10, b'x');
    v.push(long);
    v.into_iter()
        .map(|mut l| {
            if l.len() <= MAX_LINE {
                l.push(b'\n');
            }
            l
        })
        .collect()
}

/// Each line is the verb, after a good hello as beta.
fn verb_lines() -> Vec<String> {
    let t = token();
    let env = |fields: &str| {
        format!(
            r#"{{"send":{{"id":"v1","from":"beta","to":"gamma","ts":"{TS}","kind":"task",{fields}}}}}"#
        )
    };
    let body = format!(r#""body":{{"m":"{BODY}"}}"#);
    vec![
        t.to_owned(),
        String::new(),
        format!(r#"{{"hello":{{"name":"alpha","token":"{t}"}}}}"#),
        format!(r#"{{"{t}":{{}}}}"#),
        format!(r#"{{"send":"{t}"}}"#),
        format!(
            r#"{{"send":{{"id":"v1","from":"beta","to":"gamma","ts":"{TS}","kind":"bounce",{body}}}}}"#
        ),
        format!(
            r#"{{"send":{{"id":"v1","from":"beta","to":"HUB","ts":"{TS}","kind":"task",{body}}}}}"#
        ),
        format!(
            r#"{{"send":{{"id":"v1","from":"beta","to":"gamma","ts":"{t}","kind":"task",{body}}}}}"#
        ),
        format!(
            r#"{{"send":{{"id":"","from":"beta","to":"gamma","ts":"{TS}","kind":"task",{body}}}}}"#
        ),
        env(&format!(r#""correlationId":"",{body}"#)),
        env(&format!(r#""correlationId":{{"x":"{t}"}},{body}"#)),
        env(&format!(r#""{t}":1,{body}"#)),
        env(&format!(r#""correlationId":["{t}"],{body}"#)),
        env(&format!(r#""body":{{"m":"{BODY}",}}"#)),
        env(&format!(r#""body":{{"m":"{BODY}"}},"body":"{t}""#)),
        format!(
            r#"{{"send":{{"id":"v1","from":"beta","to":["{t}"],"ts":"{TS}","kind":"task",{body}}}}}"#
        ),
        format!(r#"{{"await":{{"kind":["{t}"]}}}}"#),
        format!(r#"{{"await":{{"replyTo":{{"a":"{t}"}}}}}}"#),
        format!(r#"{{"await":{{"timeoutSecs":"{t}"}}}}"#),
        format!(r#"{{"await":{{"ack":"{t}"}}}}"#),
        format!(r#"{{"await":{{"{t}":null}}}}"#),
        format!(r#"{{"await":{{"replyTo":"","kind":"{t}"}}}}"#),
        format!(r#"{{"ack":{{"id":"{t}"}}}}"#),
        format!(r#"{{"ack":"{t}"}}"#),
        format!(r#"{{"status":{{"id":["{t}"]}}}}"#),
        format!(r#"{{"status":{{"id":"","x":"{t}"}}}}"#),
        format!(r#"{{"who":{{"{t}":1}}}}"#),
        format!(r#"{{"who":"{t}"}}"#),
    ]
}

#[test]
fn no_bad_input_puts_a_token_or_a_body_in_any_log() {
    let hub = Hub::with_limits(|l| {
        l.max_line_bytes = MAX_LINE;
        l.queue_max_envelopes = 1;
    });
    let t = token();
    let hello_beta = hello_line("beta", token_of("beta"));
    let mut answers: Vec<(String, Vec<String>)> = Vec::new();
    let mut record = |what: String, got: Vec<String>| answers.push((what, got));

    // Bad first lines.
    for line in first_lines() {
        let got = exchange(&hub, &line);
        record(String::from_utf8_lossy(&line).into_owned(), got);
    }
    // Bad verbs, each on its own authenticated connection (hello and verb in one write).
    for verb in verb_lines() {
        let got = exchange(&hub, format!("{hello_beta}{verb}\n").as_bytes());
        record(verb, got);
    }
    // Invalid UTF-8 and an over-cap line as the verb.
    let mut bad = hello_beta.clone().into_bytes();
    bad.extend_from_slice(format!(r#"{{"ack":{{"id":"{t}"#).as_bytes());
    bad.extend_from_slice(b"\xfe\"}}\n");
    record("not UTF-8 verb".into(), exchange(&hub, &bad));
    let mut long = hello_beta.clone().into_bytes();
    long.extend_from_slice(t.as_bytes());
    long.resize(hello_beta.len() + MAX_LINE + 10, b'y');
    record("over-cap verb".into(), exchange(&hub, &long));

    // A status for an id that is a token is a good line: answered, and never recorded.
    let got = exchange(
        &hub,
        format!("{hello_beta}{{\"status\":{{\"id\":\"{t}\"}}}}\n").as_bytes(),
    );
    assert_eq!(got.len(), 2, "{got:?}");

    // Refused sends: the body of none of them reaches the audit log.
    let _filler = hub.send("beta", "gamma", "task", None, "{}");
    let got = exchange(
        &hub,
        format!(
            "{hello_beta}{}",
            send_line(
                "full-1",
                "gamma",
                "task",
                None,
                &format!(r#"{{"m":"{BODY}"}}"#)
            )
        )
        .as_bytes(),
    );
    assert!(got[1].contains("is full"), "{got:?}");
    hub.send("beta", "delta", "task", None, "{}");
    let first = hub.audit_events("accepted").last().unwrap()["envelope"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let got = exchange(
        &hub,
        format!(
            "{hello_beta}{}",
            send_line(
                &first,
                "delta",
                "task",
                None,
                &format!(r#"{{"m":"{BODY}"}}"#)
            )
        )
        .as_bytes(),
    );
    assert!(got[1].contains("already accepted"), "{got:?}");
    record("conflicting resend".into(), got);

    // Lines after a verb: a second hello, a send, junk; after a send, an await, a delivery.
    let after = [
        format!(r#"{{"hello":{{"name":"alpha","token":"{t}"}}}}"#),
        format!(
            r#"{{"send":{{"id":"x","from":"a","to":"b","ts":"{TS}","kind":"k","body":{{"m":"{BODY}"}}}}}}"#
        ),
        t.to_owned(),
    ];
    for extra in &after {
        let id = uuid::Uuid::new_v4().to_string();
        let got = exchange(
            &hub,
            format!(
                "{hello_beta}{}{extra}\n",
                send_line(&id, "beta", "task", None, "{}")
            )
            .as_bytes(),
        );
        assert_eq!(got.len(), 3, "{got:?}");
        record(format!("after a send: {extra}"), got);
        // The envelope is now queued for beta: a plain await with the same extra line.
        let got = exchange(
            &hub,
            format!("{hello_beta}{AWAIT_NOW}\n{extra}\n").as_bytes(),
        );
        assert_eq!(got.len(), 3, "{got:?}");
        record(format!("after a delivery: {extra}"), got);
    }
    // A parked await that is sent a line, then delivered to.
    let mut parked = hub.park("beta", AWAIT);
    parked.write(&format!(r#"{{"hello":{{"name":"alpha","token":"{t}"}}}}"#));
    parked.write("\n");
    hub.send("alpha", "beta", "task", None, "{}");
    parked.envelope();
    let err = parked.error();
    parked.expect_eof();
    record("after a parked await".into(), vec![err]);

    // After ack-mode deliveries: every kind of line that is not the ack.
    let not_acks = [
        format!(r#"{{"ack":{{"id":"{t}"}}}}"#),
        format!(r#"{{"ack":"{t}"}}"#),
        format!(r#"{{"ack":{{"id":"x","{t}":1}}}}"#),
        format!(r#"{{"hello":{{"name":"alpha","token":"{t}"}}}}"#),
        t.to_owned(),
        String::new(),
    ];
    for line in &not_acks {
        hub.send("alpha", "beta", "task", None, "{}");
        let mut r = hub.park("beta", r#"{"await":{"ack":true}}"#);
        r.envelope();
        r.write(&format!("{line}\n"));
        let err = r.error();
        r.expect_eof();
        record(format!("after an ack-mode delivery: {line}"), vec![err]);
        assert_eq!(hub.drain("beta").len(), 1, "returned, not consumed");
    }

    // The hub still serves.
    let id = hub.send("alpha", "beta", "task", None, r#"{"fine":true}"#);
    assert_eq!(hub.drain("beta"), [id]);

    // No error line repeats the line's values.
    for (what, got) in &answers {
        assert!(!got.is_empty(), "{what}: no answer");
        for line in got {
            assert_clean(&format!("the answer to {what}"), line);
        }
    }
    let mut hub = hub;
    assert!(hub.terminate().success());
    assert_clean("the service log", &hub.service_log());
    assert_clean("the server's stderr", &hub.stderr());
    let audit = std::fs::read_to_string(hub.audit_path()).unwrap();
    // A failed hello's name is recorded as tried (audit v4, SPEC §6.2): the one hello that
    // puts the body marker in the name field is the marker's one allowed place.
    let named = r#""event":"auth_failed","conn":"#;
    let audit_without_names: String = audit
        .lines()
        .filter(|l| !(l.contains(named) && l.ends_with(&format!(r#""name":"{BODY}"}}"#))))
        .collect::<Vec<_>>()
        .join("\n");
    assert_clean("the audit log", &audit_without_names);
    // The swapped hello (the token as the name) was audited without its name.
    assert!(hub
        .audit_events("auth_failed")
        .iter()
        .any(|v| v["name"].is_null()));
    assert!(hub
        .audit_events("auth_failed")
        .iter()
        .any(|v| v["name"] == BODY));
}

/// Some error texts name a value the client needs to act on: the id of a conflicting resend
/// (SPEC §12.3), the recipient of a full queue (§5.5), the delivered envelope an ack does not
/// match (§12.2). The client gets them; the service log never does.
#[test]
fn values_quoted_to_the_client_stay_out_of_the_service_log() {
    const ID: &str = "ID-MARKER-93ad";
    const TO: &str = "TO-MARKER-61f2";
    let hub = Hub::with_limits(|l| l.queue_max_envelopes = 1);
    let hello = hello_line("beta", token_of("beta"));
    hub.send("beta", TO, "task", None, "{}");
    let got = exchange(
        &hub,
        format!("{hello}{}", send_line("x", TO, "task", None, "{}")).as_bytes(),
    );
    assert!(
        got[1].contains(TO),
        "the client is told which queue: {got:?}"
    );
    let mut s = hub.raw();
    s.write(&format!(
        "{hello}{}",
        send_line(ID, "gamma", "task", None, "{}")
    ));
    s.expect_line(OK);
    s.json();
    s.expect_eof();
    let got = exchange(
        &hub,
        format!("{hello}{}", send_line(ID, "gamma", "task", None, "1")).as_bytes(),
    );
    assert!(got[1].contains(ID), "the client is told which id: {got:?}");
    let mut r = hub.park("gamma", r#"{"await":{"ack":true}}"#);
    assert_eq!(r.envelope()["id"], ID);
    r.write("{\"ack\":{\"id\":\"other\"}}\n");
    assert!(r.error().contains(ID));
    r.expect_eof();
    let mut hub = hub;
    assert!(hub.terminate().success());
    let log = hub.service_log();
    assert!(log.contains("outcome=error"), "{log}");
    for m in [ID, TO] {
        assert!(!log.contains(m), "the service log holds {m}:\n{log}");
    }
}
