//! Simulation tests of idempotent send (SPEC §12.3), `status` (SPEC §12.4) and the ledger's
//! purge of settled ids.

use super::*;

// ----- idempotent send (SPEC §12.3) -----

#[test]
fn a_resend_with_the_same_id_and_content_is_accepted_again_and_queued_once() {
    let mut sim = Sim::durable();
    sim.sent_id("mneme", "x1", "datastore");
    sim.drain();
    // The client restamps ts when it retries; ts is not part of the comparison.
    let c = sim.login("mneme");
    sim.line(
        c,
        &send_text("x1", "datastore", "task", None, "{}")
            .replace("2026-07-21T06:40:51Z", "2026-07-21T07:00:00+01:00"),
    );
    let d = sim.drain();
    assert_eq!(
        d.lines(c),
        [accepted("x1")],
        "answered at once: the first copy is durable"
    );
    assert!(d.closed(c));
    assert!(!sim.hub.has_staged());
    assert_eq!(
        d.events(),
        [&AuditEvent::Duplicate {
            conn: c,
            id: "x1".into()
        }]
    );
    assert!(d.accepted_ids().is_empty());
    assert!(d.store.is_empty(), "nothing to persist");
    assert_eq!(sim.queued_ids("datastore"), ["x1"]);
    assert!(d.logs.iter().any(|l| l.contains("outcome=duplicate")));
    // Still a duplicate once the first copy was delivered and consumed.
    let r = sim.park("datastore");
    sim.drain();
    sim.io_flush();
    sim.drain();
    let c = sim.send_id("mneme", "x1", "datastore", "task", None, "{}");
    let d = sim.drain();
    assert_eq!(d.lines(c), [accepted("x1")]);
    assert!(d.deliveries.is_empty() && sim.queued_ids("datastore").is_empty());
    assert!(d.untouched(r));
}

