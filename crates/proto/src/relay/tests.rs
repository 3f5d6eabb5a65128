//! The relay session driven end to end in memory on a virtual clock: a dialer and an acceptor
//! (ours, or a v0 double speaking the exact v0 lines of docs/relay-protocol.md §1–§2, or an
//! impostor) exchange bytes through `handle_input`/`poll_transmit`, and time moves only through
//! `handle_timeout`. Refuses: sockets and real time.

use super::auth;
use super::frame::{decode_frame, FrameDecoder, FLAG_LZ4};
use super::heartbeat::{AgentEntry, Directory};
use super::message::{MsgType, RelayMessage};
use super::session::*;
use super::Feature;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::time::{Duration, Instant};

const KEY: [u8; 32] = [7; 32];
const OTHER_KEY: [u8; 32] = [9; 32];
const T0_MS: i64 = 1_700_000_000_000;
const INTERVAL: Duration = Duration::from_secs(30);

fn cfg(name: &str, features: &[Feature], t0: Instant) -> SessionConfig {
    SessionConfig {
        local_peer: name.into(),
        software_version: "0.1.0".into(),
        features: features.to_vec(),
        heartbeat_interval: INTERVAL,
        liveness_update: super::session::DEFAULT_LIVENESS_UPDATE,
        handshake_timeout: Duration::from_secs(10),
        listen_port: None,
        transient: false,
        wall_clock: WallClock {
            at: t0,
            unix_ms: T0_MS,
        },
        nonces: super::nonces::NonceBook::new(),
    }
}

fn auth_ok(allow_claudectl: bool) -> PeerAuth {
    PeerAuth {
        key: KEY,
        allow_claudectl,
        forward: false,
    }
}

fn keys_for(peer: &str, auth: PeerAuth) -> HashMap<String, PeerAuth> {
    HashMap::from([(peer.to_owned(), auth)])
}

fn drain(s: &mut Session) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(b) = s.poll_transmit() {
        out.extend_from_slice(&b);
    }
    out
}

fn events(s: &mut Session) -> Vec<SessionEvent> {
    std::iter::from_fn(|| s.poll_event()).collect()
}

fn closed_reason(evs: &[SessionEvent]) -> Option<&str> {
    evs.iter().find_map(|e| match e {
        SessionEvent::Closed { reason } => Some(reason.as_str()),
        _ => None,
    })
}

/// Splits a byte log into NDJSON lines (each must end in `\n`).
fn split_lines(bytes: &[u8]) -> Vec<Vec<u8>> {
    assert!(
        bytes.is_empty() || bytes.ends_with(b"\n"),
        "a partial line on the wire"
    );
    bytes
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(<[u8]>::to_vec)
        .collect()
}

/// A frame-mac stream as plain frame-bin frames: each frame's tag removed and its `len`
/// shortened (the tags are not checked: the test reads, `framemac`'s tests authenticate).
fn strip_tags(bytes: &[u8]) -> Vec<u8> {
    use super::framemac::TAG_BYTES;
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < bytes.len() {
        let len = u32::from_be_bytes(bytes[pos..pos + 4].try_into().unwrap()) as usize;
        out.extend_from_slice(&((len - TAG_BYTES) as u32).to_be_bytes());
        out.extend_from_slice(&bytes[pos + 4..pos + 4 + len - TAG_BYTES]);
        pos += 4 + len;
    }
    out
}

/// Reads `n_lines` lines and then frame-mac frames to the end; returns the messages and the
/// frames' flags.
fn split_lines_then_frames(bytes: &[u8], n_lines: usize) -> (Vec<RelayMessage>, Vec<u8>) {
    let mut msgs = Vec::new();
    let mut pos = 0;
    for _ in 0..n_lines {
        let end = pos
            + bytes[pos..]
                .iter()
                .position(|&b| b == b'\n')
                .expect("a line");
        msgs.push(RelayMessage::decode_line(&bytes[pos..end]).unwrap());
        pos = end + 1;
    }
    let mut flags = Vec::new();
    let bytes = strip_tags(&bytes[pos..]);
    let mut pos = 0;
    while pos < bytes.len() {
        let (f, n) = decode_frame(&bytes[pos..]).unwrap().expect("a whole frame");
        flags.push(f.flags);
        msgs.push(super::frame::decode_body(&f.body).unwrap());
        pos += n;
    }
    (msgs, flags)
}

/// Two sessions wired back to back, with every byte logged.
struct Net {
    now: Instant,
    d: Session,
    a: Session,
    ev_d: Vec<SessionEvent>,
    ev_a: Vec<SessionEvent>,
    d2a: Vec<u8>,
    a2d: Vec<u8>,
    byte_by_byte: bool,
}

impl Net {
    fn new(
        dcfg: SessionConfig,
        acfg: SessionConfig,
        dauth: PeerAuth,
        akeys: HashMap<String, PeerAuth>,
        now: Instant,
    ) -> Net {
        let d = Session::dialer(dcfg, "hubB", dauth, [0x11; 32], 1, now);
        let a = Session::acceptor(acfg, akeys, [0x22; 32], 2, now);
        Net {
            now,
            d,
            a,
            ev_d: vec![],
            ev_a: vec![],
            d2a: vec![],
            a2d: vec![],
            byte_by_byte: false,
        }
    }

    /// Two v1 hubs; `allow_claudectl` is off when both offer what a link then needs (mutual-auth,
    /// frame-bin, frame-mac), and on otherwise, since only then may a link lack them.
    fn v1(dfeat: &[Feature], afeat: &[Feature]) -> Net {
        let t0 = crate::kernel::deadline::test_origin();
        let strict = |f: &[Feature]| super::framemac::missing_without_v0(f).is_empty();
        let allow_claudectl = !(strict(dfeat) && strict(afeat));
        Net::new(
            cfg("hubA", dfeat, t0),
            cfg("hubB", afeat, t0),
            auth_ok(allow_claudectl),
            keys_for("hubA", auth_ok(allow_claudectl)),
            t0,
        )
    }

    fn feed(s: &mut Session, bytes: &[u8], now: Instant, byte_by_byte: bool) {
        if byte_by_byte {
            for b in bytes {
                s.handle_input(std::slice::from_ref(b), now);
            }
        } else if !bytes.is_empty() {
            s.handle_input(bytes, now);
        }
    }

    fn pump(&mut self) {
        loop {
            let x = drain(&mut self.a);
            let y = drain(&mut self.d);
            self.ev_a.extend(events(&mut self.a));
            self.ev_d.extend(events(&mut self.d));
            if x.is_empty() && y.is_empty() {
                break;
            }
            self.a2d.extend_from_slice(&x);
            self.d2a.extend_from_slice(&y);
            Net::feed(&mut self.d, &x, self.now, self.byte_by_byte);
            Net::feed(&mut self.a, &y, self.now, self.byte_by_byte);
        }
    }

    /// Runs both sessions' timers in order up to `t`, delivering bytes instantly.
    fn run_until(&mut self, t: Instant) {
        loop {
            self.pump();
            let next = [self.a.poll_timeout(), self.d.poll_timeout()]
                .into_iter()
                .flatten()
                .min();
            match next {
                Some(n) if n <= t => {
                    self.now = self.now.max(n);
                    for s in [&mut self.a, &mut self.d] {
                        if s.poll_timeout().is_some_and(|x| x <= self.now) {
                            s.handle_timeout(self.now);
                        }
                    }
                }
                _ => break,
            }
        }
        self.now = self.now.max(t);
        self.pump();
    }

    fn advance(&mut self, d: Duration) {
        let t = self.now + d;
        self.run_until(t);
    }

    fn established(evs: &[SessionEvent]) -> Option<(String, u32, Vec<Feature>, bool, String)> {
        evs.iter().find_map(|e| match e {
            SessionEvent::Established {
                peer,
                proto,
                features,
                transient,
                peer_version,
                ..
            } => Some((
                peer.clone(),
                *proto,
                features.clone(),
                *transient,
                peer_version.clone(),
            )),
            _ => None,
        })
    }
}

// ----- a v0 peer double, written from the v0 facts of docs/relay-protocol.md alone -----

/// The 12 types claudectl 0.64 knows, exact case.
const V0_64_TYPES: [&str; 12] = [
    "challenge",
    "handshake",
    "handshake_ack",
    "heartbeat",
    "ack",
    "delegate_task",
    "task_status",
    "task_handoff",
    "task_interrupt",
    "knowledge_sync",
    "knowledge_request",
    "knowledge_snapshot",
];

/// What kills a 0.64 reader (docs/relay-protocol.md §1): checked on every byte we send it.
fn v0_64_reader_accepts(line: &[u8]) -> Result<Value, String> {
    if line.len() > 1_048_576 {
        return Err("over-long line".into());
    }
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    if line.first() != Some(&b'{') {
        return Err(format!(
            "not a JSON object line (binary byte?): {:?}",
            &line[..line.len().min(8)]
        ));
    }
    let v: Value = serde_json::from_slice(line).map_err(|e| format!("not JSON: {e}"))?;
    let o = v.as_object().ok_or("not an object")?;
    for k in ["id", "from_peer"] {
        o.get(k)
            .and_then(Value::as_str)
            .ok_or(format!("{k} is not a string"))?;
    }
    let t = o
        .get("msg_type")
        .and_then(Value::as_str)
        .ok_or("msg_type is not a string")?;
    if !V0_64_TYPES.contains(&t) {
        return Err(format!("msg_type {t:?} unknown to 0.64"));
    }
    let ts = o.get("timestamp").ok_or("no timestamp")?;
    if !(ts.is_i64() || ts.is_u64()) {
        return Err(format!("timestamp {ts} is not an integer"));
    }
    if !o.get("payload").is_some_and(Value::is_object) {
        return Err("payload missing or not an object".into());
    }
    Ok(v)
}

