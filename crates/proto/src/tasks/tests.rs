//! The task book on a virtual clock (docs/delegation.md): no processes, no sleeps. Each
//! test drives the book with the inputs the hub would give it and checks the actions.

use super::*;
use crate::acp::{
    CancelEnd, Cost, ExitStatus, Failure, PlanEntry, Progress, Refusal, Sourced, Step, StopReason,
    TurnMeter, UsageSource,
};
use crate::kernel::ids::SeededIds;
use crate::tasks::TaskEnd;
use crate::wire::usage::Tokens;
use crate::wire::TaskRecord;
use serde_json::Value;

mod approvals;
mod follow_ups;
mod peer;
mod placed;
mod prompts;
mod relayed;
mod usage;

struct Clock {
    origin: Instant,
    wall0: DateTime<Utc>,
    ms: u64,
}

impl Clock {
    fn new() -> Clock {
        Clock {
            origin: crate::kernel::deadline::test_origin(),
            wall0: DateTime::<Utc>::from_timestamp_millis(1_795_000_000_000).unwrap(),
            ms: 0,
        }
    }
    fn now(&self) -> Now {
        Now {
            mono: self.origin + Duration::from_millis(self.ms),
            wall: self.wall0 + chrono::Duration::milliseconds(self.ms as i64),
        }
    }
    fn advance_secs(&mut self, s: u64) {
        self.ms += s * 1000;
    }
}

fn config() -> BookConfig {
    BookConfig {
        max_concurrent: 2,
        queue_max: 3,
        // No share below the whole capacity: the share has its own test.
        max_per_delegator: 100,
        timeout_secs: 1800,
        prompt_max_bytes: 100,
        cwd_roots: vec![PathBuf::from("/srv/root"), PathBuf::from("/home/me/src")],
        min_progress_secs: 10,
        outcome_text_max_bytes: 16,
        history_max: 1000,
        may_mail: vec!["critic".into()],
        peer_status_secs: 30,
        permission: crate::acp::PermissionPolicy::Ask,
        agent_permission: Default::default(),
        approvals: Default::default(),
        follow_ups: Default::default(),
        placement: Default::default(),
    }
}

struct Rig {
    book: TaskBook,
    ids: SeededIds,
    clock: Clock,
}

impl Rig {
    fn new(config: BookConfig) -> Rig {
        Rig {
            book: TaskBook::new(
                config,
                ["codex".to_owned(), "claude".to_owned()],
                ["lab".to_owned()],
            ),
            ids: SeededIds::new(11),
            clock: Clock::new(),
        }
    }

    fn submit_as(&mut self, who: &str, prompt: &str) -> Result<TaskId, DelegateRefusal> {
        let req = DelegateRequest {
            agent: "codex".into(),
            cwd: "/srv/root/app".into(),
            prompt: prompt.into(),
            ..DelegateRequest::default()
        };
        let now = self.clock.now();
        self.book.submit(req, who, now, &mut self.ids)
    }

    fn submit(&mut self, prompt: &str) -> TaskId {
        self.submit_as("mneme", prompt).expect("accepted")
    }

    fn request(&mut self, req: DelegateRequest) -> Result<TaskId, DelegateRefusal> {
        let now = self.clock.now();
        self.book.submit(req, "mneme", now, &mut self.ids)
    }

    fn start_ready(&mut self) {
        let now = self.clock.now();
        self.book.start_ready(now, &mut self.ids);
    }

    fn event(&mut self, id: &TaskId, ev: TaskEvent) {
        self.event_pending(id, ev, &|_| false);
    }

    fn event_pending(&mut self, id: &TaskId, ev: TaskEvent, pending: &dyn Fn(&str) -> bool) {
        let now = self.clock.now();
        self.book.handle_event(id, ev, now, &mut self.ids, pending);
    }

    fn cancel(&mut self, id: &TaskId, asker: &str) -> String {
        let now = self.clock.now();
        self.book
            .cancel(id.as_str(), asker, now, &mut self.ids)
            .state
    }

    fn actions(&mut self) -> Vec<TaskAction> {
        std::iter::from_fn(|| self.book.poll_action()).collect()
    }

    fn state(&self, id: &TaskId) -> String {
        self.book
            .status(id.as_str(), "mneme", self.clock.now())
            .state
    }
}

fn started(actions: &[TaskAction]) -> Vec<TaskId> {
    actions
        .iter()
        .filter_map(|a| match a {
            TaskAction::Start(s) => Some(s.task.clone()),
            _ => None,
        })
        .collect()
}

fn cancels(actions: &[TaskAction]) -> Vec<TaskId> {
    actions
        .iter()
        .filter_map(|a| match a {
            TaskAction::Cancel(id) => Some(id.clone()),
            _ => None,
        })
        .collect()
}

fn envelopes<'a>(actions: &'a [TaskAction], kind: &str) -> Vec<&'a Envelope> {
    actions
        .iter()
        .filter_map(|a| match a {
            TaskAction::Commit(c) => c.envelope.as_ref(),
            _ => None,
        })
        .filter(|e| e.kind == kind)
        .collect()
}

fn body(e: &Envelope) -> Value {
    serde_json::from_str(e.body.get()).unwrap()
}

fn outcome(status: Status, text: &str) -> TaskEvent {
    TaskEvent::Outcome(Outcome {
        status,
        text: text.into(),
        truncated: false,
        meter: Box::default(),
        progress: Progress {
            elapsed_ms: 1234,
            ..Progress::default()
        },
        turn: 1,
        kept: false,
    })
}

fn completed() -> TaskEvent {
    outcome(
        Status::Completed {
            stop_reason: StopReason::EndTurn,
        },
        "done",
    )
}

fn ended() -> TaskEvent {
    TaskEvent::Ended(TaskEnd {
        exit: Some(ExitStatus::code(0)),
        ..TaskEnd::default()
    })
}

