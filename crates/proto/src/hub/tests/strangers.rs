//! Simulation tests of connections without an identity and of the per-agent connection cap
//! (`hub::strangers`; SPEC §4.6, §6.2, §8.1, §8.2; issue 29): which connections count as
//! unauthenticated and which is the oldest, the refusal of a hello past
//! `limits.max_connections_per_agent`, the strangers' records (one by one within the rate,
//! counted past it, every connection and every auth failure accounted for), and the names
//! those records give.

use super::*;
use crate::hub::{STRANGER_RECORD_BURST, STRANGER_RECORD_REFILL, STRANGER_SUMMARY_INTERVAL};

/// `(connections, auth failures, names)` in the audit events: the one-by-one records plus
/// the `strangers` counts. Agents' `connected` records are left out by the caller's choice of
/// connections.
fn accounted(audit: &[AuditEvent]) -> (u64, u64, BTreeMap<Option<String>, u64>) {
    let (mut conns, mut failed) = (0, 0);
    let mut names = BTreeMap::new();
    for e in audit {
        match e {
            AuditEvent::Connected { .. } => conns += 1,
            AuditEvent::AuthFailed { name, .. } => {
                failed += 1;
                *names.entry(name.clone()).or_insert(0) += 1;
            }
            AuditEvent::Strangers {
                connections,
                auth_failed,
                names: listed,
                ..
            } => {
                conns += connections;
                failed += auth_failed;
                for (n, k) in listed {
                    *names.entry(Some(n.clone())).or_insert(0) += k;
                }
            }
            _ => {}
        }
    }
    (conns, failed, names)
}

/// A connection that fails its hello as `name`, then is released by the IO layer.
fn fail_hello(sim: &mut Sim, name: &str) -> ConnId {
    let c = sim.open();
    sim.line(c, &hello_text(name, "wrong"));
    sim.closed(c, true);
    c
}

#[test]
fn the_oldest_unauthenticated_connection_is_known_until_it_authenticates_or_leaves() {
    let mut sim = Sim::new();
    assert_eq!(
        (sim.hub.unauthenticated(), sim.hub.oldest_unauthenticated()),
        (0, None)
    );
    let a = sim.open();
    let b = sim.open();
    let c = sim.open();
    assert_eq!(sim.hub.unauthenticated(), 3);
    assert_eq!(sim.hub.oldest_unauthenticated(), Some(a));
    assert!(sim.hub.awaits_hello(a));
    sim.line(a, &hello_text("mneme", "tok-mneme"));
    assert!(
        !sim.hub.awaits_hello(a),
        "past its hello: the full line cap"
    );
    assert_eq!(sim.hub.oldest_unauthenticated(), Some(b));
    // A failed hello keeps its connection among them while it closes (it may be made room
    // for), until the IO layer releases it.
    sim.line(b, &hello_text("mneme", "wrong"));
    assert_eq!(sim.hub.oldest_unauthenticated(), Some(b));
    sim.closed(b, true);
    assert_eq!(sim.hub.oldest_unauthenticated(), Some(c));
    // Released without a line (the IO layer made room, or the socket failed).
    sim.closed(c, false);
    assert_eq!(
        (sim.hub.unauthenticated(), sim.hub.oldest_unauthenticated()),
        (0, None)
    );
    assert!(!sim.hub.awaits_hello(c));
    let d = sim.drain();
    let (conns, failed, _) = accounted(&d.audit);
    assert_eq!((conns, failed), (3, 1), "{:?}", d.audit);
}

