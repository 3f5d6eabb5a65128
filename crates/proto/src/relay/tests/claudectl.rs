//! claudectl's dialect on the wire (docs/relay-protocol.md §2.1, §4, §5 "claudectl's
//! heartbeat"): a double speaking claudectl 0.92.4's exact handshake, acks, frames and beats
//! (shared/design/relay-compat-0.92.md §1–§4) against our session as acceptor and as dialer,
//! claudectl 0.64's ack beside it, the seed's own v1 probe, and the attacks on what the dialect
//! admits. Driven on a virtual clock like the rest of `relay::tests`.

use super::*;
use crate::relay::frame::{decode_body_as, encode_message_as, BodyForm, COMPRESS_MIN_BYTES};
use crate::relay::message::AgentCard;
use crate::relay::worker::Headroom;

/// What 0.92.4's dialers offer, sorted as it sends them.
const CTL_FEATURES: [&str; 5] = [
    "frame-bin",
    "headroom",
    "lease-fleet",
    "supervised-task",
    "unknown-ok",
];

fn ctl_msg(msg_type: MsgType, payload: Value) -> RelayMessage {
    RelayMessage::new("msg_1700000000000_0", msg_type, "ctl", T0_MS, payload)
}

/// 0.92.4's handshake: the nonce proof, its version, `proto` 1 and its features.
fn ctl_handshake(nonce: &str, key: &[u8; 32], transient: bool) -> Vec<u8> {
    let mut p = json!({
        "proof": auth::proof(key, nonce),
        "version": "0.92.4",
        "proto": 1,
        "features": CTL_FEATURES,
    });
    if transient {
        p["transient"] = json!(true);
    }
    ctl_msg(MsgType::Handshake, p).encode_line()
}

/// A frame as claudectl makes one: JSON alone, compressed at 1 KiB when smaller.
fn ctl_frame(msg_type: MsgType, payload: Value) -> Vec<u8> {
    encode_message_as(&ctl_msg(msg_type, payload), true, BodyForm::Json).unwrap()
}

/// The lines (handshake) at the start of `bytes`, then every frame after them: (flags,
/// message) per frame, bodies read as claudectl reads them.
fn lines_then_ctl_frames(
    bytes: &[u8],
    n_lines: usize,
) -> (Vec<RelayMessage>, Vec<(u8, RelayMessage)>) {
    let mut lines = Vec::new();
    let mut pos = 0;
    for _ in 0..n_lines {
        let end = pos + bytes[pos..].iter().position(|&b| b == b'\n').unwrap();
        lines.push(RelayMessage::decode_line(&bytes[pos..end]).unwrap());
        pos = end + 1;
    }
    let mut frames = Vec::new();
    while pos < bytes.len() {
        let (f, n) = decode_frame(&bytes[pos..]).unwrap().expect("a whole frame");
        let msg = decode_body_as(&f.body, BodyForm::Json).unwrap();
        frames.push((f.flags, msg));
        pos += n;
    }
    (lines, frames)
}

fn established_dialect(evs: &[SessionEvent]) -> Option<(u32, Vec<Feature>, Dialect, bool)> {
    evs.iter().find_map(|e| match e {
        SessionEvent::Established {
            proto,
            features,
            dialect,
            transient,
            ..
        } => Some((*proto, features.clone(), *dialect, *transient)),
        _ => None,
    })
}

fn cards() -> Vec<AgentCard> {
    vec![AgentCard {
        name: "claude".into(),
        version: Some("2.1.332".into()),
        acp: true,
        headless: true,
        credential: None,
    }]
}