struct V0Peer {
    id: &'static str,
    key: [u8; 32],
    counter: u64,
}

impl V0Peer {
    fn line(&mut self, msg_type: &str, from: &str, payload: &str, ms: i64) -> Vec<u8> {
        self.counter += 1;
        format!(
            "{{\"id\":\"msg_{ms}_{}\",\"msg_type\":\"{msg_type}\",\"from_peer\":\"{from}\",\"timestamp\":{ms},\"payload\":{payload}}}\n",
            self.counter
        )
        .into_bytes()
    }

    fn challenge(&mut self, nonce: &str) -> Vec<u8> {
        self.line(
            "challenge",
            "",
            &format!("{{\"nonce\":\"{nonce}\"}}"),
            T0_MS,
        )
    }

    /// A challenge with the v1 marker (what an impostor that speaks v1 sends).
    fn challenge_v1(&mut self, nonce: &str, peer: &str) -> Vec<u8> {
        self.line(
            "challenge",
            "",
            &format!("{{\"nonce\":\"{nonce}\",\"peer\":\"{peer}\",\"proto\":1}}"),
            T0_MS,
        )
    }

    fn handshake(&mut self, nonce: &str) -> Vec<u8> {
        let proof = auth::proof(&self.key, nonce);
        let id = self.id;
        self.line(
            "handshake",
            id,
            &format!("{{\"proof\":\"{proof}\",\"version\":\"0.64.0\"}}"),
            T0_MS,
        )
    }

    fn ack(&mut self, status: &str) -> Vec<u8> {
        let id = self.id;
        self.line(
            "handshake_ack",
            id,
            &format!("{{\"status\":\"{status}\"}}"),
            T0_MS,
        )
    }

    fn heartbeat(&mut self, ms: i64) -> Vec<u8> {
        let id = self.id;
        self.line("heartbeat", id, "{}", ms)
    }
}

/// `payload` (a v1 handshake without its proof) with hubA's transcript proof under `KEY`,
/// answering `acceptor`'s challenge `nonce`: what our dialer would send.
fn v1_handshake(acceptor: &str, nonce: &str, mut payload: Value) -> Value {
    payload["proof"] = json!("");
    let hs: super::message::Handshake = serde_json::from_value(payload.clone()).unwrap();
    let t = super::transcript::Transcript::new("hubA", acceptor, nonce, &hs);
    payload["proof"] = json!(t.dialer_proof(&KEY));
    payload
}

fn nonce_of_challenge(bytes: &[u8]) -> String {
    let lines = split_lines(bytes);
    let m = RelayMessage::decode_line(&lines[0]).unwrap();
    assert_eq!(m.msg_type, MsgType::Challenge);
    assert_eq!(m.from_peer, "");
    m.payload["nonce"].as_str().unwrap().to_owned()
}

fn directory(n: usize, version: &str) -> Directory {
    Directory {
        version: version.into(),
        agents: (0..n)
            .map(|i| {
                (
                    format!("agent-{i:02}"),
                    AgentEntry {
                        parked: 0,
                        queued: i as u32,
                        ..Default::default()
                    },
                )
            })
            .collect(),
    }
}

// ----- handshake paths -----

#[test]
fn v1_link_agrees_the_intersection_and_both_report_it() {
    let mut net = Net::v1(
        &Feature::ALL,
        &[
            Feature::HbDelta,
            Feature::UnknownOk,
            Feature::Lz4,
            Feature::MutualAuth,
        ],
    );
    net.d = {
        let mut c = cfg("hubA", &Feature::ALL, net.now);
        c.listen_port = Some(4611);
        Session::dialer(c, "hubB", auth_ok(true), [0x11; 32], 1, net.now)
    };
    net.pump();
    // `headroom` is offered by every agent-hub (issue 38 design §4), whatever its features.
    let want = vec![
        Feature::UnknownOk,
        Feature::MutualAuth,
        Feature::Lz4,
        Feature::HbDelta,
        Feature::Headroom,
    ];
    let ed = Net::established(&net.ev_d).expect("dialer up");
    let ea = Net::established(&net.ev_a).expect("acceptor up");
    assert_eq!(ed, ("hubB".into(), 1, want.clone(), false, "0.1.0".into()));
    assert_eq!(ea, ("hubA".into(), 1, want.clone(), false, "0.1.0".into()));
    assert_eq!(net.d.features(), net.a.features());
    assert_eq!(net.a.peer(), Some("hubA"));
    assert_eq!(net.a.peer_listen_port(), Some(4611));
    assert_eq!((net.d.proto(), net.a.proto()), (Some(1), Some(1)));
    assert!(!net.d.framed(), "frame-bin was not agreed: lines stay");

    // The handshake carried proto, features and the dialer's nonce, and its proof is over
    // the transcript; the ack the agreed set, the acceptor's version and its transcript proof.
    let d_lines = split_lines(&net.d2a);
    let hs = RelayMessage::decode_line(&d_lines[0]).unwrap();
    assert_eq!(hs.from_peer, "hubA");
    assert_eq!(hs.payload["proto"], json!(1));
    assert_eq!(
        hs.payload["features"],
        json!([
            "unknown-ok",
            "mutual-auth",
            "frame-bin",
            "lz4",
            "hb-delta",
            "frame-mac",
            "agents",
            "liveness",
            "headroom",
            "task-approvals"
        ])
    );
    let hs_typed = match hs.payload_typed().unwrap() {
        super::Payload::Handshake(h) => h,
        other => panic!("{other:?}"),
    };
    let t = super::transcript::Transcript::new("hubA", "hubB", &"22".repeat(32), &hs_typed);
    assert_eq!(hs.payload["proof"], json!(t.dialer_proof(&KEY)));
    assert_eq!(hs.payload["nonce"], json!("11".repeat(32)));
    assert_eq!(hs.payload["listen_port"], json!(4611));
    assert!(hs.payload.get("transient").is_none());
    let a_lines = split_lines(&net.a2d);
    let ack = RelayMessage::decode_line(&a_lines[1]).unwrap();
    assert_eq!(ack.msg_type, MsgType::HandshakeAck);
    assert_eq!(
        ack.payload["features"],
        json!(["unknown-ok", "mutual-auth", "lz4", "hb-delta", "headroom"])
    );
    let ack_typed = match ack.payload_typed().unwrap() {
        super::Payload::HandshakeAck(a) => a,
        other => panic!("{other:?}"),
    };
    let fields = super::transcript::AckFields::of(&ack_typed);
    assert_eq!(ack.payload["proof"], json!(t.acceptor_proof(&fields, &KEY)));
    assert_ne!(
        ack.payload["proof"],
        json!(auth::proof(&KEY, &"11".repeat(32)))
    );
    assert_eq!(ack.payload["status"], json!("ok"));
    assert_eq!(ack.payload["version"], json!("0.1.0"));

    // First heartbeats at once, then every interval; the link stays up.
    net.advance(INTERVAL * 10);
    assert!(closed_reason(&net.ev_d).is_none() && closed_reason(&net.ev_a).is_none());
    assert_eq!(net.d.stats().beats_sent, 11);
    assert_eq!(net.a.stats().beats_received, 11);
    assert_eq!(net.a.stats().last_heartbeat_received, Some(net.now));
}

/// `bus-forward` is a trust decision per peer: agreed only when both ends configured the
/// other with `forward`, and offered by the dialler only then.
#[test]
fn bus_forward_is_agreed_only_between_peers_that_both_allow_it() {
    let forward = |on: bool| PeerAuth {
        forward: on,
        ..auth_ok(false)
    };
    for (d_on, a_on) in [(true, true), (true, false), (false, true), (false, false)] {
        let t0 = crate::kernel::deadline::test_origin();
        let mut net = Net::new(
            cfg("hubA", &Feature::ALL, t0),
            cfg("hubB", &Feature::ALL, t0),
            forward(d_on),
            keys_for("hubA", forward(a_on)),
            t0,
        );
        net.pump();
        let both = d_on && a_on;
        assert_eq!(
            net.d.features().contains(&Feature::BusForward),
            both,
            "{d_on} {a_on}"
        );
        assert_eq!(net.d.features(), net.a.features());
        let hs = RelayMessage::decode_line(&split_lines(&net.d2a)[0]).unwrap();
        let offered = hs.payload["features"]
            .as_array()
            .unwrap()
            .contains(&json!("bus-forward"));
        assert_eq!(
            offered, d_on,
            "the dialler offers it only to a forwarding peer"
        );
        // Sending is refused where it was not agreed, and works where it was.
        let m = net.d.message(
            MsgType::BusForward,
            json!({"envelope": "{}", "hop": 1}),
            net.now,
        );
        assert_eq!(net.d.send(m).is_ok(), both, "{d_on} {a_on}");
        net.pump();
        let got = net
            .ev_a
            .iter()
            .any(|e| matches!(e, SessionEvent::Message(m) if m.msg_type == MsgType::BusForward));
        assert_eq!(got, both);
    }
}

