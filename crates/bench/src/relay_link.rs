//! Two `relay::Session`s over a real loopback TCP connection, with and without frames and lz4,
//! and the bytes of full against delta heartbeats.

use crate::base::Res;
use crate::options::IO_TIMEOUT;
use crate::relay_codec::{beat_directory, thread_cpu};
use crate::relay_corpus::{BEATS, BEAT_AGENTS, LINK_WRITE_BYTES, RELAY_T0_MS};
use crate::stats::{round1, us};
use agent_hub_proto::relay::frame::{decode_body, decode_frame};
use agent_hub_proto::relay::{
    Feature, MsgType, PeerAuth, RelayMessage, Session, SessionConfig, SessionEvent, SessionState,
    WallClock,
};
use serde_json::json;
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

pub(crate) const RELAY_KEY: [u8; 32] = [0x5a; 32];

pub(crate) fn relay_sessions(features: &[Feature], t0: Instant) -> (Session, Session) {
    let cfg = |name: &str| {
        let mut c = SessionConfig::new(
            name,
            env!("CARGO_PKG_VERSION"),
            WallClock {
                at: t0,
                unix_ms: RELAY_T0_MS,
            },
        );
        c.features = features.to_vec();
        c
    };
    // A link without frame-mac (the kinds measured here) is allowed only with allow_claudectl on
    // (docs/relay-protocol.md §3).
    let strict = agent_hub_proto::relay::framemac::missing_without_v0(features).is_empty();
    let auth = PeerAuth {
        key: RELAY_KEY,
        allow_claudectl: !strict,
        forward: false,
    };
    let d = Session::dialer(cfg("hubA"), "hubB", auth.clone(), [0x11; 32], 1, t0);
    let a = Session::acceptor(
        cfg("hubB"),
        HashMap::from([("hubA".to_owned(), auth)]),
        [0x22; 32],
        2,
        t0,
    );
    (d, a)
}

pub(crate) fn feature_list(fs: &[Feature]) -> String {
    fs.iter().map(|f| f.as_str()).collect::<Vec<_>>().join(",")
}

/// Moves a session's queued bytes to its socket and reads until the handshake is done.
pub(crate) fn link_handshake(s: &mut Session, sock: &mut TcpStream) -> Res<()> {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        while let Some(b) = s.poll_transmit() {
            sock.write_all(&b)
                .map_err(|e| format!("relay handshake write: {e}"))?;
        }
        while let Some(ev) = s.poll_event() {
            if let SessionEvent::Closed { reason } = ev {
                return Err(format!("relay handshake failed: {reason}"));
            }
        }
        if s.state() == SessionState::Established {
            return Ok(());
        }
        let n = sock
            .read(&mut buf)
            .map_err(|e| format!("relay handshake read: {e}"))?;
        if n == 0 {
            return Err("relay handshake: the peer closed".into());
        }
        s.handle_input(&buf[..n], Instant::now());
    }
}

/// One workload of the loopback link: what is sent and how much of it counts as payload.
pub(crate) struct Workload {
    pub(crate) name: String,
    pub(crate) msg_type: MsgType,
    /// Payloads sent in turn.
    pub(crate) payloads: Vec<serde_json::Value>,
    /// For transfers, the raw chunk that goes with each payload (`with_chunk`); else empty.
    pub(crate) chunks: Vec<Arc<[u8]>>,
    /// Payload bytes per message: the raw chunk for a transfer, the payload's JSON otherwise.
    pub(crate) payload_bytes: usize,
    pub(crate) count: usize,
}

pub(crate) struct LinkRow {
    pub(crate) link: &'static str,
    pub(crate) features: String,
    pub(crate) workload: String,
    pub(crate) msgs: usize,
    pub(crate) payload_bytes: u64,
    pub(crate) wire_bytes: u64,
    pub(crate) wall: Duration,
    pub(crate) send_cpu: Duration,
    pub(crate) recv_cpu: Duration,
}

