//! The book's follow-ups (issue 38 design §2, §11 B) on the virtual clock of `tasks::tests`:
//! a kept turn makes the task `idle` and frees its slot, a follow-up numbers the next turn
//! and is sent only after its commit, an interrupt's turns end in order, the keep window's
//! expiry settles with the last turn's state and no second envelope, the cap closes the
//! oldest kept session, and each refusal has the design's words.

use super::*;
use crate::tasks::turns::FollowUpSettings;
use crate::wire::TaskPromptRequest;

fn keeping(keep: u64, max_kept: usize, max_turns: u32) -> BookConfig {
    BookConfig {
        follow_ups: FollowUpSettings {
            session_keep_secs: keep,
            max_kept_sessions: max_kept,
            max_turns,
        },
        ..config()
    }
}

fn kept_outcome(turn: u32, status: Status) -> TaskEvent {
    TaskEvent::Outcome(Outcome {
        status,
        text: format!("turn {turn}"),
        truncated: false,
        meter: Box::default(),
        progress: Progress::default(),
        turn,
        kept: true,
    })
}

fn done(turn: u32) -> TaskEvent {
    kept_outcome(
        turn,
        Status::Completed {
            stop_reason: StopReason::EndTurn,
        },
    )
}

fn ask(
    r: &mut Rig,
    id: &TaskId,
    who: &str,
    text: &str,
    interrupt: bool,
) -> Result<PromptTaken, PromptRefusal> {
    let now = r.clock.now();
    let req = TaskPromptRequest {
        task: id.as_str().to_owned(),
        prompt: text.to_owned(),
        interrupt: interrupt.then_some(true),
    };
    r.book.prompt(req, who, now)
}

fn envelopes(acts: &[TaskAction]) -> Vec<Value> {
    acts.iter()
        .filter_map(|a| match a {
            TaskAction::Commit(TaskCommit {
                envelope: Some(e), ..
            }) => Some(body(e)),
            _ => None,
        })
        .collect()
}

/// A started task of mneme's whose first turn completed with its session kept.
fn idle(r: &mut Rig) -> TaskId {
    let id = r.submit("first");
    r.start_ready();
    let acts = r.actions();
    let TaskAction::Start(spec) = acts
        .iter()
        .find(|a| matches!(a, TaskAction::Start(_)))
        .unwrap()
    else {
        unreachable!()
    };
    assert!(spec.keep_session);
    r.event(&id, done(1));
    id
}

#[test]
fn a_kept_turn_makes_the_task_idle_frees_its_slot_and_says_kept_until() {
    let mut r = Rig::new(BookConfig {
        max_concurrent: 1,
        ..keeping(600, 8, 32)
    });
    let id = idle(&mut r);
    let waiting = r.submit("next in line");
    let acts = r.actions();
    let bodies = envelopes(&acts);
    assert_eq!(bodies[0]["turn"], 1);
    assert_eq!(bodies[0]["session"], "kept");
    assert!(bodies[0]["keptUntil"].as_str().unwrap().ends_with('Z'));
    assert_eq!(r.state(&id), "idle");
    assert_eq!(r.book.slots_held(), 0, "idle holds no runner slot");
    r.start_ready();
    assert_eq!(started(&r.actions()), vec![waiting], "queued work starts");
}

#[test]
fn a_follow_up_is_numbered_and_goes_to_the_runner_only_through_its_commit() {
    let mut r = Rig::new(keeping(600, 8, 32));
    let id = idle(&mut r);
    r.actions();
    let taken = ask(&mut r, &id, "mneme", "second", false).expect("taken");
    assert_eq!(
        (taken.reply.turn, taken.reply.state.as_str()),
        (2, "running")
    );
    assert!(matches!(
        taken.go,
        TaskAction::Prompt {
            turn: 2,
            interrupt: false,
            ..
        }
    ));
    assert!(
        matches!(&taken.commit.audit[0], TaskAudit::TurnStarted { turn: 2, how, .. } if how == "prompt")
    );
    assert!(r.actions().is_empty(), "nothing goes out before the commit");
    assert_eq!(r.state(&id), "running");
    // A failed commit takes it back: idle again, the same keep.
    r.book.prompt_failed(taken.undo);
    assert_eq!(r.state(&id), "idle");
    assert_eq!(
        r.book.status(id.as_str(), "mneme", r.clock.now()).turn,
        Some(1)
    );
}

