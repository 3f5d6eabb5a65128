//! Delegated work across hubs on a virtual clock (docs/delegation.md "Across hubs"): both
//! halves of `tasks::peer`, driven with the relay's inputs, checked by the messages the book
//! asks to send.

use super::*;
use crate::relay::message::{
    DelegateTask, DependencyGraph, Payload, TaskContext, TaskHandoff, TaskInterrupt, TaskStats,
    TaskStatus,
};

fn peer_request(agent: &str) -> DelegateRequest {
    DelegateRequest {
        agent: agent.into(),
        cwd: "/work/far/away/../repo".into(),
        prompt: "fix the build".into(),
        peer: Some("lab".into()),
        ..DelegateRequest::default()
    }
}

/// What the book asked to send to peers, in order.
fn sent(actions: &[TaskAction]) -> Vec<(String, Payload, Option<String>)> {
    actions
        .iter()
        .filter_map(|a| match a {
            TaskAction::ToPeer {
                peer,
                payload,
                handoff,
            } => Some((peer.clone(), payload.clone(), handoff.clone())),
            _ => None,
        })
        .collect()
}

fn delegates(actions: &[TaskAction]) -> Vec<DelegateTask> {
    sent(actions)
        .into_iter()
        .filter_map(|(_, p, _)| match p {
            Payload::DelegateTask(d) => Some(d),
            _ => None,
        })
        .collect()
}

fn handoffs(actions: &[TaskAction]) -> Vec<TaskHandoff> {
    sent(actions)
        .into_iter()
        .filter_map(|(_, p, _)| match p {
            Payload::TaskHandoff(h) => Some(h),
            _ => None,
        })
        .collect()
}

fn statuses(actions: &[TaskAction]) -> Vec<TaskStatus> {
    sent(actions)
        .into_iter()
        .filter_map(|(_, p, _)| match p {
            Payload::TaskStatus(s) => Some(s),
            _ => None,
        })
        .collect()
}

fn interrupts(actions: &[TaskAction]) -> Vec<TaskInterrupt> {
    sent(actions)
        .into_iter()
        .filter_map(|(_, p, _)| match p {
            Payload::TaskInterrupt(i) => Some(i),
            _ => None,
        })
        .collect()
}

fn acks(actions: &[TaskAction]) -> Vec<String> {
    sent(actions)
        .into_iter()
        .filter_map(|(_, p, _)| match p {
            Payload::Ack(a) => Some(a.ack_id),
            _ => None,
        })
        .collect()
}

fn handoff_msg(task: &str, state: &str, summary: &str) -> Payload {
    Payload::TaskHandoff(TaskHandoff {
        task_id: task.into(),
        state: state.into(),
        summary: summary.into(),
        artifacts: Vec::new(),
        git_ref: None,
        total_cost_usd: 0.25,
        total_tokens: 1200,
        model: None,
        usage: None,
        refused: false,
        verifications: Vec::new(),
    })
}

fn status_msg(task: &str, elapsed: u64) -> Payload {
    Payload::TaskStatus(TaskStatus {
        task_id: task.into(),
        state: "running".into(),
        stats: TaskStats {
            tokens_used: 10,
            cost_usd: 0.0,
            context_pct: 0u8.into(),
            files_modified: Vec::new(),
            elapsed_secs: Some(elapsed),
            last_activity: None,
        },
    })
}

fn delegate_msg(task: &str, agent: Option<&str>, cwd: Option<&str>) -> Payload {
    Payload::DelegateTask(DelegateTask {
        task_id: task.into(),
        prompt: "run the tests".into(),
        cwd: cwd.map(str::to_owned),
        context: TaskContext {
            git_remote: None,
            git_ref: None,
            git_commit: None,
            relevant_files: None,
            brain_context: None,
            dependency_graph: DependencyGraph {
                blocks: Vec::new(),
                blocked_by: Vec::new(),
            },
        },
        agent: agent.map(str::to_owned),
    })
}

impl Rig {
    fn link(&mut self, peer: &str, up: bool, v1: bool) {
        let now = self.clock.now();
        let terms = LinkTerms {
            agent_hub: v1,
            approvals: false,
        };
        self.book
            .handle_peer_link(peer, up, terms, now, &mut self.ids);
    }

    fn peer_says(&mut self, peer: &str, msg_id: &str, payload: Payload) {
        let now = self.clock.now();
        self.book
            .handle_peer_message(peer, msg_id, payload, now, &mut self.ids, &|_| false);
    }

    /// A peer's `delegate_task`, and the 2 s this hub holds its first report to a claudectl
    /// peer (`CLAUDECTL_REPORT_DELAY`): what the peer sees once it could take it.
    fn peer_delegates(&mut self, peer: &str, msg_id: &str, payload: Payload) {
        self.peer_says(peer, msg_id, payload);
        self.clock.advance_secs(CLAUDECTL_REPORT_DELAY.as_secs());
        self.tick();
    }

    fn tick(&mut self) {
        let now = self.clock.now();
        self.book.handle_timeout(now, &mut self.ids, &|_| false);
    }

    fn delegate_to_lab(&mut self) -> TaskId {
        let id = self.request(peer_request("codex")).expect("accepted");
        self.start_ready();
        id
    }
}

#[test]
fn a_task_for_a_peer_waits_for_its_link_and_goes_out_after_its_row() {
    let mut r = Rig::new(config());
    let id = r.request(peer_request("codex")).expect("accepted");
    let a = r.actions();
    assert!(
        sent(&a).is_empty(),
        "nothing goes out before the row's commit"
    );
    r.start_ready();
    assert!(sent(&r.actions()).is_empty(), "no link: it waits");
    assert_eq!(r.state(&id), "queued");
    r.link("lab", true, true);
    let a = r.actions();
    let d = delegates(&a);
    assert_eq!(d.len(), 1);
    assert_eq!(d[0].task_id, id.as_str());
    assert_eq!(d[0].prompt, "fix the build");
    assert_eq!(
        d[0].cwd.as_deref(),
        Some("/work/far/repo"),
        "normalised text"
    );
    assert_eq!(d[0].agent.as_deref(), Some("codex"), "v1 carries the agent");
    assert!(
        matches!(&a[0], TaskAction::Commit(c) if c.store.iter().any(|o| matches!(o, TaskStoreOp::State { state, .. } if state == "running"))),
        "the running state is committed before the message"
    );
    assert_eq!(r.state(&id), "running");
    assert!(started(&a).is_empty(), "no local runner for a peer's task");
    assert_eq!(
        r.book.active(),
        0,
        "the drain does not wait for a peer's task"
    );
    assert_eq!(r.book.slots_held(), 0);
}

#[test]
fn a_v0_peer_gets_no_agent_field_and_no_acks() {
    let mut r = Rig::new(config());
    r.link("lab", true, false);
    let id = r.delegate_to_lab();
    let a = r.actions();
    assert_eq!(
        delegates(&a)[0].agent,
        None,
        "claudectl 0.64 reads no agent"
    );
    r.peer_says(
        "lab",
        "m1",
        handoff_msg(id.as_str(), "completed", "all green"),
    );
    let a = r.actions();
    assert!(acks(&a).is_empty(), "a v0 peer is sent no ack");
    assert_eq!(envelopes(&a, OUTCOME_KIND).len(), 1);
}

