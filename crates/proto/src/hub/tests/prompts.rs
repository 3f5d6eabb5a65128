//! Simulation tests of `task_permission` (issue 37 design §6; SPEC §16.1): a headless task's
//! permission prompt parks its connection until the book decides it, and the decision is the
//! connection's one final line, written at the commit point of the iteration that made it:
//! the delegator's answer (after its commit), the policy at once, the fallback at expiry, the
//! task's cancel. Its asker going away closes its request. Every refusal is an error line, for
//! each hostile asker: a roster agent, a task that does not ask this way, a hub without
//! `[tasks]`.

use super::tasks::{outcome_completed, running_task_with_token, tasks_sim};
use super::*;
use crate::tasks::{TaskEvent, TaskStoreOp};
use crate::wire::{ClientLine, TaskPermissionReply, TaskPermissionRequest};

fn prompt_text(use_id: &str, command: &str) -> String {
    ClientLine::TaskPermission(TaskPermissionRequest::new(
        "Bash",
        use_id,
        &json!({ "command": command }),
    ))
    .encode()
    .trim_end()
    .to_owned()
}

/// A running task whose agent asks through the tool; returns it and its token.
fn asking_task(sim: &mut Sim) -> (String, String) {
    let (task, token) = running_task_with_token(sim);
    let now = sim.now();
    let kinds = [("Bash".to_owned(), "execute".to_owned())].into();
    sim.hub
        .handle_task_event(&task, TaskEvent::PermissionTool { tool_kinds: kinds }, now);
    let now = sim.now();
    sim.hub
        .handle_task_event(&task, TaskEvent::Started { pid: 4242 }, now);
    sim.commit_ok();
    sim.drain();
    (task, token)
}

/// The task identity sends one prompt; its connection, `ok` checked and removed.
fn ask(sim: &mut Sim, task: &str, token: &str, use_id: &str) -> ConnId {
    let c = sim.open();
    sim.line(c, &hello_text(task, token));
    sim.line(c, &prompt_text(use_id, "make"));
    sim.collect();
    let got = sim.out.conns.get_mut(&c).expect("a hello gets a reply");
    assert_eq!(got.lines.remove(0), HubLine::Ok);
    c
}

fn reply(d: &Drained, c: ConnId) -> TaskPermissionReply {
    match d.lines(c) {
        [HubLine::TaskPermission(r)] => r.clone(),
        other => panic!("conn {c}: expected one task_permission reply, got {other:?}"),
    }
}

fn task_events<'a>(d: &'a Drained, event: &str) -> Vec<&'a crate::tasks::TaskAudit> {
    d.audit
        .iter()
        .filter_map(|e| match e {
            AuditEvent::Task(t) if t.event() == event => Some(t),
            _ => None,
        })
        .collect()
}

fn answer_text(task: &str, option: &str) -> String {
    json!({"task_answer": {"task": task, "option": option}}).to_string()
}

/// The prompt parks (no reply, no deadline) while its request is mailed; the delegator's
/// `task_answer` is taken after its commit, and only then is the prompt answered, as the
/// connection's one last line.
#[test]
fn a_prompt_waits_for_the_delegators_answer() {
    let mut sim = tasks_sim();
    let (task, token) = asking_task(&mut sim);
    let c = ask(&mut sim, &task, &token, "toolu_1");
    sim.commit_ok();
    let d = sim.drain();
    assert!(d.lines(c).is_empty(), "parked: {:?}", d.lines(c));
    assert_eq!(sim.hub.parked_prompts(), 1);
    assert_eq!(task_events(&d, "request_opened").len(), 1);
    assert!(d.store.iter().any(|op| matches!(
        op,
        crate::hub::durable::StoreOp::Task(TaskStoreOp::OpenRequest(_))
    )));
    // Time passes short of the expiry: still parked, no connection deadline fired.
    sim.advance(599_000);
    sim.commit_ok();
    assert!(sim.drain().lines(c).is_empty());
    let a = sim.login("mneme");
    sim.line(a, &answer_text(&task, "allow"));
    let d = sim.drain();
    assert!(d.lines(c).is_empty(), "nothing before the answer's commit");
    sim.commit_ok();
    let d = sim.drain();
    assert!(matches!(d.lines(a), [HubLine::TaskAnswer(_)]));
    assert_eq!(reply(&d, c), TaskPermissionReply::allow());
    assert_eq!(sim.hub.parked_prompts(), 0);
    // The reply was the final line: the connection is answered.
    sim.line(c, "{}");
    assert_eq!(
        sim.drain().error(c),
        crate::hub::pipeline::LINE_AFTER_THE_VERB
    );
}

