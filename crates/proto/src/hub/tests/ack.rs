//! Simulation tests of acknowledged delivery (SPEC §12.2): an envelope consumed only by its
//! committed ack, every way an ack goes wrong, and the ack deadline on the virtual clock.

use super::*;

// ----- ack mode (SPEC §12.2) -----

#[test]
fn an_ack_mode_delivery_is_consumed_only_when_its_ack_is_committed() {
    let mut sim = Sim::durable_with_limits(|l| l.ack_timeout_ms = 5_000);
    let id = sim.sent("mneme", "datastore", "task", None);
    let seq = sim.drain().inserted_seq(&id);
    let r = sim.await_ack("datastore");
    let d = sim.drain();
    assert_eq!(d.delivered_id(r), id);
    assert!(!d.closed(r), "the connection stays open for the ack");
    assert!(
        d.store.is_empty(),
        "handing the envelope out changes nothing durable"
    );
    assert_eq!(
        sim.next_deadline_ms(),
        Some(5_000),
        "the ack deadline runs from the delivery"
    );
    sim.committed(r);
    let d = sim.drain();
    assert_eq!(
        d.audit,
        [AuditEvent::Delivered {
            conn: r,
            id: id.clone(),
            to: "datastore".into(),
            ack: true
        }]
    );
    assert_eq!(
        d.removes(),
        [] as [u64; 0],
        "the first byte does not consume in ack mode"
    );
    assert_eq!(
        d.states(),
        [] as [(String, String); 0],
        "no commit per ack-mode delivery"
    );
    assert_eq!(sim.status("mneme", &id).state, "delivered");

    sim.ack(r, &id);
    let d = sim.drain();
    assert!(d.untouched(r), "`acked` only after the commit");
    assert!(sim.hub.has_staged(), "an ack is staged like a send");
    assert_eq!(sim.next_deadline_ms(), None, "a staged ack has no deadline");
    let wall_ms = sim.wall.timestamp_millis();
    sim.hold_batches = true;
    sim.commit_point();
    let [batch] = &sim.batches[..] else {
        panic!("one batch: {:?}", sim.batches)
    };
    let ops = batch.store_ops.clone();
    let want_ops = [
        StoreOp::Remove { seq },
        StoreOp::State {
            seq,
            sender: "mneme".into(),
            id: id.clone(),
            state: "acked".into(),
            detail: None,
            reader: Some(crate::wire::Reader::Unknown),
            at_ms: wall_ms,
        },
    ];
    assert_eq!(ops, want_ops);
    let staged = batch.audit.clone();
    assert_eq!(
        staged,
        [AuditEvent::Acked {
            conn: r,
            id: id.clone(),
            to: "datastore".into(),
            attempts: 0
        }]
    );

    sim.release_batches();
    let d = sim.drain();
    assert_eq!(d.lines(r), [HubLine::Acked { id: id.clone() }]);
    assert!(d.closed(r));
    assert_eq!(d.audit, staged);
    // Regression: the commit emitted the `acked` state once more as a pending operation,
    // costing every ack a second transaction.
    assert_eq!(d.store, want_ops, "nothing but the staged transaction");
    assert!(
        d.logs
            .iter()
            .any(|l| l.contains(&format!("conn={r} ")) && l.contains("outcome=acked")),
        "{:?}",
        d.logs
    );
    sim.closed(r, true);
    let d = sim.drain();
    assert!(d.audit.is_empty() && d.store.is_empty());
    assert!(sim.queued_ids("datastore").is_empty());
    assert!(!sim.hub.has_staged());
    assert_eq!(sim.hub.open_connections(), 0);
    assert_eq!(sim.status("datastore", &id).state, "acked");
}

#[test]
fn ack_false_and_absent_are_plain_awaits() {
    for ack in [Some(false), None] {
        let mut sim = Sim::new();
        let id = sim.sent("mneme", "datastore", "task", None);
        let c = sim.login("datastore");
        sim.line(c, &ack_await_text(None, None, None, ack));
        let d = sim.drain();
        assert_eq!(d.delivered_id(c), id);
        assert!(
            d.closed(c),
            "a plain delivery closes at once (ack = {ack:?})"
        );
    }
}

