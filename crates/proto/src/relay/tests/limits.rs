//! What one authenticated peer can make a session hold or log (docs/relay-protocol.md,
//! "Limits"): heartbeats faster than the agreed rate, a directory over its caps, unknown types
//! by the thousand, a message with too many JSON values. Driven through `handle_input` on a
//! virtual clock, like the rest of `relay::tests`. Refuses: sockets and real time.

use super::*;
use crate::relay::heartbeat::{DirectoryCaps, AGENT_ENTRY_BYTES};
use crate::relay::message::AgentState;
use crate::relay::session::{MAX_UNKNOWN_TYPES, UNKNOWN_TYPE_SHOWN_BYTES};

fn logs(evs: &[SessionEvent]) -> Vec<&str> {
    evs.iter()
        .filter_map(|e| match e {
            SessionEvent::Log(l) => Some(l.as_str()),
            _ => None,
        })
        .collect()
}

fn beat_events(evs: &[SessionEvent]) -> Vec<&Directory> {
    evs.iter()
        .filter_map(|e| match e {
            SessionEvent::Heartbeat { directory, .. } => Some(directory),
            _ => None,
        })
        .collect()
}

/// The acks `s` wrote since the last drain, by the id they acknowledge.
fn acks(s: &mut Session) -> Vec<(String, Option<bool>)> {
    split_lines(&drain(s))
        .iter()
        .map(|l| RelayMessage::decode_line(l).unwrap())
        .filter(|m| m.msg_type == MsgType::Ack)
        .map(|m| {
            (
                m.payload["ack_id"].as_str().unwrap().to_owned(),
                m.payload["resync"].as_bool(),
            )
        })
        .collect()
}

#[test]
fn heartbeats_faster_than_the_agreed_rate_are_dropped_and_keep_the_link_alive() {
    let (_d, mut a, t0) = line_pair(&[Feature::UnknownOk, Feature::MutualAuth, Feature::HbDelta]);
    let full =
        |n: u32| json!({"seq": n, "version": "9", "agents": {"x": {"parked": 0, "queued": n}}});
    // A flood: a full beat every 100 ms of virtual time for 20 intervals (6,000 beats).
    let mut applied = Vec::new();
    let mut evs = Vec::new();
    let step = Duration::from_millis(100);
    let beats = 20 * (INTERVAL.as_millis() / step.as_millis()) as u32;
    for i in 0..beats {
        let now = t0 + step * i;
        inject(&mut a, "heartbeat", &format!("hb-{i}"), full(i + 1), now);
        a.handle_timeout(now);
        for (id, resync) in acks(&mut a) {
            assert_eq!(resync, None, "{id}");
            applied.push(id);
        }
        evs.extend(events(&mut a));
    }
    // Applied (and acked) once per half interval at most: 40 over 20 intervals, the first at
    // once.
    assert_eq!(applied.len(), 40, "{applied:?}");
    assert_eq!(applied[0], "hb-0");
    assert_eq!(applied[1], format!("hb-{}", INTERVAL.as_millis() / 2 / 100));
    assert_eq!(beat_events(&evs).len(), 40);
    assert_eq!(a.stats().beats_received, u64::from(beats));
    assert_eq!(a.stats().beats_over_rate, u64::from(beats) - 40);
    let lines = logs(&evs);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].contains("faster than one per 15000 ms"),
        "{lines:?}"
    );
    // Every beat counted for liveness: the link is up, and its deadline is three intervals
    // after the last beat, dropped or not.
    assert_eq!(a.state(), SessionState::Established);
    let last = t0 + step * (beats - 1);
    a.handle_timeout(last + INTERVAL * 3 - Duration::from_millis(1));
    assert_eq!(a.state(), SessionState::Established);
    a.handle_timeout(last + INTERVAL * 3);
    assert!(closed_reason(&events(&mut a)).is_some_and(|r| r.contains("no heartbeat")));
}

#[test]
fn a_directory_over_its_caps_is_not_applied_and_a_full_beat_is_asked_for() {
    let (_d, mut a, t0) = line_pair(&[Feature::UnknownOk, Feature::MutualAuth, Feature::HbDelta]);
    a.set_directory_caps(DirectoryCaps {
        max_agents: 2,
        max_bytes: 1024,
    });
    let agents = |n: usize| -> Value {
        (0..n)
            .map(|i| (format!("a{i}"), json!({"parked": 0, "queued": 0})))
            .collect::<serde_json::Map<_, _>>()
            .into()
    };
    inject(
        &mut a,
        "heartbeat",
        "h1",
        json!({"seq": 1, "version": "9", "agents": agents(2)}),
        t0,
    );
    assert_eq!(acks(&mut a), [("h1".to_owned(), None)]);
    let evs = events(&mut a);
    assert_eq!(beat_events(&evs)[0].agents.len(), 2);
    // Three agents, twice: not applied, acked with resync (so the next beat is full, never a
    // delta against a state this side refused), logged once.
    let mut evs = Vec::new();
    for (i, id) in ["h2", "h3"].into_iter().enumerate() {
        let now = t0 + INTERVAL * (i as u32 + 1);
        inject(
            &mut a,
            "heartbeat",
            id,
            json!({"seq": i + 2, "agents": agents(3)}),
            now,
        );
        assert_eq!(acks(&mut a), [(id.to_owned(), Some(true))]);
        evs.extend(events(&mut a));
    }
    for d in beat_events(&evs) {
        assert_eq!(d.agents.len(), 2, "the last directory that fit stays");
    }
    let lines = logs(&evs);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].contains("3 agents") && lines[0].contains("max_peer_agents"),
        "{lines:?}"
    );
    // A delta that grows it past the cap is refused the same way.
    let now = t0 + INTERVAL * 3;
    let grow = json!({"seq": 4, "base": 1, "upsert": [{"name": "new", "parked": 0, "queued": 0}], "remove": []});
    inject(&mut a, "heartbeat", "h4", grow, now);
    assert_eq!(acks(&mut a), [("h4".to_owned(), Some(true))]);
    assert_eq!(a.state(), SessionState::Established);
}

