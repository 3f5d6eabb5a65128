//! Simulation tests of receipts (SPEC §12.4 "Readers" and "Waiting for a stage"): the kind of
//! reader a `status` names for each stage, and `status` requests that wait for a stage, on the
//! virtual clock: reached, timed out, ended early by a bounce, bounded by
//! `limits.max_status_waits`, and blind to other agents' envelopes.

use super::*;
use crate::wire::Reader;

/// An await that declares `reader` (absent when None), in ack mode or plain.
fn reader_await_text(reader: Option<&str>, ack: bool) -> String {
    let mut v = json!({"await": {"replyTo": null, "kind": null, "timeoutSecs": null}});
    if ack {
        v["await"]["ack"] = json!(true);
    }
    if let Some(r) = reader {
        v["await"]["reader"] = json!(r);
    }
    v.to_string()
}

fn wait_text(id: &str, wait_for: &str, timeout_ms: Option<u64>) -> String {
    let mut v = json!({"status": {"id": id, "waitFor": wait_for}});
    if let Some(ms) = timeout_ms {
        v["status"]["timeoutMs"] = json!(ms);
    }
    v.to_string()
}

impl Sim {
    fn await_as(&mut self, name: &str, reader: Option<&str>, ack: bool) -> ConnId {
        let c = self.login(name);
        self.line(c, &reader_await_text(reader, ack));
        c
    }

    /// `asker` asks to be told when `id` reaches `wait_for`; the connection, not yet answered.
    fn wait_for(
        &mut self,
        asker: &str,
        id: &str,
        wait_for: &str,
        timeout_ms: Option<u64>,
    ) -> ConnId {
        let c = self.login(asker);
        self.line(c, &wait_text(id, wait_for, timeout_ms));
        c
    }
}

impl Drained {
    /// `c`'s one status line; panics on anything else.
    fn status_line(&self, c: ConnId) -> EnvelopeStatus {
        match self.lines(c) {
            [HubLine::Status(st)] => st.clone(),
            other => panic!("conn {c}: expected one status line, got {other:?}"),
        }
    }
}

/// The reply's (state, reader, wait).
fn stage(st: &EnvelopeStatus) -> (&str, Option<&str>, Option<&str>) {
    (st.state.as_str(), st.reader.as_deref(), st.wait.as_deref())
}

#[test]
fn each_reader_kind_is_named_with_delivered_and_acked() {
    for reader in Reader::DECLARABLE {
        let name = reader.as_str();
        let mut sim = Sim::new();
        let id = sim.sent("mneme", "datastore", "task", None);
        let st = sim.status("mneme", &id);
        assert_eq!(stage(&st), ("queued", None, None), "{name}");
        let r = sim.await_as("datastore", Some(name), true);
        sim.drain();
        sim.committed(r);
        let st = sim.status("mneme", &id);
        assert_eq!(stage(&st), ("delivered", Some(name), None), "{name}");
        sim.ack(r, &id);
        sim.commit_ok();
        let d = sim.drain();
        assert_eq!(d.lines(r).last(), Some(&HubLine::Acked { id: id.clone() }));
        let st = sim.status("mneme", &id);
        assert_eq!(stage(&st), ("acked", Some(name), None), "{name}");
        // The recipient sees the same receipt.
        assert_eq!(sim.status("datastore", &id).reader.as_deref(), Some(name));
    }
}

#[test]
fn a_plain_delivery_names_its_reader_and_an_undeclared_one_is_unknown() {
    let mut sim = Sim::new();
    let id = sim.sent("mneme", "datastore", "task", None);
    let r = sim.await_as("datastore", Some("cli-await"), false);
    sim.drain();
    sim.io_flush();
    sim.drain();
    let st = sim.status("mneme", &id);
    assert_eq!(stage(&st), ("delivered", Some("cli-await"), None));

    // A 004 await (no reader key) and an ack-mode await without one: `unknown`.
    let id = sim.sent("mneme", "datastore", "task", None);
    let r2 = sim.park("datastore");
    sim.drain();
    sim.io_flush();
    sim.drain();
    assert_eq!(
        stage(&sim.status("mneme", &id)),
        ("delivered", Some("unknown"), None)
    );
    let id = sim.sent("mneme", "datastore", "task", None);
    let r3 = sim.await_ack("datastore");
    sim.drain();
    sim.committed(r3);
    assert_eq!(
        stage(&sim.status("mneme", &id)),
        ("delivered", Some("unknown"), None)
    );
    assert_ne!(r, r2);
}