#[test]
fn the_peers_handoff_is_the_outcome_and_a_v1_peer_is_acked() {
    let mut r = Rig::new(config());
    r.link("lab", true, true);
    let id = r.delegate_to_lab();
    r.actions();
    r.peer_says("lab", "s1", status_msg(id.as_str(), 4));
    assert!(r.actions().is_empty(), "no progress envelopes unless asked");
    let rec = r.book.status(id.as_str(), "mneme", r.clock.now());
    assert_eq!(rec.progress.unwrap().updates, 1);
    r.clock.advance_secs(5);
    r.peer_says(
        "lab",
        "h1",
        handoff_msg(id.as_str(), "completed", "all green"),
    );
    let a = r.actions();
    assert_eq!(acks(&a), vec!["h1".to_owned()]);
    let env = envelopes(&a, OUTCOME_KIND);
    assert_eq!(env.len(), 1);
    let b = body(env[0]);
    assert_eq!(b["state"], "completed");
    assert_eq!(b["text"], "all green");
    assert_eq!(b["peer"], "lab");
    assert_eq!(b["usage"]["totalTokens"], 1200);
    assert_eq!(b["cost"]["amount"], 0.25);
    assert_eq!(env[0].to, "mneme");
    assert_eq!(env[0].correlation_id.as_deref(), Some(id.as_str()));
    // A resend of the same handoff is acked again and changes nothing.
    r.peer_says("lab", "h2", handoff_msg(id.as_str(), "failed", "late"));
    let a = r.actions();
    assert_eq!(acks(&a), vec!["h2".to_owned()]);
    assert!(
        envelopes(&a, OUTCOME_KIND).is_empty(),
        "exactly one outcome"
    );
    assert_eq!(r.state(&id), "completed");
}

#[test]
fn messages_about_tasks_a_peer_was_not_given_change_nothing() {
    let mut r = Rig::new(config());
    r.link("lab", true, true);
    r.link("other", true, true);
    let id = r.delegate_to_lab();
    r.actions();
    // Another peer cannot settle or even touch it, and unknown ids are ignored.
    r.peer_says(
        "other",
        "x",
        handoff_msg(id.as_str(), "completed", "forged"),
    );
    r.peer_says(
        "lab",
        "y",
        handoff_msg("task-00000000000000000000000000000000", "completed", ""),
    );
    r.peer_says("lab", "z", handoff_msg("../../etc", "completed", ""));
    let a = r.actions();
    assert!(envelopes(&a, OUTCOME_KIND).is_empty());
    assert!(acks(&a).is_empty(), "nothing acked that is not ours");
    assert_eq!(r.state(&id), "running");
}

#[test]
fn a_link_that_drops_before_the_peer_answers_sends_the_task_again() {
    let mut r = Rig::new(config());
    r.link("lab", true, true);
    let id = r.delegate_to_lab();
    assert_eq!(delegates(&r.actions()).len(), 1);
    r.link("lab", false, false);
    r.link("lab", true, true);
    let d = delegates(&r.actions());
    assert_eq!(
        d.len(),
        1,
        "sent again: the peer ignores a task id it holds"
    );
    assert_eq!(d[0].task_id, id.as_str());
    // Once the peer answered for it, a dropped link sends nothing again.
    r.peer_says("lab", "s", status_msg(id.as_str(), 1));
    r.link("lab", false, false);
    r.link("lab", true, true);
    assert!(delegates(&r.actions()).is_empty());
    // A second link up without a drop between (a promotion) sends nothing either.
    let id2 = r.delegate_to_lab();
    assert_eq!(delegates(&r.actions()).len(), 1);
    r.link("lab", true, true);
    assert!(delegates(&r.actions()).is_empty());
    assert_eq!(r.state(&id2), "running");
}

#[test]
fn cancel_at_a_peer_is_an_interrupt_and_its_failed_handoff_is_cancelled() {
    let mut r = Rig::new(config());
    r.link("lab", true, true);
    let id = r.delegate_to_lab();
    r.actions();
    assert_eq!(r.cancel(&id, "mneme"), "cancelling");
    let a = r.actions();
    let i = interrupts(&a);
    assert_eq!(i.len(), 1);
    assert_eq!(i[0].interrupt_type, "stop");
    assert_eq!(i[0].task_id, id.as_str());
    assert!(cancels(&a).is_empty(), "no local runner to cancel");
    r.peer_says(
        "lab",
        "h",
        handoff_msg(id.as_str(), "failed", "Stopped by controller"),
    );
    let a = r.actions();
    let b = body(envelopes(&a, OUTCOME_KIND)[0]);
    assert_eq!(b["state"], "cancelled");
    assert_eq!(r.state(&id), "cancelled");
}

#[test]
fn a_cancel_the_peer_never_answers_ends_after_the_grace() {
    let mut r = Rig::new(config());
    r.link("lab", true, true);
    let id = r.delegate_to_lab();
    r.actions();
    r.cancel(&id, "mneme");
    r.actions();
    r.clock.advance_secs(CANCEL_GRACE.as_secs() - 1);
    r.tick();
    assert_eq!(r.state(&id), "cancelling");
    r.clock.advance_secs(1);
    assert!(r
        .book
        .poll_timeout()
        .is_some_and(|t| t <= r.clock.now().mono));
    r.tick();
    let a = r.actions();
    let b = body(envelopes(&a, OUTCOME_KIND)[0]);
    assert_eq!(b["state"], "cancelled");
    assert!(b["reason"].as_str().unwrap().contains("did not answer"));
}

#[test]
fn cancel_without_a_link_ends_at_once_and_says_the_peer_may_still_run_it() {
    let mut r = Rig::new(config());
    r.link("lab", true, true);
    let id = r.delegate_to_lab();
    r.peer_says("lab", "s", status_msg(id.as_str(), 1));
    r.link("lab", false, false);
    r.actions();
    assert_eq!(r.cancel(&id, "mneme"), "cancelled");
    let a = r.actions();
    assert!(interrupts(&a).is_empty());
    let b = body(envelopes(&a, OUTCOME_KIND)[0]);
    assert!(b["reason"].as_str().unwrap().contains("may still run"));
    // A queued task for a peer (never sent) is simply cancelled.
    let q = r.request(peer_request("codex")).unwrap();
    r.start_ready();
    assert_eq!(r.cancel(&q, "mneme"), "cancelled");
    r.link("lab", true, true);
    assert!(
        delegates(&r.actions()).is_empty(),
        "a cancelled task never goes out"
    );
}

#[test]
fn the_delegators_timeout_stops_the_peer_and_times_the_task_out() {
    let mut r = Rig::new(config());
    r.link("lab", true, true);
    let id = r
        .request(DelegateRequest {
            timeout_secs: Some(60),
            ..peer_request("codex")
        })
        .unwrap();
    r.start_ready();
    r.actions();
    r.clock.advance_secs(59);
    r.tick();
    assert_eq!(r.state(&id), "running");
    r.clock.advance_secs(1);
    r.tick();
    let a = r.actions();
    assert_eq!(interrupts(&a).len(), 1);
    let b = body(envelopes(&a, OUTCOME_KIND)[0]);
    assert_eq!(b["state"], "timed_out");
    // Its late handoff changes nothing.
    r.peer_says("lab", "h", handoff_msg(id.as_str(), "completed", "late"));
    assert!(envelopes(&r.actions(), OUTCOME_KIND).is_empty());
}

#[test]
fn a_peers_cwd_is_checked_for_shape_only_and_unknown_peers_are_refused() {
    let mut r = Rig::new(config());
    assert_eq!(
        r.request(DelegateRequest {
            cwd: "relative".into(),
            ..peer_request("codex")
        }),
        Err(DelegateRefusal::CwdNotAbsolute)
    );
    assert_eq!(
        r.request(DelegateRequest {
            peer: Some("nowhere".into()),
            ..peer_request("codex")
        }),
        Err(DelegateRefusal::UnknownPeer)
    );
    assert_eq!(
        r.request(peer_request("../bin/sh")),
        Err(DelegateRefusal::InvalidAgentName)
    );
    // An agent this hub cannot run may be run by the peer.
    assert!(r.request(peer_request("gemini")).is_ok());
}

