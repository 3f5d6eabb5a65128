//! Simulation tests of how the core's cost grows with work (docs/performance.md "How cost
//! grows with work", issue 13): an await, a send, `status` and `who` must look at a bounded
//! number of queue entries, mailboxes and ledger records however long the queue, however
//! many agents and however large the ledger. They count operations (`router::Work`,
//! `Ledger::touched`), never time, so a scan introduced anywhere on these paths fails them.

use super::*;

/// Queue entries one operation may look at: two binary searches over a 100,000-entry queue
/// (17 probes each) and a few direct looks. A walk of the queue looks at tens of thousands.
const ENTRY_BOUND: u64 = 64;

/// A stored, queued envelope for a restart, with its remembered id.
fn queued_row(
    seq: u64,
    to: &str,
    from: &str,
    kind: &str,
    corr: Option<&str>,
) -> (StoredEnvelope, StoredId) {
    let id = format!("q-{seq}");
    let env = Envelope::new(
        id.clone(),
        from.into(),
        to.into(),
        "2026-07-21T06:40:51Z".into(),
        kind.into(),
        corr.map(Into::into),
        "{}".into(),
    )
    .expect("valid body");
    let stored = StoredEnvelope {
        seq,
        agent: to.into(),
        id: id.clone(),
        sender: from.into(),
        kind: kind.into(),
        correlation_id: corr.map(Into::into),
        text: env.to_json().into(),
        attempts: 0,
    };
    let mut rec = remembered(seq, from, &id, to, "queued", 0);
    rec.digest = ledger::digest(to, kind, corr, "{}");
    (stored, rec)
}

/// A simulation whose caps admit `n` more queued envelopes, on `roster` when given, restored
/// with `rows` and the remembered `ids`.
fn restored(
    n: usize,
    roster: Option<&str>,
    rows: Vec<(StoredEnvelope, StoredId)>,
    ids: Vec<StoredId>,
) -> Sim {
    let mut sim = Sim::with_limits(|l| {
        l.queue_max_envelopes = n + 16;
        l.queue_max_bytes = usize::MAX / 4;
        l.hub_max_bytes = usize::MAX / 4;
        l.idempotency_max_ids = n * 2 + 16;
    });
    if let Some(text) = roster {
        let now = sim.now();
        sim.hub
            .replace_roster(Roster::parse(text).expect("valid roster"), now);
        sim.drain();
    }
    let mut loaded = Loaded::default();
    for (e, r) in rows {
        loaded.envelopes.push(e);
        loaded.ids.push(r);
    }
    loaded.ids.extend(ids);
    loaded.ids.sort_by_key(|r| r.seq);
    let now = sim.now();
    sim.hub.restore(loaded, now);
    sim
}

/// Router work and ledger records touched while `f` runs.
fn work_of(sim: &mut Sim, f: impl FnOnce(&mut Sim)) -> (Work, u64) {
    let (w0, t0) = (sim.hub.router().work(), sim.hub.memory.ledger.touched());
    f(sim);
    let (w1, t1) = (sim.hub.router().work(), sim.hub.memory.ledger.touched());
    (
        Work {
            entries: w1.entries - w0.entries,
            mailboxes: w1.mailboxes - w0.mailboxes,
        },
        t1 - t0,
    )
}

const QUEUED: u64 = 100_000;

/// 100,000 queued for mneme: a "task" head with correlation id "head", "task"s in between,
/// and a "result" tail with correlation id "tail".
fn long_queue() -> Sim {
    let rows = (0..QUEUED)
        .map(|seq| match seq {
            0 => queued_row(seq, "mneme", "datastore", "task", Some("head")),
            s if s == QUEUED - 1 => queued_row(seq, "mneme", "datastore", "result", Some("tail")),
            _ => queued_row(seq, "mneme", "datastore", "task", None),
        })
        .collect();
    restored(QUEUED as usize, None, rows, Vec::new())
}

