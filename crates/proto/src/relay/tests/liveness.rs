//! Feature `liveness` on the wire (docs/relay-protocol.md §5 "Liveness"): directory entries
//! carry `state`/`since_ms` only on a link that agreed it, a change of state sends a beat
//! early but never two beats closer than `liveness_update` (a flapping agent coalesces), the
//! receiver reads any odd value as unknown without losing the beat, and a peer that did not
//! agree states nothing. Driven on a virtual clock like the rest of `relay::tests`.

use super::*;
use crate::relay::message::{AgentEntry, AgentState};

fn dir_with(states: &[(&str, AgentState, Option<i64>)]) -> Directory {
    Directory {
        version: "0.1.0".into(),
        agents: states
            .iter()
            .map(|(n, s, since)| {
                (
                    (*n).to_owned(),
                    AgentEntry {
                        parked: u32::from(*s == AgentState::Waiting),
                        queued: 0,
                        state: *s,
                        since_ms: *since,
                    },
                )
            })
            .collect(),
    }
}

/// Every heartbeat `bytes` holds after `n_lines` handshake lines.
fn beats(bytes: &[u8], n_lines: usize) -> Vec<RelayMessage> {
    split_lines_then_frames(bytes, n_lines)
        .0
        .into_iter()
        .filter(|m| m.msg_type == MsgType::Heartbeat)
        .collect()
}

/// The peer's directory as the last `Heartbeat` event in `evs` gave it.
fn last_directory(evs: &[SessionEvent]) -> Option<Directory> {
    evs.iter().rev().find_map(|e| match e {
        SessionEvent::Heartbeat { directory, .. } => Some(directory.clone()),
        _ => None,
    })
}

fn state_of(evs: &[SessionEvent], name: &str) -> Option<AgentState> {
    last_directory(evs).and_then(|d| d.agents.get(name).map(|e| e.state))
}

#[test]
fn with_liveness_agreed_a_change_goes_out_early_and_a_flapping_agent_coalesces() {
    let mut net = Net::v1(&Feature::ALL, &Feature::ALL);
    net.a
        .set_directory(dir_with(&[("alpha", AgentState::Idle, Some(T0_MS))]));
    net.pump();
    let (_, _, agreed, _, _) = Net::established(&net.ev_d).unwrap();
    assert!(agreed.contains(&Feature::Liveness), "{agreed:?}");
    net.advance(Duration::from_secs(5));
    assert_eq!(state_of(&net.ev_d, "alpha"), Some(AgentState::Idle));
    let first = &beats(&net.a2d, 2)[0];
    assert_eq!(
        first.payload["agents"]["alpha"],
        json!({"parked": 0, "queued": 0, "state": "idle", "since_ms": T0_MS}),
        "the entry carries the state and its since_ms"
    );

    // Five seconds in, far from the next regular beat (30 s): the change goes out at once.
    let sent_before = beats(&net.a2d, 2).len();
    net.a.set_directory(dir_with(&[(
        "alpha",
        AgentState::Waiting,
        Some(T0_MS + 5_000),
    )]));
    net.advance(Duration::from_millis(1));
    assert_eq!(beats(&net.a2d, 2).len(), sent_before + 1);
    assert_eq!(state_of(&net.ev_d, "alpha"), Some(AgentState::Waiting));
    let early = beats(&net.a2d, 2).pop().unwrap();
    assert!(
        early.payload.get("base").is_some(),
        "a delta: {}",
        early.payload
    );

    // Flapping every 10 ms for 3 s: at most one beat per liveness_update (1 s), and the
    // last state is what the peer ends up with.
    let sent_before = beats(&net.a2d, 2).len();
    let mut s = AgentState::Busy;
    for i in 0..300 {
        s = if i % 2 == 0 {
            AgentState::Busy
        } else {
            AgentState::Idle
        };
        net.a
            .set_directory(dir_with(&[("alpha", s, Some(T0_MS + 6_000 + i))]));
        net.advance(Duration::from_millis(10));
    }
    let flap_beats = beats(&net.a2d, 2).len() - sent_before;
    assert!(
        (2..=3).contains(&flap_beats),
        "3 s of flapping cost {flap_beats} beats"
    );
    assert_eq!(net.a.stats().beats_sent, beats(&net.a2d, 2).len() as u64);
    net.advance(Duration::from_millis(1_000));
    assert_eq!(state_of(&net.ev_d, "alpha"), Some(s));
    // The receiver applied every one of them: none came faster than its floor.
    assert_eq!(net.d.stats().beats_over_rate, 0);
    assert!(closed_reason(&net.ev_d).is_none() && closed_reason(&net.ev_a).is_none());

    // Counts alone (no state change) wait for the regular beat.
    let sent_before = beats(&net.a2d, 2).len();
    let mut d = dir_with(&[("alpha", s, Some(T0_MS + 6_299))]);
    d.agents.get_mut("alpha").unwrap().queued = 7;
    net.a.set_directory(d);
    net.advance(Duration::from_secs(5));
    assert_eq!(beats(&net.a2d, 2).len(), sent_before);
    net.advance(INTERVAL);
    assert_eq!(beats(&net.a2d, 2).len(), sent_before + 1);
}

