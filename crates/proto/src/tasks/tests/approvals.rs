//! The book with requests (issue 37 design §1, §2, §4, §5): a delegation's `permission` and
//! `allow` at the verb and in the start, the runner's requests held and answered, the
//! approvers' view, the closes a cancel and an end make, the `cancel` fallback's reason, and
//! a restart with requests open. On the virtual clock of `tasks::tests`; `Approvals`' own
//! rules have their tests beside it.

use super::*;
use crate::acp::{OptionKind, PermissionFallback, RequestOption as AskOption};
use crate::tasks::approvals::{AnswerRefusal, Decision, Source};
use crate::tasks::settings::ApprovalSettings;
use crate::wire::approval::{AllowRule, Permission, TaskAnswerRequest};

fn approving(approvals: ApprovalSettings) -> BookConfig {
    BookConfig {
        approvals,
        ..config()
    }
}

fn ask(seq: u32) -> RequestAsk {
    let opt = |id: &str, kind| AskOption {
        option_id: id.into(),
        name: id.into(),
        kind,
    };
    RequestAsk {
        seq,
        kind: RequestKind::Permission,
        tool_call_id: format!("call_{seq}"),
        title: "Run make".into(),
        tool_kind: Some("execute".into()),
        paths: Vec::new(),
        command: Some("make".into()),
        message: None,
        schema: None,
        options: vec![
            opt("allow", OptionKind::AllowOnce),
            opt("reject", OptionKind::RejectOnce),
        ],
    }
}

/// A running task of `mneme`'s.
fn running(r: &mut Rig) -> TaskId {
    let id = r.submit("work");
    r.start_ready();
    r.actions();
    id
}

fn answer(r: &mut Rig, who: &str, task: &TaskId, option: &str) -> Result<String, String> {
    let req = TaskAnswerRequest {
        task: task.as_str().into(),
        request: None,
        option: option.into(),
        message: None,
    };
    match r.book.answer(&req, who) {
        Ok(taken) => {
            r.book
                .answer_settled(&taken.request, true, Some(taken.decision));
            Ok(taken.request)
        }
        Err(e) => Err(e.to_string()),
    }
}

