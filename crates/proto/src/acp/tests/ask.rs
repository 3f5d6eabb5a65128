//! Requests held for a person under `Ask` (issue 37 design §2-§4; docs/acp.md "Permission
//! requests"): held and numbered, answered by `Session::answer`, closed `cancelled` by a
//! cancel, the task's deadline and the turn's end, capped, pre-approved by rules, and the
//! hub's own tools allowed under every policy. The agents' request lines are the ones
//! captured from Claude Code's ACP adapters and Gemini CLI (../notes capture37-facts.md).

use super::*;
use crate::acp::permission::AllowRule;
use crate::acp::request::{OptionKind, RequestAnswer, RequestAsk};

const HUB: &str = "agent-hub-3f2a9c1b7d4e";

/// A config under `Ask` with the hub's server attached as `HUB`.
fn ask() -> SessionConfig {
    let mut c = config();
    c.mcp_servers[0].name = HUB.into();
    c.permission = PermissionPolicy::Ask;
    c.approval.hub_server = Some(HUB.into());
    c
}

fn options() -> Value {
    json!([
        {"kind":"allow_always","name":"Always Allow","optionId":"allow_always"},
        {"kind":"allow_once","name":"Allow","optionId":"allow"},
        {"kind":"reject_once","name":"Reject","optionId":"reject"}
    ])
}

/// A Bash request as claude-agent-acp 0.23 sends it (capture §1.2), with the id `id`.
fn bash(id: Value, command: &str) -> Value {
    json!({"jsonrpc":"2.0","id":id,"method":"session/request_permission","params":{"options":options(),"sessionId":SID,"toolCall":{"toolCallId":"toolu_mock_1","rawInput":{"command":command},"title":command,"kind":"execute","content":[]}}})
}

/// An edit of `path` (`locations`), claude-agent-acp 0.101's shape.
fn edit(id: Value, path: &str) -> Value {
    json!({"jsonrpc":"2.0","id":id,"method":"session/request_permission","params":{"sessionId":SID,"toolCall":{"toolCallId":"toolu_e","name":"Edit","status":"pending","rawInput":{"file_path":path},"title":format!("Edit {path}"),"kind":"edit","content":[],"locations":[{"path":path}]},"options":[{"optionId":"allow-once","name":"Yes","kind":"allow_once"},{"optionId":"allow-with-updates","name":"Yes, always","kind":"allow_always"},{"optionId":"reject","name":"No","kind":"reject_once"}]}})
}

fn requests(d: &Drive) -> Vec<RequestAsk> {
    d.io.iter()
        .filter_map(|i| match i {
            Io::Ev(Event::Request(a)) => Some(a.clone()),
            _ => None,
        })
        .collect()
}

fn preapproved(d: &Drive) -> Vec<(RequestAsk, usize)> {
    d.io.iter()
        .filter_map(|i| match i {
            Io::Ev(Event::Preapproved { ask, rule }) => Some((ask.clone(), *rule)),
            _ => None,
        })
        .collect()
}

fn answer(d: &mut Drive, seq: u32, option: Option<&str>) {
    d.s.answer(
        seq,
        RequestAnswer {
            option_id: option.map(str::to_owned),
            message: Some("ignored by ACP permission answers".into()),
        },
        d.now,
    );
    d.drain();
}

fn outcome_of(v: &Value) -> Value {
    v["result"]["outcome"].clone()
}

fn selected(id: &str) -> Value {
    json!({"outcome":"selected","optionId":id})
}

fn cancelled() -> Value {
    json!({"outcome":"cancelled"})
}

