//! Fuzz target `relay_session`: one relay connection's state machine (`relay::Session`,
//! docs/relay-protocol.md §2–§7), as acceptor or as dialer, fed bytes split anywhere and
//! driven on a virtual clock. Alone, it reads whatever the input says the peer sent. With an
//! honest counterpart (a second `Session` holding the same or another key), the input decides
//! when each side's bytes arrive, and may flip, drop, inject or replay bytes on the way, so
//! the handshake completes and the link's frames, heartbeats and messages are reached whatever
//! proofs the handshake asks for.
//!
//! Checks, for both sessions: no panic; at most one `Established` and one `Closed`, nothing
//! after `Closed` (no event, no byte), `state()` agreeing with the events; messages and
//! heartbeats only on an established link; no event text ever holds the key. Without
//! tampering, everything one side sent on an established link arrives at the other, in order.

use super::cursor::{Cursor, Writer};
use agent_hub_proto::relay::auth::to_hex;
use agent_hub_proto::relay::heartbeat::{AgentEntry, Directory};
use agent_hub_proto::relay::message::{V0_TYPES, V1_TYPES};
use agent_hub_proto::relay::session::{
    PeerAuth, Role, Session, SessionConfig, SessionEvent, SessionState, WallClock,
};
use agent_hub_proto::relay::{Feature, MsgType, RelayMessage};
use serde_json::Value;
use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

const KEY: [u8; 32] = [0x3c; 32];
const OTHER_KEY: [u8; 32] = [0xc3; 32];
/// The session under test and its counterpart.
const US: &str = "hubS";
const THEM: &str = "hubC";
const T0_MS: i64 = 1_784_616_051_000;

/// Header bits (the first byte); the next two 16-bit words (little-endian) are the feature
/// sets, ours then theirs (bit i: `Feature::ALL[i]`).
const H_DIALER: u8 = 1;
const H_ALLOW_CLAUDECTL: u8 = 2;
const H_FORWARD: u8 = 4;
const H_HONEST: u8 = 8;
const H_WRONG_KEY: u8 = 16;
const H_TRANSIENT: u8 = 32;
/// The counterpart refuses v0 while we allow it (or the other way round).
const H_PEER_STRICT: u8 = 64;

/// What one session did, as the layer above sees it.
#[derive(Default)]
struct Seen {
    established: bool,
    closed: bool,
    /// Ids of the application messages received, in order.
    received: Vec<String>,
    /// Ids of the application messages this side sent (`send` accepted them), in order.
    sent: Vec<String>,
}

struct End {
    s: Session,
    seen: Seen,
    /// Bytes it wrote that the other side has not read yet.
    outbox: Vec<u8>,
    /// Everything it ever wrote (for replays).
    history: Vec<u8>,
}

impl End {
    fn new(s: Session) -> End {
        End {
            s,
            seen: Seen::default(),
            outbox: Vec::new(),
            history: Vec::new(),
        }
    }

    /// Collects its bytes and events, checking what must hold.
    fn drain(&mut self, key_hex: &str, input_has_key: bool) {
        while let Some(bytes) = self.s.poll_transmit() {
            assert!(!bytes.is_empty(), "an empty transmit");
            assert!(
                !self.seen.closed,
                "{:?}: wrote {} bytes after Closed",
                self.s.role(),
                bytes.len()
            );
            self.outbox.extend_from_slice(&bytes);
            self.history.extend_from_slice(&bytes);
        }
        while let Some(ev) = self.s.poll_event() {
            assert!(
                !self.seen.closed,
                "{:?}: an event after Closed: {ev:?}",
                self.s.role()
            );
            let text = match &ev {
                SessionEvent::Established { peer, .. } => {
                    assert!(!self.seen.established, "established twice");
                    self.seen.established = true;
                    peer.clone()
                }
                SessionEvent::Closed { reason } => {
                    self.seen.closed = true;
                    reason.clone()
                }
                SessionEvent::Log(line) => line.clone(),
                SessionEvent::UnknownType { msg_type } => msg_type.clone(),
                SessionEvent::Message(m) => {
                    assert!(
                        self.seen.established,
                        "a message before the link is up: {m:?}"
                    );
                    // A late heartbeat ack surfaces as a message too; only the application's
                    // own messages are counted.
                    if m.msg_type != MsgType::Ack {
                        self.seen.received.push(m.id.clone());
                    }
                    String::new()
                }
                SessionEvent::Heartbeat { .. } => {
                    assert!(self.seen.established, "a heartbeat before the link is up");
                    String::new()
                }
                // A variant added later: nothing to check.
                #[allow(unreachable_patterns)]
                _ => String::new(),
            };
            if !input_has_key {
                assert!(!text.contains(key_hex), "an event holds the key: {text}");
            }
        }
        let state = self.s.state();
        assert_eq!(
            state == SessionState::Closed,
            self.seen.closed,
            "{:?} is {state:?}, events say closed={}",
            self.s.role(),
            self.seen.closed
        );
        if self.seen.established && !self.seen.closed {
            assert_eq!(state, SessionState::Established);
        }
    }
}

