//! Tests of the relay message codec: the envelope's strictness, the payload catalogue's
//! required and optional keys, the two forms of a transfer chunk, ids, the v0 release table
//! and feature names.

use super::msg_type::parse_version;
use super::transfer::CHUNK_CAP_BASE64;
use super::*;
use serde_json::{json, Value};

fn line(t: &str, payload: &str) -> String {
    format!(
        r#"{{"id":"msg_1_1","msg_type":"{t}","from_peer":"mini","timestamp":1700000000000,"payload":{payload}}}"#
    )
}

#[test]
fn decodes_and_reencodes_a_v0_line_exactly() {
    let l = line("heartbeat", "{}");
    let m = RelayMessage::decode_line(l.as_bytes()).unwrap();
    assert_eq!(m.msg_type, MsgType::Heartbeat);
    assert_eq!(m.timestamp, 1_700_000_000_000);
    assert_eq!(m.from_peer, "mini");
    assert_eq!(m.encode_json(), l.as_bytes());
    assert_eq!(m.encode_line(), format!("{l}\n").into_bytes());
}

#[test]
fn envelope_errors_are_typed_never_panics() {
    let cases: Vec<(String, RelayError)> = vec![
        (
            line("heartbeat", "{}").replace("1700000000000", "1700000000000.5"),
            RelayError::FloatTimestamp,
        ),
        (
            line("heartbeat", "{}").replace("1700000000000", "1.7e12"),
            RelayError::FloatTimestamp,
        ),
        (
            r#"{"id":"x","msg_type":"heartbeat","from_peer":"p","timestamp":1}"#.into(),
            RelayError::MissingField("payload"),
        ),
        (
            line("heartbeat", "null"),
            RelayError::FieldType {
                field: "payload",
                expected: "an object",
            },
        ),
        (
            line("Heartbeat", "{}"),
            RelayError::WrongCaseType("Heartbeat".into()),
        ),
        (
            line("HandshakeAck", "{}"),
            RelayError::WrongCaseType("HandshakeAck".into()),
        ),
        (
            line("HEARTBEAT", "{}"),
            RelayError::WrongCaseType("HEARTBEAT".into()),
        ),
        (
            line("heartbeat", "{}").replace("1700000000000", "\"1700000000000\""),
            RelayError::FieldType {
                field: "timestamp",
                expected: "integer unix milliseconds",
            },
        ),
        (
            line("heartbeat", "{}").replace("1700000000000", "18446744073709551615"),
            RelayError::FieldType {
                field: "timestamp",
                expected: "integer unix milliseconds within i64",
            },
        ),
        (
            r#"{"msg_type":"heartbeat","from_peer":"p","timestamp":1,"payload":{}}"#.into(),
            RelayError::MissingField("id"),
        ),
        (
            r#"{"id":7,"msg_type":"heartbeat","from_peer":"p","timestamp":1,"payload":{}}"#.into(),
            RelayError::FieldType {
                field: "id",
                expected: "a string",
            },
        ),
        ("[1,2]".into(), RelayError::NotAnObject),
        ("".into(), RelayError::EmptyLine),
        ("\r".into(), RelayError::EmptyLine),
    ];
    for (l, want) in cases {
        assert_eq!(RelayMessage::decode_line(l.as_bytes()), Err(want), "{l}");
    }
    assert!(matches!(
        RelayMessage::decode_line(b"{not json"),
        Err(RelayError::NotJson(_))
    ));
    assert!(matches!(
        RelayMessage::decode_line(b"   "),
        Err(RelayError::NotJson(_))
    ));
    assert_eq!(
        RelayMessage::decode_line(b"{\"id\":\"\xff\"}"),
        Err(RelayError::NotUtf8)
    );
}