fn answers(actions: &[TaskAction]) -> Vec<(TaskId, u32, Option<String>)> {
    actions
        .iter()
        .filter_map(|a| match a {
            TaskAction::Answer { task, seq, answer } => {
                Some((task.clone(), *seq, answer.option_id.clone()))
            }
            _ => None,
        })
        .collect()
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

fn rule(kinds: &[&str], under: Option<&str>) -> AllowRule {
    AllowRule {
        kinds: kinds.iter().map(|k| k.to_string()).collect(),
        under: under.map(str::to_owned),
    }
}

/// Design §1: a delegation narrows the operator's bound, never widens it; the start carries
/// what was asked; a peer's task carries neither.
#[test]
fn a_delegation_may_narrow_the_bound_and_never_widen_it() {
    let mut config = config();
    config
        .agent_permission
        .insert("claude".into(), PermissionPolicy::Reject);
    let mut r = Rig::new(config);
    assert_eq!(
        r.request(delegation(Some(Permission::Allow), None))
            .unwrap_err()
            .to_string(),
        "invalid delegate: permission \"allow\" is wider than this hub allows for codex (ask)"
    );
    let claude = DelegateRequest {
        agent: "claude".into(),
        ..delegation(Some(Permission::Ask), None)
    };
    assert_eq!(
        r.request(claude).unwrap_err().to_string(),
        "invalid delegate: permission \"ask\" is wider than this hub allows for claude (reject)"
    );
    let id = r
        .request(delegation(Some(Permission::Reject), None))
        .unwrap();
    let now = r.clock.now();
    let spec = r.book.next_to_start(now, &mut r.ids).unwrap();
    assert_eq!(spec.task, id);
    assert_eq!(spec.permission, Some(PermissionPolicy::Reject));
    assert!(spec.allow.is_empty());
    let peer = DelegateRequest {
        peer: Some("lab".into()),
        ..delegation(Some(Permission::Reject), None)
    };
    assert_eq!(
        r.request(peer).unwrap_err().to_string(),
        "invalid delegate: permission and allow cannot be carried to a peer; a task run on a peer is answered by that hub's own permission"
    );
}

/// Design §2: rules are refused under an effective `reject` (the bound's or the delegation's
/// own), checked for their bounds, and carried to the start otherwise (under `allow` too,
/// where they change nothing).
#[test]
fn allow_rules_need_a_policy_to_narrow_and_ride_to_the_start() {
    let mut config = config();
    config
        .agent_permission
        .insert("claude".into(), PermissionPolicy::Reject);
    config
        .agent_permission
        .insert("codex".into(), PermissionPolicy::Allow);
    let mut r = Rig::new(config);
    let rules = vec![rule(&["read", "edit"], Some("src"))];
    let claude = DelegateRequest {
        agent: "claude".into(),
        ..delegation(None, Some(rules.clone()))
    };
    assert_eq!(
        r.request(claude).unwrap_err().to_string(),
        "invalid delegate: the operator's permission for claude is reject; allow rules cannot widen it"
    );
    assert_eq!(
        r.request(delegation(Some(Permission::Reject), Some(rules.clone())))
            .unwrap_err()
            .to_string(),
        "invalid delegate: the operator's permission for codex is reject; allow rules cannot widen it"
    );
    assert_eq!(
        r.request(delegation(None, Some(vec![rule(&["read"], Some("../x"))])))
            .unwrap_err()
            .to_string(),
        "invalid delegate: allow rule 1: under must not leave the task's cwd"
    );
    // An empty list is no rules, under any policy.
    let claude_none = DelegateRequest {
        agent: "claude".into(),
        ..delegation(None, Some(Vec::new()))
    };
    assert!(r.request(claude_none).is_ok());
    let id = r
        .request(delegation(Some(Permission::Ask), Some(rules.clone())))
        .unwrap();
    // The row keeps them, so a restart starts the task as it was delegated.
    let row = r
        .actions()
        .into_iter()
        .find_map(|x| match x {
            TaskAction::Commit(c) => c.store.into_iter().find_map(|op| match op {
                TaskStoreOp::Insert(row) if row.task == id.as_str() => Some(*row),
                _ => None,
            }),
            _ => None,
        })
        .unwrap();
    assert_eq!(row.permission.as_deref(), Some("ask"));
    assert_eq!(
        row.allow.as_deref(),
        Some("[{\"kinds\":[\"read\",\"edit\"],\"under\":\"src\"}]")
    );
    r.start_ready();
    let spec = r
        .actions()
        .into_iter()
        .find_map(|x| match x {
            TaskAction::Start(s) if s.task == id => Some(s),
            _ => None,
        })
        .unwrap();
    assert_eq!(spec.permission, Some(PermissionPolicy::Ask));
    assert_eq!(spec.allow, rules);
}

/// Design §4.2, §5: the runner's request is held with its envelope to the delegator; the
/// record lists it; the delegator's answer goes to the runner only after
/// `answer_settled`; a second answer is refused.
#[test]
fn a_request_is_held_listed_and_answered_by_the_delegator() {
    let mut r = Rig::new(config());
    let id = running(&mut r);
    r.event(&id, TaskEvent::Request(ask(1)));
    let a = r.actions();
    let env = envelopes(&a, "task_request");
    assert_eq!(env.len(), 1);
    assert_eq!(env[0].to, "mneme");
    assert_eq!(body(env[0])["state"], "open");
    assert_eq!(audits(&a), ["request_opened"]);
    let rec = r.book.status(id.as_str(), "mneme", r.clock.now());
    let requests = rec.requests.unwrap();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].options, ["allow", "reject"]);
    // Someone else sees nothing and may answer nothing.
    assert_eq!(
        answer(&mut r, "critic", &id, "allow"),
        Err("unknown task".into())
    );
    let req = TaskAnswerRequest {
        task: id.as_str().into(),
        request: None,
        option: "allow".into(),
        message: None,
    };
    let taken = r.book.answer(&req, "mneme").unwrap();
    assert!(
        answers(&r.actions()).is_empty(),
        "nothing before the commit"
    );
    r.book
        .answer_settled(&taken.request, true, Some(taken.decision.clone()));
    assert_eq!(
        answers(&r.actions()),
        [(id.clone(), 1, Some("allow".to_owned()))]
    );
    assert!(r
        .book
        .status(id.as_str(), "mneme", r.clock.now())
        .requests
        .is_none());
    assert_eq!(
        answer(&mut r, "mneme", &id, "allow"),
        Err(format!("invalid task_answer: {id} has no open request"))
    );
}

