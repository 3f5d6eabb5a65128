//! Follow-up turns of a kept session (issue 38 design §2, §11 B) on the virtual clock: one
//! outcome per turn, numbered; `Event::Idle` only when the config keeps and the turn
//! completed; an interrupt sends `session/cancel`, gives the cancelled turn's outcome, then
//! the next prompt, in that order; `session/close` only when the agent advertised it.

use super::*;
use crate::acp::session::PromptRefusal;

fn keeping() -> SessionConfig {
    let mut c = config();
    c.keep_session = true;
    c
}

/// Through `session/prompt`, with the agent's capabilities as given.
fn prompting_with(c: SessionConfig, caps: Value) -> Drive {
    let mut d = Drive::new(c);
    d.agent_json(
        json!({"jsonrpc":"2.0","id":0,"result":{"protocolVersion":1,"agentCapabilities":caps}}),
    );
    d.agent(&format!(
        r#"{{"jsonrpc":"2.0","id":1,"result":{{"sessionId":"{SID}"}}}}"#
    ));
    let sent = d.take_sent();
    assert_eq!(sent.last().unwrap()["method"], "session/prompt", "{sent:?}");
    d
}

fn outcomes(d: &Drive) -> Vec<Outcome> {
    d.io.iter()
        .filter_map(|i| match i {
            Io::Ev(Event::Outcome(o)) => Some(o.clone()),
            _ => None,
        })
        .collect()
}

fn result(d: &mut Drive, id: u64, stop: &str) {
    d.agent_json(json!({"jsonrpc":"2.0","id":id,"result":{"stopReason":stop}}));
}

fn prompt(d: &mut Drive, text: &str, interrupt: bool) -> Result<u32, PromptRefusal> {
    let r = d.s.prompt(text.to_owned(), interrupt, d.now);
    d.drain();
    r
}

#[test]
fn a_kept_session_takes_numbered_turns_each_with_its_own_outcome() {
    let mut d = Drive::prompting(keeping());
    d.chunk("first");
    d.prompt_result(json!({"stopReason":"end_turn"}));
    let mut ev = d.take_events();
    ev.retain(|e| !matches!(e, Event::Progress(_)));
    assert!(
        matches!(&ev[..], [Event::Outcome(o), Event::Idle { turn: 1 }] if o.turn == 1 && o.kept && o.text == "first"),
        "{ev:?}"
    );
    assert!(d.s.is_idle());
    assert!(d.take_sent().is_empty(), "nothing is closed while kept");
    assert_eq!(
        d.s.poll_timeout(),
        None,
        "a kept session has no deadline of its own"
    );

    d.at(5_000);
    assert_eq!(prompt(&mut d, "second", false), Ok(2));
    let sent = d.take_sent();
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(sent[0]["method"], "session/prompt");
    assert_eq!(sent[0]["id"], 3);
    assert_eq!(sent[0]["params"]["prompt"][0]["text"], "second");
    d.chunk("again");
    d.at(6_500);
    result(&mut d, 3, "end_turn");
    let all = outcomes(&d);
    assert_eq!(all.len(), 2);
    assert_eq!(
        (all[1].turn, all[1].kept, all[1].text.as_str()),
        (2, true, "again")
    );
    assert_eq!(
        all[1].progress.elapsed_ms, 1_500,
        "a turn's time is its own"
    );
    assert_eq!(d.s.turn(), 2);
}

#[test]
fn without_keep_the_session_closes_after_its_one_outcome_as_before() {
    let mut d = Drive::prompting(config());
    d.prompt_result(json!({"stopReason":"end_turn"}));
    let o = d.outcome();
    assert_eq!((o.turn, o.kept), (1, false));
    assert!(d.take_events().contains(&Event::CloseStdin));
    assert_eq!(prompt(&mut d, "more", false), Err(PromptRefusal::Closed));
}

