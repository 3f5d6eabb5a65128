//! Simulation tests of delivery outcomes (SPEC §5.3–§5.5): a delivery consumed at its first
//! byte, returned when nothing was written, lost and bounced when cut short; waiters that go
//! away (§5.4); the queue caps (§5.5).

use super::*;

// ===== delivery outcomes (SPEC §5.3) =====

#[test]
fn a_zero_byte_delivery_goes_to_the_next_matching_waiter() {
    let mut sim = Sim::new();
    let first = sim.park("datastore");
    let non_matching = sim.await_("datastore", None, Some("result"), None);
    let next = sim.park("datastore");
    let id = sim.sent("mneme", "datastore", "task", None);
    assert_eq!(sim.drain().delivered_id(first), id);
    // The socket took nothing: the envelope never left the hub.
    sim.closed(first, false);
    let d = sim.drain();
    assert!(d.audit.iter().any(
        |e| matches!(e, AuditEvent::Requeued { conn, id: i, .. } if *conn == first && *i == id)
    ));
    assert!(d.untouched(non_matching));
    assert_eq!(d.delivered_id(next), id);
    sim.io_flush();
    let d = sim.drain();
    assert!(d.audit.contains(&AuditEvent::Delivered {
        conn: next,
        id: id.clone(),
        to: "datastore".into(),
        ack: false
    }));
    assert!(!d.audit.iter().any(|e| matches!(e, AuditEvent::Lost { .. })));
}

#[test]
fn a_zero_byte_delivery_returns_to_the_queue_front() {
    let mut sim = Sim::new();
    let e1 = sim.sent("mneme", "datastore", "task", None);
    let e2 = sim.sent("mneme", "datastore", "task", None);
    let c = sim.park("datastore");
    assert_eq!(sim.drain().delivered_id(c), e1);
    assert_eq!(sim.queued_ids("datastore"), std::slice::from_ref(&e2));
    sim.closed(c, false);
    sim.drain();
    assert_eq!(
        sim.queued_ids("datastore"),
        [e1.clone(), e2],
        "order is preserved"
    );
    let again = sim.park("datastore");
    assert_eq!(sim.drain().delivered_id(again), e1);
}

/// Regression: a returned envelope was pushed to the very front, so one taken from mid-queue
/// by a filtered await jumped ahead of older envelopes.
#[test]
fn a_returned_envelope_regains_its_place_not_the_front() {
    let mut sim = Sim::new();
    let t1 = sim.sent("mneme", "datastore", "task", None);
    let r1 = sim.sent("mneme", "datastore", "result", None);
    let t2 = sim.sent("mneme", "datastore", "task", None);
    let c = sim.await_("datastore", None, Some("result"), None);
    assert_eq!(sim.drain().delivered_id(c), r1);
    sim.closed(c, false);
    sim.drain();
    assert_eq!(sim.queued_ids("datastore"), [t1, r1, t2]);
}

#[test]
fn returned_envelopes_keep_their_order_whatever_order_their_deliveries_fail_in() {
    let mut sim = Sim::new();
    let e1 = sim.sent("mneme", "datastore", "task", None);
    let e2 = sim.sent("mneme", "datastore", "task", None);
    let e3 = sim.sent("mneme", "datastore", "task", None);
    let (a, b) = (sim.park("datastore"), sim.park("datastore"));
    let d = sim.drain();
    assert_eq!(
        (d.delivered_id(a), d.delivered_id(b)),
        (e1.clone(), e2.clone())
    );
    // Meanwhile a newer envelope arrives; both returns must still come before it.
    let e4 = sim.sent("mneme", "datastore", "task", None);
    sim.closed(b, false);
    sim.closed(a, false);
    sim.drain();
    assert_eq!(sim.queued_ids("datastore"), [e1, e2, e3, e4]);
}

#[test]
fn a_partial_write_loses_the_envelope_and_bounces_it_to_the_sender() {
    let mut sim = Sim::new();
    let (sender, id) = sim.send("mneme", "datastore", "task", None);
    sim.commit_ok();
    sim.drain();
    sim.closed(sender, true);
    // The orchestrator blocks on the result, the send-and-wait composite.
    let orchestrator = sim.await_("mneme", Some(&id), None, None);
    let reader = sim.park("datastore");
    assert_eq!(sim.drain().delivered_id(reader), id);
    sim.committed(reader);
    sim.closed(reader, false);
    let d = sim.drain();
    assert_eq!(
        d.audit,
        [
            AuditEvent::Delivered {
                conn: reader,
                id: id.clone(),
                to: "datastore".into(),
                ack: false
            },
            AuditEvent::Lost {
                conn: reader,
                id: id.clone(),
                to: "datastore".into(),
                reason: "peer reset".into(),
                bounced: true
            },
        ]
    );
    assert!(
        d.untouched(orchestrator),
        "the bounce is committed like any envelope first"
    );
    assert!(
        sim.queued_ids("datastore").is_empty(),
        "a lost envelope is not requeued"
    );
    assert!(sim.hub.has_staged());
    sim.commit_ok();
    let d = sim.drain();
    let bounce = d.envelope(orchestrator);
    assert_eq!(bounce["from"], "hub");
    assert_eq!(bounce["to"], "mneme");
    assert_eq!(bounce["kind"], "bounce");
    assert_eq!(bounce["correlationId"], id.as_str());
    assert_eq!(
        bounce["ts"], "2026-07-21T06:40:51.000Z",
        "stamped from the wall clock passed in"
    );
    assert_eq!(
        bounce["body"],
        json!({"id": id, "to": "datastore", "reason": "peer reset"})
    );
    assert_ne!(bounce["id"], id.as_str());
    assert!(
        matches!(&d.audit[0], AuditEvent::Accepted { conn: None, envelope } if **envelope == *d.envelope_text(orchestrator))
    );
}

