//! Simulation tests of poison mail (SPEC §12.2, §12.4): an envelope that reaches its ack-mode
//! reader `limits.max_deliveries` times without an ack is given up and bounced, with its
//! reason and count, durably and across a restart; returns that are not the reader's doing
//! count for nothing; forwards to a peer are never given up.

use super::*;
use crate::hub::durable::{Loaded, StoreOp};

const MAX: u32 = 3;

fn capped() -> Sim {
    Sim::with_limits(|l| l.max_deliveries = MAX)
}

impl Sim {
    /// One ack-mode delivery of the next envelope for `name` that reaches the reader (its
    /// first byte taken) and ends without an ack: the reader closes. Returns the id delivered.
    fn crash_reader(&mut self, name: &str) -> String {
        let r = self.await_ack(name);
        let id = self.drain().delivered_id(r);
        self.committed(r);
        self.closed(r, true);
        id
    }
}

/// `(id, attempts, bounced)` of every `given_up` record.
fn given_up(d: &Drained) -> Vec<(String, u32, bool)> {
    d.audit
        .iter()
        .filter_map(|e| match e {
            AuditEvent::GivenUp {
                id,
                attempts,
                bounced,
                ..
            } => Some((id.clone(), *attempts, *bounced)),
            _ => None,
        })
        .collect()
}

#[test]
fn an_envelope_its_reader_never_acks_is_bounced_after_max_deliveries() {
    let mut sim = capped();
    let id = sim.sent("mneme", "datastore", "task", None);
    for attempt in 1..MAX {
        assert_eq!(sim.crash_reader("datastore"), id);
        let d = sim.drain();
        assert_eq!(d.requeued().len(), 1);
        assert_eq!(d.requeued()[0].3, attempt, "attempt {attempt} counted");
        assert!(given_up(&d).is_empty());
        assert_eq!(sim.status("mneme", &id).attempts, Some(attempt));
    }
    assert_eq!(sim.crash_reader("datastore"), id);
    let d = sim.drain();
    assert!(d.requeued().is_empty(), "not queued again");
    assert_eq!(given_up(&d), [(id.clone(), MAX, true)]);
    let reason = match d
        .audit
        .iter()
        .find(|e| matches!(e, AuditEvent::GivenUp { .. }))
    {
        Some(AuditEvent::GivenUp { reason, .. }) => reason.clone(),
        _ => unreachable!(),
    };
    assert!(
        reason.starts_with(
            "not acked after 3 deliveries, the most limits.max_deliveries allows; the last ended: "
        ),
        "{reason}"
    );
    assert!(
        d.logs
            .iter()
            .any(|l| l.contains("not acked after 3 deliveries")),
        "{:?}",
        d.logs
    );
    assert!(sim.queued_ids("datastore").is_empty());

    // The sender's bounce: the reason and the count, after the commit.
    sim.commit_ok();
    let r = sim.park("mneme");
    let bounce = sim.drain().envelope(r);
    assert_eq!(bounce["kind"], "bounce");
    assert_eq!(bounce["from"], "hub");
    assert_eq!(bounce["correlationId"], id.as_str());
    assert_eq!(
        bounce["body"],
        json!({"id": id, "to": "datastore", "reason": reason, "attempts": MAX})
    );
    sim.io_flush();

    // Status says bounced, and why.
    let st = sim.status("mneme", &id);
    assert_eq!(st.state, "bounced");
    assert_eq!(st.reason.as_deref(), Some(reason.as_str()));
    assert_eq!(sim.status("datastore", &id).state, "bounced");
    // A resend of the same envelope is a duplicate, as for any settled id.
    let c = sim.send_id("mneme", &id, "datastore", "task", None, "{}");
    assert_eq!(sim.drain().lines(c), [accepted(id.clone())]);
    assert!(sim.queued_ids("datastore").is_empty());
}

#[test]
fn returns_that_are_not_the_readers_doing_are_no_attempts() {
    let mut sim = Sim::with_limits(|l| l.max_deliveries = 1);
    let id = sim.sent("mneme", "datastore", "task", None);
    // Zero bytes: the reader was gone before the first byte, in ack mode and plain.
    for ack in [true, false] {
        let r = if ack {
            sim.await_ack("datastore")
        } else {
            sim.park("datastore")
        };
        assert_eq!(sim.drain().delivered_id(r), id);
        sim.closed(r, false);
        let d = sim.drain();
        assert_eq!(d.requeued()[0].3, 0, "ack mode {ack}: no attempt");
        assert!(given_up(&d).is_empty());
    }
    // An ack that was read, but whose commit failed: the reader did its part.
    let r = sim.await_ack("datastore");
    sim.drain();
    sim.committed(r);
    sim.ack(r, &id);
    sim.commit_err();
    let d = sim.drain();
    assert_eq!(d.requeued()[0].3, 0);
    assert!(given_up(&d).is_empty());
    assert_eq!(sim.queued_ids("datastore"), std::slice::from_ref(&id));
    assert_eq!(sim.status("mneme", &id).attempts, None);
    // An ack deadline that passes before the first byte was taken: nothing reached the reader.
    let r = sim.await_ack("datastore");
    sim.drain();
    sim.advance(Limits::example().ack_timeout_ms);
    let d = sim.drain();
    assert!(d.error(r).starts_with("no ack within"));
    assert!(given_up(&d).is_empty());
    // The first real one reaches the cap of 1.
    assert_eq!(sim.crash_reader("datastore"), id);
    assert_eq!(given_up(&sim.drain()), [(id, 1, true)]);
}