#[test]
fn only_a_completed_turn_is_kept_a_failed_or_timed_out_one_closes() {
    let mut d = Drive::prompting(keeping());
    d.agent(r#"{"jsonrpc":"2.0","id":2,"error":{"code":-32603,"message":"boom"}}"#);
    let ev = d.take_events();
    assert!(
        !ev.iter().any(|e| matches!(e, Event::Idle { .. })),
        "{ev:?}"
    );
    assert!(ev.contains(&Event::CloseStdin));

    let mut d = Drive::prompting(keeping());
    d.run_until(600_000);
    d.run_until(600_000 + 15_000);
    let o = outcomes(&d);
    assert!(matches!(o[0].status, Status::TimedOut { .. }), "{o:?}");
    assert!(!o[0].kept);
}

#[test]
fn a_follow_up_while_a_turn_is_open_is_refused_without_interrupt() {
    let mut d = Drive::prompting(keeping());
    assert_eq!(
        prompt(&mut d, "x", false),
        Err(PromptRefusal::TurnOpen { turn: 1 })
    );
    assert!(d.take_sent().is_empty());
}

#[test]
fn an_interrupt_cancels_then_reports_the_turn_then_prompts_in_that_order() {
    let mut d = Drive::prompting(keeping());
    d.chunk("half");
    assert_eq!(prompt(&mut d, "instead", true), Ok(2));
    let sent = d.take_sent();
    assert_eq!(sent.len(), 1, "only the cancel so far: {sent:?}");
    assert_eq!(sent[0]["method"], "session/cancel");
    assert_eq!(
        prompt(&mut d, "again", true),
        Err(PromptRefusal::TurnEnding { turn: 1 })
    );
    result(&mut d, 2, "cancelled");
    // The outcome of turn 1 comes before the prompt of turn 2 is written (the IO layer
    // writes transmits first, so check the order the session queued them in).
    let o = outcomes(&d);
    assert_eq!(o.len(), 1);
    assert_eq!(o[0].turn, 1);
    assert!(matches!(o[0].status, Status::Cancelled { .. }));
    assert!(o[0].kept, "the session goes on");
    let sent = d.take_sent();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0]["method"], "session/prompt");
    assert_eq!(sent[0]["params"]["prompt"][0]["text"], "instead");
    let id = sent[0]["id"].as_u64().unwrap();
    result(&mut d, id, "end_turn");
    let o = outcomes(&d);
    assert_eq!((o[1].turn, o[1].kept), (2, true));
}

#[test]
fn an_interrupt_whose_turn_never_ends_fails_the_follow_up_and_closes() {
    let mut d = Drive::prompting(keeping());
    assert_eq!(prompt(&mut d, "instead", true), Ok(2));
    d.run_until(15_000);
    let o = outcomes(&d);
    assert_eq!(o.len(), 2, "{o:?}");
    assert!(matches!(
        o[0].status,
        Status::Cancelled {
            end: CancelEnd::NoAnswer { .. }
        }
    ));
    assert_eq!(o[1].turn, 2);
    assert!(
        matches!(&o[1].status, Status::Failed(Failure::FollowUpNotSent(_))),
        "{:?}",
        o[1].status
    );
    assert!(!o[1].kept);
    assert!(d.take_events().contains(&Event::CloseStdin));
}

#[test]
fn the_callers_cancel_replaces_a_pending_interrupt() {
    let mut d = Drive::prompting(keeping());
    assert_eq!(prompt(&mut d, "instead", true), Ok(2));
    assert!(d.cancel(), "the cancel decides");
    result(&mut d, 2, "cancelled");
    let o = outcomes(&d);
    assert_eq!(o.len(), 1, "no follow-up is sent after a cancel: {o:?}");
    assert!(!o[0].kept);
    assert!(!d
        .all_sent()
        .iter()
        .any(|v| v["params"]["prompt"][0]["text"] == "instead"));
}