#[test]
fn a_returned_envelope_has_no_reader_and_the_next_reader_replaces_it() {
    let mut sim = Sim::new();
    let id = sim.sent("mneme", "datastore", "task", None);
    let r = sim.await_as("datastore", Some("stop-hook"), true);
    sim.drain();
    sim.committed(r);
    sim.eof(r); // the hook died before acking
    sim.drain();
    let st = sim.status("mneme", &id);
    assert_eq!(stage(&st), ("queued", None, None));
    assert_eq!(st.attempts, Some(1));
    let r = sim.await_as("datastore", Some("mcp-await"), true);
    sim.drain();
    sim.committed(r);
    assert_eq!(
        stage(&sim.status("mneme", &id)),
        ("delivered", Some("mcp-await"), None)
    );
}

#[test]
fn a_loss_keeps_the_reader_it_was_lost_at() {
    let mut sim = Sim::new();
    let id = sim.sent("mneme", "datastore", "task", None);
    let r = sim.await_as("datastore", Some("drain"), false);
    sim.drain();
    sim.committed(r);
    sim.closed(r, false); // cut short after its first byte
    sim.commit_ok();
    sim.drain();
    let st = sim.status("mneme", &id);
    assert_eq!(stage(&st), ("bounced", Some("drain"), None));
    assert_eq!(st.reason.as_deref(), Some("peer reset"));
}