#[test]
fn an_ack_for_another_id_returns_the_envelope_to_the_next_await() {
    let mut sim = Sim::durable();
    let e1 = sim.sent("mneme", "datastore", "task", None);
    let e2 = sim.sent("mneme", "datastore", "task", None);
    let seq1 = sim.drain().inserted_seq(&e1);
    let r = sim.await_ack("datastore");
    assert_eq!(sim.drain().delivered_id(r), e1);
    sim.committed(r);
    sim.drain();
    sim.ack(r, &e2);
    sim.commit_ok();
    let d = sim.drain();
    let msg =
        format!("ack does not match the delivered envelope \"{e1}\"; it will be delivered again");
    assert_eq!(
        d.lines(r),
        [HubLine::Error {
            message: msg.clone()
        }]
    );
    assert!(d.closed(r));
    assert_eq!(d.requeued(), [(r, e1.clone(), msg, 1)]);
    assert!(
        d.store.contains(&StoreOp::Attempts {
            seq: seq1,
            attempts: 1
        }),
        "{:?}",
        d.store
    );
    assert_eq!(d.states(), [(e1.clone(), "queued".to_owned())]);
    assert!(
        !sim.hub.has_staged(),
        "nothing to commit: the wrong ack settles nothing"
    );
    assert_eq!(
        sim.queued_ids("datastore"),
        [e1.clone(), e2.clone()],
        "back at its place, ahead of e2"
    );
    sim.closed(r, false);
    assert!(
        sim.drain().requeued().is_empty(),
        "returned once, not again at the close"
    );
    let st = sim.status("mneme", &e1);
    assert_eq!(
        (st.state.as_str(), st.position, st.attempts),
        ("queued", Some(1), Some(1))
    );

    assert_eq!(sim.acked("datastore"), e1);
    let d = sim.drain();
    assert!(
        d.audit
            .iter()
            .any(|e| matches!(e, AuditEvent::Acked { id, attempts: 1, .. } if *id == e1)),
        "{:?}",
        d.audit
    );
    assert_eq!(sim.queued_ids("datastore"), [e2]);
}