impl LinkRow {
    pub(crate) fn per_sec(&self) -> f64 {
        self.msgs as f64 / self.wall.as_secs_f64()
    }
    pub(crate) fn payload_mb_s(&self) -> f64 {
        self.payload_bytes as f64 / 1e6 / self.wall.as_secs_f64()
    }
    pub(crate) fn wire_mb_s(&self) -> f64 {
        self.wire_bytes as f64 / 1e6 / self.wall.as_secs_f64()
    }
    pub(crate) fn to_json(&self) -> serde_json::Value {
        json!({
            "link": self.link, "features": self.features, "workload": self.workload,
            "messages": self.msgs, "wall_s": (self.wall.as_secs_f64() * 1000.0).round() / 1000.0,
            "frames_per_s": self.per_sec().round(), "payload_mb_per_s": round1(self.payload_mb_s()),
            "wire_mb_per_s": round1(self.wire_mb_s()), "payload_bytes": self.payload_bytes,
            "wire_bytes": self.wire_bytes,
            "wire_bytes_per_msg": (self.wire_bytes as f64 / self.msgs as f64).round(),
            "send_cpu_us_per_msg": round1(us(self.send_cpu) / self.msgs as f64),
            "recv_cpu_us_per_msg": round1(us(self.recv_cpu) / self.msgs as f64),
        })
    }
}

/// Two sessions over a real 127.0.0.1 TCP connection: the dialer (this thread) sends the
/// workload through `Session::message` + `Session::send`, the acceptor (a second thread) reads
/// the socket into `handle_input` and counts the `Message` events. The clock runs from a barrier
/// after the handshake until the acceptor has the last message.
pub(crate) fn link_run(link: &'static str, features: &[Feature], w: &Workload) -> Res<LinkRow> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")
        .map_err(|e| format!("relay bench listen: {e}"))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let mut dsock = TcpStream::connect(addr).map_err(|e| format!("relay bench connect: {e}"))?;
    let (mut asock, _) = listener
        .accept()
        .map_err(|e| format!("relay bench accept: {e}"))?;
    for s in [&dsock, &asock] {
        s.set_nodelay(true).map_err(|e| e.to_string())?;
        s.set_read_timeout(Some(IO_TIMEOUT))
            .map_err(|e| e.to_string())?;
        s.set_write_timeout(Some(IO_TIMEOUT))
            .map_err(|e| e.to_string())?;
    }
    let (mut d, mut a) = relay_sessions(features, Instant::now());
    let barrier = Arc::new(Barrier::new(2));
    let count = w.count;
    let msg_type = w.msg_type.clone();
    let first = w.payloads[0].clone();
    let first_chunk = w.chunks.first().cloned();
    let b2 = Arc::clone(&barrier);
    let receiver = std::thread::spawn(move || -> Res<(Duration, Duration, Vec<Feature>)> {
        let hs = link_handshake(&mut a, &mut asock);
        b2.wait();
        hs?;
        let features = a.features().to_vec();
        let mut buf = vec![0u8; 256 * 1024];
        let t0 = Instant::now();
        let cpu0 = thread_cpu();
        let mut got = 0;
        while got < count {
            let n = asock
                .read(&mut buf)
                .map_err(|e| format!("relay bench read: {e}"))?;
            if n == 0 {
                return Err(format!(
                    "relay bench: the sender closed after {got} of {count} messages"
                ));
            }
            a.handle_input(&buf[..n], Instant::now());
            while let Some(ev) = a.poll_event() {
                match ev {
                    SessionEvent::Message(m) => {
                        // A transfer arrives holding its chunk raw, from a line or a frame.
                        let same = m.payload == first && m.chunk() == first_chunk.as_ref();
                        if m.msg_type != msg_type || (got == 0 && !same) {
                            return Err(format!("relay bench: message {got} is not the one sent"));
                        }
                        got += 1;
                    }
                    SessionEvent::Closed { reason } => {
                        return Err(format!("relay bench: acceptor closed: {reason}"))
                    }
                    _ => {}
                }
            }
        }
        Ok((t0.elapsed(), thread_cpu() - cpu0, features))
    });
    let hs = link_handshake(&mut d, &mut dsock);
    barrier.wait();
    hs?;
    let bytes0 = d.stats().bytes_out;
    let cpu0 = thread_cpu();
    let mut out = Vec::with_capacity(2 * LINK_WRITE_BYTES);
    let sent: Res<()> = (|| {
        for i in 0..count {
            let now = Instant::now();
            let mut msg = d.message(
                w.msg_type.clone(),
                w.payloads[i % w.payloads.len()].clone(),
                now,
            );
            if !w.chunks.is_empty() {
                msg = msg.with_chunk(Arc::clone(&w.chunks[i % w.chunks.len()]));
            }
            d.send(msg).map_err(|e| format!("relay bench send: {e}"))?;
            while let Some(b) = d.poll_transmit() {
                out.extend_from_slice(&b);
            }
            if out.len() >= LINK_WRITE_BYTES {
                dsock
                    .write_all(&out)
                    .map_err(|e| format!("relay bench write: {e}"))?;
                out.clear();
            }
        }
        dsock
            .write_all(&out)
            .map_err(|e| format!("relay bench write: {e}"))
    })();
    let send_cpu = thread_cpu() - cpu0;
    let wire_bytes = d.stats().bytes_out - bytes0;
    if let Err(e) = sent {
        drop(dsock);
        let _ = receiver.join();
        return Err(e);
    }
    let (wall, recv_cpu, agreed) = receiver
        .join()
        .map_err(|_| "relay bench receiver panicked".to_string())??;
    if agreed != d.features() || d.framed() != features.contains(&Feature::FrameBin) {
        return Err(format!(
            "relay bench: agreed {:?}, asked for {features:?}",
            d.features()
        ));
    }
    Ok(LinkRow {
        link,
        features: feature_list(&agreed),
        workload: w.name.clone(),
        msgs: count,
        payload_bytes: (w.payload_bytes * count) as u64,
        wire_bytes,
        wall,
        send_cpu,
        recv_cpu,
    })
}