#[test]
fn a_request_is_held_until_its_answer() {
    let mut d = Drive::prompting(ask());
    d.agent_json(bash(json!(0), "cargo test"));
    assert!(d.take_sent().is_empty(), "nothing is answered while held");
    let r = requests(&d);
    assert_eq!(r.len(), 1);
    let a = &r[0];
    assert_eq!(a.seq, 1);
    assert_eq!(a.tool_call_id, "toolu_mock_1");
    assert_eq!(a.title, "cargo test");
    assert_eq!(a.tool_kind.as_deref(), Some("execute"));
    assert_eq!(a.command.as_deref(), Some("cargo test"));
    let opts: Vec<(&str, OptionKind)> = a
        .options
        .iter()
        .map(|o| (o.option_id.as_str(), o.kind))
        .collect();
    assert_eq!(
        opts,
        [
            ("allow_always", OptionKind::AllowAlways),
            ("allow", OptionKind::AllowOnce),
            ("reject", OptionKind::RejectOnce)
        ]
    );
    // A second request while the first waits: seq 2; answered out of order.
    d.agent_json(bash(json!("p-1"), "rm -rf target"));
    assert_eq!(requests(&d)[1].seq, 2);
    answer(&mut d, 2, Some("reject"));
    let sent = d.take_sent();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0]["id"], "p-1");
    assert_eq!(outcome_of(&sent[0]), selected("reject"));
    answer(&mut d, 1, Some("allow"));
    let sent = d.take_sent();
    assert_eq!(
        (sent[0]["id"].clone(), outcome_of(&sent[0])),
        (json!(0), selected("allow"))
    );
    let p = d.s.progress(d.now).permissions;
    assert_eq!((p.asked, p.allowed, p.rejected, p.cancelled), (2, 1, 1, 0));
    // Answered once: a second answer, and one for a seq never held, write nothing.
    answer(&mut d, 1, Some("reject"));
    answer(&mut d, 99, Some("allow"));
    answer(&mut d, 0, None);
    assert!(d.take_sent().is_empty());
    assert!(d
        .logs()
        .iter()
        .any(|l| l.contains("answer to request 99 dropped")));
    d.prompt_result(json!({"stopReason":"end_turn"}));
    assert_eq!(d.status().name(), "completed");
    d.assert_logs_clean("CALL_TOOL");
}

#[test]
fn a_cancelled_answer_and_an_option_never_offered() {
    for (fallback, want) in [
        (PermissionFallback::Reject, selected("reject")),
        (PermissionFallback::Cancel, cancelled()),
    ] {
        let mut c = ask();
        c.approval.fallback = fallback;
        let mut d = Drive::prompting(c);
        d.agent_json(bash(json!(0), "a"));
        d.agent_json(bash(json!(1), "b"));
        answer(&mut d, 1, None);
        assert_eq!(outcome_of(&d.take_sent()[0]), cancelled());
        // The owner named an option the agent did not offer: never written; the fallback.
        answer(&mut d, 2, Some("allow_everything\u{1b}[2J"));
        let sent = d.take_sent();
        assert_eq!(sent[0]["id"], 1);
        assert_eq!(outcome_of(&sent[0]), want, "{fallback:?}");
        assert!(d
            .logs()
            .iter()
            .any(|l| l.contains("which the agent did not offer")));
        d.assert_logs_clean("CALL_TOOL");
        assert!(d.logs().iter().all(|l| !l.contains('\u{1b}')));
    }
}

#[test]
fn a_cancel_answers_every_held_request_cancelled_after_session_cancel() {
    let mut d = Drive::prompting(ask());
    d.agent_json(bash(json!(0), "a"));
    d.agent_json(bash(json!(1), "b"));
    assert!(d.cancel());
    let sent = d.take_sent();
    assert_eq!(
        sent[0]["method"], "session/cancel",
        "§1.7: the cancel first"
    );
    assert_eq!(sent.len(), 3);
    for (v, id) in sent[1..].iter().zip([0, 1]) {
        assert_eq!(v["id"], id);
        assert_eq!(outcome_of(v), cancelled());
    }
    // Nothing is held any more; a late answer writes nothing.
    answer(&mut d, 1, Some("allow"));
    assert!(d.take_sent().is_empty());
    // A request during the cancel is answered cancelled at once, never held.
    d.agent_json(bash(json!(2), "c"));
    assert_eq!(outcome_of(&d.take_sent()[0]), cancelled());
    assert_eq!(requests(&d).len(), 2);
    d.prompt_result(json!({"stopReason":"cancelled"}));
    assert_eq!(d.status().name(), "cancelled");
    assert_eq!(d.outcome().progress.permissions.cancelled, 3);
}

#[test]
fn the_deadline_and_the_turns_end_close_what_is_held() {
    let mut c = ask();
    c.task_timeout_ms = 1000;
    let mut d = Drive::prompting(c);
    d.agent_json(bash(json!(0), "a"));
    d.at(1000);
    let sent = d.take_sent();
    assert_eq!(sent[0]["method"], "session/cancel");
    assert_eq!(outcome_of(&sent[1]), cancelled());

    // The agent ends its turn with a request still held: it is answered before stdin closes.
    let mut d = Drive::prompting(ask());
    d.agent_json(bash(json!(7), "a"));
    d.prompt_result(json!({"stopReason":"end_turn"}));
    let sent = d.take_sent();
    assert_eq!(sent.len(), 1);
    assert_eq!(
        (sent[0]["id"].clone(), outcome_of(&sent[0])),
        (json!(7), cancelled())
    );
    assert_eq!(d.status().name(), "completed");
    answer(&mut d, 1, Some("allow"));
    assert!(d.take_sent().is_empty(), "nothing after the outcome");

    // The agent dies while a request is held: the session ends with nothing left held.
    let mut d = Drive::prompting(ask());
    d.agent_json(bash(json!(7), "a"));
    d.exit(1);
    d.eof();
    assert_eq!(d.status().name(), "failed");
    assert!(d
        .logs()
        .iter()
        .any(|l| l.contains("request 1: answered cancelled (the turn ended)")));
}