#[test]
fn any_line_but_the_ack_returns_the_envelope_with_its_attempt_counted() {
    // More cases than the default cap on deliveries: none of them may give the envelope up.
    let mut sim = Sim::with_limits(|l| l.max_deliveries = 100);
    let e1 = sim.sent("mneme", "datastore", "task", None);
    let e2 = sim.sent("mneme", "datastore", "task", None);
    let again = "; the envelope will be delivered again";
    let cases: Vec<(Vec<u8>, String)> = vec![
        (
            br#"{"await":{}}"#.to_vec(),
            format!("expected an ack, got await{again}"),
        ),
        (
            hello_text("datastore", "tok-datastore").into_bytes(),
            format!("expected an ack, got hello{again}"),
        ),
        (
            status_text(&e1).into_bytes(),
            format!("expected an ack, got status{again}"),
        ),
        (
            send_text(&e1, "datastore", "task", None, "{}").into_bytes(),
            format!("expected an ack, got send{again}"),
        ),
        (
            b"ack".to_vec(),
            format!("malformed line: expected value{again}"),
        ),
        // A blank line is a malformed line like any other (SPEC §2.1).
        (
            b"".to_vec(),
            format!("malformed line: EOF while parsing a value{again}"),
        ),
        (
            br#"{"ack":{"id":""}}"#.to_vec(),
            format!("invalid ack: id must not be empty{again}"),
        ),
        (
            br#"{"ack":{}}"#.to_vec(),
            format!("malformed line: missing field `id`{again}"),
        ),
        (
            format!(r#"{{"ack":{{"id":"{e1}","extra":1}}}}"#).into_bytes(),
            format!("malformed line: unknown field in `ack`, expected `id`{again}"),
        ),
        (
            format!(r#"{{"ack":["{e1}"]}}"#).into_bytes(),
            format!("malformed line: invalid type: sequence, expected an object{again}"),
        ),
        (
            b"{\"ack\":{\"id\":\"\xff\"}}".to_vec(),
            format!("line is not valid UTF-8{again}"),
        ),
    ];
    for (attempt, (line, want)) in cases.into_iter().enumerate() {
        let r = sim.await_ack("datastore");
        assert_eq!(sim.drain().delivered_id(r), e1, "attempt {attempt}");
        sim.committed(r);
        sim.drain();
        sim.raw_line(r, &line);
        let d = sim.drain();
        assert_eq!(
            d.lines(r),
            [HubLine::Error {
                message: want.clone()
            }]
        );
        assert!(d.closed(r));
        assert_eq!(d.requeued(), [(r, e1.clone(), want, attempt as u32 + 1)]);
        assert_eq!(sim.queued_ids("datastore"), [e1.clone(), e2.clone()]);
        sim.io_flush();
        assert!(sim.drain().requeued().is_empty());
    }
}

#[test]
fn an_overlong_line_instead_of_the_ack_returns_the_envelope() {
    let mut sim = Sim::new();
    let id = sim.sent("mneme", "datastore", "task", None);
    let r = sim.await_ack("datastore");
    sim.drain();
    sim.committed(r);
    let now = sim.now();
    sim.hub
        .handle_bad_input(r, "line exceeds the limit of 1048576 bytes", now);
    let d = sim.drain();
    assert_eq!(d.error(r), "line exceeds the limit of 1048576 bytes");
    assert_eq!(
        d.requeued(),
        [(
            r,
            id.clone(),
            "line exceeds the limit of 1048576 bytes".to_owned(),
            1
        )]
    );
    assert_eq!(sim.queued_ids("datastore"), [id]);
}

#[test]
fn eof_before_the_ack_returns_the_envelope() {
    let mut sim = Sim::new();
    let id = sim.sent("mneme", "datastore", "task", None);
    let r = sim.await_ack("datastore");
    sim.drain();
    sim.committed(r);
    sim.eof(r);
    let d = sim.drain();
    assert_eq!(
        d.lines(r),
        [HubLine::Error {
            message: "reader closed without acking".into()
        }]
    );
    assert!(d.closed(r));
    assert_eq!(
        d.requeued(),
        [(r, id.clone(), "reader closed without acking".to_owned(), 1)]
    );
    sim.io_flush();
    let next = sim.park("datastore");
    assert_eq!(sim.drain().delivered_id(next), id);
}

#[test]
fn a_close_before_the_ack_returns_the_envelope_to_a_waiting_reader() {
    // Fully written (the kernel took every byte) or cut short: without an ack, neither
    // consumes, and neither is a loss to bounce.
    for flushed in [true, false] {
        let mut sim = Sim::durable();
        let id = sim.sent("mneme", "datastore", "task", None);
        sim.drain();
        let r = sim.await_ack("datastore");
        let other = sim.park("datastore");
        assert_eq!(sim.drain().delivered_id(r), id);
        sim.committed(r);
        sim.closed(r, flushed);
        let d = sim.drain();
        assert!(
            d.untouched(r),
            "the socket is gone: nothing is written to it"
        );
        let reason = if flushed { "closed" } else { "peer reset" };
        assert_eq!(d.requeued(), [(r, id.clone(), reason.to_owned(), 1)]);
        assert!(
            !d.audit.iter().any(|e| matches!(e, AuditEvent::Lost { .. })),
            "no loss in ack mode"
        );
        assert!(!sim.hub.has_staged(), "no bounce");
        assert_eq!(d.removes(), [] as [u64; 0]);
        assert_eq!(
            d.delivered_id(other),
            id,
            "straight to the next matching waiter"
        );
    }
}

#[test]
fn the_ack_deadline_returns_the_envelope_exactly_at_the_limit() {
    let mut sim = Sim::with_limits(|l| l.ack_timeout_ms = 5_000);
    let id = sim.sent("mneme", "datastore", "task", None);
    sim.advance(300);
    let r = sim.await_ack("datastore");
    sim.drain();
    assert_eq!(sim.next_deadline_ms(), Some(5_300));
    sim.committed(r);
    sim.advance(4_999);
    let d = sim.drain();
    assert!(d.untouched(r), "not one millisecond early");
    assert!(d.requeued().is_empty());
    assert!(sim.queued_ids("datastore").is_empty());
    sim.advance(1);
    let d = sim.drain();
    let msg = "no ack within 5000 ms; the envelope will be delivered again";
    assert_eq!(
        d.lines(r),
        [HubLine::Error {
            message: msg.into()
        }]
    );
    assert!(d.closed(r));
    assert_eq!(d.requeued(), [(r, id.clone(), msg.to_owned(), 1)]);
    assert_eq!(sim.queued_ids("datastore"), [id]);
    assert_eq!(sim.next_deadline_ms(), None);
}

#[test]
fn an_ack_read_before_its_connection_closed_still_settles() {
    let mut sim = Sim::durable();
    let id = sim.sent("mneme", "datastore", "task", None);
    sim.drain();
    let r = sim.await_ack("datastore");
    sim.drain();
    sim.committed(r);
    sim.ack(r, &id);
    sim.closed(r, false); // the reader is gone before the commit
    let d = sim.drain();
    assert!(d.requeued().is_empty(), "an ack already read stands");
    sim.commit_ok();
    let d = sim.drain();
    assert!(d.untouched(r), "nobody to answer");
    assert_eq!(
        d.audit,
        [AuditEvent::Acked {
            conn: r,
            id: id.clone(),
            to: "datastore".into(),
            attempts: 0
        }]
    );
    assert_eq!(d.removes().len(), 1);
    assert!(sim.queued_ids("datastore").is_empty());
    assert_eq!(sim.status("mneme", &id).state, "acked");
}

#[test]
fn an_ack_whose_commit_fails_is_refused_and_the_envelope_requeued() {
    let mut sim = Sim::durable();
    let id = sim.sent("mneme", "datastore", "task", None);
    let seq = sim.drain().inserted_seq(&id);
    let r = sim.await_ack("datastore");
    sim.drain();
    sim.committed(r);
    sim.ack(r, &id);
    sim.drain();
    sim.commit_err();
    sim.commit_ok();
    let d = sim.drain();
    let msg = "ack not recorded: the audit log could not be written (disk full); the envelope will be delivered again";
    assert_eq!(
        d.lines(r),
        [HubLine::Error {
            message: msg.into()
        }]
    );
    assert!(d.closed(r));
    assert!(!d
        .audit
        .iter()
        .any(|e| matches!(e, AuditEvent::Acked { .. })));
    // The reader did ack: the store failed, so the return is no attempt (SPEC §12.2).
    assert_eq!(d.requeued(), [(r, id.clone(), msg.to_owned(), 0)]);
    assert_eq!(
        d.store,
        [StoreOp::State {
            seq,
            sender: "mneme".into(),
            id: id.clone(),
            state: "queued".into(),
            detail: None,
            reader: None,
            at_ms: sim.wall.timestamp_millis()
        },]
    );
    assert_eq!(sim.queued_ids("datastore"), std::slice::from_ref(&id));
    sim.closed(r, true);
    let d = sim.drain();
    // Regression: the connection stayed AckStaged, so its close was logged as acked.
    assert!(
        !d.logs.iter().any(|l| l.contains("outcome=acked")),
        "{:?}",
        d.logs
    );
    assert_eq!(sim.acked("datastore"), id);
}

#[test]
fn an_ack_of_a_closed_connection_whose_commit_fails_is_requeued_silently() {
    let mut sim = Sim::new();
    let id = sim.sent("mneme", "datastore", "task", None);
    let r = sim.await_ack("datastore");
    sim.drain();
    sim.committed(r);
    sim.ack(r, &id);
    sim.closed(r, true);
    sim.commit_err();
    let d = sim.drain();
    assert!(d.untouched(r));
    assert_eq!(d.requeued().len(), 1);
    assert_eq!(sim.queued_ids("datastore"), [id]);
}

#[test]
fn an_ack_outside_an_ack_mode_delivery_is_refused() {
    let mut sim = Sim::new();
    let id = sim.sent("mneme", "datastore", "task", None);
    let verb = sim.login("datastore");
    sim.line(verb, &ack_text(&id));
    let first = sim.open();
    sim.line(first, &ack_text(&id));
    let status_first = sim.open();
    sim.line(status_first, &status_text(&id));
    let d = sim.drain();
    assert_eq!(d.error(verb), "an ack outside an acknowledged delivery");
    assert_eq!(d.error(first), "expected hello as the first line, got ack");
    assert_eq!(
        d.error(status_first),
        "expected hello as the first line, got status"
    );
    // After a plain delivery an ack is a line after the verb: it gets that error, and the
    // envelope stays consumed.
    let plain = sim.park("datastore");
    assert_eq!(sim.drain().delivered_id(plain), id);
    sim.ack(plain, &id);
    let d = sim.drain();
    assert_eq!(d.error(plain), crate::hub::pipeline::LINE_AFTER_THE_VERB);
    assert!(d.requeued().is_empty());
    assert_eq!(sim.queued_ids("datastore"), [] as [String; 0]);
}

#[test]
fn an_ack_mode_waiter_parked_before_the_send_gets_ack_mode() {
    let mut sim = Sim::new();
    let r = sim.await_ack("datastore");
    let id = sim.sent("mneme", "datastore", "task", None);
    let d = sim.drain();
    assert_eq!(d.delivered_id(r), id);
    assert!(!d.closed(r), "ack mode survives the claim");
    sim.committed(r);
    sim.closed(r, true);
    assert_eq!(sim.drain().requeued().len(), 1);
    // A returned envelope routed to a parked ack-mode waiter is delivered in ack mode too.
    let r2 = sim.await_ack("datastore");
    let d = sim.drain();
    assert_eq!(d.delivered_id(r2), id);
    assert!(!d.closed(r2));
}
