//! Requests held for a person through the runner and the real `fake-acp-agent` (issue 37
//! design §2-§4; docs/acp.md "Permission requests"): under `ask` the request comes up as
//! `TaskEvent::Request`, the owner's answer goes down through `TaskHandle::answer` to the
//! agent, a cancel or the cap closes what is held, the delegator's allow rules let a matching
//! request through (never under `reject`), and the hub's own tools are allowed under every
//! policy while a tool titled like them is not. Every wait is on the runner's event channel,
//! with the deadline of `acp_runner`.

use crate::acp_runner::{cfg, spec, start, with_env, Run, Task};
use crate::common;
use agent_hub_proto::acp::permission::{hub_server_name, AllowRule};
use agent_hub_proto::acp::{McpServer, PermissionPolicy, SessionConfig, Status, StopReason};
use agent_hub_proto::tasks::{RequestAnswer, RequestAsk};
use agent_hub_server::runner::TaskEvent;

fn ask_cfg() -> SessionConfig {
    let mut c = cfg();
    c.permission = PermissionPolicy::Ask;
    c
}

/// Waits for the next held request.
fn request(t: &mut Task) -> RequestAsk {
    match t.until("a held request", |e| matches!(e, TaskEvent::Request(_))) {
        TaskEvent::Request(a) => a,
        _ => unreachable!(),
    }
}

fn pick(option: &str) -> RequestAnswer {
    RequestAnswer {
        option_id: Some(option.to_owned()),
        message: None,
    }
}

fn completed(r: &Run) {
    assert_eq!(
        r.outcome.status,
        Status::Completed {
            stop_reason: StopReason::EndTurn
        },
        "{}",
        r.outcome.text
    );
}

/// Each captured agent's option set: the owner's allow runs the command, its reject does
/// not, and the agent hears exactly the option the owner chose.
#[test]
fn the_owners_answer_reaches_the_agent() {
    for (style, allow, reject) in [
        ("claude", "allow", "reject"),
        ("claude-current", "allow-once", "reject"),
        ("gemini", "proceed_once", "cancel"),
    ] {
        for (answer, ran) in [(allow, true), (reject, false)] {
            let dir = common::TempDir::new("ask-answer");
            let mark = dir.0.join("proof");
            let mut t = start(with_env(
                spec(&["ask", style], ask_cfg()),
                "FAKE_ACP_TOOL_MARK",
                mark.to_str().unwrap(),
            ));
            let a = request(&mut t);
            assert_eq!(a.seq, 1);
            assert_eq!(a.title, "echo fake > proof.txt");
            assert_eq!(a.tool_kind.as_deref(), Some("execute"));
            assert_eq!(a.options.len(), 3, "{style}");
            assert!(!mark.exists(), "nothing runs before the answer");
            assert!(t.handle.answer(a.seq, pick(answer)));
            let r = t.finish();
            completed(&r);
            let how = if ran { "ran" } else { "not run" };
            assert_eq!(r.outcome.text, format!("asked: {answer}; {how}"), "{style}");
            assert_eq!(mark.exists(), ran, "{style} {answer}");
            assert!(r.logged("held as request 1"), "{:?}", r.logs);
            assert!(r.logged("request 1: "), "{:?}", r.logs);
        }
    }
}

#[test]
fn two_held_requests_are_answered_in_any_order() {
    let mut t = start(spec(&["ask_twice"], ask_cfg()));
    let a = request(&mut t);
    let b = request(&mut t);
    assert_eq!((a.seq, b.seq), (1, 2));
    assert_eq!((a.title.as_str(), b.title.as_str()), ("make a", "make b"));
    assert!(t.handle.answer(2, pick("reject")));
    // A seq never held changes nothing (logged), and neither does a second answer.
    assert!(t.handle.answer(9, pick("allow")));
    assert!(t.handle.answer(2, pick("allow")));
    assert!(t.handle.answer(1, pick("allow_always")));
    let r = t.finish();
    completed(&r);
    assert_eq!(r.outcome.text, "first: reject, second: allow_always");
    assert!(r.logged("answer to request 9 dropped"), "{:?}", r.logs);
    assert!(r.logged("answer to request 2 dropped"), "{:?}", r.logs);
    let p = r.outcome.progress.permissions;
    assert_eq!((p.asked, p.allowed, p.rejected), (2, 1, 1));
}

/// A cancel answers what is held `cancelled` (ACP §1.7); a late answer is refused by the
/// handle once the task has ended.
#[test]
fn a_cancel_closes_what_is_held() {
    let mut t = start(spec(&["ask"], ask_cfg()));
    let a = request(&mut t);
    t.handle.cancel();
    let TaskEvent::Outcome(o) = t.until("the outcome", |e| matches!(e, TaskEvent::Outcome(_)))
    else {
        unreachable!()
    };
    assert_eq!(o.status.name(), "cancelled", "{}", o.status);
    assert_eq!(o.text, "asked: cancelled; not run");
    t.until("Ended", |e| matches!(e, TaskEvent::Ended(_)));
    assert!(
        !t.handle.answer(a.seq, pick("allow")),
        "an ended task takes no answer"
    );
}