#[test]
fn every_way_of_not_acking_is_an_attempt() {
    let mut sim = capped();
    let id = sim.sent("mneme", "datastore", "task", None);
    // A line that is not the ack.
    let r = sim.await_ack("datastore");
    sim.drain();
    sim.committed(r);
    sim.line(r, "{}");
    assert_eq!(sim.drain().requeued()[0].3, 1);
    // The ack deadline.
    let r = sim.await_ack("datastore");
    sim.drain();
    sim.committed(r);
    sim.advance(Limits::example().ack_timeout_ms);
    assert_eq!(sim.drain().requeued()[0].3, 2);
    // End of file without the ack: the third, given up.
    let r = sim.await_ack("datastore");
    sim.drain();
    sim.committed(r);
    sim.eof(r);
    let d = sim.drain();
    assert_eq!(d.error(r), "reader closed without acking");
    assert_eq!(given_up(&d), [(id, MAX, true)]);
}

#[test]
fn a_bounce_its_reader_never_acks_is_dropped_not_bounced_again() {
    let mut sim = Sim::with_limits(|l| l.max_deliveries = 1);
    let id = sim.sent("mneme", "datastore", "task", None);
    // A partial plain delivery: lost, bounced to mneme.
    let r = sim.park("datastore");
    sim.drain();
    sim.committed(r);
    sim.closed(r, false);
    sim.commit_ok();
    sim.drain();
    let bounce_id = sim.crash_reader("mneme");
    assert_ne!(bounce_id, id);
    let d = sim.drain();
    assert_eq!(given_up(&d), [(bounce_id.clone(), 1, false)]);
    assert!(!sim.hub.has_staged(), "no bounce of a bounce");
    let st = sim.status("mneme", &bounce_id);
    assert_eq!(st.state, "lost");
    assert!(st.reason.is_some());
    // The original's status gives its own loss's reason.
    let st = sim.status("mneme", &id);
    assert_eq!(
        (st.state.as_str(), st.reason.as_deref()),
        ("bounced", Some("peer reset"))
    );
}

#[test]
fn a_durable_hub_removes_a_given_up_envelope_and_keeps_why_across_a_restart() {
    let mut sim = Sim::durable_with_limits(|l| l.max_deliveries = 2);
    let (c, id) = sim.send("mneme", "datastore", "task", None);
    sim.commit_ok();
    let seq = sim.drain().inserted_seq(&id);
    sim.closed(c, true);
    sim.crash_reader("datastore");
    sim.commit_ok();
    let d = sim.drain();
    assert!(d.store.contains(&StoreOp::Attempts { seq, attempts: 1 }));
    sim.crash_reader("datastore");
    sim.commit_ok();
    let d = sim.drain();
    assert!(d.store.contains(&StoreOp::Attempts { seq, attempts: 2 }));
    assert!(d.removes().contains(&seq), "out of its queue on disk");
    let detail = d.store.iter().find_map(|op| match op {
        StoreOp::State {
            seq: s,
            state,
            detail,
            ..
        } if *s == seq && state == "bounced" => detail.clone(),
        _ => None,
    });
    let reason = detail.expect("the reason goes to the store with the state");
    assert!(
        reason.starts_with("not acked after 2 deliveries"),
        "{reason}"
    );

    // A restart: the reason comes back from the store.
    let mut again = Sim::durable_with_limits(|l| l.max_deliveries = 2);
    let mut rec = remembered(seq, "mneme", &id, "datastore", "bounced", 0);
    rec.detail = Some(reason.clone());
    let now = again.now();
    again.hub.restore(
        Loaded {
            envelopes: vec![],
            ids: vec![rec],
        },
        now,
    );
    let st = again.status("mneme", &id);
    assert_eq!(
        (st.state.as_str(), st.reason.as_deref()),
        ("bounced", Some(reason.as_str()))
    );
}

#[test]
fn attempts_restored_from_the_store_count_toward_the_cap() {
    let mut sim = Sim::durable_with_limits(|l| l.max_deliveries = 4);
    let now = sim.now();
    sim.hub.restore(
        Loaded {
            envelopes: vec![stored(7, "datastore", "p", "mneme", 3)],
            ids: vec![remembered(7, "mneme", "p", "datastore", "queued", 0)],
        },
        now,
    );
    assert_eq!(sim.crash_reader("datastore"), "p");
    assert_eq!(given_up(&sim.drain()), [("p".to_owned(), 4, true)]);
}

#[test]
fn forwards_that_come_back_are_never_given_up() {
    let mut sim = Sim::with_limits(|l| {
        l.max_deliveries = 1;
        l.ack_timeout_ms = 1_000;
    });
    sim.hub.enable_forwarding("east", ["west".to_owned()], 4);
    let id = sim.sent("mneme", "reviewer@west", "task", None);
    for round in 1..=3u32 {
        let now = sim.now();
        sim.hub.handle_link_up("west", now);
        let d = sim.drain();
        assert_eq!(d.forwards.len(), 1, "round {round}");
        let now = sim.now();
        sim.hub.handle_link_down("west", "link dropped", now);
        let d = sim.drain();
        assert!(given_up(&d).is_empty(), "round {round}");
        assert_eq!(sim.queued_ids("reviewer@west"), std::slice::from_ref(&id));
        assert_eq!(sim.status("mneme", &id).attempts, Some(round));
    }
}