#[test]
fn queueing_at_the_concurrency_cap_in_order() {
    let mut r = Rig::new(config());
    let ids: Vec<TaskId> = (0..5).map(|i| r.submit(&format!("p{i}"))).collect();
    r.start_ready();
    let a = r.actions();
    assert_eq!(started(&a), ids[..2].to_vec(), "the two oldest start");
    for (i, id) in ids.iter().enumerate() {
        let want = if i < 2 { "running" } else { "queued" };
        assert_eq!(r.state(id), want);
    }
    let rec = r.book.status(ids[3].as_str(), "mneme", r.clock.now());
    assert_eq!(rec.position, Some(2));
    // Each finishes in turn; the next oldest starts only after the slot is freed.
    r.event(&ids[1], completed());
    r.event(&ids[1], ended());
    assert_eq!(started(&r.actions()), vec![ids[2].clone()]);
    r.event(&ids[0], completed());
    r.event(&ids[0], ended());
    assert_eq!(started(&r.actions()), vec![ids[3].clone()]);
    assert_eq!(
        r.book
            .status(ids[4].as_str(), "mneme", r.clock.now())
            .position,
        Some(1)
    );
}

#[test]
fn the_start_spec_carries_the_request_and_a_token_but_debug_hides_them() {
    let mut r = Rig::new(config());
    let req = DelegateRequest {
        agent: "claude".into(),
        cwd: "/srv/root/./app/../lib".into(),
        prompt: "secret plan".into(),
        timeout_secs: Some(60),
        ..DelegateRequest::default()
    };
    let id = r.request(req).unwrap();
    let now = r.clock.now();
    let spec = r.book.next_to_start(now, &mut r.ids).unwrap();
    assert_eq!(spec.task, id);
    assert_eq!(spec.cwd, PathBuf::from("/srv/root/lib"));
    assert_eq!((spec.agent.as_str(), spec.timeout_secs), ("claude", 60));
    assert_eq!(spec.prompt, "secret plan");
    assert_eq!(spec.token.len(), 64);
    let shown = format!("{spec:?}");
    assert!(
        !shown.contains("secret plan") && !shown.contains(&spec.token),
        "{shown}"
    );
    // The commit that makes it running came first, and holds no token.
    let a = r.actions();
    let TaskAction::Commit(c) = &a[a.len() - 1] else {
        panic!("{a:?}")
    };
    assert!(matches!(&c.store[0], TaskStoreOp::State { state, .. } if state == "running"));
    assert!(!format!("{a:?}").contains(&spec.token));
}

#[test]
fn queue_cap_refuses_and_no_task_exists() {
    let mut r = Rig::new(config());
    for i in 0..5 {
        r.submit(&format!("p{i}"));
    }
    r.start_ready();
    r.actions();
    let e = r.submit_as("mneme", "one too many").unwrap_err();
    assert_eq!(e, DelegateRefusal::QueueFull { queue_max: 3 });
    assert_eq!(
        e.to_string(),
        "invalid delegate: the task queue is full (tasks.queue_max = 3); try again later"
    );
    assert_eq!(r.book.list("mneme", r.clock.now()).tasks.len(), 5);
    assert!(r.actions().is_empty(), "a refusal commits nothing");

    // queue_max = 0: accepted only when it can start at once.
    let mut r = Rig::new(BookConfig {
        queue_max: 0,
        max_concurrent: 1,
        ..config()
    });
    let first = r.submit("a");
    assert!(matches!(
        r.submit_as("mneme", "b"),
        Err(DelegateRefusal::QueueFull { queue_max: 0 })
    ));
    r.start_ready();
    assert_eq!(started(&r.actions()), vec![first]);
    assert!(r.submit_as("mneme", "c").is_err(), "the one slot is held");
}

/// Issue 29: one delegator filled the whole task queue. Each delegator may hold at most
/// `max_per_delegator` tasks queued or running; past it its delegation is refused (no task
/// exists), while another delegator still finds room; a task that ends gives its share back.
#[test]
fn a_delegator_past_its_share_is_refused_and_another_still_gets_in() {
    // Capacity 2 slots + 6 queued; one delegator may hold 3.
    let mut r = Rig::new(BookConfig {
        max_concurrent: 2,
        queue_max: 6,
        max_per_delegator: 3,
        ..config()
    });
    let mine: Vec<TaskId> = (0..3).map(|i| r.submit(&format!("m{i}"))).collect();
    r.start_ready();
    r.actions();
    let e = r.submit_as("mneme", "one more").unwrap_err();
    assert_eq!(e, DelegateRefusal::ShareFull { held: 3, max: 3 });
    assert_eq!(
        e.to_string(),
        "invalid delegate: you hold 3 tasks queued or running, the most one delegator may (tasks.max_per_delegator = 3); try again when one ends"
    );
    assert!(r.actions().is_empty(), "a refusal commits nothing");
    assert_eq!(r.book.list("mneme", r.clock.now()).tasks.len(), 3);
    // Another delegator is not held back by mneme's share.
    for i in 0..3 {
        r.submit_as("critic", &format!("c{i}"))
            .expect("critic's share");
    }
    // One of mneme's tasks ends: its share has room again.
    r.event(&mine[0], completed());
    r.actions();
    r.submit_as("mneme", "now it fits").expect("room again");
}

#[test]
fn a_slot_is_freed_only_at_ended() {
    let mut r = Rig::new(BookConfig {
        max_concurrent: 1,
        ..config()
    });
    let a = r.submit("a");
    let b = r.submit("b");
    r.start_ready();
    r.actions();
    r.event(&a, TaskEvent::Started { pid: 42 });
    r.event(&a, completed());
    assert_eq!(r.state(&a), "completed");
    r.start_ready();
    assert!(
        started(&r.actions()).is_empty(),
        "the outcome frees no slot"
    );
    assert_eq!(r.book.slots_held(), 1);
    assert_eq!(r.state(&b), "queued");
    r.event(&a, ended());
    assert_eq!(started(&r.actions()), vec![b.clone()]);
    assert_eq!(r.state(&b), "running");
    assert_eq!(r.book.pid(&a), Some(42));
}