/// More than `max_open_requests_per_task` held: the next gets the fallback at once.
#[test]
fn past_the_cap_the_fallback_answers_at_once() {
    let mut c = ask_cfg();
    c.approval.max_open_requests = 1;
    let mut t = start(spec(&["ask_twice"], c));
    let a = request(&mut t);
    assert_eq!(a.title, "make a");
    // The answer waits for the second request's refusal, so the agent hears them in this
    // order (answered first, the session could read the second request after it).
    t.until(
        "the refusal past the cap",
        |e| matches!(e, TaskEvent::Log(l) if l.message.contains("max_open_requests_per_task")),
    );
    assert!(t.handle.answer(a.seq, pick("allow")));
    let r = t.finish();
    assert_eq!(r.outcome.text, "first: reject, second: allow");
    assert!(
        !r.logged("held as request 2"),
        "one held at a time: {:?}",
        r.logs
    );
}

/// The delegator's rule lets an edit under `src` through under `ask`, and nothing under
/// `reject` (design §2: rules cannot widen it); an edit outside is held.
#[test]
fn allow_rules_pre_approve_under_ask_only() {
    let dir = common::TempDir::new("ask-rules");
    let cwd = std::fs::canonicalize(&dir.0).unwrap();
    let rules = vec![AllowRule::new(&["edit"], Some("src")).unwrap()];
    let inside = cwd.join("src/lib.rs");
    let inside = inside.to_str().unwrap();
    let mut c = SessionConfig::new(&cwd, "Edit it.", 30_000);
    c.permission = PermissionPolicy::Ask;
    c.approval.allow_rules = rules.clone();
    let t = start(spec(&["ask_edit", inside], c.clone()));
    let r = t.finish();
    assert_eq!(r.outcome.text, "asked: allow-once");
    assert!(
        r.logged("pre-approved as request 1 by allow rule 1 edit:src"),
        "{:?}",
        r.logs
    );

    let mut t = start(spec(&["ask_edit", "src/../../etc/passwd"], c.clone()));
    let a = request(&mut t);
    assert_eq!(a.paths, ["src/../../etc/passwd"]);
    assert!(t.handle.answer(a.seq, pick("reject")));
    assert_eq!(t.finish().outcome.text, "asked: reject");

    c.permission = PermissionPolicy::Reject;
    let t = start(spec(&["ask_edit", inside], c));
    let r = t.finish();
    assert_eq!(r.outcome.text, "asked: reject");
    assert!(!r.logged("pre-approved"), "{:?}", r.logs);
}

/// A session with the hub's server attached under its task-unique name.
fn with_hub(policy: PermissionPolicy) -> (SessionConfig, String) {
    let name = hub_server_name("task-00000000000000000000000000000abc");
    let mut c = cfg();
    c.permission = policy;
    c.mcp_servers.push(McpServer {
        name: name.clone(),
        command: env!("CARGO_BIN_EXE_agent-hub").into(),
        args: vec!["mcp".into()],
        env: Vec::new(),
    });
    c.approval.hub_server = Some(name.clone());
    (c, name)
}

/// Design §3: the hub's own tool is allowed under every policy, in each agent's form, and
/// nobody is asked.
#[test]
fn the_hubs_own_tools_are_allowed_under_every_policy() {
    for policy in [
        PermissionPolicy::Reject,
        PermissionPolicy::Ask,
        PermissionPolicy::Allow,
    ] {
        for (form, allow) in [
            ("claude", "allow-once"),
            ("claude-pinned", "allow"),
            ("gemini", "proceed_once"),
        ] {
            let (c, name) = with_hub(policy);
            let t = start(spec(&["ask_own_tool", form], c));
            let r = t.finish();
            completed(&r);
            assert_eq!(
                r.outcome.text,
                format!("server {name}: asked: {allow}"),
                "{form} {policy:?}"
            );
            assert!(r.logged("the hub's own tool whoami"), "{:?}", r.logs);
        }
    }
}

/// A shell command titled like the hub's tool is no hub tool: held under `ask` (answered
/// reject here), rejected under `reject`.
#[test]
fn a_title_like_the_hubs_tool_is_not_allowed() {
    let (c, _) = with_hub(PermissionPolicy::Ask);
    let mut t = start(spec(&["ask_forged"], c));
    let a = request(&mut t);
    assert_eq!(a.tool_kind.as_deref(), Some("execute"));
    assert!(t.handle.answer(a.seq, pick("reject")));
    let r = t.finish();
    assert_eq!(r.outcome.text, "forged: reject");

    let (c, _) = with_hub(PermissionPolicy::Reject);
    let mut t = start(spec(&["ask_forged"], c));
    t.until("the outcome", |e| matches!(e, TaskEvent::Outcome(_)));
    assert!(
        !t.seen.iter().any(|e| matches!(e, TaskEvent::Request(_))),
        "nothing held under reject"
    );
    let r = t.finish();
    assert_eq!(r.outcome.text, "forged: reject");
    assert!(!r.logged("the hub's own tool"), "{:?}", r.logs);
}

/// The session recognises a hub tool only by a name in `HUB_TOOL_NAMES` (proto cannot name
/// the client crate): every tool the client's MCP server offers must be there, or a new tool
/// would be asked about as a stranger's.
#[test]
fn every_tool_the_hubs_mcp_server_offers_is_known_as_the_hubs() {
    use agent_hub_proto::acp::permission::HUB_TOOL_NAMES;
    for t in agent_hub_cli::mcp::tools::TOOL_NAMES {
        assert!(
            HUB_TOOL_NAMES.contains(&t),
            "{t} is missing from HUB_TOOL_NAMES"
        );
    }
}
