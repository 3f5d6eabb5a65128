//! Simulation tests of mail across hubs (SPEC §15): two `Sim` hubs, "east" and "west", with
//! the relay between them played by `Pair::shuttle`, which carries `Output::Forward` into the
//! other hub's `handle_forwarded` and `Output::ForwardAck` back as `handle_forward_ack`.

use super::*;
use crate::hub::durable::StoreOp;

const WINDOW: usize = 4;

impl Sim {
    fn forwarding(local: &str, peer: &str, durable: bool) -> Sim {
        let mut sim = Sim::build(durable, |l| l.ack_timeout_ms = 5_000);
        sim.hub.enable_forwarding(local, [peer.to_owned()], WINDOW);
        sim
    }

    fn link_up(&mut self, peer: &str) {
        let now = self.now();
        self.hub.handle_link_up(peer, now);
    }

    fn link_down(&mut self, peer: &str) {
        let now = self.now();
        self.hub.handle_link_down(peer, "link dropped", now);
    }

    fn status_state(&mut self, asker: &str, id: &str) -> (String, Option<u64>) {
        let st = self.status(asker, id);
        (st.state, st.position)
    }
}

/// Every forward emitted: (seq, envelope as JSON).
fn forwards(d: &Drained) -> Vec<(u64, Value)> {
    d.forwards
        .iter()
        .map(|(peer, seq, text)| {
            assert_eq!(peer, "west");
            (
                *seq,
                serde_json::from_str(text).expect("forwarded text is JSON"),
            )
        })
        .collect()
}

struct Pair {
    east: Sim,
    west: Sim,
}

impl Pair {
    fn new(durable: bool) -> Pair {
        Pair {
            east: Sim::forwarding("east", "west", durable),
            west: Sim::forwarding("west", "east", durable),
        }
    }

    fn up(&mut self) {
        self.east.link_up("west");
        self.west.link_up("east");
    }

    /// Carries east's forwards to west (ack id `m<seq>`), commits west, and carries west's
    /// acks back. Returns what each side emitted meanwhile.
    fn shuttle(&mut self) -> (Drained, Drained) {
        let e = self.east.drain();
        for (peer, seq, text) in &e.forwards {
            assert_eq!(peer, "west");
            self.west
                .hub
                .handle_forwarded("east", format!("m{seq}"), text, 1);
        }
        self.west.commit_ok();
        let w = self.west.drain();
        for (peer, ack_id, error) in &w.forward_acks {
            assert_eq!(peer, "east");
            let seq = ack_id[1..].parse().expect("m<seq>");
            let now = self.east.now();
            self.east
                .hub
                .handle_forward_ack("west", seq, error.clone(), now);
        }
        self.east.commit_ok();
        (e, w)
    }
}

#[test]
fn only_a_non_roster_name_at_a_forwarding_peer_is_remote() {
    let mut sim = Sim::forwarding("east", "west", false);
    let roster = "[agents]\n\"ops@west\" = \"tok-a\"\nmneme = \"tok-mneme\"\n";
    sim.hub = Hub::new(
        Roster::parse(roster).unwrap(),
        Limits::example(),
        Box::new(crate::kernel::ids::SeededIds::new(SEED)),
    );
    sim.hub
        .enable_forwarding("east", ["west".to_owned()], WINDOW);
    assert_eq!(
        sim.hub.remote_peer("datastore@west").as_deref(),
        Some("west")
    );
    assert_eq!(sim.hub.remote_peer("a@b@west").as_deref(), Some("west"));
    assert_eq!(
        sim.hub.remote_peer("ops@west"),
        None,
        "a roster name stays local"
    );
    assert_eq!(sim.hub.remote_peer("@west"), None, "no name");
    assert_eq!(
        sim.hub.remote_peer("datastore@north"),
        None,
        "not a forwarding peer"
    );
    assert_eq!(sim.hub.remote_peer("datastore"), None);
    assert_eq!(
        Sim::new().hub.remote_peer("datastore@west"),
        None,
        "without forwarding nothing is remote (004: queued under the whole name)"
    );
}