#[test]
fn peer_tasks_waiting_for_a_link_are_capped_by_queue_max() {
    let mut r = Rig::new(config());
    for _ in 0..3 {
        r.request(peer_request("codex")).unwrap();
    }
    assert_eq!(
        r.request(peer_request("codex")),
        Err(DelegateRefusal::QueueFull { queue_max: 3 })
    );
}

// ----- worker side -----

fn worker() -> Rig {
    let mut r = Rig::new(config());
    r.book.set_accept_from(["lab".to_owned()]);
    r
}

fn origin_task(r: &Rig, remote: &str) -> TaskId {
    let delegator = Origin {
        peer: "lab".into(),
        task_id: remote.into(),
    }
    .delegator();
    r.book
        .tasks
        .values()
        .find(|t| t.delegator == delegator)
        .map(|t| t.id.clone())
        .expect("a task for it")
}

#[test]
fn a_peer_not_allowed_to_delegate_gets_a_failed_handoff_and_no_task() {
    let mut r = Rig::new(config());
    r.link("lab", true, false);
    r.peer_delegates(
        "lab",
        "d",
        delegate_msg("ext-1", Some("codex"), Some("/srv/root/app")),
    );
    let a = r.actions();
    let h = handoffs(&a);
    assert_eq!(h.len(), 1);
    assert_eq!(h[0].task_id, "ext-1");
    assert_eq!(h[0].state, "failed");
    assert!(h[0]
        .summary
        .contains("does not take delegated work from lab"));
    assert!(r.book.tasks.is_empty());
    assert!(started(&a).is_empty());
}

#[test]
fn a_peers_task_runs_here_and_is_answered_in_the_v0_shapes() {
    let mut r = worker();
    r.link("lab", true, false);
    r.peer_delegates(
        "lab",
        "d",
        delegate_msg("ext-1", None, Some("/srv/root/app")),
    );
    let a = r.actions();
    let s = statuses(&a);
    assert_eq!(s.len(), 1, "task_status running at once");
    assert_eq!(s[0].task_id, "ext-1");
    assert_eq!(s[0].state, "running");
    let id = origin_task(&r, "ext-1");
    r.start_ready();
    let a = r.actions();
    let spec = match a.iter().find_map(|x| match x {
        TaskAction::Start(s) => Some(s.clone()),
        _ => None,
    }) {
        Some(s) => s,
        None => panic!("started: {a:?}"),
    };
    assert_eq!(spec.agent, "claude", "the seed's default agent");
    assert_eq!(spec.peer, None, "it runs here");
    // Periodic statuses while it runs.
    r.clock.advance_secs(30);
    r.tick();
    let s = statuses(&r.actions());
    assert_eq!(s.len(), 1);
    assert_eq!(s[0].stats.elapsed_secs, Some(30));
    // Its outcome is a handoff, not an envelope; the commit has the final state.
    r.event(&id, completed());
    let a = r.actions();
    assert!(envelopes(&a, OUTCOME_KIND).is_empty());
    let h = handoffs(&a);
    assert_eq!(h.len(), 1);
    assert_eq!(h[0].state, "completed");
    assert_eq!(h[0].summary, "done");
    assert!(sent(&a)
        .iter()
        .all(|(p, _, handoff)| p == "lab" && handoff.as_deref() == Some("ext-1")));
    // No status after the end.
    r.clock.advance_secs(60);
    r.tick();
    assert!(statuses(&r.actions()).is_empty());
    // The peer's delegator sees nothing of it: its delegator is no roster name.
    assert_eq!(r.state(&id), "unknown");
}

#[test]
fn a_v0_handoff_is_sent_again_if_its_link_drops_within_the_grace() {
    let mut r = worker();
    r.link("lab", true, false);
    r.peer_delegates(
        "lab",
        "d",
        delegate_msg("ext-1", Some("codex"), Some("/srv/root/app")),
    );
    let id = origin_task(&r, "ext-1");
    r.start_ready();
    r.event(&id, completed());
    r.actions();
    assert_eq!(r.book.pending_handoffs("lab"), 1);
    r.link("lab", false, false);
    r.link("lab", true, false);
    assert_eq!(
        handoffs(&r.actions()).len(),
        1,
        "sent again on the new link"
    );
    r.clock.advance_secs(V0_HANDOFF_GRACE.as_secs());
    r.tick();
    assert_eq!(r.book.pending_handoffs("lab"), 0, "taken as received");
    r.link("lab", false, false);
    r.link("lab", true, false);
    assert!(handoffs(&r.actions()).is_empty());
}

#[test]
fn a_v1_handoff_is_kept_until_acked() {
    let mut r = worker();
    r.link("lab", true, true);
    r.peer_says(
        "lab",
        "d",
        delegate_msg("ext-1", Some("codex"), Some("/srv/root/app")),
    );
    let id = origin_task(&r, "ext-1");
    r.start_ready();
    r.event(&id, completed());
    r.actions();
    r.clock.advance_secs(3600);
    r.tick();
    assert_eq!(r.book.pending_handoffs("lab"), 1, "no grace for a v1 peer");
    r.link("lab", false, false);
    r.link("lab", true, true);
    assert_eq!(handoffs(&r.actions()).len(), 1);
    // A new link with no drop reported between (the link moved to the peer's second
    // connection) sends it again too.
    r.link("lab", true, true);
    assert_eq!(handoffs(&r.actions()).len(), 1);
    r.book.handle_peer_acked("lab", "ext-1");
    assert_eq!(r.book.pending_handoffs("lab"), 0);
    r.link("lab", true, true);
    assert!(handoffs(&r.actions()).is_empty());
}

#[test]
fn stop_from_the_peer_cancels_and_is_answered_stopped_by_controller() {
    let mut r = worker();
    r.link("lab", true, false);
    r.peer_delegates(
        "lab",
        "d",
        delegate_msg("ext-1", Some("codex"), Some("/srv/root/app")),
    );
    let id = origin_task(&r, "ext-1");
    r.start_ready();
    r.actions();
    // A nudge is answered with a status; another peer's stop is ignored.
    let nudge = Payload::TaskInterrupt(TaskInterrupt {
        task_id: "ext-1".into(),
        interrupt_type: "nudge".into(),
        reason: "how is it going".into(),
    });
    r.peer_says("lab", "n", nudge);
    assert_eq!(statuses(&r.actions()).len(), 1);
    let stop = |reason: &str| {
        Payload::TaskInterrupt(TaskInterrupt {
            task_id: "ext-1".into(),
            interrupt_type: "stop".into(),
            reason: reason.into(),
        })
    };
    r.peer_says("other", "x", stop("forged"));
    assert!(cancels(&r.actions()).is_empty());
    r.peer_says("lab", "s", stop("user asked"));
    assert_eq!(cancels(&r.actions()), vec![id.clone()]);
    r.event(
        &id,
        outcome(
            Status::Cancelled {
                end: CancelEnd::Stopped(StopReason::Cancelled),
            },
            "",
        ),
    );
    let h = handoffs(&r.actions());
    assert_eq!(h.len(), 1);
    assert_eq!(h[0].state, "failed");
    assert_eq!(h[0].summary, STOPPED_BY_CONTROLLER);
}