/// The link kinds measured: v1 NDJSON lines (frame-bin not agreed), frames, frames with lz4.
/// Every one has mutual-auth and hb-delta, as two current hubs would.
pub(crate) fn link_kinds() -> Vec<(&'static str, Vec<Feature>)> {
    use agent_hub_proto::relay::Feature::{FrameBin, HbDelta, Lz4, MutualAuth, UnknownOk};
    vec![
        ("lines (no frame-bin)", vec![UnknownOk, MutualAuth, HbDelta]),
        ("frames", vec![UnknownOk, MutualAuth, FrameBin, HbDelta]),
        (
            "frames + lz4",
            vec![UnknownOk, MutualAuth, FrameBin, Lz4, HbDelta],
        ),
    ]
}

/// One configuration's heartbeat bytes.
pub(crate) struct BeatRow {
    pub(crate) link: &'static str,
    pub(crate) features: String,
    /// Every beat's size on the wire (dialer → acceptor), in order, and whether it was full.
    pub(crate) beats: Vec<(usize, bool)>,
    /// Every ack's size (acceptor → dialer; hb-delta only).
    pub(crate) acks: Vec<usize>,
    pub(crate) full_payload: usize,
    pub(crate) delta_payload: Option<usize>,
}

impl BeatRow {
    pub(crate) fn full(&self) -> usize {
        self.beats.iter().find(|b| b.1).map_or(0, |b| b.0)
    }
    pub(crate) fn delta(&self) -> Option<usize> {
        let mut d: Vec<usize> = self.beats.iter().filter(|b| !b.1).map(|b| b.0).collect();
        d.sort_unstable();
        d.get(d.len() / 2).copied()
    }
    pub(crate) fn ack(&self) -> Option<usize> {
        let mut a = self.acks.clone();
        a.sort_unstable();
        a.get(a.len() / 2).copied()
    }
    pub(crate) fn mean_beat(&self) -> f64 {
        self.beats.iter().map(|b| b.0).sum::<usize>() as f64 / self.beats.len() as f64
    }
    pub(crate) fn mean_with_acks(&self) -> f64 {
        (self.beats.iter().map(|b| b.0).sum::<usize>() + self.acks.iter().sum::<usize>()) as f64
            / self.beats.len() as f64
    }
    pub(crate) fn to_json(&self) -> serde_json::Value {
        json!({
            "link": self.link, "features": self.features, "beats": self.beats.len(),
            "full_beats": self.beats.iter().filter(|b| b.1).count(),
            "full_beat_bytes": self.full(), "delta_beat_bytes": self.delta(), "ack_bytes": self.ack(),
            "full_payload_json_bytes": self.full_payload, "delta_payload_json_bytes": self.delta_payload,
            "mean_bytes_per_beat": round1(self.mean_beat()),
            "mean_bytes_per_beat_with_acks": round1(self.mean_with_acks()),
        })
    }
}

