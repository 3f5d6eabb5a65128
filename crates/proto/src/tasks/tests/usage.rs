//! The book with a task's usage and budget (issue 38 design §1, §11 A): the verb checks a
//! budget against what the agent reports; a figure that passes mid-turn (a progress snapshot
//! carrying a `usage_update`'s cost) cancels the task once, with the reason its outcome
//! carries, its `budget` body and the audit record; a figure that passes at the turn's end
//! cancels nothing; the record and the stored row carry the figures. On the virtual clock of
//! `tasks::tests`.

use super::*;
use crate::acp::Reports;
use crate::wire::usage::Amount;

fn rig() -> Rig {
    let mut r = Rig::new(config());
    r.book.set_reports([
        ("claude".to_owned(), Reports::ALL),
        (
            "codex".to_owned(),
            Reports {
                tokens: true,
                ..Reports::NONE
            },
        ),
    ]);
    r
}

fn req(agent: &str, cost: Option<f64>, tokens: Option<u64>) -> DelegateRequest {
    DelegateRequest {
        agent: agent.into(),
        cwd: "/srv/root/app".into(),
        prompt: "p".into(),
        max_cost_usd: cost.map(Amount),
        max_tokens: tokens,
        ..DelegateRequest::default()
    }
}

fn running(r: &mut Rig, req: DelegateRequest) -> TaskId {
    let id = r.request(req).expect("accepted");
    r.start_ready();
    r.event(&id, TaskEvent::Started { pid: 7 });
    r.actions();
    id
}

fn spent(amount: f64) -> TaskEvent {
    TaskEvent::Progress(Progress {
        cost: Some(Cost {
            amount,
            currency: "USD".into(),
        }),
        ..Progress::default()
    })
}

fn audits(actions: &[TaskAction]) -> Vec<TaskAudit> {
    actions
        .iter()
        .filter_map(|a| match a {
            TaskAction::Commit(c) => Some(c.audit.clone()),
            _ => None,
        })
        .flatten()
        .collect()
}

