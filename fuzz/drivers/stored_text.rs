//! Fuzz target `stored_text`: what a queued envelope keeps of a text read back from the store
//! (`wire::envelope_text`, docs/performance.md "Memory per envelope"). A
//! store row's text is cut into its `ts` and body only when it is exactly the canonical text
//! of the row's fields; whatever the text, the hub writes back exactly what was stored.
//!
//! Input: the row's fields and the text, separated by 0x1E: id, from, to, kind, correlation
//! id (empty: none), ts, then the rest. A rest that starts with `!` is the stored text itself
//! (the seeds hold canonical texts, which the fuzzer then mutates); any other rest is a body,
//! laid out with the fields in the canonical form.

use agent_hub_proto::wire::envelope_text::{split, Parts, Tail};
use serde_json::value::RawValue;

const SEP: u8 = 0x1E;

pub fn run(data: &[u8]) {
    let mut chunks = data.splitn(7, |&b| b == SEP);
    let mut field = || String::from_utf8_lossy(chunks.next().unwrap_or_default()).into_owned();
    let (id, from, to, kind, corr, ts) = (field(), field(), field(), field(), field(), field());
    let rest = field();
    let parts = Parts {
        id: &id,
        from: &from,
        to: &to,
        kind: &kind,
        correlation_id: (!corr.is_empty()).then_some(corr.as_str()),
    };
    let laid_out = Tail::new(&ts, &rest).text(&parts);
    let text = match rest.strip_prefix('!') {
        Some(stored) => stored.to_owned(),
        None => laid_out.clone(),
    };

    // Whatever the text, the tail kept for it writes it back, and measures it.
    let kept = Tail::of_text(&text, &parts);
    let back = kept.text(&parts);
    assert_eq!(back, text, "a stored text came back changed");
    assert_eq!(
        kept.text_len(&parts),
        text.len(),
        "a tail mismeasured its text"
    );

    match split(&text, &parts) {
        Some(at) => {
            // Cut only when it is JSON with exactly these fields. The body is read as the
            // hub reads it, a raw value: a number such as `1e999` is JSON that a
            // `serde_json::Value` cannot hold (found by this target, the seed
            // `regress-body-number-out-of-range`).
            let v: std::collections::BTreeMap<String, &RawValue> =
                serde_json::from_str(&text).expect("a split text is JSON");
            let keys: Vec<&str> = v.keys().map(String::as_str).collect();
            assert_eq!(
                keys,
                ["body", "correlationId", "from", "id", "kind", "to", "ts"]
            );
            let string = |k: &str| serde_json::from_str::<Option<String>>(v[k].get()).ok();
            assert_eq!(string("id"), Some(Some(parts.id.to_owned())));
            assert_eq!(string("from"), Some(Some(parts.from.to_owned())));
            assert_eq!(string("to"), Some(Some(parts.to.to_owned())));
            assert_eq!(string("kind"), Some(Some(parts.kind.to_owned())));
            assert_eq!(
                string("correlationId"),
                Some(parts.correlation_id.map(str::to_owned))
            );
            assert!(
                matches!(string("ts"), Some(Some(_))),
                "a split text has a string ts"
            );
            assert!(text.ends_with(&format!("\"body\":{}}}", v["body"].get())));
            let tail = Tail::from_split(&text, at);
            assert!(!tail.is_verbatim());
            assert!(tail.held_bytes() < text.len());
            assert_eq!(tail.text(&parts), text, "a cut tail wrote another text");
        }
        None => {
            // Refused: then it is not the layout of these fields with a body that is one
            // JSON value and nothing else.
            let one_value =
                serde_json::from_str::<&RawValue>(&rest).is_ok_and(|r| r.get().len() == rest.len());
            assert!(
                text != laid_out || !one_value,
                "a canonical text was not split"
            );
        }
    }
}

/// Canonical texts of a few envelopes as stored texts (the fuzzer mutates them), and the
/// same fields with bodies of each shape.
pub fn seeds() -> Vec<(String, Vec<u8>)> {
    let fields: [[&str; 6]; 4] = [
        ["e1", "a", "b", "note", "", "2026-12-03T10:00:00Z"],
        [
            "00000000-0000-4000-8000-000000000001",
            "alice",
            "bob@peer",
            "task",
            "c-1",
            "2026-12-03T10:00:00.123456+01:00",
        ],
        [
            "e\"2\\",
            "a\u{1}",
            "b\nb",
            "k\t",
            "c\u{7f}\u{2028}",
            "20\"26\\\n",
        ],
        ["😀", "x", "y", "kind", "", ""],
    ];
    let bodies = [
        "{\"b\":1}",
        "[1, 2 ,{\"z\":0}]",
        "\"x\"",
        "1.0e+3",
        "null",
        "1,\"x\":2",
        " 1",
    ];
    let mut out = Vec::new();
    for (i, f) in fields.iter().enumerate() {
        let parts = Parts {
            id: f[0],
            from: f[1],
            to: f[2],
            kind: f[3],
            correlation_id: (!f[4].is_empty()).then_some(f[4]),
        };
        for (j, body) in bodies.iter().enumerate() {
            let head = f.join("\u{1e}");
            out.push((
                format!("body-{i}-{j}"),
                format!("{head}\u{1e}{body}").into_bytes(),
            ));
        }
        let stored = Tail::new(f[5], bodies[0]).text(&parts);
        let head = f.join("\u{1e}");
        out.push((
            format!("stored-{i}"),
            format!("{head}\u{1e}!{stored}").into_bytes(),
        ));
        let spaced = stored.replacen(",\"to\"", ", \"to\"", 1);
        out.push((
            format!("stored-spaced-{i}"),
            format!("{head}\u{1e}!{spaced}").into_bytes(),
        ));
    }
    out
}