/// claudectl 0.92.4 dialled us (`relay serve`'s lasting dial or a one-shot): its handshake
/// links in its dialect, the ack agrees what it offered that we do there, every byte after is
/// a frame, ours compress by its rule, and its beats become the peer's directory.
#[test]
fn claudectl_092_dialling_us_links_in_its_dialect_with_frames() {
    let t0 = crate::kernel::deadline::test_origin();
    let mut a = Session::acceptor(
        cfg("hub", &Feature::ALL, t0),
        keys_for("ctl", auth_ok(true)),
        [0x22; 32],
        2,
        t0,
    );
    let nonce = nonce_of_challenge(&drain(&mut a));
    a.handle_input(&ctl_handshake(&nonce, &KEY, false), t0);
    let ack_bytes = drain(&mut a);
    let ack = RelayMessage::decode_line(&split_lines(&ack_bytes)[0]).unwrap();
    // The keys 0.92 reads: an ok status, an integer proto, the agreed features.
    assert_eq!(ack.payload["status"], "ok");
    assert_eq!(ack.payload["proto"], 1);
    assert_eq!(
        ack.payload["features"],
        json!(["unknown-ok", "frame-bin", "headroom"])
    );
    assert!(
        ack.payload.get("proof").is_none(),
        "no acceptor proof in this dialect"
    );
    let (proto, features, dialect, transient) = established_dialect(&events(&mut a)).unwrap();
    assert_eq!((proto, dialect, transient), (1, Dialect::Claudectl, false));
    assert_eq!(
        features,
        [Feature::UnknownOk, Feature::FrameBin, Feature::Headroom]
    );
    assert!(a.framed());

    // Our first beat: a frame, carrying claudectl's `capabilities` and our `headroom`.
    a.set_agent_cards(cards());
    a.set_headroom(Some(Headroom {
        mem_free_mb: Some(2048),
        load_per_core: Some(0.5),
        disk_free_mb: Some(9000),
        running_tasks: 1,
        max_tasks: Some(4),
        tags: vec!["gpu".into()],
    }));
    a.handle_timeout(t0);
    let (_, frames) = lines_then_ctl_frames(&drain(&mut a), 0);
    let beat = &frames[0].1;
    assert_eq!(beat.msg_type, MsgType::Heartbeat);
    assert_eq!(beat.payload["worker_id"], "hub");
    assert_eq!(
        beat.payload["capabilities"]["claudectl_version"],
        "agent-hub 0.1.0"
    );
    assert_eq!(
        beat.payload["capabilities"]["tools"]["claude"],
        json!({"state": "present", "version": "2.1.332"})
    );
    assert_eq!(beat.payload["headroom"]["max_tasks"], 4);
    assert_eq!(beat.payload["headroom"]["tags"], json!(["gpu"]));

    // LZ4 comes with frame-bin here (no `lz4` was agreed): 1 KiB and more compresses, less
    // does not; the body is the JSON alone.
    let small = a.message(
        MsgType::TaskStatus,
        json!({"task_id": "t", "state": "running", "stats": {"tokens_used": 0, "cost_usd": 0.0, "context_pct": 0, "files_modified": []}}),
        t0,
    );
    a.send(small).unwrap();
    let big = a.message(
        MsgType::TaskHandoff,
        json!({"task_id": "t", "state": "completed", "summary": "x".repeat(3000), "artifacts": [],
               "git_ref": null, "total_cost_usd": 0.0, "total_tokens": 0}),
        t0,
    );
    a.send(big).unwrap();
    let (_, frames) = lines_then_ctl_frames(&drain(&mut a), 0);
    assert_eq!(frames[0].0, 0, "under 1 KiB: raw");
    assert_eq!(frames[1].0, FLAG_LZ4, "3 KiB of JSON: compressed");
    assert_eq!(frames[1].1.payload["summary"].as_str().unwrap().len(), 3000);

    // claudectl's full beat, compressed as it would be: its sessions are the directory, the
    // rest what its machine said.
    let sessions: Vec<Value> = (0..30)
        .map(|i| json!({"pid": 100 + i, "session_id": format!("sess-{i:02}"), "project": "p", "status": "Processing"}))
        .collect();
    let beat = ctl_frame(
        MsgType::Heartbeat,
        json!({"worker_id": "ctl", "timestamp": T0_MS, "sessions": sessions,
               "capabilities": {"claudectl_version": "0.92.4", "os": "linux", "arch": "x86_64",
                                "tools": {"claude": {"state": "present"}}},
               "listen_addrs": ["10.0.0.7:9847"],
               "headroom": {"running_tasks": 0, "max_tasks": 4}}),
    );
    assert_eq!(beat[4], FLAG_LZ4, "the double compresses as claudectl does");
    a.handle_input(&beat, t0 + INTERVAL);
    let evs = events(&mut a);
    let (directory, worker, room) = evs
        .iter()
        .find_map(|e| match e {
            SessionEvent::Heartbeat {
                directory,
                worker,
                room,
            } => Some((directory, worker, room)),
            _ => None,
        })
        .expect("a heartbeat event");
    // Its room reaches placement (issue 38 design §4) as its machine's part says it.
    let room = room.as_ref().expect("the link agreed headroom");
    assert_eq!((room.running_tasks, room.max_tasks), (0, Some(4)));
    assert_eq!(directory.agents.len(), 30);
    assert_eq!(
        directory.agents["sess-07"].state,
        crate::relay::message::AgentState::Busy
    );
    let w = worker.as_ref().expect("what its machine said");
    assert_eq!(w.listen_addrs, ["10.0.0.7:9847"]);
    assert_eq!(w.headroom.as_ref().unwrap().max_tasks, Some(4));
    assert!(closed_reason(&evs).is_none());
}