#[test]
fn without_liveness_agreed_states_are_neither_sent_nor_applied_and_nothing_goes_early() {
    let without: Vec<Feature> = Feature::ALL
        .into_iter()
        .filter(|f| *f != Feature::Liveness)
        .collect();
    for (dfeat, afeat) in [
        (&Feature::ALL[..], &without[..]),
        (&without[..], &Feature::ALL[..]),
    ] {
        let mut net = Net::v1(dfeat, afeat);
        net.a
            .set_directory(dir_with(&[("alpha", AgentState::Busy, Some(T0_MS))]));
        net.advance(Duration::from_secs(5));
        let (_, _, agreed, _, _) = Net::established(&net.ev_a).unwrap();
        assert!(!agreed.contains(&Feature::Liveness));
        let sent = beats(&net.a2d, 2).len();
        net.a
            .set_directory(dir_with(&[("alpha", AgentState::Gone, Some(T0_MS))]));
        net.advance(Duration::from_secs(5));
        assert_eq!(beats(&net.a2d, 2).len(), sent, "no early beat");
        net.advance(INTERVAL * 2);
        for m in beats(&net.a2d, 2) {
            let text = m.payload.to_string();
            assert!(
                !text.contains("state") && !text.contains("since_ms"),
                "{text}"
            );
        }
        assert_eq!(state_of(&net.ev_d, "alpha"), Some(AgentState::Unknown));
    }
}

#[test]
fn states_from_a_peer_that_did_not_agree_liveness_are_ignored() {
    let (_d, mut a, t0) = line_pair(&[Feature::UnknownOk, Feature::MutualAuth, Feature::HbDelta]);
    let beat = json!({"seq": 1, "version": "9", "agents": {
        "alpha": {"parked": 0, "queued": 0, "state": "busy", "since_ms": T0_MS}
    }});
    inject(&mut a, "heartbeat", "hb-1", beat, t0);
    let evs = events(&mut a);
    let d = last_directory(&evs).unwrap();
    assert_eq!(d.agents["alpha"], AgentEntry::default());
    assert_eq!(a.state(), SessionState::Established);
}

#[test]
fn odd_state_values_read_as_unknown_and_the_beat_still_applies() {
    let feats = [
        Feature::UnknownOk,
        Feature::MutualAuth,
        Feature::HbDelta,
        Feature::Liveness,
    ];
    let (_d, mut a, t0) = line_pair(&feats);
    let beat = json!({"seq": 1, "version": "9", "agents": {
        "a": {"parked": 0, "queued": 0, "state": "hibernating", "since_ms": T0_MS},
        "b": {"parked": 0, "queued": 0, "state": 42, "since_ms": "yesterday"},
        "c": {"parked": 0, "queued": 0, "state": null, "since_ms": -5},
        "d": {"parked": 0, "queued": 0, "state": {"nested": true}, "since_ms": 1.5},
        "e": {"parked": 1, "queued": 2, "state": "waiting", "since_ms": T0_MS}
    }});
    inject(&mut a, "heartbeat", "hb-1", beat, t0);
    let out = split_lines(&drain(&mut a));
    let ack = RelayMessage::decode_line(&out[0]).unwrap();
    assert_eq!(ack.payload, json!({"ack_id": "hb-1"}), "applied, no resync");
    let d = last_directory(&events(&mut a)).unwrap();
    for n in ["a", "b", "c", "d"] {
        assert_eq!(d.agents[n].state, AgentState::Unknown, "{n}");
    }
    assert_eq!(d.agents["b"].since_ms, None);
    assert_eq!(d.agents["c"].since_ms, None);
    assert_eq!(d.agents["d"].since_ms, None);
    assert_eq!(d.agents["e"].state, AgentState::Waiting);
    assert_eq!(d.agents["e"].since_ms, Some(T0_MS));
    // A delta's upsert is read the same way.
    let delta = json!({"seq": 2, "base": 1, "upsert": [
        {"name": "e", "parked": 0, "queued": 2, "state": "sleeping"},
        {"name": "a", "parked": 0, "queued": 0, "state": "gone", "since_ms": T0_MS + 9}
    ], "remove": []});
    inject(&mut a, "heartbeat", "hb-2", delta, t0 + INTERVAL);
    let d = last_directory(&events(&mut a)).unwrap();
    assert_eq!(d.agents["e"].state, AgentState::Unknown);
    assert_eq!(d.agents["a"].state, AgentState::Gone);
    assert_eq!(d.agents["a"].since_ms, Some(T0_MS + 9));
}

#[test]
fn under_liveness_beats_closer_than_half_the_update_floor_are_not_applied() {
    let feats = [
        Feature::UnknownOk,
        Feature::MutualAuth,
        Feature::HbDelta,
        Feature::Liveness,
    ];
    let (_d, mut a, t0) = line_pair(&feats);
    let beat = |n: u64, state: &str| {
        json!({"seq": n, "version": "9", "agents": {
            "x": {"parked": 0, "queued": 0, "state": state}
        }})
    };
    inject(&mut a, "heartbeat", "hb-1", beat(1, "busy"), t0);
    // 400 ms later: under half of liveness_update (1 s): counted, not applied.
    inject(
        &mut a,
        "heartbeat",
        "hb-2",
        beat(2, "idle"),
        t0 + Duration::from_millis(400),
    );
    assert_eq!(a.stats().beats_over_rate, 1);
    let evs = events(&mut a);
    assert_eq!(state_of(&evs, "x"), Some(AgentState::Busy));
    // 500 ms after the last applied one: applied (jitter never costs an update).
    inject(
        &mut a,
        "heartbeat",
        "hb-3",
        beat(3, "gone"),
        t0 + Duration::from_millis(500),
    );
    assert_eq!(a.stats().beats_over_rate, 1);
    assert_eq!(state_of(&events(&mut a), "x"), Some(AgentState::Gone));
}
