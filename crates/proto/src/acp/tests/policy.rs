//! Every stop reason, and permission requests under each policy (docs/acp.md
//! "Permission requests", "Outcomes").

use super::*;

fn permission(d: &mut Drive, id: Value, options: Value) -> Value {
    d.agent_json(json!({"jsonrpc":"2.0","id":id,"method":"session/request_permission","params":{"sessionId":SID,"toolCall":{"toolCallId":"c1","title":"Edit"},"options":options}}));
    let sent = d.take_sent();
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(sent[0]["id"], id);
    sent[0].clone()
}

fn all_four() -> Value {
    json!([
        {"kind":"allow_always","name":"Always","optionId":"aa"},
        {"kind":"allow_once","name":"Once","optionId":"ao"},
        {"kind":"reject_once","name":"No","optionId":"ro"},
        {"kind":"reject_always","name":"Never","optionId":"ra"}
    ])
}

fn selected(v: &Value) -> Option<&str> {
    match v["result"]["outcome"]["outcome"].as_str()? {
        "selected" => v["result"]["outcome"]["optionId"].as_str(),
        _ => None,
    }
}

fn is_cancelled(v: &Value) -> bool {
    v["result"] == json!({"outcome":{"outcome":"cancelled"}})
}

#[test]
fn every_stop_reason() {
    for (raw, want) in [
        ("end_turn", StopReason::EndTurn),
        ("max_tokens", StopReason::MaxTokens),
        ("max_turn_requests", StopReason::MaxTurnRequests),
        ("refusal", StopReason::Refusal),
        // Nobody asked to cancel: the agent's word is reported as it is.
        ("cancelled", StopReason::Cancelled),
        ("paused", StopReason::Other("paused".into())),
    ] {
        let mut d = Drive::prompting(config());
        d.chunk("t");
        d.prompt_result(json!({"stopReason": raw}));
        let o = d.outcome();
        assert_eq!(completed(&o), &want, "{raw}");
        assert_eq!(o.status.name(), "completed");
        assert_eq!(o.text, "t");
    }
}

#[test]
fn an_unknown_stop_reason_is_kept_bounded_and_clean() {
    let mut d = Drive::prompting(config());
    let raw = format!("weird\n{}", "z".repeat(10_000));
    d.prompt_result(json!({"stopReason": raw}));
    let StopReason::Other(kept) = completed(&d.outcome()).clone() else {
        panic!()
    };
    assert!(kept.starts_with("weird?zzz"));
    assert!(kept.chars().count() <= 65);
}

#[test]
fn a_result_without_a_stop_reason_fails() {
    for result in [
        json!({}),
        json!({"stopReason": 3}),
        json!(null),
        json!("end_turn"),
    ] {
        let mut d = Drive::prompting(config());
        d.prompt_result(result.clone());
        assert_eq!(
            d.status(),
            Status::Failed(Failure::BadResult {
                step: Step::Prompt,
                what: "no stopReason"
            }),
            "{result}"
        );
    }
}

#[test]
fn reject_policy_prefers_reject_once() {
    let mut d = Drive::prompting(config());
    assert_eq!(
        selected(&permission(&mut d, json!(0), all_four())),
        Some("ro")
    );
    let only_always =
        json!([{"kind":"allow_once","optionId":"a"},{"kind":"reject_always","optionId":"ra"}]);
    assert_eq!(
        selected(&permission(&mut d, json!(1), only_always)),
        Some("ra")
    );
    let allow_only =
        json!([{"kind":"allow_once","optionId":"a"},{"kind":"allow_always","optionId":"aa"}]);
    assert!(is_cancelled(&permission(&mut d, json!(2), allow_only)));
    assert!(is_cancelled(&permission(&mut d, json!(3), json!([]))));
    let p = d.s.progress(d.now).permissions;
    assert_eq!((p.asked, p.allowed, p.rejected, p.cancelled), (4, 0, 2, 2));
}

#[test]
fn allow_policy_prefers_allow_once() {
    let mut c = config();
    c.permission = PermissionPolicy::Allow;
    let mut d = Drive::prompting(c);
    assert_eq!(
        selected(&permission(&mut d, json!(0), all_four())),
        Some("ao")
    );
    let always =
        json!([{"kind":"allow_always","optionId":"aa"},{"kind":"reject_once","optionId":"r"}]);
    assert_eq!(selected(&permission(&mut d, json!(1), always)), Some("aa"));
    let reject_only = json!([{"kind":"reject_once","optionId":"r"}]);
    assert_eq!(
        selected(&permission(&mut d, json!(2), reject_only)),
        Some("r")
    );
    assert!(is_cancelled(&permission(
        &mut d,
        json!(3),
        json!([{"kind":"??","optionId":"q"}])
    )));
}

#[test]
fn after_cancel_every_permission_is_cancelled_under_both_policies() {
    for policy in [PermissionPolicy::Allow, PermissionPolicy::Reject] {
        let mut c = config();
        c.permission = policy;
        let mut d = Drive::prompting(c);
        assert!(d.cancel());
        d.take_sent();
        for id in [json!(0), json!("p-1"), json!(7)] {
            assert!(
                is_cancelled(&permission(&mut d, id, all_four())),
                "{policy:?}"
            );
        }
        // §5.1: the example agent ends the turn with end_turn when the cancel lands during
        // its permission prompt. The caller asked to cancel, so the outcome is Cancelled.
        d.prompt_result(json!({"stopReason":"end_turn"}));
        assert_eq!(
            d.status(),
            Status::Cancelled {
                end: CancelEnd::Stopped(StopReason::EndTurn)
            }
        );
        assert_eq!(d.outcome().progress.permissions.cancelled, 3);
    }
}

#[test]
fn after_a_timeout_permissions_are_cancelled_too() {
    let mut c = config();
    c.permission = PermissionPolicy::Allow;
    c.task_timeout_ms = 1000;
    let mut d = Drive::prompting(c);
    d.at(1000);
    assert_eq!(d.take_sent()[0]["method"], "session/cancel");
    assert!(is_cancelled(&permission(&mut d, json!(0), all_four())));
}

#[test]
fn a_permission_for_another_session_is_cancelled() {
    let mut c = config();
    c.permission = PermissionPolicy::Allow;
    let mut d = Drive::prompting(c);
    d.agent_json(json!({"jsonrpc":"2.0","id":0,"method":"session/request_permission","params":{"sessionId":"someone-else","toolCall":{},"options":all_four()}}));
    assert!(is_cancelled(&d.take_sent()[0]));
    assert_eq!(d.s.progress(d.now).anomalies, 1);
}

#[test]
fn a_permission_without_options_gets_invalid_params() {
    let mut d = Drive::prompting(config());
    for params in [
        json!({"sessionId":SID}),
        json!({"options":{"a":1}}),
        json!(null),
        json!([1]),
    ] {
        d.agent_json(
            json!({"jsonrpc":"2.0","id":4,"method":"session/request_permission","params":params}),
        );
        let sent = d.take_sent();
        assert_eq!(sent[0]["id"], 4);
        assert_eq!(sent[0]["error"]["code"], -32602, "{params}");
    }
    assert!(!d.s.has_outcome(), "a bad request does not end the session");
}

#[test]
fn permission_before_the_prompt_follows_the_policy() {
    let mut d = Drive::new(config());
    d.agent(r#"{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":1}}"#);
    d.take_sent();
    assert_eq!(
        selected(&permission(&mut d, json!(0), all_four())),
        Some("ro")
    );
}
