//! claudectl's relay dialect against the real hub (docs/relay-protocol.md §2.1): a probe that
//! speaks the 000 seed's v1 exactly as claudectl 0.90+ does (the proof over the nonce alone,
//! `proto` 1, `unknown-ok`, `frame-bin`, `lz4`, `hb-delta`) dials the hub and is dialled by
//! it, links with a peer entry that allows the dialect (frames from the byte after the ack)
//! and is refused without it: denied when it dials, nothing signed when the hub dials it.

use crate::harness::*;
use crate::relay::*;
use agent_hub_proto::relay::frame::{decode_body_as, decode_frame, BodyForm};
use serde_json::{json, Value};
use std::io::Read;
use std::net::TcpListener;
use std::time::Instant;

const SEED_FEATURES: [&str; 4] = ["unknown-ok", "frame-bin", "lz4", "hb-delta"];
/// The hubs' heartbeat here: the probe never beats, so the link must outlive the checks (a peer
/// is dead after 3 silent intervals).
const SLOW_HB_MS: u64 = 10_000;

/// Reads frames from `c` until one is a `heartbeat`; returns its JSON.
fn frame_heartbeat(c: &mut V0Conn) -> Value {
    let until = Instant::now() + DEADLINE;
    let mut buf = Vec::new();
    loop {
        while let Ok(Some((frame, n))) = decode_frame(&buf) {
            buf.drain(..n);
            let msg = decode_body_as(&frame.body, BodyForm::Json).expect("a framed message");
            if msg.msg_type.as_str() == "heartbeat" {
                return serde_json::from_slice(&msg.encode_json()).unwrap();
            }
        }
        assert!(
            decode_frame(&buf).is_ok(),
            "not a frame after the ack: {:?}",
            String::from_utf8_lossy(&buf)
        );
        assert!(
            Instant::now() < until,
            "no framed heartbeat within {DEADLINE:?}"
        );
        c.stream
            .set_read_timeout(Some(std::time::Duration::from_millis(100)))
            .unwrap();
        let mut chunk = [0u8; 16 * 1024];
        match c.stream.read(&mut chunk) {
            Ok(0) => panic!("the hub closed the link"),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(_) => {}
        }
    }
}

fn probe_hub(allow: bool, key: &str) -> RelayHub {
    let mut spec = RelaySpec::new("east", "127.0.0.2:0").peer("probe", None, key, allow);
    spec.features = vec!["unknown-ok", "mutual-auth", "frame-bin", "lz4", "hb-delta"];
    // The probe does not beat: a slow interval keeps the link up while the status file is read.
    spec.heartbeat_ms = SLOW_HB_MS;
    RelayHub::start(Setup::new(), spec)
}

#[test]
fn a_seed_v1_probe_dialling_the_hub_links_with_the_dialect_allowed_and_is_denied_without() {
    let key = key_hex(0x71);
    for allow in [true, false] {
        let east = probe_hub(allow, &key);
        let mut c = V0Conn::connect(east.relay_addr);
        let ch = c.expect_line("challenge");
        let nonce = ch["payload"]["nonce"].as_str().unwrap().to_owned();
        c.send(
            "probe",
            "handshake",
            json!({"proof": proof(&key, &nonce), "version": "seed-v1", "proto": 1, "features": SEED_FEATURES}),
        );
        let ack = c.expect_line("handshake_ack");
        if !allow {
            assert_eq!(ack["payload"], json!({"status": "denied"}), "{ack}");
            east.hub.wait_service_log("the denial", |l| {
                l.contains("speaks claudectl's relay v1") && l.contains("allow_claudectl is off")
            });
            continue;
        }
        assert_eq!(ack["payload"]["status"], "ok", "{ack}");
        assert_eq!(ack["payload"]["proto"], 1, "{ack}");
        assert_eq!(ack["payload"]["features"], json!(SEED_FEATURES), "{ack}");
        assert!(ack["payload"].get("proof").is_none(), "{ack}");
        // Frames from the byte after the ack: the hub's first beat is one.
        let beat = frame_heartbeat(&mut c);
        assert_eq!(beat["from_peer"], "east", "{beat}");
        let p = east.wait_up("probe");
        assert_eq!(p["proto"], 1, "{p}");
        assert_eq!(p["dialect"], "claudectl", "{p}");
        assert_eq!(p["features"], json!(SEED_FEATURES), "{p}");
    }
}

