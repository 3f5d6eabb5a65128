//! Simulation tests of replies held for the store's flush (SPEC §12.1, `sync = "full"`).

use super::*;

// ----- replies held for the store's flush (SPEC §12.1, sync = "full") -----

#[test]
fn accepted_waits_for_the_flush_but_the_waiting_reader_does_not() {
    let mut sim = Sim::durable();
    let r = sim.park("datastore");
    let (c, id) = sim.send("mneme", "datastore", "task", None);
    sim.commit_unflushed(1);
    let d = sim.drain();
    assert!(
        d.untouched(c),
        "no `accepted` before the flush: {:?}",
        d.lines(c)
    );
    assert_eq!(
        d.delivered_id(r),
        id,
        "the commit is written (it survives a hub crash): the parked reader has it at once"
    );
    assert_eq!(sim.hub.held_replies(), 1);
    // A flush of an earlier batch releases nothing.
    sim.flushed(0, Ok(()));
    assert!(sim.drain().untouched(c));
    sim.flushed(1, Ok(()));
    let d = sim.drain();
    assert_eq!(d.lines(c), [accepted(id)]);
    assert!(d.closed(c));
    assert_eq!(sim.hub.held_replies(), 0);
}

#[test]
fn one_flush_releases_every_batch_up_to_it_in_commit_order() {
    let mut sim = Sim::durable();
    // Handoffs to parked readers: those commit at once even while a flush runs (SPEC §12.1),
    // so three batches can wait for flushes at the same time.
    for _ in 0..3 {
        sim.park("datastore");
    }
    let (a, ida) = sim.send("mneme", "datastore", "task", None);
    sim.commit_unflushed(1);
    let (b, idb) = sim.send("scribe", "datastore", "task", None);
    sim.commit_unflushed(2);
    let (c, _) = sim.send("mneme", "datastore", "task", None);
    sim.commit_unflushed(3);
    sim.drain();
    sim.flushed(2, Ok(()));
    let d = sim.drain();
    assert_eq!(d.lines(a), [accepted(ida)]);
    assert_eq!(d.lines(b), [accepted(idb)]);
    assert!(d.untouched(c), "batch 3 waits for its own flush");
    assert_eq!(sim.hub.held_replies(), 1);
}

#[test]
fn a_failed_flush_answers_an_error_that_says_what_happened() {
    let mut sim = Sim::durable();
    let (c, id) = sim.send("mneme", "datastore", "task", None);
    sim.commit_unflushed(1);
    sim.drain();
    sim.flushed(1, Err("Input/output error (os error 5)".into()));
    let d = sim.drain();
    let msg = d.error(c);
    assert!(
        msg.contains(&format!("envelope {id:?} was queued")),
        "{msg}"
    );
    assert!(
        msg.contains("os error 5") && msg.contains("same id"),
        "{msg}"
    );
    // The envelope is in the queue all the same (the commit was written).
    assert_eq!(sim.queued_ids("datastore"), std::slice::from_ref(&id));
    // A resend cannot be confirmed either: its first copy may never reach the disk.
    let again = sim.send_id("mneme", &id, "datastore", "task", None, "{}");
    let d = sim.drain();
    assert_eq!(
        d.error(again),
        "envelope not accepted: an earlier flush of the queue store to disk failed (Input/output error (os error 5)); sends are refused until the hub is restarted"
    );
    assert!(!sim.hub.has_staged());
}

#[test]
fn an_ack_is_confirmed_only_after_its_flush() {
    let mut sim = Sim::durable();
    let id = sim.sent("mneme", "datastore", "task", None);
    let r = sim.await_ack("datastore");
    assert_eq!(sim.drain().delivered_id(r), id);
    sim.committed(r);
    sim.ack(r, &id);
    sim.commit_unflushed(4);
    let d = sim.drain();
    assert!(d.untouched(r), "no `acked` before the flush");
    // A line the reader sends meanwhile waits: the ack stands, and that line is answered
    // after `acked` as a line after the verb (SPEC §4.3).
    sim.line(r, r#"{"ack":{"id":"other"}}"#);
    sim.eof(r);
    assert!(sim.drain().untouched(r));
    sim.flushed(4, Ok(()));
    let d = sim.drain();
    assert_eq!(
        d.lines(r),
        [
            HubLine::Acked { id: id.clone() },
            HubLine::Error {
                message: crate::hub::pipeline::LINE_AFTER_THE_VERB.into()
            }
        ]
    );
    assert_eq!(sim.status("mneme", &id).state, "acked");
}

#[test]
fn a_duplicate_resend_waits_for_the_outstanding_flush_too() {
    let mut sim = Sim::durable();
    let c = sim.send_id("mneme", "dup-1", "datastore", "task", None, "{}");
    sim.commit_unflushed(1);
    sim.drain();
    // The sender gave up waiting and resent; the first copy is written, not yet flushed.
    let again = sim.send_id("mneme", "dup-1", "datastore", "task", None, "{}");
    let d = sim.drain();
    assert!(
        d.untouched(again),
        "a duplicate must not confirm what is not on disk"
    );
    assert!(!sim.hub.has_staged(), "and it stages nothing");
    sim.flushed(1, Ok(()));
    let d = sim.drain();
    for conn in [c, again] {
        assert_eq!(d.lines(conn), [accepted("dup-1")]);
    }
    assert_eq!(sim.queued_ids("datastore"), ["dup-1"]);
    // With nothing outstanding, a duplicate is answered at once.
    let third = sim.send_id("mneme", "dup-1", "datastore", "task", None, "{}");
    assert_eq!(sim.drain().lines(third), [accepted("dup-1")]);
}

#[test]
fn a_sender_gone_before_the_flush_leaves_its_envelope_queued() {
    let mut sim = Sim::durable();
    let (c, id) = sim.send("mneme", "datastore", "task", None);
    sim.commit_unflushed(1);
    sim.drain();
    sim.closed(c, false);
    let d = sim.drain();
    assert!(
        d.logs.iter().any(
            |l| l.contains("outcome=accepted") && l.contains("closed before the store's flush")
        ),
        "{:?}",
        d.logs
    );
    sim.flushed(1, Ok(()));
    assert!(
        sim.drain().untouched(c),
        "nothing is written to a released connection"
    );
    assert_eq!(
        sim.queued_ids("datastore"),
        [id],
        "committed: a resend is a duplicate"
    );
}
