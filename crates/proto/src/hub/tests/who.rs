//! Simulation tests of `who` (SPEC §14): presence of every roster name.

use super::*;

// ----- presence (SPEC §14) -----

/// Runs `who` as `asker` and returns the hub's answer.
fn who(sim: &mut Sim, asker: &str) -> crate::wire::Presence {
    let c = sim.login(asker);
    sim.line(c, r#"{"who":{}}"#);
    let d = sim.drain();
    match d.lines(c).last() {
        Some(HubLine::Who(p)) => p.clone(),
        other => panic!("expected a who line, got {other:?}"),
    }
}

#[test]
fn who_lists_every_roster_name_with_parked_filters_queue_and_times() {
    let mut sim = Sim::new();
    // The operator's view: everyone's filters (`who_shows_others_filters_only_to_an_operator`).
    sim.hub.operators = vec!["scribe".into(), "mneme".into()];
    assert!(who(&mut sim, "mneme")
        .agents
        .iter()
        .all(|a| a.last_delivery.is_none() && a.parked.is_empty()));
    let _filtered = sim.await_("datastore", Some("x1"), Some("result"), None);
    let _any = sim.await_("datastore", None, None, None);
    sim.sent("mneme", "scribe", "task", None);
    sim.sent("mneme", "scribe", "task", None);
    let p = who(&mut sim, "scribe");
    let names: Vec<&str> = p.agents.iter().map(|a| a.name.as_str()).collect();
    assert_eq!(
        names,
        ["datastore", "mneme", "scribe"],
        "every roster name, sorted"
    );
    let ds = &p.agents[0];
    assert_eq!(ds.parked.len(), 2);
    assert_eq!(
        (
            ds.parked[0].reply_to.as_deref(),
            ds.parked[0].kind.as_deref()
        ),
        (Some("x1"), Some("result"))
    );
    assert_eq!(
        (
            ds.parked[1].reply_to.as_deref(),
            ds.parked[1].kind.as_deref()
        ),
        (None, None),
        "oldest first"
    );
    assert_eq!(p.agents[2].queued, 2);
    assert!(p.agents[1].last_seen.is_some(), "mneme authenticated");
    // A delivery to datastore's unfiltered await sets its last delivery.
    sim.sent("mneme", "datastore", "task", None);
    sim.io_flush();
    let p = who(&mut sim, "mneme");
    assert!(p.agents[0].last_delivery.is_some());
    assert_eq!(p.agents[0].parked.len(), 1);
    let text = serde_json::to_string(&p).unwrap();
    assert!(!text.contains("tok-"), "no token in a who answer: {text}");
}

/// Issue 29: a filter names what an agent waits for, often a task id (`delegate --wait`
/// parks on `replyTo` = its task): only the asker's own and the operator's view show it.
/// Everyone still sees every name, state and queue length.
#[test]
fn who_shows_others_filters_only_to_an_operator() {
    let mut sim = Sim::new();
    sim.hub.operators = vec!["scribe".into()];
    let task = "task-0123456789abcdef0123456789abcdef";
    let _waiting = sim.await_("datastore", Some(task), Some("task_outcome"), None);
    let _own = sim.await_("mneme", None, Some("result"), None);
    let p = who(&mut sim, "mneme");
    let ds = p.agents.iter().find(|a| a.name == "datastore").unwrap();
    assert!(ds.parked.is_empty(), "another agent's filters: {ds:?}");
    assert_eq!(ds.state, "waiting", "its state still says it waits");
    let me = p.agents.iter().find(|a| a.name == "mneme").unwrap();
    assert_eq!(me.parked.len(), 1, "the asker's own awaits and filters");
    assert_eq!(me.parked[0].kind.as_deref(), Some("result"));
    let text = serde_json::to_string(&p).unwrap();
    assert!(!text.contains(task), "no other agent's task id: {text}");
    // The operator sees them all.
    let p = who(&mut sim, "scribe");
    let ds = p.agents.iter().find(|a| a.name == "datastore").unwrap();
    assert_eq!(ds.parked.len(), 1);
    assert_eq!(ds.parked[0].reply_to.as_deref(), Some(task));
    let me = p.agents.iter().find(|a| a.name == "mneme").unwrap();
    assert_eq!(me.parked.len(), 1);
}