/// Design §5: a name in `tasks.approvers` sees every task while it has an open request, in
/// `task_status` and in `tasks`, and may answer it; without one it sees nothing of others.
#[test]
fn an_approver_sees_and_answers_other_delegators_requests() {
    let mut r = Rig::new(approving(ApprovalSettings {
        approvers: vec!["lead".into()],
        ..ApprovalSettings::default()
    }));
    let id = running(&mut r);
    let now = r.clock.now();
    assert_eq!(r.book.status(id.as_str(), "lead", now).state, "unknown");
    assert!(r.book.list("lead", now).tasks.is_empty());
    r.event(&id, TaskEvent::Request(ask(1)));
    r.actions();
    assert_eq!(r.book.status(id.as_str(), "lead", now).state, "running");
    assert_eq!(r.book.list("lead", now).tasks.len(), 1);
    assert_eq!(r.book.status(id.as_str(), "critic", now).state, "unknown");
    assert!(answer(&mut r, "lead", &id, "reject").is_ok());
    assert_eq!(
        answers(&r.actions()),
        [(id.clone(), 1, Some("reject".into()))]
    );
    assert_eq!(r.book.status(id.as_str(), "lead", now).state, "unknown");
    // The approver's own tasks are its own, as before.
    assert!(r.book.list("lead", now).tasks.is_empty());
}

/// A pre-approved request is audited only: nothing is mailed, nothing held, no answer sent
/// (the session answered already).
#[test]
fn a_preapproved_request_is_only_audited() {
    let mut r = Rig::new(config());
    let id = running(&mut r);
    r.event(
        &id,
        TaskEvent::Preapproved {
            ask: ask(1),
            rule: 2,
        },
    );
    let a = r.actions();
    assert_eq!(audits(&a), ["request_preapproved"]);
    assert!(envelopes(&a, "task_request").is_empty());
    assert!(answers(&a).is_empty());
    let TaskAudit::RequestPreapproved { rule, .. } = a
        .iter()
        .find_map(|x| match x {
            TaskAction::Commit(c) => c.audit.first().cloned(),
            _ => None,
        })
        .unwrap()
    else {
        panic!()
    };
    assert_eq!(rule, 3, "numbered from 1 in the record");
}

/// Design §4.3: the delegator's cancel closes the open requests in the `cancelling` commit;
/// a task that ends closes the rest in its final commit.
#[test]
fn a_cancel_and_an_end_close_the_tasks_requests_in_their_commits() {
    let mut r = Rig::new(config());
    let id = running(&mut r);
    r.event(&id, TaskEvent::Request(ask(1)));
    r.actions();
    assert_eq!(r.cancel(&id, "mneme"), "cancelling");
    let a = r.actions();
    let TaskAction::Commit(c) = &a[0] else {
        panic!("{a:?}")
    };
    assert_eq!(
        c.audit.iter().map(TaskAudit::event).collect::<Vec<_>>(),
        ["task_cancel_asked", "request_closed"]
    );
    assert!(c
        .store
        .iter()
        .any(|op| matches!(op, TaskStoreOp::CloseRequest { .. })));
    assert!(
        answers(&a).is_empty(),
        "the session answers cancelled itself"
    );
    // A request that raced the cancel is not held.
    r.event(&id, TaskEvent::Request(ask(2)));
    assert!(audits(&r.actions()).is_empty());
    // Another task ends with a request open: closed in its final commit.
    let other = running(&mut r);
    r.event(&other, TaskEvent::Request(ask(1)));
    r.actions();
    r.event(&other, completed());
    let a = r.actions();
    assert_eq!(
        audits(&a),
        ["request_closed", "task_ended"],
        "one commit, with the outcome envelope"
    );
}

