//! Simulation tests of a failed commit as the sender and a claimed waiter see it (SPEC §8,
//! §12.1): nothing queued, the waiter re-parked in place, a staged bounce kept.

use super::*;

// ===== commit failure (SPEC §8) =====

#[test]
fn a_failed_commit_errors_the_sender_and_queues_nothing() {
    let mut sim = Sim::with_limits(|l| l.queue_max_envelopes = 1);
    let (c, id) = sim.send("mneme", "datastore", "task", None);
    sim.commit_err();
    let d = sim.drain();
    assert_eq!(
        d.error(c),
        "envelope not accepted: the audit log could not be written (disk full)"
    );
    assert!(d.closed(c));
    assert_eq!(d.refused_ids(), [id.as_str()]);
    assert!(d.accepted_ids().is_empty());
    assert!(sim.queued_ids("datastore").is_empty());
    // Its reservation was released: the one-envelope queue has room again.
    let next = sim.sent("mneme", "datastore", "task", None);
    assert_eq!(sim.queued_ids("datastore"), [next]);
}

#[test]
fn a_failed_commit_reparks_the_claimed_waiter_at_its_original_position() {
    let mut sim = Sim::new();
    let oldest = sim.park("datastore");
    let middle = sim.park("datastore");
    let (c, _) = sim.send("mneme", "datastore", "task", None);
    assert_eq!(sim.parked("datastore"), 1, "oldest is claimed");
    let newest = sim.park("datastore");
    sim.commit_err();
    let d = sim.drain();
    assert!(d.error(c).starts_with("envelope not accepted"));
    assert!(d.untouched(oldest), "the waiter never knew");
    assert_eq!(sim.parked("datastore"), 3);
    // Still first in line, ahead of waiters parked after it.
    let mut got = Vec::new();
    for _ in 0..3 {
        sim.sent("mneme", "datastore", "task", None);
        got.push(sim.drain().deliveries[0].0);
    }
    assert_eq!(got, [oldest, middle, newest]);
}

#[test]
fn a_claimed_waiter_whose_deadline_passed_while_staged_times_out_when_reparked() {
    let mut sim = Sim::new();
    let w = sim.await_("datastore", None, None, Some(1));
    sim.advance(500);
    sim.send("mneme", "datastore", "task", None);
    // The claim suspends the deadline: the waiter may still get this envelope.
    assert_eq!(sim.next_deadline_ms(), None);
    sim.advance(1_500);
    assert!(sim.drain().untouched(w));
    sim.commit_err();
    let d = sim.drain();
    assert_eq!(d.lines(w), [HubLine::Timeout]);
    assert_eq!(sim.parked("datastore"), 0);
}

#[test]
fn a_failed_commit_keeps_a_bounce_staged_for_the_next_commit() {
    let mut sim = Sim::new();
    sim.sent("mneme", "datastore", "task", None);
    let reader = sim.park("datastore");
    sim.drain();
    sim.committed(reader);
    sim.closed(reader, false);
    sim.commit_err();
    assert!(
        sim.hub.has_staged(),
        "no sender to tell, so the bounce must not be dropped"
    );
    assert!(sim.queued_ids("mneme").is_empty());
    sim.commit_ok();
    let queued: Vec<_> = sim.hub.router().queued("mneme").cloned().collect();
    assert_eq!(queued.len(), 1);
    assert_eq!(&*queued[0].kind, "bounce");
}