/// Attack: a reader kind off the list is refused, and the refusal never echoes the value.
#[test]
fn a_reader_off_the_list_is_refused_without_quoting_it() {
    let mut sim = Sim::new();
    sim.sent("mneme", "datastore", "task", None);
    for bad in ["tok-datastore", "unknown", "CLI-AWAIT", "", "stop-hook "] {
        let c = sim.await_as("datastore", Some(bad), true);
        let d = sim.drain();
        assert_eq!(
            d.error(c),
            "invalid await: reader must be one of cli-await, mcp-await, stop-hook, plugin-drain, drain, acp-session"
        );
        assert!(d.closed(c));
        assert!(d.deliveries.is_empty(), "nothing was handed out");
        sim.io_flush();
    }
    let c = sim.login("datastore");
    sim.line(c, r#"{"await":{"reader":7}}"#);
    assert_eq!(
        sim.drain().error(c),
        "malformed line: invalid type: integer, expected a string"
    );
    assert_eq!(sim.queued_ids("datastore").len(), 1);
}

// ----- waiting for a stage -----

#[test]
fn a_wait_for_delivered_is_answered_when_a_reader_takes_it() {
    let mut sim = Sim::new();
    let id = sim.sent("mneme", "datastore", "task", None);
    let w = sim.wait_for("mneme", &id, "delivered", None);
    let d = sim.drain();
    assert!(d.untouched(w), "parked");
    assert_eq!(sim.hub.parked_status_waits(), 1);
    assert_eq!(sim.next_deadline_ms(), None, "no timeout: no deadline");
    let r = sim.await_as("datastore", Some("cli-await"), true);
    let d = sim.drain();
    assert!(d.untouched(w), "handed over, not yet taken by the socket");
    sim.committed(r);
    let d = sim.drain();
    let st = d.status_line(w);
    assert_eq!(
        stage(&st),
        ("delivered", Some("cli-await"), Some("reached"))
    );
    assert_eq!(st.from.as_deref(), Some("mneme"));
    assert!(d.closed(w));
    assert_eq!(sim.hub.parked_status_waits(), 0);
}

#[test]
fn a_wait_for_acked_outlasts_a_return_and_ends_at_the_ack() {
    let mut sim = Sim::new();
    let id = sim.sent("mneme", "datastore", "task", None);
    let w = sim.wait_for("mneme", &id, "acked", Some(60_000));
    // First reader takes it and dies before acking: the wait goes on.
    let r = sim.await_as("datastore", Some("stop-hook"), true);
    sim.drain();
    sim.committed(r);
    sim.eof(r);
    let d = sim.drain();
    assert!(d.untouched(w));
    // Second reader acks it.
    let r = sim.await_as("datastore", Some("stop-hook"), true);
    sim.drain();
    sim.committed(r);
    sim.ack(r, &id);
    let d = sim.drain();
    assert!(d.untouched(w), "an ack counts once it is committed");
    sim.commit_ok();
    let d = sim.drain();
    let st = d.status_line(w);
    assert_eq!(stage(&st), ("acked", Some("stop-hook"), Some("reached")));
    assert_eq!(sim.hub.parked_status_waits(), 0);
    assert_eq!(
        sim.next_deadline_ms(),
        None,
        "the wait's timer went with it"
    );
}

#[test]
fn a_wait_already_reached_is_answered_at_once() {
    let mut sim = Sim::new();
    sim.sent("mneme", "datastore", "task", None);
    let id = sim.acked("datastore");
    for wait_for in ["delivered", "acked"] {
        let w = sim.wait_for("mneme", &id, wait_for, Some(1_000));
        let d = sim.drain();
        assert_eq!(
            stage(&d.status_line(w)),
            ("acked", Some("unknown"), Some("reached"))
        );
        sim.io_flush();
    }
    // `forwarded` never comes for local mail that was acked: ended, at once.
    let w = sim.wait_for("mneme", &id, "forwarded", None);
    assert_eq!(sim.drain().status_line(w).wait.as_deref(), Some("ended"));
    assert_eq!(sim.hub.parked_status_waits(), 0);
}

#[test]
fn a_wait_for_acked_on_a_plain_delivery_ends_as_it_is_consumed() {
    let mut sim = Sim::new();
    let id = sim.sent("mneme", "datastore", "task", None);
    let w = sim.wait_for("mneme", &id, "acked", None);
    let r = sim.await_as("datastore", Some("cli-await"), false);
    sim.drain();
    sim.committed(r);
    let st = sim.drain().status_line(w);
    assert_eq!(
        stage(&st),
        ("delivered", Some("cli-await"), Some("ended")),
        "a plain delivery is never acked"
    );
}

#[test]
fn a_wait_times_out_on_the_virtual_clock_with_the_current_stage() {
    let mut sim = Sim::new();
    let id = sim.sent("mneme", "datastore", "task", None);
    let w = sim.wait_for("mneme", &id, "acked", Some(1_500));
    sim.drain();
    assert_eq!(sim.next_deadline_ms(), Some(1_500));
    sim.advance(1_499);
    assert!(sim.drain().untouched(w));
    sim.advance(1);
    let d = sim.drain();
    let st = d.status_line(w);
    assert_eq!(stage(&st), ("queued", None, Some("timeout")));
    assert_eq!(st.position, Some(1));
    assert!(d.closed(w));
    assert_eq!(sim.hub.parked_status_waits(), 0);
    // The delivery afterwards touches the answered connection no more.
    let r = sim.await_as("datastore", None, true);
    sim.drain();
    sim.committed(r);
    assert!(sim.drain().untouched(w));
}

#[test]
fn a_zero_timeout_answers_at_once_without_parking() {
    let mut sim = Sim::new();
    let id = sim.sent("mneme", "datastore", "task", None);
    let w = sim.wait_for("mneme", &id, "delivered", Some(0));
    let st = sim.drain().status_line(w);
    assert_eq!(stage(&st), ("queued", None, Some("timeout")));
    assert_eq!(sim.hub.parked_status_waits(), 0);
}

#[test]
fn a_bounce_ends_the_wait_early() {
    let mut sim = Sim::new();
    let id = sim.sent("mneme", "datastore", "task", None);
    let w = sim.wait_for("mneme", &id, "acked", Some(600_000));
    let r = sim.await_as("datastore", Some("plugin-drain"), false);
    sim.drain();
    sim.committed(r);
    let d = sim.drain();
    // Plain: consumed at its first byte, so the wait for acked already ended here.
    assert_eq!(d.status_line(w).wait.as_deref(), Some("ended"));

    // In ack mode: given up after max_deliveries returns, it bounces, and the wait ends.
    let mut sim = Sim::with_limits(|l| l.max_deliveries = 1);
    let id = sim.sent("mneme", "datastore", "task", None);
    let w = sim.wait_for("mneme", &id, "acked", Some(600_000));
    let r = sim.await_as("datastore", Some("mcp-await"), true);
    sim.drain();
    sim.committed(r);
    sim.eof(r);
    let d = sim.drain();
    let st = d.status_line(w);
    assert_eq!(stage(&st), ("bounced", None, Some("ended")));
    assert!(st.reason.unwrap().contains("not acked after 1 deliveries"));
    assert_eq!(sim.hub.parked_status_waits(), 0);
}

#[test]
fn a_wait_for_forwarded_on_local_mail_ends_when_it_is_consumed() {
    let mut sim = Sim::new();
    let id = sim.sent("mneme", "datastore", "task", None);
    let w = sim.wait_for("mneme", &id, "forwarded", None);
    let r = sim.await_as("datastore", Some("drain"), true);
    sim.drain();
    sim.committed(r);
    assert!(sim.drain().untouched(w), "delivered is not forwarded");
    sim.closed(r, false);
    // Ack mode never loses: the envelope came back; the wait goes on.
    assert!(sim.drain().untouched(w));
    let r = sim.await_as("datastore", Some("drain"), false);
    sim.drain();
    sim.committed(r);
    let st = sim.drain().status_line(w);
    assert_eq!(stage(&st), ("delivered", Some("drain"), Some("ended")));
}

#[test]
fn parked_waits_are_bounded_by_max_status_waits() {
    let mut sim = Sim::with_limits(|l| l.max_status_waits = 2);
    let id = sim.sent("mneme", "datastore", "task", None);
    let w1 = sim.wait_for("mneme", &id, "acked", None);
    let w2 = sim.wait_for("datastore", &id, "acked", None);
    let w3 = sim.wait_for("mneme", &id, "delivered", None);
    let d = sim.drain();
    assert!(d.untouched(w1) && d.untouched(w2));
    assert_eq!(
        d.error(w3),
        "too many status waits: 2 are parked, the most limits.max_status_waits allows; ask without waitFor, or wait again later"
    );
    assert!(d.closed(w3));
    // A plain status still works, and a wait that ends at once needs no room.
    assert_eq!(sim.status("mneme", &id).state, "queued");
    let w = sim.wait_for("mneme", &id, "delivered", Some(0));
    assert_eq!(sim.drain().status_line(w).wait.as_deref(), Some("timeout"));
    // A waiter that goes away frees its room.
    sim.eof(w1);
    sim.drain();
    assert_eq!(sim.hub.parked_status_waits(), 1);
    let w4 = sim.wait_for("mneme", &id, "delivered", None);
    assert!(sim.drain().untouched(w4));
    assert_eq!(sim.hub.parked_status_waits(), 2);
    // Both are answered by one delivery.
    let r = sim.await_as("datastore", Some("cli-await"), true);
    sim.drain();
    sim.committed(r);
    let d = sim.drain();
    assert!(d.untouched(w2), "w2 waits for acked");
    assert_eq!(d.status_line(w4).wait.as_deref(), Some("reached"));
    sim.closed(w2, false);
    sim.drain();
    assert_eq!(sim.hub.parked_status_waits(), 0);
}

/// Attack: waiting on another agent's envelope reveals nothing, at once, like `status`.
#[test]
fn a_wait_for_another_senders_id_is_unknown_at_once() {
    let mut sim = Sim::new();
    let id = sim.sent("mneme", "datastore", "task", None);
    let want = EnvelopeStatus {
        id: id.clone(),
        state: "unknown".into(),
        wait: Some("ended".into()),
        ..EnvelopeStatus::default()
    };
    let w = sim.wait_for("scribe", &id, "delivered", Some(60_000));
    let d = sim.drain();
    assert_eq!(d.status_line(w), want);
    assert!(d.closed(w));
    assert_eq!(sim.hub.parked_status_waits(), 0, "not parked");
    // The same line as for an id nobody sent.
    let w = sim.wait_for("scribe", "no-such-id", "delivered", Some(60_000));
    let got = sim.drain().status_line(w);
    assert_eq!(
        (got.state.as_str(), got.wait.as_deref(), got.from, got.to),
        ("unknown", Some("ended"), None, None)
    );
    // The recipient may wait, as it may ask.
    let w = sim.wait_for("datastore", &id, "delivered", None);
    assert!(sim.drain().untouched(w));
    assert_eq!(sim.hub.parked_status_waits(), 1);
}

#[test]
fn wait_arguments_are_checked() {
    let mut sim = Sim::new();
    let id = sim.sent("mneme", "datastore", "task", None);
    let c = sim.wait_for("mneme", &id, "lost", None);
    assert_eq!(
        sim.drain().error(c),
        "invalid status: waitFor must be one of delivered, acked, forwarded"
    );
    let c = sim.login("mneme");
    sim.line(
        c,
        &json!({"status": {"id": id, "timeoutMs": 5}}).to_string(),
    );
    assert_eq!(
        sim.drain().error(c),
        "invalid status: timeoutMs needs waitFor"
    );
    let c = sim.login("mneme");
    sim.line(
        c,
        &json!({"status": {"id": id, "waitFor": "acked", "timeoutMs": -1}}).to_string(),
    );
    assert_eq!(
        sim.drain().error(c),
        "malformed line: invalid value: negative integer, expected u64"
    );
    // A huge timeout saturates instead of overflowing the clock.
    let w = sim.wait_for("mneme", &id, "acked", Some(u64::MAX));
    assert!(sim.drain().untouched(w));
    assert_eq!(sim.hub.parked_status_waits(), 1);
}

#[test]
fn a_parked_wait_ends_with_its_connection_and_the_hub() {
    let mut sim = Sim::new();
    let id = sim.sent("mneme", "datastore", "task", None);
    // A line after the verb waits for the answer, then gets the §4.3 error.
    let w = sim.wait_for("mneme", &id, "delivered", Some(1_000));
    sim.line(w, r#"{"who":{}}"#);
    assert!(sim.drain().untouched(w));
    sim.advance(1_000);
    let d = sim.drain();
    match d.lines(w) {
        [HubLine::Status(st), HubLine::Error { message }] => {
            assert_eq!(st.wait.as_deref(), Some("timeout"));
            assert_eq!(message, pipeline::LINE_AFTER_THE_VERB);
        }
        other => panic!("{other:?}"),
    }
    // A released socket drops its wait.
    let w = sim.wait_for("mneme", &id, "delivered", None);
    sim.drain();
    sim.closed(w, true);
    assert_eq!(sim.hub.parked_status_waits(), 0);
    // A stopping hub answers a parked wait with an error.
    let w = sim.wait_for("mneme", &id, "delivered", None);
    sim.drain();
    let now = sim.now();
    sim.hub.shutdown(now);
    let d = sim.drain();
    assert_eq!(d.error(w), "hub is shutting down");
    assert_eq!(sim.hub.parked_status_waits(), 0);
}

// ----- durability -----

#[test]
fn the_reader_goes_to_the_store_with_the_state_and_comes_back_at_restart() {
    let mut sim = Sim::durable();
    let id = sim.sent("mneme", "datastore", "task", None);
    let r = sim.await_as("datastore", Some("stop-hook"), true);
    sim.drain();
    sim.committed(r);
    sim.ack(r, &id);
    sim.commit_ok();
    let d = sim.drain();
    let readers: Vec<(String, Option<Reader>)> = d
        .store
        .iter()
        .filter_map(|op| match op {
            StoreOp::State { state, reader, .. } => Some((state.clone(), *reader)),
            _ => None,
        })
        .collect();
    assert_eq!(readers, [("acked".to_owned(), Some(Reader::StopHook))]);
    // A plain delivery's state carries its reader too.
    let id2 = sim.sent("mneme", "datastore", "task", None);
    let r = sim.await_as("datastore", Some("drain"), false);
    sim.drain();
    sim.committed(r);
    sim.commit_ok();
    let d = sim.drain();
    assert!(d.store.iter().any(|op| matches!(
        op,
        StoreOp::State { id, state, reader: Some(Reader::Drain), .. } if *id == id2 && state == "delivered"
    )));

    // A restart restores the reader from the stored row.
    let mut after = Sim::durable();
    let mut row = remembered(0, "mneme", &id, "datastore", "acked", 1_000);
    row.reader = Some(Reader::StopHook);
    let old = remembered(1, "mneme", "old", "datastore", "acked", 1_000);
    let now = after.now();
    after.hub.restore(
        Loaded {
            envelopes: vec![],
            ids: vec![row, old],
        },
        now,
    );
    assert_eq!(
        stage(&after.status("mneme", &id)),
        ("acked", Some("stop-hook"), None)
    );
    assert_eq!(
        stage(&after.status("mneme", "old")),
        ("acked", None, None),
        "a row from before receipts has no reader"
    );
}
