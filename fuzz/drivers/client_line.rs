//! Fuzz target `client_line`: the decoder's fast path (`wire::fast`, docs/performance.md
//! "Design decisions") against its serde path. For any line, when the fast path reads it,
//! the serde path must read it too, to the same payload field by field and the body's text
//! byte for byte (`agent_hub_proto::wire::fast_decode_check`); the fast path may always decline.
//! The input is checked as a whole line, and also placed where the fast path's own readers
//! work: as a send's body, inside a string value, as a number and as a key.

use agent_hub_proto::wire::{fast_decode_check, ClientLine};
use serde_json::Value;
use std::path::Path;

fn holds(line: &str) {
    if let Err(e) = fast_decode_check(line) {
        panic!("{e}");
    }
    // The decoder the server calls, on the same line, never panics.
    let _ = ClientLine::decode(line.as_bytes());
}

pub fn run(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    holds(text);
    holds(&format!(
        r#"{{"send":{{"id":"e","from":"a","to":"b","ts":"t","kind":"k","body":{text}}}}}"#
    ));
    holds(&format!(r#"{{"hello":{{"name":"{text}","token":"t"}}}}"#));
    holds(&format!(r#"{{"await":{{"timeoutSecs":{text}}}}}"#));
    holds(&format!(r#"{{"status":{{"{text}":"e"}}}}"#));
}

/// Hand-made lines at the subset's edges (escapes, surrogates, numbers, duplicates,
/// whitespace, nesting), then every line-like string of the hub's protocol fixtures.
pub fn seeds(root: &Path) -> Vec<(String, Vec<u8>)> {
    let send = |body: &str| {
        format!(
            r#"{{"send":{{"id":"e1","from":"a","to":"b","ts":"2026-01-01T00:00:00Z","kind":"note","correlationId":null,"body":{body}}}}}"#
        )
    };
    let mut out: Vec<(String, String)> = vec![
        (
            "hello".into(),
            r#"{"hello":{"name":"mneme","token":"s3cret"}}"#.into(),
        ),
        (
            "hello-warn".into(),
            r#"{"hello":{"name":"mneme","token":"s3cret","warn":true}}"#.into(),
        ),
        (
            "hello-warn-odd".into(),
            r#"{"hello":{"warn":null,"token":"t","name":"n","warn":tru}}"#.into(),
        ),
        (
            "hello-spaced".into(),
            " { \"hello\" : {\"token\":\"t\" ,\n\"name\":\"n\"}}\r".into(),
        ),
        (
            "hello-escapes".into(),
            r#"{"hello":{"name":"a\"\\\/\b\f\n\r\t\u00e9\uD83D\uDE00","token":"t"}}"#.into(),
        ),
        (
            "hello-lone-surrogate".into(),
            r#"{"hello":{"name":"\uDE00","token":"\uD83Dx"}}"#.into(),
        ),
        (
            "hello-duplicate".into(),
            r#"{"hello":{"name":"a","name":"b","token":"t"}}"#.into(),
        ),
        (
            "hello-escaped-key".into(),
            r#"{"hello":{"n\u0061me":"a","token":"t"}}"#.into(),
        ),
        (
            "hello-trailing".into(),
            r#"{"hello":{"name":"a","token":"t"}} x"#.into(),
        ),
        (
            "send".into(),
            send(r#"{"text":"hi","n":[1,-0,2.5e-3,true,false,null,"\ud800"]}"#),
        ),
        ("send-scalar-body".into(), send("-12.5E+3 ")),
        (
            "send-deep-128".into(),
            send(&format!("{}{}", "[".repeat(128), "]".repeat(128))),
        ),
        (
            "send-deep-129".into(),
            send(&format!("{}{}", "[".repeat(129), "]".repeat(129))),
        ),
        ("send-bad-body".into(), send(r#"{"a":1,}"#)),
        (
            "await".into(),
            r#"{"await":{"replyTo":"r","kind":null,"timeoutSecs":5,"ack":true,"reader":"mcp"}}"#
                .into(),
        ),
        ("await-empty".into(), r#"{"await":{}}"#.into()),
        (
            "await-u64-max".into(),
            r#"{"await":{"timeoutSecs":18446744073709551615}}"#.into(),
        ),
        (
            "await-u64-over".into(),
            r#"{"await":{"timeoutSecs":18446744073709551616}}"#.into(),
        ),
        (
            "await-numbers".into(),
            r#"{"await":{"timeoutSecs":1e5,"ack":false}}"#.into(),
        ),
        (
            "await-negative-zero".into(),
            r#"{"await":{"timeoutSecs":-0}}"#.into(),
        ),
        ("ack".into(), r#"{"ack":{"id":"e1"}}"#.into()),
        (
            "status".into(),
            r#"{"status":{"id":"e1","waitFor":"delivered","timeoutMs":100}}"#.into(),
        ),
        ("who".into(), r#"{"who":{}}"#.into()),
    ];
    let mut lines = Vec::new();
    for file in [
        "client-lines",
        "transcripts",
        "hub-lines",
        "lease-client-lines",
        "lease-hub-lines",
    ] {
        let path = root.join("protocol/hub").join(format!("{file}.json"));
        let text =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let v: Value = serde_json::from_str(&text).expect("a fixture is JSON");
        let mut found = Vec::new();
        strings(&v, &mut found);
        for (i, l) in found.into_iter().enumerate() {
            if !lines.contains(&l) {
                lines.push(l.clone());
                out.push((format!("{file}-{i}"), l));
            }
        }
    }
    out.into_iter().map(|(n, l)| (n, l.into_bytes())).collect()
}

/// Every line of every string in `v` that starts (after whitespace) like an object.
fn strings(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::String(s) => {
            for l in s.split('\n') {
                if l.trim_start().starts_with('{') {
                    out.push(l.to_owned());
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|x| strings(x, out)),
        Value::Object(m) => m.values().for_each(|x| strings(x, out)),
        _ => {}
    }
}
