//! Simulation tests of the durable store as the core sees it (SPEC §12.1): the store
//! operations of deliveries, and a restart from what the store held.

use super::*;

// ----- durable store operations (SPEC §12.1) -----

#[test]
fn a_plain_delivery_on_a_durable_hub_is_removed_at_its_first_byte() {
    let mut sim = Sim::durable();
    let (c, id) = sim.send("mneme", "datastore", "task", None);
    sim.commit_ok();
    let d = sim.drain();
    assert_eq!(d.lines(c), [accepted(id.clone())]);
    let seq = d.inserted_seq(&id);
    assert!(
        matches!(&d.store[..], [StoreOp::Insert { id: i, agent, .. }] if *i == id && agent == "datastore"),
        "{:?}",
        d.store
    );
    sim.closed(c, true);

    // Zero bytes: no Remove, and no attempt: the delivery never reached its reader.
    let lost_nothing = sim.park("datastore");
    sim.drain();
    sim.closed(lost_nothing, false);
    sim.commit_ok();
    let d = sim.drain();
    assert_eq!(d.removes(), [] as [u64; 0]);
    assert!(
        !d.store
            .iter()
            .any(|op| matches!(op, StoreOp::Attempts { .. })),
        "{:?}",
        d.store
    );

    let r = sim.park("datastore");
    let d = sim.drain();
    assert_eq!(d.delivered_id(r), id);
    assert!(d.store.is_empty(), "nothing durable before the first byte");
    sim.committed(r);
    sim.commit_ok();
    let d = sim.drain();
    assert_eq!(d.removes(), [seq]);
    assert_eq!(d.states(), [(id, "delivered".to_owned())]);
}

#[test]
fn a_memory_hub_emits_no_store_operations() {
    let mut sim = Sim::new();
    let id = sim.sent("mneme", "datastore", "task", None);
    let r = sim.park("datastore");
    assert_eq!(sim.drain().delivered_id(r), id);
    sim.io_flush();
    let d = sim.drain();
    assert!(d.store.is_empty());
    assert_eq!(
        sim.status("mneme", &id).state,
        "delivered",
        "status works without a store"
    );
}

// ----- restart (SPEC §12.1) -----