/// Bit i of `mask` is `Feature::ALL[i]`; a mask is 16 bits wide so that every feature
/// (nine today) can be switched on or off, and bits past the last feature are ignored.
fn features(mask: u16) -> Vec<Feature> {
    Feature::ALL
        .into_iter()
        .enumerate()
        .filter(|(i, _)| mask.checked_shr(*i as u32).is_some_and(|m| m & 1 != 0))
        .map(|(_, f)| f)
        .collect()
}

fn config(name: &str, mask: u16, t0: Instant, header: u8) -> SessionConfig {
    let mut c = SessionConfig::new(
        name,
        "0.1.0",
        WallClock {
            at: t0,
            unix_ms: T0_MS,
        },
    );
    c.features = features(mask);
    c.heartbeat_interval = Duration::from_secs(30);
    c.handshake_timeout = Duration::from_secs(10);
    c.transient = header & H_TRANSIENT != 0;
    c.listen_port = (header & 0x80 != 0).then_some(46111);
    c
}

/// Every type the application might try to send, and one no build knows.
fn msg_types() -> Vec<MsgType> {
    V0_TYPES
        .iter()
        .chain(V1_TYPES.iter())
        .cloned()
        .chain([MsgType::Unknown("bus_relay".into())])
        .collect()
}

/// An application message from `e`: the type the byte picks, the payload the chunk holds (as
/// JSON, or as a string when it is not JSON).
fn app_message(e: &mut End, ty: u8, payload: &[u8], now: Instant) {
    let types = msg_types();
    let t = types[usize::from(ty) % types.len()].clone();
    let payload = serde_json::from_slice::<Value>(payload)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(payload).into_owned()));
    let msg = e.s.message(t, payload, now);
    let (id, counted) = (msg.id.clone(), msg.msg_type != MsgType::Ack);
    if e.s.send(msg).is_ok() && counted {
        e.seen.sent.push(id);
    }
}

fn directory(chunk: &[u8]) -> Directory {
    let mut d = Directory {
        version: "0.1.0".into(),
        ..Directory::default()
    };
    for (i, part) in chunk.split(|&b| b == b',').take(64).enumerate() {
        let name = String::from_utf8_lossy(part).into_owned();
        d.agents.insert(
            name,
            AgentEntry {
                parked: i as u32 % 3,
                queued: i as u32,
                ..AgentEntry::default()
            },
        );
    }
    d
}

const OPS: u8 = 13;