#[test]
fn an_interrupt_before_the_first_prompt_replaces_it() {
    let mut d = Drive::new(keeping());
    assert_eq!(prompt(&mut d, "instead", true), Ok(2));
    let o = outcomes(&d);
    assert!(matches!(
        o[0].status,
        Status::Cancelled {
            end: CancelEnd::BeforePrompt
        }
    ));
    d.agent(r#"{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":1}}"#);
    d.agent(&format!(
        r#"{{"jsonrpc":"2.0","id":1,"result":{{"sessionId":"{SID}"}}}}"#
    ));
    let sent = d.take_sent();
    let p = sent.last().unwrap();
    assert_eq!(p["method"], "session/prompt");
    assert_eq!(p["params"]["prompt"][0]["text"], "instead");
    assert_eq!(d.s.turn(), 2);
}

#[test]
fn each_turn_has_its_own_budget() {
    let mut d = Drive::prompting(keeping());
    d.at(590_000);
    d.prompt_result(json!({"stopReason":"end_turn"}));
    assert_eq!(prompt(&mut d, "second", false), Ok(2));
    d.at(590_000 + 599_000);
    assert_eq!(outcomes(&d).len(), 1, "turn 2 has its own 600 s");
    d.at(590_000 + 600_000);
    assert_eq!(d.take_sent().last().unwrap()["method"], "session/cancel");
}

#[test]
fn close_sends_session_close_only_when_advertised() {
    // Advertised: session/close, then the shutdown after its answer.
    let caps = json!({"sessionCapabilities":{"close":{}}});
    let mut d = prompting_with(keeping(), caps);
    d.prompt_result(json!({"stopReason":"end_turn"}));
    d.take_events();
    d.s.close(d.now);
    d.drain();
    let sent = d.take_sent();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0]["method"], "session/close");
    assert_eq!(sent[0]["params"]["sessionId"], SID);
    assert!(
        !d.take_events().contains(&Event::CloseStdin),
        "awaits the answer"
    );
    let id = sent[0]["id"].as_u64().unwrap();
    d.agent_json(json!({"jsonrpc":"2.0","id":id,"result":{}}));
    assert!(d.take_events().contains(&Event::CloseStdin));

    // Advertised but unanswered: the shutdown after stdin_grace_ms.
    let caps = json!({"sessionCapabilities":{"close":{}}});
    let mut d = prompting_with(keeping(), caps);
    d.prompt_result(json!({"stopReason":"end_turn"}));
    d.s.close(d.now);
    d.drain();
    d.take_events();
    d.run_until(3_000);
    assert!(d.take_events().contains(&Event::CloseStdin));

    // Not advertised (Gemini's shape; or `close: null`): straight to the shutdown.
    for caps in [
        json!({"loadSession":true}),
        json!({"sessionCapabilities":{"close":null}}),
    ] {
        let mut d = prompting_with(keeping(), caps);
        d.prompt_result(json!({"stopReason":"end_turn"}));
        d.take_events();
        d.s.close(d.now);
        d.drain();
        assert!(d.take_sent().is_empty());
        assert!(d.take_events().contains(&Event::CloseStdin));
        assert_eq!(prompt(&mut d, "late", false), Err(PromptRefusal::Closed));
    }
}

#[test]
fn an_agent_that_exits_while_kept_ends_without_another_outcome() {
    let mut d = Drive::prompting(keeping());
    d.prompt_result(json!({"stopReason":"end_turn"}));
    d.eof();
    d.exit(0);
    let ev = d.take_events();
    assert!(ev.ends_with(&[Event::Finished]), "{ev:?}");
    assert_eq!(outcomes(&d).len(), 1);
}

#[test]
fn a_request_while_kept_is_answered_cancelled_and_updates_are_ignored() {
    let mut d = Drive::prompting(keeping());
    d.prompt_result(json!({"stopReason":"end_turn"}));
    d.take_sent();
    d.chunk("stray");
    d.agent_json(
        json!({"jsonrpc":"2.0","id":"p1","method":"session/request_permission","params":{
        "sessionId":SID,"toolCall":{"toolCallId":"t","title":"rm"},
        "options":[{"optionId":"a","name":"Allow","kind":"allow_once"}]}}),
    );
    let sent = d.take_sent();
    assert_eq!(
        sent[0]["result"]["outcome"]["outcome"], "cancelled",
        "{sent:?}"
    );
    assert_eq!(prompt(&mut d, "next", false), Ok(2));
    let id = d.take_sent()[0]["id"].as_u64().unwrap();
    result(&mut d, id, "end_turn");
    assert_eq!(outcomes(&d)[1].text, "", "nothing from between the turns");
}

#[test]
fn an_interrupt_during_a_deadline_cancel_waits_for_it_then_prompts() {
    let mut d = Drive::prompting(keeping());
    d.run_until(600_000);
    assert_eq!(d.take_sent().last().unwrap()["method"], "session/cancel");
    assert_eq!(prompt(&mut d, "instead", true), Ok(2));
    result(&mut d, 2, "cancelled");
    let o = outcomes(&d);
    assert!(matches!(o[0].status, Status::TimedOut { .. }));
    assert!(o[0].kept);
    let sent = d.take_sent();
    assert_eq!(sent[0]["params"]["prompt"][0]["text"], "instead");
}
