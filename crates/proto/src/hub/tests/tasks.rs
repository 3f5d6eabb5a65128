//! Simulation tests of delegated work in the hub (`hub::tasks`, docs/delegation.md
//! "Durability"): a `delegated` reply only after its task's row is committed, an agent
//! started only after the commit of its `running` state, an outcome envelope and its task's
//! final state in one batch or neither, task identities at hello and at send.

use super::*;
use crate::hub::durable::StoreOp;
use crate::tasks::TaskStoreOp;
use crate::tasks::{BookConfig, TaskBook};
use crate::tasks::{TaskEnd, TaskEvent};

pub(super) fn book() -> TaskBook {
    TaskBook::new(
        BookConfig {
            max_concurrent: 1,
            queue_max: 4,
            max_per_delegator: 100,
            timeout_secs: 60,
            prompt_max_bytes: 1000,
            cwd_roots: vec!["/w".into()],
            min_progress_secs: 10,
            outcome_text_max_bytes: 1000,
            history_max: 10,
            may_mail: Vec::new(),
            peer_status_secs: 30,
            permission: crate::acp::PermissionPolicy::Ask,
            agent_permission: Default::default(),
            approvals: Default::default(),
            follow_ups: Default::default(),
            placement: Default::default(),
        },
        ["fake".to_owned()],
        Vec::<String>::new(),
    )
}

pub(super) fn tasks_sim() -> Sim {
    let mut sim = Sim::durable();
    sim.hub.enable_tasks(book());
    sim
}

fn delegate_text() -> String {
    json!({"delegate": {"agent": "fake", "cwd": "/w/repo", "prompt": "do it"}}).to_string()
}

/// `mneme` delegates; returns its connection. Nothing committed yet.
fn delegate(sim: &mut Sim) -> ConnId {
    let c = sim.login("mneme");
    sim.line(c, &delegate_text());
    c
}

fn delegated_task(d: &Drained, c: ConnId) -> String {
    match d.lines(c) {
        [HubLine::Delegated(r)] => r.task.clone(),
        other => panic!("expected delegated, got {other:?}"),
    }
}

fn task_ops(store: &[StoreOp]) -> Vec<&TaskStoreOp> {
    store
        .iter()
        .filter_map(|op| match op {
            StoreOp::Task(t) => Some(t),
            _ => None,
        })
        .collect()
}

pub(super) fn outcome_completed() -> TaskEvent {
    TaskEvent::Outcome(crate::acp::Outcome {
        status: crate::acp::Status::Completed {
            stop_reason: crate::acp::StopReason::EndTurn,
        },
        text: "all done".into(),
        truncated: false,
        meter: Box::default(),
        progress: crate::acp::Progress::default(),
        turn: 1,
        kept: false,
    })
}

/// Delegates, commits, and starts the task; returns its id.
fn running_task(sim: &mut Sim) -> String {
    let c = delegate(sim);
    sim.commit_ok();
    let task = delegated_task(&sim.drain(), c);
    sim.commit_ok();
    let d = sim.drain();
    assert_eq!(
        d.task_starts.len(),
        1,
        "the task starts after its running state"
    );
    let now = sim.now();
    sim.hub
        .handle_task_event(&task, TaskEvent::Started { pid: 4242 }, now);
    sim.commit_ok();
    sim.drain();
    task
}

#[test]
fn delegated_waits_for_the_row_and_the_agent_for_its_running_state() {
    let mut sim = tasks_sim();
    let c = delegate(&mut sim);
    let d = sim.drain();
    assert!(d.lines(c).is_empty(), "no reply before the commit");
    assert!(d.task_starts.is_empty());
    sim.commit_ok();
    let d = sim.drain();
    let task = delegated_task(&d, c);
    assert!(matches!(
        task_ops(&d.store)[..],
        [TaskStoreOp::Insert(ref row)] if row.task == task && row.state == "queued"
    ));
    assert!(d
        .audit
        .iter()
        .any(|e| matches!(e, AuditEvent::Task(t) if t.event() == "task_accepted")));
    assert!(
        d.task_starts.is_empty(),
        "the running state is not committed yet"
    );
    sim.commit_ok();
    let d = sim.drain();
    assert!(matches!(
        task_ops(&d.store)[..],
        [TaskStoreOp::State { ref state, .. }] if state == "running"
    ));
    assert_eq!(d.task_starts.len(), 1);
    assert_eq!(d.task_starts[0].task.as_str(), task);
    assert_eq!(d.task_starts[0].prompt, "do it");
}