#[test]
fn an_await_looks_at_a_bounded_number_of_entries_with_100k_queued() {
    let mut sim = long_queue();
    let cases: [(Option<&str>, Option<&str>, &str); 5] = [
        (Some("tail"), None, "q-99999"),
        (None, Some("result"), "none: the tail is taken"),
        (Some("head"), Some("task"), "q-0"),
        (None, Some("task"), "q-1"),
        (None, None, "q-2"),
    ];
    for (reply_to, kind, want) in cases {
        let mut got = None;
        let (work, _) = work_of(&mut sim, |sim| {
            let c = sim.await_("mneme", reply_to, kind, Some(0));
            let d = sim.drain();
            got = d.conns.get(&c).and_then(|o| o.delivered.clone());
            sim.io_flush();
        });
        let got = got.map(|t| serde_json::from_str::<Value>(&t).expect("json")["id"].clone());
        match want.strip_prefix("q-") {
            Some(_) => assert_eq!(got, Some(json!(want)), "{reply_to:?} {kind:?}"),
            None => assert_eq!(got, None, "{reply_to:?} {kind:?}: {want}"),
        }
        assert!(
            work.entries <= ENTRY_BOUND,
            "await {reply_to:?} {kind:?} looked at {} queue entries",
            work.entries
        );
        assert_eq!(work.mailboxes, 0);
    }
    assert_eq!(sim.hub.total_queued(), QUEUED as usize - 4);
    // The order the rest come in is still acceptance order.
    assert_eq!(sim.queued_ids("mneme")[..2], ["q-3", "q-4"]);
}

/// A filter that matches nothing parks without walking the queue, and a send that then
/// arrives for it is claimed by tier, not by a walk either.
#[test]
fn a_filtered_await_that_matches_nothing_parks_without_a_walk() {
    let mut sim = long_queue();
    let (work, _) = work_of(&mut sim, |sim| {
        let w = sim.await_("mneme", Some("nowhere"), Some("result"), None);
        sim.drain();
        assert_eq!(sim.parked("mneme"), 1);
        let id = sim.sent("datastore", "mneme", "result", Some("nowhere"));
        let d = sim.drain();
        assert_eq!(d.delivered_id(w), id);
    });
    assert!(work.entries <= ENTRY_BOUND, "looked at {}", work.entries);
    assert_eq!(work.mailboxes, 0);
}

#[test]
fn a_send_looks_at_no_queue_entries_with_100k_queued() {
    let mut sim = long_queue();
    let (work, touched) = work_of(&mut sim, |sim| {
        sim.sent("datastore", "mneme", "task", None);
    });
    assert_eq!(work, Work::default(), "a send appends: nothing is walked");
    assert_eq!(touched, 0);
    assert_eq!(sim.hub.total_queued(), QUEUED as usize + 1);
}

const AGENTS: usize = 10_000;

/// 10,000 roster names, each with one queued envelope, and a waiter parked on every tenth.
fn many_agents() -> (Sim, Vec<ConnId>) {
    let mut roster = String::from("[agents]\n");
    for i in 0..AGENTS {
        roster.push_str(&format!("a{i} = \"tok-a{i}\"\n"));
    }
    let rows = (0..AGENTS as u64)
        .map(|i| queued_row(i, &format!("a{i}"), "a0", "result", Some("c")))
        .collect();
    let mut sim = restored(AGENTS, Some(&roster), rows, Vec::new());
    let waiters = (0..AGENTS)
        .step_by(10)
        .map(|i| sim.await_(&format!("a{i}"), None, Some("task"), None))
        .collect();
    sim.drain();
    (sim, waiters)
}

#[test]
fn a_send_looks_at_a_bounded_amount_with_10k_agents() {
    let (mut sim, waiters) = many_agents();
    // To a queue (a5001 has no waiter), then to a parked await (a5000 has one).
    for (to, waiter) in [("a5001", None), ("a5000", Some(waiters[500]))] {
        let (work, touched) = work_of(&mut sim, |sim| {
            let id = sim.sent("a1", to, "task", None);
            if let Some(w) = waiter {
                assert_eq!(sim.drain().delivered_id(w), id);
                sim.io_flush();
            }
        });
        assert_eq!(
            work,
            Work::default(),
            "a send to {to} visited other agents' queues"
        );
        assert_eq!(touched, 0);
    }
    assert_eq!(sim.hub.total_queued(), AGENTS + 1);
}