/// 0.92's one-shots say `transient`; the link is reported as such (never the lasting link,
/// `relay::links`), in its dialect.
#[test]
fn a_092_one_shot_is_transient() {
    let t0 = crate::kernel::deadline::test_origin();
    let mut a = Session::acceptor(
        cfg("hub", &Feature::ALL, t0),
        keys_for("ctl", auth_ok(true)),
        [0x22; 32],
        2,
        t0,
    );
    let nonce = nonce_of_challenge(&drain(&mut a));
    a.handle_input(&ctl_handshake(&nonce, &KEY, true), t0);
    let (proto, _, dialect, transient) = established_dialect(&events(&mut a)).unwrap();
    assert_eq!((proto, dialect, transient), (1, Dialect::Claudectl, true));
    // Its delegate_task arrives framed, even a large one compressed.
    let d = ctl_frame(
        MsgType::DelegateTask,
        json!({"task_id": "task_1_0", "prompt": "p".repeat(2000), "cwd": null,
               "context": {"dependency_graph": {"blocks": [], "blocked_by": []}}}),
    );
    assert_eq!(d[4], FLAG_LZ4);
    a.handle_input(&d, t0);
    let evs = events(&mut a);
    assert!(
        evs.iter()
            .any(|e| matches!(e, SessionEvent::Message(m) if m.msg_type == MsgType::DelegateTask)),
        "{evs:?}"
    );
}

/// A peer whose entry does not allow claudectl's dialect is refused exactly as before: the
/// nonce proof, with `proto` 1 or without, gets `denied` and nothing signed comes back.
#[test]
fn without_allow_claudectl_its_v1_and_v0_are_denied() {
    let t0 = crate::kernel::deadline::test_origin();
    for proto in [true, false] {
        let mut a = Session::acceptor(
            cfg("hub", &Feature::ALL, t0),
            keys_for("ctl", auth_ok(false)),
            [0x22; 32],
            2,
            t0,
        );
        let nonce = nonce_of_challenge(&drain(&mut a));
        let hs = if proto {
            ctl_handshake(&nonce, &KEY, false)
        } else {
            V0Peer {
                id: "ctl",
                key: KEY,
                counter: 0,
            }
            .handshake(&nonce)
        };
        a.handle_input(&hs, t0);
        let ack = RelayMessage::decode_line(&split_lines(&drain(&mut a))[0]).unwrap();
        assert_eq!(ack.payload, json!({"status": "denied"}), "proto {proto}");
        let evs = events(&mut a);
        assert!(
            closed_reason(&evs)
                .unwrap()
                .contains("allow_claudectl is off"),
            "{evs:?}"
        );
        assert!(established_dialect(&evs).is_none());
    }
    // The wrong key is a wrong proof, whatever the entry allows.
    let mut a = Session::acceptor(
        cfg("hub", &Feature::ALL, t0),
        keys_for("ctl", auth_ok(true)),
        [0x22; 32],
        2,
        t0,
    );
    let nonce = nonce_of_challenge(&drain(&mut a));
    a.handle_input(&ctl_handshake(&nonce, &OTHER_KEY, false), t0);
    assert!(closed_reason(&events(&mut a))
        .unwrap()
        .contains("wrong proof"));
}