#[test]
fn restore_brings_back_queues_in_acceptance_order_and_the_ledger() {
    let mut sim = Sim::durable();
    let t0 = sim.wall.timestamp_millis() - 60_000;
    let loaded = Loaded {
        envelopes: vec![
            stored(3, "datastore", "a", "mneme", 0),
            stored(5, "scribe", "s", "mneme", 0),
            // Delivered in ack mode before the restart and never acked: still in the store.
            stored(7, "datastore", "b", "scribe", 2),
            stored(9, "datastore", "c", "mneme", 0),
        ],
        ids: vec![
            remembered(3, "mneme", "a", "datastore", "queued", t0),
            remembered(5, "mneme", "s", "scribe", "queued", t0),
            remembered(7, "scribe", "b", "datastore", "delivered", t0),
            remembered(9, "mneme", "c", "datastore", "queued", t0),
            // Settled after the queued ones were accepted: its place in acceptance order
            // is taken too, though no queue holds it.
            remembered(12, "mneme", "done", "datastore", "acked", t0),
            remembered(2, "mneme", "odd", "datastore", "no-such-state", t0),
        ],
    };
    let now = sim.now();
    sim.hub.restore(loaded, now);
    assert_eq!(sim.queued_ids("datastore"), ["a", "b", "c"]);
    assert_eq!(sim.queued_ids("scribe"), ["s"]);
    assert!(sim.drain().store.is_empty(), "restoring writes nothing");

    // Status after the restart: the unacked one is queued again, attempts kept.
    let st = sim.status("datastore", "b");
    assert_eq!(
        (
            st.state.as_str(),
            st.from.as_deref(),
            st.position,
            st.attempts
        ),
        ("queued", Some("scribe"), Some(2), Some(2))
    );
    assert_eq!(sim.status("mneme", "done").state, "acked");
    assert_eq!(
        sim.status("mneme", "odd").state,
        "unknown",
        "a record in an unknown state is skipped"
    );

    // Resends of remembered ids are duplicates, settled or queued.
    for id in ["a", "done"] {
        let c = sim.send_id("mneme", id, "datastore", "task", None, "{}");
        let d = sim.drain();
        assert_eq!(d.lines(c), [accepted(id)]);
        assert_eq!(
            d.events(),
            [&AuditEvent::Duplicate {
                conn: c,
                id: id.into()
            }]
        );
    }
    let c = sim.send_id("mneme", "a", "datastore", "task", None, r#"{"other":1}"#);
    assert!(sim
        .drain()
        .error(c)
        .starts_with("id \"a\" was already accepted from you"));

    // New envelopes continue after the highest restored seq (queued or only remembered),
    // behind the restored ones.
    let (_, fresh) = sim.send("mneme", "datastore", "task", None);
    sim.commit_ok();
    assert_eq!(sim.drain().inserted_seq(&fresh), 13);
    assert_eq!(sim.queued_ids("datastore"), ["a", "b", "c", fresh.as_str()]);
    let r = sim.park("datastore");
    assert_eq!(sim.drain().delivered_id(r), "a");
    sim.committed(r);
    sim.commit_ok();
    assert_eq!(sim.drain().removes(), [3]);
}

#[test]
fn a_restored_queue_is_delivered_in_order_to_a_waiter_that_parks_after_the_restart() {
    let mut sim = Sim::new();
    let now = sim.now();
    sim.hub.restore(
        Loaded {
            envelopes: vec![
                stored(1, "datastore", "a", "mneme", 0),
                stored(2, "datastore", "b", "mneme", 0),
            ],
            ids: vec![],
        },
        now,
    );
    let mut got = Vec::new();
    for _ in 0..2 {
        let r = sim.park("datastore");
        got.push(sim.drain().delivered_id(r));
        sim.io_flush();
    }
    assert_eq!(got, ["a", "b"]);
    assert_eq!(
        sim.status("mneme", "a").state,
        "unknown",
        "no remembered id: nothing to report"
    );
}

/// A row as the store streams it at startup (`Store::load_rows`), queued when `queued`.
fn row_ref<'a>(
    e: &'a StoredEnvelope,
    r: &'a StoredId,
    queued: bool,
) -> crate::hub::durable::RowRef<'a> {
    crate::hub::durable::RowRef {
        seq: r.seq,
        sender: &r.sender,
        id: &r.id,
        to: &r.to,
        digest: r.digest,
        accepted_ms: r.accepted_ms,
        state: &r.state,
        detail: r.detail.as_deref(),
        state_ms: r.state_ms,
        reader: r.reader,
        queued: queued.then(|| crate::hub::durable::QueuedRef {
            kind: &e.kind,
            correlation_id: e.correlation_id.as_deref(),
            text: &e.text,
            split: e.split(),
            attempts: e.attempts,
        }),
    }
}

/// The streamed restart (`Hub::restoring`) refuses a store that remembers one sender's id
/// twice, naming both rows as `rows::check_unique` does, and counts what it restored; the
/// same id from another sender is no repeat.
#[test]
fn the_restoring_sink_refuses_a_repeated_sender_and_id() {
    use crate::hub::durable::RowSink;
    let mut sim = Sim::durable();
    let t0 = sim.wall.timestamp_millis();
    let now = sim.now();
    let rows = [
        (
            stored(1, "datastore", "a", "mneme", 0),
            remembered(1, "mneme", "a", "datastore", "queued", t0),
        ),
        (
            stored(2, "datastore", "a", "scribe", 0),
            remembered(2, "scribe", "a", "datastore", "queued", t0),
        ),
        (
            stored(3, "datastore", "b", "mneme", 0),
            remembered(3, "mneme", "b", "datastore", "acked", t0),
        ),
        (
            stored(4, "datastore", "a", "mneme", 0),
            remembered(4, "mneme", "a", "datastore", "queued", t0),
        ),
    ];
    let mut sink = sim.hub.restoring(now);
    sink.expect(rows.len());
    for (e, r) in &rows[..3] {
        assert_eq!(sink.row(row_ref(e, r, r.state == "queued")), Ok(()));
    }
    assert_eq!(sink.counts(), (2, 3));
    let (e, r) = &rows[3];
    let refused = sink.row(row_ref(e, r, true)).unwrap_err();
    assert_eq!(
        refused,
        crate::hub::durable::RowRefused::SameSenderAndId { first: 1, seq: 4 }
    );
    assert_eq!(
        refused.to_string(),
        "rows seq 1 and seq 4 hold the same sender and id"
    );
}