#[test]
fn cancel_of_a_queued_task_ends_it_at_once_with_one_outcome() {
    let mut r = Rig::new(BookConfig {
        max_concurrent: 1,
        ..config()
    });
    let a = r.submit("a");
    let b = r.submit("b");
    let c = r.submit("c");
    r.start_ready();
    r.actions();
    assert_eq!(r.cancel(&b, "mneme"), "cancelled");
    let acts = r.actions();
    let outs = envelopes(&acts, OUTCOME_KIND);
    assert_eq!(outs.len(), 1);
    let v = body(outs[0]);
    assert_eq!(v["state"], "cancelled");
    assert_eq!(v["elapsedMs"], 0);
    assert!(cancels(&acts).is_empty(), "nothing runs, nothing to cancel");
    assert_eq!(outs[0].correlation_id.as_deref(), Some(b.as_str()));
    assert_eq!(outs[0].from, "hub");
    assert_eq!(outs[0].to, "mneme");
    // The queue closed up; a second cancel changes nothing and sends nothing.
    assert_eq!(
        r.book.status(c.as_str(), "mneme", r.clock.now()).position,
        Some(1)
    );
    assert_eq!(r.cancel(&b, "mneme"), "cancelled");
    assert!(r.actions().is_empty());
    // When the slot frees, c (not b) starts.
    r.event(&a, completed());
    r.event(&a, ended());
    assert_eq!(started(&r.actions()), vec![c]);
}

#[test]
fn cancel_of_a_running_task_asks_the_runner_and_its_outcome_follows() {
    let mut r = Rig::new(config());
    let a = r.submit("a");
    r.start_ready();
    r.actions();
    assert_eq!(r.cancel(&a, "mneme"), "cancelling");
    let acts = r.actions();
    assert_eq!(cancels(&acts), vec![a.clone()]);
    assert!(envelopes(&acts, OUTCOME_KIND).is_empty());
    // Asking again does not cancel twice.
    assert_eq!(r.cancel(&a, "mneme"), "cancelling");
    assert!(cancels(&r.actions()).is_empty());
    r.event(
        &a,
        outcome(
            Status::Cancelled {
                end: CancelEnd::Stopped(StopReason::Cancelled),
            },
            "partial",
        ),
    );
    let acts = r.actions();
    let outs = envelopes(&acts, OUTCOME_KIND);
    assert_eq!(outs.len(), 1);
    let v = body(outs[0]);
    assert_eq!(v["state"], "cancelled");
    assert_eq!(v["stopReason"], "cancelled");
    assert_eq!(v["text"], "partial");
    assert_eq!(r.state(&a), "cancelled");
}

#[test]
fn cancel_racing_completion_gives_exactly_one_outcome() {
    let mut r = Rig::new(config());
    let a = r.submit("a");
    r.start_ready();
    r.actions();
    r.cancel(&a, "mneme");
    r.actions();
    // The runner had already decided: its outcome says completed, and that is the outcome.
    r.event(&a, completed());
    // A second outcome (a misbehaving runner), and the Ended, add nothing.
    r.event(
        &a,
        outcome(
            Status::Cancelled {
                end: CancelEnd::BeforePrompt,
            },
            "",
        ),
    );
    r.event(&a, ended());
    let acts = r.actions();
    let outs = envelopes(&acts, OUTCOME_KIND);
    assert_eq!(outs.len(), 1, "{acts:?}");
    assert_eq!(body(outs[0])["state"], "completed");
    assert_eq!(r.state(&a), "completed");
    assert_eq!(r.cancel(&a, "mneme"), "completed");
    assert!(r.actions().is_empty());
}

#[test]
fn timeout_outcome_maps_to_timed_out() {
    let mut r = Rig::new(config());
    let a = r.submit("a");
    r.start_ready();
    r.actions();
    r.event(
        &a,
        outcome(
            Status::TimedOut {
                end: CancelEnd::NoAnswer { waited_ms: 5000 },
            },
            "half",
        ),
    );
    let acts = r.actions();
    let v = body(envelopes(&acts, OUTCOME_KIND)[0]);
    assert_eq!(v["state"], "timed_out");
    assert_eq!(
        v["reason"],
        "the agent did not answer the cancel within 5000 ms"
    );
    assert!(v.get("stopReason").is_none());
    let rec = r.book.status(a.as_str(), "mneme", r.clock.now());
    assert_eq!(rec.state, "timed_out");
    assert_eq!(rec.elapsed_ms, Some(1234));
}

#[test]
fn every_acp_status_maps_to_its_state() {
    let cases: Vec<(Status, &str, Option<&str>, Option<&str>)> = vec![
        (
            Status::Completed {
                stop_reason: StopReason::EndTurn,
            },
            "completed",
            Some("end_turn"),
            None,
        ),
        (
            Status::Completed {
                stop_reason: StopReason::MaxTokens,
            },
            "completed",
            Some("max_tokens"),
            None,
        ),
        (
            Status::Completed {
                stop_reason: StopReason::MaxTurnRequests,
            },
            "completed",
            Some("max_turn_requests"),
            None,
        ),
        (
            Status::Completed {
                stop_reason: StopReason::Refusal,
            },
            "completed",
            Some("refusal"),
            None,
        ),
        (
            Status::Completed {
                stop_reason: StopReason::Other("paused".into()),
            },
            "completed",
            Some("paused"),
            None,
        ),
        (
            Status::Cancelled {
                end: CancelEnd::BeforePrompt,
            },
            "cancelled",
            None,
            Some("before the prompt was sent"),
        ),
        (
            Status::Cancelled {
                end: CancelEnd::Stopped(StopReason::EndTurn),
            },
            "cancelled",
            Some("end_turn"),
            Some("the agent stopped with end_turn"),
        ),
        (
            Status::Cancelled {
                end: CancelEnd::Exited(None),
            },
            "cancelled",
            None,
            Some("the agent closed its output"),
        ),
        (
            Status::TimedOut {
                end: CancelEnd::Stopped(StopReason::Cancelled),
            },
            "timed_out",
            Some("cancelled"),
            Some("the agent stopped with cancelled"),
        ),
        (
            Status::Refused(Refusal::UnsupportedProtocol {
                version: "2".into(),
            }),
            "refused",
            None,
            Some("agent speaks ACP protocol version 2; the hub speaks 1"),
        ),
        (
            Status::Refused(Refusal::Invalid("cwd vanished".into())),
            "refused",
            None,
            Some("the task is invalid: cwd vanished"),
        ),
        (
            Status::Failed(Failure::Exited {
                during: Step::Prompt,
                status: Some(ExitStatus::signal(9)),
            }),
            "failed",
            None,
            Some("agent exited (signal 9) while waiting for session/prompt"),
        ),
        (
            Status::Failed(Failure::Spawn("no such file".into())),
            "failed",
            None,
            Some("could not start the agent: no such file"),
        ),
    ];
    for (status, state, stop, reason) in cases {
        let mut r = Rig::new(config());
        let a = r.submit("a");
        r.start_ready();
        r.actions();
        r.event(&a, outcome(status.clone(), "t"));
        let acts = r.actions();
        let outs = envelopes(&acts, OUTCOME_KIND);
        assert_eq!(outs.len(), 1, "{status:?}");
        let v = body(outs[0]);
        assert_eq!(v["state"], state, "{status:?}");
        assert_eq!(v["stopReason"].as_str(), stop, "{status:?}");
        assert_eq!(v["reason"].as_str(), reason, "{status:?}");
        let settle = acts.iter().find_map(|a| match a {
            TaskAction::Commit(c) => c.store.iter().find_map(|op| match op {
                TaskStoreOp::Settle { state, .. } => Some(state.clone()),
                _ => None,
            }),
            _ => None,
        });
        assert_eq!(settle.as_deref(), Some(state), "{status:?}");
        assert_eq!(TaskState::parse(state).map(TaskState::is_final), Some(true));
    }
}