/// Design §4.5 `cancel`: nobody answers in time, so the task is cancelled as `cancel` does
/// and ends with the reason naming the request, whatever the agent says of the cancel.
#[test]
fn the_cancel_fallback_cancels_the_task_with_its_reason() {
    let mut r = Rig::new(approving(ApprovalSettings {
        permission_fallback: PermissionFallback::Cancel,
        permission_timeout_secs: 60,
        ..ApprovalSettings::default()
    }));
    let id = running(&mut r);
    r.event(&id, TaskEvent::Request(ask(1)));
    r.event(&id, TaskEvent::Request(ask(2)));
    r.actions();
    assert_eq!(
        r.book.poll_timeout(),
        Some(r.clock.now().mono + Duration::from_secs(60))
    );
    r.clock.advance_secs(60);
    let now = r.clock.now();
    r.book.handle_timeout(now, &mut r.ids, &|_| false);
    let a = r.actions();
    assert_eq!(cancels(&a), std::slice::from_ref(&id));
    let expired = envelopes(&a, "task_request");
    assert_eq!(expired.len(), 2, "each request's expiry is mailed");
    assert!(expired.iter().all(|e| body(e)["fallback"] == "cancel"));
    let first = body(expired[0])["request"].as_str().unwrap().to_owned();
    assert_eq!(r.state(&id), "cancelling");
    r.event(
        &id,
        outcome(
            Status::Cancelled {
                end: CancelEnd::Stopped(StopReason::Cancelled),
            },
            "",
        ),
    );
    let a = r.actions();
    let out = envelopes(&a, "task_outcome");
    assert_eq!(body(out[0])["state"], "cancelled");
    assert_eq!(
        body(out[0])["reason"],
        format!("no answer to request {first} within 60 s")
    );
}

/// Design §4.5 `reject`: the expiry answers the agent its reject option, and the task runs on.
#[test]
fn the_reject_fallback_answers_and_the_task_runs_on() {
    let mut r = Rig::new(config());
    let id = running(&mut r);
    r.event(&id, TaskEvent::Request(ask(1)));
    r.actions();
    r.clock.advance_secs(600);
    let now = r.clock.now();
    r.book.handle_timeout(now, &mut r.ids, &|_| false);
    let a = r.actions();
    assert_eq!(answers(&a), [(id.clone(), 1, Some("reject".into()))]);
    assert_eq!(audits(&a), ["request_expired"]);
    assert_eq!(r.state(&id), "running");
}

/// The hub-wide cap: past it the fallback answers at once, audited `request_refused`.
#[test]
fn past_the_hub_wide_cap_a_request_is_answered_at_once() {
    let mut r = Rig::new(approving(ApprovalSettings {
        max_open_requests: 1,
        ..ApprovalSettings::default()
    }));
    let id = running(&mut r);
    r.event(&id, TaskEvent::Request(ask(1)));
    r.event(&id, TaskEvent::Request(ask(2)));
    let a = r.actions();
    assert_eq!(audits(&a), ["request_opened", "request_refused"]);
    assert_eq!(answers(&a), [(id, 2, Some("reject".into()))]);
}

/// A failed commit of an answer leaves the request open; if the task ended meanwhile, it is
/// closed then, so no row outlives its task.
#[test]
fn an_answer_that_did_not_commit_reopens_or_closes_its_request() {
    let mut r = Rig::new(config());
    let id = running(&mut r);
    r.event(&id, TaskEvent::Request(ask(1)));
    r.actions();
    let req = TaskAnswerRequest {
        task: id.as_str().into(),
        request: None,
        option: "allow".into(),
        message: None,
    };
    let taken = r.book.answer(&req, "mneme").unwrap();
    r.book.answer_settled(&taken.request, false, None);
    assert!(answers(&r.actions()).is_empty());
    let taken = r.book.answer(&req, "mneme").unwrap();
    r.event(&id, completed());
    let a = r.actions();
    assert_eq!(
        audits(&a),
        ["task_ended"],
        "the request being answered is not closed twice"
    );
    r.book.answer_settled(&taken.request, false, None);
    let a = r.actions();
    assert_eq!(audits(&a), ["request_closed"]);
    assert!(matches!(
        r.book.answer(&req, "mneme"),
        Err(AnswerRefusal::NotOpen { .. }) | Err(AnswerRefusal::NoOpenRequest { .. })
    ));
}