#[test]
fn mail_for_a_peer_queues_until_the_link_is_up_then_leaves_only_when_acked() {
    let mut p = Pair::new(true);
    let id = p.east.sent("mneme", "datastore@west", "task", None);
    let d = p.east.drain();
    assert!(d.forwards.is_empty(), "no link yet");
    let seq = d.inserted_seq(&id);
    assert_eq!(
        p.east.queued_ids("datastore@west"),
        std::slice::from_ref(&id)
    );
    assert_eq!(
        p.east.status_state("mneme", &id),
        ("queued".into(), Some(1))
    );

    p.east.link_up("west");
    let d = p.east.drain();
    let f = forwards(&d);
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].0, seq);
    assert_eq!(f[0].1["to"], "datastore@west");
    assert_eq!(f[0].1["from"], "mneme");
    assert!(
        !d.store
            .iter()
            .any(|op| matches!(op, StoreOp::Remove { .. })),
        "still queued on disk until acked: {:?}",
        d.store
    );
    assert_eq!(
        p.east.status_state("mneme", &id),
        ("delivered".into(), None)
    );

    let now = p.east.now();
    p.east.hub.handle_forward_ack("west", seq, None, now);
    p.east.commit_ok();
    let d = p.east.drain();
    assert!(d.store.contains(&StoreOp::Remove { seq }), "{:?}", d.store);
    assert!(d
        .audit
        .iter()
        .any(|e| matches!(e, AuditEvent::ForwardAcked { id: i, error: None, .. } if *i == id)));
    assert_eq!(
        p.east.status_state("mneme", &id),
        ("forwarded".into(), None)
    );
    assert!(p.east.queued_ids("datastore@west").is_empty());
}

#[test]
fn the_peer_queues_it_restamped_and_acks_only_after_the_commit() {
    let mut p = Pair::new(false);
    p.up();
    let r = p.west.park("datastore");
    let body = r#"{"z":1,"a":[1.50,"\u00e9"]}"#;
    let (c, id) = p
        .east
        .send_body("mneme", "datastore@west", "task", Some("c-1"), body);
    p.east.commit_ok();
    let e = p.east.drain();
    assert_eq!(e.lines(c), [accepted(id.clone())]);
    let (seq, text) = {
        let (_, seq, text) = &e.forwards[0];
        (*seq, text.clone())
    };
    p.west
        .hub
        .handle_forwarded("east", format!("m{seq}"), &text, 1);
    let w = p.west.drain();
    assert!(w.forward_acks.is_empty(), "no ack before the commit");
    assert!(w.untouched(r), "nothing delivered before the commit");
    p.west.commit_ok();
    let w = p.west.drain();
    assert_eq!(w.forward_acks, [("east".into(), format!("m{seq}"), None)]);
    let got = w.envelope(r);
    assert_eq!(
        got["from"], "mneme@east",
        "from names the sender and its hub"
    );
    assert_eq!(got["to"], "datastore", "to is the local name");
    assert_eq!(got["id"], json!(id));
    assert_eq!(got["correlationId"], "c-1");
    assert!(
        w.envelope_text(r).contains(body),
        "the body crosses byte for byte: {}",
        w.envelope_text(r)
    );
    assert!(w
        .audit
        .iter()
        .any(|e| matches!(e, AuditEvent::Received { peer, .. } if peer == "east")));

    // The reply goes back the same way and reaches the original sender.
    let back = p.west.sent("datastore", "mneme@east", "done", Some(&id));
    let (_, e) = {
        let w = p.west.drain();
        for (_, seq, text) in &w.forwards.clone() {
            p.east
                .hub
                .handle_forwarded("west", format!("m{seq}"), text, 1);
        }
        p.east.commit_ok();
        (w, p.east.drain())
    };
    assert_eq!(e.forward_acks.len(), 1);
    assert_eq!(p.east.queued_ids("mneme"), [back]);
}

