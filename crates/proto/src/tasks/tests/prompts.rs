//! The book with a headless task's permission prompts (issue 37 design §6): who may ask, the
//! policy and the rules deciding at once, a prompt held as a request and its reply from the
//! delegator's answer, the fallback (both) and the task's cancel and end denying with why,
//! an asker that goes away, and both caps. On the virtual clock of `tasks::tests`.

use super::*;
use crate::acp::PermissionFallback;
use crate::tasks::prompts::{PromptAnswer, ALLOW_OPTION, DENY_OPTION};
use crate::tasks::settings::ApprovalSettings;
use crate::wire::approval::{
    AllowRule, Permission, TaskAnswerRequest, TaskPermissionReply, TaskPermissionRequest,
};
use serde_json::json;

fn with(approvals: ApprovalSettings) -> BookConfig {
    BookConfig {
        approvals,
        ..config()
    }
}

fn kinds() -> std::collections::BTreeMap<String, String> {
    [("Bash", "execute"), ("Edit", "edit")]
        .into_iter()
        .map(|(a, b)| (a.to_owned(), b.to_owned()))
        .collect()
}

/// A running task of `mneme`'s, started with (`tool`) or without the permission tool.
fn running_with(r: &mut Rig, req: DelegateRequest, tool: bool) -> TaskId {
    let now = r.clock.now();
    let id = r.book.submit(req, "mneme", now, &mut r.ids).unwrap();
    r.start_ready();
    if tool {
        r.event(
            &id,
            TaskEvent::PermissionTool {
                tool_kinds: kinds(),
            },
        );
    }
    r.actions();
    id
}

fn running(r: &mut Rig) -> TaskId {
    running_with(r, delegation(None, None), true)
}

fn delegation(permission: Option<Permission>, allow: Option<Vec<AllowRule>>) -> DelegateRequest {
    DelegateRequest {
        agent: "codex".into(),
        cwd: "/srv/root/app".into(),
        prompt: "p".into(),
        permission,
        allow,
        ..DelegateRequest::default()
    }
}

fn bash(id: &str, command: &str) -> TaskPermissionRequest {
    TaskPermissionRequest::new("Bash", id, &json!({ "command": command }))
}

fn ask(r: &mut Rig, asker: &str, req: &TaskPermissionRequest) -> Result<u32, String> {
    let now = r.clock.now();
    r.book
        .ask_permission(asker, req, now, &mut r.ids)
        .map_err(|e| e.to_string())
}

fn replies(r: &mut Rig) -> Vec<PromptAnswer> {
    std::iter::from_fn(|| r.book.poll_prompt_answer()).collect()
}

fn audits(actions: &[TaskAction]) -> Vec<&'static str> {
    actions
        .iter()
        .filter_map(|a| match a {
            TaskAction::Commit(c) => Some(c.audit.iter().map(TaskAudit::event)),
            _ => None,
        })
        .flatten()
        .collect()
}

fn answer(r: &mut Rig, task: &TaskId, option: &str, message: Option<&str>) {
    let req = TaskAnswerRequest {
        task: task.as_str().into(),
        request: None,
        option: option.into(),
        message: message.map(str::to_owned),
    };
    let taken = r.book.answer(&req, "mneme").expect("answer taken");
    r.book
        .answer_settled(&taken.request, true, Some(taken.decision));
}

/// Only the task's own identity may ask, only while it runs, and only when its agent asks
/// through the tool: a roster agent, an unknown or queued task, an ACP task (no
/// `PermissionTool`) are refused with the exact words, and nothing is held or mailed.
#[test]
fn only_a_running_task_that_asks_through_the_tool_may_ask() {
    let mut r = Rig::new(BookConfig {
        max_concurrent: 1,
        ..config()
    });
    let acp = running_with(&mut r, delegation(None, None), false);
    let queued = r.submit("waits");
    r.actions();
    let req = bash("toolu_1", "make");
    assert_eq!(
        ask(&mut r, "mneme", &req).unwrap_err(),
        "invalid task_permission: only a delegated task's own agent may ask (as its task identity)"
    );
    assert_eq!(
        ask(&mut r, acp.as_str(), &req).unwrap_err(),
        format!("invalid task_permission: {acp} does not ask through the permission tool (only a headless task whose manifest sets run.headless_mcp does)")
    );
    assert_eq!(
        ask(&mut r, queued.as_str(), &req).unwrap_err(),
        format!("invalid task_permission: {queued} is not running")
    );
    let never = "task-00000000000000000000000000000000";
    assert_eq!(
        ask(&mut r, never, &req).unwrap_err(),
        format!("invalid task_permission: {never} is not running")
    );
    assert!(audits(&r.actions()).is_empty());
    assert!(replies(&mut r).is_empty());
    // An ACP task's later `PermissionTool` (never sent for one, but a stale event) after its
    // end changes nothing: the event is taken only while it runs.
    r.event(&acp, completed());
    r.event(
        &acp,
        TaskEvent::PermissionTool {
            tool_kinds: kinds(),
        },
    );
    assert_eq!(
        ask(&mut r, acp.as_str(), &bash("toolu_2", "make")).unwrap_err(),
        format!("invalid task_permission: {acp} is not running")
    );
}