pub fn run(data: &[u8]) {
    let input_has_key = super::contains(data, to_hex(&KEY[..8]).as_bytes());
    let key_hex = to_hex(&KEY);
    let mut c = Cursor::new(data);
    let header = c.u8();
    let (ours, theirs) = (c.u16(), c.u16());
    let t0 = Instant::now();
    let mut now = t0;
    let allow_claudectl = header & H_ALLOW_CLAUDECTL != 0;
    let auth = |key, allow_claudectl| PeerAuth {
        key,
        allow_claudectl,
        forward: header & H_FORWARD != 0,
    };
    let their_key = if header & H_WRONG_KEY != 0 {
        OTHER_KEY
    } else {
        KEY
    };
    let their_v0 = allow_claudectl != (header & H_PEER_STRICT != 0);
    let (us, them) = if header & H_DIALER != 0 {
        let us = Session::dialer(
            config(US, ours, t0, header),
            THEM,
            auth(KEY, allow_claudectl),
            [0x5a; 32],
            1,
            t0,
        );
        let keys = HashMap::from([(US.to_owned(), auth(their_key, their_v0))]);
        (
            us,
            Session::acceptor(config(THEM, theirs, t0, 0), keys, [0xa5; 32], 2, t0),
        )
    } else {
        let keys = HashMap::from([(THEM.to_owned(), auth(KEY, allow_claudectl))]);
        let us = Session::acceptor(config(US, ours, t0, header), keys, [0x5a; 32], 1, t0);
        let them = Session::dialer(
            config(THEM, theirs, t0, 0),
            US,
            auth(their_key, their_v0),
            [0xa5; 32],
            2,
            t0,
        );
        (us, them)
    };
    debug_assert_eq!(us.role() == Role::Dialer, header & H_DIALER != 0);
    let mut us = End::new(us);
    // Without an honest counterpart, the other side is whatever the input says.
    let mut them = (header & H_HONEST != 0).then(|| End::new(them));
    let mut tampered = false;
    us.drain(&key_hex, input_has_key);
    if let Some(t) = &mut them {
        t.drain(&key_hex, input_has_key);
    }
    while let Some(op) = c.op() {
        match op % OPS {
            // Bytes from "the peer", as the input gives them.
            0 => {
                let bytes = c.chunk();
                let split = usize::from(c.u8());
                let (a, b) = bytes.split_at(split.min(bytes.len()));
                us.s.handle_input(a, now);
                us.s.handle_input(b, now);
                tampered |= them.is_some() && !bytes.is_empty();
            }
            // The counterpart's pending bytes reach us (n of them; 0: all), in two reads.
            1 => {
                let n = usize::from(c.u16());
                let split = usize::from(c.u8());
                if let Some(t) = &mut them {
                    let n = if n == 0 {
                        t.outbox.len()
                    } else {
                        n.min(t.outbox.len())
                    };
                    let bytes: Vec<u8> = t.outbox.drain(..n).collect();
                    let (a, b) = bytes.split_at(split.min(bytes.len()));
                    us.s.handle_input(a, now);
                    us.s.handle_input(b, now);
                }
            }
            // Our pending bytes reach the counterpart.
            2 => {
                let n = usize::from(c.u16());
                if let Some(t) = &mut them {
                    let n = if n == 0 {
                        us.outbox.len()
                    } else {
                        n.min(us.outbox.len())
                    };
                    let bytes: Vec<u8> = us.outbox.drain(..n).collect();
                    t.s.handle_input(&bytes, now);
                } else {
                    us.outbox.clear();
                }
            }
            // A bit flipped in flight.
            3 => {
                let at = usize::from(c.u16());
                let mask = c.u8() | 1;
                if let Some(t) = &mut them {
                    if !t.outbox.is_empty() {
                        let i = at % t.outbox.len();
                        t.outbox[i] ^= mask;
                        tampered = true;
                    }
                }
            }
            // Bytes dropped in flight.
            4 => {
                let n = usize::from(c.u8());
                if let Some(t) = &mut them {
                    let n = n.min(t.outbox.len());
                    t.outbox.drain(..n);
                    tampered |= n > 0;
                }
            }
            // Bytes the counterpart sent earlier, played again.
            5 => {
                let from = usize::from(c.u16());
                let len = usize::from(c.u16());
                if let Some(t) = &them {
                    if !t.history.is_empty() {
                        let from = from % t.history.len();
                        let end = (from + len).min(t.history.len());
                        us.s.handle_input(&t.history[from..end], now);
                        tampered = true;
                    }
                }
            }
            // Time passes; both sides' timers run.
            6 => {
                let ms = match c.u8() % 3 {
                    0 => u64::from(c.u8()),
                    1 => u64::from(c.u16()) * 10,
                    _ => u64::from(c.u16()) * 1_000,
                };
                now += Duration::from_millis(ms);
                for e in std::iter::once(&mut us).chain(them.as_mut()) {
                    if e.s.poll_timeout().is_some_and(|t| t <= now) {
                        e.s.handle_timeout(now);
                    }
                }
            }
            7 => {
                let ty = c.u8();
                let payload = c.chunk();
                if let Some(t) = &mut them {
                    app_message(t, ty, payload, now);
                }
            }
            8 => {
                let ty = c.u8();
                let payload = c.chunk();
                app_message(&mut us, ty, payload, now);
            }
            9 => {
                let d = directory(c.chunk());
                let ours = c.u8() & 1 == 1;
                match &mut them {
                    Some(t) if !ours => t.s.set_directory(d),
                    _ => us.s.set_directory(d),
                }
            }
            10 => match c.u8() % 3 {
                0 => us.s.handle_eof(),
                1 => us.s.close("fuzz: closed by the layer above"),
                _ => {
                    if let Some(t) = &mut them {
                        t.s.close("fuzz: the counterpart went away");
                    }
                }
            },
            // The honest exchange until both are quiet.
            11 => pump(&mut us, &mut them, now, &key_hex, input_has_key),
            _ => {
                let ms = c.u64() as i64;
                us.s.set_wall_clock(WallClock {
                    at: now,
                    unix_ms: ms,
                });
            }
        }
        us.drain(&key_hex, input_has_key);
        match &mut them {
            Some(t) => t.drain(&key_hex, input_has_key),
            // Nobody reads what we write.
            None => {
                us.outbox.clear();
                us.history.clear();
            }
        }
    }
    // The end: whatever is in flight arrives, then nothing was lost on an untouched link.
    pump(&mut us, &mut them, now, &key_hex, input_has_key);
    if let Some(t) = &them {
        let up = |e: &End| e.seen.established && !e.seen.closed;
        if !tampered && up(&us) && up(t) {
            assert_eq!(
                us.seen.received, t.seen.sent,
                "messages lost or reordered to us"
            );
            assert_eq!(
                t.seen.received, us.seen.sent,
                "messages lost or reordered to them"
            );
        }
    }
}