/// The streamed restart gives the same hub as the owned lists: queues in acceptance order
/// sharing their names, statuses, and the next seq after the last row.
#[test]
fn the_restoring_sink_restores_what_restore_does() {
    use crate::hub::durable::RowSink;
    let t0 = Sim::durable().wall.timestamp_millis();
    // (seq, sender, id, recipient, attempts, state, still queued)
    let row = |seq, from, id, to, attempts, state, queued| {
        (
            stored(seq, from, id, to, attempts),
            remembered(seq, to, id, from, state, t0),
            queued,
        )
    };
    let rows = [
        row(3, "datastore", "a", "mneme", 0, "queued", true),
        row(5, "scribe", "s", "mneme", 0, "queued", true),
        row(7, "datastore", "b", "scribe", 2, "delivered", true),
        row(9, "datastore", "c", "mneme", 0, "acked", false),
        row(11, "datastore", "d", "mneme", 1, "queued", true),
    ];
    let mut streamed = Sim::durable();
    let now = streamed.now();
    let mut sink = streamed.hub.restoring(now);
    for (e, r, q) in &rows {
        sink.row(row_ref(e, r, *q)).unwrap();
    }
    let mut listed = Sim::durable();
    let loaded = Loaded {
        envelopes: rows.iter().filter(|r| r.2).map(|r| r.0.clone()).collect(),
        ids: rows.iter().map(|r| r.1.clone()).collect(),
    };
    let now = listed.now();
    listed.hub.restore(loaded, now);
    for sim in [&mut streamed, &mut listed] {
        assert_eq!(sim.queued_ids("datastore"), ["a", "b", "d"]);
        assert_eq!(sim.queued_ids("scribe"), ["s"]);
        let st = sim.status("datastore", "b");
        assert_eq!(
            (st.state.as_str(), st.position, st.attempts),
            ("queued", Some(2), Some(2))
        );
        assert_eq!(sim.status("mneme", "c").state, "acked");
        let (c, id) = sim.send("mneme", "datastore", "task", None);
        sim.commit_ok();
        let d = sim.drain();
        assert_eq!(d.lines(c), [accepted(id.clone())]);
        assert_eq!(
            d.inserted_seq(&id),
            12,
            "numbering continues after the last row"
        );
    }
}

/// At the process's exit the queues and the ledger are given up unfreed; the hub is left
/// empty and still answers.
#[test]
fn forget_held_leaves_an_empty_hub_that_still_answers() {
    let mut sim = Sim::durable();
    let t0 = sim.wall.timestamp_millis();
    let loaded = Loaded {
        envelopes: vec![stored(3, "datastore", "a", "mneme", 0)],
        ids: vec![remembered(3, "mneme", "a", "datastore", "queued", t0)],
    };
    let now = sim.now();
    sim.hub.restore(loaded, now);
    assert_eq!(sim.queued_ids("datastore"), ["a"]);
    sim.hub.forget_held();
    assert!(sim.queued_ids("datastore").is_empty());
    assert_eq!(sim.hub.memory.ledger.len(), 0);
    let id = sim.sent("mneme", "datastore", "task", None);
    assert_eq!(sim.queued_ids("datastore"), [id]);
}
