//! Simulation tests of `activity` (SPEC §14.1): the last accepted envelopes' metadata with
//! their state now, the unfinished tasks, who may ask, and that no body, correlation id,
//! prompt or token ever rides on the reply.

use super::*;
use crate::hub::recent::RECENT_ENVELOPES;
use crate::wire::Activity;

/// Runs `activity` as `asker` and returns the hub's answer.
fn activity(sim: &mut Sim, asker: &str) -> Activity {
    let c = sim.login(asker);
    sim.line(c, r#"{"activity":{}}"#);
    let d = sim.drain();
    match d.lines(c).last() {
        Some(HubLine::Activity(a)) => a.clone(),
        other => panic!("expected an activity line, got {other:?}"),
    }
}

#[test]
fn activity_lists_the_last_envelopes_newest_first_with_their_state_and_no_body() {
    let mut sim = Sim::new();
    // The operator's view (`others_envelopes_and_tasks_only_in_the_operators_view`).
    sim.hub.settings.operators = vec!["datastore".into()];
    let a = activity(&mut sim, "mneme");
    assert!(a.envelopes.is_empty() && a.tasks.is_empty());
    assert_eq!(
        a.agents,
        sim.hub.presence().agents,
        "the roster as who shows it"
    );
    let (c, first) = sim.send_body(
        "mneme",
        "scribe",
        "task",
        Some("corr-secret-7"),
        r#"{"note":"body-secret-7"}"#,
    );
    sim.commit_ok();
    sim.drain();
    sim.closed(c, true);
    let r = sim.park("datastore");
    let second = sim.sent("scribe", "datastore", "result", None);
    assert_eq!(sim.drain().delivered_id(r), second);
    sim.io_flush();

    let a = activity(&mut sim, "datastore");
    let rows: Vec<(&str, &str, &str, &str, &str)> = a
        .envelopes
        .iter()
        .map(|e| {
            (
                e.id.as_str(),
                e.from.as_str(),
                e.to.as_str(),
                e.kind.as_str(),
                e.state.as_str(),
            )
        })
        .collect();
    assert_eq!(
        rows,
        [
            (
                second.as_str(),
                "scribe",
                "datastore",
                "result",
                "delivered"
            ),
            (first.as_str(), "mneme", "scribe", "task", "queued"),
        ],
        "newest first, each with the state the ledger holds now"
    );
    assert_eq!(a.envelopes[1].accepted_at, at(0).unwrap());
    assert!(a.envelopes.iter().all(|e| e.state_at.is_some()));
    assert!(a.tasks.is_empty(), "no [tasks]: no tasks");
    let ds = a.agents.iter().find(|p| p.name == "datastore").unwrap();
    assert!(ds.last_delivery.is_some() && ds.parked.is_empty());
    assert_eq!(
        a.agents.iter().find(|p| p.name == "scribe").unwrap().queued,
        1
    );
    let text = HubLine::Activity(a).encode();
    for secret in ["body-secret-7", "corr-secret-7", "tok-"] {
        assert!(
            !text.contains(secret),
            "{secret} on the activity line: {text}"
        );
    }
}

#[test]
fn only_accepted_envelopes_are_listed_and_the_list_is_bounded() {
    let mut sim = Sim::new();
    // A send the commit refuses was never accepted: it is not activity.
    let (_c, refused) = sim.send("mneme", "scribe", "task", None);
    sim.commit_err();
    sim.drain();
    assert!(
        activity(&mut sim, "mneme").envelopes.is_empty(),
        "{refused}"
    );
    let ids: Vec<String> = (0..RECENT_ENVELOPES + 3)
        .map(|_| sim.sent("mneme", "scribe", "task", None))
        .collect();
    let a = activity(&mut sim, "mneme");
    assert_eq!(a.envelopes.len(), RECENT_ENVELOPES);
    assert_eq!(a.envelopes[0].id, *ids.last().unwrap());
    assert_eq!(a.envelopes.last().unwrap().id, ids[3], "the oldest went");
}

#[test]
fn an_envelope_the_ledger_forgot_is_listed_as_forgotten() {
    let mut sim = Sim::durable_with_limits(|l| l.idempotency_window_secs = 60);
    let now = sim.now();
    sim.hub.start_purging(now);
    let id = sim.sent("mneme", "datastore", "task", None);
    let r = sim.park("datastore");
    assert_eq!(sim.drain().delivered_id(r), id);
    sim.io_flush();
    sim.commit_ok();
    sim.drain();
    assert_eq!(activity(&mut sim, "mneme").envelopes[0].state, "delivered");
    for _ in 0..7 {
        sim.advance(10_000);
    }
    sim.commit_ok();
    sim.drain();
    let a = activity(&mut sim, "mneme");
    assert_eq!(
        (a.envelopes[0].id.as_str(), a.envelopes[0].state.as_str()),
        (id.as_str(), "forgotten")
    );
    assert_eq!(a.envelopes[0].state_at, None);
}

#[test]
fn unfinished_tasks_are_listed_as_metadata_and_a_task_identity_may_not_ask() {
    let mut sim = super::tasks::tasks_sim();
    sim.hub.settings.operators = vec!["datastore".into()];
    let (task, token) = super::tasks::running_task_with_token(&mut sim);
    let a = activity(&mut sim, "datastore");
    assert_eq!(a.tasks.len(), 1);
    let t = &a.tasks[0];
    assert_eq!(
        (t.task.as_str(), t.agent.as_str(), t.delegator.as_str()),
        (task.as_str(), "fake", "mneme")
    );
    assert_eq!(t.state, "running");
    let text = HubLine::Activity(a).encode();
    assert!(!text.contains("do it"), "no prompt: {text}");
    assert!(!text.contains(&token), "no task token: {text}");

    // The task's own identity authenticates, and is refused this verb.
    let c = sim.open();
    sim.line(c, &hello_text(&task, &token));
    sim.line(c, r#"{"activity":{}}"#);
    let d = sim.drain();
    assert_eq!(d.lines(c).first(), Some(&HubLine::Ok));
    assert_eq!(
        d.error(c),
        "invalid activity: a task identity may not ask for the hub's activity"
    );
    assert!(d.closed(c));
}

/// Issue 29: another agent's envelope ids, task ids and filters tell who works on what, and
/// are what a forged outcome or a stranger's mail to a task would need. Without the
/// operator's view an asker sees its own envelopes (sent or received), its own tasks and
/// its own filters; names, states and queue lengths stay visible to all.
#[test]
fn others_envelopes_and_tasks_only_in_the_operators_view() {
    let mut sim = super::tasks::tasks_sim();
    sim.hub.settings.operators = vec!["scribe".into()];
    let (task, _token) = super::tasks::running_task_with_token(&mut sim);
    let to_ds = sim.sent("mneme", "datastore", "task", None);
    let to_me = sim.sent("scribe", "datastore", "note", None);
    let _parked = sim.await_("mneme", Some(&task), Some("task_outcome"), None);

    let a = activity(&mut sim, "datastore");
    let ids: BTreeSet<&str> = a.envelopes.iter().map(|e| e.id.as_str()).collect();
    assert_eq!(
        ids,
        BTreeSet::from([to_ds.as_str(), to_me.as_str()]),
        "its own mail"
    );
    assert!(
        a.tasks.is_empty(),
        "mneme's task is not datastore's: {:?}",
        a.tasks
    );
    let text = HubLine::Activity(a.clone()).encode();
    assert!(!text.contains(&task), "no other agent's task id: {text}");
    let mneme = a.agents.iter().find(|p| p.name == "mneme").unwrap();
    assert!(mneme.parked.is_empty() && mneme.state == "waiting");

    // The delegator sees its task; the operator sees everything.
    let a = activity(&mut sim, "mneme");
    assert_eq!(a.tasks.len(), 1);
    assert_eq!(a.envelopes.len(), 1, "the one it sent: {:?}", a.envelopes);
    let a = activity(&mut sim, "scribe");
    assert_eq!(a.tasks.len(), 1);
    assert_eq!(a.envelopes.len(), 2);
    let mneme = a.agents.iter().find(|p| p.name == "mneme").unwrap();
    assert_eq!(mneme.parked[0].reply_to.as_deref(), Some(task.as_str()));
}