#[test]
fn a_lost_bounce_is_not_bounced_again() {
    let mut sim = Sim::new();
    let id = sim.sent("mneme", "datastore", "task", None);
    let reader = sim.park("datastore");
    sim.drain();
    sim.committed(reader);
    sim.closed(reader, false);
    sim.commit_ok(); // the bounce is queued for mneme
    sim.drain();
    let orchestrator = sim.park("mneme");
    let d = sim.drain();
    assert_eq!(d.envelope(orchestrator)["correlationId"], id.as_str());
    sim.committed(orchestrator);
    sim.closed(orchestrator, false);
    let d = sim.drain();
    assert!(d.audit.iter().any(
        |e| matches!(e, AuditEvent::Lost { conn, bounced: false, .. } if *conn == orchestrator)
    ));
    assert!(!sim.hub.has_staged(), "no bounce of a bounce");
    assert!(sim.queued_ids("mneme").is_empty());
    assert!(sim.queued_ids("hub").is_empty());
}

#[test]
fn a_fully_written_delivery_is_delivered_once() {
    let mut sim = Sim::new();
    let id = sim.sent("mneme", "datastore", "task", None);
    let c = sim.park("datastore");
    sim.drain();
    sim.committed(c);
    sim.committed(c); // the IO may report every write; only the first byte counts
    sim.closed(c, true);
    let d = sim.drain();
    assert_eq!(
        d.audit,
        [AuditEvent::Delivered {
            conn: c,
            id,
            to: "datastore".into(),
            ack: false
        }]
    );
    assert!(!sim.hub.has_staged());
    assert_eq!(sim.hub.open_connections(), 0);
}

// ===== dead waiters (wire-compat "Known faults") =====

#[test]
fn a_parked_waiter_that_reaches_eof_is_dropped_at_once() {
    let mut sim = Sim::new();
    let dead = sim.park("datastore");
    let alive = sim.park("datastore");
    sim.eof(dead);
    let d = sim.drain();
    assert!(d.closed(dead));
    assert_eq!(d.lines(dead), [], "nothing to say to a peer that left");
    assert_eq!(sim.parked("datastore"), 1);
    // The regression: the next send must not be "delivered" into the dead socket.
    let id = sim.sent("mneme", "datastore", "task", None);
    let d = sim.drain();
    assert!(d.untouched(dead));
    assert_eq!(d.delivered_id(alive), id);
}

#[test]
fn a_parked_waiter_whose_socket_closes_is_dropped_and_the_send_is_queued() {
    let mut sim = Sim::new();
    let dead = sim.park("datastore");
    sim.closed(dead, false);
    assert_eq!(sim.parked("datastore"), 0);
    let id = sim.sent("mneme", "datastore", "task", None);
    let d = sim.drain();
    assert!(d.deliveries.is_empty());
    assert_eq!(sim.queued_ids("datastore"), [id]);
}

#[test]
fn a_claimed_waiter_that_reaches_eof_before_the_commit_lets_the_envelope_route_on() {
    let mut sim = Sim::new();
    let claimed = sim.park("datastore");
    let (sender, id) = sim.send("mneme", "datastore", "task", None);
    assert_eq!(
        sim.parked("datastore"),
        0,
        "the staged send claimed the waiter"
    );
    sim.eof(claimed);
    let next = sim.park("datastore");
    sim.commit_ok();
    let d = sim.drain();
    assert_eq!(d.lines(sender), [accepted(id.clone())]);
    assert!(d.closed(claimed));
    assert!(d.conns[&claimed].delivered.is_none());
    assert_eq!(d.delivered_id(next), id);
}

#[test]
fn a_claimed_waiter_whose_socket_closes_before_the_commit_lets_the_envelope_route_on() {
    let mut sim = Sim::new();
    let claimed = sim.park("datastore");
    let (_, id) = sim.send("mneme", "datastore", "task", None);
    sim.closed(claimed, false);
    sim.commit_ok();
    let d = sim.drain();
    assert!(d.untouched(claimed));
    assert!(d.deliveries.is_empty());
    assert_eq!(sim.queued_ids("datastore"), [id]);
}

