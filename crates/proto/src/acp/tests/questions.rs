//! The agent's questions (issue 37 design §4b; docs/acp.md "Questions"): `elicitation`
//! advertised in form mode under `Ask` only, a form held as a request of kind `Question`
//! (numbered, capped and in one id space with permission requests), answered with the flat
//! result the agents read, and closed `cancel` by a cancel, the task's deadline and the
//! turn's end; everything not carried to a person answered at once. The forms are the ones
//! captured from Claude Code's ACP adapter 0.101 (../notes capture37-facts.md §6). All on
//! the virtual clock.

use super::*;
use crate::acp::request::{OptionKind, RequestAnswer, RequestAsk, RequestKind};

/// The AskUserQuestion form claude-agent-acp 0.101 sent (capture §6.1), with id `id`.
fn form(id: Value) -> Value {
    json!({"jsonrpc":"2.0","id":id,"method":"elicitation/create","params":{"mode":"form","sessionId":SID,"toolCallId":"toolu_mock_2","message":"Which color should the capture use?","requestedSchema":{"type":"object","properties":{"question_0":{"type":"string","title":"Color","oneOf":[{"const":"Red","title":"Red"},{"const":"Blue","title":"Blue"}]},"question_0_custom":{"type":"string","title":"Other"}}}}})
}

fn with_params(mut v: Value, key: &str, value: Value) -> Value {
    v["params"][key] = value;
    v
}

fn under(policy: PermissionPolicy) -> SessionConfig {
    let mut c = config();
    c.permission = policy;
    c
}

fn requests(d: &Drive) -> Vec<RequestAsk> {
    d.io.iter()
        .filter_map(|i| match i {
            Io::Ev(Event::Request(a)) => Some(a.clone()),
            _ => None,
        })
        .collect()
}

fn answer(d: &mut Drive, seq: u32, option: Option<&str>, message: Option<&str>) {
    d.s.answer(
        seq,
        RequestAnswer {
            option_id: option.map(str::to_owned),
            message: message.map(str::to_owned),
        },
        d.now,
    );
    d.drain();
}

/// The one line sent since the last look, as (id, result).
fn one_reply(d: &mut Drive) -> (Value, Value) {
    let sent = d.take_sent();
    assert_eq!(sent.len(), 1, "{sent:?}");
    (sent[0]["id"].clone(), sent[0]["result"].clone())
}

fn action(a: &str) -> Value {
    json!({ "action": a })
}

#[test]
fn form_mode_is_advertised_under_ask_only() {
    for (policy, advertised) in [
        (PermissionPolicy::Ask, true),
        (PermissionPolicy::Reject, false),
        (PermissionPolicy::Allow, false),
    ] {
        let d = Drive::new(under(policy));
        let init = &d.all_sent()[0];
        assert_eq!(init["method"], "initialize");
        let caps = &init["params"]["clientCapabilities"];
        if advertised {
            // Form mode only: never url.
            assert_eq!(caps["elicitation"], json!({"form": {}}), "{caps}");
        } else {
            assert!(caps.get("elicitation").is_none(), "{policy:?}: {caps}");
        }
        assert_eq!(caps["terminal"], false);
    }
}