#[test]
fn a_resend_after_the_link_drops_is_acked_as_a_duplicate_and_queued_once() {
    let mut p = Pair::new(false);
    p.up();
    let ids: Vec<String> = (0..3)
        .map(|_| p.east.sent("mneme", "datastore@west", "task", None))
        .collect();
    let e = p.east.drain();
    assert_eq!(e.forwards.len(), 3);
    // West queues all three and acks, but the acks are lost with the link.
    for (_, seq, text) in &e.forwards {
        p.west
            .hub
            .handle_forwarded("east", format!("m{seq}"), text, 1);
    }
    p.west.commit_ok();
    assert_eq!(p.west.drain().forward_acks.len(), 3);
    p.east.link_down("west");
    let d = p.east.drain();
    let requeued: Vec<u32> = d
        .audit
        .iter()
        .filter_map(|e| match e {
            AuditEvent::ForwardRequeued { attempts, .. } => Some(*attempts),
            _ => None,
        })
        .collect();
    assert_eq!(requeued, [1, 1, 1]);
    assert_eq!(
        p.east.queued_ids("datastore@west"),
        ids,
        "back in acceptance order"
    );
    assert_eq!(
        p.east.status("mneme", &ids[0]).attempts,
        Some(1),
        "status counts the attempt"
    );

    // The next link sends them again, in order; west answers each as a duplicate.
    p.east.link_up("west");
    let (e, w) = p.shuttle();
    let resent: Vec<String> = forwards(&e)
        .into_iter()
        .map(|(_, v)| v["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(resent, ids);
    assert_eq!(w.forward_acks.len(), 3);
    assert!(w.forward_acks.iter().all(|(_, _, err)| err.is_none()));
    assert_eq!(p.west.queued_ids("datastore").len(), 3, "queued once each");
    assert!(p.east.queued_ids("datastore@west").is_empty());
    for id in &ids {
        assert_eq!(p.east.status_state("mneme", id).0, "forwarded");
    }
}

#[test]
fn at_most_a_window_is_in_flight_and_an_ack_opens_room() {
    let mut p = Pair::new(false);
    for _ in 0..WINDOW + 2 {
        p.east.sent("mneme", "datastore@west", "task", None);
    }
    p.east.link_up("west");
    let e = p.east.drain();
    assert_eq!(e.forwards.len(), WINDOW);
    let seqs: Vec<u64> = e.forwards.iter().map(|f| f.1).collect();
    assert!(
        seqs.windows(2).all(|w| w[0] < w[1]),
        "oldest first: {seqs:?}"
    );
    let now = p.east.now();
    p.east.hub.handle_forward_ack("west", seqs[0], None, now);
    assert_eq!(p.east.drain().forwards.len(), 1, "one ack, one more");
    // A late ack for something not in flight changes nothing.
    p.east.hub.handle_forward_ack("west", seqs[0], None, now);
    assert!(p.east.drain().forwards.is_empty());
}

#[test]
fn an_ack_that_does_not_come_in_time_sends_the_window_again() {
    let mut p = Pair::new(false);
    p.up();
    let id = p.east.sent("mneme", "datastore@west", "task", None);
    assert_eq!(p.east.drain().forwards.len(), 1);
    assert!(p.east.next_deadline_ms().is_some_and(|ms| ms <= 5_000));
    p.east.advance(4_999);
    assert!(p.east.drain().forwards.is_empty());
    p.east.advance(1);
    let d = p.east.drain();
    let f = forwards(&d);
    assert_eq!(f.len(), 1, "sent again");
    assert_eq!(f[0].1["id"], json!(id));
    assert!(d.audit.iter().any(|e| matches!(
        e,
        AuditEvent::ForwardRequeued { reason, attempts: 1, .. } if reason.contains("no ack within 5000 ms")
    )));
}

#[test]
fn a_refusal_by_the_peer_bounces_to_the_sender_with_its_reason() {
    let mut p = Pair::new(false);
    p.up();
    let id = p.east.sent("mneme", "nobody@west", "task", None);
    let (_, w) = p.shuttle();
    let (_, _, err) = &w.forward_acks[0];
    let err = err.as_deref().expect("refused");
    assert!(err.contains("no agent named \"nobody\" on west"), "{err}");
    assert!(w
        .audit
        .iter()
        .any(|e| matches!(e, AuditEvent::ForwardRefused { .. })));
    let b = p.east.queued_ids("mneme");
    assert_eq!(b.len(), 1, "one bounce for mneme");
    let r = p.east.park("mneme");
    let d = p.east.drain();
    let bounce = d.envelope(r);
    assert_eq!(bounce["kind"], "bounce");
    assert_eq!(bounce["from"], "hub");
    assert_eq!(bounce["correlationId"], json!(id));
    assert!(bounce["body"]["reason"]
        .as_str()
        .unwrap()
        .contains("refused by west: no agent named"));
    assert_eq!(p.east.status_state("mneme", &id).0, "bounced");
}

#[test]
fn a_peer_envelope_that_breaks_a_rule_is_refused_and_never_queued() {
    let mut west = Sim::forwarding("west", "east", false);
    west.link_up("east");
    let env = |from: &str, to: &str, kind: &str| {
        json!({"id": "x1", "from": from, "to": to, "ts": "2026-07-21T06:40:51Z", "kind": kind,
               "correlationId": null, "body": {}})
        .to_string()
    };
    let cases: Vec<(String, u32, &str)> = vec![
        (
            env("mneme", "datastore@north", "task"),
            1,
            "not an address of this hub",
        ),
        (
            env("mneme", "datastore", "task"),
            1,
            "not an address of this hub",
        ),
        (
            env("mneme", "datastore@west", "bounce"),
            1,
            "kind \"bounce\"",
        ),
        (env("hub", "datastore@west", "task"), 1, "kind \"bounce\""),
        (
            env("", "datastore@west", "task"),
            1,
            "from must not be empty",
        ),
        (env("mneme", "datastore@west", "task"), 0, "hop 0"),
        (env("mneme", "datastore@west", "task"), 9, "hop 9"),
        ("{\"id\":\"x1\"".into(), 1, "invalid envelope"),
        (
            json!({"id": "", "from": "a", "to": "datastore@west", "ts": "2026-07-21T06:40:51Z",
                   "kind": "k", "correlationId": null, "body": {}})
            .to_string(),
            1,
            "invalid envelope: id must not be empty",
        ),
    ];
    for (i, (text, hop, want)) in cases.iter().enumerate() {
        west.hub
            .handle_forwarded("east", format!("m{i}"), text, *hop);
        west.commit_ok();
        let d = west.drain();
        match d.forward_acks.as_slice() {
            [(_, ack, Some(err))] if *ack == format!("m{i}") && err.contains(want) => {}
            other => panic!("case {i}: want an error with {want:?}, got {other:?}"),
        }
    }
    // Over this hub's line cap: refused before it is parsed.
    let pad = "x".repeat(Limits::example().max_line_bytes);
    let huge = env("mneme", "datastore@west", "task")
        .replace("\"body\":{}", &format!("\"body\":\"{pad}\""));
    west.hub.handle_forwarded("east", "big".into(), &huge, 1);
    let d = west.drain();
    assert!(d.forward_acks[0]
        .2
        .as_deref()
        .unwrap()
        .contains("exceeds this hub's line cap"));
    assert_eq!(west.hub.total_queued(), 0);
    // From a peer that is not a forwarding peer, nothing is taken either.
    west.hub.handle_forwarded(
        "north",
        "n1".into(),
        &env("mneme", "datastore@west", "task"),
        1,
    );
    west.commit_ok();
    let d = west.drain();
    assert!(d.forward_acks[0]
        .2
        .as_deref()
        .unwrap()
        .contains("from north"));
    // The hub's own bounce may cross: from `hub`, kind `bounce`.
    west.hub.handle_forwarded(
        "east",
        "b1".into(),
        &env("hub", "datastore@west", "bounce"),
        1,
    );
    west.commit_ok();
    assert_eq!(west.drain().forward_acks[0].2, None);
    let r = west.park("datastore");
    assert_eq!(west.drain().envelope(r)["from"], "hub@east");
}

#[test]
fn a_same_id_with_other_content_from_the_same_sender_is_a_conflict() {
    let mut west = Sim::forwarding("west", "east", false);
    let env = |body: &str| {
        format!(
            r#"{{"id":"x1","from":"mneme","to":"datastore@west","ts":"2026-07-21T06:40:51Z","kind":"k","correlationId":null,"body":{body}}}"#
        )
    };
    west.hub
        .handle_forwarded("east", "m1".into(), &env("{}"), 1);
    west.commit_ok();
    assert_eq!(west.drain().forward_acks[0].2, None);
    west.hub
        .handle_forwarded("east", "m2".into(), &env("{\"b\":2}"), 1);
    west.commit_ok();
    let d = west.drain();
    assert!(d.forward_acks[0]
        .2
        .as_deref()
        .unwrap()
        .contains("already accepted"));
    // The same id from a local sender of the same name is another sender entirely.
    let c = west.login("mneme");
    west.line(c, &send_text("x1", "datastore", "k", None, "{\"b\":3}"));
    west.commit_ok();
    assert_eq!(west.drain().lines(c), [accepted("x1")]);
}

#[test]
fn a_forward_ack_waits_for_the_flush_and_a_failed_commit_sends_none() {
    let mut west = Sim::forwarding("west", "east", true);
    let env = |id: &str| {
        format!(
            r#"{{"id":"{id}","from":"mneme","to":"datastore@west","ts":"2026-07-21T06:40:51Z","kind":"k","correlationId":null,"body":{{}}}}"#
        )
    };
    west.hub.handle_forwarded("east", "m1".into(), &env("a"), 1);
    west.commit_unflushed(1);
    assert!(west.drain().forward_acks.is_empty(), "held for the flush");
    west.flushed(1, Ok(()));
    assert_eq!(
        west.drain().forward_acks,
        [("east".into(), "m1".into(), None)]
    );

    west.hub.handle_forwarded("east", "m2".into(), &env("b"), 1);
    west.commit_err();
    let d = west.drain();
    assert!(
        d.forward_acks.is_empty(),
        "not acked: the peer sends it again"
    );
    assert!(
        d.logs.iter().any(|l| l.contains("not acked")),
        "{:?}",
        d.logs
    );
    assert_eq!(west.hub.total_queued(), 1);
    // Sent again, it is taken.
    west.hub.handle_forwarded("east", "m3".into(), &env("b"), 1);
    west.commit_ok();
    assert_eq!(
        west.drain().forward_acks,
        [("east".into(), "m3".into(), None)]
    );
    assert_eq!(west.hub.total_queued(), 2);
}

#[test]
fn a_link_that_cannot_carry_an_envelope_bounces_it() {
    let mut p = Pair::new(false);
    p.up();
    let id = p.east.sent("mneme", "datastore@west", "task", None);
    let seq = p.east.drain().forwards[0].1;
    let now = p.east.now();
    p.east.hub.handle_forward_ack(
        "west",
        seq,
        Some("the relay link cannot carry it: too large".into()),
        now,
    );
    p.east.commit_ok();
    assert_eq!(p.east.status_state("mneme", &id).0, "bounced");
    assert_eq!(p.east.queued_ids("mneme").len(), 1);
}

#[test]
fn large_envelopes_are_sent_one_byte_budget_at_a_time() {
    let mut p = Pair::new(false);
    let big = format!("{{\"pad\":\"{}\"}}", "x".repeat(900 * 1024));
    for _ in 0..4 {
        let (c, _) = p
            .east
            .send_body("mneme", "datastore@west", "task", None, &big);
        p.east.commit_ok();
        p.east.closed(c, true);
    }
    p.east.link_up("west");
    let e = p.east.drain();
    assert_eq!(
        e.forwards.len(),
        2,
        "two of ~0.9 MiB fit the 2 MiB budget, a third does not"
    );
    let now = p.east.now();
    p.east
        .hub
        .handle_forward_ack("west", e.forwards[0].1, None, now);
    assert_eq!(p.east.drain().forwards.len(), 1);
    assert_eq!(
        p.east.queued_ids("datastore@west").len(),
        1,
        "the last still queued"
    );
}

/// Receipts for `name@peer` mail (SPEC §12.4, §15): `delivered` while handed to the link (no
/// reader: the peer hub is no reader), `forwarded` once the peer took it over; a wait for
/// `forwarded` parks through the hand-off and ends at the peer's ack, one for `acked` ends
/// there too, since this hub never sees the peer's reader.
#[test]
fn a_status_wait_for_forwarded_ends_at_the_peers_ack() {
    let mut p = Pair::new(true);
    let id = p.east.sent("mneme", "datastore@west", "task", None);
    let wait = |sim: &mut Sim, stage: &str| {
        let c = sim.login("mneme");
        sim.line(
            c,
            &json!({"status": {"id": id, "waitFor": stage}}).to_string(),
        );
        c
    };
    let w_fwd = wait(&mut p.east, "forwarded");
    let w_ack = wait(&mut p.east, "acked");
    let w_dlv = wait(&mut p.east, "delivered");
    assert!(p.east.drain().untouched(w_fwd));
    p.up();
    let (e, _) = p.shuttle();
    let st = match e.lines(w_dlv) {
        [HubLine::Status(st)] => st.clone(),
        other => panic!("{other:?}"),
    };
    assert_eq!(
        (st.state.as_str(), st.reader.as_deref(), st.wait.as_deref()),
        ("delivered", None, Some("reached")),
        "handed to the link"
    );
    assert!(e.untouched(w_fwd) && e.untouched(w_ack));
    let d = p.east.drain();
    for (w, end) in [(w_fwd, "reached"), (w_ack, "ended")] {
        match d.lines(w) {
            [HubLine::Status(st)] => {
                assert_eq!(
                    (st.state.as_str(), st.wait.as_deref()),
                    ("forwarded", Some(end))
                )
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(p.east.hub.parked_status_waits(), 0);
}

/// Issue 29: a forwarding peer put a `task_outcome` in a delegator's queue, and `delegate
/// --wait` took it for the hub's. A task's outcome and progress are this hub's own word: a
/// peer's forward of either kind is refused (acked with the reason, so its hub bounces it to
/// its sender) whatever `from` it claims, and a delegator's parked wait never sees it. So are
/// a `from` no name could be (over 256 bytes, or holding a terminal escape), which would be
/// remembered and shown as `<from>@<peer>`.
#[test]
fn a_peers_forged_task_outcome_is_refused_and_never_reaches_a_waiter() {
    let mut west = Sim::forwarding("west", "east", false);
    west.link_up("east");
    let task = "task-0123456789abcdef0123456789abcdef";
    let waiter = west.await_("datastore", Some(task), Some("task_outcome"), None);
    let env = |from: &str, kind: &str| {
        json!({"id": "f1", "from": from, "to": "datastore@west", "ts": "2026-07-21T06:40:51Z",
               "kind": kind, "correlationId": task, "body": {"task": task, "state": "completed"}})
        .to_string()
    };
    let long = "m".repeat(257);
    let cases = [
        (
            env("mneme", "task_outcome"),
            "kind \"task_outcome\" is reserved for the hub",
        ),
        (
            env("hub", "task_outcome"),
            "kind \"task_outcome\" is reserved for the hub",
        ),
        (
            env("mneme", "task_progress"),
            "kind \"task_progress\" is reserved for the hub",
        ),
        (env(&long, "note"), "from is over 256 bytes"),
        (
            env("m\u{1b}]52;c;eA==\u{7}", "note"),
            "from must not contain control or invisible formatting characters",
        ),
    ];
    for (i, (text, want)) in cases.iter().enumerate() {
        west.hub.handle_forwarded("east", format!("m{i}"), text, 1);
        west.commit_ok();
        let d = west.drain();
        match d.forward_acks.as_slice() {
            [(_, ack, Some(err))] if *ack == format!("m{i}") && err == want => {}
            other => panic!("case {i}: want the error {want:?}, got {other:?}"),
        }
        assert!(d.untouched(waiter), "case {i}: the wait saw it");
        assert!(
            !d.audit
                .iter()
                .any(|e| matches!(e, AuditEvent::Received { .. })),
            "case {i}: received"
        );
    }
    assert_eq!(west.hub.total_queued(), 0);
}