/// Regression: a claimed waiter that reached EOF stayed `Claimed` after its Close, so later
/// input (here the IO reporting a partial last line) made the hub write to it and close it
/// a second time.
#[test]
fn a_claimed_waiter_that_reached_eof_takes_no_more_input() {
    let mut sim = Sim::new();
    let w = sim.park("datastore");
    let (_, id) = sim.send("mneme", "datastore", "task", None);
    sim.eof(w);
    let now = sim.now();
    sim.hub.handle_bad_input(w, "incomplete last line", now);
    sim.commit_ok(); // the harness panics on a write after Close or a second Close
    let d = sim.drain();
    assert_eq!(d.lines(w), []);
    assert_eq!(sim.queued_ids("datastore"), [id]);
}

// ===== queue caps (SPEC §5.5) =====

#[test]
fn a_full_queue_by_count_refuses_and_queues_nothing() {
    let mut sim = Sim::with_limits(|l| l.queue_max_envelopes = 2);
    let kept = [
        sim.sent("mneme", "datastore", "task", None),
        sim.sent("mneme", "datastore", "task", None),
    ];
    sim.drain();
    let (c, id) = sim.send("mneme", "datastore", "task", None);
    let d = sim.drain();
    // Refused at once: there is nothing to commit.
    assert!(
        d.error(c).contains("is full (limit 2 envelopes"),
        "{}",
        d.error(c)
    );
    assert!(d.closed(c));
    assert_eq!(d.refused_ids(), [id.as_str()]);
    assert!(!sim.hub.has_staged());
    assert_eq!(sim.queued_ids("datastore"), kept);
    // Other agents' queues are not affected.
    sim.sent("mneme", "scribe", "task", None);
}

#[test]
fn a_full_queue_by_bytes_refuses_and_queues_nothing() {
    let mut sim = Sim::with_limits(|l| l.queue_max_bytes = 1_000);
    let big = format!("\"{}\"", "x".repeat(600));
    let (c1, first) = sim.send_body("mneme", "datastore", "task", None, &big);
    sim.commit_ok();
    assert_eq!(sim.drain().lines(c1), [accepted(first.clone())]);
    let (c2, refused) = sim.send_body("mneme", "datastore", "task", None, &big);
    let d = sim.drain();
    assert!(d.error(c2).contains("1000 bytes"), "{}", d.error(c2));
    assert_eq!(d.refused_ids(), [refused.as_str()]);
    // A small envelope still fits under the byte cap.
    let small = sim.sent("mneme", "datastore", "task", None);
    assert_eq!(sim.queued_ids("datastore"), [first, small]);
    assert!(sim.hub.stats("datastore").queued_bytes <= 1_000);
}

#[test]
fn staged_sends_count_against_the_cap() {
    let mut sim = Sim::with_limits(|l| l.queue_max_envelopes = 1);
    let (_, staged) = sim.send("mneme", "datastore", "task", None);
    let (c, _) = sim.send("mneme", "datastore", "task", None);
    assert!(sim.drain().error(c).contains("is full"));
    sim.commit_ok();
    sim.drain();
    assert_eq!(sim.queued_ids("datastore"), [staged]);
}

#[test]
fn a_send_to_a_full_queue_still_reaches_a_parked_filtered_waiter() {
    let mut sim = Sim::with_limits(|l| l.queue_max_envelopes = 1);
    let queued = sim.sent("mneme", "datastore", "task", None);
    // The queued task does not match, so this await parks.
    let w = sim.await_("datastore", None, Some("wake"), None);
    assert_eq!(sim.parked("datastore"), 1);
    let (c, id) = sim.send("mneme", "datastore", "wake", None);
    sim.commit_ok();
    let d = sim.drain();
    assert_eq!(d.lines(c), [accepted(id.clone())]);
    assert_eq!(d.delivered_id(w), id);
    assert_eq!(sim.queued_ids("datastore"), [queued]);
}

#[test]
fn a_bounce_is_queued_even_when_the_senders_queue_is_full() {
    let mut sim = Sim::with_limits(|l| l.queue_max_envelopes = 1);
    sim.sent("datastore", "mneme", "task", None); // mneme's queue is now full
    let lost = sim.sent("mneme", "datastore", "task", None);
    let reader = sim.park("datastore");
    sim.drain();
    sim.committed(reader);
    sim.closed(reader, false);
    sim.commit_ok();
    // Refusing an accepted bounce would lose the only notice of the loss.
    let queued: Vec<_> = sim.hub.router().queued("mneme").cloned().collect();
    assert_eq!(queued.len(), 2);
    assert_eq!(queued[1].correlation_id.as_deref(), Some(lost.as_str()));
}