#[test]
fn the_same_id_with_other_content_is_refused() {
    let mut sim = Sim::new();
    let c = sim.send_id("mneme", "x1", "datastore", "task", Some("c0"), r#"{"a":1}"#);
    sim.commit_ok();
    sim.drain();
    sim.closed(c, true);
    let want = "id \"x1\" was already accepted from you with another destination, kind, correlationId or body; use a new id";
    let variants: [(&str, &str, Option<&str>, &str); 6] = [
        ("scribe", "task", Some("c0"), r#"{"a":1}"#),
        ("datastore", "result", Some("c0"), r#"{"a":1}"#),
        ("datastore", "task", Some("c1"), r#"{"a":1}"#),
        ("datastore", "task", None, r#"{"a":1}"#),
        ("datastore", "task", Some("c0"), r#"{"a":2}"#),
        // The body is compared as text: the same JSON value spelt differently is another body.
        ("datastore", "task", Some("c0"), r#"{"a":1.0}"#),
    ];
    for (to, kind, corr, body) in variants {
        let c = sim.send_id("mneme", "x1", to, kind, corr, body);
        let d = sim.drain();
        assert_eq!(
            d.error(c),
            want,
            "to={to} kind={kind} corr={corr:?} body={body}"
        );
        assert!(d.closed(c));
        assert!(!sim.hub.has_staged());
    }
    assert_eq!(sim.queued_ids("datastore"), ["x1"]);
    assert!(sim.queued_ids("scribe").is_empty());
}

#[test]
fn ids_are_remembered_per_sender() {
    let mut sim = Sim::new();
    sim.sent_id("mneme", "x1", "datastore");
    sim.sent_id("scribe", "x1", "datastore");
    let d = sim.drain();
    assert_eq!(d.accepted_ids(), ["x1", "x1"]);
    let queued: Vec<(String, String)> = sim
        .hub
        .router()
        .queued("datastore")
        .map(|q| (q.from.to_string(), q.id.to_string()))
        .collect();
    assert_eq!(
        queued,
        [
            ("mneme".to_owned(), "x1".to_owned()),
            ("scribe".to_owned(), "x1".to_owned())
        ]
    );
    assert_eq!(sim.status("mneme", "x1").from.as_deref(), Some("mneme"));
    assert_eq!(sim.status("scribe", "x1").from.as_deref(), Some("scribe"));
}

#[test]
fn a_resend_while_the_first_copy_is_staged_is_refused() {
    let mut sim = Sim::new();
    let first = sim.send_id("mneme", "x1", "datastore", "task", None, "{}");
    let second = sim.send_id("mneme", "x1", "datastore", "task", None, "{}");
    let other_sender = sim.send_id("scribe", "x1", "datastore", "task", None, "{}");
    let d = sim.drain();
    assert_eq!(
        d.error(second),
        "a send with id \"x1\" is being accepted on another connection; retry"
    );
    assert!(d.closed(second));
    assert!(
        d.untouched(other_sender),
        "another sender's x1 is another envelope"
    );
    sim.commit_ok();
    let d = sim.drain();
    assert_eq!(d.lines(first), [accepted("x1")]);
    assert_eq!(d.lines(other_sender), [accepted("x1")]);
    assert_eq!(sim.queued_ids("datastore"), ["x1", "x1"]);
    // Once the first is accepted, the retry the error asked for is a duplicate.
    let retry = sim.send_id("mneme", "x1", "datastore", "task", None, "{}");
    assert_eq!(sim.drain().lines(retry), [accepted("x1")]);
    assert_eq!(sim.queued_ids("datastore").len(), 2);
}

#[test]
fn a_send_that_was_not_accepted_does_not_poison_its_id() {
    let mut sim = Sim::new();
    // Cancelled: the sender went away before the commit.
    let c = sim.send_id("mneme", "x1", "datastore", "task", None, "{}");
    sim.closed(c, false);
    // Refused: the commit failed.
    let c2 = sim.send_id("mneme", "x2", "datastore", "task", None, "{}");
    sim.commit_err();
    assert!(sim.drain().error(c2).starts_with("envelope not accepted"));
    // Refused: its sender went away before the commit.
    let c3 = sim.send_id("mneme", "x3", "datastore", "task", None, "{}");
    sim.closed(c3, false);
    sim.drain();
    for id in ["x1", "x2", "x3"] {
        let c = sim.send_id("mneme", id, "datastore", "task", None, r#"{"retry":true}"#);
        assert!(
            sim.hub.has_staged(),
            "{id}: a new envelope, staged like any other"
        );
        sim.commit_ok();
        let d = sim.drain();
        assert_eq!(d.lines(c), [accepted(id)]);
        assert_eq!(d.accepted_ids(), [id]);
    }
    assert_eq!(sim.queued_ids("datastore"), ["x1", "x2", "x3"]);
}

// ----- status (SPEC §12.4) -----

#[test]
fn status_tells_sender_and_recipient_where_an_envelope_is() {
    let mut sim = Sim::new();
    let e1 = sim.sent("mneme", "datastore", "task", None);
    let other = sim.sent("scribe", "datastore", "task", None);
    sim.advance(1_500);
    let e2 = sim.sent("mneme", "datastore", "result", None);
    sim.drain();
    let queued = EnvelopeStatus {
        id: e2.clone(),
        state: "queued".into(),
        from: Some("mneme".into()),
        to: Some("datastore".into()),
        position: Some(3),
        at: at(1_500),
        attempts: None,
        reason: None,
        ..EnvelopeStatus::default()
    };
    assert_eq!(sim.status("mneme", &e2), queued, "the sender");
    assert_eq!(sim.status("datastore", &e2), queued, "the recipient");
    let unknown = EnvelopeStatus {
        id: e2.clone(),
        state: "unknown".into(),
        ..EnvelopeStatus::default()
    };
    assert_eq!(
        sim.status("scribe", &e2),
        unknown,
        "neither: as if it did not exist"
    );
    assert_eq!(sim.status("mneme", "no-such-id").state, "unknown");
    assert_eq!(sim.status("scribe", &other).position, Some(2));

    // A filtered await takes e2 from the back: the others keep their positions.
    sim.advance(500);
    let r = sim.await_("datastore", None, Some("result"), None);
    sim.drain();
    sim.io_flush();
    sim.drain();
    let delivered = sim.status("mneme", &e2);
    assert_eq!(
        (delivered.state.as_str(), delivered.position, delivered.at),
        ("delivered", None, at(2_000))
    );
    assert_eq!(delivered.to.as_deref(), Some("datastore"));
    assert_eq!(sim.status("mneme", &e1).position, Some(1));
    assert_eq!(sim.status("scribe", &other).position, Some(2));
    let r2 = sim.park("datastore");
    sim.drain();
    sim.io_flush();
    assert_eq!(
        sim.status("scribe", &other).position,
        Some(1),
        "position follows the queue"
    );
    assert!(r != r2);
}

#[test]
fn status_follows_an_ack_mode_delivery_and_a_bounce() {
    let mut sim = Sim::new();
    let acked = sim.sent("mneme", "datastore", "task", None);
    let r = sim.await_ack("datastore");
    sim.drain();
    assert_eq!(
        sim.status("mneme", &acked).position,
        None,
        "in flight: taken from the queue"
    );
    sim.committed(r);
    assert_eq!(sim.status("datastore", &acked).state, "delivered");
    sim.ack(r, &acked);
    assert_eq!(
        sim.status("datastore", &acked).state,
        "delivered",
        "until the ack is committed"
    );
    sim.commit_ok();
    sim.drain();
    assert_eq!(sim.status("datastore", &acked).state, "acked");
    assert_eq!(sim.status("mneme", &acked).state, "acked");

    let lost = sim.sent("mneme", "datastore", "task", None);
    let r = sim.park("datastore");
    sim.drain();
    sim.committed(r);
    sim.closed(r, false);
    sim.commit_ok(); // the bounce
    let d = sim.drain();
    let st = sim.status("mneme", &lost);
    assert_eq!(
        (st.state.as_str(), st.to.as_deref()),
        ("bounced", Some("datastore"))
    );
    assert_eq!(sim.status("datastore", &lost).state, "bounced");
    // The bounce itself is an envelope from the hub to mneme, and mneme may ask about it.
    let bounce_id = d.accepted_ids().pop().expect("the bounce was accepted");
    let st = sim.status("mneme", &bounce_id);
    assert_eq!(
        (st.state.as_str(), st.from.as_deref(), st.position),
        ("queued", Some("hub"), Some(1))
    );
    assert_eq!(sim.status("datastore", &bounce_id).state, "unknown");
}

// ----- ledger purge (SPEC §12.3) -----

#[test]
fn settled_ids_are_forgotten_after_the_window_and_queued_ones_kept() {
    let mut sim = Sim::durable_with_limits(|l| l.idempotency_window_secs = 60);
    let now = sim.now();
    sim.hub.start_purging(now);
    assert_eq!(
        sim.next_deadline_ms(),
        Some(10_000),
        "the purge is a deadline like any other"
    );
    let settled = sim.sent("mneme", "datastore", "task", None);
    let queued_for_long = sim.sent("mneme", "datastore", "task", None);
    let r = sim.park("datastore");
    assert_eq!(sim.drain().delivered_id(r), settled);
    sim.io_flush();
    sim.commit_ok();
    sim.drain();

    // Within the window: nothing is forgotten.
    for _ in 0..5 {
        sim.advance(10_000);
    }
    sim.commit_ok();
    assert!(sim.drain().store.is_empty());
    assert_eq!(sim.status("mneme", &settled).state, "delivered");
    // At it (settled a whole window ago): the settled id goes, in memory and on disk; the
    // queued one stays.
    sim.advance(10_000);
    sim.commit_ok();
    let d = sim.drain();
    assert_eq!(
        d.store,
        [StoreOp::Forget {
            seq: 0,
            sender: "mneme".into(),
            id: settled.clone()
        }],
        "the first accepted envelope (seq 0) is the settled one"
    );
    assert_eq!(sim.status("mneme", &settled).state, "unknown");
    let st = sim.status("mneme", &queued_for_long);
    assert_eq!((st.state.as_str(), st.position), ("queued", Some(1)));
    let dup = sim.send_id("mneme", &queued_for_long, "datastore", "task", None, "{}");
    assert_eq!(
        sim.drain().events(),
        [&AuditEvent::Duplicate {
            conn: dup,
            id: queued_for_long.clone()
        }]
    );
    // A forgotten id is new again: a resend now is a second copy (the window's trade-off).
    let again = sim.send_id("mneme", &settled, "datastore", "task", None, "{}");
    sim.commit_ok();
    let d = sim.drain();
    assert_eq!(d.lines(again), [accepted(settled.clone())]);
    assert_eq!(d.accepted_ids(), std::slice::from_ref(&settled));

    // The window runs from settlement: the envelope queued for a whole window is kept for
    // another whole window after its delivery.
    let r = sim.park("datastore");
    assert_eq!(sim.drain().delivered_id(r), queued_for_long);
    sim.io_flush();
    sim.commit_ok();
    assert_eq!(sim.drain().removes().len(), 1);
    sim.advance(10_000);
    sim.commit_ok();
    assert!(sim.drain().store.is_empty(), "settled 10 s ago");
    assert_eq!(sim.status("mneme", &queued_for_long).state, "delivered");
    for _ in 0..5 {
        sim.advance(10_000);
    }
    sim.commit_ok();
    let d = sim.drain();
    assert_eq!(
        d.store,
        [StoreOp::Forget {
            seq: 1,
            sender: "mneme".into(),
            id: queued_for_long.clone()
        }]
    );
}

#[test]
fn past_max_ids_the_earliest_settled_ids_go_first() {
    let mut sim = Sim::with_limits(|l| l.idempotency_max_ids = 2);
    let now = sim.now();
    sim.hub.start_purging(now);
    let ids: Vec<String> = (0..4)
        .map(|_| sim.sent("mneme", "datastore", "task", None))
        .collect();
    for _ in 0..3 {
        sim.advance(1);
        let r = sim.park("datastore");
        sim.drain();
        sim.io_flush();
        assert!(r > 0);
    }
    sim.advance(10_000);
    let known: Vec<String> = ids.iter().map(|id| sim.status("mneme", id).state).collect();
    // Four remembered, two allowed: the two delivered first go; the queued one never does.
    assert_eq!(known, ["unknown", "unknown", "delivered", "queued"]);
}

#[test]
fn queue_caps_neither_block_a_duplicate_nor_poison_a_refused_id() {
    let mut sim = Sim::with_limits(|l| l.queue_max_envelopes = 1);
    sim.sent_id("mneme", "x0", "datastore");
    // The queue is full, but a resend of x0 adds nothing to it: answered accepted.
    let dup = sim.send_id("mneme", "x0", "datastore", "task", None, "{}");
    assert_eq!(sim.drain().lines(dup), [accepted("x0")]);
    // x1 is refused by the cap, and so is not remembered.
    let full = sim.send_id("mneme", "x1", "datastore", "task", None, "{}");
    assert!(sim.drain().error(full).contains("is full"));
    assert_eq!(sim.status("mneme", "x1").state, "unknown");
    let r = sim.park("datastore");
    assert_eq!(sim.drain().delivered_id(r), "x0");
    sim.io_flush();
    sim.sent_id("mneme", "x1", "datastore");
    assert_eq!(sim.drain().accepted_ids(), ["x1"]);
}

/// Issue 29: 200 sends with 1 MB ids, all consumed, left the hub at 201 MiB: the ledger kept
/// each id for a day outside every byte cap. Ids are capped at decode now (`wire`), and what
/// the ledger keeps is charged to `limits.idempotency_max_bytes`: past it the earliest settled
/// ids are forgotten at once (not at the next ten-second purge), the newest stay (a client's
/// resend comes within seconds), and an id whose envelope is still queued is never forgotten.
#[test]
fn past_max_bytes_the_earliest_settled_ids_go_at_once() {
    let budget = 16 * 1024;
    let mut sim = Sim::with_limits(|l| l.idempotency_max_bytes = budget);
    let now = sim.now();
    sim.hub.start_purging(now);
    // The longest ids the caps allow, each charged its record, its id and its two names.
    let id = |i: usize| format!("{i:0>128}");
    let cost = crate::hub::ledger::RECORD_BYTES + 128 + "mneme".len() + "datastore".len();
    for i in 0..200 {
        sim.sent_id("mneme", &id(i), "datastore");
        let r = sim.park("datastore");
        assert_eq!(sim.drain().delivered_id(r), id(i));
        sim.io_flush();
        sim.advance(1); // a millisecond: far inside the purge interval
        assert!(
            sim.hub.ledger_bytes() <= budget,
            "after {i} sends: {} bytes remembered, budget {budget}",
            sim.hub.ledger_bytes()
        );
    }
    let kept = budget / cost;
    assert!(
        sim.hub.ledger_bytes() + cost > budget,
        "the budget is used, not undercut"
    );
    assert_eq!(
        sim.status("mneme", &id(0)).state,
        "unknown",
        "the earliest went"
    );
    assert_eq!(sim.status("mneme", &id(199)).state, "delivered");
    assert_eq!(
        sim.status("mneme", &id(200 - kept)).state,
        "delivered",
        "the newest {kept} are kept"
    );
    // A resend of a kept id is still a duplicate: nothing is queued twice.
    let dup = sim.send_id("mneme", &id(199), "datastore", "task", None, "{}");
    assert_eq!(sim.drain().lines(dup), [accepted(id(199))]);
    assert!(sim.queued_ids("datastore").is_empty());
    // Queued envelopes' ids are never forgotten, even past the budget.
    for i in 200..300 {
        sim.sent_id("mneme", &id(i), "datastore");
    }
    sim.advance(20_000);
    assert!(
        sim.hub.ledger_bytes() > budget,
        "unsettled ids are all kept"
    );
    for i in [200, 250, 299] {
        assert_eq!(sim.status("mneme", &id(i)).state, "queued", "{i}");
    }
}