/// Decided at once (the policy `reject`): the deny goes out at the same commit point.
#[test]
fn a_prompt_decided_at_once_is_answered_in_the_same_iteration() {
    let mut sim = Sim::durable();
    let mut config = super::tasks::book().config().clone();
    config.permission = crate::acp::PermissionPolicy::Reject;
    sim.hub.enable_tasks(crate::tasks::TaskBook::new(
        config,
        ["fake".to_owned()],
        Vec::<String>::new(),
    ));
    let (task, token) = asking_task(&mut sim);
    let c = ask(&mut sim, &task, &token, "toolu_1");
    sim.commit_ok();
    let d = sim.drain();
    assert_eq!(
        reply(&d, c),
        TaskPermissionReply::deny("denied: this task runs under permission reject")
    );
    assert!(task_events(&d, "request_opened").is_empty());
}

/// The expiry denies with the fallback's reason; the delegator's cancel denies, saying so.
#[test]
fn expiry_and_cancel_deny_with_why() {
    let mut sim = tasks_sim();
    let (task, token) = asking_task(&mut sim);
    let c = ask(&mut sim, &task, &token, "toolu_1");
    sim.commit_ok();
    sim.drain();
    sim.advance(600_000);
    sim.commit_ok();
    let d = sim.drain();
    assert_eq!(
        reply(&d, c),
        TaskPermissionReply::deny("denied: no answer within 600 s")
    );
    assert_eq!(task_events(&d, "request_expired").len(), 1);

    let c = ask(&mut sim, &task, &token, "toolu_2");
    sim.commit_ok();
    sim.drain();
    let m = sim.login("mneme");
    sim.line(m, &json!({"cancel": {"task": task}}).to_string());
    sim.commit_ok();
    let d = sim.drain();
    assert_eq!(
        reply(&d, c),
        TaskPermissionReply::deny("denied: the task was cancelled")
    );
    assert_eq!(task_events(&d, "request_closed").len(), 1);
    assert_eq!(sim.hub.parked_prompts(), 0);
}

/// The asker closes (or half-closes) before its decision: the request closes `cancelled`,
/// the delegator's answer is refused as not open, and nothing is written to the gone asker.
#[test]
fn an_asker_that_goes_away_closes_its_request() {
    let mut sim = tasks_sim();
    let (task, token) = asking_task(&mut sim);
    let c = ask(&mut sim, &task, &token, "toolu_1");
    sim.commit_ok();
    sim.drain();
    sim.closed(c, false);
    sim.commit_ok();
    let d = sim.drain();
    assert_eq!(task_events(&d, "request_closed").len(), 1);
    assert_eq!(sim.hub.parked_prompts(), 0);
    let a = sim.login("mneme");
    sim.line(a, &answer_text(&task, "allow"));
    assert_eq!(
        sim.drain().error(a),
        format!("invalid task_answer: {task} has no open request")
    );

    let e = ask(&mut sim, &task, &token, "toolu_2");
    sim.commit_ok();
    sim.drain();
    sim.eof(e);
    sim.commit_ok();
    let d = sim.drain();
    assert_eq!(task_events(&d, "request_closed").len(), 1);
    assert!(d.lines(e).is_empty());
    // The task ends: nothing is left to answer, and no line goes to a closed asker.
    let now = sim.now();
    sim.hub.handle_task_event(&task, outcome_completed(), now);
    sim.commit_ok();
    assert!(sim.drain().lines(e).is_empty());
}

/// Each hostile asker gets an error line and nothing is held: a roster agent, a task whose
/// agent does not ask through the tool (an ACP task), a replayed tool-use id, and any asker
/// on a hub without `[tasks]`.
#[test]
fn refusals_are_error_lines() {
    let mut sim = tasks_sim();
    let m = sim.login("mneme");
    sim.line(m, &prompt_text("toolu_1", "make"));
    assert_eq!(
        sim.drain().error(m),
        "invalid task_permission: only a delegated task's own agent may ask (as its task identity)"
    );
    let (acp, acp_token) = running_task_with_token(&mut sim);
    let c = sim.open();
    sim.line(c, &hello_text(&acp, &acp_token));
    sim.line(c, &prompt_text("toolu_1", "make"));
    assert_eq!(
        sim.drain().error(c),
        format!("invalid task_permission: {acp} does not ask through the permission tool (only a headless task whose manifest sets run.headless_mcp does)")
    );
    let mut bare = Sim::durable();
    let c = bare.login("mneme");
    bare.line(c, &prompt_text("toolu_1", "make"));
    assert_eq!(
        bare.drain().error(c),
        "invalid task_permission: delegation is not enabled on this hub"
    );
}

/// A replay of a tool-use id is refused on the wire of its own connection, and the first
/// prompt still waits for its own answer.
#[test]
fn a_replayed_tool_use_id_is_refused_and_the_first_still_waits() {
    let mut sim = tasks_sim();
    let (task, token) = asking_task(&mut sim);
    let first = ask(&mut sim, &task, &token, "toolu_1");
    let replay = ask(&mut sim, &task, &token, "toolu_1");
    sim.commit_ok();
    let d = sim.drain();
    assert_eq!(
        d.error(replay),
        "invalid task_permission: toolUseId toolu_1 was asked about already"
    );
    assert!(d.lines(first).is_empty());
    assert_eq!(task_events(&d, "request_opened").len(), 1);
}
