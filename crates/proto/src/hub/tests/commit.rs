//! Simulation tests of the commit as the core's output (`hub::commit`, PLAN.md "How a send
//! becomes durable", SPEC §5.1, §8, §12.1, §12.2): every outcome of a batch the harness
//! executes the way the server's `write_batch` does: the store fails, the audit log fails, the
//! flush fails, a full store takes acks in a retry without sends, the backlog bound, and
//! a shutdown or a departing sender while a batch is in flight.

use super::*;
use crate::hub::durable::StoreFailure;

const STORE_ERR: &str = "envelope not accepted: the queue store could not be written (disk full)";

/// Every batch the commit point emits, held unexecuted.
fn batches(sim: &mut Sim) -> Vec<Batch> {
    sim.hold_batches = true;
    sim.commit_point();
    sim.hold_batches = false;
    std::mem::take(&mut sim.batches)
}

#[test]
fn a_failing_store_refuses_the_send_and_keeps_the_changes_that_gate_nothing() {
    let mut sim = Sim::durable();
    let id = sim.sent("mneme", "datastore", "task", None);
    let seq = sim.drain().inserted_seq(&id);
    let r = sim.park("datastore");
    assert_eq!(sim.drain().delivered_id(r), id);
    sim.committed(r); // a plain delivery: its removal gates no reply
    sim.store = FakeStore::Failing;
    let (c, _) = sim.send("scribe", "datastore", "task", None);
    sim.commit_ok();
    let d = sim.drain();
    assert_eq!(d.error(c), STORE_ERR);
    assert!(d.store.is_empty(), "nothing of a failed batch is written");
    assert!(
        d.logs.iter().any(|l| l.starts_with("commit failed: ")),
        "{:?}",
        d.logs
    );
    // The store is back: the removal kept from the failed batch goes in with the next one.
    sim.store = FakeStore::Ok;
    sim.commit_ok();
    let d = sim.drain();
    assert_eq!(d.removes(), [seq]);
    assert!(d.logs.iter().any(|l| l == "commits succeed again"));
    assert!(!sim.hub.has_commit_work());
}

#[test]
fn a_failing_audit_log_refuses_the_send_and_its_store_operations_with_it() {
    let mut sim = Sim::durable();
    let (c, id) = sim.send("mneme", "datastore", "task", None);
    sim.commit_err();
    let d = sim.drain();
    assert_eq!(
        d.error(c),
        "envelope not accepted: the audit log could not be written (disk full)"
    );
    assert!(d.store.is_empty() && d.accepted_ids().is_empty());
    assert_eq!(d.refused_ids(), [id.as_str()]);
    assert!(sim.queued_ids("datastore").is_empty());
}

#[test]
fn a_full_store_refuses_sends_but_takes_the_acks_in_a_retry_without_them() {
    let mut sim = Sim::durable();
    let id = sim.sent("mneme", "datastore", "task", None);
    let r = sim.await_ack("datastore");
    assert_eq!(sim.drain().delivered_id(r), id);
    sim.committed(r);
    sim.ack(r, &id);
    let (c, _) = sim.send("scribe", "datastore", "task", None);
    sim.store = FakeStore::Full;
    let held = batches(&mut sim);
    let [first] = &held[..] else {
        panic!("one batch at a time: {held:?}")
    };
    assert!(first
        .audit
        .iter()
        .any(|e| matches!(e, AuditEvent::Accepted { .. })));
    // The first attempt fails; the core asks at once for the same batch without the send.
    sim.hold_batches = true;
    sim.execute(first.clone());
    sim.collect();
    let retry = std::mem::take(&mut sim.batches);
    let [second] = &retry[..] else {
        panic!("a retry: {retry:?}")
    };
    assert!(second.id > first.id);
    assert_eq!(
        second.audit,
        [AuditEvent::Acked {
            conn: r,
            id: id.clone(),
            to: "datastore".into(),
            attempts: 0
        }]
    );
    sim.batches = retry;
    sim.release_batches();
    let d = sim.drain();
    assert_eq!(d.lines(r), [HubLine::Acked { id: id.clone() }]);
    assert_eq!(d.error(c), STORE_ERR);
    assert_eq!(d.removes().len(), 1, "the ack's removal is written");
    assert_eq!(sim.status("mneme", &id).state, "acked");
}

#[test]
fn a_failed_commit_is_tried_again_at_the_next_iteration_not_in_the_same_one() {
    let mut sim = Sim::new();
    let id = sim.sent("mneme", "datastore", "task", None);
    let r = sim.park("datastore");
    assert_eq!(sim.drain().delivered_id(r), id);
    sim.closed(r, false); // cut short after no byte: requeued, nothing staged
    let r = sim.park("datastore");
    sim.drain();
    sim.committed(r);
    sim.closed(r, false); // cut short after its first byte: lost, a bounce is staged
    sim.commit_err();
    assert!(sim.hub.has_staged_sends(), "the bounce waits");
    // The same iteration reaching its commit point again writes nothing.
    let now = sim.now();
    sim.hub.handle_commit_point(now, false);
    assert!(sim.hub.poll_output().is_none());
    assert!(!sim.hub.commit_in_flight());
    // The loop is woken to try again.
    assert_eq!(
        sim.next_deadline_ms(),
        Some(crate::hub::commit::COMMIT_RETRY.as_millis())
    );
    sim.commit_ok();
    assert_eq!(sim.drain().accepted_ids().len(), 1, "the bounce");
    assert!(!sim.hub.has_staged());
    assert_eq!(sim.next_deadline_ms(), None);
}