#[test]
fn trailing_cr_is_tolerated_and_counts_against_the_cap() {
    let l = format!("{}\r", line("heartbeat", "{}"));
    assert!(RelayMessage::decode_line(l.as_bytes()).is_ok());

    // A line of exactly the cap passes; one byte more does not; the \r is one of them.
    let base = line("heartbeat", r#"{"pad":""}"#);
    let fill = LINE_CAP_BYTES - base.len();
    let exact = base.replace(r#""pad":"""#, &format!(r#""pad":"{}""#, "x".repeat(fill)));
    assert_eq!(exact.len(), LINE_CAP_BYTES);
    assert!(RelayMessage::decode_line(exact.as_bytes()).is_ok());
    let with_cr = format!("{exact}\r");
    assert_eq!(
        RelayMessage::decode_line(with_cr.as_bytes()),
        Err(RelayError::LineTooLong {
            len_bytes: LINE_CAP_BYTES + 1
        })
    );
    // The \r counts: cap - 1 bytes of JSON plus \r is exactly the cap and passes.
    let shorter = base.replace(
        r#""pad":"""#,
        &format!(r#""pad":"{}""#, "x".repeat(fill - 1)),
    );
    let shorter_cr = format!("{shorter}\r");
    assert_eq!(shorter_cr.len(), LINE_CAP_BYTES);
    assert!(RelayMessage::decode_line(shorter_cr.as_bytes()).is_ok());
}

#[test]
fn extra_keys_are_ignored_everywhere() {
    let l = r#"{"id":"a","msg_type":"ack","from_peer":"p","timestamp":5,"payload":{"ack_id":"z","later":1},"trace":"x"}"#;
    let m = RelayMessage::decode_line(l.as_bytes()).unwrap();
    assert_eq!(
        m.payload_typed().unwrap(),
        Payload::Ack(Ack {
            ack_id: "z".into(),
            resync: None,
            error: None,
        })
    );
}

#[test]
fn unknown_types_are_kept_verbatim() {
    let m = RelayMessage::decode_line(line("bus_relay", r#"{"a":1}"#).as_bytes()).unwrap();
    assert_eq!(m.msg_type, MsgType::Unknown("bus_relay".into()));
    assert_eq!(m.msg_type.as_str(), "bus_relay");
    let m = RelayMessage::decode_line(line("BusRelay", "{}").as_bytes()).unwrap();
    assert_eq!(m.msg_type, MsgType::Unknown("BusRelay".into()));
    assert!(matches!(
        m.payload_typed().unwrap(),
        Payload::Unknown { .. }
    ));
}

#[test]
fn bus_forward_is_a_v1_type_of_its_feature() {
    let m =
        RelayMessage::decode_line(line("bus_forward", r#"{"envelope":"{}","hop":1}"#).as_bytes())
            .unwrap();
    assert_eq!(m.msg_type, MsgType::BusForward);
    assert_eq!(m.msg_type.v0_index(), None);
    assert_eq!(feature_for(&m.msg_type), Some(Feature::BusForward));
    assert_eq!(
        m.payload_typed().unwrap(),
        Payload::BusForward(BusForward {
            envelope: "{}".into(),
            hop: 1
        })
    );
    // Its v0-style spellings are refused like the v0 types' are.
    assert_eq!(
        MsgType::parse("BusForward"),
        Err(RelayError::WrongCaseType("BusForward".into()))
    );
    assert!(
        RelayMessage::decode_line(line("bus_forward", r#"{"hop":1}"#).as_bytes())
            .unwrap()
            .payload_typed()
            .is_err()
    );
}

#[test]
fn every_v0_type_round_trips_its_name() {
    for (i, t) in V0_TYPES.iter().enumerate() {
        assert_eq!(MsgType::parse(t.as_str()).unwrap(), *t);
        assert_eq!(t.v0_index(), Some(i));
        assert_eq!(feature_for(t), None);
    }
    assert_eq!(MsgType::Unknown("x".into()).v0_index(), None);
}

#[test]
fn required_keys_are_required_and_optional_ones_optional() {
    let ok = |t: MsgType, v: Value| Payload::parse(&t, &v).unwrap();
    let bad = |t: MsgType, v: Value| Payload::parse(&t, &v).unwrap_err();
    let ctx = json!({"dependency_graph": {"blocks": [], "blocked_by": []}});
    // cwd: required, null allowed.
    ok(
        MsgType::DelegateTask,
        json!({"task_id":"t","prompt":"p","cwd":null,"context":ctx}),
    );
    let e = bad(
        MsgType::DelegateTask,
        json!({"task_id":"t","prompt":"p","context":ctx}),
    );
    assert!(e.to_string().contains("cwd"), "{e}");
    // dependency_graph: always present.
    bad(
        MsgType::DelegateTask,
        json!({"task_id":"t","prompt":"p","cwd":"/x","context":{}}),
    );
    ok(MsgType::Heartbeat, json!({}));
    ok(
        MsgType::Heartbeat,
        json!({"worker_id":"w","timestamp":1,"sessions":[]}),
    );
    ok(MsgType::Handshake, json!({"proof":"p","version":"0.64.0"}));
    bad(MsgType::Handshake, json!({"proof":"p"}));
    bad(
        MsgType::Handshake,
        json!({"proof":"p","version":"1","listen_port":70000}),
    );
    ok(MsgType::HandshakeAck, json!({"status":"ok"}));
    bad(MsgType::HandshakeAck, json!({"status":"OK"}));
    ok(MsgType::HiveJoinRequest, json!({}));
    bad(MsgType::HiveJoinResult, json!({}));
    bad(MsgType::Ack, json!({}));
    let st = json!({"session_id":"s","cwd":"/","seq":0,"total":1,"digest":"d","data":"Zm9v"});
    ok(MsgType::SessionTransfer, st.clone());
    let mut not_b64 = st.clone();
    not_b64["data"] = json!("Zm9");
    bad(MsgType::SessionTransfer, not_b64);
    // Typed round trip.
    let p = ok(MsgType::SessionTransfer, st.clone());
    assert_eq!(p.to_value(), st);
    assert_eq!(p.msg_type(), MsgType::SessionTransfer);
}

/// claudectl 0.64's failed handoff (its worker's "Stopped by controller" answer to a stop, as
/// scripts/claudectl-interop.sh saw it on the wire) has no `git_ref`: it must parse, as no
/// ref, and what we send back out still carries `git_ref: null`.
#[test]
fn a_claudectl_failed_handoff_without_git_ref_parses() {
    let l = r#"{"id":"msg_1796157253282_9","msg_type":"task_handoff","from_peer":"ctl","timestamp":1796157253282,"payload":{"artifacts":[],"state":"failed","summary":"Stopped by controller","task_id":"task-b7448d1aa8fb4ad090ca327490982445","total_cost_usd":0.0,"total_tokens":0}}"#;
    let m = RelayMessage::decode_line(l.as_bytes()).unwrap();
    match m.payload_typed().unwrap() {
        Payload::TaskHandoff(h) => {
            assert_eq!(h.state, "failed");
            assert_eq!(h.summary, "Stopped by controller");
            assert_eq!(h.git_ref, None);
            let out = Payload::TaskHandoff(h).to_value();
            assert_eq!(out["git_ref"], Value::Null, "{out}");
            assert!(out.as_object().unwrap().contains_key("git_ref"), "{out}");
        }
        other => panic!("not a handoff: {other:?}"),
    }
    // The other required keys stay required.
    let v: Value = serde_json::from_str(l).unwrap();
    for k in [
        "task_id",
        "state",
        "summary",
        "artifacts",
        "total_cost_usd",
        "total_tokens",
    ] {
        let mut p = v["payload"].clone();
        p.as_object_mut().unwrap().remove(k);
        assert!(Payload::parse(&MsgType::TaskHandoff, &p).is_err(), "{k}");
    }
}

/// claudectl 0.92.4's handoffs (relay-compat-0.92.md §5): `model` null, `refused` on a task it
/// never started, `git_ref` and `verifications` after a worktree run. All parse; `refused` and
/// `verifications` are read leniently (a wrong type is no flag and no list, never a dropped
/// handoff) and sent only when set.
#[test]
fn claudectl_092_handoffs_parse_and_their_new_keys_are_read_leniently() {
    let refused = json!({"task_id":"task_1795000000000_3","state":"failed","summary":"Could not start the task: working directory does not exist on this host: /nope","artifacts":[],"total_cost_usd":0.0,"total_tokens":0,"model":null,"usage":{},"refused":true});
    let Payload::TaskHandoff(h) = Payload::parse(&MsgType::TaskHandoff, &refused).unwrap() else {
        panic!("not a handoff")
    };
    assert!(h.refused);
    assert_eq!(h.model, None);
    assert!(h.verifications.is_empty());
    assert_eq!(Payload::TaskHandoff(h).to_value()["refused"], true);
    let worktree = json!({"task_id":"t","state":"completed","summary":"done","artifacts":[],"total_cost_usd":0.02,"total_tokens":12,"model":"claude-sonnet-4-5","usage":{"input_tokens":10,"output_tokens":2},"git_ref":"claudectl/delegated-t","verifications":[{"command":"cargo test","passed":true,"output":"ok"}]});
    let Payload::TaskHandoff(h) = Payload::parse(&MsgType::TaskHandoff, &worktree).unwrap() else {
        panic!("not a handoff")
    };
    assert!(!h.refused);
    assert_eq!(h.git_ref.as_deref(), Some("claudectl/delegated-t"));
    assert_eq!(
        h.verifications,
        vec![Verification {
            command: "cargo test".into(),
            passed: true,
            output: "ok".into()
        }]
    );
    let out = Payload::TaskHandoff(h).to_value();
    assert!(!out.as_object().unwrap().contains_key("refused"), "{out}");
    assert_eq!(out["verifications"], worktree["verifications"]);
    for (flag, list) in [
        (json!("true"), json!("x")),
        (json!(1), json!({"command": "a"})),
        (json!(null), json!(null)),
        (
            json!(false),
            json!([1, "a", {"command": "a", "passed": "no"}]),
        ),
        (json!({"x": true}), json!([[]])),
    ] {
        let mut p = refused.clone();
        p["refused"] = flag.clone();
        p["verifications"] = list.clone();
        match Payload::parse(&MsgType::TaskHandoff, &p) {
            Ok(Payload::TaskHandoff(h)) => {
                assert!(!h.refused, "{flag}");
                assert!(h.verifications.is_empty(), "{list}");
            }
            other => panic!("{flag} {list}: {other:?}"),
        }
    }
}

/// claudectl 0.92 sends `context.relevant_files` as `{path: content}`; the seed's fixture has
/// a list. Both parse (the shape is kept as JSON) and go back out as they came.
#[test]
fn relevant_files_parse_as_a_list_or_a_map() {
    for files in [json!(["src/lib.rs"]), json!({"src/lib.rs": "fn main() {}"})] {
        let d = json!({"task_id":"t","prompt":"p","cwd":null,"context":{"relevant_files":files,"dependency_graph":{"blocks":[],"blocked_by":[]}}});
        let p = Payload::parse(&MsgType::DelegateTask, &d).unwrap();
        assert_eq!(p.to_value(), d);
    }
}

fn transfer_payload(data: Value) -> Value {
    json!({"session_id":"s","cwd":"/","seq":0,"total":1,"digest":"d","data":data})
}

fn base64_calls_since(before: (usize, usize)) -> (usize, usize) {
    let now = crate::relay::base64::calls::get();
    (now.0 - before.0, now.1 - before.1)
}

#[test]
fn a_transfer_holds_its_chunk_as_text_or_raw_and_stays_the_same_message() {
    let raw: Vec<u8> = (0..=255u8).cycle().take(10_000).collect();
    let text = crate::relay::base64::encode(&raw);
    let l = line(
        "session_transfer",
        &transfer_payload(json!(text)).to_string(),
    );
    let as_text = RelayMessage::decode_line(l.as_bytes()).unwrap();
    assert!(
        as_text.chunk().is_none(),
        "a line's message holds base64 text"
    );
    assert_eq!(as_text.payload["data"], json!(text));

    let before = crate::relay::base64::calls::get();
    let mut as_raw = as_text.clone();
    as_raw.make_chunk_raw().unwrap();
    assert_eq!(base64_calls_since(before), (0, 1), "one decode");
    assert_eq!(as_raw.chunk().map(|c| &c[..]), Some(&raw[..]));
    assert!(as_raw.payload.get("data").is_none(), "never both");
    let before = crate::relay::base64::calls::get();
    as_raw.make_chunk_raw().unwrap();
    let typed = as_raw.payload_typed().unwrap();
    assert_eq!(base64_calls_since(before), (0, 0), "raw: nothing to decode");
    assert_eq!(typed, as_text.payload_typed().unwrap());
    let Payload::SessionTransfer(st) = &typed else {
        panic!("{typed:?}")
    };
    assert_eq!(st.data_bytes().unwrap(), raw);
    assert!(
        !format!("{st:?}{as_raw:?}").contains("255, 0, 1"),
        "Debug shows a chunk's length, not its bytes"
    );

    // Either form is the same message and the same line (the raw one encodes once).
    assert_eq!(as_raw, as_text);
    assert_eq!(as_text, as_raw);
    let before = crate::relay::base64::calls::get();
    assert_eq!(as_raw.encode_json(), l.as_bytes());
    assert_eq!(base64_calls_since(before), (1, 0));
    // Made from bytes with `with_chunk`: the same again; any `data` key is dropped.
    let made = RelayMessage::new(
        "msg_1_1",
        MsgType::SessionTransfer,
        "mini",
        1_700_000_000_000,
        transfer_payload(json!("stale")),
    )
    .with_chunk(raw.clone());
    assert_eq!(made, as_text);
    let mut other = made.clone();
    other.id = "msg_1_2".into();
    assert_ne!(other, as_text);
    let mut other = made.clone();
    other.payload["seq"] = json!(1);
    assert_ne!(other, as_text);
    let shorter = made.clone().with_chunk(&raw[1..]);
    assert_ne!(shorter, as_text);
    assert_ne!(shorter, made);
}

#[test]
fn a_bad_chunk_is_refused_and_leaves_the_message_as_it_was() {
    for bad in ["Zm9", "Zh==", "Zm9v\n", "Zm-v"] {
        let l = line(
            "session_transfer",
            &transfer_payload(json!(bad)).to_string(),
        );
        let mut m = RelayMessage::decode_line(l.as_bytes()).unwrap();
        let e = m.make_chunk_raw().unwrap_err();
        assert!(
            e.to_string()
                .contains("data is not canonical padded base64"),
            "{e}"
        );
        assert!(m.chunk().is_none());
        assert_eq!(m.encode_json(), l.as_bytes());
        assert!(m.payload_typed().is_err());
    }
    // Absent or not a string: nothing to make raw; the typed check says why.
    for p in [
        json!({"session_id":"s","cwd":"/","seq":0,"total":1,"digest":"d"}),
        transfer_payload(json!(5)),
    ] {
        let mut m = RelayMessage::new("i", MsgType::SessionTransfer, "p", 1, p);
        m.make_chunk_raw().unwrap();
        assert!(m.chunk().is_none());
        let e = m.payload_typed().unwrap_err().to_string();
        assert!(e.contains("data"), "{e}");
    }
    // Given twice: as a raw chunk and as a `data` key added afterwards.
    let mut twice = RelayMessage::new(
        "i",
        MsgType::SessionTransfer,
        "p",
        1,
        transfer_payload(json!("Zm9v")),
    )
    .with_chunk(&b"foo"[..]);
    twice.payload["data"] = json!("Zm9v");
    assert!(twice.payload_typed().is_err());
    // A raw chunk on another type.
    let m = RelayMessage::new("i", MsgType::Ack, "p", 1, json!({"ack_id": "x"}))
        .with_chunk(&b"foo"[..]);
    assert!(m.payload_typed().is_err());
}

#[test]
fn the_chunk_cap_holds_in_either_form() {
    let at_cap = vec![7u8; CHUNK_CAP_BYTES];
    let over = vec![7u8; CHUNK_CAP_BYTES + 1];
    let parse = |raw: &[u8]| {
        Payload::parse(
            &MsgType::SessionTransfer,
            &transfer_payload(json!(crate::relay::base64::encode(raw))),
        )
    };
    assert!(parse(&at_cap).is_ok());
    let e = parse(&over).unwrap_err().to_string();
    assert!(e.contains("over the chunk cap of 524288"), "{e}");
    let raw_msg = |raw: &[u8]| {
        RelayMessage::new(
            "i",
            MsgType::SessionTransfer,
            "p",
            1,
            transfer_payload(json!(0)),
        )
        .with_chunk(raw)
    };
    assert!(raw_msg(&at_cap).payload_typed().is_ok());
    let e = raw_msg(&over).payload_typed().unwrap_err().to_string();
    assert!(e.contains("over the chunk cap"), "{e}");
    // A text form over the cap is refused before it is decoded.
    let mut m = RelayMessage::new(
        "i",
        MsgType::SessionTransfer,
        "p",
        1,
        transfer_payload(json!("A".repeat(CHUNK_CAP_BASE64 + 4))),
    );
    let before = crate::relay::base64::calls::get();
    assert!(m.make_chunk_raw().is_err());
    assert_eq!(base64_calls_since(before), (0, 0));
}

#[test]
fn ids_are_unique_and_shaped() {
    let mut a = IdGen::new(1);
    let mut b = IdGen::new(2);
    let ia = a.next_id(1_700_000_000_000);
    let ib = b.next_id(1_700_000_000_000);
    assert_ne!(ia, ib, "same ms and counter, different sessions");
    assert!(ia.starts_with("msg_1700000000000_1_"), "{ia}");
    assert_eq!(ia.len(), "msg_1700000000000_1_".len() + 16);
    assert_ne!(a.next_id(1_700_000_000_000), ia);
    assert_eq!(format_id(5, 2, &[0xab, 0x01]), "msg_5_2_ab01");
}

#[test]
fn v0_release_table() {
    assert_eq!(v0_known_types("0.64.0").len(), 12);
    assert_eq!(v0_known_types("0.64").len(), 12);
    assert_eq!(v0_known_types("garbage").len(), 12);
    assert!(v0_knows("0.64.0", &MsgType::KnowledgeSnapshot));
    assert!(!v0_knows("0.64.0", &MsgType::HiveJoinRequest));
    assert!(!v0_knows("0.64.0", &MsgType::SessionTransfer));
    assert!(!v0_knows("0.64.0", &MsgType::Unknown("x".into())));
    assert_eq!(parse_version("v0.80.1-beta"), Some((0, 80, 1)));
}

#[test]
fn feature_names_and_intersection() {
    for f in Feature::ALL {
        assert_eq!(Feature::parse(f.as_str()), Some(f));
    }
    assert_eq!(Feature::parse("bus_forward"), None);
    assert_eq!(Feature::parse("LZ4"), None);
    let ours = [Feature::HbDelta, Feature::Lz4, Feature::UnknownOk];
    let theirs = [
        Feature::Lz4,
        Feature::UnknownOk,
        Feature::FrameBin,
        Feature::Lz4,
    ];
    assert_eq!(
        intersect(&ours, &theirs),
        vec![Feature::UnknownOk, Feature::Lz4]
    );
}

// ----- task-approvals (issue 37 design §7) -----

fn task_request_payload() -> Value {
    json!({
        "task_id": "task-0123456789abcdef0123456789abcdef",
        "request": "req-0123456789abcdef",
        "type": "permission",
        "tool_call": {"id": "toolu_1", "title": "Run cargo test", "kind": "execute",
                      "paths": ["src/a.rs"], "command": "cargo test"},
        "options": [{"option_id": "allow", "name": "Allow", "kind": "allow_once"},
                    {"option_id": "reject", "name": "Reject", "kind": "reject_once"}],
        "expires_at": 1_795_000_600_000u64,
    })
}

fn typed_request(p: &Value) -> TaskRequest {
    match Payload::parse(&MsgType::TaskRequest, p).unwrap() {
        Payload::TaskRequest(r) => r,
        other => panic!("{other:?}"),
    }
}

/// The three types are v1 types of `task-approvals`, spelled as the catalogue says; each
/// round-trips its payload exactly, optional keys absent rather than null.
#[test]
fn task_approvals_types_are_v1_types_of_their_feature() {
    for (t, name) in [
        (MsgType::TaskRequest, "task_request"),
        (MsgType::TaskAnswer, "task_answer"),
        (MsgType::TaskRequestClosed, "task_request_closed"),
    ] {
        assert_eq!(MsgType::parse(name).unwrap(), t);
        assert_eq!(t.v0_index(), None);
        assert_eq!(feature_for(&t), Some(Feature::TaskApprovals));
        assert!(V1_TYPES.contains(&t));
        let camel: String = name
            .split('_')
            .map(|w| w[..1].to_uppercase() + &w[1..])
            .collect();
        assert_eq!(
            MsgType::parse(&camel),
            Err(RelayError::WrongCaseType(camel.clone()))
        );
    }
    assert_eq!(
        Feature::parse("task-approvals"),
        Some(Feature::TaskApprovals)
    );
    let p = task_request_payload();
    let r = typed_request(&p);
    assert_eq!(r.kind, "permission");
    assert_eq!(r.tool_call.paths, ["src/a.rs"]);
    assert_eq!(r.message, None);
    assert_eq!(Payload::TaskRequest(r.clone()).to_value(), p);
    assert_eq!(r.check(), Ok(()));
    let a = json!({"task_id": "t", "request": "req-0123456789abcdef", "option": "allow",
                   "message": "{\"branch\":\"main\"}"});
    let Payload::TaskAnswer(ta) = Payload::parse(&MsgType::TaskAnswer, &a).unwrap() else {
        panic!()
    };
    assert_eq!(Payload::TaskAnswer(ta.clone()).to_value(), a);
    assert_eq!(ta.check(), Ok(()));
    let c = json!({"task_id": "t", "request": "req-0123456789abcdef", "state": "expired",
                   "reason": "no answer within 600 s", "fallback": "reject"});
    let Payload::TaskRequestClosed(tc) = Payload::parse(&MsgType::TaskRequestClosed, &c).unwrap()
    else {
        panic!()
    };
    assert_eq!(Payload::TaskRequestClosed(tc.clone()).to_value(), c);
    assert_eq!(tc.check(), Ok(()));
    assert_eq!(
        tc.expiry_reason(),
        Some(crate::wire::approval::ExpiryReason::Timeout { secs: 600 })
    );
    // A question carries its form's schema exactly, as JSON text (design §4b).
    let mut q = task_request_payload();
    q["type"] = json!("question");
    q["message"] = json!("Which branch?");
    q["schema"] = json!("{\"type\":\"object\",\"properties\":{\"b\":{\"type\":\"string\"}}}");
    let r = typed_request(&q);
    assert_eq!(Payload::TaskRequest(r.clone()).to_value(), q);
    assert_eq!(r.check(), Ok(()));
    // Minimal forms: optional keys left out parse, and stay out.
    let bare = json!({"task_id": "t", "request": "r", "state": "cancelled"});
    let p = Payload::parse(&MsgType::TaskRequestClosed, &bare).unwrap();
    assert_eq!(p.to_value(), bare);
}

/// Required keys are required and typed: a payload without one, or with the wrong JSON type,
/// is not a message (the session drops it with a log line naming the type).
#[test]
fn task_approvals_required_keys_and_types() {
    let p = task_request_payload();
    for key in [
        "task_id",
        "request",
        "type",
        "tool_call",
        "options",
        "expires_at",
    ] {
        let mut q = p.clone();
        q.as_object_mut().unwrap().remove(key);
        assert!(
            Payload::parse(&MsgType::TaskRequest, &q).is_err(),
            "{key} is required"
        );
    }
    for (key, v) in [
        ("expires_at", json!(-1)),
        ("expires_at", json!(1.5)),
        ("options", json!({})),
        ("tool_call", json!("x")),
        ("message", json!(7)),
    ] {
        let mut q = p.clone();
        q[key] = v.clone();
        assert!(
            Payload::parse(&MsgType::TaskRequest, &q).is_err(),
            "{key} = {v}"
        );
    }
    for key in ["task_id", "request", "option"] {
        let mut a = json!({"task_id": "t", "request": "r", "option": "o"});
        a.as_object_mut().unwrap().remove(key);
        assert!(Payload::parse(&MsgType::TaskAnswer, &a).is_err(), "{key}");
    }
    for key in ["task_id", "request", "state"] {
        let mut c = json!({"task_id": "t", "request": "r", "state": "answered"});
        c.as_object_mut().unwrap().remove(key);
        assert!(
            Payload::parse(&MsgType::TaskRequestClosed, &c).is_err(),
            "{key}"
        );
    }
    // Extra keys anywhere are ignored, as for every relay message.
    let mut q = p.clone();
    q["later"] = json!(1);
    q["tool_call"]["later"] = json!(1);
    q["options"][0]["later"] = json!(1);
    assert_eq!(typed_request(&q), typed_request(&p));
}

/// What a hostile peer's payload gets: every bound refused by `check`, naming the key and
/// never the value.
#[test]
fn task_approvals_checks_refuse_what_a_hub_never_sends() {
    let base = typed_request(&task_request_payload());
    let with = |f: &dyn Fn(&mut TaskRequest)| {
        let mut r = base.clone();
        f(&mut r);
        r.check().unwrap_err()
    };
    let opt = |id: &str| RelayOption {
        option_id: id.into(),
        name: "n".into(),
        kind: "allow_once".into(),
    };
    let cases: Vec<(ApprovalMessageError, &str)> = vec![
        (with(&|r| r.task_id.clear()), "task_id is empty"),
        (
            with(&|r| r.task_id = "t".repeat(129)),
            "task_id is over its cap",
        ),
        (
            with(&|r| r.request = "req-\u{1b}[2J".into()),
            "request holds a control or formatting character",
        ),
        (with(&|r| r.kind = "Permission".into()), "type is neither"),
        (
            with(&|r| r.tool_call.title = "t".repeat(257)),
            "tool_call.title is over",
        ),
        (
            with(&|r| r.tool_call.id = "i".repeat(129)),
            "tool_call.id is over",
        ),
        (
            with(&|r| r.tool_call.kind = Some("exe\u{202e}cute".into())),
            "tool_call.kind holds",
        ),
        (
            with(&|r| r.tool_call.paths = vec!["p".into(); 9]),
            "tool_call.paths lists more than 8",
        ),
        (
            with(&|r| r.tool_call.paths = vec!["p".repeat(513)]),
            "tool_call.paths is over",
        ),
        (
            with(&|r| r.tool_call.command = Some("c".repeat(1025))),
            "tool_call.command is over",
        ),
        (
            with(&|r| r.message = Some("m".repeat(2049))),
            "message is over",
        ),
        (with(&|r| r.options.clear()), "options is empty"),
        (
            with(&|r| r.options = (0..9).map(|i| opt(&format!("o{i}"))).collect()),
            "options lists more than 8",
        ),
        (with(&|r| r.options.push(opt("allow"))), "offered twice"),
        (
            with(&|r| r.options[0].option_id.clear()),
            "options.option_id is empty",
        ),
        (
            with(&|r| r.options[0].kind = "k".repeat(33)),
            "options.kind is over",
        ),
        (
            with(&|r| r.options[0].name = "n".repeat(257)),
            "options.name is over",
        ),
        (
            with(&|r| r.schema = Some("{}".into())),
            "schema is only for a question",
        ),
        (
            with(&|r| {
                r.kind = "question".into();
                r.schema = Some("[1]".into());
            }),
            "schema is not a JSON object",
        ),
        (
            with(&|r| {
                r.kind = "question".into();
                r.schema = Some(format!("{{\"a\":\"{}\"}}", "x".repeat(4096)));
            }),
            "schema is over",
        ),
    ];
    for (e, want) in cases {
        let text = e.to_string();
        assert!(text.starts_with("task_request "), "{text}");
        assert!(text.contains(want), "{want}: {text}");
    }
    // At the caps exactly: fine.
    let mut r = base.clone();
    r.tool_call.title = "t".repeat(256);
    r.tool_call.paths = vec!["p".repeat(512); 8];
    r.message = Some("m".repeat(2048));
    r.options = (0..8).map(|i| opt(&format!("o{i}"))).collect();
    assert_eq!(r.check(), Ok(()));

    let answer = |task: &str, request: &str, option: &str, message: Option<String>| TaskAnswer {
        task_id: task.into(),
        request: request.into(),
        option: option.into(),
        message,
    };
    assert!(answer("t", "r", "o", Some("m".repeat(4096)))
        .check()
        .is_ok());
    for (a, want) in [
        (answer("", "r", "o", None), "task_id is empty"),
        (answer("t", "r", "", None), "option is empty"),
        (answer("t", "r", &"o".repeat(129), None), "option is over"),
        (answer("t", "r\u{7}", "o", None), "request holds"),
        (
            answer("t", "r", "o", Some("m".repeat(4097))),
            "message is over",
        ),
    ] {
        let text = a.check().unwrap_err().to_string();
        assert!(
            text.starts_with("task_answer ") && text.contains(want),
            "{text}"
        );
    }

    let closed = |state: &str, reason: Option<&str>, fallback: Option<&str>| TaskRequestClosed {
        task_id: "t".into(),
        request: "r".into(),
        state: state.into(),
        reason: reason.map(str::to_owned),
        fallback: fallback.map(str::to_owned),
    };
    for c in [
        closed("answered", None, None),
        closed("cancelled", None, None),
        closed("task_ended", None, None),
        closed("expired", Some("hub restarted"), Some("cancel")),
        closed(
            "expired",
            Some("no relay route to the delegator"),
            Some("reject"),
        ),
    ] {
        assert_eq!(c.check(), Ok(()), "{c:?}");
    }
    for (c, want) in [
        (closed("gone", None, None), "state is none of"),
        (closed("expired", None, Some("reject")), "reason is not one"),
        (
            closed("expired", Some("no answer within +5 s"), Some("reject")),
            "reason is not one",
        ),
        (
            closed("expired", Some("hub restarted"), Some("allow")),
            "fallback is neither",
        ),
        (
            closed("expired", Some("hub restarted"), None),
            "fallback is neither",
        ),
        (
            closed("answered", Some(&"r".repeat(257)), None),
            "reason is over",
        ),
    ] {
        let text = c.check().unwrap_err().to_string();
        assert!(
            text.starts_with("task_request_closed ") && text.contains(want),
            "{want}: {text}"
        );
    }
}