/// A message's type and payload from one `poll_transmit` unit (a line or a frame).
pub(crate) fn unwrap_unit(bytes: &[u8], framed: bool) -> Res<RelayMessage> {
    if framed {
        let (f, n) = decode_frame(bytes)
            .map_err(|e| e.to_string())?
            .ok_or("a partial frame")?;
        if n != bytes.len() {
            return Err("more than one frame in a unit".into());
        }
        decode_body(&f.body).map_err(|e| e.to_string())
    } else {
        RelayMessage::decode_line(bytes.strip_suffix(b"\n").unwrap_or(bytes))
            .map_err(|e| e.to_string())
    }
}

/// Two sessions in memory on a virtual clock, beating every 30 s for `BEATS` intervals; the
/// dialer's directory has `BEAT_AGENTS` agents and one agent's queue count changes before each
/// beat after the first. Records the size of each beat the dialer sends and each ack it gets
/// back, and checks that the acceptor's copy of the directory is right after every beat.
pub(crate) fn beat_run(link: &'static str, features: &[Feature]) -> Res<BeatRow> {
    let t0 = Instant::now();
    let (mut d, mut a) = relay_sessions(features, t0);
    let move_all = |from: &mut Session, to: &mut Session, now: Instant| {
        while let Some(b) = from.poll_transmit() {
            to.handle_input(&b, now);
        }
    };
    for _ in 0..4 {
        move_all(&mut a, &mut d, t0);
        move_all(&mut d, &mut a, t0);
    }
    if d.state() != SessionState::Established || a.state() != SessionState::Established {
        return Err(format!("heartbeat bench: no link with {features:?}"));
    }
    let framed = d.framed();
    let mut dir = beat_directory(BEAT_AGENTS);
    let names: Vec<String> = dir.agents.keys().cloned().collect();
    let interval = agent_hub_proto::relay::session::DEFAULT_HEARTBEAT_INTERVAL;
    let mut row = BeatRow {
        link,
        features: feature_list(d.features()),
        beats: Vec::new(),
        acks: Vec::new(),
        full_payload: 0,
        delta_payload: None,
    };
    for i in 0..BEATS {
        let now = t0 + interval * i as u32;
        if i > 0 {
            let e = dir
                .agents
                .get_mut(&names[(i * 7) % names.len()])
                .expect("agent");
            e.queued += 1;
        }
        d.set_directory(dir.clone());
        d.handle_timeout(now);
        while let Some(b) = d.poll_transmit() {
            let m = unwrap_unit(&b, framed)?;
            if m.msg_type != MsgType::Heartbeat {
                return Err(format!("heartbeat bench: the dialer sent a {}", m.msg_type));
            }
            let delta = m.payload.get("base").is_some();
            let payload_len = serde_json::to_vec(&m.payload)
                .map_err(|e| e.to_string())?
                .len();
            if delta {
                row.delta_payload.get_or_insert(payload_len);
            } else if row.full_payload == 0 {
                row.full_payload = payload_len;
            }
            row.beats.push((b.len(), !delta));
            a.handle_input(&b, now);
        }
        while let Some(b) = a.poll_transmit() {
            let m = unwrap_unit(&b, framed)?;
            if m.msg_type != MsgType::Ack {
                return Err(format!(
                    "heartbeat bench: expected an ack, got {}",
                    m.msg_type
                ));
            }
            row.acks.push(b.len());
            d.handle_input(&b, now);
        }
        // The acceptor beats too (an empty directory), so neither side's liveness runs out.
        a.handle_timeout(now);
        move_all(&mut a, &mut d, now);
        move_all(&mut d, &mut a, now);
        let mut seen = false;
        while let Some(ev) = a.poll_event() {
            match ev {
                SessionEvent::Heartbeat { directory, .. } => {
                    if directory != dir {
                        return Err(format!("heartbeat bench ({link}): the acceptor's directory differs after beat {}", i + 1));
                    }
                    seen = true;
                }
                SessionEvent::Closed { reason } => {
                    return Err(format!("heartbeat bench: {reason}"))
                }
                _ => {}
            }
        }
        while let Some(ev) = d.poll_event() {
            if let SessionEvent::Closed { reason } = ev {
                return Err(format!("heartbeat bench: {reason}"));
            }
        }
        if !seen {
            return Err(format!(
                "heartbeat bench ({link}): beat {} did not arrive",
                i + 1
            ));
        }
    }
    Ok(row)
}