/// Design §4.6: a restart closes each stored request by the fallback, its `expired`
/// envelope before the task's `hub_restarted` outcome; a queued task keeps what its
/// delegator asked for, and a row this binary cannot read fails closed.
#[test]
fn a_restart_closes_open_requests_and_keeps_a_queued_tasks_policy() {
    let mut r = Rig::new(config());
    let id = running(&mut r);
    r.event(&id, TaskEvent::Request(ask(1)));
    let a = r.actions();
    let stored = a
        .iter()
        .find_map(|x| match x {
            TaskAction::Commit(c) => c.store.iter().find_map(|op| match op {
                TaskStoreOp::OpenRequest(row) => Some(row.clone()),
                _ => None,
            }),
            _ => None,
        })
        .unwrap();
    let rows = vec![
        StoredTask {
            seq: 1,
            task: id.as_str().into(),
            delegator: "mneme".into(),
            agent: "codex".into(),
            cwd: "/srv/root/app".into(),
            prompt: "work".into(),
            timeout_secs: 60,
            state: "running".into(),
            created_ms: 1,
            started_ms: Some(1),
            ..StoredTask::default()
        },
        StoredTask {
            seq: 2,
            task: "task-00000000000000000000000000000002".into(),
            delegator: "mneme".into(),
            agent: "codex".into(),
            cwd: "/srv/root/app".into(),
            prompt: "later".into(),
            timeout_secs: 60,
            state: "queued".into(),
            created_ms: 2,
            permission: Some("reject".into()),
            allow: Some("[{\"kinds\":[\"read\"]}]".into()),
            ..StoredTask::default()
        },
        StoredTask {
            seq: 3,
            task: "task-00000000000000000000000000000003".into(),
            delegator: "mneme".into(),
            agent: "codex".into(),
            cwd: "/srv/root/app".into(),
            prompt: "damaged".into(),
            timeout_secs: 60,
            state: "queued".into(),
            created_ms: 3,
            permission: Some("sideways".into()),
            allow: Some("{not rules".into()),
            ..StoredTask::default()
        },
    ];
    let mut again = Rig::new(config());
    let now = again.clock.now();
    again
        .book
        .restore(rows, vec![stored.clone()], now, &mut again.ids);
    let a = again.actions();
    let kinds: Vec<&str> = a
        .iter()
        .filter_map(|x| match x {
            TaskAction::Commit(c) => c.envelope.as_ref().map(|e| e.kind.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(kinds, ["task_request", "task_outcome"]);
    let expired = envelopes(&a, "task_request");
    assert_eq!(body(expired[0])["state"], "expired");
    assert_eq!(body(expired[0])["reason"], "hub restarted");
    assert_eq!(body(expired[0])["request"], stored.request.as_str());
    assert!(
        answers(&a).is_empty(),
        "the agent is gone: nothing is answered, nothing allowed"
    );
    assert!(a.iter().any(
        |x| matches!(x, TaskAction::Log(l) if l.contains("stored allow rules cannot be read"))
    ));
    again.start_ready();
    let starts: Vec<StartSpec> = again
        .actions()
        .into_iter()
        .filter_map(|x| match x {
            TaskAction::Start(s) => Some(s),
            _ => None,
        })
        .collect();
    assert_eq!(starts[0].permission, Some(PermissionPolicy::Reject));
    assert_eq!(starts[0].allow, vec![rule(&["read"], None)]);
    assert_eq!(
        starts[1].permission,
        Some(PermissionPolicy::Reject),
        "an unknown word fails closed"
    );
    assert!(starts[1].allow.is_empty());
}

/// The routing of a decision is by its source: a runner's request is answered through
/// `TaskAction::Answer` (the seam another source plugs into, `approvals` module doc).
#[test]
fn a_runners_decision_becomes_an_answer_action() {
    let mut r = Rig::new(config());
    let id = running(&mut r);
    r.event(&id, TaskEvent::Request(ask(1)));
    r.actions();
    let req = TaskAnswerRequest {
        task: id.as_str().into(),
        request: None,
        option: "allow".into(),
        message: None,
    };
    let taken = r.book.answer(&req, "mneme").unwrap();
    let d = Decision {
        task: id.clone(),
        request: taken.request.clone(),
        seq: 1,
        source: Source::Runner,
        answer: RequestAnswer {
            option_id: Some("allow".into()),
            message: None,
        },
    };
    assert_eq!(taken.decision, d);
    r.book.answer_settled(&taken.request, true, Some(d));
    assert_eq!(answers(&r.actions()), [(id, 1, Some("allow".into()))]);
}
