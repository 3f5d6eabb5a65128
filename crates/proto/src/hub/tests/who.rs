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
    sim.hub.settings.operators = vec!["scribe".into(), "mneme".into()];
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
    sim.hub.settings.operators = vec!["scribe".into()];
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

// ----- mail nobody holds (SPEC §14 "Mail nobody holds") -----

/// `who` with `offRoster` as `asker`: the whole answer and its text.
fn who_off_roster(sim: &mut Sim, asker: &str) -> (crate::wire::Presence, String) {
    let c = sim.login(asker);
    sim.line(c, r#"{"who":{"offRoster":true}}"#);
    let d = sim.drain();
    match d.lines(c).last() {
        Some(line @ HubLine::Who(p)) => (p.clone(), line.encode()),
        other => panic!("expected a who line, got {other:?}"),
    }
}

fn rows(p: &crate::wire::Presence) -> Vec<(String, u64, String)> {
    p.off_roster
        .as_ref()
        .expect("asked with offRoster")
        .iter()
        .map(|q| (q.name.clone(), q.queued, q.reason.clone()))
        .collect()
}

fn row(name: &str, queued: u64, reason: &str) -> (String, u64, String) {
    (name.into(), queued, reason.into())
}

/// A typo and an address for a hub this one does not forward to are queued (SPEC §5.1) and
/// listed with their reason; a forwarding peer's address is not (its queue drains into the
/// link). The operator sees every sender's count; anyone else only the names holding its own
/// mail, counted as its own, so a hostile asker learns nothing of other senders' mail.
#[test]
fn who_lists_queues_nobody_holds_whole_to_an_operator_and_only_the_askers_own_to_others() {
    let mut sim = Sim::new();
    sim.hub.settings.operators = vec!["scribe".into()];
    sim.hub.enable_forwarding("east", ["west".to_owned()], 4);
    sim.sent("mneme", "wrker", "task", None);
    sim.sent("mneme", "wrker", "task", None);
    sim.sent("datastore", "wrker", "task", None);
    sim.sent("datastore", "x@nowhere", "task", None);
    sim.sent("datastore", "@nowhere", "task", None);
    sim.sent("datastore", "x@", "task", None);
    sim.sent("mneme", "bob@west", "task", None);
    sim.sent("mneme", "scribe", "task", None);
    let (p, text) = who_off_roster(&mut sim, "scribe");
    assert_eq!(
        rows(&p),
        [
            row("@nowhere", 1, "no such agent"),
            row("wrker", 3, "no such agent"),
            row("x@", 1, "no such agent"),
            row("x@nowhere", 1, "unknown peer"),
        ],
        "sorted by name; bob@west and the roster's scribe are someone's: {text}"
    );
    assert!(
        text.find("\"agents\"") < text.find("\"offRoster\""),
        "the key comes after agents: {text}"
    );
    // mneme sees its own two envelopes to wrker, not datastore's, nor datastore's other names.
    let (p, text) = who_off_roster(&mut sim, "mneme");
    assert_eq!(rows(&p), [row("wrker", 2, "no such agent")], "{text}");
    assert!(!text.contains("nowhere"), "{text}");
    // A hostile asker that sent nothing there sees none of it, and an empty list says so.
    sim.hub.settings.operators.clear();
    let (p, text) = who_off_roster(&mut sim, "scribe");
    assert_eq!(rows(&p), [], "{text}");
    assert!(text.contains("\"offRoster\":[]"), "{text}");
    // A plain `who` is the reply it always was: no key an older client would refuse.
    let c = sim.login("datastore");
    sim.line(c, r#"{"who":{}}"#);
    let d = sim.drain();
    let line = d.lines(c).last().expect("a reply").encode();
    assert!(line.starts_with("{\"who\":{\"agents\":["), "{line}");
    assert!(!line.contains("offRoster"), "{line}");
}

/// `activity` carries the same list under the same visibility; the operator's costs no walk
/// of any queue (counts only), so a refresh a second stays cheap however much mail waits.
#[test]
fn activity_carries_the_queues_nobody_holds_and_the_operators_view_walks_no_queue() {
    let mut sim = Sim::new();
    sim.hub.settings.operators = vec!["scribe".into()];
    for _ in 0..50 {
        sim.sent("mneme", "wrker", "task", None);
    }
    sim.sent("datastore", "wrker", "task", None);
    let before = sim.hub.router().work();
    let all = sim.hub.activity_for("scribe");
    let spent = sim.hub.router().work().entries - before.entries;
    assert_eq!(spent, 0, "the operator's view counts, it does not walk");
    assert_eq!(all.off_roster.len(), 1);
    assert_eq!(all.off_roster[0].queued, 51);
    let own = sim.hub.activity_for("datastore");
    assert_eq!(own.off_roster.len(), 1);
    assert_eq!(
        (own.off_roster[0].name.as_str(), own.off_roster[0].queued),
        ("wrker", 1)
    );
    assert!(sim.hub.activity_for("scribe").agents.len() == 3);
}

/// A task identity's queue is its agent's while the task runs, and nobody's once it ended.
#[test]
fn a_live_task_identity_is_someone_and_an_ended_one_is_nobody() {
    let mut sim = super::tasks::tasks_sim();
    sim.hub.settings.operators = vec!["scribe".into()];
    let (task, _token) = super::tasks::running_task_with_token(&mut sim);
    sim.sent("mneme", &task, "note", None);
    let (p, text) = who_off_roster(&mut sim, "scribe");
    assert_eq!(rows(&p), [], "a live task reads its mail: {text}");
    let now = sim.now();
    sim.hub
        .handle_task_event(&task, super::tasks::outcome_completed(), now);
    sim.commit_ok();
    sim.drain();
    let (p, _) = who_off_roster(&mut sim, "scribe");
    assert_eq!(rows(&p), [row(&task, 1, "task ended")]);
    // Its delegator sees it (its own envelope); another agent does not learn the task id.
    let (p, _) = who_off_roster(&mut sim, "mneme");
    assert_eq!(rows(&p), [row(&task, 1, "task ended")]);
    let (p, text) = who_off_roster(&mut sim, "datastore");
    assert_eq!(rows(&p), []);
    assert!(!text.contains(&task), "{text}");
}

/// A roster name removed while mail waits for it (SIGHUP, `hub::roster_reload`) becomes a
/// name nobody holds: its queue is kept (no mail lost) and now listed.
#[test]
fn a_name_taken_off_the_roster_with_mail_queued_is_listed() {
    let mut sim = Sim::new();
    sim.hub.settings.operators = vec!["scribe".into()];
    sim.sent("mneme", "datastore", "task", None);
    let (p, _) = who_off_roster(&mut sim, "scribe");
    assert_eq!(rows(&p), []);
    let roster = Roster::parse("[agents]\nmneme = \"tok-mneme\"\nscribe = \"tok-scribe\"\n")
        .expect("a valid roster");
    let now = sim.now();
    sim.hub.replace_roster(roster, now);
    sim.drain();
    let (p, _) = who_off_roster(&mut sim, "scribe");
    assert_eq!(rows(&p), [row("datastore", 1, "no such agent")]);
    assert!(p.agents.iter().all(|a| a.name != "datastore"));
}
