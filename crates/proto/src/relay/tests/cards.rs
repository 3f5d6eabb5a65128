//! Feature `agents` on the wire (docs/relay-protocol.md §5 "Agent cards"): heartbeats carry
//! the sender's agent cards only when both ends agreed the feature — in every full beat and
//! in a delta when the list changed — the receiver applies them within its caps, and a v0 peer
//! never sees the key. Driven on a virtual clock like the rest of `relay::tests`.

use super::*;
use crate::relay::heartbeat::DirectoryCaps;
use crate::relay::message::AgentCard;

fn card(name: &str, version: Option<&str>, acp: bool) -> AgentCard {
    AgentCard {
        name: name.into(),
        version: version.map(str::to_owned),
        acp,
        headless: true,
        credential: None,
    }
}

/// Every heartbeat in `bytes` (after `n_lines` handshake lines), as sent.
fn beats(bytes: &[u8], n_lines: usize) -> Vec<RelayMessage> {
    split_lines_then_frames(bytes, n_lines)
        .0
        .into_iter()
        .filter(|m| m.msg_type == MsgType::Heartbeat)
        .collect()
}

#[test]
fn with_agents_agreed_beats_carry_the_cards_and_the_peer_applies_them() {
    let mut net = Net::v1(&Feature::ALL, &Feature::ALL);
    let cards = vec![
        card("codex", Some("codex-cli 0.171.0"), false),
        card("gemini", Some("0.61.0"), true),
    ];
    net.a.set_agent_cards(cards.clone());
    net.pump();
    let (_, _, agreed, _, _) = Net::established(&net.ev_d).unwrap();
    assert!(agreed.contains(&Feature::Agents), "{agreed:?}");
    net.run_until(net.now + INTERVAL * 3);
    assert_eq!(net.d.peer_agent_cards(), &cards[..]);
    // Beat 1 is full and carries them; the deltas after it do not (nothing changed).
    let sent = beats(&net.a2d, 2);
    assert!(sent.len() >= 3, "{}", sent.len());
    let first = &sent[0];
    assert!(
        first.payload.get("agents").is_some(),
        "full: {:?}",
        first.payload
    );
    assert_eq!(
        first.payload["agent_cards"],
        json!([
            {"name": "codex", "version": "codex-cli 0.171.0", "acp": false, "headless": true},
            {"name": "gemini", "version": "0.61.0", "acp": true, "headless": true},
        ]),
        "the catalogue's shape, absent keys left out"
    );
    for m in &sent[1..] {
        assert!(m.payload.get("base").is_some(), "a delta: {:?}", m.payload);
        assert!(m.payload.get("agent_cards").is_none(), "{:?}", m.payload);
    }
    // A change rides the next delta, whole; the peer's view follows.
    let changed = vec![card("codex", Some("codex-cli 0.172.0"), true)];
    net.a.set_agent_cards(changed.clone());
    let before = beats(&net.a2d, 2).len();
    net.advance(INTERVAL);
    let sent = beats(&net.a2d, 2);
    let next = &sent[before];
    assert!(next.payload.get("base").is_some(), "{:?}", next.payload);
    assert_eq!(
        next.payload["agent_cards"][0]["version"],
        "codex-cli 0.172.0"
    );
    assert_eq!(net.d.peer_agent_cards(), &changed[..]);
    // An empty list is a change too: the peer learns the agents are gone.
    net.a.set_agent_cards(vec![]);
    net.advance(INTERVAL);
    assert!(net.d.peer_agent_cards().is_empty());
}

#[test]
fn without_agents_agreed_no_beat_carries_cards_and_none_are_applied() {
    let without: Vec<Feature> = Feature::ALL
        .into_iter()
        .filter(|f| *f != Feature::Agents)
        .collect();
    // Each side in turn is the one that does not offer it.
    for (dfeat, afeat) in [
        (&Feature::ALL[..], &without[..]),
        (&without[..], &Feature::ALL[..]),
    ] {
        let mut net = Net::v1(dfeat, afeat);
        net.a.set_agent_cards(vec![card("codex", None, true)]);
        net.d.set_agent_cards(vec![card("gemini", None, true)]);
        net.run_until(net.now + INTERVAL * 2);
        let (_, _, agreed, _, _) = Net::established(&net.ev_a).unwrap();
        assert!(!agreed.contains(&Feature::Agents));
        for m in beats(&net.a2d, 2).iter().chain(beats(&net.d2a, 1).iter()) {
            assert!(m.payload.get("agent_cards").is_none(), "{:?}", m.payload);
        }
        assert!(net.a.peer_agent_cards().is_empty());
        assert!(net.d.peer_agent_cards().is_empty());
    }
}