#[test]
fn past_the_cap_a_request_gets_the_fallback_at_once() {
    for (fallback, want) in [
        (PermissionFallback::Reject, selected("reject")),
        (PermissionFallback::Cancel, cancelled()),
    ] {
        let mut c = ask();
        c.approval.max_open_requests = 2;
        c.approval.fallback = fallback;
        let mut d = Drive::prompting(c);
        d.agent_json(bash(json!(0), "a"));
        d.agent_json(bash(json!(1), "b"));
        assert!(d.take_sent().is_empty());
        d.agent_json(bash(json!(2), "c"));
        let sent = d.take_sent();
        assert_eq!(
            (sent[0]["id"].clone(), outcome_of(&sent[0])),
            (json!(2), want.clone())
        );
        assert_eq!(requests(&d).len(), 2);
        assert!(d
            .logs()
            .iter()
            .any(|l| l.contains("max_open_requests_per_task")));
        // Room again once one is answered; the next seq is 3 (none was used by the refusal).
        answer(&mut d, 1, Some("allow"));
        d.agent_json(bash(json!(3), "d"));
        assert_eq!(requests(&d)[2].seq, 3);
    }
}

#[test]
fn requests_no_person_could_answer_get_the_fallback() {
    let mut d = Drive::prompting(ask());
    // Options with no usable id (an id with an escape, an unknown kind): nothing to offer.
    d.agent_json(json!({"jsonrpc":"2.0","id":0,"method":"session/request_permission","params":{"sessionId":SID,"toolCall":{"toolCallId":"t","kind":"execute"},"options":[{"kind":"reject_once","optionId":"no\u{1b}[2J"},{"kind":"allow_maybe","optionId":"x"}]}}));
    let sent = d.take_sent();
    assert_eq!(
        outcome_of(&sent[0]),
        selected("no\u{1b}[2J"),
        "the reject option, as the agent named it"
    );
    d.agent_json(json!({"jsonrpc":"2.0","id":1,"method":"session/request_permission","params":{"sessionId":SID,"options":[]}}));
    assert_eq!(outcome_of(&d.take_sent()[0]), cancelled());
    assert!(requests(&d).is_empty());
    // A reused id while its request is held: the newcomer gets the fallback.
    d.agent_json(bash(json!(5), "a"));
    d.agent_json(bash(json!(5), "b"));
    let sent = d.take_sent();
    assert_eq!(sent.len(), 1);
    assert_eq!(outcome_of(&sent[0]), selected("reject"));
    assert_eq!(requests(&d).len(), 1);
    answer(&mut d, 1, Some("allow"));
    assert_eq!(outcome_of(&d.take_sent()[0]), selected("allow"));
    // Another session's request: cancelled, never held.
    d.agent_json(json!({"jsonrpc":"2.0","id":9,"method":"session/request_permission","params":{"sessionId":"other","toolCall":{},"options":options()}}));
    assert_eq!(outcome_of(&d.take_sent()[0]), cancelled());
    assert_eq!(requests(&d).len(), 1);
}