#[test]
fn the_hub_dials_a_seed_v1_probe_in_claudectls_dialect_only_when_allowed() {
    let key = key_hex(0x72);
    for allow in [true, false] {
        let listener = TcpListener::bind("127.0.0.3:0").unwrap();
        let mut spec = RelaySpec::new("east", "127.0.0.2:0").peer(
            "probe",
            Some(listener.local_addr().unwrap()),
            &key,
            allow,
        );
        spec.features = vec!["unknown-ok", "mutual-auth", "frame-bin", "lz4", "hb-delta"];
        spec.heartbeat_ms = SLOW_HB_MS;
        let east = RelayHub::start(Setup::new(), spec);
        let mut c = v0_accept(&listener);
        let nonce = fresh_nonce();
        // An unmarked challenge, as claudectl's and the seed's acceptors send.
        c.send("", "challenge", json!({ "nonce": nonce }));
        if !allow {
            match c.next(Instant::now() + DEADLINE) {
                Got::Eof => {}
                Got::Line(l) => panic!(
                    "signed for a peer not allowed the dialect: {}",
                    String::from_utf8_lossy(&l)
                ),
                Got::Timeout => panic!("the hub neither closed nor spoke"),
            }
            east.hub.wait_service_log("the refusal to sign", |l| {
                l.contains("allow_claudectl is off for it: nothing signed")
            });
            continue;
        }
        let hs = c.expect_line("the hub's handshake");
        let p = &hs["payload"];
        assert_eq!(
            p["proof"].as_str(),
            Some(proof(&key, &nonce).as_str()),
            "{hs}"
        );
        assert_eq!(p["proto"], 1, "{hs}");
        assert!(p.get("nonce").is_none(), "{hs}");
        let offered: Vec<&str> = p["features"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f.as_str().unwrap())
            .collect();
        for f in SEED_FEATURES {
            assert!(offered.contains(&f), "{f} not offered: {hs}");
        }
        assert!(
            !offered.contains(&"mutual-auth") && !offered.contains(&"frame-mac"),
            "{hs}"
        );
        c.send(
            "probe",
            "handshake_ack",
            json!({"status": "ok", "proto": 1, "features": SEED_FEATURES}),
        );
        let beat = frame_heartbeat(&mut c);
        assert_eq!(beat["from_peer"], "east", "{beat}");
        let p = east.wait_up("probe");
        assert_eq!(p["proto"], 1, "{p}");
        assert_eq!(p["dialect"], "claudectl", "{p}");
        assert_eq!(p["features"], json!(SEED_FEATURES), "{p}");
    }
}

/// A frame as claudectl makes one (JSON alone; compressed from 1 KiB when smaller).
fn ctl_frame(msg_type: &str, payload: Value) -> Vec<u8> {
    // claudectl's ids: `msg_<ms>_<counter>`; a peer drops a repeated id (relay-compat.md).
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let msg = agent_hub_proto::relay::RelayMessage::new(
        format!("msg_{}_{n}", unix_ms()),
        agent_hub_proto::relay::MsgType::parse(msg_type).unwrap(),
        "probe",
        unix_ms(),
        payload,
    );
    agent_hub_proto::relay::frame::encode_message_as(&msg, true, BodyForm::Json).unwrap()
}