#[test]
fn a_hello_past_the_per_agent_cap_is_refused_and_its_slot_comes_back_at_a_close() {
    let mut sim = Sim::with_limits(|l| l.max_connections_per_agent = Some(2));
    let first = sim.login("mneme");
    let _second = sim.login("mneme");
    // Another name is not held back by mneme's connections.
    let _other = sim.login("datastore");
    let third = sim.open();
    sim.line(third, &hello_text("mneme", "tok-mneme"));
    let d = sim.drain();
    assert_eq!(
        d.error(third),
        "too many connections for this agent (limit 2); try again later"
    );
    assert!(d.closed(third));
    // Recorded as who it proved to be; holding no slot, it is among the connections that may
    // be made room for.
    assert!(d.audit.contains(&AuditEvent::Authenticated {
        conn: third,
        name: "mneme".into()
    }));
    assert_eq!(sim.hub.oldest_unauthenticated(), Some(third));
    assert!(
        d.logs
            .iter()
            .any(|l| l.contains("name=mneme") && l.contains("outcome=error")),
        "{:?}",
        d.logs
    );
    sim.closed(third, true);
    // Its close gives nothing back (it held nothing); the first's close gives one slot.
    sim.closed(first, true);
    let again = sim.login("mneme");
    let fourth = sim.open();
    sim.line(fourth, &hello_text("mneme", "tok-mneme"));
    assert!(sim
        .drain()
        .error(fourth)
        .starts_with("too many connections"));
    sim.closed(again, true);
}

#[test]
fn strangers_are_recorded_one_by_one_within_the_rate_and_counted_past_it() {
    let mut sim = Sim::new();
    let burst = STRANGER_RECORD_BURST as usize;
    // A flood in one instant: the burst in full, the rest counted.
    let flood = 3_000;
    for i in 0..flood {
        let name = if i % 2 == 0 { "mneme" } else { "mallory" };
        fail_hello(&mut sim, name);
    }
    let d = sim.drain();
    let one_by_one = |a: &[AuditEvent]| {
        a.iter()
            .filter(|e| matches!(e, AuditEvent::AuthFailed { .. }))
            .count()
    };
    assert_eq!(one_by_one(&d.audit), burst);
    assert_eq!(
        d.audit
            .iter()
            .filter(|e| matches!(e, AuditEvent::Connected { .. }))
            .count(),
        burst
    );
    // One service-log line per stranger recorded, none for the counted ones.
    assert_eq!(d.logs.len(), burst, "{:?}", d.logs.first());
    // The count goes out once the interval has passed since the first counted one.
    let interval_ms = STRANGER_SUMMARY_INTERVAL.as_millis() as u64;
    assert_eq!(
        sim.next_deadline_ms(),
        Some(u128::from(interval_ms)),
        "the next deadline is the strangers record's"
    );
    sim.advance(interval_ms - 1);
    assert!(sim.drain().audit.is_empty());
    sim.advance(1);
    let d2 = sim.drain();
    let summary: Vec<&AuditEvent> = d2
        .audit
        .iter()
        .filter(|e| matches!(e, AuditEvent::Strangers { .. }))
        .collect();
    assert_eq!(summary.len(), 1, "{:?}", d2.audit);
    let AuditEvent::Strangers { since, .. } = summary[0] else {
        unreachable!()
    };
    assert_eq!(since, "2026-07-21T06:40:51.000000Z");
    assert_eq!(d2.logs.len(), 1);
    assert!(
        d2.logs[0].starts_with(&format!(
            "strangers: {} connections that never authenticated in the last 10.0 s ({} failed their hello)",
            flood - burst,
            flood - burst
        )),
        "{}",
        d2.logs[0]
    );
    // Every connection and every failure is accounted for, and under its name.
    let all: Vec<AuditEvent> = d.audit.into_iter().chain(d2.audit).collect();
    let (conns, failed, names) = accounted(&all);
    assert_eq!((conns, failed), (flood as u64, flood as u64));
    assert_eq!(names[&Some("mneme".to_owned())], flood as u64 / 2);
    assert_eq!(names[&Some("mallory".to_owned())], flood as u64 / 2);
    assert_eq!(sim.hub.poll_timeout(), None, "nothing left to count");
    // The rate refills one stranger per period from the flood on: after the interval, that
    // many are recorded in full again, and the next is counted.
    let refilled =
        (STRANGER_SUMMARY_INTERVAL.as_millis() / STRANGER_RECORD_REFILL.as_millis()) as usize;
    for _ in 0..=refilled {
        fail_hello(&mut sim, "mallory");
    }
    let d = sim.drain();
    assert_eq!(one_by_one(&d.audit), refilled);
    assert_eq!(d.logs.len(), refilled);
}