/// We dial claudectl: an unmarked challenge gets claudectl's v1 handshake (nonce proof,
/// `proto` 1, no hardened feature, `headroom`); 0.92's ack makes claudectl's v1 with frames,
/// 0.64's (no `proto`) a v0 link whose bytes after the ack are v0 lines.
#[test]
fn we_dial_claudectl_as_v1_and_064_stays_v0() {
    let t0 = crate::kernel::deadline::test_origin();
    for release in ["0.92.4", "0.64.0"] {
        let mut d = Session::dialer(
            cfg("hub", &Feature::ALL, t0),
            "ctl",
            auth_ok(true),
            [0x11; 32],
            1,
            t0,
        );
        let nonce = "cd".repeat(32);
        let mut v0 = V0Peer {
            id: "ctl",
            key: KEY,
            counter: 0,
        };
        d.handle_input(&v0.challenge(&nonce), t0);
        let hs = RelayMessage::decode_line(&split_lines(&drain(&mut d))[0]).unwrap();
        assert!(auth::verify(
            &KEY,
            &nonce,
            hs.payload["proof"].as_str().unwrap()
        ));
        assert_eq!(hs.payload["proto"], 1);
        assert!(hs.payload.get("nonce").is_none());
        let offered: Vec<&str> = hs.payload["features"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f.as_str().unwrap())
            .collect();
        assert!(
            offered.contains(&"frame-bin") && offered.contains(&"headroom"),
            "{offered:?}"
        );
        assert!(
            !offered.contains(&"mutual-auth")
                && !offered.contains(&"frame-mac")
                && !offered.contains(&"task-approvals"),
            "{offered:?}"
        );
        if release == "0.92.4" {
            // 0.92's acceptor: proto min(theirs, 1) and the sorted intersection.
            let ack = ctl_msg(
                MsgType::HandshakeAck,
                json!({"status": "ok", "proto": 1, "features": ["frame-bin", "headroom", "unknown-ok"]}),
            );
            // Its first beat may follow in the same read: already a frame.
            let mut bytes = ack.encode_line();
            bytes.extend(ctl_frame(
                MsgType::Heartbeat,
                json!({"worker_id": "ctl", "timestamp": T0_MS, "sessions": []}),
            ));
            d.handle_input(&bytes, t0);
            let evs = events(&mut d);
            let (proto, features, dialect, _) = established_dialect(&evs).unwrap();
            assert_eq!((proto, dialect), (1, Dialect::Claudectl));
            assert_eq!(
                features,
                [Feature::UnknownOk, Feature::FrameBin, Feature::Headroom]
            );
            assert!(
                evs.iter()
                    .any(|e| matches!(e, SessionEvent::Heartbeat { .. })),
                "{evs:?}"
            );
            d.handle_timeout(t0);
            let (_, frames) = lines_then_ctl_frames(&drain(&mut d), 0);
            assert_eq!(frames[0].1.msg_type, MsgType::Heartbeat);
        } else {
            d.handle_input(&v0.ack("ok"), t0);
            let (proto, features, dialect, _) = established_dialect(&events(&mut d)).unwrap();
            assert_eq!((proto, features, dialect), (0, vec![], Dialect::Claudectl));
            d.handle_timeout(t0);
            let out = drain(&mut d);
            for line in split_lines(&out) {
                let v = v0_64_reader_accepts(&line).unwrap();
                // v0's beat: no capabilities, no headroom, no directory.
                assert!(v["payload"].get("capabilities").is_none(), "{v}");
            }
        }
        assert!(closed_reason(&events(&mut d)).is_none());
    }
}

/// A handshake in claudectl's dialect (a nonce proof) that offers our hardened features,
/// `task-approvals` among them, gets none of them: the dialect has no transcript to key them,
/// so no answer to a delegated task's request ever crosses such a link (issue 37 design §7).
#[test]
fn a_claudectl_dialect_handshake_never_gets_task_approvals() {
    let t0 = crate::kernel::deadline::test_origin();
    let mut a = Session::acceptor(
        cfg("hub", &Feature::ALL, t0),
        keys_for("ctl", auth_ok(true)),
        [0x22; 32],
        2,
        t0,
    );
    let nonce = nonce_of_challenge(&drain(&mut a));
    let hs = ctl_msg(
        MsgType::Handshake,
        json!({"proof": auth::proof(&KEY, &nonce), "version": "0.92.4", "proto": 1,
               "features": ["unknown-ok", "frame-bin", "mutual-auth", "frame-mac", "task-approvals"]}),
    );
    a.handle_input(&hs.encode_line(), t0);
    let ack = RelayMessage::decode_line(&split_lines(&drain(&mut a))[0]).unwrap();
    assert_eq!(ack.payload["features"], json!(["unknown-ok", "frame-bin"]));
    let (_, features, dialect, _) = established_dialect(&events(&mut a)).unwrap();
    assert_eq!(dialect, Dialect::Claudectl);
    assert!(!features.contains(&Feature::TaskApprovals));
    let m = a.message(
        MsgType::TaskRequestClosed,
        json!({"task_id": "t", "request": "r", "state": "answered"}),
        t0,
    );
    assert!(a.send(m).is_err(), "never sent on a claudectl link");
}