#[test]
fn a_budget_the_agent_cannot_keep_is_refused_at_the_verb_unless_allowed() {
    let mut r = rig();
    let e = r.request(req("codex", Some(1.0), None)).unwrap_err();
    assert_eq!(
        e.to_string(),
        "invalid delegate: agent codex does not report its cost (run.reports: tokens), so maxCostUsd cannot be kept; set allowUnmetered to run it without that limit"
    );
    assert!(r.actions().is_empty(), "no task, no commit");
    let mut allowed = req("codex", Some(1.0), Some(10));
    allowed.allow_unmetered = Some(true);
    let id = r.request(allowed).unwrap();
    let acts = r.actions();
    let Some(TaskAction::Commit(c)) = acts.first() else {
        panic!("{acts:?}")
    };
    let [TaskStoreOp::Insert(row)] = c.store.as_slice() else {
        panic!("{:?}", c.store)
    };
    assert_eq!(
        row.budget.as_deref(),
        Some(r#"{"maxCostUsd":1.0,"maxTokens":10,"allowUnmetered":true,"kept":false}"#)
    );
    let rec = r.book.status(id.as_str(), "mneme", r.clock.now());
    assert_eq!(
        crate::wire::to_json(&rec.budget.unwrap()),
        r#"{"maxCostUsd":1.0,"maxTokens":10,"kept":false}"#
    );
    // A peer reports only at the end: refused without allowUnmetered.
    let mut peer = req("codex", None, Some(10));
    peer.peer = Some("lab".into());
    assert_eq!(
        r.request(peer).unwrap_err(),
        DelegateRefusal::PeerCannotKeepBudget { peer: "lab".into() }
    );
}

#[test]
fn a_cost_passing_mid_turn_cancels_once_and_the_outcome_says_why() {
    let mut r = rig();
    let id = running(&mut r, req("claude", Some(0.5), None));
    r.event(&id, spent(0.4));
    assert!(cancels(&r.actions()).is_empty(), "under the limit");
    r.event(&id, spent(0.5213));
    let acts = r.actions();
    assert_eq!(cancels(&acts), std::slice::from_ref(&id), "one Cancel");
    assert_eq!(r.state(&id), "cancelling");
    let passed: Vec<TaskAudit> = audits(&acts)
        .into_iter()
        .filter(|a| matches!(a, TaskAudit::BudgetPassed { .. }))
        .collect();
    assert_eq!(
        passed,
        [TaskAudit::BudgetPassed {
            task: id.0.clone(),
            what: "cost".into(),
            limit: "0.5".into(),
            value: "0.5213".into(),
        }]
    );
    // Later figures past it cancel nothing more.
    r.event(&id, spent(0.7));
    assert!(cancels(&r.actions()).is_empty());
    r.event(
        &id,
        outcome(
            Status::Cancelled {
                end: CancelEnd::Stopped(StopReason::Cancelled),
            },
            "partial work",
        ),
    );
    let acts = r.actions();
    let b = body(envelopes(&acts, OUTCOME_KIND)[0]);
    assert_eq!(b["state"], "cancelled");
    assert_eq!(
        b["reason"],
        "over budget: cost 0.5213 USD passed maxCostUsd 0.5"
    );
    assert_eq!(
        b["budget"],
        serde_json::json!({"maxCostUsd":0.5,"passed":"cost"})
    );
    assert_eq!(b["cost"]["amount"], 0.7, "the run's last figure");
    let ended = audits(&acts)
        .into_iter()
        .find(|a| matches!(a, TaskAudit::Ended { .. }))
        .unwrap();
    let TaskAudit::Ended {
        cost_usd, tokens, ..
    } = ended
    else {
        unreachable!()
    };
    assert_eq!((cost_usd, tokens), (Some(Amount(0.7)), None));
}

#[test]
fn tokens_passing_at_the_turns_end_cancel_nothing_and_are_said() {
    let mut r = rig();
    let id = running(&mut r, req("claude", None, Some(100)));
    r.event(
        &id,
        TaskEvent::Outcome(Outcome {
            status: Status::Completed {
                stop_reason: StopReason::EndTurn,
            },
            text: "done".into(),
            truncated: false,
            meter: Box::new(TurnMeter {
                tokens: Some(Sourced {
                    value: Tokens {
                        input_tokens: Some(90),
                        output_tokens: Some(30),
                        ..Tokens::default()
                    },
                    source: UsageSource::Acp,
                }),
                ..TurnMeter::default()
            }),
            progress: Progress::default(),
            turn: 1,
            kept: false,
        }),
    );
    let acts = r.actions();
    assert!(
        cancels(&acts).is_empty(),
        "the turn is over: nothing to cancel"
    );
    let b = body(envelopes(&acts, OUTCOME_KIND)[0]);
    assert_eq!(b["state"], "completed");
    assert!(b.get("reason").is_none(), "{b}");
    assert_eq!(
        b["budget"],
        serde_json::json!({"maxTokens":100,"passed":"tokens"})
    );
    assert_eq!(
        b["usage"],
        serde_json::json!({"inputTokens":90,"outputTokens":30,"source":"acp"})
    );
    assert!(audits(&acts)
        .iter()
        .any(|a| matches!(a, TaskAudit::BudgetPassed { value, .. } if value == "120")));
    // The settle stores the figures and the budget as it ended.
    let settle = acts
        .iter()
        .filter_map(|a| match a {
            TaskAction::Commit(c) => Some(c.store.clone()),
            _ => None,
        })
        .flatten()
        .find_map(|op| match op {
            TaskStoreOp::Settle { meter, budget, .. } => Some((meter, budget)),
            _ => None,
        })
        .unwrap();
    assert!(settle.0.unwrap().contains("\"sums\":[90,30,null"));
    assert!(settle.1.unwrap().contains("\"passed\":\"tokens\""));
}

#[test]
fn an_unmetered_task_shows_no_figure_and_its_progress_none() {
    let mut r = rig();
    let id = running(&mut r, req("codex", None, None));
    r.event(&id, TaskEvent::Progress(Progress::default()));
    let rec = r.book.status(id.as_str(), "mneme", r.clock.now());
    assert_eq!(
        (rec.usage, rec.cost, rec.context, rec.budget),
        (None, None, None, None)
    );
    r.event(
        &id,
        outcome(
            Status::Completed {
                stop_reason: StopReason::EndTurn,
            },
            "x",
        ),
    );
    let acts = r.actions();
    let b = body(envelopes(&acts, OUTCOME_KIND)[0]);
    for k in ["usage", "cost", "context", "budget"] {
        assert!(b.get(k).is_none(), "{k}: {b}");
    }
}

/// Design §2: a kept turn's figures join the task's (its `task_outcome` says so), and a
/// turn that passed the budget leaves the session kept but refuses the next follow-up.
#[test]
fn a_kept_turn_past_the_budget_refuses_the_follow_up() {
    let mut r = Rig::new(BookConfig {
        follow_ups: crate::tasks::turns::FollowUpSettings {
            session_keep_secs: 600,
            max_kept_sessions: 8,
            max_turns: 32,
        },
        ..config()
    });
    r.book.set_reports([("claude".to_owned(), Reports::ALL)]);
    let id = running(&mut r, req("claude", None, Some(100)));
    let meter = TurnMeter {
        tokens: Some(Sourced {
            value: Tokens {
                input_tokens: Some(90),
                output_tokens: Some(30),
                ..Tokens::default()
            },
            source: UsageSource::Acp,
        }),
        ..TurnMeter::default()
    };
    r.event(
        &id,
        TaskEvent::Outcome(Outcome {
            status: Status::Completed {
                stop_reason: StopReason::EndTurn,
            },
            text: "turn one".into(),
            truncated: false,
            meter: Box::new(meter),
            progress: Progress::default(),
            turn: 1,
            kept: true,
        }),
    );
    let acts = r.actions();
    assert!(
        cancels(&acts).is_empty(),
        "the turn is over: nothing to cancel"
    );
    let b = body(envelopes(&acts, OUTCOME_KIND)[0]);
    assert_eq!(b["session"], "kept", "{b}");
    assert_eq!(b["usage"]["inputTokens"], 90, "{b}");
    assert_eq!(b["budget"]["passed"], "tokens", "{b}");
    assert!(
        audits(&acts)
            .iter()
            .any(|a| matches!(a, TaskAudit::BudgetPassed { .. })),
        "{acts:?}"
    );
    let refused = r
        .book
        .prompt(
            crate::wire::TaskPromptRequest {
                task: id.as_str().to_owned(),
                prompt: "one more".into(),
                interrupt: None,
            },
            "mneme",
            r.clock.now(),
        )
        .unwrap_err();
    assert_eq!(
        refused.to_string(),
        format!("invalid task_prompt: {id} passed its budget (tokens)")
    );
}