/// `task-approvals` (issue 37 design §7): agreed between two of our hubs that agree
/// `mutual-auth` and `frame-mac`, never without both (whoever offers it), and its three types
/// cross only a link that agreed it.
#[test]
fn task_approvals_is_agreed_only_on_a_hardened_link() {
    let all: Vec<Feature> = Feature::ALL.to_vec();
    let without = |gone: &[Feature]| -> Vec<Feature> {
        Feature::ALL
            .into_iter()
            .filter(|f| !gone.contains(f))
            .collect()
    };
    let cases: Vec<(&str, Vec<Feature>, Vec<Feature>, bool)> = vec![
        ("both hardened", all.clone(), all.clone(), true),
        (
            "acceptor without frame-mac",
            all.clone(),
            without(&[Feature::FrameMac]),
            false,
        ),
        (
            "dialer without mutual-auth",
            without(&[Feature::MutualAuth]),
            all.clone(),
            false,
        ),
        (
            "acceptor without frame-bin",
            all.clone(),
            without(&[Feature::FrameBin]),
            false,
        ),
        (
            "offered bare",
            vec![Feature::UnknownOk, Feature::TaskApprovals],
            vec![Feature::UnknownOk, Feature::TaskApprovals],
            false,
        ),
        (
            "acceptor does not offer it",
            all.clone(),
            without(&[Feature::TaskApprovals]),
            false,
        ),
    ];
    for (name, d, a, agreed) in cases {
        let mut net = Net::v1(&d, &a);
        net.pump();
        assert!(Net::established(&net.ev_d).is_some(), "{name}");
        assert_eq!(
            net.d.features().contains(&Feature::TaskApprovals),
            agreed,
            "{name}: {:?}",
            net.d.features()
        );
        assert_eq!(net.d.features(), net.a.features(), "{name}");
        for t in [
            MsgType::TaskRequest,
            MsgType::TaskAnswer,
            MsgType::TaskRequestClosed,
        ] {
            let m = net.d.message(t.clone(), sample_payload(&t), net.now);
            match net.d.send(m) {
                Ok(()) => assert!(agreed, "{name}: {t} sent"),
                Err(e) => {
                    assert!(!agreed, "{name}: {t}: {e}");
                    assert!(
                        e.to_string().contains("needs feature task-approvals"),
                        "{name}: {e}"
                    );
                }
            }
        }
        net.pump();
        let got = net
            .ev_a
            .iter()
            .filter(|e| matches!(e, SessionEvent::Message(m) if m.msg_type == MsgType::TaskAnswer))
            .count();
        assert_eq!(got, usize::from(agreed), "{name}");
    }
}

/// A dialer's check of the ack: an acceptor that agrees `task-approvals` on a link without
/// `frame-mac` is refused, whatever else it agreed (here with `allow_claudectl` on, so the
/// required set alone does not catch it).
#[test]
fn an_ack_agreeing_task_approvals_without_frame_mac_closes_the_dial() {
    let t0 = crate::kernel::deadline::test_origin();
    let mut d = Session::dialer(
        cfg("hubA", &Feature::ALL, t0),
        "hubB",
        auth_ok(true),
        [0x11; 32],
        1,
        t0,
    );
    let mut a = Session::acceptor(
        cfg("hubB", &Feature::ALL, t0),
        keys_for("hubA", auth_ok(true)),
        [0x22; 32],
        2,
        t0,
    );
    d.handle_input(&drain(&mut a), t0);
    a.handle_input(&drain(&mut d), t0);
    // Rewrite the acceptor's ack: frame-mac and its proof dropped, task-approvals kept, as a
    // man in the middle would need to make an unauthenticated link carry answers.
    let ack_line = split_lines(&drain(&mut a))[0].clone();
    let mut ack: Value = serde_json::from_slice(&ack_line).unwrap();
    ack["payload"]["features"] = json!(["unknown-ok", "frame-bin", "task-approvals"]);
    ack["payload"].as_object_mut().unwrap().remove("proof");
    d.handle_input(format!("{ack}\n").as_bytes(), t0);
    let evs = events(&mut d);
    assert!(Net::established(&evs).is_none(), "{evs:?}");
    assert!(
        closed_reason(&evs)
            .unwrap()
            .contains("agreed to task-approvals without mutual-auth and frame-mac"),
        "{evs:?}"
    );
}

#[test]
fn transient_dial_is_reported_on_both_ends() {
    let t0 = crate::kernel::deadline::test_origin();
    let mut c = cfg("hubA", &Feature::ALL, t0);
    c.transient = true;
    let mut net = Net::new(
        c,
        cfg("hubB", &Feature::ALL, t0),
        auth_ok(false),
        keys_for("hubA", auth_ok(false)),
        t0,
    );
    net.pump();
    assert!(Net::established(&net.ev_d).unwrap().3);
    assert!(Net::established(&net.ev_a).unwrap().3);
    assert!(net.a.transient());
}

#[test]
fn frame_bin_switches_after_the_ack_even_within_one_read() {
    let t0 = crate::kernel::deadline::test_origin();
    let mut d = Session::dialer(
        cfg("hubA", &Feature::ALL, t0),
        "hubB",
        auth_ok(false),
        [1; 32],
        1,
        t0,
    );
    let mut a = Session::acceptor(
        cfg("hubB", &Feature::ALL, t0),
        keys_for("hubA", auth_ok(false)),
        [2; 32],
        2,
        t0,
    );
    d.handle_input(&drain(&mut a), t0);
    a.handle_input(&drain(&mut d), t0);
    assert!(a.framed());
    a.set_directory(directory(40, "0.1.0"));
    a.handle_timeout(t0); // the first heartbeat: a frame right behind the ack line
    let bytes = drain(&mut a);
    let (msgs, flags) = split_lines_then_frames(&bytes, 1);
    assert_eq!(msgs[0].msg_type, MsgType::HandshakeAck);
    assert_eq!(msgs[1].msg_type, MsgType::Heartbeat);
    assert_eq!(
        flags,
        [FLAG_LZ4],
        "a 40-agent heartbeat is over 1 KiB: compressed"
    );
    // One read holds the ack line and the frame: the dialer switches mid-buffer.
    d.handle_input(&bytes, t0);
    let evs = events(&mut d);
    assert!(Net::established(&evs).is_some());
    let dir = evs.iter().find_map(|e| match e {
        SessionEvent::Heartbeat { directory, .. } => Some(directory.clone()),
        _ => None,
    });
    assert_eq!(dir, Some(directory(40, "0.1.0")));
    assert!(closed_reason(&evs).is_none());
}

#[test]
fn any_split_of_the_input_gives_the_same_events() {
    let run = |byte_by_byte: bool| {
        let mut net = Net::v1(&Feature::ALL, &Feature::ALL);
        net.byte_by_byte = byte_by_byte;
        net.a.set_directory(directory(30, "0.1.0"));
        net.advance(INTERVAL * 12);
        (net.ev_d, net.ev_a, net.d2a, net.a2d)
    };
    assert_eq!(run(true), run(false));
}

#[test]
fn wrong_key_is_denied_and_both_close() {
    let t0 = crate::kernel::deadline::test_origin();
    let mut net = Net::new(
        cfg("hubA", &Feature::ALL, t0),
        cfg("hubB", &Feature::ALL, t0),
        auth_ok(false),
        keys_for(
            "hubA",
            PeerAuth {
                key: OTHER_KEY,
                allow_claudectl: false,
                forward: false,
            },
        ),
        t0,
    );
    net.pump();
    let lines = split_lines(&net.a2d);
    assert_eq!(lines.len(), 2, "challenge and the denial, nothing else");
    let ack = RelayMessage::decode_line(&lines[1]).unwrap();
    assert_eq!(ack.msg_type, MsgType::HandshakeAck);
    assert_eq!(
        ack.payload,
        json!({"status": "denied"}),
        "a denial tells nothing more"
    );
    assert!(closed_reason(&net.ev_a)
        .unwrap()
        .contains("wrong proof from hubA"));
    assert!(closed_reason(&net.ev_d).unwrap().contains("denied"));
    assert!(Net::established(&net.ev_a).is_none() && Net::established(&net.ev_d).is_none());
    assert_eq!(net.a.state(), SessionState::Closed);
    assert_eq!(net.a.poll_timeout(), None);
    // No log line carries the key or the proof.
    let hs = RelayMessage::decode_line(&split_lines(&net.d2a)[0]).unwrap();
    let proof = hs.payload["proof"].as_str().unwrap();
    for e in net.ev_a.iter().chain(&net.ev_d) {
        let text = format!("{e:?}");
        assert!(
            !text.contains(proof) && !text.contains(&auth::to_hex(&KEY)),
            "{text}"
        );
    }
}