#[test]
fn the_outcome_envelope_and_its_settle_and_audit_are_one_commit() {
    let mut r = Rig::new(config());
    let a = r.submit("a");
    r.start_ready();
    r.actions();
    r.event(&a, completed());
    let acts = r.actions();
    let commits: Vec<&TaskCommit> = acts
        .iter()
        .filter_map(|x| match x {
            TaskAction::Commit(c) => Some(c),
            _ => None,
        })
        .collect();
    assert_eq!(commits.len(), 1);
    let c = commits[0];
    assert!(c.envelope.is_some());
    assert!(matches!(c.store.as_slice(), [TaskStoreOp::Settle { .. }]));
    assert!(matches!(c.audit.as_slice(), [TaskAudit::Ended { .. }]));
}

#[test]
fn the_outcome_body_has_its_keys_in_order_and_the_text_capped_on_a_char_boundary() {
    let mut r = Rig::new(config());
    let a = r
        .request(DelegateRequest {
            agent: "codex".into(),
            cwd: "/srv/root".into(),
            prompt: "p".into(),
            ..DelegateRequest::default()
        })
        .unwrap();
    r.start_ready();
    r.actions();
    // 15 ASCII bytes then a 2-byte char: the cap of 16 falls inside it.
    let text = "abcdefghijklmnoé and more";
    r.event(
        &a,
        TaskEvent::Outcome(Outcome {
            status: Status::Completed {
                stop_reason: StopReason::EndTurn,
            },
            text: text.into(),
            truncated: false,
            meter: Box::new(TurnMeter {
                tokens: Some(Sourced {
                    value: Tokens {
                        input_tokens: Some(10),
                        output_tokens: Some(3),
                        ..Tokens::default()
                    },
                    source: UsageSource::Acp,
                }),
                cost: Some(Sourced {
                    value: Cost {
                        amount: 0.25,
                        currency: "USD".into(),
                    },
                    source: UsageSource::Acp,
                }),
                context: None,
            }),
            progress: Progress {
                elapsed_ms: 99,
                ..Progress::default()
            },
            turn: 1,
            kept: false,
        }),
    );
    let acts = r.actions();
    let e = envelopes(&acts, OUTCOME_KIND)[0];
    let want = format!(
        r#"{{"task":"{a}","agent":"codex","turn":1,"state":"completed","stopReason":"end_turn","text":"abcdefghijklmno","truncated":true,"elapsedMs":99,"usage":{{"inputTokens":10,"outputTokens":3,"source":"acp"}},"cost":{{"amount":0.25,"currency":"USD","source":"acp"}},"session":"closed"}}"#
    );
    assert_eq!(e.body.get(), want);
    assert_eq!(cap_text("ééé", 3), ("é", true));
    assert_eq!(cap_text("abc", 3), ("abc", false));
    assert_eq!(cap_text("abc", 0), ("", true));
}