#[test]
fn a_resent_delegate_task_runs_once_and_refusals_are_handoffs() {
    let mut r = worker();
    r.link("lab", true, false);
    r.peer_delegates(
        "lab",
        "d1",
        delegate_msg("ext-1", Some("codex"), Some("/srv/root/app")),
    );
    r.peer_delegates(
        "lab",
        "d2",
        delegate_msg("ext-1", Some("codex"), Some("/srv/root/app")),
    );
    assert_eq!(r.book.tasks.len(), 1);
    r.actions();
    // Outside the roots, an agent not installed, a hostile task id.
    r.peer_delegates(
        "lab",
        "d3",
        delegate_msg("ext-2", Some("codex"), Some("/etc")),
    );
    r.peer_delegates(
        "lab",
        "d4",
        delegate_msg("ext-3", Some("nope"), Some("/srv/root/app")),
    );
    r.peer_delegates(
        "lab",
        "d5",
        delegate_msg("a b\n", Some("codex"), Some("/srv/root/app")),
    );
    let a = r.actions();
    let h = handoffs(&a);
    assert_eq!(h.len(), 2, "{h:?}");
    assert!(h
        .iter()
        .all(|h| h.state == "failed" && h.refused && h.summary.starts_with(COULD_NOT_START)));
    assert_eq!(r.book.tasks.len(), 1);
    // No cwd: the first root.
    r.peer_delegates("lab", "d6", delegate_msg("ext-4", Some("codex"), None));
    let id = origin_task(&r, "ext-4");
    assert_eq!(r.book.tasks[&id].cwd, PathBuf::from("/srv/root"));
}

#[test]
fn a_restart_keeps_peer_tasks_and_reports_a_peers_running_task_as_restarted() {
    let mut r = worker();
    let ours = "task-0000000000000000000000000000000a";
    let theirs = "task-0000000000000000000000000000000b";
    let rows = vec![
        StoredTask {
            seq: 1,
            task: ours.into(),
            delegator: "mneme".into(),
            agent: "codex".into(),
            peer: Some("lab".into()),
            cwd: "/work/repo".into(),
            prompt: "p".into(),
            timeout_secs: 100,
            state: "running".into(),
            started_ms: Some(r.clock.now().wall.timestamp_millis() - 40_000),
            ..StoredTask::default()
        },
        StoredTask {
            seq: 2,
            task: theirs.into(),
            delegator: Origin {
                peer: "lab".into(),
                task_id: "ext-9".into(),
            }
            .delegator(),
            agent: "codex".into(),
            cwd: "/srv/root/app".into(),
            timeout_secs: 100,
            state: "running".into(),
            ..StoredTask::default()
        },
    ];
    let now = r.clock.now();
    r.book.restore(rows, Vec::new(), now, &mut r.ids);
    r.actions();
    let ours = TaskId::parse(ours).unwrap();
    assert_eq!(r.state(&ours), "running", "still running at the peer");
    r.link("lab", true, false);
    let a = r.actions();
    assert_eq!(delegates(&a).len(), 1, "told again");
    let h = handoffs(&a);
    assert_eq!(h.len(), 1);
    assert_eq!(h[0].task_id, "ext-9");
    assert!(h[0].summary.contains("hub_restarted"));
    // The timeout counts from the start before the restart: 60 s are left.
    r.clock.advance_secs(60);
    r.tick();
    let a = r.actions();
    assert_eq!(body(envelopes(&a, OUTCOME_KIND)[0])["state"], "timed_out");
}

#[test]
fn origins_round_trip_and_hostile_ones_do_not_parse() {
    let o = Origin {
        peer: "lab-2".into(),
        task_id: "4f1c:aa".into(),
    };
    assert_eq!(Origin::parse(&o.delegator()), Some(o));
    for bad in [
        "mneme",
        "task-from:",
        "task-from:lab",
        "task-from:la b:x",
        "task-from:lab:",
        "task-from:lab:x y",
    ] {
        assert_eq!(Origin::parse(bad), None, "{bad}");
    }
    assert!(is_task_name("task-from:lab:x"), "in the reserved namespace");
    assert!(!valid_remote_task_id(&"x".repeat(129)));
}

#[test]
fn a_task_whose_peer_never_links_times_out_instead_of_waiting_forever() {
    let mut r = Rig::new(config());
    let id = r
        .request(DelegateRequest {
            timeout_secs: Some(120),
            ..peer_request("codex")
        })
        .unwrap();
    r.start_ready();
    r.actions();
    r.clock.advance_secs(119);
    r.tick();
    assert_eq!(r.state(&id), "queued");
    r.clock.advance_secs(1);
    r.tick();
    let a = r.actions();
    let b = body(envelopes(&a, OUTCOME_KIND)[0]);
    assert_eq!(b["state"], "timed_out");
    assert!(
        b["reason"].as_str().unwrap().contains("was not linked"),
        "{b}"
    );
    r.link("lab", true, true);
    assert!(delegates(&r.actions()).is_empty(), "it never goes out");
}

#[test]
fn a_peer_flooding_bogus_task_messages_costs_the_log_a_bounded_number_of_lines() {
    let mut r = worker();
    r.link("lab", true, true);
    for i in 0..10_000 {
        r.peer_says("lab", "x", status_msg(&format!("task-{i:032x}"), 1));
    }
    let logs = |a: &[TaskAction]| a.iter().filter(|x| matches!(x, TaskAction::Log(_))).count();
    let a = r.actions();
    assert_eq!(logs(&a), PEER_LOG_BURST as usize, "a burst, then nothing");
    r.clock.advance_secs(PEER_LOG_REFILL.as_secs());
    r.peer_says(
        "lab",
        "x",
        status_msg("task-00000000000000000000000000000001", 1),
    );
    let a = r.actions();
    let lines: Vec<&String> = a
        .iter()
        .filter_map(|x| match x {
            TaskAction::Log(l) => Some(l),
            _ => None,
        })
        .collect();
    assert_eq!(lines.len(), 1);
    assert!(lines[0].contains("9990 more such lines"), "{}", lines[0]);
    // Another peer has its own budget.
    r.link("other", true, true);
    r.peer_says(
        "other",
        "y",
        status_msg("task-00000000000000000000000000000002", 1),
    );
    assert_eq!(logs(&r.actions()), 1);
}

// ----- claudectl 0.92's semantics (issue 28; docs/delegation.md "Across hubs") -----

/// A handoff as claudectl 0.92.4 writes it (relay-compat-0.92.md §5), parsed from its JSON
/// as the relay would hand it over.
fn handoff_092(payload: Value) -> Payload {
    Payload::parse(&crate::relay::MsgType::TaskHandoff, &payload).expect("a task_handoff")
}

fn refused_092(task: &str, why: &str) -> Payload {
    handoff_092(serde_json::json!({
        "task_id": task, "state": "failed", "summary": format!("Could not start the task: {why}"),
        "artifacts": [], "total_cost_usd": 0.0, "total_tokens": 0, "model": null,
        "usage": {"input_tokens": 0, "output_tokens": 0}, "refused": true,
    }))
}

fn verification(command: &str, passed: bool, output: &str) -> Value {
    serde_json::json!({"command": command, "passed": passed, "output": output})
}

fn outcome_body(a: &[TaskAction]) -> Value {
    let env = envelopes(a, OUTCOME_KIND);
    assert_eq!(env.len(), 1, "exactly one outcome: {a:?}");
    body(env[0])
}

#[test]
fn a_092_refusal_settles_the_task_refused_with_its_summary_as_the_reason() {
    let mut r = Rig::new(config());
    // A claudectl 0.92 link is not v1 here (it acks nothing), whatever its proto.
    r.link("lab", true, false);
    let id = r.delegate_to_lab();
    r.actions();
    // No task_status first: 0.92 refuses before it accepts.
    let why = "working directory does not exist on this host: /work/far/repo";
    r.peer_says("lab", "h", refused_092(id.as_str(), why));
    let a = r.actions();
    assert!(acks(&a).is_empty(), "claudectl is sent no ack");
    let b = outcome_body(&a);
    assert_eq!(b["state"], "refused");
    assert_eq!(b["reason"], format!("Could not start the task: {why}"));
    assert_eq!(b["text"], "", "a task that never ran has no text");
    assert_eq!(b["peer"], "lab");
    assert!(b.get("usage").is_none() && b.get("cost").is_none(), "{b}");
    assert!(b.get("gitRef").is_none() && b.get("verifications").is_none());
    assert_eq!(r.state(&id), "refused");
    // Settled is final: a second word from the peer changes nothing.
    r.peer_says("lab", "h2", handoff_msg(id.as_str(), "completed", "late"));
    assert!(envelopes(&r.actions(), OUTCOME_KIND).is_empty());
    assert_eq!(r.state(&id), "refused");
}