/// What a claudectl-dialect ack may not do: agree a feature we did not offer (our hardened
/// ones among them), or speak a proto we do not; without `allow_claudectl` nothing is signed.
#[test]
fn a_claudectl_ack_is_held_to_our_offer() {
    let t0 = crate::kernel::deadline::test_origin();
    let cases: [(Value, &str); 4] = [
        (
            json!({"status": "ok", "proto": 1, "features": ["frame-bin", "mutual-auth"]}),
            "did not offer",
        ),
        (
            json!({"status": "ok", "proto": 1, "features": ["frame-bin", "task-approvals"]}),
            "did not offer",
        ),
        (
            json!({"status": "ok", "proto": 1, "features": ["frame-mac"]}),
            "did not offer",
        ),
        (
            json!({"status": "ok", "proto": 2, "features": []}),
            "answered proto 2",
        ),
    ];
    for (payload, why) in cases {
        let mut d = Session::dialer(
            cfg("hub", &Feature::ALL, t0),
            "ctl",
            auth_ok(true),
            [0x11; 32],
            1,
            t0,
        );
        let mut v0 = V0Peer {
            id: "ctl",
            key: KEY,
            counter: 0,
        };
        d.handle_input(&v0.challenge(&"cd".repeat(32)), t0);
        drain(&mut d);
        d.handle_input(
            &ctl_msg(MsgType::HandshakeAck, payload.clone()).encode_line(),
            t0,
        );
        let evs = events(&mut d);
        assert!(established_dialect(&evs).is_none(), "{payload}");
        assert!(
            closed_reason(&evs).unwrap().contains(why),
            "{payload}: {evs:?}"
        );
    }
    let mut d = Session::dialer(
        cfg("hub", &Feature::ALL, t0),
        "ctl",
        auth_ok(false),
        [0x11; 32],
        1,
        t0,
    );
    let mut v0 = V0Peer {
        id: "ctl",
        key: KEY,
        counter: 0,
    };
    d.handle_input(&v0.challenge(&"cd".repeat(32)), t0);
    assert!(
        drain(&mut d).is_empty(),
        "nothing signed for a peer not allowed the dialect"
    );
    assert!(closed_reason(&events(&mut d))
        .unwrap()
        .contains("allow_claudectl is off"));
}

/// The seed's own v1 (000 seed §6.2: nonce proof, `proto` 1, `unknown-ok`, `frame-bin`, `lz4`,
/// `hb-delta`) links both ways with an entry that allows the dialect, agreeing all four, and
/// is denied without it.
#[test]
fn the_seeds_v1_probe_links_both_ways_when_allowed() {
    let t0 = crate::kernel::deadline::test_origin();
    let seed = ["unknown-ok", "frame-bin", "lz4", "hb-delta"];
    let want = vec![
        Feature::UnknownOk,
        Feature::FrameBin,
        Feature::Lz4,
        Feature::HbDelta,
    ];
    for allow in [true, false] {
        // The probe dials us.
        let mut a = Session::acceptor(
            cfg("hub", &Feature::ALL, t0),
            keys_for("probe", auth_ok(allow)),
            [0x22; 32],
            2,
            t0,
        );
        let nonce = nonce_of_challenge(&drain(&mut a));
        let hs = RelayMessage::new(
            "p1",
            MsgType::Handshake,
            "probe",
            T0_MS,
            json!({"proof": auth::proof(&KEY, &nonce), "version": "seed-v1", "proto": 1, "features": seed}),
        );
        a.handle_input(&hs.encode_line(), t0);
        let evs = events(&mut a);
        if allow {
            assert_eq!(established_dialect(&evs).map(|e| e.1), Some(want.clone()));
        } else {
            assert!(established_dialect(&evs).is_none());
            assert!(closed_reason(&evs)
                .unwrap()
                .contains("allow_claudectl is off"));
        }
        // We dial the probe: it answers our handshake with its own agreed set.
        let mut d = Session::dialer(
            cfg("hub", &Feature::ALL, t0),
            "probe",
            auth_ok(allow),
            [0x11; 32],
            1,
            t0,
        );
        let mut p = V0Peer {
            id: "probe",
            key: KEY,
            counter: 0,
        };
        d.handle_input(&p.challenge(&"ab".repeat(32)), t0);
        let out = drain(&mut d);
        if !allow {
            assert!(out.is_empty());
            continue;
        }
        let ack = RelayMessage::new(
            "p2",
            MsgType::HandshakeAck,
            "probe",
            T0_MS,
            json!({"status": "ok", "proto": 1, "features": seed}),
        );
        d.handle_input(&ack.encode_line(), t0);
        assert_eq!(
            established_dialect(&events(&mut d)).map(|e| e.1),
            Some(want.clone())
        );
    }
}