#[test]
fn restart_keeps_queued_in_order_and_reports_running_once() {
    // A first life: five tasks, two running (one of them cancelling), one settled.
    let mut r = Rig::new(config());
    let ids: Vec<TaskId> = (0..5).map(|i| r.submit(&format!("p{i}"))).collect();
    r.start_ready();
    r.event(&ids[0], TaskEvent::Started { pid: 777 });
    r.cancel(&ids[1], "mneme");
    let mut rows: BTreeMap<String, StoredTask> = BTreeMap::new();
    apply_store(&mut rows, r.actions());
    // ids[2] settles later (cancelled while queued), then the hub dies.
    r.cancel(&ids[2], "mneme");
    apply_store(&mut rows, r.actions());
    assert_eq!(rows[ids[0].as_str()].state, "running");
    assert_eq!(rows[ids[1].as_str()].state, "cancelling");
    assert_eq!(
        rows[ids[2].as_str()].prompt,
        "",
        "a settled row keeps no prompt"
    );

    // The second life.
    let mut r2 = Rig::new(config());
    r2.clock.advance_secs(60);
    let now = r2.clock.now();
    r2.book.restore(
        rows.values().cloned().collect(),
        Vec::new(),
        now,
        &mut r2.ids,
    );
    let acts = r2.actions();
    let outs = envelopes(&acts, OUTCOME_KIND);
    assert_eq!(outs.len(), 2, "one per task that was running: {acts:?}");
    let mut restarted: Vec<String> = outs
        .iter()
        .map(|e| e.correlation_id.clone().unwrap())
        .collect();
    restarted.sort();
    let mut want = vec![ids[0].to_string(), ids[1].to_string()];
    want.sort();
    assert_eq!(restarted, want);
    for e in &outs {
        assert_eq!(body(e)["state"], "hub_restarted");
    }
    assert_eq!(r2.book.pid(&ids[0]), Some(777));
    assert_eq!(r2.state(&ids[2]), "cancelled");
    assert_eq!(r2.state(&ids[3]), "queued");
    apply_store(&mut rows, acts);
    // The queued ones start in their order, with their prompts.
    let now = r2.clock.now();
    let s = r2.book.next_to_start(now, &mut r2.ids).unwrap();
    assert_eq!((s.task.clone(), s.prompt.as_str()), (ids[3].clone(), "p3"));
    let s = r2.book.next_to_start(now, &mut r2.ids).unwrap();
    assert_eq!(s.task, ids[4]);
    apply_store(&mut rows, r2.actions());

    // A third life from the same rows reports nothing again.
    let mut r3 = Rig::new(config());
    let now = r3.clock.now();
    r3.book.restore(
        rows.values().cloned().collect(),
        Vec::new(),
        now,
        &mut r3.ids,
    );
    let acts = r3.actions();
    let outs = envelopes(&acts, OUTCOME_KIND);
    assert_eq!(
        outs.iter()
            .map(|e| e.correlation_id.clone().unwrap())
            .collect::<Vec<_>>(),
        vec![ids[3].to_string(), ids[4].to_string()],
        "only the tasks that were running in the second life"
    );
    // New tasks after a restart are ordered after the restored ones.
    let n = r3.submit("new");
    let list = r3.book.list("mneme", r3.clock.now());
    assert_eq!(list.tasks.last().map(|t| t.task.as_str()), Some(n.as_str()));
}

/// The store's side, as the SQLite code will do it: apply each op to the rows.
fn apply_store(rows: &mut BTreeMap<String, StoredTask>, actions: Vec<TaskAction>) {
    for a in actions {
        let TaskAction::Commit(c) = a else { continue };
        for op in c.store {
            match op {
                TaskStoreOp::Insert(row) => {
                    rows.insert(row.task.clone(), *row);
                }
                TaskStoreOp::State {
                    task,
                    state,
                    started_ms,
                    ..
                } => {
                    let r = rows.get_mut(&task).unwrap();
                    r.state = state;
                    if started_ms.is_some() {
                        r.started_ms = started_ms;
                    }
                }
                TaskStoreOp::Pid { task, pid } => rows.get_mut(&task).unwrap().pid = Some(pid),
                TaskStoreOp::Settle {
                    task,
                    state,
                    stop_reason,
                    reason,
                    ended_ms,
                    elapsed_ms,
                    meter,
                    budget,
                } => {
                    let r = rows.get_mut(&task).unwrap();
                    r.state = state;
                    r.stop_reason = stop_reason;
                    r.reason = reason;
                    r.ended_ms = Some(ended_ms);
                    r.elapsed_ms = Some(elapsed_ms);
                    r.meter = meter;
                    r.budget = budget;
                    r.prompt.clear();
                }
                TaskStoreOp::Forget { task } => {
                    rows.remove(&task);
                }
                // The requests' rows are `approvals`' tests' to follow.
                TaskStoreOp::OpenRequest(_) | TaskStoreOp::CloseRequest { .. } => {}
            }
        }
    }
}

#[test]
fn history_is_pruned_oldest_settled_first() {
    let mut r = Rig::new(BookConfig {
        history_max: 2,
        max_concurrent: 10,
        queue_max: 10,
        ..config()
    });
    let ids: Vec<TaskId> = (0..4).map(|i| r.submit(&format!("p{i}"))).collect();
    r.start_ready();
    r.actions();
    // Settle in the order 2, 0, 3, 1.
    let mut forgotten = Vec::new();
    for i in [2, 0, 3, 1] {
        r.event(&ids[i], completed());
        for a in r.actions() {
            if let TaskAction::Commit(c) = a {
                for op in c.store {
                    if let TaskStoreOp::Forget { task } = op {
                        forgotten.push(task);
                    }
                }
            }
        }
    }
    assert_eq!(forgotten, vec![ids[2].to_string(), ids[0].to_string()]);
    assert_eq!(r.state(&ids[2]), "unknown");
    assert_eq!(r.state(&ids[3]), "completed");
    assert_eq!(r.book.list("mneme", r.clock.now()).tasks.len(), 2);

    // A restore under a smaller history_max prunes at once.
    let rows: Vec<StoredTask> = (0..3)
        .map(|i| StoredTask {
            seq: i + 1,
            task: format!("task-{:032x}", i + 1),
            delegator: "mneme".into(),
            agent: "codex".into(),
            state: "completed".into(),
            ended_ms: Some(1000 - i as i64),
            ..StoredTask::default()
        })
        .collect();
    let mut r = Rig::new(BookConfig {
        history_max: 1,
        ..config()
    });
    let now = r.clock.now();
    r.book.restore(rows, Vec::new(), now, &mut r.ids);
    let acts = r.actions();
    let TaskAction::Commit(c) = &acts[0] else {
        panic!()
    };
    // Ended latest first was seq 1 (ended_ms 1000): it is the one kept.
    assert_eq!(
        c.store,
        vec![
            TaskStoreOp::Forget {
                task: format!("task-{:032x}", 3)
            },
            TaskStoreOp::Forget {
                task: format!("task-{:032x}", 2)
            }
        ]
    );
}

fn progress(updates: u64, tools: u64) -> TaskEvent {
    let mut p = Progress {
        updates,
        elapsed_ms: updates * 100,
        last_tool: Some("Read".into()),
        plan: vec![
            PlanEntry {
                content: "look".into(),
                priority: "high".into(),
                status: "completed".into(),
            },
            PlanEntry {
                content: "fix".into(),
                priority: "high".into(),
                status: "in_progress".into(),
            },
        ],
        ..Progress::default()
    };
    p.tool_calls.total = tools;
    TaskEvent::Progress(p)
}