#[test]
fn a_failed_commit_refuses_the_delegation_and_no_task_remains() {
    let mut sim = tasks_sim();
    let c = delegate(&mut sim);
    sim.store = FakeStore::Failing;
    sim.commit_ok();
    let d = sim.drain();
    assert!(
        d.error(c).starts_with("delegation not accepted: "),
        "{}",
        d.error(c)
    );
    sim.store = FakeStore::Ok;
    let l = sim.login("mneme");
    sim.line(l, r#"{"tasks":{}}"#);
    let d = sim.drain();
    match d.lines(l) {
        [HubLine::Tasks(list)] => assert!(list.tasks.is_empty(), "{list:?}"),
        other => panic!("{other:?}"),
    }
    sim.commit_ok();
    assert!(
        sim.drain().task_starts.is_empty(),
        "a refused task never starts"
    );
}

#[test]
fn a_delegator_gone_before_the_commit_leaves_no_task() {
    let mut sim = tasks_sim();
    let c = delegate(&mut sim);
    sim.closed(c, true);
    sim.commit_ok();
    sim.commit_ok();
    let d = sim.drain();
    assert!(task_ops(&d.store).is_empty(), "{:?}", d.store);
    assert!(d.task_starts.is_empty());
}

#[test]
fn the_outcome_envelope_and_the_final_state_are_written_together_or_not_at_all() {
    let mut sim = tasks_sim();
    let task = running_task(&mut sim);
    let now = sim.now();
    sim.hub.handle_task_event(&task, outcome_completed(), now);
    // A full store refuses the batch with the envelope; its retry without sends must not
    // write the final state alone.
    sim.store = FakeStore::Full;
    sim.commit_ok();
    let d = sim.drain();
    assert!(
        !task_ops(&d.store)
            .iter()
            .any(|t| matches!(t, TaskStoreOp::Settle { .. })),
        "the final state was written without its envelope: {:?}",
        d.store
    );
    assert!(d.accepted_ids().is_empty());
    sim.store = FakeStore::Ok;
    sim.commit_ok();
    let d = sim.drain();
    let settles = task_ops(&d.store)
        .iter()
        .filter(|t| matches!(t, TaskStoreOp::Settle { state, .. } if state == "completed"))
        .count();
    let inserts: Vec<_> = d
        .store
        .iter()
        .filter(|op| matches!(op, StoreOp::Insert { kind, agent, .. } if kind == "task_outcome" && agent == "mneme"))
        .collect();
    assert_eq!((settles, inserts.len()), (1, 1), "{:?}", d.store);
    // The delegator's await on the task id gets it, from the hub.
    let r = sim.login("mneme");
    sim.line(r, &await_text(Some(&task), Some("task_outcome"), Some(0)));
    let env = sim.drain().envelope(r);
    assert_eq!(env["from"], "hub");
    assert_eq!(env["correlationId"], task.as_str());
    assert_eq!(env["body"]["state"], "completed");
    assert_eq!(env["body"]["text"], "all done");
}

#[test]
fn the_next_task_starts_only_when_the_runner_has_ended() {
    let mut sim = tasks_sim();
    let first = running_task(&mut sim);
    let c = delegate(&mut sim);
    sim.commit_ok();
    let _second = delegated_task(&sim.drain(), c);
    let now = sim.now();
    sim.hub.handle_task_event(&first, outcome_completed(), now);
    sim.commit_ok();
    sim.commit_ok();
    assert!(
        sim.drain().task_starts.is_empty(),
        "max_concurrent 1: the slot is held until the process is reaped"
    );
    let now = sim.now();
    sim.hub
        .handle_task_event(&first, TaskEvent::Ended(TaskEnd::default()), now);
    sim.commit_ok();
    assert_eq!(sim.drain().task_starts.len(), 1);
}

/// A running task and its identity's token, read from the start instruction.
pub(super) fn running_task_with_token(sim: &mut Sim) -> (String, String) {
    let c = delegate(sim);
    sim.commit_ok();
    let task = delegated_task(&sim.drain(), c);
    sim.commit_ok();
    let d = sim.drain();
    (task, d.task_starts[0].token.clone())
}

#[test]
fn a_live_task_identity_may_mail_its_delegator_and_nobody_else() {
    let mut sim = tasks_sim();
    let (task, token) = running_task_with_token(&mut sim);
    let c = sim.open();
    sim.line(c, &hello_text(&task, &token));
    sim.line(c, &send_text("t-1", "datastore", "note", None, "{}"));
    let d = sim.drain();
    assert_eq!(d.lines(c).first(), Some(&HubLine::Ok));
    assert!(
        d.error(c)
            .starts_with("invalid envelope: a task may mail only its delegator"),
        "{}",
        d.error(c)
    );
    let c = sim.open();
    sim.line(c, &hello_text(&task, &token));
    sim.line(c, &send_text("t-2", "mneme", "note", None, "{}"));
    sim.commit_ok();
    let d = sim.drain();
    assert_eq!(d.accepted_ids(), ["t-2"]);
    // After its outcome the identity is gone.
    let now = sim.now();
    sim.hub.handle_task_event(&task, outcome_completed(), now);
    sim.commit_ok();
    sim.drain();
    let c = sim.open();
    sim.line(c, &hello_text(&task, &token));
    assert_eq!(
        sim.drain().error(c),
        "authentication failed: unknown name or wrong token"
    );
}

#[test]
fn a_restart_reports_a_running_task_once_and_names_its_process_group() {
    let mut sim = tasks_sim();
    let task = running_task(&mut sim);
    // The rows the store would hold now.
    let rows = vec![crate::tasks::StoredTask {
        seq: 1,
        task: task.clone(),
        delegator: "mneme".into(),
        agent: "fake".into(),
        cwd: "/w/repo".into(),
        prompt: "do it".into(),
        timeout_secs: 60,
        state: "running".into(),
        created_ms: 1,
        started_ms: Some(2),
        pid: Some(4242),
        ..Default::default()
    }];
    let mut sim = Sim::durable();
    sim.hub.enable_tasks(book());
    let now = sim.now();
    sim.hub.restore_tasks(rows, Vec::new(), now);
    sim.commit_ok();
    let d = sim.drain();
    assert_eq!(d.task_orphans, [(task.clone(), 4242)]);
    let settles = task_ops(&d.store)
        .iter()
        .filter(|t| matches!(t, TaskStoreOp::Settle { state, .. } if state == "hub_restarted"))
        .count();
    assert_eq!(settles, 1);
    assert!(d.task_starts.is_empty());
}

// ----- across hubs (docs/delegation.md "Across hubs") -----

fn peer_sim() -> Sim {
    let mut sim = Sim::durable();
    let mut b = TaskBook::new(
        BookConfig {
            cwd_roots: vec!["/w".into()],
            ..book().config().clone()
        },
        ["fake".to_owned()],
        ["lab".to_owned()],
    );
    b.set_accept_from(["lab".to_owned()]);
    sim.hub.enable_tasks(b);
    sim
}

fn handoff(task: &str) -> crate::relay::message::Payload {
    crate::relay::message::Payload::TaskHandoff(crate::relay::message::TaskHandoff {
        task_id: task.into(),
        state: "completed".into(),
        summary: "built".into(),
        artifacts: Vec::new(),
        git_ref: None,
        total_cost_usd: 0.0,
        total_tokens: 0,
        model: None,
        usage: None,
        refused: false,
        verifications: Vec::new(),
    })
}

#[test]
fn a_peer_hears_of_a_task_only_after_its_running_state_is_committed() {
    use crate::relay::message::Payload;
    let mut sim = peer_sim();
    let now = sim.now();
    sim.hub.handle_peer_link(
        "lab",
        true,
        crate::tasks::LinkTerms {
            agent_hub: true,
            approvals: false,
        },
        now,
    );
    let c = sim.login("mneme");
    let line =
        json!({"delegate": {"agent": "codex", "cwd": "/far/repo", "prompt": "p", "peer": "lab"}});
    sim.line(c, &line.to_string());
    let d = sim.drain();
    assert!(d.to_peers.is_empty() && d.lines(c).is_empty());
    sim.commit_ok();
    let d = sim.drain();
    let task = delegated_task(&d, c);
    assert!(
        d.to_peers.is_empty(),
        "the running state is not committed yet"
    );
    sim.commit_ok();
    let d = sim.drain();
    assert!(
        matches!(task_ops(&d.store)[..], [TaskStoreOp::State { ref state, .. }] if state == "running")
    );
    match &d.to_peers[..] {
        [s] => {
            assert_eq!(s.peer, "lab");
            assert!(matches!(&s.payload, Payload::DelegateTask(t) if t.task_id == task));
        }
        other => panic!("expected one delegate_task, got {other:?}"),
    }
    // The handoff's ack waits for the outcome envelope's batch.
    let now = sim.now();
    sim.hub
        .handle_peer_message("lab", "m-7", handoff(&task), now);
    let d = sim.drain();
    assert!(
        d.to_peers.is_empty(),
        "no ack before the outcome is durable"
    );
    sim.commit_ok();
    let d = sim.drain();
    assert!(
        matches!(&d.to_peers[..], [s] if matches!(&s.payload, Payload::Ack(a) if a.ack_id == "m-7"))
    );
    assert!(task_ops(&d.store)
        .iter()
        .any(|op| matches!(op, TaskStoreOp::Settle { state, .. } if state == "completed")));
}

#[test]
fn a_failed_commit_holds_the_message_for_the_peer() {
    use crate::relay::message::Payload;
    let mut sim = peer_sim();
    let now = sim.now();
    sim.hub.handle_peer_link(
        "lab",
        true,
        crate::tasks::LinkTerms {
            agent_hub: false,
            approvals: false,
        },
        now,
    );
    let d = json!({"task_id": "ext-1", "prompt": "p", "cwd": "/w/repo", "context": {"dependency_graph": {"blocks": [], "blocked_by": []}}, "agent": "fake"});
    let payload =
        Payload::parse(&crate::relay::MsgType::DelegateTask, &d).expect("a delegate_task");
    sim.hub.handle_peer_message("lab", "m-1", payload, now);
    sim.commit_err();
    assert!(
        sim.drain().to_peers.is_empty(),
        "its row is not durable: the peer is told nothing"
    );
    sim.commit_ok();
    let held = sim.drain().to_peers;
    assert!(
        held.is_empty(),
        "held for a claudectl peer (tasks::CLAUDECTL_REPORT_DELAY): {held:?}"
    );
    sim.advance(crate::tasks::CLAUDECTL_REPORT_DELAY.as_millis() as u64);
    sim.commit_ok();
    let d = sim.drain();
    assert!(
        d.to_peers
            .iter()
            .any(|s| matches!(&s.payload, Payload::TaskStatus(t) if t.task_id == "ext-1" && t.state == "running")),
        "{:?}",
        d.to_peers
    );
}

#[test]
fn without_tasks_a_peers_delegation_is_refused_with_a_handoff() {
    use crate::relay::message::Payload;
    let mut sim = Sim::durable();
    let d = json!({"task_id": "ext-1", "prompt": "p", "cwd": null, "context": {"dependency_graph": {"blocks": [], "blocked_by": []}}});
    let payload =
        Payload::parse(&crate::relay::MsgType::DelegateTask, &d).expect("a delegate_task");
    let now = sim.now();
    sim.hub.handle_peer_message("lab", "m-1", payload, now);
    sim.commit_ok();
    let d = sim.drain();
    assert!(
        matches!(&d.to_peers[..], [s] if matches!(&s.payload, Payload::TaskHandoff(h) if h.state == "failed" && h.refused && h.summary == "Could not start the task: delegation is not enabled on this hub"))
    );
}

/// A shutting-down hub answers a peer's delegation as one it could not start (claudectl
/// 0.92's shape: `refused`, no status first), and runs nothing.
#[test]
fn a_shutting_down_hub_refuses_a_peers_delegation_with_a_refused_handoff() {
    use crate::relay::message::Payload;
    let mut sim = peer_sim();
    let now = sim.now();
    sim.hub.handle_peer_link(
        "lab",
        true,
        crate::tasks::LinkTerms {
            agent_hub: false,
            approvals: false,
        },
        now,
    );
    sim.drain();
    sim.hub.shutdown(now);
    sim.drain();
    let d = json!({"task_id": "ext-1", "prompt": "p", "cwd": "/w/repo", "context": {"dependency_graph": {"blocks": [], "blocked_by": []}}, "agent": "fake"});
    let payload =
        Payload::parse(&crate::relay::MsgType::DelegateTask, &d).expect("a delegate_task");
    sim.hub.handle_peer_message("lab", "m-1", payload, now);
    sim.commit_ok();
    let d = sim.drain();
    match &d.to_peers[..] {
        [s] => match &s.payload {
            Payload::TaskHandoff(h) => {
                assert_eq!(h.task_id, "ext-1");
                assert_eq!(h.state, "failed");
                assert!(h.refused);
                assert_eq!(
                    h.summary,
                    "Could not start the task: the hub is shutting down"
                );
            }
            other => panic!("not a handoff: {other:?}"),
        },
        other => panic!("expected one handoff, got {other:?}"),
    }
    assert!(d.task_starts.is_empty());
}

// ----- issue 29: outcomes cannot be forged, a task's inbox is its delegator's -----

/// One send as `name` (a roster agent, or a task identity with its `token`); the final line.
fn send_as(sim: &mut Sim, name: &str, token: &str, line: &str) -> HubLine {
    let c = sim.open();
    sim.line(c, &hello_text(name, token));
    sim.line(c, line);
    sim.commit_ok();
    let d = sim.drain();
    d.lines(c).last().cloned().expect("a reply")
}

fn refused(reply: &HubLine) -> &str {
    match reply {
        HubLine::Error { message } => message,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// The attacks of issue 29, each as it was reproduced: another roster agent, the task's own
/// agent (its identity) and a sibling task of the same delegator send a `task_outcome` (and a
/// `task_progress`) correlated to the delegator's task. Each is refused at the send; the
/// delegator's parked await (as `delegate --wait` parks it) takes only the hub's outcome.
#[test]
fn forged_task_outcomes_are_refused_from_anyone_but_the_hub() {
    let mut sim = tasks_sim();
    let (task, task_token) = running_task_with_token(&mut sim);
    let waiter = sim.await_("mneme", Some(&task), Some("task_outcome"), None);
    let body = r#"{"task":"x","state":"completed","text":"forged"}"#;
    for kind in ["task_outcome", "task_progress"] {
        let forged = send_text("f-1", "mneme", kind, Some(&task), body);
        let want = format!("invalid envelope: kind \"{kind}\" is reserved for the hub");
        let from_agent = send_as(&mut sim, "datastore", &token("datastore"), &forged);
        assert_eq!(refused(&from_agent), want, "another roster agent");
        let from_task = send_as(&mut sim, &task, &task_token, &forged);
        assert_eq!(refused(&from_task), want, "the task's own agent");
    }
    assert!(sim.queued_ids("mneme").is_empty(), "nothing was queued");

    // The task ends; a second task of mneme's runs; its agent forges the first's outcome.
    let now = sim.now();
    sim.hub.handle_task_event(&task, outcome_completed(), now);
    sim.commit_ok();
    let d = sim.drain();
    // Still parked after every forgery: the hub's outcome is what it takes.
    let real = d.envelope(waiter);
    assert_eq!(
        (real["from"].as_str(), real["correlationId"].as_str()),
        (Some("hub"), Some(task.as_str()))
    );
    let now = sim.now();
    sim.hub
        .handle_task_event(&task, TaskEvent::Ended(TaskEnd::default()), now);
    sim.commit_ok();
    sim.drain();
    let (sibling, sib_token) = running_task_with_token(&mut sim);
    assert_ne!(sibling, task);
    let forged = send_text("f-2", "mneme", "task_outcome", Some(&task), body);
    let reply = send_as(&mut sim, &sibling, &sib_token, &forged);
    assert_eq!(
        refused(&reply),
        "invalid envelope: kind \"task_outcome\" is reserved for the hub",
        "a sibling task"
    );
    // A bounce is the hub's too, as before.
    let bounce = send_text("f-3", "mneme", "bounce", Some(&task), "{}");
    let reply = send_as(&mut sim, "datastore", &token("datastore"), &bounce);
    assert_eq!(
        refused(&reply),
        "invalid envelope: kind \"bounce\" is reserved for the hub"
    );
}

/// Mail to a task identity comes only from its delegator and the names `tasks.may_mail`
/// lists, and only until the task ends; a stranger's is refused with the same text whether
/// the task exists or not.
#[test]
fn a_task_takes_mail_only_from_its_delegator_and_may_mail() {
    let mut sim = Sim::durable();
    let mut config = book().config().clone();
    config.may_mail = vec!["scribe".into()];
    sim.hub.enable_tasks(TaskBook::new(
        config,
        ["fake".to_owned()],
        Vec::<String>::new(),
    ));
    let (task, _token) = running_task_with_token(&mut sim);
    let want = "invalid envelope: a task takes mail only from its delegator and the agents tasks.may_mail names, and only until it ends";
    let note = |id: &str, to: &str| send_text(id, to, "note", None, "{}");
    let stranger = send_as(
        &mut sim,
        "datastore",
        &token("datastore"),
        &note("s-1", &task),
    );
    assert_eq!(refused(&stranger), want);
    let unknown = "task-00000000000000000000000000000000";
    let reply = send_as(
        &mut sim,
        "datastore",
        &token("datastore"),
        &note("s-2", unknown),
    );
    assert_eq!(
        refused(&reply),
        want,
        "the same text for a task that does not exist"
    );
    let reply = send_as(&mut sim, "mneme", &token("mneme"), &note("d-1", unknown));
    assert_eq!(refused(&reply), want, "nor for a delegator's guess");
    for (from, id) in [("mneme", "d-2"), ("scribe", "m-1")] {
        let reply = send_as(&mut sim, from, &token(from), &note(id, &task));
        assert_eq!(reply, accepted(id), "{from}");
    }
    assert_eq!(sim.queued_ids(&task), ["d-2", "m-1"]);
    // Once the task has ended, nobody's mail can reach it.
    let now = sim.now();
    sim.hub.handle_task_event(&task, outcome_completed(), now);
    sim.commit_ok();
    sim.drain();
    let reply = send_as(&mut sim, "mneme", &token("mneme"), &note("d-3", &task));
    assert_eq!(refused(&reply), want);
}

/// A request the fake agent asks of `task` (issue 37): `ask` with options allow / reject.
fn request_event(seq: u32) -> TaskEvent {
    let opt = |id: &str, kind| crate::acp::RequestOption {
        option_id: id.into(),
        name: id.into(),
        kind,
    };
    TaskEvent::Request(crate::acp::RequestAsk {
        seq,
        kind: crate::acp::RequestKind::Permission,
        tool_call_id: format!("call_{seq}"),
        title: "Run make".into(),
        tool_kind: Some("execute".into()),
        paths: Vec::new(),
        command: Some("make".into()),
        message: None,
        schema: None,
        options: vec![
            opt("allow", crate::acp::OptionKind::AllowOnce),
            opt("reject", crate::acp::OptionKind::RejectOnce),
        ],
    })
}

/// A running task with one request open, its `task_request` envelope committed; returns the
/// task and the request id.
fn task_with_request(sim: &mut Sim) -> (String, String) {
    let task = running_task(sim);
    let now = sim.now();
    sim.hub.handle_task_event(&task, request_event(1), now);
    sim.commit_ok();
    let d = sim.drain();
    let opened = task_ops(&d.store)
        .into_iter()
        .find_map(|op| match op {
            TaskStoreOp::OpenRequest(r) => Some(r.request.clone()),
            _ => None,
        })
        .expect("the request's row is in the commit");
    assert!(d
        .audit
        .iter()
        .any(|e| matches!(e, AuditEvent::Task(t) if t.event() == "request_opened")));
    (task, opened)
}

fn answer_text(task: &str, option: &str) -> String {
    json!({"task_answer": {"task": task, "option": option}}).to_string()
}

/// Issue 37 design §5: the answer's reply and the agent's answer both wait for the commit of
/// `request_answered`; neither comes before it.
#[test]
fn an_answer_reaches_the_agent_and_the_answerer_only_after_its_commit() {
    let mut sim = tasks_sim();
    let (task, request) = task_with_request(&mut sim);
    let c = sim.login("mneme");
    sim.line(c, &answer_text(&task, "allow"));
    let d = sim.drain();
    assert!(d.lines(c).is_empty(), "no reply before the commit");
    assert!(
        d.task_answers.is_empty(),
        "no answer to the agent before the commit"
    );
    sim.commit_ok();
    let d = sim.drain();
    match d.lines(c) {
        [HubLine::TaskAnswer(r)] => {
            assert_eq!(
                (r.task.as_str(), r.request.as_str()),
                (task.as_str(), request.as_str())
            );
            assert_eq!((r.option.as_str(), r.state.as_str()), ("allow", "answered"));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(d.task_answers, [(task.clone(), 1, Some("allow".into()))]);
    assert!(matches!(
        task_ops(&d.store)[..],
        [TaskStoreOp::CloseRequest { request: ref r }] if *r == request
    ));
    assert!(d.audit.iter().any(|e| matches!(
        e,
        AuditEvent::Task(crate::tasks::TaskAudit::RequestAnswered { by, option, .. })
            if by == "mneme" && option == "allow"
    )));
    // The same answer again: the request is no longer open.
    let again = sim.login("mneme");
    sim.line(again, &answer_text(&task, "allow"));
    let d = sim.drain();
    assert_eq!(
        d.error(again),
        format!("invalid task_answer: {task} has no open request")
    );
}

/// A commit that fails refuses the answer and leaves the request open: nothing reaches the
/// agent, and a later answer is taken.
#[test]
fn a_failed_commit_refuses_the_answer_and_the_request_stays_open() {
    let mut sim = tasks_sim();
    let (task, _) = task_with_request(&mut sim);
    let c = sim.login("mneme");
    sim.line(c, &answer_text(&task, "allow"));
    sim.store = FakeStore::Failing;
    sim.commit_ok();
    let d = sim.drain();
    assert!(
        d.error(c).starts_with("task_answer not accepted: "),
        "{}",
        d.error(c)
    );
    assert!(d.task_answers.is_empty());
    sim.store = FakeStore::Ok;
    let c = sim.login("mneme");
    sim.line(c, &answer_text(&task, "reject"));
    sim.commit_ok();
    let d = sim.drain();
    assert!(matches!(d.lines(c), [HubLine::TaskAnswer(_)]));
    assert_eq!(d.task_answers, [(task, 1, Some("reject".into()))]);
}

/// An answerer gone before the commit withdraws the answer: the request is open again.
#[test]
fn an_answerer_gone_before_the_commit_withdraws_its_answer() {
    let mut sim = tasks_sim();
    let (task, _) = task_with_request(&mut sim);
    let c = sim.login("mneme");
    sim.line(c, &answer_text(&task, "allow"));
    sim.closed(c, false);
    sim.commit_ok();
    let d = sim.drain();
    assert!(d.task_answers.is_empty());
    assert!(!d
        .audit
        .iter()
        .any(|e| matches!(e, AuditEvent::Task(t) if t.event() == "request_answered")));
    let now = sim.now();
    let rec = sim.hub.tasks.as_ref().unwrap().status(&task, "mneme", now);
    assert_eq!(rec.requests.map(|r| r.len()), Some(1));
}

/// Refusals are error lines with SPEC §16.1's words; a hub without `[tasks]` says so.
#[test]
fn task_answer_refusals_are_error_lines() {
    let mut sim = tasks_sim();
    let (task, _) = task_with_request(&mut sim);
    let c = sim.login("scribe");
    sim.line(c, &answer_text(&task, "allow"));
    assert_eq!(sim.drain().error(c), "unknown task");
    let c = sim.login("mneme");
    sim.line(c, &answer_text(&task, "always"));
    assert_eq!(
        sim.drain().error(c),
        "invalid task_answer: option \"always\" was not offered (offered: allow, reject)"
    );
    let mut bare = Sim::durable();
    let c = bare.login("mneme");
    bare.line(c, &answer_text(&task, "allow"));
    assert_eq!(
        bare.drain().error(c),
        "invalid task_answer: delegation is not enabled on this hub"
    );
}
