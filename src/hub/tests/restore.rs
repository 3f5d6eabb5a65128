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
    assert_eq!(d.lines(c), [HubLine::Accepted { id: id.clone() }]);
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
        assert_eq!(d.lines(c), [HubLine::Accepted { id: id.into() }]);
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
