//! Simulation tests of `await` and routing (SPEC §5.2): filter tiers, FIFO order within a
//! tier, polls and timeouts on the virtual clock, and FIFO order at scale.

use super::*;

// ===== routing (SPEC §5.2) =====

#[test]
fn routing_prefers_reply_to_and_kind_then_reply_to_then_kind_then_unfiltered() {
    let mut sim = Sim::new();
    // Parked least specific first, so specificity must beat age.
    let any = sim.park("mneme");
    let kind = sim.await_("mneme", None, Some("result"), None);
    let reply = sim.await_("mneme", Some("task-1"), None, None);
    let both = sim.await_("mneme", Some("task-1"), Some("result"), None);
    sim.drain();
    for expected in [both, reply, kind, any] {
        let (_, id) = sim.send("datastore", "mneme", "result", Some("task-1"));
        sim.commit_ok();
        let d = sim.drain();
        assert_eq!(d.deliveries.len(), 1);
        assert_eq!(
            d.delivered_id(expected),
            id,
            "expected conn {expected} to win"
        );
        sim.io_flush();
    }
    assert_eq!(sim.parked("mneme"), 0);
}

#[test]
fn routing_is_oldest_first_within_a_tier() {
    let mut sim = Sim::new();
    let waiters = [
        sim.park("datastore"),
        sim.park("datastore"),
        sim.park("datastore"),
    ];
    let ids: Vec<String> = (0..3)
        .map(|_| sim.send("mneme", "datastore", "task", None).1)
        .collect();
    // One commit for all three, as one loop iteration would do.
    sim.commit_ok();
    let d = sim.drain();
    let got: Vec<(ConnId, String)> = d
        .deliveries
        .iter()
        .map(|(c, v)| (*c, v["id"].as_str().unwrap().to_owned()))
        .collect();
    let want: Vec<(ConnId, String)> = waiters.into_iter().zip(ids).collect();
    assert_eq!(got, want);
}

#[test]
fn filters_conjoin() {
    let mut sim = Sim::new();
    let w = sim.await_("mneme", Some("task-1"), Some("result"), None);
    let wrong_kind = sim.sent("datastore", "mneme", "task", Some("task-1"));
    let wrong_corr = sim.sent("datastore", "mneme", "result", Some("task-2"));
    let no_corr = sim.sent("datastore", "mneme", "result", None);
    let d = sim.drain();
    assert!(d.deliveries.is_empty(), "each passes one filter only");
    assert_eq!(
        sim.queued_ids("mneme"),
        [wrong_kind.clone(), wrong_corr.clone(), no_corr.clone()]
    );
    let right = sim.sent("datastore", "mneme", "result", Some("task-1"));
    let d = sim.drain();
    assert_eq!(d.delivered_id(w), right);
    // A queued envelope is matched by the same conjunction.
    let late = sim.await_("mneme", Some("task-2"), Some("task"), Some(0));
    let d = sim.drain();
    assert_eq!(d.lines(late), [HubLine::Timeout]);
    assert_eq!(sim.queued_ids("mneme"), [wrong_kind, wrong_corr, no_corr]);
}

#[test]
fn await_takes_the_first_matching_envelope_in_fifo_order() {
    let mut sim = Sim::new();
    let t1 = sim.sent("datastore", "mneme", "task", None);
    let r_a = sim.sent("datastore", "mneme", "result", Some("a"));
    let r_b = sim.sent("datastore", "mneme", "result", Some("b"));
    let t2 = sim.sent("datastore", "mneme", "task", None);
    sim.drain();
    let order = [
        (Some("b"), None, r_b),
        (None, Some("task"), t1),
        (None, Some("result"), r_a),
        (None, None, t2),
    ];
    for (reply_to, kind, want) in order {
        let c = sim.await_("mneme", reply_to, kind, Some(0));
        let d = sim.drain();
        assert_eq!(
            d.delivered_id(c),
            want,
            "await replyTo={reply_to:?} kind={kind:?}"
        );
        sim.io_flush();
    }
    assert!(sim.queued_ids("mneme").is_empty());
}

#[test]
fn await_with_timeout_zero_polls_and_consumes_nothing() {
    let mut sim = Sim::new();
    let other = sim.sent("datastore", "mneme", "task", None);
    let c = sim.await_("mneme", None, Some("result"), Some(0));
    let d = sim.drain();
    assert_eq!(d.lines(c), [HubLine::Timeout]);
    assert!(d.closed(c));
    assert!(d.audit.contains(&AuditEvent::Timeout {
        conn: c,
        name: "mneme".into()
    }));
    assert_eq!(sim.queued_ids("mneme"), [other]);
    assert_eq!(sim.parked("mneme"), 0);
    assert_eq!(sim.next_deadline_ms(), None);
}

#[test]
fn await_times_out_exactly_at_its_timeout_and_not_before() {
    let mut sim = Sim::new();
    sim.advance(250);
    let c = sim.await_("mneme", None, None, Some(5));
    assert_eq!(
        sim.next_deadline_ms(),
        Some(5_250),
        "the verb deadline gave way to the await's"
    );
    sim.advance(4_999);
    assert!(sim.drain().untouched(c));
    assert_eq!(sim.parked("mneme"), 1);
    sim.advance(1);
    let d = sim.drain();
    assert_eq!(d.lines(c), [HubLine::Timeout]);
    assert!(d.closed(c));
    assert_eq!(sim.parked("mneme"), 0);
    // After a timeout reply, a send is queued, not handed to the finished await.
    let id = sim.sent("datastore", "mneme", "task", None);
    assert_eq!(sim.queued_ids("mneme"), [id]);
}

#[test]
fn await_without_timeout_waits_forever() {
    let mut sim = Sim::new();
    let c = sim.park("mneme");
    assert_eq!(sim.next_deadline_ms(), None);
    sim.advance(30 * 24 * 3_600 * 1_000);
    assert!(sim.drain().untouched(c));
    let id = sim.sent("datastore", "mneme", "task", None);
    assert_eq!(sim.drain().delivered_id(c), id);
}

#[test]
fn a_huge_timeout_waits_forever_instead_of_overflowing() {
    let mut sim = Sim::new();
    let c = sim.await_("mneme", None, None, Some(u64::MAX));
    sim.advance(1_000_000);
    assert!(sim.drain().untouched(c));
    assert_eq!(sim.parked("mneme"), 1);
}

// ===== scale =====

#[test]
fn a_thousand_sends_then_a_thousand_awaits_come_out_in_fifo_order() {
    // A thousand of mneme's connections open at once: above the default per-agent share.
    let mut sim = Sim::with_limits(|l| l.max_connections_per_agent = Some(l.max_connections));
    let mut ids = Vec::new();
    for _ in 0..1_000 {
        ids.push(sim.send("mneme", "datastore", "task", None).1);
    }
    // One commit settles every staged send, audited in staging order.
    sim.commit_ok();
    let d = sim.drain();
    assert_eq!(d.accepted_ids(), ids);
    sim.io_flush();
    let mut got = Vec::new();
    for _ in 0..1_000 {
        let c = sim.park("datastore");
        got.push(sim.drain().delivered_id(c));
        sim.io_flush();
    }
    assert_eq!(got, ids);
    assert_eq!(sim.hub.stats("datastore"), MailboxStats::default());
    assert_eq!(sim.hub.open_connections(), 0);
}