#[test]
fn unknown_peer_id_is_denied() {
    let t0 = crate::kernel::deadline::test_origin();
    let mut net = Net::new(
        cfg("hubA", &Feature::ALL, t0),
        cfg("hubB", &Feature::ALL, t0),
        auth_ok(false),
        keys_for("someone-else", auth_ok(true)),
        t0,
    );
    net.pump();
    let lines = split_lines(&net.a2d);
    assert_eq!(
        RelayMessage::decode_line(&lines[1]).unwrap().payload,
        json!({"status": "denied"})
    );
    assert!(closed_reason(&net.ev_a)
        .unwrap()
        .contains("unknown peer id \"hubA\""));
    assert!(closed_reason(&net.ev_d).is_some());
}

#[test]
fn the_key_lookup_may_be_a_closure() {
    let t0 = crate::kernel::deadline::test_origin();
    let d = Session::dialer(
        cfg("hubA", &Feature::ALL, t0),
        "hubB",
        auth_ok(false),
        [1; 32],
        1,
        t0,
    );
    let a = Session::acceptor(
        cfg("hubB", &Feature::ALL, t0),
        |id: &str| (id == "hubA").then(|| auth_ok(false)),
        [2; 32],
        2,
        t0,
    );
    let mut net = Net {
        now: t0,
        d,
        a,
        ev_d: vec![],
        ev_a: vec![],
        d2a: vec![],
        a2d: vec![],
        byte_by_byte: false,
    };
    net.pump();
    assert!(Net::established(&net.ev_a).is_some());
}

/// A v0 dialer (claudectl 0.64, the exact v0 lines of docs/relay-protocol.md) against our acceptor:
/// v0 bytes only, for many intervals, and the link stays up.
#[test]
fn v0_dialer_gets_exact_v0_bytes_and_stays_linked() {
    let t0 = crate::kernel::deadline::test_origin();
    let mut a = Session::acceptor(
        cfg("hubB", &Feature::ALL, t0),
        keys_for("old", auth_ok(true)),
        [0x22; 32],
        2,
        t0,
    );
    let mut v0 = V0Peer {
        id: "old",
        key: KEY,
        counter: 0,
    };
    let mut to_v0 = drain(&mut a);
    let nonce = nonce_of_challenge(&to_v0);
    assert_eq!(nonce, "22".repeat(32));
    let ch = String::from_utf8(to_v0.clone()).unwrap();
    let id = RelayMessage::decode_line(ch.trim_end().as_bytes())
        .unwrap()
        .id;
    // v0's challenge plus the v1 marker, extra payload keys a v0 dialer ignores
    // (docs/relay-protocol.md §8: unknown extra keys are ignored everywhere; checked below by
    // `v0_64_reader_accepts`).
    assert_eq!(
        ch,
        format!("{{\"id\":\"{id}\",\"msg_type\":\"challenge\",\"from_peer\":\"\",\"timestamp\":{T0_MS},\"payload\":{{\"nonce\":\"{nonce}\",\"peer\":\"hubB\",\"proto\":1}}}}\n")
    );
    a.handle_input(&v0.handshake(&nonce), t0);
    let ack = drain(&mut a);
    let ack_text = String::from_utf8(ack.clone()).unwrap();
    let ack_id = RelayMessage::decode_line(ack_text.trim_end().as_bytes())
        .unwrap()
        .id;
    assert_eq!(
        ack_text,
        format!("{{\"id\":\"{ack_id}\",\"msg_type\":\"handshake_ack\",\"from_peer\":\"hubB\",\"timestamp\":{T0_MS},\"payload\":{{\"status\":\"ok\"}}}}\n"),
        "a v0 dialer gets {{\"status\":\"ok\"}} and nothing else"
    );
    to_v0.extend_from_slice(&ack);
    let evs = events(&mut a);
    assert_eq!(
        Net::established(&evs),
        Some(("old".into(), 0, vec![], false, "0.64.0".into()))
    );
    assert!(!a.framed());

    // 20 intervals: the double beats with `{}`; we beat back; the app tries every type.
    a.set_directory(directory(5, "0.1.0"));
    let mut now = t0;
    let mut refused = Vec::new();
    for i in 0..=20u32 {
        now = t0 + INTERVAL * i;
        a.handle_timeout(now);
        a.handle_input(&v0.heartbeat(T0_MS + i64::from(i) * 30_000), now);
        for t in super::message::V0_TYPES
            .iter()
            .chain([&MsgType::BusForward, &MsgType::Unknown("bus_relay".into())])
        {
            let m = a.message(t.clone(), sample_payload(t), now);
            if let Err(e) = a.send(m) {
                refused.push((t.as_str().to_owned(), e));
            }
        }
        to_v0.extend_from_slice(&drain(&mut a));
    }
    let evs = events(&mut a);
    assert!(closed_reason(&evs).is_none(), "{evs:?}");
    assert_eq!(
        evs.iter()
            .filter(|e| matches!(e, SessionEvent::Heartbeat { .. }))
            .count(),
        21
    );
    let refused_types: Vec<&str> = refused.iter().take(9).map(|(t, _)| t.as_str()).collect();
    assert_eq!(
        refused_types,
        [
            "challenge",
            "handshake",
            "handshake_ack",
            "heartbeat",
            "hive_join_request",
            "hive_join_result",
            "knowledge_rejected",
            "session_transfer",
            "session_received",
        ]
    );
    assert_eq!(
        refused
            .iter()
            .skip(9)
            .take(2)
            .map(|(t, _)| t.as_str())
            .collect::<Vec<_>>(),
        ["bus_forward", "bus_relay"]
    );
    assert!(
        matches!(&refused[4].1, SendError::NotNegotiated { why, .. } if why.contains("v0 relay"))
    );

    let mut beats = 0;
    for line in split_lines(&to_v0) {
        let v = v0_64_reader_accepts(&line).unwrap_or_else(|e| {
            panic!(
                "a 0.64 reader dies: {e}: {}",
                String::from_utf8_lossy(&line)
            )
        });
        if v["msg_type"] == "heartbeat" {
            beats += 1;
            let p = &v["payload"];
            assert_eq!(
                p,
                &json!({"worker_id": "hubB", "timestamp": v["timestamp"], "sessions": []})
            );
        }
        if v["msg_type"] == "ack" {
            assert_eq!(
                v["payload"]["ack_id"], "msg_1",
                "only the application's acks: no heartbeat acks without hb-delta"
            );
        }
    }
    assert_eq!(beats, 21);
    let _ = now;
}

fn sample_payload(t: &MsgType) -> Value {
    let ctx = json!({"dependency_graph": {"blocks": [], "blocked_by": []}});
    let stats =
        json!({"tokens_used": 1, "cost_usd": 0.5, "context_pct": 1.5, "files_modified": []});
    match t {
        MsgType::Challenge => json!({"nonce": "ab".repeat(32)}),
        MsgType::Handshake => json!({"proof": "x", "version": "1"}),
        MsgType::HandshakeAck => json!({"status": "ok"}),
        MsgType::Heartbeat => json!({}),
        MsgType::Ack => json!({"ack_id": "msg_1"}),
        MsgType::DelegateTask => {
            json!({"task_id": "t", "prompt": "p", "cwd": null, "context": ctx})
        }
        MsgType::TaskStatus => json!({"task_id": "t", "state": "running", "stats": stats}),
        MsgType::TaskHandoff => {
            json!({"task_id": "t", "state": "completed", "summary": "s", "artifacts": [], "git_ref": null, "total_cost_usd": 0.5, "total_tokens": 3})
        }
        MsgType::TaskInterrupt => json!({"task_id": "t", "interrupt_type": "stop", "reason": "r"}),
        MsgType::KnowledgeSync => json!({"units": [], "sync_epoch": 1}),
        MsgType::KnowledgeRequest => json!({"since_epoch": 0}),
        MsgType::KnowledgeSnapshot => json!({"units": [], "page": 1, "total_pages": 1}),
        MsgType::HiveJoinRequest => json!({}),
        MsgType::HiveJoinResult => json!({"state": "member"}),
        MsgType::KnowledgeRejected => json!({"reason": "r", "units": []}),
        MsgType::SessionTransfer => {
            json!({"session_id": "s", "cwd": "/", "seq": 0, "total": 1, "digest": "d", "data": "Zm9v"})
        }
        MsgType::SessionReceived => {
            json!({"session_id": "s", "path": "/p", "cwd": "/", "resume": true})
        }
        MsgType::BusForward => json!({"envelope": "{}", "hop": 1}),
        MsgType::TaskRequest => json!({"task_id": "t", "request": "req-0123456789abcdef",
            "type": "permission", "tool_call": {"id": "c", "title": "x"},
            "options": [{"option_id": "a", "name": "A", "kind": "allow_once"}], "expires_at": 1}),
        MsgType::TaskAnswer => json!({"task_id": "t", "request": "r", "option": "a"}),
        MsgType::TaskRequestClosed => json!({"task_id": "t", "request": "r", "state": "answered"}),
        MsgType::Unknown(_) => json!({}),
    }
}