#[test]
fn a_failed_flush_errors_the_held_reply_and_refuses_every_later_send() {
    let mut sim = Sim::durable();
    let (c, id) = sim.send("mneme", "datastore", "task", None);
    sim.commit_unflushed(1);
    assert!(sim.drain().untouched(c));
    sim.flushed(1, Err("Input/output error (os error 5)".into()));
    let d = sim.drain();
    assert!(d.error(c).contains(&format!("envelope {id:?} was queued")));
    assert!(
        d.logs
            .iter()
            .any(|l| l.starts_with("flushing the queue store to disk failed")),
        "{:?}",
        d.logs
    );
    let (again, _) = sim.send("scribe", "datastore", "task", None);
    sim.commit_ok();
    assert_eq!(
        sim.drain().error(again),
        "envelope not accepted: an earlier flush of the queue store to disk failed (Input/output error (os error 5)); sends are refused until the hub is restarted"
    );
}

#[test]
fn commits_wait_for_a_running_flush_and_then_go_as_one_batch() {
    let mut sim = Sim::durable();
    let (a, ida) = sim.send("mneme", "datastore", "task", None);
    sim.commit_unflushed(1);
    let (b, idb) = sim.send("scribe", "datastore", "task", None);
    let (c, idc) = sim.send("mneme", "datastore", "task", None);
    assert!(
        batches(&mut sim).is_empty(),
        "a flush runs: the sends gather"
    );
    sim.flushed(1, Ok(()));
    assert_eq!(sim.drain().lines(a), [accepted(ida)]);
    let held = batches(&mut sim);
    let [one] = &held[..] else {
        panic!("one batch for both: {held:?}")
    };
    assert_eq!(one.audit.len(), 2);
    sim.batches = held;
    sim.release_batches();
    let d = sim.drain();
    assert_eq!(d.lines(b), [accepted(idb)]);
    assert_eq!(d.lines(c), [accepted(idc)]);
}

#[test]
fn the_backlog_bound_refuses_sends_until_the_backlog_is_written() {
    let mut sim = Sim::durable_with_limits(|l| l.store_backlog_max_bytes = 1);
    let id = sim.sent("mneme", "datastore", "task", None);
    let r = sim.park("datastore");
    assert_eq!(sim.drain().delivered_id(r), id);
    sim.store = FakeStore::Failing;
    sim.committed(r); // its removal waits in the backlog while the store fails
    sim.commit_ok();
    sim.drain();
    sim.store = FakeStore::Ok;
    let (c, _) = sim.send("scribe", "datastore", "task", None);
    sim.commit_ok();
    let d = sim.drain();
    assert!(
        d.error(c)
            .contains("past limits.store_backlog_max_bytes (1)"),
        "{}",
        d.error(c)
    );
    assert!(!d.removes().is_empty(), "the backlog is written first");
    let (c, id) = sim.send("scribe", "datastore", "task", None);
    sim.commit_ok();
    assert_eq!(sim.drain().lines(c), [accepted(id)]);
}

#[test]
fn a_shutdown_while_a_batch_is_in_flight_still_answers_from_its_result() {
    let mut sim = Sim::new();
    let (c, id) = sim.send("mneme", "datastore", "task", None);
    let r = sim.park("scribe");
    let held = batches(&mut sim);
    assert_eq!(held.len(), 1);
    assert!(sim.hub.commit_in_flight());
    let now = sim.now();
    sim.hub.shutdown(now);
    let d = sim.drain();
    assert!(d.untouched(c), "the sender waits for its batch");
    assert!(d.closed(r), "the parked await is closed");
    sim.batches = held;
    sim.release_batches();
    let d = sim.drain();
    assert_eq!(d.lines(c), [accepted(id.clone())]);
    assert!(d.closed(c), "a stopping hub closes once answered");
    assert_eq!(sim.queued_ids("datastore"), [id]);
}

#[test]
fn a_shutdown_while_a_batch_is_in_flight_refuses_from_a_failed_result() {
    let mut sim = Sim::new();
    let (c, _) = sim.send("mneme", "datastore", "task", None);
    let held = batches(&mut sim);
    let now = sim.now();
    sim.hub.shutdown(now);
    sim.store = FakeStore::Failing;
    sim.batches = held;
    sim.release_batches();
    let d = sim.drain();
    assert_eq!(d.error(c), STORE_ERR);
    assert!(sim.queued_ids("datastore").is_empty());
}

#[test]
fn a_sender_gone_while_its_batch_is_in_flight_gets_nothing_but_its_envelope_is_queued() {
    let mut sim = Sim::new();
    let (c, id) = sim.send("mneme", "datastore", "task", None);
    let held = batches(&mut sim);
    sim.closed(c, true);
    sim.drain();
    // A resend while the first copy is being written is refused like one while it is staged.
    let again = sim.send_id("mneme", &id, "datastore", "task", None, "{}");
    assert!(sim.drain().error(again).contains("is being accepted"));
    sim.batches = held;
    sim.release_batches();
    let d = sim.drain();
    assert!(
        d.untouched(c),
        "nothing is written to a released connection"
    );
    assert_eq!(d.accepted_ids(), std::slice::from_ref(&id));
    assert_eq!(sim.queued_ids("datastore"), [id]);
}

#[test]
fn a_report_for_another_batch_changes_nothing() {
    let mut sim = Sim::new();
    let (c, _) = sim.send("mneme", "datastore", "task", None);
    let held = batches(&mut sim);
    let now = sim.now();
    sim.hub
        .handle_committed(held[0].id + 1, Err(StoreFailure::new("stale")), now);
    assert!(sim.drain().untouched(c));
    assert!(sim.hub.commit_in_flight());
}
