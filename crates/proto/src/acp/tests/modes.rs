//! Session modes (docs/acp.md "Session modes"): the session is put in a mode where the agent
//! asks before the prompt, refused when it cannot be (unless the policy is `allow`), and put
//! back when the agent leaves that mode mid-turn. The Claude lines are recorded from
//! `@agentclientprotocol/claude-agent-acp` 0.101.0 (models, effort and the long command list
//! cut).

use super::*;
use crate::acp::session::MAX_MODE_RESETS;

/// Through `session/new`'s answer with `result` (initialize answered at id 0).
fn created(c: SessionConfig, result: Value) -> Drive {
    let mut d = Drive::new(c);
    d.agent(r#"{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":1}}"#);
    d.take_sent();
    d.agent_json(json!({"jsonrpc":"2.0","id":1,"result":result}));
    d
}

fn allow(mut c: SessionConfig) -> SessionConfig {
    c.permission = PermissionPolicy::Allow;
    c
}

fn claude_modes(current: &str) -> Value {
    json!({"currentModeId":current,"availableModes":[
        {"id":"default","name":"Manual","description":"Always ask before making changes"},
        {"id":"acceptEdits","name":"Accept edits","description":"Automatically accept all file edits"},
        {"id":"plan","name":"Plan","description":"Create a plan before making changes"},
        {"id":"auto","name":"Auto","description":"Claude handles permission decisions"},
        {"id":"bypassPermissions","name":"Bypass permissions","description":"Accepts all permissions"}]})
}

fn claude_mode_option(current: &str) -> Value {
    json!({"id":"mode","name":"Mode","description":"Session permission mode","category":"mode","type":"select","currentValue":current,"options":[
        {"value":"default","name":"Manual","description":"Always ask before making changes"},
        {"value":"acceptEdits","name":"Accept edits","description":"Automatically accept all file edits"},
        {"value":"plan","name":"Plan","description":"Create a plan before making changes"},
        {"value":"auto","name":"Auto","description":"Claude handles permission decisions"},
        {"value":"bypassPermissions","name":"Bypass permissions","description":"Accepts all permissions"}]})
}

/// The adapter's `session/new` result: `auto`, in both `modes` and `configOptions`.
fn claude_0101_new() -> Value {
    json!({"sessionId":SID,"modes":claude_modes("auto"),"configOptions":[claude_mode_option("auto"),
        {"id":"model","name":"Model","description":"AI model to use","category":"model","type":"select","currentValue":"default","options":[{"value":"default","name":"Default (recommended)","description":"Opus"}]}]})
}

fn modes_only(current: &str) -> Value {
    json!({"sessionId":SID,"modes":claude_modes(current)})
}

fn methods(sent: &[Value]) -> Vec<String> {
    sent.iter()
        .map(|v| v["method"].as_str().unwrap_or("(answer)").to_owned())
        .collect()
}

fn refused_unasked(d: &Drive) -> String {
    match d.status() {
        Status::Refused(r @ Refusal::Unasked { .. }) => r.to_string(),
        other => panic!("expected refused (unasked), got {other:?}"),
    }
}

#[test]
fn claude_0101_in_auto_is_switched_to_manual_before_the_prompt() {
    let mut d = created(config(), claude_0101_new());
    // The mode config option wins over `modes` (ACP "Session Config Options"), and nothing
    // is prompted before the agent answered the switch.
    assert_eq!(
        d.take_sent(),
        [
            json!({"jsonrpc":"2.0","id":2,"method":"session/set_config_option","params":{"sessionId":SID,"configId":"mode","value":"default"}})
        ]
    );
    // What the adapter sent before its answer, as recorded.
    d.update(json!({"sessionUpdate":"current_mode_update","currentModeId":"default"}));
    assert!(d.take_sent().is_empty());
    d.agent_json(
        json!({"jsonrpc":"2.0","id":2,"result":{"configOptions":[claude_mode_option("default")]}}),
    );
    let sent = d.take_sent();
    assert_eq!(methods(&sent), ["session/prompt"]);
    assert_eq!(sent[0]["id"], 3);
    assert_eq!(d.s.progress(d.now).mode.as_deref(), Some("default"));
    // The agent now asks, and the policy (reject) answers.
    d.agent_json(json!({"jsonrpc":"2.0","id":0,"method":"session/request_permission","params":{"sessionId":SID,"toolCall":{"toolCallId":"toolu_1","title":"mcp__agent-hub__send"},"options":[
        {"kind":"allow_always","name":"Always Allow","optionId":"allow_always"},{"kind":"allow_once","name":"Allow","optionId":"allow"},{"kind":"reject_once","name":"Reject","optionId":"reject"}]}}));
    assert_eq!(
        d.take_sent()[0]["result"]["outcome"],
        json!({"outcome":"selected","optionId":"reject"})
    );
    d.agent_json(json!({"jsonrpc":"2.0","id":3,"result":{"stopReason":"end_turn"}}));
    assert_eq!(completed(&d.outcome()), &StopReason::EndTurn);
    assert_eq!(d.outcome().progress.mode.as_deref(), Some("default"));
    assert!(d.logs().iter().any(|l| l.contains("session mode default")));
    d.assert_logs_clean("Please CALL_TOOL:echo now");
}

#[test]
fn modes_without_config_options_use_set_mode() {
    let mut d = created(config(), modes_only("auto"));
    assert_eq!(
        d.take_sent(),
        [
            json!({"jsonrpc":"2.0","id":2,"method":"session/set_mode","params":{"sessionId":SID,"modeId":"default"}})
        ]
    );
    d.agent(r#"{"jsonrpc":"2.0","id":2,"result":{}}"#);
    assert_eq!(methods(&d.take_sent()), ["session/prompt"]);
}

#[test]
fn an_asking_mode_is_kept_and_no_modes_change_nothing() {
    // Gemini CLI 0.61 starts in `default` ("Prompts for approval"): nothing to switch.
    let gemini = json!({"sessionId":SID,"modes":{"availableModes":[
        {"id":"default","name":"Default","description":"Prompts for approval"},
        {"id":"yolo","name":"YOLO","description":"Auto-approves all tools"}],"currentModeId":"default"}});
    let mut d = created(config(), gemini);
    let sent = d.take_sent();
    assert_eq!(methods(&sent), ["session/prompt"]);
    assert_eq!(sent[0]["id"], 2);
    // No modes at all: prompted at once, as before modes were read.
    let mut d = created(config(), json!({"sessionId":SID}));
    assert_eq!(methods(&d.take_sent()), ["session/prompt"]);
    assert_eq!(d.s.progress(d.now).mode, None);
}

#[test]
fn a_failed_switch_is_refused_under_reject() {
    let mut d = created(config(), modes_only("auto"));
    d.take_sent();
    d.agent(r#"{"jsonrpc":"2.0","id":2,"error":{"code":-32602,"message":"Mode default is not available in this session"}}"#);
    let why = refused_unasked(&d);
    assert!(why.contains("session/set_mode"), "{why}");
    assert!(why.contains("-32602"), "{why}");
    assert!(why.contains("permission = \"reject\""), "{why}");
    // Nothing was prompted.
    assert!(!methods(&d.all_sent()).contains(&"session/prompt".to_owned()));
    assert_eq!(d.take_events().last(), Some(&Event::CloseStdin));
}

#[test]
fn a_failed_switch_runs_under_allow_and_says_so() {
    let mut d = created(allow(config()), modes_only("auto"));
    d.take_sent();
    d.agent(r#"{"jsonrpc":"2.0","id":2,"error":{"code":-32603,"message":"Invalid Mode"}}"#);
    assert_eq!(methods(&d.take_sent()), ["session/prompt"]);
    assert!(
        d.logs()
            .iter()
            .any(|l| l.contains("without asking") && l.contains("permission = \"allow\"")),
        "{:?}",
        d.logs()
    );
    d.agent(r#"{"jsonrpc":"2.0","id":3,"result":{"stopReason":"end_turn"}}"#);
    assert_eq!(completed(&d.outcome()), &StopReason::EndTurn);
}

#[test]
fn no_asking_mode_offered_is_refused_under_reject_and_run_under_allow() {
    let no_ask = json!({"sessionId":SID,"modes":{"currentModeId":"auto","availableModes":[
        {"id":"auto"},{"id":"acceptEdits"},{"id":"bypassPermissions"}]}});
    let mut d = created(config(), no_ask.clone());
    let why = refused_unasked(&d);
    assert!(why.contains("mode auto"), "{why}");
    assert!(why.contains("default, manual, ask"), "{why}");
    assert!(why.contains("run.ask_modes"), "{why}");
    assert!(
        d.take_sent().is_empty(),
        "nothing is sent: no switch, no prompt"
    );

    let mut d = created(allow(config()), no_ask);
    assert_eq!(methods(&d.take_sent()), ["session/prompt"]);
    assert!(d.logs().iter().any(|l| l.contains("running it anyway")));
}

#[test]
fn the_manifests_ask_modes_decide() {
    // codex-acp 2.6 starts in `agent` (auto review); its manifest names `read-only`.
    let codex = json!({"sessionId":SID,"configOptions":[{"id":"mode","category":"mode","type":"select","currentValue":"agent","options":[
        {"value":"read-only"},{"value":"workspace-write"},{"value":"agent"},{"value":"agent-full-access"}]}]});
    let mut c = config();
    c.ask_modes = Some(vec!["read-only".into()]);
    let mut d = created(c, codex.clone());
    assert_eq!(
        d.take_sent()[0]["params"],
        json!({"sessionId":SID,"configId":"mode","value":"read-only"})
    );
    // Without the list, the fallback ids find nothing there.
    let d = created(config(), codex);
    assert!(refused_unasked(&d).contains("the hub's default list"));
    // A list given but empty: no mode asks.
    let mut c = config();
    c.ask_modes = Some(Vec::new());
    let d = created(c, modes_only("default"));
    assert!(refused_unasked(&d).contains("the list is empty"));
}

#[test]
fn a_switch_the_agent_clamps_elsewhere_is_refused() {
    let mut d = created(config(), claude_0101_new());
    d.take_sent();
    d.agent_json(json!({"jsonrpc":"2.0","id":2,"result":{"configOptions":[claude_mode_option("acceptEdits")]}}));
    let why = refused_unasked(&d);
    assert!(why.contains("reports mode acceptEdits"), "{why}");
}

#[test]
fn unreadable_modes_are_refused_under_reject() {
    let bad = json!({"sessionId":SID,"modes":{"currentModeId":42,"availableModes":[]}});
    let d = created(config(), bad.clone());
    assert!(refused_unasked(&d).contains("cannot be read"));
    let mut d = created(allow(config()), bad);
    assert_eq!(methods(&d.take_sent()), ["session/prompt"]);
}

#[test]
fn the_switch_has_the_session_new_deadline_and_ends_like_a_setup_step() {
    let mut c = config();
    c.limits.session_new_timeout_ms = 5_000;
    let mut d = created(c.clone(), modes_only("auto"));
    d.at(4_999);
    assert!(!d.s.has_outcome());
    d.at(5_000);
    assert_eq!(
        d.status(),
        Status::Failed(Failure::NoAnswer {
            step: Step::SetMode,
            waited_ms: 5_000
        })
    );

    let mut d = created(c.clone(), claude_0101_new());
    assert!(d.cancel());
    assert_eq!(
        d.status(),
        Status::Cancelled {
            end: CancelEnd::BeforePrompt
        }
    );

    let mut d = created(c, claude_0101_new());
    d.exit(1);
    d.eof();
    assert_eq!(
        d.status(),
        Status::Failed(Failure::Exited {
            during: Step::SetConfigOption,
            status: Some(ExitStatus::code(1))
        })
    );
}

#[test]
fn leaving_the_asking_mode_mid_turn_is_undone_a_bounded_number_of_times() {
    let mut d = created(config(), modes_only("auto"));
    d.take_sent();
    d.agent(r#"{"jsonrpc":"2.0","id":2,"result":{}}"#);
    assert_eq!(methods(&d.take_sent()), ["session/prompt"]);
    // Our ids: 0 initialize, 1 session/new, 2 set_mode, 3 the prompt, then the switches.
    for next in 4..4 + u64::from(MAX_MODE_RESETS) {
        d.update(
            json!({"sessionUpdate":"current_mode_update","currentModeId":"bypassPermissions"}),
        );
        let sent = d.take_sent();
        assert_eq!(
            sent,
            [
                json!({"jsonrpc":"2.0","id":next,"method":"session/set_mode","params":{"sessionId":SID,"modeId":"default"}})
            ]
        );
        d.agent_json(json!({"jsonrpc":"2.0","id":next,"result":{}}));
        d.update(json!({"sessionUpdate":"current_mode_update","currentModeId":"default"}));
    }
    assert_eq!(
        d.s.progress(d.now).anomalies,
        0,
        "answers to our switches are expected"
    );
    d.update(json!({"sessionUpdate":"current_mode_update","currentModeId":"auto"}));
    // No fifth switch: the turn is cancelled, never run on unasked.
    assert_eq!(methods(&d.take_sent()), ["session/cancel"]);
    assert_eq!(d.s.progress(d.now).mode.as_deref(), Some("auto"));
    d.agent(r#"{"jsonrpc":"2.0","id":3,"result":{"stopReason":"cancelled"}}"#);
    match d.status() {
        Status::Failed(f @ Failure::LeftAskingMode { .. }) => {
            let why = f.to_string();
            assert!(
                why.contains("mode auto") && why.contains("cancelled"),
                "{why}"
            );
        }
        other => panic!("expected failed (left the asking mode), got {other:?}"),
    }
}

#[test]
fn leaving_for_a_mode_when_none_offered_asks_cancels_the_turn() {
    // The session starts in an asking mode that its list of modes does not hold, so once the
    // agent leaves it there is nothing that asks to switch back to.
    let mut d = created(
        config(),
        json!({"sessionId":SID,"modes":{"currentModeId":"default","availableModes":[{"id":"auto"}]}}),
    );
    assert_eq!(methods(&d.take_sent()), ["session/prompt"]);
    d.update(json!({"sessionUpdate":"current_mode_update","currentModeId":"auto"}));
    assert_eq!(methods(&d.take_sent()), ["session/cancel"]);
    assert!(d
        .logs()
        .iter()
        .any(|l| l.contains("offers no mode that asks")));
    d.agent(r#"{"jsonrpc":"2.0","id":2,"result":{"stopReason":"cancelled"}}"#);
    assert!(matches!(
        d.status(),
        Status::Failed(Failure::LeftAskingMode { .. })
    ));
}

#[test]
fn a_failed_switch_back_cancels_the_turn_and_allow_leaves_the_mode_alone() {
    let mut d = created(config(), claude_0101_new());
    d.take_sent();
    d.agent_json(
        json!({"jsonrpc":"2.0","id":2,"result":{"configOptions":[claude_mode_option("default")]}}),
    );
    d.take_sent();
    d.update(json!({"sessionUpdate":"config_option_update","configOptions":[claude_mode_option("acceptEdits")]}));
    let sent = d.take_sent();
    assert_eq!(sent[0]["method"], "session/set_config_option");
    d.agent_json(
        json!({"jsonrpc":"2.0","id":sent[0]["id"],"error":{"code":-32603,"message":"nope"}}),
    );
    // The agent stays in a mode that does not ask: its turn is cancelled.
    assert_eq!(methods(&d.take_sent()), ["session/cancel"]);
    d.agent(r#"{"jsonrpc":"2.0","id":3,"result":{"stopReason":"cancelled"}}"#);
    assert!(matches!(
        d.status(),
        Status::Failed(Failure::LeftAskingMode { ref mode, .. }) if mode == "acceptEdits"
    ));

    let mut d = created(allow(config()), modes_only("default"));
    assert_eq!(methods(&d.take_sent()), ["session/prompt"]);
    d.update(json!({"sessionUpdate":"current_mode_update","currentModeId":"auto"}));
    assert!(d.take_sent().is_empty());
    assert!(d.logs().iter().any(|l| l.contains("left as it is")));
}

#[test]
fn a_failed_switch_back_after_the_agent_came_back_by_itself_cancels_nothing() {
    let mut d = created(config(), modes_only("default"));
    assert_eq!(methods(&d.take_sent()), ["session/prompt"]);
    d.update(json!({"sessionUpdate":"current_mode_update","currentModeId":"auto"}));
    let sent = d.take_sent();
    assert_eq!(methods(&sent), ["session/set_mode"]);
    d.update(json!({"sessionUpdate":"current_mode_update","currentModeId":"default"}));
    d.agent_json(
        json!({"jsonrpc":"2.0","id":sent[0]["id"],"error":{"code":-32603,"message":"busy"}}),
    );
    assert!(d.take_sent().is_empty(), "no cancel: the agent asks again");
    assert_eq!(d.s.progress(d.now).anomalies, 1);
    d.agent(r#"{"jsonrpc":"2.0","id":2,"result":{"stopReason":"end_turn"}}"#);
    assert_eq!(completed(&d.outcome()), &StopReason::EndTurn);
}

#[test]
fn mode_updates_for_another_session_or_after_a_cancel_change_nothing() {
    let mut d = created(config(), modes_only("default"));
    d.take_sent();
    d.agent_json(json!({"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"other","update":{"sessionUpdate":"current_mode_update","currentModeId":"auto"}}}));
    assert!(d.take_sent().is_empty());
    assert_eq!(d.s.progress(d.now).mode.as_deref(), Some("default"));
    assert!(d.cancel());
    d.take_sent();
    d.update(json!({"sessionUpdate":"current_mode_update","currentModeId":"auto"}));
    assert!(d.take_sent().is_empty(), "nothing runs after a cancel");
}