#[test]
fn a_failed_handoff_carries_the_peers_summary_as_text() {
    let mut r = Rig::new(config());
    r.link("lab", true, false);
    let id = r.delegate_to_lab();
    r.actions();
    r.peer_says(
        "lab",
        "h",
        handoff_msg(id.as_str(), "failed", "tests broke"),
    );
    let b = outcome_body(&r.actions());
    assert_eq!(b["state"], "failed");
    assert_eq!(b["text"], "tests broke");
    assert_eq!(b["reason"], "lab reported the task failed");
}

#[test]
fn a_refused_flag_on_a_completed_handoff_is_no_refusal() {
    let mut r = Rig::new(config());
    r.link("lab", true, false);
    let id = r.delegate_to_lab();
    r.actions();
    let h = handoff_092(serde_json::json!({
        "task_id": id.as_str(), "state": "completed", "summary": "all green", "artifacts": [],
        "total_cost_usd": 0.0, "total_tokens": 0, "refused": true,
    }));
    r.peer_says("lab", "h", h);
    let b = outcome_body(&r.actions());
    assert_eq!(b["state"], "completed", "refused refines a failure only");
    assert_eq!(b["text"], "all green");
}

#[test]
fn a_refusal_that_answers_a_cancel_is_refused() {
    let mut r = Rig::new(config());
    r.link("lab", true, false);
    let id = r.delegate_to_lab();
    r.actions();
    assert_eq!(r.cancel(&id, "mneme"), "cancelling");
    r.actions();
    r.peer_says(
        "lab",
        "h",
        refused_092(id.as_str(), "task x already exists"),
    );
    let b = outcome_body(&r.actions());
    assert_eq!(
        b["state"], "refused",
        "it never ran there: the peer's word decides"
    );
}

#[test]
fn a_peers_git_ref_and_verifications_reach_the_outcome() {
    let mut r = Rig::new(config());
    r.link("lab", true, false);
    let id = r.delegate_to_lab();
    r.actions();
    let h = handoff_092(serde_json::json!({
        "task_id": id.as_str(), "state": "completed", "summary": "fixed", "artifacts": [],
        "total_cost_usd": 0.12, "total_tokens": 4000, "model": "claude-sonnet-4-5",
        "usage": {"input_tokens": 3000, "output_tokens": 1000},
        "git_ref": "claudectl/delegated-task-1",
        "verifications": [
            verification("cargo build", true, "Finished"),
            verification("cargo test", true, "ok. 12 passed"),
        ],
    }));
    r.peer_says("lab", "h", h);
    let b = outcome_body(&r.actions());
    assert_eq!(b["state"], "completed");
    assert_eq!(b["gitRef"], "claudectl/delegated-task-1");
    assert_eq!(
        b["verifications"],
        serde_json::json!([
            {"command": "cargo build", "passed": true, "output": "Finished"},
            {"command": "cargo test", "passed": true, "output": "ok. 12 passed"},
        ])
    );
    assert!(b.get("verificationsOmitted").is_none());
    assert_eq!(b["usage"]["totalTokens"], 4000);
    // Without them, no such keys.
    let id = r.delegate_to_lab();
    r.actions();
    r.peer_says("lab", "h2", handoff_msg(id.as_str(), "completed", "fixed"));
    let b = outcome_body(&r.actions());
    assert!(
        b.get("gitRef").is_none() && b.get("verifications").is_none(),
        "{b}"
    );
}

#[test]
fn the_outcome_body_keeps_the_documented_key_order() {
    let mut r = Rig::new(config());
    r.link("lab", true, false);
    let id = r.delegate_to_lab();
    r.actions();
    let h = handoff_092(serde_json::json!({
        "task_id": id.as_str(), "state": "failed", "summary": "a check failed", "artifacts": [],
        "total_cost_usd": 0.5, "total_tokens": 10, "git_ref": "b",
        "verifications": [verification("make", false, "error")],
    }));
    r.peer_says("lab", "h", h);
    let a = r.actions();
    let env = envelopes(&a, OUTCOME_KIND);
    let raw = env[0].body.get();
    let at = |k: &str| {
        raw.find(&format!("\"{k}\""))
            .unwrap_or_else(|| panic!("{k} in {raw}"))
    };
    let order = [
        "task",
        "agent",
        "peer",
        "state",
        "text",
        "truncated",
        "reason",
        "elapsedMs",
        "usage",
        "cost",
        "gitRef",
        "verifications",
    ];
    for w in order.windows(2) {
        assert!(at(w[0]) < at(w[1]), "{} before {} in {raw}", w[0], w[1]);
    }
}

#[test]
fn a_huge_verifications_list_is_bounded_and_keeps_the_last_check() {
    let mut r = Rig::new(config());
    r.link("lab", true, false);
    let id = r.delegate_to_lab();
    r.actions();
    // 1000 checks, each with 8 KiB of output ending in a marker, a 5000-byte command, and a
    // multi-byte character where the output's cut falls; the last one failed.
    let out = |i: usize| format!("{}é{}end-{i}", "x".repeat(8192 - 4096), "y".repeat(4089));
    let mut list: Vec<Value> = (0..999)
        .map(|i| verification(&"c".repeat(5000), true, &out(i)))
        .collect();
    list.push(verification("cargo test", false, &out(999)));
    let h = handoff_092(serde_json::json!({
        "task_id": id.as_str(), "state": "failed", "summary": "a check failed", "artifacts": [],
        "total_cost_usd": 0.0, "total_tokens": 0, "git_ref": "claudectl/delegated-x",
        "verifications": list,
    }));
    r.peer_says("lab", "h", h);
    let b = outcome_body(&r.actions());
    let v = b["verifications"].as_array().unwrap();
    assert_eq!(v.len(), MAX_VERIFICATIONS);
    assert_eq!(b["verificationsOmitted"], 1000 - MAX_VERIFICATIONS);
    let last = &v[MAX_VERIFICATIONS - 1];
    assert_eq!(last["command"], "cargo test");
    assert_eq!(last["passed"], false);
    assert!(last["output"].as_str().unwrap().ends_with("end-999"));
    assert!(v[MAX_VERIFICATIONS - 2]["output"]
        .as_str()
        .unwrap()
        .ends_with(&format!("end-{}", MAX_VERIFICATIONS - 2)));
    for e in v {
        let o = e["output"].as_str().unwrap();
        assert!(o.len() <= VERIFICATION_OUTPUT_MAX_BYTES, "{}", o.len());
        assert!(!o.starts_with('x'), "the end is kept, not the start");
        assert!(e["command"].as_str().unwrap().len() <= VERIFICATION_COMMAND_MAX_BYTES);
    }
    assert!(
        v[0]["output"].as_str().unwrap().ends_with("end-0"),
        "the first checks stay in order"
    );
}

