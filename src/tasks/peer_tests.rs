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
    })
}

fn status_msg(task: &str, elapsed: u64) -> Payload {
    Payload::TaskStatus(TaskStatus {
        task_id: task.into(),
        state: "running".into(),
        stats: TaskStats {
            tokens_used: 10,
            cost_usd: 0.0,
            context_pct: 0.0,
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
        self.book.handle_peer_link(peer, up, v1, now, &mut self.ids);
    }

    fn peer_says(&mut self, peer: &str, msg_id: &str, payload: Payload) {
        let now = self.clock.now();
        self.book
            .handle_peer_message(peer, msg_id, payload, now, &mut self.ids, &|_| false);
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
    r.peer_says(
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
    r.peer_says(
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
    r.peer_says(
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
    r.peer_says(
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
    r.peer_says(
        "lab",
        "d1",
        delegate_msg("ext-1", Some("codex"), Some("/srv/root/app")),
    );
    r.peer_says(
        "lab",
        "d2",
        delegate_msg("ext-1", Some("codex"), Some("/srv/root/app")),
    );
    assert_eq!(r.book.tasks.len(), 1);
    r.actions();
    // Outside the roots, an agent not installed, a hostile task id.
    r.peer_says(
        "lab",
        "d3",
        delegate_msg("ext-2", Some("codex"), Some("/etc")),
    );
    r.peer_says(
        "lab",
        "d4",
        delegate_msg("ext-3", Some("nope"), Some("/srv/root/app")),
    );
    r.peer_says(
        "lab",
        "d5",
        delegate_msg("a b\n", Some("codex"), Some("/srv/root/app")),
    );
    let a = r.actions();
    let h = handoffs(&a);
    assert_eq!(h.len(), 2, "{h:?}");
    assert!(h
        .iter()
        .all(|h| h.state == "failed" && h.summary.starts_with("refused: ")));
    assert_eq!(r.book.tasks.len(), 1);
    // No cwd: the first root.
    r.peer_says("lab", "d6", delegate_msg("ext-4", Some("codex"), None));
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
    r.book.restore(rows, now, &mut r.ids);
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
