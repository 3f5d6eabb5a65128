//! Simulation tests of a roster replaced while the hub runs (SIGHUP; `hub::roster_reload`,
//! docs/operations.md "Changing the roster"): new names at once, removed and rotated tokens
//! refused at once, what they opened closed with nothing consumed, and no mail lost.

use super::*;
use crate::hub::roster_reload::{REMOVED, ROTATED};

/// The test roster with `datastore` gone, `scribe` on a new token and `newbie` added.
const CHANGED: &str = r#"
[agents]
mneme = "tok-mneme"
scribe = "tok-scribe-rotated"
newbie = "tok-newbie"
"#;

impl Sim {
    fn reload(&mut self, text: &str) -> RosterChange {
        let roster = Roster::parse(text).expect("test roster is valid");
        let now = self.now();
        let change = self.hub.replace_roster(roster, now);
        self.collect();
        change
    }

    /// A hello with an explicit token; the one reply line.
    fn hello_with(&mut self, name: &str, token: &str) -> (ConnId, HubLine) {
        let c = self.open();
        self.line(c, &hello_text(name, token));
        self.collect();
        let got = self.out.conns.remove(&c).expect("a hello gets a reply");
        (c, got.lines.into_iter().next().expect("one line"))
    }
}

fn auth_failed(line: &HubLine) -> bool {
    matches!(line, HubLine::Error { message } if message.contains("authentication failed"))
}

#[test]
fn a_new_name_authenticates_at_once_and_the_change_is_logged_without_tokens() {
    let mut sim = Sim::new();
    let (_, line) = sim.hello_with("newbie", "tok-newbie");
    assert!(auth_failed(&line), "not on the roster yet: {line:?}");
    sim.drain();
    let change = sim.reload(CHANGED);
    assert_eq!(change.diff.added, ["newbie"]);
    assert_eq!(change.diff.removed, ["datastore"]);
    assert_eq!(change.diff.rotated, ["scribe"]);
    assert_eq!((change.agents, change.closed), (3, 0));
    let d = sim.drain();
    assert_eq!(
        d.logs,
        [
            r#"roster reloaded: 3 agents; added ["newbie"]; removed ["datastore"]; rotated ["scribe"]; closed 0 connections"#
        ]
    );
    let (c, line) = sim.hello_with("newbie", "tok-newbie");
    assert_eq!(line, HubLine::Ok);
    let who = sim.hub.presence();
    let names: Vec<&str> = who.agents.iter().map(|a| a.name.as_str()).collect();
    assert_eq!(
        names,
        ["mneme", "newbie", "scribe"],
        "who follows the roster"
    );
    sim.line(c, &send_text("n-1", "mneme", "task", None, "{}"));
    sim.commit_ok();
    assert_eq!(sim.queued_ids("mneme"), ["n-1"]);
}

#[test]
fn a_removed_agents_token_is_refused_and_its_parked_await_closed_with_nothing_consumed() {
    let mut sim = Sim::new();
    let queued = sim.sent("mneme", "datastore", "task", None);
    let first = sim.await_("datastore", Some("nothing-matches"), None, None);
    let idle = sim.login("datastore");
    sim.drain();
    assert_eq!(sim.parked("datastore"), 1);
    let change = sim.reload(CHANGED);
    assert_eq!(change.closed, 2);
    let d = sim.drain();
    assert_eq!(d.error(first), REMOVED);
    assert_eq!(d.error(idle), REMOVED);
    assert!(d.closed(first) && d.closed(idle));
    assert_eq!(
        sim.parked("datastore"),
        0,
        "the parked await left the router"
    );
    sim.io_flush();
    assert_eq!(
        sim.queued_ids("datastore"),
        std::slice::from_ref(&queued),
        "nothing consumed"
    );
    let (_, line) = sim.hello_with("datastore", "tok-datastore");
    assert!(auth_failed(&line), "{line:?}");
    // Mail for the removed name is accepted and queued like mail for any unknown name
    // (SPEC §3.2), so a sender never loses it.
    let later = sim.sent("mneme", "datastore", "task", None);
    assert_eq!(sim.queued_ids("datastore"), [queued.clone(), later.clone()]);
    // Put back, the name has its queue again.
    sim.reload(ROSTER);
    let r = sim.park("datastore");
    let d = sim.drain();
    assert_eq!(d.delivered_id(r), queued);
    sim.io_flush();
    assert_eq!(sim.queued_ids("datastore"), [later]);
}