fn pump(us: &mut End, them: &mut Option<End>, now: Instant, key_hex: &str, has_key: bool) {
    let Some(t) = them else { return };
    for _ in 0..64 {
        us.drain(key_hex, has_key);
        t.drain(key_hex, has_key);
        if us.outbox.is_empty() && t.outbox.is_empty() {
            return;
        }
        let x = std::mem::take(&mut t.outbox);
        let y = std::mem::take(&mut us.outbox);
        us.s.handle_input(&x, now);
        t.s.handle_input(&y, now);
    }
}

// ----- seeds -----

/// Writes inputs in the language `run` reads.
pub struct Script {
    w: Writer,
}

impl Script {
    pub fn new(header: u8, ours: u16, theirs: u16) -> Script {
        let mut w = Writer::new();
        w.u8(header).u16(ours).u16(theirs);
        Script { w }
    }
    pub fn input(&mut self, bytes: &[u8], split: u8) -> &mut Script {
        self.w.u8(0).chunk(bytes).u8(split);
        self
    }
    pub fn pump(&mut self) -> &mut Script {
        self.w.u8(11);
        self
    }
    pub fn deliver_to_us(&mut self, n: u16, split: u8) -> &mut Script {
        self.w.u8(1).u16(n).u8(split);
        self
    }
    pub fn deliver_to_them(&mut self) -> &mut Script {
        self.w.u8(2).u16(0);
        self
    }
    pub fn flip(&mut self, at: u16, mask: u8) -> &mut Script {
        self.w.u8(3).u16(at).u8(mask);
        self
    }
    pub fn replay(&mut self, from: u16, len: u16) -> &mut Script {
        self.w.u8(5).u16(from).u16(len);
        self
    }
    pub fn advance_secs(&mut self, secs: u16) -> &mut Script {
        self.w.u8(6).u8(2).u16(secs);
        self
    }
    pub fn they_send(&mut self, ty: &MsgType, payload: &Value) -> &mut Script {
        let i = msg_types().iter().position(|t| t == ty).unwrap_or(0);
        self.w
            .u8(7)
            .u8(i as u8)
            .chunk(payload.to_string().as_bytes());
        self
    }
    pub fn we_send(&mut self, ty: &MsgType, payload: &Value) -> &mut Script {
        let i = msg_types().iter().position(|t| t == ty).unwrap_or(0);
        self.w
            .u8(8)
            .u8(i as u8)
            .chunk(payload.to_string().as_bytes());
        self
    }
    pub fn directory(&mut self, names: &str, theirs: bool) -> &mut Script {
        self.w.u8(9).chunk(names.as_bytes()).u8(u8::from(!theirs));
        self
    }
    pub fn finish(&mut self) -> Vec<u8> {
        self.w.finish()
    }
}

/// Every feature on (bit i: `Feature::ALL[i]`).
const ALL: u16 = (1 << Feature::ALL.len()) - 1;
const NO_FRAMES: u16 = ALL & !0b1100; // without frame-bin and lz4: lines after the handshake