#[test]
fn a_hostile_git_ref_and_summary_are_bounded() {
    let mut r = Rig::new(config());
    r.link("lab", true, false);
    let a_id = r.delegate_to_lab();
    let b_id = r.delegate_to_lab();
    r.actions();
    let long_ref = "r".repeat(GIT_REF_MAX_BYTES + 1);
    let h = handoff_092(serde_json::json!({
        "task_id": a_id.as_str(), "state": "failed", "refused": true,
        "summary": format!("Could not start\nthe task:\u{1b}[2J {}", "w".repeat(10_000)),
        "artifacts": [], "total_cost_usd": 0.0, "total_tokens": 0, "git_ref": long_ref,
    }));
    r.peer_says("lab", "h1", h);
    let b = outcome_body(&r.actions());
    assert!(
        b.get("gitRef").is_none(),
        "a ref too long is left out, not cut"
    );
    let reason = b["reason"].as_str().unwrap();
    assert!(reason.len() <= PEER_REASON_MAX_BYTES);
    assert!(
        reason.starts_with("Could not start the task: [2J"),
        "{reason}"
    );
    assert!(!reason.chars().any(char::is_control), "{reason:?}");
    let h = handoff_092(serde_json::json!({
        "task_id": b_id.as_str(), "state": "completed", "summary": "ok", "artifacts": [],
        "total_cost_usd": 0.0, "total_tokens": 0, "git_ref": "main\nrm -rf /",
    }));
    r.peer_says("lab", "h2", h);
    let b = outcome_body(&r.actions());
    assert!(
        b.get("gitRef").is_none(),
        "a ref with a control character is left out"
    );
}

#[test]
fn a_wrong_typed_refused_or_verifications_loses_no_handoff() {
    let mut r = Rig::new(config());
    r.link("lab", true, false);
    let ids: Vec<TaskId> = (0..3).map(|_| r.delegate_to_lab()).collect();
    r.actions();
    let base = |id: &TaskId| {
        serde_json::json!({
            "task_id": id.as_str(), "state": "failed", "summary": "boom", "artifacts": [],
            "total_cost_usd": 0.0, "total_tokens": 0,
        })
    };
    // `refused` that is not JSON true: no refusal, the handoff still settles the task.
    let mut h = base(&ids[0]);
    h["refused"] = serde_json::json!("true");
    h["verifications"] = serde_json::json!("cargo test passed");
    r.peer_says("lab", "h0", handoff_092(h));
    let b = outcome_body(&r.actions());
    assert_eq!(b["state"], "failed");
    assert!(b.get("verifications").is_none());
    let mut h = base(&ids[1]);
    h["refused"] = serde_json::json!(1);
    h["verifications"] = serde_json::json!([
        {"command": 7, "passed": true, "output": ""},
        {"command": "make", "passed": "yes", "output": ""},
        "make",
        null,
        {"command": "make check", "passed": false, "output": "1 failed"},
    ]);
    r.peer_says("lab", "h1", handoff_092(h));
    let b = outcome_body(&r.actions());
    assert_eq!(b["state"], "failed");
    assert_eq!(
        b["verifications"],
        serde_json::json!([{"command": "make check", "passed": false, "output": "1 failed"}]),
        "only the well-formed entries"
    );
    let mut h = base(&ids[2]);
    h["refused"] = Value::Null;
    r.peer_says("lab", "h2", handoff_092(h));
    assert_eq!(outcome_body(&r.actions())["state"], "failed");
}

#[test]
fn a_forged_refusal_from_another_peer_settles_nothing() {
    let mut r = Rig::new(config());
    r.book.set_peers(["lab".to_owned(), "other".to_owned()]);
    r.link("lab", true, true);
    r.link("other", true, false);
    let id = r.delegate_to_lab();
    r.actions();
    r.peer_says("other", "x1", refused_092(id.as_str(), "nope"));
    let mut forged = handoff_msg(id.as_str(), "completed", "forged");
    if let Payload::TaskHandoff(h) = &mut forged {
        h.git_ref = Some("evil".into());
    }
    r.peer_says("other", "x2", forged);
    let a = r.actions();
    assert!(envelopes(&a, OUTCOME_KIND).is_empty());
    assert!(sent(&a).is_empty(), "nothing is sent to either peer: {a:?}");
    assert_eq!(r.state(&id), "running");
    // The real peer's handoff still settles it, with its own words.
    r.peer_says("lab", "h", handoff_msg(id.as_str(), "completed", "real"));
    let a = r.actions();
    assert_eq!(acks(&a), vec!["h".to_owned()], "an agent-hub peer is acked");
    let b = outcome_body(&a);
    assert_eq!(b["text"], "real");
    assert!(b.get("gitRef").is_none());
}

// ----- worker side, 0.92's semantics -----

fn delegate_prompt(task: &str, cwd: Option<&str>, prompt: &str) -> Payload {
    let mut p = delegate_msg(task, Some("codex"), cwd);
    if let Payload::DelegateTask(d) = &mut p {
        d.prompt = prompt.into();
    }
    p
}

/// A refusal as claudectl 0.92 sends one: one failed `refused: true` handoff and nothing
/// before it; the rest of the shape as for any handoff.
fn assert_refused(a: &[TaskAction], task: &str, says: &str) {
    assert!(
        statuses(a).is_empty(),
        "no task_status before a refusal: {a:?}"
    );
    let h = handoffs(a);
    assert_eq!(h.len(), 1, "{a:?}");
    let h = &h[0];
    assert_eq!(h.task_id, task);
    assert_eq!(h.state, "failed");
    assert!(h.refused);
    assert!(h.summary.starts_with(COULD_NOT_START), "{}", h.summary);
    assert!(h.summary.contains(says), "{} lacks {says}", h.summary);
    let v = Payload::TaskHandoff(h.clone()).to_value();
    assert_eq!(v["refused"], true);
    assert_eq!(v["artifacts"], serde_json::json!([]));
    assert_eq!(v["git_ref"], Value::Null);
    assert!(v.as_object().unwrap().contains_key("git_ref"));
    assert_eq!(v["total_tokens"], 0);
    assert_eq!(v["total_cost_usd"], 0.0);
    assert!(v.get("verifications").is_none());
}

#[test]
fn every_refusal_here_is_one_refused_handoff_with_no_status_first() {
    let mut r = Rig::new(config());
    r.link("lab", true, false);
    r.peer_delegates(
        "lab",
        "d0",
        delegate_msg("ext-0", Some("codex"), Some("/srv/root/app")),
    );
    assert_refused(
        &r.actions(),
        "ext-0",
        "does not take delegated work from lab",
    );
    let mut r = worker();
    r.link("lab", true, false);
    r.peer_delegates(
        "lab",
        "d1",
        delegate_msg("ext-1", Some("nope"), Some("/srv/root/app")),
    );
    assert_refused(&r.actions(), "ext-1", "unknown agent");
    r.peer_delegates(
        "lab",
        "d2",
        delegate_msg("ext-2", Some("codex"), Some("/etc")),
    );
    assert_refused(
        &r.actions(),
        "ext-2",
        "cwd is under none of tasks.cwd_roots",
    );
    r.peer_delegates("lab", "d3", delegate_prompt("ext-3", Some("/srv/root"), ""));
    assert_refused(&r.actions(), "ext-3", "prompt must not be empty");
    r.peer_delegates(
        "lab",
        "d4",
        delegate_prompt("ext-4", Some("/srv/root"), &"p".repeat(101)),
    );
    assert_refused(&r.actions(), "ext-4", "over tasks.prompt_max_bytes");
    // Queue full: two slots and three waiting places.
    for i in 0..5 {
        r.peer_delegates(
            "lab",
            "q",
            delegate_msg(&format!("q-{i}"), Some("codex"), None),
        );
    }
    r.actions();
    r.peer_delegates("lab", "d5", delegate_msg("ext-5", Some("codex"), None));
    assert_refused(&r.actions(), "ext-5", "the task queue is full");
    // No cwd and no roots to default to.
    let mut r = Rig::new(BookConfig {
        cwd_roots: Vec::new(),
        ..config()
    });
    r.book.set_accept_from(["lab".to_owned()]);
    r.link("lab", true, false);
    r.peer_delegates("lab", "d6", delegate_msg("ext-6", Some("codex"), None));
    assert_refused(&r.actions(), "ext-6", "no cwd given");
    // A refusal made without a link goes out once the link is up.
    let mut r = Rig::new(config());
    r.peer_delegates(
        "lab",
        "d7",
        delegate_msg("ext-7", Some("codex"), Some("/srv/root")),
    );
    assert!(handoffs(&r.actions()).is_empty());
    r.link("lab", true, false);
    assert_refused(&r.actions(), "ext-7", "does not take delegated work");
}