#[test]
fn an_await_looks_at_a_bounded_amount_with_10k_agents() {
    let (mut sim, _) = many_agents();
    let (work, _) = work_of(&mut sim, |sim| {
        let c = sim.await_("a7777", Some("c"), None, Some(0));
        assert_eq!(sim.drain().delivered_id(c), "q-7777");
        sim.io_flush();
    });
    assert!(work.entries <= ENTRY_BOUND, "looked at {}", work.entries);
    assert_eq!(work.mailboxes, 0);
}

const LEDGER: u64 = 200_000;

/// A ledger of 200,000 settled ids from three senders, plus one queued envelope at the back of
/// a 100,000-envelope queue.
fn large_ledger() -> Sim {
    let senders = ["mneme", "datastore", "scribe"];
    let settled: Vec<StoredId> = (0..LEDGER)
        .map(|i| {
            let from = senders[(i % 3) as usize];
            let to = senders[((i + 1) % 3) as usize];
            remembered(QUEUED + i, from, &format!("s-{i}"), to, "acked", 1_000)
        })
        .collect();
    let rows = (0..QUEUED)
        .map(|seq| queued_row(seq, "scribe", "datastore", "task", None))
        .collect();
    restored(QUEUED as usize, None, rows, settled)
}

#[test]
fn status_touches_at_most_the_senders_of_its_id_with_a_large_ledger() {
    let mut sim = large_ledger();
    // The sender's own id, a recipient's view of one, an unknown id, and the last of a long
    // queue (its position comes from a binary search).
    let cases = [
        ("mneme", "s-3", "acked"),
        ("datastore", "s-3", "acked"),
        ("scribe", "s-3", "unknown"),
        ("mneme", "never-sent", "unknown"),
        ("scribe", "q-99999", "queued"),
        ("datastore", "q-99999", "queued"),
    ];
    for (asker, id, want) in cases {
        let mut st = None;
        let (work, touched) = work_of(&mut sim, |sim| st = Some(sim.status(asker, id)));
        let st = st.expect("a status");
        assert_eq!(st.state, want, "{asker} asks about {id}");
        assert!(
            touched <= 2,
            "{asker}'s status of {id} touched {touched} records"
        );
        assert!(
            work.entries <= ENTRY_BOUND,
            "looked at {} queue entries",
            work.entries
        );
        assert_eq!(work.mailboxes, 0);
        if id == "q-99999" {
            assert_eq!(st.position, Some(QUEUED));
        }
    }
}

#[test]
fn who_touches_no_ledger_record_or_queue_entry_with_a_large_ledger() {
    let mut sim = large_ledger();
    let (work, touched) = work_of(&mut sim, |sim| {
        let c = sim.login("mneme");
        sim.line(c, r#"{"who":{}}"#);
        let d = sim.drain();
        match d.lines(c).last() {
            Some(HubLine::Who(p)) => {
                let scribe = p
                    .agents
                    .iter()
                    .find(|a| a.name == "scribe")
                    .expect("listed");
                assert_eq!(scribe.queued, QUEUED);
            }
            other => panic!("expected a who line, got {other:?}"),
        }
    });
    assert_eq!(work, Work::default());
    assert_eq!(touched, 0);
}

/// A restart costs one probe of the ledger's table per row, queued or settled (the row check
/// before it and the queue after it add none), and every record of one agent shares one copy
/// of its name.
#[test]
fn a_restart_probes_the_ledger_once_per_row() {
    let sim = large_ledger();
    let ledger = &sim.hub.memory.ledger;
    assert_eq!(ledger.len() as u64, QUEUED + LEDGER);
    assert_eq!(
        ledger.probes(),
        QUEUED + LEDGER,
        "a fresh hub's ledger saw nothing but the restore"
    );
    let a = &ledger.get("datastore", "q-0").expect("queued").to;
    let b = &ledger.get("datastore", "q-99999").expect("queued").to;
    let c = &ledger.get("datastore", "s-1").expect("settled").to;
    assert!(crate::hub::Name::ptr_eq(a, b) && crate::hub::Name::ptr_eq(a, c));
}