#[test]
fn progress_envelopes_follow_interval_change_and_consumption() {
    let mut r = Rig::new(config());
    // No progressSecs: never a progress envelope.
    let quiet = r.submit("quiet");
    let loud = r
        .request(DelegateRequest {
            agent: "codex".into(),
            cwd: "/srv/root".into(),
            prompt: "p".into(),
            progress_secs: Some(10),
            ..DelegateRequest::default()
        })
        .unwrap();
    r.start_ready();
    r.actions();
    r.clock.advance_secs(30);
    r.event(&quiet, progress(1, 1));
    assert!(envelopes(&r.actions(), PROGRESS_KIND).is_empty());

    // Within the first interval: held back.
    let mut r2 = Rig::new(config());
    let t = r2
        .request(DelegateRequest {
            agent: "codex".into(),
            cwd: "/srv/root".into(),
            prompt: "p".into(),
            progress_secs: Some(10),
            ..DelegateRequest::default()
        })
        .unwrap();
    r2.start_ready();
    r2.actions();
    r2.clock.advance_secs(5);
    r2.event(&t, progress(1, 0));
    assert!(envelopes(&r2.actions(), PROGRESS_KIND).is_empty());
    let due = r2
        .book
        .poll_timeout()
        .expect("unsent progress has a deadline");
    assert_eq!(due, r2.clock.origin + Duration::from_secs(10));
    r2.clock.advance_secs(5);
    let now = r2.clock.now();
    r2.book.handle_timeout(now, &mut r2.ids, &|_| false);
    let acts = r2.actions();
    let sent = envelopes(&acts, PROGRESS_KIND);
    assert_eq!(sent.len(), 1);
    let first_id = sent[0].id.clone();
    assert_eq!(
        sent[0].body.get(),
        format!(
            r#"{{"task":"{t}","agent":"codex","turn":1,"state":"running","elapsedMs":100,"updates":1,"toolCalls":0,"lastTool":"Read","plan":{{"total":2,"completed":1,"current":"fix"}}}}"#
        )
    );
    assert_eq!(sent[0].correlation_id.as_deref(), Some(t.as_str()));
    // Nothing changed: nothing sent, even after the interval.
    r2.clock.advance_secs(20);
    r2.event(&t, progress(1, 0));
    assert!(envelopes(&r2.actions(), PROGRESS_KIND).is_empty());
    assert_eq!(r2.book.poll_timeout(), None);
    // Changed, but the previous one is still queued: held back.
    let pending_id = first_id.clone();
    r2.event_pending(&t, progress(2, 1), &move |id| id == pending_id);
    assert!(envelopes(&r2.actions(), PROGRESS_KIND).is_empty());
    // Held back: the next look is an interval away, not in the past (no busy loop).
    assert_eq!(
        r2.book.poll_timeout(),
        Some(r2.clock.now().mono + Duration::from_secs(10))
    );
    // Consumed: it goes out at the next check.
    let now = r2.clock.now();
    r2.book.handle_timeout(now, &mut r2.ids, &|_| false);
    let acts = r2.actions();
    let sent = envelopes(&acts, PROGRESS_KIND);
    assert_eq!(sent.len(), 1);
    assert_ne!(sent[0].id, first_id);
    assert_eq!(body(sent[0])["updates"], 2);
    // Cancelling: no more progress envelopes.
    r2.clock.advance_secs(20);
    r2.cancel(&t, "mneme");
    r2.event(&t, progress(3, 1));
    assert!(envelopes(&r2.actions(), PROGRESS_KIND).is_empty());
    // The record still shows progress while the task is active.
    let rec = r2.book.status(t.as_str(), "mneme", r2.clock.now());
    assert_eq!(rec.progress.map(|p| p.updates), Some(3));
    let _ = loud;
}

#[test]
fn only_the_delegator_sees_or_cancels_a_task() {
    let mut r = Rig::new(config());
    let a = r.submit_as("mneme", "mine").unwrap();
    let b = r.submit_as("scribe", "theirs").unwrap();
    let now = r.clock.now();
    let theirs = r.book.status(b.as_str(), "mneme", now);
    assert_eq!(theirs, TaskRecord::unknown(b.as_str()));
    let never = r
        .book
        .status("task-00000000000000000000000000000000", "mneme", now);
    assert_eq!(never.state, "unknown");
    assert_eq!(r.book.status("not-a-task", "mneme", now).state, "unknown");
    assert_eq!(r.cancel(&b, "mneme"), "unknown");
    assert!(r
        .actions()
        .iter()
        .all(|x| !matches!(x, TaskAction::Commit(c) if c.envelope.is_some())));
    assert_eq!(r.state(&b), "unknown", "mneme cannot see it");
    assert_eq!(
        r.book.status(b.as_str(), "scribe", now).state,
        "queued",
        "the cancel did nothing"
    );
    let list = r.book.list("mneme", now);
    assert_eq!(
        list.tasks
            .iter()
            .map(|t| t.task.clone())
            .collect::<Vec<_>>(),
        vec![a.to_string()]
    );
}