/// Frames on a claudectl link are refused as claudectl refuses them: a compressed frame
/// declaring under 1 KiB (its sender never makes one) ends the link.
#[test]
fn a_compressed_frame_declaring_under_1024_ends_a_claudectl_link() {
    let t0 = crate::kernel::deadline::test_origin();
    let mut a = Session::acceptor(
        cfg("hub", &Feature::ALL, t0),
        keys_for("ctl", auth_ok(true)),
        [0x22; 32],
        2,
        t0,
    );
    let nonce = nonce_of_challenge(&drain(&mut a));
    a.handle_input(&ctl_handshake(&nonce, &KEY, false), t0);
    let _ = events(&mut a);
    let json = ctl_msg(MsgType::Heartbeat, json!({})).encode_json();
    assert!(json.len() < COMPRESS_MIN_BYTES);
    let block = lz4_flex::block::compress_prepend_size(&json);
    let mut frame = ((block.len() + 1) as u32).to_be_bytes().to_vec();
    frame.push(FLAG_LZ4);
    frame.extend_from_slice(&block);
    a.handle_input(&frame, t0);
    let evs = events(&mut a);
    assert!(
        closed_reason(&evs).unwrap().contains("under the 1024"),
        "{evs:?}"
    );
    assert!(!evs
        .iter()
        .any(|e| matches!(e, SessionEvent::Heartbeat { .. })));
}

/// A `session_transfer` keeps base64 `data` in claudectl's frames (its `transfer.rs`), both
/// ways; the application still gets the chunk raw.
#[test]
fn session_transfer_keeps_base64_in_claudectl_frames() {
    let t0 = crate::kernel::deadline::test_origin();
    let mut a = Session::acceptor(
        cfg("hub", &Feature::ALL, t0),
        keys_for("ctl", auth_ok(true)),
        [0x22; 32],
        2,
        t0,
    );
    let nonce = nonce_of_challenge(&drain(&mut a));
    a.handle_input(&ctl_handshake(&nonce, &KEY, false), t0);
    drain(&mut a);
    let _ = events(&mut a);
    let chunk = vec![7u8; 3000];
    let payload = json!({"session_id": "s", "cwd": "/w", "seq": 0, "total": 1,
                         "digest": "00".repeat(32), "data": crate::relay::base64::encode(&chunk)});
    // Theirs, in.
    a.handle_input(&ctl_frame(MsgType::SessionTransfer, payload.clone()), t0);
    let got = events(&mut a)
        .into_iter()
        .find_map(|e| match e {
            SessionEvent::Message(m) if m.msg_type == MsgType::SessionTransfer => Some(m),
            _ => None,
        })
        .expect("delivered");
    assert_eq!(got.chunk().map(|c| c.to_vec()), Some(chunk.clone()));
    // Ours, out: the JSON with `data`, no `data_len`, nothing after it.
    let m = a.message(MsgType::SessionTransfer, payload, t0);
    a.send(m).unwrap();
    let (_, frames) = lines_then_ctl_frames(&drain(&mut a), 0);
    let sent = &frames[0].1;
    assert!(sent.payload.get("data_len").is_none());
    assert_eq!(
        crate::relay::base64::decode(sent.payload["data"].as_str().unwrap()).unwrap(),
        chunk
    );
}

/// claudectl 0.92 stops beating a link it declared dead without closing it: our own timer
/// closes it at three of our intervals.
#[test]
fn a_silent_claudectl_link_is_closed_on_our_timer() {
    let t0 = crate::kernel::deadline::test_origin();
    let mut a = Session::acceptor(
        cfg("hub", &Feature::ALL, t0),
        keys_for("ctl", auth_ok(true)),
        [0x22; 32],
        2,
        t0,
    );
    let nonce = nonce_of_challenge(&drain(&mut a));
    a.handle_input(&ctl_handshake(&nonce, &KEY, false), t0);
    let _ = events(&mut a);
    a.handle_input(
        &ctl_frame(MsgType::Heartbeat, json!({"sessions": []})),
        t0 + INTERVAL,
    );
    let last = t0 + INTERVAL;
    a.handle_timeout(last + INTERVAL * 3 - Duration::from_millis(1));
    assert!(closed_reason(&events(&mut a)).is_none());
    assert_eq!(a.poll_timeout(), Some(last + INTERVAL * 3));
    a.handle_timeout(last + INTERVAL * 3);
    assert!(closed_reason(&events(&mut a))
        .unwrap()
        .contains("no heartbeat from ctl"));
}