#[test]
fn cards_from_a_peer_that_did_not_agree_the_feature_are_ignored() {
    let (_d, mut a, t0) = line_pair(&[Feature::UnknownOk, Feature::MutualAuth, Feature::HbDelta]);
    let beat = json!({"seq": 1, "version": "9", "agents": {}, "agent_cards": [
        {"name": "codex", "acp": true, "headless": true}
    ]});
    inject(&mut a, "heartbeat", "hb-1", beat, t0);
    assert!(a.peer_agent_cards().is_empty());
    assert_eq!(a.state(), SessionState::Established);
}

#[test]
fn a_peers_cards_past_the_caps_are_not_applied_and_logged_once() {
    let feats = [
        Feature::UnknownOk,
        Feature::MutualAuth,
        Feature::HbDelta,
        Feature::Agents,
    ];
    let (_d, mut a, t0) = line_pair(&feats);
    a.set_directory_caps(DirectoryCaps {
        max_agents: 2,
        max_bytes: 1024,
    });
    let step = INTERVAL;
    let beat = |n: u64, cards: Value| json!({"seq": n, "version": "9", "agents": {}, "agent_cards": cards});
    inject(
        &mut a,
        "heartbeat",
        "hb-1",
        beat(
            1,
            json!([{"name": "codex", "acp": true, "headless": false}]),
        ),
        t0,
    );
    assert_eq!(a.peer_agent_cards().len(), 1);
    let three = json!([
        {"name": "a", "acp": true, "headless": false},
        {"name": "b", "acp": true, "headless": false},
        {"name": "c", "acp": true, "headless": false},
    ]);
    let mut evs = Vec::new();
    for n in 2..5u64 {
        inject(
            &mut a,
            "heartbeat",
            &format!("hb-{n}"),
            beat(n, three.clone()),
            t0 + step * (n as u32),
        );
        evs.extend(events(&mut a));
    }
    assert_eq!(
        a.peer_agent_cards()[0].name,
        "codex",
        "the last list that fit stays"
    );
    let lines: Vec<&String> = evs
        .iter()
        .filter_map(|e| match e {
            SessionEvent::Log(l) if l.contains("agent cards") => Some(l),
            _ => None,
        })
        .collect();
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(a.state(), SessionState::Established);
    // A card of the wrong shape makes the beat's directory unusable (a resync), never a close.
    inject(
        &mut a,
        "heartbeat",
        "hb-9",
        beat(9, json!([{"name": 5}])),
        t0 + step * 9,
    );
    assert_eq!(a.state(), SessionState::Established);
}

#[test]
fn a_v0_peer_never_sees_the_cards() {
    let t0 = crate::kernel::deadline::test_origin();
    let mut a = Session::acceptor(
        cfg("hubB", &Feature::ALL, t0),
        keys_for("old", auth_ok(true)),
        [0x22; 32],
        2,
        t0,
    );
    a.set_agent_cards(vec![card("codex", Some("1"), true)]);
    let mut v0 = V0Peer {
        id: "old",
        key: KEY,
        counter: 0,
    };
    let nonce = nonce_of_challenge(&drain(&mut a));
    a.handle_input(&v0.handshake(&nonce), t0);
    let mut to_v0 = drain(&mut a);
    let mut now = t0;
    for i in 0..5 {
        now = t0 + INTERVAL * i;
        a.handle_input(
            &v0.heartbeat(T0_MS + (INTERVAL * i).as_millis() as i64),
            now,
        );
        a.handle_timeout(now);
        to_v0.extend(drain(&mut a));
    }
    assert_eq!(a.state(), SessionState::Established, "at {now:?}");
    let lines = split_lines(&to_v0);
    let mut beats = 0;
    for l in &lines {
        let v = v0_64_reader_accepts(l).unwrap();
        if v["msg_type"] == "heartbeat" {
            beats += 1;
            assert_eq!(
                v["payload"].as_object().unwrap().keys().collect::<Vec<_>>(),
                ["sessions", "timestamp", "worker_id"],
                "{v}"
            );
        }
        assert!(!String::from_utf8_lossy(l).contains("agent_cards"));
    }
    assert!(beats >= 5, "{beats}");
}