#[test]
fn lexical_cwd_refuses_escapes_and_prefix_confusion() {
    let roots = vec![PathBuf::from("/root"), PathBuf::from("/srv/work")];
    let ok = |p: &str| lexical_cwd(&roots, p);
    assert_eq!(ok("/root").unwrap(), PathBuf::from("/root"));
    assert_eq!(ok("/root/").unwrap(), PathBuf::from("/root"));
    assert_eq!(ok("/root/a/./b").unwrap(), PathBuf::from("/root/a/b"));
    assert_eq!(ok("/root/a/../b").unwrap(), PathBuf::from("/root/b"));
    assert_eq!(ok("//root//a").unwrap(), PathBuf::from("/root/a"));
    assert_eq!(
        ok("/srv/other/../work/x").unwrap(),
        PathBuf::from("/srv/work/x")
    );
    let outside = |p: &str| matches!(ok(p), Err(DelegateRefusal::CwdOutsideRoots { .. }));
    for p in [
        "/root/..",
        "/root/../etc",
        "/root/a/../../etc",
        "/root/./../root-prefix-evil",
        "/root-prefix-evil",
        "/rootling",
        "/srv/workshop",
        "/srv",
        "/",
        "/..",
        "/../root/../..",
    ] {
        assert!(outside(p), "{p} must be refused: {:?}", ok(p));
    }
    // `/..` is `/`, so these climb back into a root and are fine.
    assert_eq!(ok("/../root/x").unwrap(), PathBuf::from("/root/x"));
    assert_eq!(ok("/../../srv/work").unwrap(), PathBuf::from("/srv/work"));
    assert_eq!(ok("root/a"), Err(DelegateRefusal::CwdNotAbsolute));
    assert_eq!(ok(""), Err(DelegateRefusal::CwdNotAbsolute));
    assert_eq!(ok("./root"), Err(DelegateRefusal::CwdNotAbsolute));
    assert_eq!(ok("/root/\0x"), Err(DelegateRefusal::CwdNotUtf8OrNul));
    let e = ok("/etc").unwrap_err().to_string();
    assert_eq!(
        e,
        "invalid delegate: cwd is under none of tasks.cwd_roots (/root, /srv/work)"
    );
}

/// The manifests read again (issue 35): the new catalogue decides every later `delegate`;
/// a task already running on an agent that left it runs to its end, and one still queued
/// starts (the executor then resolves its agent against the catalogue in force).
#[test]
fn a_new_catalogue_decides_later_delegations_and_leaves_running_tasks_be() {
    let mut r = Rig::new(config());
    let running = r.submit("p");
    r.start_ready();
    assert_eq!(started(&r.actions()), vec![running.clone()]);
    r.book
        .set_agents(["claude".to_owned(), "newone".to_owned()]);
    let e = r.submit_as("mneme", "p").unwrap_err();
    assert_eq!(
        e,
        DelegateRefusal::UnknownAgent {
            runnable: vec!["claude".into(), "newone".into()]
        }
    );
    assert!(e.to_string().contains("this hub can run: claude, newone; agent manifests are read when the hub starts and on SIGHUP"), "{e}");
    let added = DelegateRequest {
        agent: "newone".into(),
        cwd: "/srv/root".into(),
        prompt: "p".into(),
        ..DelegateRequest::default()
    };
    let queued = r.request(added).expect("an agent the new catalogue has");
    assert_eq!(r.state(&running), "running");
    r.event(&running, completed());
    r.event(&running, ended());
    assert_eq!(r.state(&running), "completed");
    r.start_ready();
    assert!(started(&r.actions()).contains(&queued));
    // A hub left with no agent says so, with the same hint.
    r.book.set_agents(Vec::<String>::new());
    let e = r.submit_as("mneme", "p").unwrap_err().to_string();
    assert_eq!(e, "invalid delegate: unknown agent; this hub has no agent that can take delegated work; agent manifests are read when the hub starts and on SIGHUP (agent-hub-server reload --config <the hub's config>)");
}

#[test]
fn verb_time_refusals_make_no_task() {
    let mut r = Rig::new(config());
    let base = DelegateRequest {
        agent: "codex".into(),
        cwd: "/srv/root".into(),
        prompt: "p".into(),
        ..DelegateRequest::default()
    };
    let with = |f: &dyn Fn(&mut DelegateRequest)| {
        let mut q = base.clone();
        f(&mut q);
        q
    };
    let cases: Vec<(DelegateRequest, &str)> = vec![
        (
            with(&|q| q.agent = "../../bin/sh".into()),
            "invalid delegate: unknown agent; this hub can run: claude, codex; agent manifests are read when the hub starts and on SIGHUP (agent-hub-server reload --config <the hub's config>)",
        ),
        (
            with(&|q| q.cwd = "/srv/root/../../etc".into()),
            "invalid delegate: cwd is under none of tasks.cwd_roots (/srv/root, /home/me/src)",
        ),
        (
            with(&|q| q.cwd = "srv/root".into()),
            "invalid delegate: cwd must be an absolute path",
        ),
        (
            with(&|q| q.prompt = String::new()),
            "invalid delegate: prompt must not be empty",
        ),
        (
            with(&|q| q.prompt = "x".repeat(101)),
            "invalid delegate: prompt is 101 bytes, over tasks.prompt_max_bytes (100)",
        ),
        (
            with(&|q| q.timeout_secs = Some(0)),
            "invalid delegate: timeoutSecs must be 1..=1800 (tasks.timeout_secs)",
        ),
        (
            with(&|q| q.timeout_secs = Some(1801)),
            "invalid delegate: timeoutSecs must be 1..=1800 (tasks.timeout_secs)",
        ),
        (
            with(&|q| q.progress_secs = Some(9)),
            "invalid delegate: progressSecs must be 0 (no progress envelopes) or 10..=604800 (tasks.min_progress_secs)",
        ),
        (
            with(&|q| q.progress_secs = Some(u64::MAX)),
            "invalid delegate: progressSecs must be 0 (no progress envelopes) or 10..=604800 (tasks.min_progress_secs)",
        ),
        (
            with(&|q| q.peer = Some("elsewhere".into())),
            "invalid delegate: unknown peer, or a peer this hub does not delegate to",
        ),
        (
            with(&|q| {
                q.peer = Some("lab".into());
                q.agent = "../x".into()
            }),
            "invalid delegate: agent is not an agent name ([a-z0-9][a-z0-9_-]*, at most 32 bytes)",
        ),
    ];
    for (req, want) in cases {
        let e = r.request(req).unwrap_err();
        assert_eq!(e.to_string(), want);
    }
    // A task identity may not delegate.
    let e = r
        .submit_as("task-0123456789abcdef0123456789abcdef", "p")
        .unwrap_err();
    assert_eq!(e, DelegateRefusal::TaskIdentity);
    assert!(r.actions().is_empty());
    assert!(r.book.list("mneme", r.clock.now()).tasks.is_empty());
    // Edge values that pass: the bounds themselves, and a peer's agent it may have.
    r.request(with(&|q| q.timeout_secs = Some(1800))).unwrap();
    r.request(with(&|q| q.timeout_secs = Some(1))).unwrap();
    r.request(with(&|q| q.progress_secs = Some(10))).unwrap();
    r.request(with(&|q| {
        q.peer = Some("lab".into());
        q.agent = "gemini".into()
    }))
    .unwrap();
    r.request(with(&|q| q.prompt = "x".repeat(100))).unwrap();
    r.request(base.clone()).unwrap();
    // Five local ones: two will take the free slots, three wait, so the queue of 3 is full
    // (the peer's task waits for its link, apart: tests::peer).
    assert!(matches!(
        r.request(base.clone()),
        Err(DelegateRefusal::QueueFull { queue_max: 3 })
    ));
}