/// Under `ask` a prompt is held as a request like an ACP one (envelope to the delegator,
/// `request_opened`, its options `allow` and `deny`, the kind from the manifest's map, the
/// command from the input), and the delegator's answer is its reply; a deny carries the
/// answerer's words, or says who denied it.
#[test]
fn a_held_prompt_is_answered_by_the_delegator() {
    let mut r = Rig::new(config());
    let id = running(&mut r);
    let seq = ask(&mut r, id.as_str(), &bash("toolu_1", "cargo test")).unwrap();
    assert_eq!(seq, 1);
    let a = r.actions();
    assert_eq!(audits(&a), ["request_opened"]);
    let env = envelopes(&a, "task_request");
    assert_eq!(env.len(), 1);
    assert_eq!(env[0].to, "mneme");
    let b = body(env[0]);
    assert_eq!(b["type"], "permission");
    assert_eq!(b["toolCall"]["id"], "toolu_1");
    assert_eq!(b["toolCall"]["title"], "Bash");
    assert_eq!(b["toolCall"]["kind"], "execute");
    assert_eq!(b["toolCall"]["command"], "cargo test");
    assert_eq!(
        b["options"],
        json!([{"optionId": ALLOW_OPTION, "name": "Allow", "kind": "allow_once"},
               {"optionId": DENY_OPTION, "name": "Deny", "kind": "reject_once"}])
    );
    assert!(replies(&mut r).is_empty(), "it waits for an answer");
    answer(&mut r, &id, "allow", None);
    assert_eq!(
        replies(&mut r),
        [PromptAnswer {
            task: id.clone(),
            seq: 1,
            reply: TaskPermissionReply::allow()
        }]
    );
    ask(&mut r, id.as_str(), &bash("toolu_2", "rm -rf target")).unwrap();
    answer(&mut r, &id, "deny", Some("use cargo clean"));
    ask(&mut r, id.as_str(), &bash("toolu_3", "git push")).unwrap();
    answer(&mut r, &id, "deny", None);
    let got: Vec<TaskPermissionReply> = replies(&mut r).into_iter().map(|a| a.reply).collect();
    assert_eq!(
        got,
        [
            TaskPermissionReply::deny("use cargo clean"),
            TaskPermissionReply::deny("denied by the task's delegator")
        ]
    );
}

/// A forged replay: the same tool-use id again, open or answered, is refused; the first is
/// untouched and is still the one answered.
#[test]
fn a_replayed_tool_use_id_is_refused() {
    let mut r = Rig::new(config());
    let id = running(&mut r);
    ask(&mut r, id.as_str(), &bash("toolu_1", "make")).unwrap();
    let refusal = "invalid task_permission: toolUseId toolu_1 was asked about already";
    assert_eq!(
        ask(&mut r, id.as_str(), &bash("toolu_1", "make install")).unwrap_err(),
        refusal
    );
    assert_eq!(audits(&r.actions()), ["request_opened"]);
    answer(&mut r, &id, "allow", None);
    assert_eq!(replies(&mut r).len(), 1);
    assert_eq!(
        ask(&mut r, id.as_str(), &bash("toolu_1", "make")).unwrap_err(),
        refusal
    );
}