#[test]
fn a_form_is_held_as_a_question_and_accepted_with_its_content() {
    let mut d = Drive::prompting(under(PermissionPolicy::Ask));
    d.agent_json(form(json!(0)));
    assert!(d.take_sent().is_empty(), "nothing is answered while held");
    let r = requests(&d);
    assert_eq!(r.len(), 1);
    let q = &r[0];
    assert_eq!((q.seq, q.kind), (1, RequestKind::Question));
    assert_eq!(q.tool_call_id, "toolu_mock_2");
    assert_eq!(q.title, "Which color should the capture use?");
    assert_eq!(
        q.message.as_deref(),
        Some("Which color should the capture use?")
    );
    let schema: Value = serde_json::from_str(q.schema.as_deref().unwrap()).unwrap();
    assert_eq!(schema, form(json!(0))["params"]["requestedSchema"]);
    let kinds: Vec<OptionKind> = q.options.iter().map(|o| o.kind).collect();
    assert_eq!(
        kinds,
        [OptionKind::Accept, OptionKind::Decline, OptionKind::Cancel]
    );
    // A permission request while the question waits takes the next seq (one numbering).
    d.agent_json(json!({"jsonrpc":"2.0","id":1,"method":"session/request_permission","params":{"sessionId":SID,"toolCall":{"toolCallId":"toolu_mock_3","rawInput":{"command":"make"},"title":"make","kind":"execute"},"options":[{"kind":"allow_once","name":"Allow","optionId":"allow"},{"kind":"reject_once","name":"Reject","optionId":"reject"}]}}));
    assert_eq!(requests(&d)[1].seq, 2);
    answer(
        &mut d,
        1,
        Some("accept"),
        Some(r#"{"question_0":"Red","question_0_custom":"warm"}"#),
    );
    assert_eq!(
        one_reply(&mut d),
        (
            json!(0),
            json!({"action":"accept","content":{"question_0":"Red","question_0_custom":"warm"}})
        ),
        "flat, as the adapter reads it (capture §6)"
    );
    answer(&mut d, 2, Some("reject"), None);
    assert_eq!(one_reply(&mut d).1["outcome"]["optionId"], "reject");
    // Answered once: a second answer writes nothing.
    answer(&mut d, 1, Some("decline"), None);
    assert!(d.take_sent().is_empty());
    // Questions are not permissions: the counts hold the one permission only.
    let p = d.s.progress(d.now).permissions;
    assert_eq!((p.asked, p.rejected), (1, 1));
    d.prompt_result(json!({"stopReason":"end_turn"}));
    assert_eq!(d.status().name(), "completed");
    let logs = d.logs().join("\n");
    assert!(
        logs.contains(
            "question asked (elicitation/create): held as request 1 for an answer (policy ask)"
        ),
        "{logs}"
    );
    assert!(logs.contains("request 1: accepted (answered by the owner)"));
    assert!(
        !logs.contains("Which color") && !logs.contains("Red"),
        "no question text or content in a log: {logs}"
    );
    d.assert_logs_clean("CALL_TOOL");
}

#[test]
fn decline_cancel_and_answers_that_cannot_be_written() {
    for (option, message, want, warn) in [
        (Some("decline"), None, "decline", None),
        (Some("cancel"), None, "cancel", None),
        // Expiry's and a cancelled answer's word.
        (None, None, "cancel", None),
        // Never an accept without the form's content, never an option not offered.
        (
            Some("accept"),
            None,
            "cancel",
            Some("accepts without the form's content"),
        ),
        (
            Some("accept"),
            Some("[1,2]"),
            "cancel",
            Some("accepts without the form's content"),
        ),
        (
            Some("allow"),
            None,
            "cancel",
            Some("names an option the question does not offer; answering cancel"),
        ),
    ] {
        let mut d = Drive::prompting(under(PermissionPolicy::Ask));
        d.agent_json(form(json!("q-1")));
        answer(&mut d, 1, option, message);
        assert_eq!(
            one_reply(&mut d),
            (json!("q-1"), action(want)),
            "{option:?} {message:?}"
        );
        let logs = d.logs().join("\n");
        match warn {
            Some(w) => assert!(logs.contains(&format!("answer to request 1 {w}")), "{logs}"),
            None => assert!(!logs.contains("answering cancel"), "{logs}"),
        }
    }
}

#[test]
fn a_cancel_the_deadline_and_the_turns_end_close_a_question_with_cancel() {
    // The caller's cancel: session/cancel, then the question's cancel (ACP §1.7's rule).
    let mut d = Drive::prompting(under(PermissionPolicy::Ask));
    d.agent_json(form(json!(0)));
    assert!(d.cancel());
    let sent = d.take_sent();
    assert_eq!(sent[0]["method"], "session/cancel");
    assert_eq!(
        (sent[1]["id"].clone(), sent[1]["result"].clone()),
        (json!(0), action("cancel"))
    );
    // One asked after the cancel is answered cancel at once, never held.
    d.agent_json(form(json!(1)));
    assert_eq!(one_reply(&mut d), (json!(1), action("cancel")));
    assert_eq!(requests(&d).len(), 1);
    d.prompt_result(json!({"stopReason":"cancelled"}));
    assert_eq!(d.status().name(), "cancelled");
    answer(&mut d, 1, Some("accept"), Some("{}"));
    assert!(d.take_sent().is_empty(), "closed already");

    // The task's deadline, on the virtual clock.
    let mut c = under(PermissionPolicy::Ask);
    c.task_timeout_ms = 10_000;
    let mut d = Drive::prompting(c);
    d.at(1_000);
    d.agent_json(form(json!(0)));
    d.run_until(9_999);
    assert!(
        d.take_sent().is_empty(),
        "a question has no clock of its own in the session"
    );
    d.at(10_000);
    let sent = d.take_sent();
    assert_eq!(sent[0]["method"], "session/cancel");
    assert_eq!(sent[1]["result"], action("cancel"));

    // The turn's end.
    let mut d = Drive::prompting(under(PermissionPolicy::Ask));
    d.agent_json(form(json!(0)));
    d.prompt_result(json!({"stopReason":"end_turn"}));
    let sent = d.take_sent();
    assert!(
        sent.iter()
            .any(|l| l["id"] == 0 && l["result"] == action("cancel")),
        "{sent:?}"
    );
}

#[test]
fn what_is_not_carried_to_a_person_is_answered_at_once() {
    // Under reject and allow nothing was advertised: declined, nobody is asked.
    for policy in [PermissionPolicy::Reject, PermissionPolicy::Allow] {
        let mut d = Drive::prompting(under(policy));
        d.agent_json(form(json!(0)));
        assert_eq!(one_reply(&mut d), (json!(0), action("decline")));
        assert!(requests(&d).is_empty());
        let logs = d.logs().join("\n");
        assert!(logs.contains(&format!(
            "question asked (elicitation/create): declined (policy {}: the hub offers questions under ask only)",
            policy.tag()
        )), "{logs}");
    }
    // Under ask: url mode, a form without a schema or one over 4096 bytes: declined.
    let big = json!({"type":"object","description":"x".repeat(5000)});
    for (line, why) in [
        (
            json!({"jsonrpc":"2.0","id":0,"method":"elicitation/create","params":{"mode":"url","sessionId":SID,"elicitationId":"e1","url":"https://example.com/oauth","message":"Sign in"}}),
            "it is in url mode, which the hub does not offer (form only)",
        ),
        (
            with_params(form(json!(0)), "requestedSchema", Value::Null),
            "it has no requestedSchema object",
        ),
        (
            with_params(form(json!(0)), "message", json!({"text": "x"})),
            "it has no message",
        ),
        (
            with_params(form(json!(0)), "requestedSchema", big),
            "its requestedSchema is 5034 bytes of JSON",
        ),
    ] {
        let mut d = Drive::prompting(under(PermissionPolicy::Ask));
        d.agent_json(line);
        assert_eq!(one_reply(&mut d), (json!(0), action("decline")), "{why}");
        assert!(requests(&d).is_empty());
        let logs = d.logs().join("\n");
        assert!(
            logs.contains(&format!(
                "question asked (elicitation/create), not carried: {why}"
            )),
            "{logs}"
        );
        assert!(!logs.contains("example.com"), "no url in a log: {logs}");
    }
    // Another session's question: cancel, and an anomaly.
    let mut d = Drive::prompting(under(PermissionPolicy::Ask));
    d.agent_json(with_params(
        form(json!(0)),
        "sessionId",
        json!("someone-else"),
    ));
    assert_eq!(one_reply(&mut d), (json!(0), action("cancel")));
    assert_eq!(d.s.progress(d.now).anomalies, 1);
}

#[test]
fn questions_share_the_cap_and_the_id_space_with_permission_requests() {
    let mut c = under(PermissionPolicy::Ask);
    c.approval.max_open_requests = 1;
    let mut d = Drive::prompting(c);
    d.agent_json(form(json!(0)));
    // Past the per-task cap: the question's fallback, cancel, at once.
    d.agent_json(form(json!(1)));
    assert_eq!(one_reply(&mut d), (json!(1), action("cancel")));
    assert!(d.logs().iter().any(|l| l.contains(
        "not held: 1 requests are held already (max_open_requests_per_task): cancelled"
    )));
    answer(&mut d, 1, Some("decline"), None);
    assert_eq!(one_reply(&mut d), (json!(0), action("decline")));
    // A permission request reusing a held question's id is not held (an answer could not
    // tell the two apart): its fallback at once, and an anomaly.
    d.agent_json(form(json!(5)));
    d.agent_json(json!({"jsonrpc":"2.0","id":5,"method":"session/request_permission","params":{"sessionId":SID,"toolCall":{"toolCallId":"t","title":"make","kind":"execute"},"options":[{"kind":"reject_once","name":"Reject","optionId":"reject"}]}}));
    let (id, result) = one_reply(&mut d);
    assert_eq!(
        (id, result["outcome"]["optionId"].clone()),
        (json!(5), json!("reject"))
    );
    assert_eq!(requests(&d).len(), 2, "seq 1 and seq 2 only");
    assert_eq!(requests(&d)[1].seq, 2);
}

#[test]
fn a_hostile_form_never_reaches_a_log_and_is_bounded() {
    let mut d = Drive::prompting(under(PermissionPolicy::Ask));
    let evil = format!("\u{1b}]52;c;{SECRET}\u{7}\n{}", "q".repeat(100_000));
    d.agent_json(with_params(form(json!(0)), "message", json!(evil)));
    let q = requests(&d).pop().unwrap();
    let m = q.message.unwrap();
    assert!(m.len() <= crate::acp::request::MAX_MESSAGE_BYTES && m.ends_with('…'));
    assert!(!m.contains(SECRET) && !crate::kernel::text::has_unsafe(&m));
    assert!(!q.title.contains(SECRET));
    // A schema naming the secret cannot be carried exactly: declined.
    d.agent_json(with_params(
        form(json!(1)),
        "requestedSchema",
        json!({"type":"object","title":SECRET}),
    ));
    assert_eq!(one_reply(&mut d), (json!(1), action("decline")));
    d.assert_logs_clean("CALL_TOOL");
}