#[test]
fn ids_and_tokens_are_reproducible_from_a_seed() {
    let run = |seed: u64| {
        let mut r = Rig::new(config());
        r.ids = SeededIds::new(seed);
        let a = r.submit("a");
        let b = r.submit("b");
        let now = r.clock.now();
        let s = r.book.next_to_start(now, &mut r.ids).unwrap();
        r.event(&a, completed());
        let env_id = envelopes(&r.actions(), OUTCOME_KIND)[0].id.clone();
        (a, b, s.token, env_id)
    };
    let (a1, b1, t1, e1) = run(5);
    let (a2, b2, t2, e2) = run(5);
    assert_eq!((&a1, &b1, &t1, &e1), (&a2, &b2, &t2, &e2));
    assert_ne!(run(6).0, a1);
    assert_ne!(a1, b1);
    for id in [&a1, &b1] {
        assert!(TaskId::parse(id.as_str()).is_some(), "{id}");
    }
    assert!(t1.bytes().all(|b| b.is_ascii_hexdigit()) && t1.len() == 64);
    assert!(TaskId::parse("task-ABCDEF0123456789abcdef0123456789").is_none());
    assert!(TaskId::parse("task-0123").is_none());
    assert!(TaskId::parse("0123456789abcdef0123456789abcdef").is_none());
}

#[test]
fn a_task_identity_lives_from_start_to_outcome_and_mails_only_whom_it_may() {
    let mut r = Rig::new(config());
    let a = r.submit("a");
    assert_eq!(r.book.verify_identity(a.as_str(), ""), None, "not started");
    let now = r.clock.now();
    let spec = r.book.next_to_start(now, &mut r.ids).unwrap();
    assert_eq!(
        r.book.verify_identity(a.as_str(), &spec.token),
        Some("mneme")
    );
    assert_eq!(r.book.verify_identity(a.as_str(), "wrong"), None);
    let mut other = spec.token.clone();
    other.replace_range(63.., "x");
    assert_eq!(r.book.verify_identity(a.as_str(), &other), None);
    assert!(r.book.may_mail(a.as_str(), "mneme"));
    assert!(r.book.may_mail(a.as_str(), "critic"));
    assert!(!r.book.may_mail(a.as_str(), "scribe"));
    assert!(!r.book.may_mail("mneme", "mneme"), "not a task identity");
    r.event(&a, completed());
    assert_eq!(r.book.verify_identity(a.as_str(), &spec.token), None);
    assert!(!r.book.may_mail(a.as_str(), "mneme"));
}

#[test]
fn shutdown_cancels_running_tasks_and_starts_nothing() {
    let mut r = Rig::new(BookConfig {
        max_concurrent: 1,
        ..config()
    });
    let a = r.submit("a");
    let b = r.submit("b");
    r.start_ready();
    r.actions();
    r.book.shutdown();
    let acts = r.actions();
    assert_eq!(cancels(&acts), vec![a.clone()]);
    assert!(
        acts.iter().all(|x| !matches!(x, TaskAction::Commit(_))),
        "the store keeps `running`"
    );
    r.event(
        &a,
        outcome(
            Status::Cancelled {
                end: CancelEnd::Stopped(StopReason::Cancelled),
            },
            "",
        ),
    );
    r.event(&a, ended());
    let acts = r.actions();
    assert_eq!(envelopes(&acts, OUTCOME_KIND).len(), 1);
    assert!(started(&acts).is_empty());
    assert_eq!(r.state(&b), "queued");
}

#[test]
fn a_runner_that_ends_without_an_outcome_still_gives_one() {
    let mut r = Rig::new(config());
    let a = r.submit("a");
    r.start_ready();
    r.actions();
    r.event(
        &a,
        TaskEvent::Ended(TaskEnd {
            exit: Some(ExitStatus::signal(9)),
            ..TaskEnd::default()
        }),
    );
    let acts = r.actions();
    let outs = envelopes(&acts, OUTCOME_KIND);
    assert_eq!(outs.len(), 1);
    assert_eq!(body(outs[0])["state"], "failed");
    assert_eq!(
        body(outs[0])["reason"],
        "the runner ended (signal 9) without an outcome"
    );
    assert_eq!(r.book.slots_held(), 0);
    // Events for unknown tasks are logged, never a panic.
    let ghost = TaskId::parse("task-ffffffffffffffffffffffffffffffff").unwrap();
    r.event(&ghost, completed());
    assert!(matches!(r.actions().as_slice(), [TaskAction::Log(_)]));
}

#[test]
fn audit_records_never_hold_the_prompt() {
    let mut r = Rig::new(config());
    let a = r.submit("the secret plan");
    r.start_ready();
    r.event(&a, completed());
    let mut out = String::new();
    for act in r.actions() {
        if let TaskAction::Commit(c) = act {
            for rec in c.audit {
                rec.encode_fields_into(&mut out);
                out.push('\n');
            }
            assert!(!format!("{:?}", c.store).contains("secret plan"));
        }
    }
    assert!(!out.contains("secret plan"), "{out}");
    assert!(out.starts_with(&format!(
        "\"task_accepted\",\"task\":\"{a}\",\"delegator\":\"mneme\",\"agent\":\"codex\",\"peer\":null,\"cwd\":\"/srv/root/app\",\"prompt_bytes\":15\n"
    )), "{out}");
    assert!(out.contains("\"task_started\""));
    assert!(out.contains("\"task_ended\",\"task\":"));
}