/// The policy decides at once, without a request: `reject` denies saying so, `allow` allows;
/// under `ask` a matching allow rule allows, audited `request_preapproved` and mailed to
/// nobody, while a prompt outside the rule is held.
#[test]
fn the_policy_and_the_rules_decide_at_once() {
    let mut r = Rig::new(config());
    let id = running_with(&mut r, delegation(Some(Permission::Reject), None), true);
    ask(&mut r, id.as_str(), &bash("toolu_1", "make")).unwrap();
    assert_eq!(
        replies(&mut r)[0].reply,
        TaskPermissionReply::deny("denied: this task runs under permission reject")
    );
    assert!(audits(&r.actions()).is_empty());

    let mut allowing = config();
    allowing.permission = PermissionPolicy::Allow;
    let mut r = Rig::new(allowing);
    let id = running(&mut r);
    ask(&mut r, id.as_str(), &bash("toolu_1", "make")).unwrap();
    assert_eq!(replies(&mut r)[0].reply, TaskPermissionReply::allow());

    let mut r = Rig::new(config());
    let rules = vec![AllowRule {
        kinds: vec!["edit".into()],
        under: Some("src".into()),
    }];
    let id = running_with(&mut r, delegation(None, Some(rules)), true);
    let edit = |file: &str, use_id: &str| {
        TaskPermissionRequest::new(
            "Edit",
            use_id,
            &json!({"file_path": file, "old_string": "a"}),
        )
    };
    ask(
        &mut r,
        id.as_str(),
        &edit("/srv/root/app/src/lib.rs", "toolu_1"),
    )
    .unwrap();
    let a = r.actions();
    assert_eq!(audits(&a), ["request_preapproved"]);
    assert!(envelopes(&a, "task_request").is_empty(), "nobody is asked");
    assert_eq!(replies(&mut r)[0].reply, TaskPermissionReply::allow());
    // Outside the folder, or another kind: held.
    ask(
        &mut r,
        id.as_str(),
        &edit("/srv/root/app/Cargo.toml", "toolu_2"),
    )
    .unwrap();
    ask(&mut r, id.as_str(), &bash("toolu_3", "make")).unwrap();
    assert_eq!(audits(&r.actions()), ["request_opened", "request_opened"]);
    assert!(replies(&mut r).is_empty());
}

/// Expiry under `reject`: the prompt is denied with the fallback's reason and the task runs
/// on; under `cancel`: the task is cancelled and the prompt denied with the cancel's reason.
#[test]
fn an_expired_prompt_is_denied_with_the_fallbacks_reason() {
    let mut r = Rig::new(config());
    let id = running(&mut r);
    ask(&mut r, id.as_str(), &bash("toolu_1", "make")).unwrap();
    r.actions();
    r.clock.advance_secs(600);
    let now = r.clock.now();
    r.book.handle_timeout(now, &mut r.ids, &|_| false);
    assert_eq!(audits(&r.actions()), ["request_expired"]);
    assert_eq!(
        replies(&mut r)[0].reply,
        TaskPermissionReply::deny("denied: no answer within 600 s")
    );
    assert_eq!(r.state(&id), "running");

    let mut r = Rig::new(with(ApprovalSettings {
        permission_fallback: PermissionFallback::Cancel,
        permission_timeout_secs: 60,
        ..ApprovalSettings::default()
    }));
    let id = running(&mut r);
    ask(&mut r, id.as_str(), &bash("toolu_1", "make")).unwrap();
    let opened = r.actions();
    let request = body(envelopes(&opened, "task_request")[0])["request"]
        .as_str()
        .unwrap()
        .to_owned();
    r.clock.advance_secs(60);
    let now = r.clock.now();
    r.book.handle_timeout(now, &mut r.ids, &|_| false);
    assert_eq!(cancels(&r.actions()), std::slice::from_ref(&id));
    assert_eq!(
        replies(&mut r)[0].reply,
        TaskPermissionReply::deny(format!(
            "denied: no answer to request {request} within 60 s"
        ))
    );
}