#[test]
fn an_interrupt_ends_the_open_turn_then_the_next_in_order() {
    let mut r = Rig::new(keeping(600, 8, 32));
    let id = idle(&mut r);
    ask(&mut r, &id, "mneme", "second", false).unwrap();
    let err = ask(&mut r, &id, "mneme", "third", false).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("invalid task_prompt: {id} has turn 2 open; wait for its outcome or send it with interrupt")
    );
    let t = ask(&mut r, &id, "mneme", "third", true).unwrap();
    assert!(matches!(
        t.go,
        TaskAction::Prompt {
            turn: 3,
            interrupt: true,
            ..
        }
    ));
    assert!(
        ask(&mut r, &id, "mneme", "fourth", true).is_err(),
        "one interrupt at a time"
    );
    r.actions();
    r.event(
        &id,
        kept_outcome(
            2,
            Status::Cancelled {
                end: CancelEnd::Stopped(StopReason::Cancelled),
            },
        ),
    );
    let b = envelopes(&r.actions());
    assert_eq!(
        (b[0]["turn"].as_u64(), b[0]["state"].as_str()),
        (Some(2), Some("cancelled"))
    );
    assert_eq!(b[0]["reason"], "interrupted by a follow-up (turn 3)");
    assert_eq!(r.state(&id), "running", "turn 3 runs");
    r.event(&id, done(3));
    let b = envelopes(&r.actions());
    assert_eq!(
        (b[0]["turn"].as_u64(), b[0]["session"].as_str()),
        (Some(3), Some("kept"))
    );
}

#[test]
fn the_keep_window_expires_and_the_task_settles_with_its_last_turn_quietly() {
    let mut r = Rig::new(keeping(30, 8, 32));
    let id = idle(&mut r);
    r.actions();
    assert_eq!(
        r.book.poll_timeout(),
        Some(r.clock.now().mono + Duration::from_secs(30))
    );
    r.clock.advance_secs(29);
    let now = r.clock.now();
    r.book.handle_timeout(now, &mut r.ids, &|_| false);
    assert!(r.actions().is_empty());
    r.clock.advance_secs(1);
    let now = r.clock.now();
    r.book.handle_timeout(now, &mut r.ids, &|_| false);
    let acts = r.actions();
    assert!(envelopes(&acts).is_empty(), "no second envelope");
    let audit: Vec<&TaskAudit> = acts
        .iter()
        .filter_map(|a| match a {
            TaskAction::Commit(c) => Some(c.audit.iter()),
            _ => None,
        })
        .flatten()
        .collect();
    assert!(audit
        .iter()
        .any(|a| matches!(a, TaskAudit::SessionClosed { why, .. } if why == "keep_expired")));
    assert!(acts
        .iter()
        .any(|a| matches!(a, TaskAction::Close(t) if *t == id)));
    assert_eq!(r.state(&id), "completed");
}

#[test]
fn keep_secs_narrows_the_window_and_over_the_cap_the_oldest_closes() {
    let mut r = Rig::new(keeping(600, 1, 32));
    let req = DelegateRequest {
        agent: "codex".into(),
        cwd: "/srv/root/app".into(),
        prompt: "p".into(),
        keep_secs: Some(601),
        ..DelegateRequest::default()
    };
    assert_eq!(
        r.request(req).unwrap_err().to_string(),
        "invalid delegate: keepSecs must be 0..=600 (tasks.session_keep_secs)"
    );
    let a = idle(&mut r);
    r.clock.advance_secs(1);
    let b = idle(&mut r);
    let acts = r.actions();
    assert!(
        acts.iter()
            .any(|x| matches!(x, TaskAction::Close(t) if *t == a)),
        "the oldest"
    );
    assert_eq!(r.state(&a), "completed");
    assert_eq!(r.state(&b), "idle");
}

#[test]
fn follow_ups_are_refused_with_the_designs_words() {
    let mut r = Rig::new(keeping(600, 8, 2));
    let id = idle(&mut r);
    assert_eq!(
        ask(&mut r, &id, "stranger", "x", false).unwrap_err(),
        PromptRefusal::UnknownTask
    );
    let big = "x".repeat(101);
    assert_eq!(
        ask(&mut r, &id, "mneme", &big, false)
            .unwrap_err()
            .to_string(),
        "invalid task_prompt: prompt is 101 bytes, over tasks.prompt_max_bytes (100)"
    );
    ask(&mut r, &id, "mneme", "second", false).unwrap();
    r.event(&id, done(2));
    assert_eq!(
        ask(&mut r, &id, "mneme", "third", false)
            .unwrap_err()
            .to_string(),
        format!("invalid task_prompt: {id} has had tasks.max_turns (2) turns")
    );
    let q = r.submit("queued");
    assert_eq!(
        ask(&mut r, &q, "mneme", "x", false)
            .unwrap_err()
            .to_string(),
        format!("invalid task_prompt: {q} is queued; its first turn has not ended")
    );
    // The agent exits while kept: the task settles with its last turn; nothing more is taken.
    r.event(&id, TaskEvent::Ended(TaskEnd::default()));
    assert_eq!(r.state(&id), "completed");
    assert_eq!(
        ask(&mut r, &id, "mneme", "x", false)
            .unwrap_err()
            .to_string(),
        format!("invalid task_prompt: {id} has no session any more (it ended completed)")
    );
}