/// Honest links in both roles and feature sets with every catalogue payload sent each way,
/// the tampering ops on them, v0 links, and the bytes of a real handshake as raw input.
pub fn seeds(root: &Path) -> Vec<(String, Vec<u8>)> {
    let mut payloads: Vec<(MsgType, Value)> = Vec::new();
    let dir = root.join("protocol/relay");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    for p in files {
        let f: Value = serde_json::from_str(&std::fs::read_to_string(&p).expect("readable"))
            .expect("a fixture is JSON");
        for case in f["cases"].as_array().into_iter().flatten() {
            let line = case["line"].as_str().unwrap_or("");
            if let Ok(m) = RelayMessage::decode_line(line.as_bytes()) {
                payloads.push((m.msg_type.clone(), m.payload.clone()));
            }
        }
    }
    let mut out = Vec::new();
    let honest = |header: u8, ours: u16, theirs: u16| {
        let mut s = Script::new(header | H_HONEST, ours, theirs);
        s.pump().advance_secs(1).pump();
        s
    };
    for (name, header, ours, theirs) in [
        ("dialer-frames", H_DIALER | H_FORWARD, ALL, ALL),
        ("acceptor-frames", H_FORWARD, ALL, ALL),
        ("dialer-lines", H_DIALER, NO_FRAMES, NO_FRAMES),
        ("acceptor-lines", 0, NO_FRAMES, NO_FRAMES),
        ("dialer-v0", H_DIALER | H_ALLOW_CLAUDECTL, ALL, 0),
        ("acceptor-v0", H_ALLOW_CLAUDECTL, ALL, 0),
    ] {
        // A few catalogue payloads per seed (seeds stay under libFuzzer's 4 KiB default
        // length, so mutations stay cheap), each way in turn, then beats with a directory.
        for (n, group) in payloads.chunks(6).enumerate() {
            let mut s = honest(header, ours, theirs);
            for (i, (t, p)) in group.iter().enumerate() {
                if i % 2 == n % 2 {
                    s.they_send(t, p);
                } else {
                    s.we_send(t, p);
                }
            }
            s.pump();
            if n == 0 {
                s.directory("alpha,beta,gamma", true)
                    .advance_secs(31)
                    .pump();
                s.directory("alpha", true).advance_secs(31).pump();
            }
            out.push((format!("honest-{name}-{n}"), s.finish()));
        }
        let mut s = honest(header, ours, theirs);
        s.flip(3, 0x20).deliver_to_us(0, 7);
        out.push((format!("flipped-{name}"), s.finish()));
        let mut s = honest(header, ours, theirs);
        s.they_send(
            &MsgType::TaskStatus,
            &payloads
                .iter()
                .find(|(t, _)| *t == MsgType::TaskStatus)
                .map(|x| x.1.clone())
                .unwrap_or(Value::Null),
        );
        s.pump().replay(0, 4096).pump();
        out.push((format!("replayed-{name}"), s.finish()));
    }
    out.push((
        "wrong-key".to_owned(),
        honest(H_DIALER | H_WRONG_KEY, ALL, ALL).finish(),
    ));
    out.push((
        "strict-peer".to_owned(),
        honest(H_ALLOW_CLAUDECTL | H_PEER_STRICT, ALL, 0).finish(),
    ));
    out.push((
        "handshake-timeout".to_owned(),
        Script::new(H_DIALER, ALL, ALL).advance_secs(11).finish(),
    ));
    // Raw input: the bytes an honest counterpart sends, recorded here, fed without it.
    for (name, header) in [("raw-as-acceptor", 0u8), ("raw-as-dialer", H_DIALER)] {
        let bytes = record_counterpart(header);
        let mut s = Script::new(header, ALL, ALL);
        let mut rest = &bytes[..];
        while !rest.is_empty() {
            let n = rest.len().min(200);
            s.input(&rest[..n], 9);
            rest = &rest[n..];
        }
        out.push((name.to_owned(), s.finish()));
    }
    out
}

/// What the counterpart writes during an honest handshake and the first beats.
fn record_counterpart(header: u8) -> Vec<u8> {
    let t0 = Instant::now();
    let a = |key| PeerAuth {
        key,
        allow_claudectl: false,
        forward: false,
    };
    let (mut us, mut them) = if header & H_DIALER != 0 {
        let us = Session::dialer(config(US, ALL, t0, 0), THEM, a(KEY), [0x5a; 32], 1, t0);
        let keys = HashMap::from([(US.to_owned(), a(KEY))]);
        (
            us,
            Session::acceptor(config(THEM, ALL, t0, 0), keys, [0xa5; 32], 2, t0),
        )
    } else {
        let keys = HashMap::from([(THEM.to_owned(), a(KEY))]);
        let us = Session::acceptor(config(US, ALL, t0, 0), keys, [0x5a; 32], 1, t0);
        (
            us,
            Session::dialer(config(THEM, ALL, t0, 0), US, a(KEY), [0xa5; 32], 2, t0),
        )
    };
    let mut recorded = Vec::new();
    for _ in 0..8 {
        let x: Vec<u8> = std::iter::from_fn(|| them.poll_transmit())
            .flatten()
            .collect();
        let y: Vec<u8> = std::iter::from_fn(|| us.poll_transmit())
            .flatten()
            .collect();
        recorded.extend_from_slice(&x);
        us.handle_input(&x, t0);
        them.handle_input(&y, t0);
        if them.poll_timeout().is_some_and(|t| t <= t0) {
            them.handle_timeout(t0);
        }
        if us.poll_timeout().is_some_and(|t| t <= t0) {
            us.handle_timeout(t0);
        }
    }
    recorded
}