#[test]
fn unknown_types_are_remembered_up_to_the_cap_with_their_names_cut() {
    let (_d, mut a, t0) = line_pair(&Feature::ALL[..2]);
    let long = format!("x{}", "é".repeat(5000));
    inject(&mut a, &long, "long-1", json!({}), t0);
    inject(&mut a, &long, "long-2", json!({}), t0);
    for i in 0..5000 {
        inject(
            &mut a,
            &format!("invented_{i}"),
            &format!("u{i}"),
            json!({}),
            t0,
        );
    }
    // Types already seen stay silent, whether under the cap or past it.
    inject(&mut a, "invented_0", "again-0", json!({}), t0);
    inject(&mut a, "invented_4999", "again-4999", json!({}), t0);
    let evs = events(&mut a);
    let unknown: Vec<&str> = evs
        .iter()
        .filter_map(|e| match e {
            SessionEvent::UnknownType { msg_type } => Some(msg_type.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(unknown.len(), MAX_UNKNOWN_TYPES);
    assert!(
        unknown[0].len() <= UNKNOWN_TYPE_SHOWN_BYTES,
        "{}",
        unknown[0].len()
    );
    assert!(long.starts_with(unknown[0]));
    assert_eq!(unknown[1], "invented_0");
    assert_eq!(
        unknown[MAX_UNKNOWN_TYPES - 1],
        format!("invented_{}", MAX_UNKNOWN_TYPES - 2)
    );
    let lines = logs(&evs);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].contains("more than 64 distinct unknown"),
        "{lines:?}"
    );
    assert_eq!(a.stats().unknown_dropped, 5004);
    assert_eq!(a.state(), SessionState::Established);
    assert_eq!(a.poll_transmit(), None, "unknown types are never acked");
}

#[test]
fn a_message_with_too_many_json_values_closes_the_link_unparsed() {
    let (_d, mut a, t0) = line_pair(&Feature::ALL[..2]);
    let units = format!(
        "[{}]",
        vec!["0"; crate::relay::json_budget::MAX_JSON_VALUES].join(",")
    );
    let payload: Value = json!({"sync_epoch": 1, "units": "PLACEHOLDER"});
    let text = payload.to_string().replace("\"PLACEHOLDER\"", &units);
    let line = format!(
        "{{\"id\":\"big\",\"msg_type\":\"knowledge_sync\",\"from_peer\":\"hubA\",\"timestamp\":{T0_MS},\"payload\":{text}}}\n"
    );
    assert!(line.len() < crate::relay::message::LINE_CAP_BYTES);
    a.handle_input(line.as_bytes(), t0);
    let evs = events(&mut a);
    let reason = closed_reason(&evs).expect("closed");
    assert!(reason.contains("JSON values"), "{reason}");
    assert!(!evs.iter().any(|e| matches!(e, SessionEvent::Message(_))));
}

#[test]
fn a_connection_in_its_handshake_holds_little_memory() {
    use crate::relay::json_budget::tests::peak_bytes;
    use std::sync::Arc;
    struct Shared(Arc<HashMap<String, PeerAuth>>);
    impl PeerKeys for Shared {
        fn lookup(&self, peer: &str) -> Option<PeerAuth> {
            self.0.get(peer).cloned()
        }
    }
    // A hub with a hundred peers: an accepted connection shares their keys, copies none.
    let keys: Arc<HashMap<String, PeerAuth>> = Arc::new(
        (0..100)
            .map(|i| (format!("peer-{i}"), auth_ok(false)))
            .collect(),
    );
    let t0 = crate::kernel::deadline::test_origin();
    let (held, mut s) = peak_bytes(|| {
        Session::acceptor(
            cfg("hubB", &Feature::ALL, t0),
            Shared(Arc::clone(&keys)),
            [3; 32],
            3,
            t0,
        )
    });
    assert!(std::mem::size_of::<Session>() < 2048);
    assert!(held < 2048, "{held} bytes for a fresh acceptor");
    // The most a silent stranger can make it buffer: a handshake line just under the cap.
    let line = vec![b'{'; HANDSHAKE_LINE_CAP_BYTES];
    let (held, ()) = peak_bytes(|| s.handle_input(&line, t0));
    assert!(held <= HANDSHAKE_LINE_CAP_BYTES + 1024, "{held}");
    assert_eq!(s.state(), SessionState::AwaitingHandshake);
    s.handle_input(b"{", t0);
    assert_eq!(
        s.state(),
        SessionState::Closed,
        "one byte more is over the cap"
    );
}

/// The byte cap counts what an entry costs this hub (`AGENT_ENTRY_BYTES`: the name's map
/// entry with its counts, liveness state and since_ms, and the map's own share), not the few
/// bytes of its counts: a peer on a link that agreed `liveness`, sending as many short names
/// as `max_peer_agents` allows, each with a state and a timestamp, is held to the byte cap in a
/// full beat and in a delta. With the old estimate of 8 bytes per entry the thousand entries
/// below counted 12,001 bytes against a 64 KiB cap and were applied, holding some 136 KB of
/// memory per directory kept (17 of them per link).
#[test]
fn a_directory_of_liveness_entries_past_the_byte_cap_is_not_applied() {
    let (_d, mut a, t0) = line_pair(&[
        Feature::UnknownOk,
        Feature::MutualAuth,
        Feature::HbDelta,
        Feature::Liveness,
    ]);
    let caps = DirectoryCaps {
        max_agents: 1024,
        max_bytes: 64 * 1024,
    };
    a.set_directory_caps(caps);
    let since_ms: i64 = 1_764_000_000_000;
    let entry = |i: usize| json!({"parked": 0, "queued": i, "state": "busy", "since_ms": since_ms});
    let agents = |range: std::ops::Range<usize>| -> Value {
        range
            .map(|i| (format!("a{i:03}"), entry(i)))
            .collect::<serde_json::Map<_, _>>()
            .into()
    };
    // 400 four-byte names: 1 + 400 × (4 + AGENT_ENTRY_BYTES) bytes, within the cap.
    let fits = 1 + 400 * (4 + AGENT_ENTRY_BYTES);
    assert!(fits <= caps.max_bytes);
    inject(
        &mut a,
        "heartbeat",
        "h1",
        json!({"seq": 1, "version": "9", "agents": agents(0..400)}),
        t0,
    );
    assert_eq!(acks(&mut a), [("h1".to_owned(), None)]);
    let evs = events(&mut a);
    let kept = beat_events(&evs)[0];
    assert_eq!(kept.agents.len(), 400);
    assert_eq!(kept.agents["a007"].state, AgentState::Busy);
    assert_eq!(kept.agents["a007"].since_ms, Some(since_ms));
    assert_eq!(kept.size_bytes(), fits);

    // A thousand: under the agent cap, over the byte cap. Not applied, acked with resync,
    // logged once with both caps named; the directory that fit stays.
    let mut evs = Vec::new();
    let now = t0 + INTERVAL;
    inject(
        &mut a,
        "heartbeat",
        "h2",
        json!({"seq": 2, "version": "9", "agents": agents(0..1000)}),
        now,
    );
    assert_eq!(acks(&mut a), [("h2".to_owned(), Some(true))]);
    evs.extend(events(&mut a));
    // The same attack as a delta on the applied beat: 200 more entries with liveness.
    let upsert: Vec<Value> = (400..600)
        .map(|i| {
            let mut e = entry(i);
            e["name"] = json!(format!("a{i:03}"));
            e
        })
        .collect();
    let now = t0 + INTERVAL * 2;
    let grow = json!({"seq": 3, "base": 1, "upsert": upsert, "remove": []});
    inject(&mut a, "heartbeat", "h3", grow, now);
    assert_eq!(acks(&mut a), [("h3".to_owned(), Some(true))]);
    evs.extend(events(&mut a));
    for d in beat_events(&evs) {
        assert_eq!(d.agents.len(), 400, "the last directory that fit stays");
    }
    let lines = logs(&evs);
    assert_eq!(lines.len(), 1, "{lines:?}");
    let over = 1 + 1000 * (4 + AGENT_ENTRY_BYTES);
    assert!(
        lines[0].contains("1000 agents")
            && lines[0].contains(&format!("in {over} bytes"))
            && lines[0].contains("max_peer_directory_bytes"),
        "{lines:?}"
    );
    assert_eq!(a.state(), SessionState::Established);
    // A beat that fits again is applied at once: the cap refuses a beat, not the link.
    let now = t0 + INTERVAL * 3;
    inject(
        &mut a,
        "heartbeat",
        "h4",
        json!({"seq": 4, "version": "9", "agents": agents(0..300)}),
        now,
    );
    assert_eq!(acks(&mut a), [("h4".to_owned(), None)]);
    assert_eq!(beat_events(&events(&mut a))[0].agents.len(), 300);
}