#[test]
fn a_rotated_token_refuses_the_old_one_accepts_the_new_and_closes_what_the_old_opened() {
    let mut sim = Sim::new();
    let parked = sim.park("scribe");
    let other = sim.park("mneme");
    sim.drain();
    sim.reload(CHANGED);
    let d = sim.drain();
    assert_eq!(d.error(parked), ROTATED);
    assert!(
        d.untouched(other),
        "an unchanged name keeps its connections"
    );
    assert_eq!(sim.parked("mneme"), 1);
    sim.io_flush();
    let (_, line) = sim.hello_with("scribe", "tok-scribe");
    assert!(auth_failed(&line), "the old token: {line:?}");
    let (_, line) = sim.hello_with("scribe", "tok-scribe-rotated");
    assert_eq!(line, HubLine::Ok, "the new token");
}

#[test]
fn a_waiter_claimed_by_a_staged_send_when_removed_gets_the_envelope_queued_not_lost() {
    let mut sim = Sim::new();
    let r = sim.park("datastore");
    let (s, id) = sim.send("mneme", "datastore", "task", None);
    sim.drain();
    sim.reload(CHANGED);
    let d = sim.drain();
    assert_eq!(d.error(r), REMOVED);
    sim.commit_ok();
    let d = sim.drain();
    assert_eq!(d.lines(s), [accepted(id.clone())]);
    assert!(d.deliveries.is_empty(), "nothing goes to the closed waiter");
    sim.io_flush();
    assert_eq!(sim.queued_ids("datastore"), [id]);
}

#[test]
fn verbs_already_under_way_finish_under_the_roster_they_began_with() {
    let mut sim = Sim::durable();
    let id = sim.sent("mneme", "datastore", "task", None);
    let reader = sim.await_ack("datastore");
    let d = sim.drain();
    assert_eq!(d.delivered_id(reader), id);
    sim.committed(reader);
    let (sender, sent) = sim.send("datastore", "mneme", "result", None);
    sim.drain();
    let change = sim.reload(CHANGED);
    assert_eq!(
        change.closed, 0,
        "an ack-mode delivery and a staged send are under way"
    );
    sim.ack(reader, &id);
    sim.commit_ok();
    let d = sim.drain();
    assert_eq!(
        d.lines(reader).last(),
        Some(&HubLine::Acked { id: id.clone() })
    );
    assert_eq!(d.lines(sender), [accepted(sent.clone())]);
    sim.io_flush();
    assert!(sim.queued_ids("datastore").is_empty(), "the ack settled it");
    assert_eq!(sim.queued_ids("mneme"), [sent]);
}

#[test]
fn an_unchanged_roster_closes_nothing_and_says_so() {
    let mut sim = Sim::new();
    let r = sim.park("datastore");
    sim.drain();
    let change = sim.reload(ROSTER);
    assert!(change.diff.is_empty());
    let d = sim.drain();
    assert!(d.untouched(r));
    assert_eq!(d.logs, ["roster reloaded: 3 agents; unchanged"]);
    assert_eq!(sim.parked("datastore"), 1);
}

/// A name may hold any character TOML allows in a quoted key; the log line escapes it, so a
/// roster can never write a line of its own into the service log.
#[test]
fn names_in_the_reload_line_are_escaped() {
    let mut sim = Sim::new();
    let text = "[agents]\nmneme = \"tok-mneme\"\n\"evil\\n2026 ERROR forged\" = \"tok-x\"\n";
    sim.reload(text);
    let d = sim.drain();
    let [line] = &d.logs[..] else {
        panic!("one line: {:?}", d.logs)
    };
    assert!(!line.contains('\n'), "{line}");
    assert!(line.contains(r#""evil\n2026 ERROR forged""#), "{line}");
}

/// A token that is a prefix of another agent's token, after a reload, authenticates only
/// its own agent.
#[test]
fn a_prefix_token_after_a_reload_is_only_its_own() {
    let mut sim = Sim::new();
    sim.reload("[agents]\nmneme = \"tok-mneme\"\nmn = \"tok-mne\"\n");
    let (_, line) = sim.hello_with("mneme", "tok-mne");
    assert!(auth_failed(&line));
    let (_, line) = sim.hello_with("mn", "tok-mneme");
    assert!(auth_failed(&line));
    let (_, line) = sim.hello_with("mn", "tok-mne");
    assert_eq!(line, HubLine::Ok);
}