#[test]
fn a_task_that_cannot_start_before_any_process_ran_is_answered_refused() {
    let mut r = worker();
    r.link("lab", true, false);
    r.peer_delegates(
        "lab",
        "d",
        delegate_msg("ext-1", Some("codex"), Some("/srv/root/app")),
    );
    r.peer_delegates(
        "lab",
        "e",
        delegate_msg("ext-2", Some("codex"), Some("/srv/root/app")),
    );
    let one = origin_task(&r, "ext-1");
    let two = origin_task(&r, "ext-2");
    r.start_ready();
    r.actions();
    // The runner's filesystem check of the cwd fails: no process was started.
    r.event(
        &one,
        outcome(Status::Refused(Refusal::Invalid("cwd vanished".into())), ""),
    );
    let h = handoffs(&r.actions());
    assert_eq!(h.len(), 1);
    assert!(h[0].refused);
    assert_eq!(h[0].state, "failed");
    assert!(
        h[0].summary.starts_with(COULD_NOT_START),
        "{}",
        h[0].summary
    );
    assert!(h[0].summary.ends_with("cwd vanished"), "{}", h[0].summary);
    assert_eq!((h[0].total_tokens, h[0].total_cost_usd), (0, 0.0));
    // An agent that started and then refused (not logged in) did run: no `refused`, the
    // usual failed summary.
    r.event(&two, TaskEvent::Started { pid: 4242 });
    r.event(
        &two,
        outcome(
            Status::Refused(Refusal::UnsupportedProtocol {
                version: "9".into(),
            }),
            "",
        ),
    );
    let h = handoffs(&r.actions());
    assert_eq!(h.len(), 1);
    assert!(!h[0].refused);
    assert!(h[0].summary.starts_with("refused: "), "{}", h[0].summary);
    assert!(!Payload::TaskHandoff(h[0].clone())
        .to_value()
        .as_object()
        .unwrap()
        .contains_key("refused"));
}

#[test]
fn a_spawn_failure_is_refused_and_a_stop_before_the_start_is_stopped_by_controller() {
    let mut r = worker();
    r.link("lab", true, false);
    r.peer_delegates(
        "lab",
        "d",
        delegate_msg("ext-1", Some("codex"), Some("/srv/root/app")),
    );
    let one = origin_task(&r, "ext-1");
    r.start_ready();
    r.actions();
    r.event(
        &one,
        outcome(Status::Failed(Failure::Spawn("no such file".into())), ""),
    );
    let h = handoffs(&r.actions());
    assert!(
        h[0].refused && h[0].summary.starts_with(COULD_NOT_START),
        "{h:?}"
    );
    // Stopped by its delegator before anything ran: claudectl's own words, not a refusal.
    for i in 0..3 {
        r.peer_delegates(
            "lab",
            "q",
            delegate_msg(&format!("q-{i}"), Some("codex"), None),
        );
    }
    r.actions();
    let stop = Payload::TaskInterrupt(TaskInterrupt {
        task_id: "q-2".into(),
        interrupt_type: "stop".into(),
        reason: "never mind".into(),
    });
    r.peer_says("lab", "s", stop);
    let h = handoffs(&r.actions());
    assert_eq!(h.len(), 1, "a queued task is cancelled at once");
    assert_eq!(h[0].summary, STOPPED_BY_CONTROLLER);
    assert!(!h[0].refused);
}

#[test]
fn only_the_delegating_peer_may_stop_or_nudge_its_task() {
    let mut r = worker();
    r.book
        .set_accept_from(["lab".to_owned(), "other".to_owned()]);
    r.link("lab", true, false);
    r.link("other", true, false);
    r.peer_delegates(
        "lab",
        "d",
        delegate_msg("ext-1", Some("codex"), Some("/srv/root/app")),
    );
    let id = origin_task(&r, "ext-1");
    r.start_ready();
    r.event(&id, TaskEvent::Started { pid: 7 });
    r.actions();
    let interrupt = |kind: &str| {
        Payload::TaskInterrupt(TaskInterrupt {
            task_id: "ext-1".into(),
            interrupt_type: kind.into(),
            reason: "mine now".into(),
        })
    };
    // The other peer tries, many times: nothing is acted on, nothing is sent to anyone, and
    // the log lines it causes are bounded.
    for _ in 0..1000 {
        r.peer_says("other", "x", interrupt("stop"));
        r.peer_says("other", "y", interrupt("nudge"));
        r.peer_says("other", "z", interrupt("reroute"));
    }
    let a = r.actions();
    assert!(cancels(&a).is_empty());
    assert!(
        sent(&a).is_empty(),
        "the other peer gets nothing: {:?}",
        sent(&a)
    );
    let logs = a.iter().filter(|x| matches!(x, TaskAction::Log(_))).count();
    assert_eq!(logs, PEER_LOG_BURST as usize);
    assert!(a.iter().all(|x| !matches!(x, TaskAction::Commit(_))));
    assert_eq!(r.book.tasks[&id].state, TaskState::Running);
    // The other peer's own task under the same id is its own: its stop touches only that.
    r.peer_delegates(
        "other",
        "d",
        delegate_msg("ext-1", Some("codex"), Some("/srv/root/app")),
    );
    assert_eq!(r.book.tasks.len(), 2);
    r.actions();
    r.peer_says("other", "s", interrupt("stop"));
    let a = r.actions();
    assert_eq!(
        r.book.tasks[&id].state,
        TaskState::Running,
        "lab's task runs on"
    );
    assert!(!cancels(&a).contains(&id));
    // The delegating peer's nudge is answered, to it alone.
    r.peer_says("lab", "n", interrupt("nudge"));
    let s = sent(&r.actions());
    assert_eq!(s.len(), 1);
    assert_eq!(s[0].0, "lab");
    assert!(matches!(&s[0].1, Payload::TaskStatus(t) if t.task_id == "ext-1"));
}

#[test]
fn a_nudge_for_a_settled_task_gets_no_status() {
    let mut r = worker();
    r.link("lab", true, false);
    r.peer_says(
        "lab",
        "d",
        delegate_msg("ext-1", Some("codex"), Some("/srv/root/app")),
    );
    let id = origin_task(&r, "ext-1");
    r.start_ready();
    r.event(&id, completed());
    r.actions();
    let nudge = Payload::TaskInterrupt(TaskInterrupt {
        task_id: "ext-1".into(),
        interrupt_type: "nudge".into(),
        reason: String::new(),
    });
    r.peer_says("lab", "n", nudge);
    assert!(
        statuses(&r.actions()).is_empty(),
        "its answer is its handoff"
    );
}