/// The task's cancel denies what waits, saying so, and closes the requests `cancelled`; a
/// task that ends denies what waits too; an answer after either is refused.
#[test]
fn a_cancel_or_an_end_denies_what_waits() {
    let mut r = Rig::new(config());
    let id = running(&mut r);
    ask(&mut r, id.as_str(), &bash("toolu_1", "a")).unwrap();
    ask(&mut r, id.as_str(), &bash("toolu_2", "b")).unwrap();
    r.actions();
    assert_eq!(r.cancel(&id, "mneme"), "cancelling");
    let a = r.actions();
    assert_eq!(
        audits(&a),
        ["task_cancel_asked", "request_closed", "request_closed"]
    );
    let got: Vec<(u32, TaskPermissionReply)> = replies(&mut r)
        .into_iter()
        .map(|a| (a.seq, a.reply))
        .collect();
    let no = TaskPermissionReply::deny("denied: the task was cancelled");
    assert_eq!(got, [(1, no.clone()), (2, no)]);
    assert_eq!(
        ask(&mut r, id.as_str(), &bash("toolu_3", "c")).unwrap_err(),
        format!("invalid task_permission: {id} is not running")
    );

    let mut r = Rig::new(config());
    let id = running(&mut r);
    ask(&mut r, id.as_str(), &bash("toolu_1", "a")).unwrap();
    r.actions();
    r.event(&id, completed());
    assert_eq!(
        replies(&mut r)[0].reply,
        TaskPermissionReply::deny("denied: the task ended")
    );
    let req = TaskAnswerRequest {
        task: id.as_str().into(),
        request: None,
        option: "allow".into(),
        message: None,
    };
    assert!(r.book.answer(&req, "mneme").is_err());
}

/// The asker's connection closes: its request closes `cancelled` (a commit of its own), and
/// the delegator's answer is then refused as for a cancelled request; nothing is replied.
#[test]
fn an_asker_that_goes_away_closes_its_request() {
    let mut r = Rig::new(config());
    let id = running(&mut r);
    let seq = ask(&mut r, id.as_str(), &bash("toolu_1", "make")).unwrap();
    let opened = r.actions();
    let request = body(envelopes(&opened, "task_request")[0])["request"]
        .as_str()
        .unwrap()
        .to_owned();
    r.book.prompt_gone(id.as_str(), seq);
    let a = r.actions();
    assert_eq!(audits(&a), ["request_closed"]);
    // A second report of the same close changes nothing.
    r.book.prompt_gone(id.as_str(), seq);
    assert!(r.actions().is_empty());
    let req = TaskAnswerRequest {
        task: id.as_str().into(),
        request: Some(request.clone()),
        option: "allow".into(),
        message: None,
    };
    assert_eq!(
        r.book.answer(&req, "mneme").unwrap_err().to_string(),
        format!("invalid task_answer: request {request} is not open (cancelled)")
    );
    assert!(replies(&mut r).is_empty());
}

/// A flood: past `max_open_requests_per_task` a prompt is denied at once, audited
/// `request_refused`; past the hub-wide `max_open_requests` too, with that cap's words.
#[test]
fn a_flood_past_either_cap_is_denied_at_once() {
    let mut r = Rig::new(with(ApprovalSettings {
        max_open_requests_per_task: 2,
        ..ApprovalSettings::default()
    }));
    let id = running(&mut r);
    for i in 1..=3 {
        ask(&mut r, id.as_str(), &bash(&format!("toolu_{i}"), "x")).unwrap();
    }
    let a = r.actions();
    assert_eq!(
        audits(&a),
        ["request_opened", "request_opened", "request_refused"]
    );
    let got = replies(&mut r);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].seq, 3);
    assert_eq!(
        got[0].reply,
        TaskPermissionReply::deny(
            "denied: this task holds 2 open requests already, the most it may (tasks.max_open_requests_per_task)"
        )
    );
    // An answered one makes room again: the next prompt is held.
    let first = body(envelopes(&a, "task_request")[0])["request"]
        .as_str()
        .unwrap()
        .to_owned();
    let req = TaskAnswerRequest {
        task: id.as_str().into(),
        request: Some(first),
        option: "allow".into(),
        message: None,
    };
    let taken = r.book.answer(&req, "mneme").unwrap();
    r.book
        .answer_settled(&taken.request, true, Some(taken.decision));
    assert_eq!(replies(&mut r).len(), 1);
    r.actions();
    ask(&mut r, id.as_str(), &bash("toolu_4", "x")).unwrap();
    assert_eq!(audits(&r.actions()), ["request_opened"]);

    let mut r = Rig::new(with(ApprovalSettings {
        max_open_requests: 1,
        ..ApprovalSettings::default()
    }));
    let id = running(&mut r);
    ask(&mut r, id.as_str(), &bash("toolu_1", "x")).unwrap();
    ask(&mut r, id.as_str(), &bash("toolu_2", "y")).unwrap();
    assert_eq!(audits(&r.actions()), ["request_opened", "request_refused"]);
    assert_eq!(
        replies(&mut r)[0].reply,
        TaskPermissionReply::deny(
            "denied: the hub holds as many open requests as it may (tasks.max_open_requests)"
        )
    );
}