/// claudectl 0.92's full beat, read into the peer's directory and row (docs/relay-protocol.md
/// §5 "claudectl's heartbeat"): its sessions are `who`'s remote names `<session>@probe` with
/// their state, its machine is in the status file and in `relay peers`, and nothing of the
/// peer's strings reaches the terminal raw.
#[test]
fn a_claudectl_beat_shows_its_sessions_in_who_and_its_machine_in_relay_peers() {
    let key = key_hex(0x73);
    let east = probe_hub(true, &key);
    let mut c = V0Conn::connect(east.relay_addr);
    let ch = c.expect_line("challenge");
    let nonce = ch["payload"]["nonce"].as_str().unwrap().to_owned();
    c.send(
        "probe",
        "handshake",
        json!({"proof": proof(&key, &nonce), "version": "0.92.4", "proto": 1,
               "features": ["frame-bin", "headroom", "lease-fleet", "supervised-task", "unknown-ok"]}),
    );
    let ack = c.expect_line("handshake_ack");
    assert_eq!(
        ack["payload"]["features"],
        json!(["unknown-ok", "frame-bin", "headroom"])
    );
    // Our beat to it carries claudectl's capabilities and our headroom.
    let ours = frame_heartbeat(&mut c);
    assert!(
        ours["payload"]["capabilities"]["tools"].is_object(),
        "{ours}"
    );
    assert!(
        ours["payload"]["headroom"]["running_tasks"].is_u64(),
        "{ours}"
    );
    let beat = ctl_frame(
        "heartbeat",
        json!({"worker_id": "probe", "timestamp": unix_ms(),
               "sessions": [{"pid": 41, "session_id": "sess-busy", "project": "api", "status": "Processing"},
                            {"pid": 42, "session_id": "sess-idle", "project": "web\u{1b}]0;pwned\u{7}", "status": "Idle"}],
               "capabilities": {"claudectl_version": "0.92.4", "os": "linux", "arch": "x86_64",
                                "tools": {"claude": {"state": "present", "version": "2.1.332"}}},
               "listen_addrs": ["192.0.2.7:9847"],
               "headroom": {"mem_free_mb": 4096, "load_per_core": 0.25, "running_tasks": 1, "max_tasks": 4, "tags": ["gpu"]}}),
    );
    std::io::Write::write_all(&mut c.stream, &beat).unwrap();
    // A fleet lease request (claudectl's `lease-fleet`, not agreed here) is an unknown type:
    // logged once, dropped, never harmful to the link.
    let lease = ctl_frame(
        "lease_claim",
        json!({"request_id": "r1", "lease_id": "l1", "session": "s", "kind": "port", "value": "8080", "mode": "exclusive", "ttl_secs": 60}),
    );
    std::io::Write::write_all(&mut c.stream, &lease).unwrap();
    east.hub.wait_service_log("the unknown type logged", |l| {
        l.contains("probe sent unknown message type \"lease_claim\"; dropped")
    });
    let p = east.wait_peer("probe", "its machine in the status file", |p| {
        p["worker"]["headroom"]["max_tasks"] == 4
    });
    assert_eq!(p["state"], "up", "{p}");
    assert_eq!(p["agents"], json!(["sess-busy", "sess-idle"]), "{p}");
    assert_eq!(
        p["worker"]["capabilities"]["tools"]["claude"]["version"], "2.1.332",
        "{p}"
    );
    assert_eq!(
        p["worker"]["listen_addrs"],
        json!(["192.0.2.7:9847"]),
        "{p}"
    );
    let who = poll_until("the sessions in who", || {
        let out = east.hub.cli("who", "alpha", &["--json"]);
        out.assert_code(0);
        let v: Value = serde_json::from_str(out.stdout.trim()).unwrap();
        let agents = v["agents"].as_array().cloned().unwrap_or_default();
        agents
            .iter()
            .any(|a| a["name"] == "sess-busy@probe")
            .then_some(agents)
    });
    let busy = who.iter().find(|a| a["name"] == "sess-busy@probe").unwrap();
    assert_eq!(busy["state"], "busy", "{busy}");
    assert_eq!(busy["source"], "relay", "{busy}");
    let idle = who.iter().find(|a| a["name"] == "sess-idle@probe").unwrap();
    assert_eq!(idle["state"], "idle", "{idle}");
    let out = {
        let mut cmd = std::process::Command::new(SERVER);
        cmd.args(["relay", "peers", "--config"])
            .arg(east.config_path());
        run(cmd, None)
    };
    out.assert_code(0);
    assert!(
        out.stdout
            .contains("sessions: 2: sess-busy (api, Processing), sess-idle (web?]0;pwned?, Idle)"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout
            .contains("headroom: memory free 4096 MiB, load 0.25/core"),
        "{}",
        out.stdout
    );
    assert!(
        !out.stdout.bytes().any(|b| b == 0x1b || b == 0x07),
        "a peer's control characters reached the terminal: {:?}",
        out.stdout
    );
}