#[test]
fn a_resent_delegate_task_of_a_finished_task_is_ignored_and_never_runs_again() {
    let mut r = worker();
    r.link("lab", true, false);
    r.peer_delegates(
        "lab",
        "d",
        delegate_msg("ext-1", Some("codex"), Some("/srv/root/app")),
    );
    let id = origin_task(&r, "ext-1");
    r.start_ready();
    r.event(&id, completed());
    r.actions();
    r.clock.advance_secs(V0_HANDOFF_GRACE.as_secs());
    r.tick();
    assert_eq!(
        r.book.pending_handoffs("lab"),
        0,
        "its handoff was taken as received"
    );
    // Resent an hour later (0.92 would answer "task ext-1 already exists", refused).
    r.clock.advance_secs(3600);
    r.peer_delegates(
        "lab",
        "d2",
        delegate_msg("ext-1", Some("codex"), Some("/srv/root/app")),
    );
    let a = r.actions();
    assert!(sent(&a).is_empty(), "no status, no refusal: {a:?}");
    assert!(started(&a).is_empty());
    assert_eq!(r.book.tasks.len(), 1, "no second task");
    assert!(a
        .iter()
        .any(|x| matches!(x, TaskAction::Log(l) if l.contains("already holds"))));
    // While it still runs, the same: the running task's handoff is the one answer.
    r.peer_delegates(
        "lab",
        "d3",
        delegate_msg("ext-2", Some("codex"), Some("/srv/root/app")),
    );
    r.actions();
    r.peer_delegates(
        "lab",
        "d4",
        delegate_msg("ext-2", Some("codex"), Some("/srv/root/app")),
    );
    assert!(sent(&r.actions()).is_empty());
    assert_eq!(r.book.tasks.len(), 2);
}

#[test]
fn a_092_delegate_task_with_relevant_files_as_a_map_parses() {
    // claudectl 0.92 sends `relevant_files` as {path: content} and never `agent`.
    let d = serde_json::json!({
        "task_id": "task_1795000000000_0", "prompt": "fix it", "cwd": "/srv/root/app",
        "context": {
            "git_ref": "main", "relevant_files": {"src/lib.rs": "fn main() {}"},
            "dependency_graph": {"blocks": [], "blocked_by": []},
        },
    });
    let p = Payload::parse(&crate::relay::MsgType::DelegateTask, &d).expect("it parses");
    let mut r = worker();
    r.link("lab", true, false);
    r.peer_says("lab", "d", p);
    let id = origin_task(&r, "task_1795000000000_0");
    assert_eq!(
        r.book.tasks[&id].agent, "claude",
        "the seed's default agent"
    );
}

#[test]
fn a_092_already_exists_answer_to_our_resend_is_no_refusal() {
    let mut r = Rig::new(config());
    r.link("lab", true, false);
    let id = r.delegate_to_lab();
    assert_eq!(delegates(&r.actions()).len(), 1);
    // The link drops before any status came (0.92 drops its reports without a link): the
    // task goes out again, and 0.92 answers that it already holds it.
    r.link("lab", false, false);
    r.link("lab", true, false);
    assert_eq!(delegates(&r.actions()).len(), 1);
    r.peer_says(
        "lab",
        "h1",
        refused_092(id.as_str(), &format!("task {id} already exists")),
    );
    let a = r.actions();
    assert!(envelopes(&a, OUTCOME_KIND).is_empty(), "not settled: {a:?}");
    assert!(sent(&a).is_empty());
    assert_eq!(r.state(&id), "running");
    // It counts as the peer's answer: a later drop sends nothing again.
    r.link("lab", false, false);
    r.link("lab", true, false);
    assert!(delegates(&r.actions()).is_empty());
    // Its real handoff settles the task.
    r.peer_says("lab", "h2", handoff_msg(id.as_str(), "completed", "done"));
    assert_eq!(outcome_body(&r.actions())["state"], "completed");
    // "already exists" about another id is an ordinary refusal.
    let other = r.delegate_to_lab();
    r.actions();
    r.peer_says(
        "lab",
        "h3",
        refused_092(other.as_str(), &format!("task {id} already exists")),
    );
    assert_eq!(outcome_body(&r.actions())["state"], "refused");
}

/// claudectl 0.92 records a task it delegated only after its one-shot's 250 ms wait and drops
/// a report that comes sooner (docs/delegation.md "Running a peer's tasks"): no report about
/// a claudectl peer's task goes out before `CLAUDECTL_REPORT_DELAY`, the status nor a handoff
/// of a task refused or done at once; the book wakes for it; an agent-hub peer is not held.
#[test]
fn reports_to_a_claudectl_peer_wait_for_its_ledger_and_an_agent_hub_peer_is_not_held() {
    let mut r = worker();
    r.link("lab", true, false);
    let t0 = r.clock.now();
    r.peer_says(
        "lab",
        "d1",
        delegate_msg("ext-run", None, Some("/srv/root/app")),
    );
    // A refusal (cwd outside the roots) made at the same moment.
    r.peer_says(
        "lab",
        "d2",
        delegate_msg("ext-bad", None, Some("/elsewhere")),
    );
    assert!(sent(&r.actions()).is_empty(), "nothing before the hold");
    assert_eq!(
        r.book.poll_timeout(),
        Some(t0.mono + CLAUDECTL_REPORT_DELAY),
        "the book wakes when the hold ends"
    );
    r.clock.advance_secs(1);
    r.tick();
    assert!(sent(&r.actions()).is_empty(), "still held at 1 s");
    r.clock.advance_secs(1);
    r.tick();
    let a = r.actions();
    let s = statuses(&a);
    assert_eq!(s.len(), 1, "{a:?}");
    assert_eq!(s[0].task_id, "ext-run");
    let h = handoffs(&a);
    assert_eq!(h.len(), 1);
    assert_eq!(h[0].task_id, "ext-bad");
    assert!(h[0].refused);

    // A task done within the hold: only its handoff, at the hold.
    r.peer_says(
        "lab",
        "d3",
        delegate_msg("ext-fast", None, Some("/srv/root/app")),
    );
    let id = origin_task(&r, "ext-fast");
    r.start_ready();
    r.event(&id, completed());
    assert!(handoffs(&r.actions()).is_empty(), "held");
    r.clock.advance_secs(2);
    r.tick();
    let a = r.actions();
    assert_eq!(handoffs(&a).len(), 1);
    assert_eq!(handoffs(&a)[0].state, "completed");
    assert!(
        statuses(&a).iter().all(|s| s.task_id != "ext-fast"),
        "a task settled in the hold gets no running status: {a:?}"
    );

    // An agent-hub peer (a v1 link) reads its reports at once.
    let mut r = worker();
    r.link("lab", true, true);
    r.peer_says(
        "lab",
        "d1",
        delegate_msg("ext-v1", None, Some("/srv/root/app")),
    );
    assert_eq!(statuses(&r.actions()).len(), 1, "at once");
}

/// Issue 29: a relay peer's tasks each have a delegator of their own (`task-from:<peer>:<id>`)
/// but are one delegator's share here: past `max_per_delegator` the peer's `delegate_task` is
/// answered with a refused handoff, as every refusal here is, and no task is made.
#[test]
fn a_peer_past_its_share_gets_a_refused_handoff() {
    let mut r = Rig::new(BookConfig {
        max_per_delegator: 2,
        ..config()
    });
    r.book.set_accept_from(["lab".to_owned()]);
    r.link("lab", true, true);
    for i in 0..2 {
        r.peer_says(
            "lab",
            &format!("d{i}"),
            delegate_msg(&format!("ext-{i}"), None, None),
        );
    }
    r.actions();
    r.peer_says("lab", "d2", delegate_msg("ext-2", None, None));
    assert_refused(&r.actions(), "ext-2", "tasks.max_per_delegator = 2");
    assert_eq!(r.book.tasks.len(), 2, "no task for the refused one");
    // A local delegator still gets in: the peer's share is the peer's.
    r.submit_as("mneme", "local work")
        .expect("mneme's own share");
}