#[test]
fn connections_that_end_without_a_hello_are_strangers_too() {
    let mut sim = Sim::new();
    // Use up the burst with failed hellos.
    for _ in 0..STRANGER_RECORD_BURST {
        fail_hello(&mut sim, "mallory");
    }
    sim.drain();
    // Past it: a bad first line, a close before any line, a connection the IO layer
    // released, a hello deadline.
    let bad = sim.open();
    sim.line(bad, "GET / HTTP/1.1");
    sim.closed(bad, true);
    let quiet = sim.open();
    sim.eof(quiet);
    sim.closed(quiet, true);
    let dropped = sim.open();
    sim.closed(dropped, false);
    let slow = sim.open();
    sim.advance(HELLO_MS);
    let d = sim.drain();
    assert_eq!(
        d.error(bad),
        "malformed line: expected value",
        "they still get their answers"
    );
    assert_eq!(d.error(slow), format!("no hello within {HELLO_MS} ms"));
    assert!(d.audit.is_empty(), "{:?}", d.audit);
    assert!(d.logs.is_empty(), "{:?}", d.logs);
    sim.closed(slow, true);
    // A stop writes the count at once, ahead of its `shutdown` record.
    let now = sim.now();
    sim.hub.flush_strangers(now);
    sim.hub.stopped();
    let d = sim.drain();
    assert!(
        matches!(
            d.audit.as_slice(),
            [
                AuditEvent::Strangers {
                    connections: 4,
                    auth_failed: 0,
                    ..
                },
                AuditEvent::Shutdown { .. }
            ]
        ),
        "{:?}",
        d.audit
    );
}

#[test]
fn a_token_tried_as_a_name_is_never_recorded_nor_listed() {
    let mut sim = Sim::new();
    // Within the rate: the record's name is null.
    let c = fail_hello(&mut sim, "tok-datastore");
    let c2 = fail_hello(&mut sim, " tok-scribe\n");
    let long = "n".repeat(crate::roster::MAX_NAME_BYTES + 1);
    let c3 = fail_hello(&mut sim, &long);
    let d = sim.drain();
    for conn in [c, c2, c3] {
        assert!(
            d.audit
                .contains(&AuditEvent::AuthFailed { conn, name: None }),
            "{conn}: {:?}",
            d.audit
        );
    }
    // Counted past the rate: counted, never listed.
    for _ in 0..STRANGER_RECORD_BURST {
        fail_hello(&mut sim, "ghost");
    }
    for _ in 0..5 {
        fail_hello(&mut sim, "tok-mneme");
    }
    let now = sim.now();
    sim.hub.flush_strangers(now);
    let d = sim.drain();
    let Some(AuditEvent::Strangers {
        auth_failed, names, ..
    }) = d
        .audit
        .iter()
        .find(|e| matches!(e, AuditEvent::Strangers { .. }))
    else {
        panic!("{:?}", d.audit)
    };
    assert_eq!(*auth_failed, 8, "17 of the 20 ghosts were in the burst");
    assert_eq!(names, &[("ghost".to_owned(), 3)]);
    for e in &d.audit {
        let mut line = String::new();
        e.encode_into("t", &mut line);
        assert!(!line.contains("tok-"), "a token was recorded: {line}");
    }
}

#[test]
fn a_summary_lists_at_most_its_share_of_names() {
    let mut sim = Sim::new();
    for _ in 0..STRANGER_RECORD_BURST {
        fail_hello(&mut sim, "warmup");
    }
    for i in 0..(crate::hub::SUMMARY_MAX_NAMES + 10) {
        fail_hello(&mut sim, &format!("name-{i:02}"));
        fail_hello(&mut sim, "name-00");
    }
    let now = sim.now();
    sim.hub.flush_strangers(now);
    let d = sim.drain();
    let Some(AuditEvent::Strangers {
        auth_failed, names, ..
    }) = d.audit.last()
    else {
        panic!("{:?}", d.audit)
    };
    let total = 2 * (crate::hub::SUMMARY_MAX_NAMES as u64 + 10);
    assert_eq!(*auth_failed, total);
    assert_eq!(names.len(), crate::hub::SUMMARY_MAX_NAMES);
    assert_eq!(
        names[0],
        (
            "name-00".to_owned(),
            crate::hub::SUMMARY_MAX_NAMES as u64 + 11
        )
    );
}
