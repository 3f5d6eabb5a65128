//! Simulation tests of the `warning` of `accepted` (SPEC §4.1, §5.1; issue 35): asked for by
//! the hello's `"warn":true`, given when `to` names no roster agent, live task or forwarding
//! peer, never to a hello that did not ask; the envelope is queued either way.

use super::tasks::{running_task_with_token, tasks_sim};
use super::*;

fn hello_warn(name: &str) -> String {
    json!({"hello": {"name": name, "token": token(name), "warn": true}}).to_string()
}

/// `from` says hello (asking for a warning when `warn`) and sends one envelope to `to`;
/// returns its id and the reply that follows the commit.
fn send_to(sim: &mut Sim, from: &str, to: &str, warn: bool) -> (String, HubLine) {
    let id = sim.fresh_id();
    let reply = send_id_to(sim, from, &id, to, warn);
    (id, reply)
}

fn send_id_to(sim: &mut Sim, from: &str, id: &str, to: &str, warn: bool) -> HubLine {
    let c = sim.open();
    let hello = if warn {
        hello_warn(from)
    } else {
        hello_text(from, &token(from))
    };
    sim.line(c, &hello);
    sim.line(c, &send_text(id, to, "note", None, "{}"));
    sim.commit_ok();
    let d = sim.drain();
    assert_eq!(d.lines(c).first(), Some(&HubLine::Ok), "{to}");
    d.lines(c).last().cloned().expect("a reply")
}

/// The warning of an `accepted` line for `id`; panics on any other line.
fn warning_of(reply: &HubLine, id: &str) -> Option<String> {
    match reply {
        HubLine::Accepted { id: got, warning } if got == id => warning.clone(),
        other => panic!("expected accepted {id}, got {other:?}"),
    }
}

#[test]
fn a_misspelt_name_is_queued_with_a_warning_that_names_the_roster_name_meant() {
    let mut sim = Sim::new();
    let (id, reply) = send_to(&mut sim, "mneme", "datastor", true);
    let w = warning_of(&reply, &id).expect("a warning");
    assert_eq!(
        w,
        "no agent named \"datastor\" is on this hub's roster (did you mean \"datastore\"?); the envelope is queued for that name all the same and waits until an agent of that name connects (status with its id shows where it is)"
    );
    assert_eq!(sim.queued_ids("datastor"), [id], "queued all the same");
    // Nothing close: the warning without a guess.
    let (id, reply) = send_to(&mut sim, "mneme", "zebra", true);
    let w = warning_of(&reply, &id).expect("a warning");
    assert!(
        w.starts_with("no agent named \"zebra\" is on this hub's roster; "),
        "{w}"
    );
    assert!(!w.contains("did you mean"), "{w}");
    // A case slip is a slip too.
    let (id, reply) = send_to(&mut sim, "mneme", "Scribe", true);
    let w = warning_of(&reply, &id).expect("a warning");
    assert!(w.contains("(did you mean \"scribe\"?)"), "{w}");
}

/// A 004 client never asks, and refuses an unknown key in a hub line (SPEC §10.1): its
/// `accepted` line stays the 004 line byte for byte.
#[test]
fn a_hello_that_did_not_ask_gets_the_004_accepted_line() {
    let mut sim = Sim::new();
    for warn in [false, true] {
        let (id, reply) = send_to(&mut sim, "mneme", "scribe", warn);
        assert_eq!(warning_of(&reply, &id), None, "a roster name");
    }
    let (id, reply) = send_to(&mut sim, "mneme", "datastor", false);
    assert_eq!(warning_of(&reply, &id), None, "not asked");
    assert_eq!(
        reply.encode(),
        format!("{{\"accepted\":{{\"id\":\"{id}\"}}}}\n")
    );
    // `"warn":false` is the same as no key.
    let c = sim.open();
    let hello = json!({"hello": {"name": "mneme", "token": token("mneme"), "warn": false}});
    sim.line(c, &hello.to_string());
    sim.line(c, &send_text("w-false", "datastor", "note", None, "{}"));
    sim.commit_ok();
    let d = sim.drain();
    assert_eq!(warning_of(&d.lines(c)[1], "w-false"), None);
}

#[test]
fn an_address_at_a_peer_this_hub_does_not_forward_to_is_warned_about() {
    // No relay at all: every `name@peer` waits here for ever.
    let mut sim = Sim::new();
    let (id, reply) = send_to(&mut sim, "mneme", "x@nowhere", true);
    let w = warning_of(&reply, &id).expect("a warning");
    assert_eq!(
        w,
        "\"nowhere\" is not a relay peer this hub forwards mail to, so nothing will carry \"x@nowhere\" there; the envelope is queued under that address all the same (status with its id shows where it is)"
    );
    assert_eq!(sim.queued_ids("x@nowhere"), [id]);

    let mut sim = Sim::new();
    sim.hub.enable_forwarding("east", ["west".to_owned()], 4);
    let (id, reply) = send_to(&mut sim, "mneme", "reviewer@west", true);
    assert_eq!(warning_of(&reply, &id), None, "a forwarding peer's agent");
    let (id, reply) = send_to(&mut sim, "mneme", "reviewer@wset", true);
    let w = warning_of(&reply, &id).expect("a warning");
    assert!(
        w.starts_with(
            "\"wset\" is not a relay peer this hub forwards mail to (did you mean \"west\"?)"
        ),
        "{w}"
    );
    let (id, reply) = send_to(&mut sim, "mneme", "scribe@east", true);
    let w = warning_of(&reply, &id).expect("a warning");
    assert!(
        w.starts_with("\"east\" is this hub's own relay peer id: a local agent is addressed by its name alone (\"scribe\")"),
        "{w}"
    );
}

#[test]
fn a_live_task_identity_is_no_unknown_name() {
    let mut sim = tasks_sim();
    let (task, _token) = running_task_with_token(&mut sim);
    let (id, reply) = send_to(&mut sim, "mneme", &task, true);
    assert_eq!(warning_of(&reply, &id), None);
    assert_eq!(sim.queued_ids(&task), [id]);
}

/// A resend of an accepted envelope (SPEC §12.3) is answered as the first send was, warning
/// included, when its hello asks.
#[test]
fn a_duplicate_is_answered_with_the_same_warning() {
    let mut sim = Sim::new();
    let first = send_id_to(&mut sim, "mneme", "dup-1", "datastor", true);
    let again = send_id_to(&mut sim, "mneme", "dup-1", "datastor", true);
    assert_eq!(first, again);
    assert!(warning_of(&again, "dup-1").is_some());
    let plain = send_id_to(&mut sim, "mneme", "dup-1", "datastor", false);
    assert_eq!(warning_of(&plain, "dup-1"), None);
    assert_eq!(sim.queued_ids("datastor"), ["dup-1"], "one copy");
}