/// Our dialer against a v0 acceptor double: a v0 link (no features, lines only).
#[test]
fn v0_acceptor_gives_a_v0_link_when_allowed() {
    let t0 = crate::kernel::deadline::test_origin();
    let mut d = Session::dialer(
        cfg("hubA", &Feature::ALL, t0),
        "old",
        auth_ok(true),
        [0x11; 32],
        1,
        t0,
    );
    let mut v0 = V0Peer {
        id: "old",
        key: KEY,
        counter: 0,
    };
    let nonce = "cd".repeat(32);
    d.handle_input(&v0.challenge(&nonce), t0);
    let hs_bytes = drain(&mut d);
    let hs = v0_64_reader_accepts(&split_lines(&hs_bytes)[0])
        .expect("a v0 acceptor reads our handshake");
    // What a v0 acceptor checks: the proof over its nonce's text, with the key of from_peer.
    assert_eq!(hs["from_peer"], "hubA");
    assert!(auth::verify(
        &KEY,
        &nonce,
        hs["payload"]["proof"].as_str().unwrap()
    ));
    assert_eq!(hs["payload"]["version"], "0.1.0");
    d.handle_input(&v0.ack("ok"), t0);
    let evs = events(&mut d);
    assert_eq!(
        Net::established(&evs),
        Some(("old".into(), 0, vec![], false, String::new()))
    );
    d.set_directory(directory(3, "0.1.0"));
    let mut to_v0 = Vec::new();
    for i in 0..=20u32 {
        let now = t0 + INTERVAL * i;
        d.handle_input(&v0.heartbeat(T0_MS + i64::from(i) * 30_000), now);
        d.handle_timeout(now);
        let m = d.message(
            MsgType::TaskStatus,
            sample_payload(&MsgType::TaskStatus),
            now,
        );
        d.send(m).unwrap();
        let st = d_msg(&mut d, MsgType::SessionTransfer, now);
        assert!(d.send(st).is_err());
        to_v0.extend_from_slice(&drain(&mut d));
    }
    assert!(closed_reason(&events(&mut d)).is_none());
    let lines = split_lines(&to_v0);
    assert_eq!(lines.len(), 42, "21 heartbeats and 21 task_status");
    for line in lines {
        v0_64_reader_accepts(&line).unwrap();
    }
}

fn d_msg(s: &mut Session, t: MsgType, now: Instant) -> RelayMessage {
    let p = sample_payload(&t);
    s.message(t, p, now)
}

#[test]
fn allow_claudectl_off_refuses_a_v0_acceptor_and_sends_nothing_more() {
    let t0 = crate::kernel::deadline::test_origin();
    let mut d = Session::dialer(
        cfg("hubA", &Feature::ALL, t0),
        "old",
        auth_ok(false),
        [0x11; 32],
        1,
        t0,
    );
    let mut v0 = V0Peer {
        id: "old",
        key: KEY,
        counter: 0,
    };
    // An unmarked challenge: no v0 proof is ever made for a peer whose allow_claudectl is off, so
    // nobody can use this dialer to sign a v0 challenge (no signing oracle).
    d.handle_input(&v0.challenge(&"cd".repeat(32)), t0);
    assert_eq!(d.poll_transmit(), None, "nothing signed, nothing sent");
    let evs = events(&mut d);
    let why = closed_reason(&evs).unwrap();
    assert!(
        why.contains("no v1 marker")
            && why.contains("allow_claudectl is off")
            && why.contains("nothing signed"),
        "{evs:?}"
    );
    d.handle_input(&v0.ack("ok"), t0);
    d.handle_timeout(t0 + INTERVAL * 5);
    assert_eq!(d.poll_transmit(), None, "nothing after the challenge");
}

#[test]
fn allow_claudectl_off_denies_a_v0_dialer() {
    let t0 = crate::kernel::deadline::test_origin();
    let mut a = Session::acceptor(
        cfg("hubB", &Feature::ALL, t0),
        keys_for("old", auth_ok(false)),
        [0x22; 32],
        2,
        t0,
    );
    let mut v0 = V0Peer {
        id: "old",
        key: KEY,
        counter: 0,
    };
    let nonce = nonce_of_challenge(&drain(&mut a));
    a.handle_input(&v0.handshake(&nonce), t0);
    let lines = split_lines(&drain(&mut a));
    assert_eq!(
        RelayMessage::decode_line(&lines[0]).unwrap().payload,
        json!({"status": "denied"})
    );
    assert!(closed_reason(&events(&mut a))
        .unwrap()
        .contains("allow_claudectl is off"));
}

/// An impostor acceptor (it does not hold the key) answers "ok" to anything. It challenges
/// as v1 (an unmarked challenge gets nothing signed at all: `allow_claudectl_off_…`); under
/// mutual-auth the dialer sends nothing after its handshake and closes.
#[test]
fn impostor_acceptor_fails_mutual_auth() {
    let t0 = crate::kernel::deadline::test_origin();
    let nd = "11".repeat(32);
    let all: Vec<&str> = Feature::ALL
        .iter()
        .filter(|f| **f != Feature::BusForward)
        .map(|f| f.as_str())
        .collect();
    let cases: Vec<(&str, bool, Value)> = vec![
        (
            "wrong key",
            false,
            json!({"status": "ok", "proto": 1, "features": all, "version": "0.1.0",
                   "proof": "filled in below with OTHER_KEY"}),
        ),
        (
            "no proof",
            true,
            json!({"status": "ok", "proto": 1, "features": ["mutual-auth"]}),
        ),
        (
            "a v0 proof of our nonce, with the right key (an older build's mutual proof)",
            true,
            json!({"status": "ok", "proto": 1, "features": ["mutual-auth"], "proof": auth::proof(&KEY, &nd)}),
        ),
        (
            "a proof of some other nonce",
            true,
            json!({"status": "ok", "proto": 1, "features": ["mutual-auth"], "proof": auth::proof(&KEY, &"12".repeat(32))}),
        ),
        (
            "drops mutual-auth (downgrade) while allow_claudectl is off",
            false,
            json!({"status": "ok", "proto": 1, "features": ["frame-bin"]}),
        ),
        (
            "answers v0 after challenging as v1, allow_claudectl on",
            true,
            json!({"status": "ok"}),
        ),
        (
            "agrees a feature we never offered",
            true,
            json!({"status": "ok", "proto": 1, "features": ["bus-forward"]}),
        ),
        (
            "agrees frame-mac without mutual-auth",
            true,
            json!({"status": "ok", "proto": 1, "features": ["frame-bin", "frame-mac"]}),
        ),
        (
            "speaks proto 2",
            true,
            json!({"status": "ok", "proto": 2, "features": []}),
        ),
    ];
    for (name, allow_claudectl, mut ack_payload) in cases {
        let mut d = Session::dialer(
            cfg("hubA", &Feature::ALL, t0),
            "hubB",
            auth_ok(allow_claudectl),
            [0x11; 32],
            1,
            t0,
        );
        let mut imp = V0Peer {
            id: "hubB",
            key: OTHER_KEY,
            counter: 0,
        };
        d.handle_input(&imp.challenge_v1(&"cd".repeat(32), "hubB"), t0);
        let hs = drain(&mut d);
        assert_eq!(split_lines(&hs).len(), 1);
        if ack_payload["proof"] == "filled in below with OTHER_KEY" {
            let hs = RelayMessage::decode_line(&split_lines(&hs)[0]).unwrap();
            let Ok(super::Payload::Handshake(h)) = hs.payload_typed() else {
                panic!("{hs:?}")
            };
            let t = super::transcript::Transcript::new("hubA", "hubB", &"cd".repeat(32), &h);
            let typed: super::message::HandshakeAck =
                serde_json::from_value(ack_payload.clone()).unwrap();
            let fields = super::transcript::AckFields::of(&typed);
            ack_payload["proof"] = json!(t.acceptor_proof(&fields, &OTHER_KEY));
        }
        let ack = imp.line("handshake_ack", "hubB", &ack_payload.to_string(), T0_MS);
        // The impostor also pipelines a message it wants us to act on.
        let mut bytes = ack;
        bytes.extend_from_slice(&imp.line(
            "delegate_task",
            "hubB",
            &sample_payload(&MsgType::DelegateTask).to_string(),
            T0_MS,
        ));
        d.handle_input(&bytes, t0);
        let evs = events(&mut d);
        assert!(closed_reason(&evs).is_some(), "{name}: {evs:?}");
        assert!(Net::established(&evs).is_none(), "{name}");
        assert!(
            !evs.iter().any(|e| matches!(e, SessionEvent::Message(_))),
            "{name}: nothing injected"
        );
        d.handle_timeout(t0 + INTERVAL * 4);
        assert_eq!(
            d.poll_transmit(),
            None,
            "{name}: nothing sent after the handshake"
        );
    }
    // With allow_claudectl on, leaving mutual-auth out is accepted: a v0 link would be anyway.
    let mut d = Session::dialer(
        cfg("hubA", &Feature::ALL, t0),
        "hubB",
        auth_ok(true),
        [0x11; 32],
        1,
        t0,
    );
    let mut imp = V0Peer {
        id: "hubB",
        key: OTHER_KEY,
        counter: 0,
    };
    d.handle_input(&imp.challenge_v1(&"cd".repeat(32), "hubB"), t0);
    drain(&mut d);
    d.handle_input(
        &imp.line(
            "handshake_ack",
            "hubB",
            r#"{"status":"ok","proto":1,"features":["lz4"]}"#,
            T0_MS,
        ),
        t0,
    );
    assert_eq!(
        Net::established(&events(&mut d)).map(|e| e.2),
        Some(vec![Feature::Lz4])
    );
}