/// ../notes capture37-facts §2.1, §3.1, §1.1: the hub's own tool in each agent's form.
fn own_tool_requests() -> Vec<(&'static str, Vec<Value>, &'static str)> {
    let meta = json!({"jsonrpc":"2.0","id":0,"method":"session/request_permission","params":{"toolCall":{"toolCallId":"toolu_mock_3","name":format!("mcp__{HUB}__send"),"status":"pending","rawInput":{"to":"boss"},"title":format!("mcp__{HUB}__send"),"kind":"other","content":[],"_meta":{"claudeCode":{"toolName":format!("mcp__{HUB}__send"),"mcpServer":{"name":HUB,"source":"dynamic"}}}},"options":[{"optionId":"allow-once","name":"Yes","kind":"allow_once"},{"optionId":"allow-with-updates","name":"Yes, and don't ask again","kind":"allow_always"},{"optionId":"reject","name":"No","kind":"reject_once"}],"sessionId":SID}});
    let gemini = json!({"jsonrpc":"2.0","id":0,"method":"session/request_permission","params":{"sessionId":SID,"options":[{"optionId":"proceed_always_server","name":"Allow all server tools for this session","kind":"allow_always"},{"optionId":"proceed_always_tool","name":"Allow tool for this session","kind":"allow_always"},{"optionId":"proceed_once","name":"Allow","kind":"allow_once"},{"optionId":"cancel","name":"Reject","kind":"reject_once"}],"toolCall":{"toolCallId":format!("mcp_{HUB}_task_answer__mcp_{HUB}_task_answer_1796677444299_0"),"status":"pending","title":format!("task_answer ({HUB} MCP Server)"),"content":[],"locations":[],"kind":"other"}}});
    let update = json!({"jsonrpc":"2.0","method":"session/update","params":{"sessionId":SID,"update":{"_meta":{"claudeCode":{"toolName":format!("mcp__{HUB}__whoami")}},"toolCallId":"toolu_mock_1","sessionUpdate":"tool_call","rawInput":{},"status":"pending","title":format!("mcp__{HUB}__whoami"),"kind":"other","content":[]}}});
    let pinned = json!({"jsonrpc":"2.0","id":0,"method":"session/request_permission","params":{"options":options(),"sessionId":SID,"toolCall":{"toolCallId":"toolu_mock_1","rawInput":{},"title":format!("mcp__{HUB}__whoami"),"kind":"other","content":[]}}});
    vec![
        ("claude 0.101", vec![meta], "allow-once"),
        ("gemini 0.61", vec![gemini], "proceed_once"),
        ("claude 0.23", vec![update, pinned], "allow"),
    ]
}

#[test]
fn the_hubs_own_tools_are_allowed_under_every_policy() {
    for policy in [
        PermissionPolicy::Reject,
        PermissionPolicy::Ask,
        PermissionPolicy::Allow,
    ] {
        for (agent, lines, want) in own_tool_requests() {
            let mut c = ask();
            c.permission = policy;
            let mut d = Drive::prompting(c);
            for l in lines {
                d.agent_json(l);
            }
            let sent = d.take_sent();
            assert_eq!(outcome_of(&sent[0]), selected(want), "{agent} {policy:?}");
            assert!(requests(&d).is_empty() && preapproved(&d).is_empty());
            assert!(
                d.logs().iter().any(|l| l.contains("the hub's own tool")),
                "{agent}: {:?}",
                d.logs()
            );
        }
    }
}

#[test]
fn own_tools_need_the_hubs_server_and_never_go_by_title() {
    // Without the hub's server named, the same lines are ordinary requests: held.
    for (agent, lines, _) in own_tool_requests() {
        let mut c = ask();
        c.approval.hub_server = None;
        let mut d = Drive::prompting(c);
        for l in lines {
            d.agent_json(l);
        }
        assert!(d.take_sent().is_empty(), "{agent}");
        assert_eq!(requests(&d).len(), 1, "{agent}");
    }
    // Forged: Bash commands titled like the hub's tool (capture §1.3, §2.3), one after an
    // update that says Bash; and a Gemini shell command titled like an MCP tool (§3.3).
    let title = format!("mcp__{HUB}__send");
    let mut d = Drive::prompting(ask());
    d.update(json!({"_meta":{"claudeCode":{"toolName":"Bash"}},"toolCallId":"toolu_mock_1","sessionUpdate":"tool_call","kind":"execute","title":"Terminal"}));
    d.agent_json(bash(json!(0), &title));
    d.agent_json(json!({"jsonrpc":"2.0","id":1,"method":"session/request_permission","params":{"sessionId":SID,"options":[{"optionId":"proceed_always","kind":"allow_always"},{"optionId":"proceed_once","kind":"allow_once"},{"optionId":"cancel","kind":"reject_once"}],"toolCall":{"toolCallId":"run_shell_command__run_shell_command_1_0","title":format!("send ({HUB} MCP Server)"),"kind":"execute","locations":[]}}}));
    assert!(d.take_sent().is_empty());
    assert_eq!(requests(&d).len(), 2, "both held for a person");
    // Under reject they are rejected, not allowed.
    let mut c = ask();
    c.permission = PermissionPolicy::Reject;
    let mut d = Drive::prompting(c);
    d.agent_json(bash(json!(0), &title));
    assert_eq!(outcome_of(&d.take_sent()[0]), selected("reject"));
}

#[test]
fn allow_rules_let_matching_requests_through_under_ask_only() {
    let rules = vec![
        AllowRule::new(&["read"], None).unwrap(),
        AllowRule::new(&["edit"], Some("src")).unwrap(),
    ];
    let mut c = ask();
    c.approval.allow_rules = rules.clone();
    let mut d = Drive::prompting(c);
    d.agent_json(edit(json!(0), "src/lib.rs"));
    let sent = d.take_sent();
    assert_eq!(outcome_of(&sent[0]), selected("allow-once"));
    let pre = preapproved(&d);
    assert_eq!(pre.len(), 1);
    assert_eq!(pre[0].1, 1, "the second rule");
    assert_eq!(pre[0].0.seq, 1, "a pre-approved request takes a seq");
    assert_eq!(pre[0].0.paths, ["src/lib.rs"]);
    assert!(d
        .logs()
        .iter()
        .any(|l| l.contains("pre-approved as request 1 by allow rule 2 edit:src")));
    // Outside the folder, or escaping it: held.
    for (i, path) in [
        "Cargo.toml",
        "src/../Cargo.toml",
        "/etc/passwd",
        "/work/proj/src/../../x",
    ]
    .iter()
    .enumerate()
    {
        d.agent_json(edit(json!(10 + i), path));
    }
    assert!(d.take_sent().is_empty());
    let held: Vec<u32> = requests(&d).iter().map(|a| a.seq).collect();
    assert_eq!(held, [2, 3, 4, 5]);
    // Absolute, inside: through.
    d.agent_json(edit(json!(20), "/work/proj/src/x.rs"));
    assert_eq!(outcome_of(&d.take_sent()[0]), selected("allow-once"));
    // A command is never pre-approved by a rule without execute.
    let read_cmd = json!({"jsonrpc":"2.0","id":30,"method":"session/request_permission","params":{"sessionId":SID,"toolCall":{"toolCallId":"r","kind":"read","rawInput":{"command":"cat /etc/shadow"}},"options":options()}});
    d.agent_json(read_cmd.clone());
    assert!(d.take_sent().is_empty());

    // Under reject the rules change nothing (design §2: they cannot widen it).
    let mut c = ask();
    c.permission = PermissionPolicy::Reject;
    c.approval.allow_rules = rules.clone();
    let mut d = Drive::prompting(c);
    d.agent_json(edit(json!(0), "src/lib.rs"));
    assert_eq!(outcome_of(&d.take_sent()[0]), selected("reject"));
    assert!(preapproved(&d).is_empty());
    // Under allow everything is allowed anyway, with no pre-approval reported.
    let mut c = ask();
    c.permission = PermissionPolicy::Allow;
    c.approval.allow_rules = rules;
    let mut d = Drive::prompting(c);
    d.agent_json(edit(json!(0), "Cargo.toml"));
    assert_eq!(outcome_of(&d.take_sent()[0]), selected("allow-once"));
    assert!(preapproved(&d).is_empty());
}

#[test]
fn a_rule_cannot_allow_what_the_agent_offers_no_allow_for() {
    let mut c = ask();
    c.approval.allow_rules = vec![AllowRule::new(&["execute"], None).unwrap()];
    let mut d = Drive::prompting(c);
    d.agent_json(json!({"jsonrpc":"2.0","id":0,"method":"session/request_permission","params":{"sessionId":SID,"toolCall":{"toolCallId":"t","kind":"execute"},"options":[{"kind":"reject_once","optionId":"r"}]}}));
    assert!(d.take_sent().is_empty(), "held for a person instead");
    assert_eq!(requests(&d).len(), 1);
    assert!(preapproved(&d).is_empty());
}

#[test]
fn under_ask_an_agent_that_will_not_ask_is_refused_as_under_reject() {
    let mut d = Drive::new(ask());
    d.agent(r#"{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":1}}"#);
    d.agent_json(json!({"jsonrpc":"2.0","id":1,"result":{"sessionId":SID,"modes":{"currentModeId":"auto","availableModes":[{"id":"auto","name":"Auto"}]}}}));
    match d.status() {
        Status::Refused(r @ Refusal::Unasked { .. }) => {
            assert!(r.to_string().contains("permission = \"ask\""), "{r}")
        }
        other => panic!("{other:?}"),
    }
}

/// A hostile agent floods requests: only `max_open_requests` are ever held, every other
/// one is answered at once, and nothing panics.
#[test]
fn a_flood_of_requests_holds_no_more_than_the_cap() {
    let mut c = ask();
    c.approval.max_open_requests = 4;
    let mut d = Drive::prompting(c);
    for i in 0..500 {
        d.agent_json(bash(json!(i), &format!("cmd {i} {}", "x".repeat(i * 10))));
    }
    assert_eq!(requests(&d).len(), 4);
    assert_eq!(d.take_sent().len(), 496);
    for r in requests(&d) {
        assert!(r.title.len() <= crate::acp::request::MAX_TITLE_BYTES);
    }
    d.assert_logs_clean("CALL_TOOL");
}