#[test]
fn malformed_handshakes_get_no_ack() {
    let t0 = crate::kernel::deadline::test_origin();
    let good_proof = |nonce: &str| auth::proof(&KEY, nonce);
    type Make = Box<dyn Fn(&str) -> Vec<u8>>;
    let cases: Vec<(&str, Make)> = vec![
        ("not JSON", Box::new(|_| b"hello\n".to_vec())),
        ("blank line", Box::new(|_| b"\n".to_vec())),
        (
            "a heartbeat instead",
            Box::new(|_| {
                br#"{"id":"1","msg_type":"heartbeat","from_peer":"hubA","timestamp":1,"payload":{}}"#.iter().chain(b"\n").copied().collect()
            }),
        ),
        (
            "no proof",
            Box::new(|_| {
                br#"{"id":"1","msg_type":"handshake","from_peer":"hubA","timestamp":1,"payload":{"version":"1"}}"#.iter().chain(b"\n").copied().collect()
            }),
        ),
        (
            "float timestamp",
            Box::new(move |n| {
                format!(r#"{{"id":"1","msg_type":"handshake","from_peer":"hubA","timestamp":1.5,"payload":{{"proof":"{}","version":"1"}}}}"#, good_proof(n)).into_bytes().into_iter().chain(*b"\n").collect()
            }),
        ),
        (
            "bad peer id",
            Box::new(move |n| {
                format!(r#"{{"id":"1","msg_type":"handshake","from_peer":"hub A","timestamp":1,"payload":{{"proof":"{}","version":"1"}}}}"#, good_proof(n)).into_bytes().into_iter().chain(*b"\n").collect()
            }),
        ),
        (
            "wrong-case type",
            Box::new(move |n| {
                format!(r#"{{"id":"1","msg_type":"Handshake","from_peer":"hubA","timestamp":1,"payload":{{"proof":"{}","version":"1"}}}}"#, good_proof(n)).into_bytes().into_iter().chain(*b"\n").collect()
            }),
        ),
        (
            "mutual-auth without a nonce (a transcript proof)",
            Box::new(move |n| {
                let hs = crate::relay::message::Handshake {
                    proof: String::new(),
                    version: "1".into(),
                    listen_port: None,
                    transient: None,
                    proto: Some(1),
                    features: Some(vec!["mutual-auth".into()]),
                    nonce: None,
                };
                let proof = crate::relay::transcript::Transcript::new("hubA", "hubB", n, &hs)
                    .dialer_proof(&KEY);
                format!(r#"{{"id":"1","msg_type":"handshake","from_peer":"hubA","timestamp":1,"payload":{{"proof":"{proof}","version":"1","proto":1,"features":["mutual-auth"]}}}}"#).into_bytes().into_iter().chain(*b"\n").collect()
            }),
        ),
        (
            "an over-long handshake line",
            Box::new(|_| vec![b'x'; HANDSHAKE_LINE_CAP_BYTES + 1]),
        ),
    ];
    for (name, make) in cases {
        let mut a = Session::acceptor(
            cfg("hubB", &Feature::ALL, t0),
            keys_for("hubA", auth_ok(true)),
            [0x22; 32],
            2,
            t0,
        );
        let nonce = nonce_of_challenge(&drain(&mut a));
        a.handle_input(&make(&nonce), t0);
        assert_eq!(a.poll_transmit(), None, "{name}: no ack");
        let evs = events(&mut a);
        assert!(closed_reason(&evs).is_some(), "{name}: {evs:?}");
    }
}

#[test]
fn handshake_deadline_frees_the_slot_exactly_on_time() {
    let t0 = crate::kernel::deadline::test_origin();
    let mut a = Session::acceptor(
        cfg("hubB", &Feature::ALL, t0),
        keys_for("hubA", auth_ok(true)),
        [0x22; 32],
        2,
        t0,
    );
    let mut d = Session::dialer(
        cfg("hubA", &Feature::ALL, t0),
        "hubB",
        auth_ok(true),
        [0x11; 32],
        1,
        t0,
    );
    for s in [&mut a, &mut d] {
        assert_eq!(s.poll_timeout(), Some(t0 + Duration::from_secs(10)));
        s.handle_timeout(t0 + Duration::from_millis(9_999));
        assert!(s.poll_event().is_none());
        s.handle_timeout(t0 + Duration::from_secs(10));
        assert!(
            matches!(s.poll_event(), Some(SessionEvent::Closed { reason }) if reason.contains("handshake not finished"))
        );
        assert_eq!(s.poll_timeout(), None);
    }
}

// ----- after the handshake -----

#[test]
fn liveness_expires_exactly_at_three_intervals_and_other_traffic_does_not_count() {
    let t0 = crate::kernel::deadline::test_origin();
    let feats = [Feature::UnknownOk, Feature::MutualAuth];
    let mut d = Session::dialer(
        cfg("hubA", &feats, t0),
        "hubB",
        auth_ok(true),
        [1; 32],
        1,
        t0,
    );
    let mut a = Session::acceptor(
        cfg("hubB", &feats, t0),
        keys_for("hubA", auth_ok(true)),
        [2; 32],
        2,
        t0,
    );
    d.handle_input(&drain(&mut a), t0);
    a.handle_input(&drain(&mut d), t0);
    d.handle_input(&drain(&mut a), t0);
    let up = t0 + Duration::from_secs(5);
    // The dialer beats once at `up`; after that only task traffic reaches the acceptor.
    d.handle_timeout(up);
    a.handle_input(&drain(&mut d), up);
    assert_eq!(a.stats().last_heartbeat_received, Some(up));
    let dead_at = up + INTERVAL * 3;
    assert_eq!(a.poll_timeout(), Some(t0), "its own first beat is due");
    let mut t = up;
    while t < dead_at {
        t = (t + Duration::from_secs(7)).min(dead_at - Duration::from_millis(1));
        let m = d.message(MsgType::KnowledgeRequest, json!({"since_epoch": 0}), t);
        d.send(m).unwrap();
        a.handle_input(&drain(&mut d), t);
        a.handle_timeout(t);
        if t == dead_at - Duration::from_millis(1) {
            break;
        }
    }
    assert!(
        closed_reason(&events(&mut a)).is_none(),
        "alive 1 ms before 3 intervals"
    );
    assert_eq!(a.state(), SessionState::Established);
    assert!(a.poll_timeout().unwrap() <= dead_at);
    a.handle_timeout(dead_at);
    let evs = events(&mut a);
    assert!(
        closed_reason(&evs)
            .unwrap()
            .contains("no heartbeat from hubA for 3 intervals"),
        "{evs:?}"
    );
}

#[test]
fn hb_delta_applies_deltas_and_sends_a_full_beat_every_tenth() {
    let mut net = Net::v1(&Feature::ALL, &Feature::ALL);
    let mut dir = directory(50, "0.1.0");
    net.a.set_directory(dir.clone());
    net.pump();
    let mut seen = Vec::new();
    for i in 0..30u32 {
        // One agent changes per interval; one is removed and one added now and then.
        dir.agents.insert(
            format!("agent-{:02}", i % 50),
            AgentEntry {
                parked: i,
                queued: i + 1,
                ..Default::default()
            },
        );
        if i % 7 == 3 {
            dir.agents.remove(&format!("agent-{:02}", 49 - i));
            dir.agents.insert(format!("new-{i}"), AgentEntry::default());
        }
        net.a.set_directory(dir.clone());
        net.run_until(net.now + INTERVAL);
        let last = net.ev_d.iter().rev().find_map(|e| match e {
            SessionEvent::Heartbeat { directory, .. } => Some(directory.clone()),
            _ => None,
        });
        seen.push(last == Some(dir.clone()));
    }
    assert!(
        seen.iter().all(|&x| x),
        "the dialer's view follows the acceptor's directory"
    );
    // Decode the acceptor's beats: full at seq 1, 11, 21, 31; deltas in between, much smaller.
    let (msgs, _) = split_lines_then_frames(&net.a2d, 2);
    let beats: Vec<&RelayMessage> = msgs
        .iter()
        .filter(|m| m.msg_type == MsgType::Heartbeat)
        .collect();
    let full_seqs: Vec<u64> = beats
        .iter()
        .filter(|m| m.payload.get("agents").is_some())
        .map(|m| m.payload["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(full_seqs, [1, 11, 21, 31]);
    let size = |m: &RelayMessage| m.encode_json().len();
    let full = beats
        .iter()
        .filter(|m| m.payload.get("agents").is_some())
        .map(|m| size(m))
        .max()
        .unwrap();
    let delta = beats
        .iter()
        .filter(|m| m.payload.get("base").is_some())
        .map(|m| size(m))
        .max()
        .unwrap();
    assert!(delta * 5 < full, "delta {delta} bytes vs full {full}");
    // Every beat was acked (hb-delta) and acks never reached the application.
    let acks = split_lines_then_frames(&net.d2a, 1)
        .0
        .iter()
        .filter(|m| m.msg_type == MsgType::Ack)
        .count();
    assert_eq!(acks, beats.len());
    assert!(!net
        .ev_a
        .iter()
        .any(|e| matches!(e, SessionEvent::Message(_))));
}

/// Two v1 sessions without frame-bin, so test code can read and inject lines between them
/// (a link without frame-mac: only with `allow_claudectl` on).
fn line_pair(features: &[Feature]) -> (Session, Session, Instant) {
    let t0 = crate::kernel::deadline::test_origin();
    let mut d = Session::dialer(
        cfg("hubA", features, t0),
        "hubB",
        auth_ok(true),
        [1; 32],
        1,
        t0,
    );
    let mut a = Session::acceptor(
        cfg("hubB", features, t0),
        keys_for("hubA", auth_ok(true)),
        [2; 32],
        2,
        t0,
    );
    d.handle_input(&drain(&mut a), t0);
    a.handle_input(&drain(&mut d), t0);
    d.handle_input(&drain(&mut a), t0);
    assert!(Net::established(&events(&mut d)).is_some());
    assert!(Net::established(&events(&mut a)).is_some());
    (d, a, t0)
}

fn inject(s: &mut Session, msg_type: &str, id: &str, payload: Value, now: Instant) {
    let line = format!(
        "{{\"id\":\"{id}\",\"msg_type\":\"{msg_type}\",\"from_peer\":\"hubA\",\"timestamp\":{T0_MS},\"payload\":{payload}}}\n"
    );
    s.handle_input(line.as_bytes(), now);
}

#[test]
fn hb_delta_resync_both_sides() {
    let (mut d, mut a, t0) =
        line_pair(&[Feature::UnknownOk, Feature::MutualAuth, Feature::HbDelta]);
    // Receiver side: a delta against a base it never had is acked with resync.
    inject(
        &mut a,
        "heartbeat",
        "hb-x",
        json!({"seq": 9, "base": 8, "upsert": [], "remove": []}),
        t0,
    );
    let out = split_lines(&drain(&mut a));
    let ack = RelayMessage::decode_line(&out[0]).unwrap();
    assert_eq!(ack.msg_type, MsgType::Ack);
    assert_eq!(ack.payload, json!({"ack_id": "hb-x", "resync": true}));
    assert!(matches!(
        events(&mut a).as_slice(),
        [SessionEvent::Heartbeat { .. }]
    ));

    // Sender side: beats 1 (full) and 2 (delta, after 1 was acked); then the peer asks for a
    // resync of beat 2: beat 3 is full.
    let dir = directory(3, "0.1.0");
    d.set_directory(dir.clone());
    let beat = |d: &mut Session, t: Instant| {
        d.handle_timeout(t);
        let lines = split_lines(&drain(d));
        RelayMessage::decode_line(lines.last().unwrap()).unwrap()
    };
    let b1 = beat(&mut d, t0);
    assert_eq!(b1.payload["seq"], 1);
    assert!(b1.payload.get("agents").is_some());
    inject(&mut d, "ack", "a1", json!({"ack_id": b1.id}), t0);
    let b2 = beat(&mut d, t0 + INTERVAL);
    assert_eq!(
        (b2.payload["seq"].as_u64(), b2.payload["base"].as_u64()),
        (Some(2), Some(1))
    );
    inject(
        &mut d,
        "ack",
        "a2",
        json!({"ack_id": b2.id, "resync": true}),
        t0 + INTERVAL,
    );
    let b3 = beat(&mut d, t0 + INTERVAL * 2);
    assert_eq!(b3.payload["seq"], 3);
    assert!(
        b3.payload.get("agents").is_some(),
        "full after a resync request: {}",
        b3.payload
    );
    assert!(b3.payload.get("base").is_none());
    // Acks of our beats are the session's; any other ack goes to the application.
    inject(
        &mut d,
        "ack",
        "a3",
        json!({"ack_id": "task-42"}),
        t0 + INTERVAL * 2,
    );
    let evs = events(&mut d);
    assert!(
        matches!(evs.as_slice(), [SessionEvent::Message(m)] if m.payload["ack_id"] == "task-42"),
        "{evs:?}"
    );
}

#[test]
fn unknown_types_are_reported_once_per_type_and_dropped() {
    let (_d, mut a, t0) = line_pair(&Feature::ALL[..2]);
    inject(&mut a, "bus_relay", "u1", json!({"to": "x@y"}), t0);
    inject(&mut a, "bus_relay", "u2", json!({}), t0);
    inject(&mut a, "BusRelay", "u3", json!({}), t0);
    // A known v1 type on a link that did not agree its feature is never acted on either.
    let fwd = json!({"envelope": "{}", "hop": 1});
    inject(&mut a, "bus_forward", "f1", fwd.clone(), t0);
    inject(&mut a, "bus_forward", "f2", fwd, t0);
    inject(
        &mut a,
        "knowledge_request",
        "k1",
        json!({"since_epoch": 3}),
        t0,
    );
    let evs = events(&mut a);
    let unknown: Vec<&str> = evs
        .iter()
        .filter_map(|e| match e {
            SessionEvent::UnknownType { msg_type } => Some(msg_type.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(unknown, ["bus_relay", "BusRelay"]);
    let not_agreed: Vec<&String> = evs
        .iter()
        .filter_map(|e| match e {
            SessionEvent::Log(l) if l.contains("bus_forward") => Some(l),
            _ => None,
        })
        .collect();
    assert_eq!(not_agreed.len(), 1, "{evs:?}");
    assert!(not_agreed[0].contains("bus-forward"), "{not_agreed:?}");
    assert!(!evs
        .iter()
        .any(|e| matches!(e, SessionEvent::Message(m) if m.msg_type == MsgType::BusForward)));
    assert!(
        matches!(evs.last(), Some(SessionEvent::Message(m)) if m.msg_type == MsgType::KnowledgeRequest)
    );
    assert_eq!(a.state(), SessionState::Established);
    assert_eq!(a.poll_transmit(), None, "unknown types are never acked");
}

#[test]
fn duplicate_ids_among_the_last_thousand_are_dropped() {
    let (_d, mut a, t0) = line_pair(&Feature::ALL[..2]);
    let p = json!({"since_epoch": 1});
    inject(&mut a, "knowledge_request", "dup", p.clone(), t0);
    inject(&mut a, "knowledge_request", "dup", p.clone(), t0);
    assert_eq!(events(&mut a).len(), 1);
    assert_eq!(a.stats().duplicates_dropped, 1);
    for i in 0..999 {
        inject(
            &mut a,
            "knowledge_request",
            &format!("other-{i}"),
            p.clone(),
            t0,
        );
    }
    inject(&mut a, "knowledge_request", "dup", p.clone(), t0);
    assert_eq!(
        a.stats().duplicates_dropped,
        2,
        "still within the last 1000"
    );
    inject(&mut a, "knowledge_request", "other-last", p.clone(), t0);
    inject(&mut a, "knowledge_request", "dup", p, t0);
    assert_eq!(
        a.stats().duplicates_dropped,
        2,
        "pushed out of the window: accepted again"
    );
}

#[test]
fn invalid_payloads_of_known_types_are_dropped_and_wrong_envelopes_close() {
    let (_d, mut a, t0) = line_pair(&Feature::ALL[..2]);
    inject(
        &mut a,
        "delegate_task",
        "bad1",
        json!({"task_id": "t", "prompt": "secret prompt text"}),
        t0,
    );
    let evs = events(&mut a);
    assert!(
        matches!(evs.as_slice(), [SessionEvent::Log(l)] if l.contains("dropped a delegate_task") && !l.contains("secret")),
        "{evs:?}"
    );
    assert_eq!(a.stats().invalid_dropped, 1);
    assert_eq!(a.state(), SessionState::Established);
    // A wrong-case type (fatal to v0 readers) is a protocol error: the link closes.
    inject(&mut a, "Heartbeat", "w1", json!({}), t0);
    assert!(closed_reason(&events(&mut a))
        .unwrap()
        .contains("wrong case"));
}

#[test]
fn send_refuses_what_the_link_did_not_negotiate() {
    let t0 = crate::kernel::deadline::test_origin();
    let mut d = Session::dialer(
        cfg("hubA", &Feature::ALL, t0),
        "hubB",
        auth_ok(false),
        [1; 32],
        1,
        t0,
    );
    let m = d.message(MsgType::KnowledgeRequest, json!({"since_epoch": 0}), t0);
    assert_eq!(d.send(m.clone()), Err(SendError::NotEstablished));
    let (mut d, _a, t0) = line_pair(&Feature::ALL[..2]);
    for t in [
        MsgType::Heartbeat,
        MsgType::Challenge,
        MsgType::Handshake,
        MsgType::HandshakeAck,
    ] {
        let m = d.message(t.clone(), json!({}), t0);
        assert_eq!(d.send(m), Err(SendError::SessionOwned(t)));
    }
    let m = d.message(MsgType::Unknown("bus_forward".into()), json!({}), t0);
    assert!(matches!(d.send(m), Err(SendError::NotNegotiated { .. })));
    let m = d.message(MsgType::KnowledgeRequest, json!({"since": 0}), t0);
    assert!(matches!(d.send(m), Err(SendError::InvalidPayload(_))));
    let mut m = d.message(MsgType::KnowledgeRequest, json!({"since_epoch": 0}), t0);
    m.from_peer = "someone".into();
    assert!(matches!(d.send(m), Err(SendError::BadEnvelope(_))));
    let big = "x".repeat(super::message::LINE_CAP_BYTES);
    let m = d.message(
        MsgType::KnowledgeSync,
        json!({"units": [big], "sync_epoch": 1}),
        t0,
    );
    assert!(matches!(d.send(m), Err(SendError::TooLarge { .. })));
    // v1 peers get every v0 type, including those 0.64 does not know.
    let m = d.message(MsgType::HiveJoinRequest, json!({}), t0);
    assert_eq!(d.send(m), Ok(()));
    d.close("shutting down");
    let m = d.message(MsgType::KnowledgeRequest, json!({"since_epoch": 0}), t0);
    assert_eq!(d.send(m), Err(SendError::Closed));
    assert_eq!(closed_reason(&events(&mut d)), Some("shutting down"));
}

#[test]
fn session_transfer_crosses_a_frame_link_raw() {
    let mut net = Net::v1(&Feature::ALL, &Feature::ALL);
    net.pump();
    let raw: Vec<u8> = (0..100_000u32).map(|i| (i % 97) as u8).collect();
    let b64 = super::base64::encode(&raw);
    let payload =
        json!({"session_id": "s", "cwd": "/w", "seq": 0, "total": 1, "digest": "00", "data": b64});
    let m = net.d.message(MsgType::SessionTransfer, payload, net.now);
    let before = net.d2a.len();
    net.d.send(m.clone()).unwrap();
    net.pump();
    let wire = &net.d2a[before..];
    assert!(
        wire.len() < raw.len(),
        "compressed: {} bytes on the wire for {} raw",
        wire.len(),
        raw.len()
    );
    assert!(
        !wire.windows(32).any(|w| w == &b64.as_bytes()[..32]),
        "no base64 in frames"
    );
    let mut dec = FrameDecoder::new();
    dec.push(&strip_tags(wire));
    let body = dec.next_frame().unwrap().unwrap().body;
    assert!(body.ends_with(&raw), "the chunk travels raw");
    let got = net.ev_a.iter().find_map(|e| match e {
        SessionEvent::Message(x) => Some(x.clone()),
        _ => None,
    });
    assert_eq!(got, Some(m));
}

/// How many base64 encodes and decodes each side runs for one chunk, on each kind of link,
/// whether the application gives the chunk raw (`with_chunk`) or as base64 text. Frames: none
/// (for text, the sender's check decodes once and keeps the bytes). Lines: one per side.
#[test]
fn a_chunk_is_converted_at_most_once_per_side_and_never_on_frames() {
    use super::base64;
    use Feature::*;
    let raw: Vec<u8> = (0..70_000u32).map(|i| (i * 13 % 256) as u8).collect();
    let head = json!({"session_id": "s", "cwd": "/w", "seq": 0, "total": 1, "digest": "00"});
    let mut text_payload = head.clone();
    text_payload["data"] = json!(base64::encode(&raw));
    let links: [(&str, Vec<Feature>); 3] = [
        ("lines", vec![UnknownOk, MutualAuth, HbDelta]),
        ("frames", vec![UnknownOk, MutualAuth, FrameBin, HbDelta]),
        ("frames + lz4", Feature::ALL.to_vec()),
    ];
    for (link, features) in links {
        for given_raw in [true, false] {
            let mut net = Net::v1(&features, &features);
            net.pump();
            let m = if given_raw {
                net.d
                    .message(MsgType::SessionTransfer, head.clone(), net.now)
                    .with_chunk(raw.clone())
            } else {
                net.d
                    .message(MsgType::SessionTransfer, text_payload.clone(), net.now)
            };
            let case = format!(
                "{link}, chunk given {}",
                if given_raw { "raw" } else { "as text" }
            );
            let c0 = base64::calls::get();
            net.d.send(m.clone()).unwrap();
            let wire = drain(&mut net.d);
            let c1 = base64::calls::get();
            net.a.handle_input(&wire, net.now);
            let evs = events(&mut net.a);
            let c2 = base64::calls::get();
            let sender = (c1.0 - c0.0, c1.1 - c0.1);
            let receiver = (c2.0 - c1.0, c2.1 - c1.1);
            let framed = link != "lines";
            let want_sender = match (framed, given_raw) {
                (true, true) => (0, 0),
                (true, false) => (0, 1), // the check's decode, kept for the frame
                (false, true) => (1, 0), // the line's encode
                (false, false) => (0, 1), // the check's decode; the text goes out as given
            };
            let want_receiver = if framed { (0, 0) } else { (0, 1) };
            assert_eq!(sender, want_sender, "{case}: sender (encodes, decodes)");
            assert_eq!(
                receiver, want_receiver,
                "{case}: receiver (encodes, decodes)"
            );

            let got: Vec<&RelayMessage> = evs
                .iter()
                .filter_map(|e| match e {
                    SessionEvent::Message(x) => Some(x),
                    _ => None,
                })
                .collect();
            assert_eq!(got.len(), 1, "{case}: {evs:?}");
            assert_eq!(*got[0], m, "{case}");
            assert_eq!(
                got[0].chunk().map(|c| &c[..]),
                Some(&raw[..]),
                "{case}: the application gets the bytes"
            );
            if !framed {
                // Byte-identical to the v0 line, whichever form the sender held.
                assert_eq!(wire, m.encode_line(), "{case}");
                assert_eq!(
                    wire,
                    RelayMessage::decode_line(&wire[..wire.len() - 1])
                        .unwrap()
                        .encode_line()
                );
            } else {
                assert!(
                    !wire
                        .windows(32)
                        .any(|w| w == &text_payload["data"].as_str().unwrap().as_bytes()[..32]),
                    "{case}: no base64 in frames"
                );
            }
        }
    }
}

#[test]
fn protocol_errors_on_a_frame_link_close_it() {
    for bad in [
        vec![0, 0, 0, 2, 0x02, b'{'],
        vec![0xff, 0xff, 0xff, 0xff],
        vec![0, 0, 0, 1, 0],
    ] {
        let mut net = Net::v1(&Feature::ALL, &Feature::ALL);
        net.pump();
        net.a.handle_input(&bad, net.now);
        let evs = events(&mut net.a);
        assert!(
            closed_reason(&evs)
                .unwrap()
                .starts_with("protocol error from hubA"),
            "{bad:?}: {evs:?}"
        );
    }
}

#[test]
fn wall_clock_and_ids() {
    let t0 = crate::kernel::deadline::test_origin();
    let w = WallClock {
        at: t0,
        unix_ms: T0_MS,
    };
    assert_eq!(w.unix_ms_at(t0 + Duration::from_millis(1500)), T0_MS + 1500);
    let mut s = Session::dialer(
        cfg("hubA", &Feature::ALL, t0),
        "hubB",
        auth_ok(false),
        [1; 32],
        99,
        t0,
    );
    let m1 = s.message(
        MsgType::Ack,
        json!({"ack_id": "x"}),
        t0 + Duration::from_secs(2),
    );
    let m2 = s.message(
        MsgType::Ack,
        json!({"ack_id": "x"}),
        t0 + Duration::from_secs(2),
    );
    assert_eq!(m1.timestamp, T0_MS + 2000);
    assert!(
        m1.id.starts_with(&format!("msg_{}_1_", T0_MS + 2000)),
        "{}",
        m1.id
    );
    assert_ne!(m1.id, m2.id);
    s.set_wall_clock(WallClock { at: t0, unix_ms: 5 });
    assert_eq!(s.message(MsgType::Ack, json!({}), t0).timestamp, 5);
}

#[test]
fn reconnect_backoff_is_10_20_40_then_60() {
    let secs: Vec<u64> = (0..6)
        .map(|i| super::reconnect_delay(i).as_secs())
        .collect();
    assert_eq!(secs, [10, 20, 40, 60, 60, 60]);
}

#[test]
fn peer_auth_debug_never_shows_the_key() {
    let text = format!(
        "{:?}",
        PeerAuth {
            key: [0xab; 32],
            allow_claudectl: true,
            forward: true,
        }
    );
    assert!(!text.contains("171") && !text.contains("ab"), "{text}");
}

#[test]
fn acceptor_ignores_feature_names_it_does_not_know() {
    let t0 = crate::kernel::deadline::test_origin();
    let mut a = Session::acceptor(
        cfg("hubB", &Feature::ALL, t0),
        keys_for("hubA", auth_ok(true)),
        [0x22; 32],
        2,
        t0,
    );
    let nonce = nonce_of_challenge(&drain(&mut a));
    let payload = v1_handshake(
        "hubB",
        &nonce,
        json!({"version": "9.0.0", "proto": 1,
            "features": ["bus-forward", "lz4", "telepathy", "frame-bin", "lz4"]}),
    );
    inject(&mut a, "handshake", "h1", payload, t0);
    let ack = RelayMessage::decode_line(&split_lines(&drain(&mut a))[0]).unwrap();
    assert_eq!(
        ack.payload,
        json!({"status": "ok", "proto": 1, "features": ["frame-bin", "lz4"], "version": "0.1.0"})
    );
    assert_eq!(
        Net::established(&events(&mut a)),
        Some((
            "hubA".into(),
            1,
            vec![Feature::FrameBin, Feature::Lz4],
            false,
            "9.0.0".into()
        ))
    );
    assert!(a.framed());
}

#[test]
fn sessions_can_move_between_threads() {
    fn assert_send<T: Send>() {}
    assert_send::<Session>();
    assert_send::<SessionEvent>();
}

mod attack;
mod cards;
mod claudectl;
mod headroom;
mod limits;
mod liveness;
