//! One relay connection's protocol state (relay-compat.md; seed §6–§7): the acceptor's
//! challenge, the dialler's handshake, the ack and its v1 negotiation (proto, features,
//! transcript proofs both ways, frame-mac keys), the switch to frames, heartbeats both ways,
//! liveness, unknown types and duplicate ids, and what the application may send to this peer.
//! The proofs' bytes are `transcript`'s, the frame tags `framemac`'s, the reflection check
//! `nonces`'; this file decides when each applies (docs/relay-protocol.md §2).
//!
//! Sans-IO: bytes in through `handle_input` (any split), bytes out through `poll_transmit` (in
//! order), events through `poll_event`, time through `handle_timeout`/`poll_timeout`, every
//! instant passed in. After `Closed`, `poll_transmit` still yields what was queued before (a
//! denial ack); the IO layer writes it and then closes the socket. Refuses: sockets, clocks,
//! randomness (nonce and id seed are passed in), and deciding which connection is a peer's
//! lasting link (`links` does).

use crate::relay::auth::{self, is_nonce_hex, nonce_hex, valid_peer_id};
use crate::relay::frame::{self, decode_body, decode_frame, FrameError};
use crate::relay::framemac::{self, FrameMac};
use crate::relay::heartbeat::{
    v0_payload, Applied, Beat, BeatReceiver, BeatSender, Directory, DirectoryCaps,
};
use crate::relay::message::{
    feature_for, intersect, v0_knows, Ack, Challenge, Feature, Handshake, HandshakeAck,
    HandshakeStatus, IdGen, MsgType, Payload, RelayError, RelayMessage, LINE_CAP_BYTES,
};
use crate::relay::nonces::NonceBook;
use crate::relay::transcript::{AckFields, Transcript};
use serde_json::Value;
use std::collections::{HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

/// The protocol version this build speaks.
pub const PROTO: u32 = 1;
/// v0's default heartbeat interval.
pub const DEFAULT_HEARTBEAT_INTERVAL: Duration = Duration::from_secs(30);
/// How long a connection may take to finish its handshake.
pub const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// A peer is dead after this many heartbeat intervals without a `heartbeat`.
pub const LIVENESS_INTERVALS: u32 = 3;
/// Received ids remembered for duplicate detection (v0 keeps 1000).
pub const DEDUPE_IDS: usize = 1000;
/// Before authentication a line may be at most this long: handshake lines are small, and an
/// unauthenticated peer should not make us buffer a megabyte.
pub const HANDSHAKE_LINE_CAP_BYTES: usize = 16 * 1024;
/// Distinct unknown types remembered per link for log-once (docs/relay-protocol.md,
/// "Limits"); past it, new unknown types are dropped without a line of their own.
pub const MAX_UNKNOWN_TYPES: usize = 64;
/// Bytes of an unknown type's name kept and logged: a peer chooses the name, up to a line long.
pub const UNKNOWN_TYPE_SHOWN_BYTES: usize = 64;

/// Which end of the TCP connection we are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Dialer,
    Acceptor,
}

/// The wall clock, passed in: `unix_ms` was the time at `at`. Message timestamps and ids are
/// unix milliseconds; the session only ever reads `Instant`s, so this anchor converts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WallClock {
    pub at: Instant,
    pub unix_ms: i64,
}

impl WallClock {
    pub fn unix_ms_at(&self, now: Instant) -> i64 {
        let ms = |d: Duration| i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
        if now >= self.at {
            self.unix_ms.saturating_add(ms(now - self.at))
        } else {
            self.unix_ms.saturating_sub(ms(self.at - now))
        }
    }
}

/// What this hub is and offers, the same for every link.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionConfig {
    pub local_peer: String,
    pub software_version: String,
    /// Features advertised. A link uses those both sides advertise.
    pub features: Vec<Feature>,
    pub heartbeat_interval: Duration,
    pub handshake_timeout: Duration,
    /// Sent in our handshake when we dial (so the peer can dial us back).
    pub listen_port: Option<u16>,
    /// Dial as a one-shot connection that never displaces the lasting link.
    pub transient: bool,
    /// The wall clock at some instant. Take it when the session is made (a suspended laptop's
    /// monotonic clock stops while the wall clock runs); `Session::set_wall_clock` re-anchors.
    pub wall_clock: WallClock,
    /// The nonces this hub issued, shared by all its sessions (clones share it): a challenge
    /// or handshake carrying one of them is a reflection and is refused.
    pub nonces: NonceBook,
}

impl SessionConfig {
    /// Every feature, v0's 30 s heartbeat, a 10 s handshake deadline.
    pub fn new(local_peer: &str, software_version: &str, wall_clock: WallClock) -> SessionConfig {
        SessionConfig {
            local_peer: local_peer.to_owned(),
            software_version: software_version.to_owned(),
            features: Feature::ALL.to_vec(),
            heartbeat_interval: DEFAULT_HEARTBEAT_INTERVAL,
            handshake_timeout: DEFAULT_HANDSHAKE_TIMEOUT,
            listen_port: None,
            transient: false,
            wall_clock,
            nonces: NonceBook::new(),
        }
    }
}

/// A peer's shared key and whether a v0 link with it is acceptable.
#[derive(Clone, PartialEq, Eq)]
pub struct PeerAuth {
    pub key: [u8; 32],
    /// Accept a v0 link (no mutual proof, no features). Off: only a v1 link with
    /// `mutual-auth` and `frame-mac`, and as a dialer we sign no v0 proof for this peer, so an
    /// impostor can neither downgrade the link nor use us as a signing oracle.
    pub allow_v0: bool,
    /// Offer `bus-forward` to this peer: its hub may queue envelopes for our agents (a trust
    /// decision per peer, seed §10), and ours for its agents.
    pub forward: bool,
}

impl std::fmt::Debug for PeerAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PeerAuth")
            .field("key", &"<redacted>")
            .field("allow_v0", &self.allow_v0)
            .field("forward", &self.forward)
            .finish()
    }
}

/// The acceptor's key lookup: a closure or a map from peer id to `PeerAuth`.
pub trait PeerKeys: Send + 'static {
    fn lookup(&self, peer: &str) -> Option<PeerAuth>;
}

impl<F: Fn(&str) -> Option<PeerAuth> + Send + 'static> PeerKeys for F {
    fn lookup(&self, peer: &str) -> Option<PeerAuth> {
        self(peer)
    }
}

impl PeerKeys for HashMap<String, PeerAuth> {
    fn lookup(&self, peer: &str) -> Option<PeerAuth> {
        self.get(peer).cloned()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionState {
    /// Dialer: waiting for the acceptor's `challenge`.
    AwaitingChallenge,
    /// Acceptor: the challenge is out, waiting for the `handshake`.
    AwaitingHandshake,
    /// Dialer: our handshake is out, waiting for `handshake_ack`.
    AwaitingAck,
    Established,
    Closed,
}

/// What happened, for the layer above.
#[derive(Debug, Clone, PartialEq)]
pub enum SessionEvent {
    /// The handshake succeeded. `features` is the agreed set (empty for proto 0); both ends
    /// report the same set. `peer_version` is empty when the peer never said (a v0 acceptor).
    Established {
        peer: String,
        proto: u32,
        features: Vec<Feature>,
        transient: bool,
        peer_version: String,
    },
    /// A `heartbeat` arrived: the peer's directory after applying it (a v0 peer's has no
    /// agents; a delta that could not be applied leaves it as it was until the resync).
    Heartbeat { directory: Directory },
    /// Any other message of a known type whose payload matches the catalogue.
    Message(RelayMessage),
    /// The first message of an unknown type on this link; it and later ones are dropped.
    UnknownType { msg_type: String },
    /// A line for the service log. Never holds a key, a proof or a payload.
    Log(String),
    /// The session is over; close the socket after writing what `poll_transmit` still yields.
    Closed { reason: String },
}

/// Counters for the operator's peer listing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SessionStats {
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub last_heartbeat_received: Option<Instant>,
    pub beats_sent: u64,
    pub beats_received: u64,
    pub messages_in: u64,
    pub messages_out: u64,
    /// Messages dropped because their id was among the last 1000 received.
    pub duplicates_dropped: u64,
    /// Messages of a known type dropped because their payload did not match the catalogue.
    pub invalid_dropped: u64,
    /// Messages of an unknown type (all dropped).
    pub unknown_dropped: u64,
    /// Heartbeats that came sooner than half an interval after the last one applied: they
    /// count for liveness, and are otherwise dropped (not applied, not acked).
    pub beats_over_rate: u64,
}

/// Why `send` refused a message. Nothing was queued.
#[derive(Debug, Clone, PartialEq)]
pub enum SendError {
    /// The handshake has not finished.
    NotEstablished,
    Closed,
    /// Handshake types and `heartbeat` are the session's own.
    SessionOwned(MsgType),
    /// This peer did not negotiate the type (a v1 type without its feature, a type the v0
    /// peer's release does not know, or an unknown type).
    NotNegotiated {
        msg_type: String,
        why: String,
    },
    /// `from_peer` must be our own peer id and `id` non-empty.
    BadEnvelope(String),
    /// The payload does not match the catalogue.
    InvalidPayload(RelayError),
    /// Over the line cap (NDJSON links).
    TooLarge {
        bytes: usize,
        cap: usize,
    },
    /// Fits no frame (frame links).
    Frame(FrameError),
}

impl std::fmt::Display for SendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SendError::NotEstablished => {
                f.write_str("the relay link has not finished its handshake")
            }
            SendError::Closed => f.write_str("the relay link is closed"),
            SendError::SessionOwned(t) => {
                write!(f, "{t} messages are sent by the relay session itself")
            }
            SendError::NotNegotiated { msg_type, why } => {
                write!(f, "cannot send {msg_type} on this link: {why}")
            }
            SendError::BadEnvelope(d) => write!(f, "bad relay envelope: {d}"),
            SendError::InvalidPayload(e) => write!(f, "{e}"),
            SendError::TooLarge { bytes, cap } => {
                write!(f, "message of {bytes} bytes exceeds the line cap of {cap}")
            }
            SendError::Frame(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for SendError {}

/// One relay connection.
pub struct Session {
    cfg: SessionConfig,
    role: Role,
    state: SessionState,
    /// Dialer: from the start; acceptor: once the handshake verified.
    peer: Option<String>,
    auth: Option<PeerAuth>,
    /// Acceptor: consulted once, at the handshake, then dropped.
    keys: Option<Box<dyn PeerKeys>>,
    /// Acceptor: the challenge's nonce; dialer: the nonce the acceptor must prove.
    nonce_hex: String,
    /// Dialer: the challenge carried the v1 marker, so our handshake was v1 and the ack must
    /// be too.
    v1_challenge: bool,
    /// Dialer: our v1 handshake's transcript, until the ack is checked.
    transcript: Option<Transcript>,
    /// `frame-mac` agreed: every frame is sealed and opened here.
    mac: Option<FrameMac>,
    proto: u32,
    features: Vec<Feature>,
    peer_version: String,
    peer_transient: bool,
    peer_listen_port: Option<u16>,
    /// Frames instead of lines (frame-bin agreed), from the byte after the ack line.
    framed: bool,
    lz4: bool,
    inbuf: Vec<u8>,
    /// Bytes of `inbuf` consumed.
    in_pos: usize,
    /// Bytes after `in_pos` already searched for `\n`.
    scanned: usize,
    out: VecDeque<Vec<u8>>,
    events: VecDeque<SessionEvent>,
    ids: IdGen,
    handshake_deadline: Option<Instant>,
    next_beat_at: Option<Instant>,
    /// When the last heartbeat arrived (or the link came up).
    liveness_from: Option<Instant>,
    directory: Directory,
    beat_tx: BeatSender,
    beat_rx: BeatReceiver,
    seen_ids: HashSet<String>,
    seen_order: VecDeque<String>,
    /// Unknown types already reported on this link (at most `MAX_UNKNOWN_TYPES`, each name cut
    /// to `UNKNOWN_TYPE_SHOWN_BYTES`).
    unknown_seen: HashSet<String>,
    /// The most of the peer's directory kept (`set_directory_caps`).
    directory_caps: DirectoryCaps,
    /// When the last heartbeat was applied (heartbeats faster than the agreed rate are not).
    last_beat_applied: Option<Instant>,
    /// Log lines already written once on this link (so a misbehaving peer cannot flood the
    /// service log): keyed by what was wrong.
    logged_once: HashSet<String>,
    stats: SessionStats,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("role", &self.role)
            .field("state", &self.state)
            .field("peer", &self.peer)
            .field("proto", &self.proto)
            .field("features", &self.features)
            .field("framed", &self.framed)
            .finish_non_exhaustive()
    }
}

fn feature_names(fs: &[Feature]) -> Vec<String> {
    fs.iter().map(|f| f.as_str().to_owned()).collect()
}

impl Session {
    fn new(
        cfg: SessionConfig,
        role: Role,
        nonce: [u8; 32],
        rand_seed: u64,
        now: Instant,
    ) -> Session {
        let deadline = crate::deadline::after(now, cfg.handshake_timeout);
        // Both the acceptor's challenge nonce and the dialer's own nonce are ours: a peer
        // handing either back to any of our sessions is reflecting it.
        cfg.nonces.issue(&nonce_hex(&nonce), deadline, now);
        Session {
            role,
            state: match role {
                Role::Dialer => SessionState::AwaitingChallenge,
                Role::Acceptor => SessionState::AwaitingHandshake,
            },
            peer: None,
            auth: None,
            keys: None,
            nonce_hex: nonce_hex(&nonce),
            v1_challenge: false,
            transcript: None,
            mac: None,
            proto: 0,
            features: Vec::new(),
            peer_version: String::new(),
            peer_transient: false,
            peer_listen_port: None,
            framed: false,
            lz4: false,
            inbuf: Vec::new(),
            in_pos: 0,
            scanned: 0,
            out: VecDeque::new(),
            events: VecDeque::new(),
            ids: IdGen::new(rand_seed),
            handshake_deadline: Some(deadline),
            next_beat_at: None,
            liveness_from: None,
            directory: Directory::default(),
            beat_tx: BeatSender::new(false),
            beat_rx: BeatReceiver::new(false, ""),
            seen_ids: HashSet::new(),
            seen_order: VecDeque::new(),
            unknown_seen: HashSet::new(),
            directory_caps: DirectoryCaps::default(),
            last_beat_applied: None,
            logged_once: HashSet::new(),
            stats: SessionStats::default(),
            cfg,
        }
    }

    /// We dialled `peer_id`. `nonce`: 32 random bytes the acceptor must prove under
    /// mutual-auth. `rand_seed`: random, for message ids. Waits for the acceptor's challenge.
    pub fn dialer(
        cfg: SessionConfig,
        peer_id: &str,
        auth: PeerAuth,
        nonce: [u8; 32],
        rand_seed: u64,
        now: Instant,
    ) -> Session {
        let mut s = Session::new(cfg, Role::Dialer, nonce, rand_seed, now);
        s.peer = Some(peer_id.to_owned());
        s.auth = Some(auth);
        if !valid_peer_id(peer_id) || !valid_peer_id(&s.cfg.local_peer) {
            s.close("peer ids must be 1-128 characters of A-Z a-z 0-9 _ -");
        }
        s
    }

    /// A peer dialled us. `keys` finds a peer's key by the id its handshake claims. `nonce`:
    /// 32 random bytes for the challenge. Queues the challenge at once (the acceptor speaks
    /// first).
    pub fn acceptor(
        cfg: SessionConfig,
        keys: impl PeerKeys,
        nonce: [u8; 32],
        rand_seed: u64,
        now: Instant,
    ) -> Session {
        let mut s = Session::new(cfg, Role::Acceptor, nonce, rand_seed, now);
        s.keys = Some(Box::new(keys));
        // The v1 marker (proto, our id): a v0 dialer ignores extra keys (relay-compat.md), a v1
        // dialer learns it must answer with a transcript proof and may sign nothing else.
        let payload = Payload::Challenge(Challenge {
            nonce: s.nonce_hex.clone(),
            proto: Some(PROTO),
            peer: Some(s.cfg.local_peer.clone()),
        })
        .to_value();
        let msg = s.make(MsgType::Challenge, "", payload, now);
        s.queue_line(&msg);
        s
    }

    // ----- inputs -----

    /// Bytes read from the socket, split anywhere.
    pub fn handle_input(&mut self, bytes: &[u8], now: Instant) {
        if self.state == SessionState::Closed {
            return;
        }
        self.stats.bytes_in += bytes.len() as u64;
        if self.in_pos > 0 {
            self.inbuf.drain(..self.in_pos);
            self.in_pos = 0;
        }
        self.inbuf.extend_from_slice(bytes);
        self.process(now);
        if self.in_pos == self.inbuf.len() {
            // Nothing pending: hold no buffer between messages.
            self.inbuf = Vec::new();
            self.in_pos = 0;
            self.scanned = 0;
        }
    }

    /// The peer closed its end (EOF).
    pub fn handle_eof(&mut self) {
        self.close("peer closed the connection");
    }

    /// Timers: the handshake deadline, liveness, heartbeats due.
    pub fn handle_timeout(&mut self, now: Instant) {
        match self.state {
            SessionState::Closed => {}
            SessionState::Established => {
                if now >= self.liveness_deadline().unwrap_or(now) {
                    let secs = (self.cfg.heartbeat_interval * LIVENESS_INTERVALS).as_secs_f64();
                    self.close(format!(
                        "no heartbeat from {} for {LIVENESS_INTERVALS} intervals ({secs} s)",
                        self.peer_name()
                    ));
                    return;
                }
                if let Some(due) = self.next_beat_at {
                    if now >= due {
                        self.send_beat(now);
                        let mut next = crate::deadline::after(due, self.cfg.heartbeat_interval);
                        if next <= now {
                            // Late (a stalled loop): do not send a burst to catch up.
                            next = crate::deadline::after(now, self.cfg.heartbeat_interval);
                        }
                        if self.state == SessionState::Established {
                            self.next_beat_at = Some(next);
                        }
                    }
                }
            }
            _ => {
                if self.handshake_deadline.is_some_and(|d| now >= d) {
                    self.close(format!(
                        "handshake not finished within {} ms",
                        self.cfg.handshake_timeout.as_millis()
                    ));
                }
            }
        }
    }

    /// The next instant `handle_timeout` has work; None once closed.
    pub fn poll_timeout(&self) -> Option<Instant> {
        match self.state {
            SessionState::Closed => None,
            SessionState::Established => match (self.next_beat_at, self.liveness_deadline()) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            },
            _ => self.handshake_deadline,
        }
    }

    // ----- outputs -----

    /// The next bytes to write, in order.
    pub fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        self.out.pop_front()
    }

    pub fn poll_event(&mut self) -> Option<SessionEvent> {
        self.events.pop_front()
    }

    // ----- the application's side -----

    /// A message from us, with a fresh id and the current timestamp, ready for `send`.
    pub fn message(&mut self, msg_type: MsgType, payload: Value, now: Instant) -> RelayMessage {
        let from = self.cfg.local_peer.clone();
        self.make(msg_type, &from, payload, now)
    }

    /// Queues a message for the peer, refusing anything the peer did not negotiate: handshake
    /// types and heartbeats (the session's own), unknown types, v1 types without their
    /// feature, types a v0 peer's release does not know, and invalid payloads.
    ///
    /// A `session_transfer` chunk given as base64 text is decoded once here (the check). On a
    /// frame link the bytes are kept (`make_chunk_raw`), so framing does not decode it again;
    /// on a line link the text is written as given. A chunk given raw (`with_chunk`) is never
    /// decoded: a frame carries it as it is, a line encodes it once.
    pub fn send(&mut self, mut msg: RelayMessage) -> Result<(), SendError> {
        match self.state {
            SessionState::Established => {}
            SessionState::Closed => return Err(SendError::Closed),
            _ => return Err(SendError::NotEstablished),
        }
        let t = &msg.msg_type;
        if t.is_handshake() || *t == MsgType::Heartbeat {
            return Err(SendError::SessionOwned(t.clone()));
        }
        let refuse = |why: String| SendError::NotNegotiated {
            msg_type: t.as_str().to_owned(),
            why,
        };
        if let MsgType::Unknown(_) = t {
            return Err(refuse(
                "a type this build does not know is never sent".into(),
            ));
        }
        if let Some(f) = feature_for(t) {
            if !self.features.contains(&f) {
                return Err(refuse(format!(
                    "it needs feature {f}, which this link did not agree"
                )));
            }
        }
        if self.proto == 0 && !v0_knows(&self.peer_version, t) {
            return Err(refuse(format!(
                "the peer is a v0 relay (version {:?}) whose release does not know it",
                self.peer_version
            )));
        }
        if msg.from_peer != self.cfg.local_peer {
            return Err(SendError::BadEnvelope(format!(
                "from_peer is {:?}, not this hub's peer id {:?}",
                msg.from_peer, self.cfg.local_peer
            )));
        }
        if msg.id.is_empty() {
            return Err(SendError::BadEnvelope("id is empty".into()));
        }
        if self.framed {
            msg.make_chunk_raw().map_err(SendError::InvalidPayload)?;
        }
        msg.payload_typed().map_err(SendError::InvalidPayload)?;
        self.transmit(&msg)?;
        self.stats.messages_out += 1;
        Ok(())
    }

    /// The hub's directory, carried by every heartbeat from now on.
    pub fn set_directory(&mut self, directory: Directory) {
        self.directory = directory;
    }

    /// The most of the peer's directory this session keeps (default: `DirectoryCaps::default`).
    pub fn set_directory_caps(&mut self, caps: DirectoryCaps) {
        self.directory_caps = caps;
    }

    /// Re-anchors the wall clock used for timestamps and ids.
    pub fn set_wall_clock(&mut self, wall_clock: WallClock) {
        self.cfg.wall_clock = wall_clock;
    }

    /// Ends the session (shutdown, displaced by another link). Emits `Closed`.
    pub fn close(&mut self, reason: impl Into<String>) {
        if self.state == SessionState::Closed {
            return;
        }
        let reason = reason.into();
        self.state = SessionState::Closed;
        self.handshake_deadline = None;
        self.next_beat_at = None;
        self.inbuf = Vec::new();
        self.in_pos = 0;
        self.keys = None;
        self.events.push_back(SessionEvent::Closed { reason });
    }

    // ----- accessors -----

    pub fn state(&self) -> SessionState {
        self.state
    }

    pub fn role(&self) -> Role {
        self.role
    }

    /// The peer's id: known from the start when dialling, after the handshake when accepting.
    pub fn peer(&self) -> Option<&str> {
        match (self.role, self.state) {
            (Role::Acceptor, SessionState::AwaitingHandshake) => None,
            _ => self.peer.as_deref(),
        }
    }

    /// The agreed features (empty before the link is up, and for proto 0).
    pub fn features(&self) -> &[Feature] {
        &self.features
    }

    /// The agreed proto, once established.
    pub fn proto(&self) -> Option<u32> {
        (self.established_once()).then_some(self.proto)
    }

    /// The peer's software version ("" when it never said: a v0 acceptor).
    pub fn peer_version(&self) -> &str {
        &self.peer_version
    }

    /// The port the dialler said it listens on (acceptor side).
    pub fn peer_listen_port(&self) -> Option<u16> {
        self.peer_listen_port
    }

    /// Whether the link is a transient one (either side asked for it when dialling).
    pub fn transient(&self) -> bool {
        self.peer_transient
    }

    /// Whether the link has switched to binary frames.
    pub fn framed(&self) -> bool {
        self.framed
    }

    /// Frames sent and received under `frame-mac` (None when it was not agreed).
    pub fn frame_mac_counts(&self) -> Option<(u64, u64)> {
        self.mac.as_ref().map(FrameMac::counts)
    }

    pub fn stats(&self) -> &SessionStats {
        &self.stats
    }

    // ----- internals -----

    fn established_once(&self) -> bool {
        self.liveness_from.is_some()
    }

    fn peer_name(&self) -> &str {
        self.peer.as_deref().unwrap_or("peer")
    }

    fn liveness_deadline(&self) -> Option<Instant> {
        self.liveness_from.map(|t| {
            crate::deadline::after(
                t,
                self.cfg
                    .heartbeat_interval
                    .saturating_mul(LIVENESS_INTERVALS),
            )
        })
    }

    fn make(
        &mut self,
        msg_type: MsgType,
        from: &str,
        payload: Value,
        now: Instant,
    ) -> RelayMessage {
        let ms = self.cfg.wall_clock.unix_ms_at(now);
        RelayMessage::new(self.ids.next_id(ms), msg_type, from, ms, payload)
    }

    /// Handshake messages are always lines (the upgrade happens after them).
    fn queue_line(&mut self, msg: &RelayMessage) {
        let line = msg.encode_line();
        self.stats.bytes_out += line.len() as u64;
        self.out.push_back(line);
    }

    /// A message in the link's current form (line or frame).
    fn transmit(&mut self, msg: &RelayMessage) -> Result<(), SendError> {
        let bytes = if self.framed {
            let bytes = frame::encode_message(msg, self.lz4).map_err(SendError::Frame)?;
            match &mut self.mac {
                None => bytes,
                Some(mac) => match mac.seal(bytes) {
                    Ok(b) => b,
                    Err(e) => {
                        // Only 2^64 frames exhaust the sequence; a frame the cap refuses was
                        // refused by `encode_message` already.
                        self.close(format!("cannot send on this link: {e}"));
                        return Err(SendError::Closed);
                    }
                },
            }
        } else {
            let line = msg.encode_line();
            if line.len() - 1 > LINE_CAP_BYTES {
                return Err(SendError::TooLarge {
                    bytes: line.len() - 1,
                    cap: LINE_CAP_BYTES,
                });
            }
            line
        };
        // The safety net under `send`'s checks: a v0 peer dies on a type it does not know.
        debug_assert!(self.proto != 0 || v0_knows(&self.peer_version, &msg.msg_type));
        self.stats.bytes_out += bytes.len() as u64;
        self.out.push_back(bytes);
        Ok(())
    }

    /// The next complete line as a range of `inbuf`, None for "need more", Err(length) when
    /// the line (or the partial line) passes `cap`.
    fn next_line(&mut self, cap: usize) -> Result<Option<(usize, usize)>, usize> {
        let pending = &self.inbuf[self.in_pos..];
        let from = self.scanned.min(pending.len());
        match pending[from..].iter().position(|&b| b == b'\n') {
            Some(i) => {
                let n = from + i;
                self.scanned = 0;
                if n > cap {
                    return Err(n);
                }
                let start = self.in_pos;
                self.in_pos += n + 1;
                Ok(Some((start, start + n)))
            }
            None => {
                self.scanned = pending.len();
                if pending.len() > cap {
                    Err(pending.len())
                } else {
                    Ok(None)
                }
            }
        }
    }

    fn process(&mut self, now: Instant) {
        while self.state != SessionState::Closed {
            if self.framed {
                // Under frame-mac each frame's tag is checked before its payload is touched.
                let next = match &mut self.mac {
                    Some(mac) => mac
                        .open(&self.inbuf[self.in_pos..])
                        .map_err(|e| e.to_string()),
                    None => decode_frame(&self.inbuf[self.in_pos..]).map_err(|e| e.to_string()),
                };
                match next {
                    Ok(None) => break,
                    Ok(Some((frame, n))) => {
                        self.in_pos += n;
                        match decode_body(&frame.body) {
                            Ok(msg) => self.on_message(msg, now),
                            Err(e) => {
                                self.close(format!("protocol error from {}: {e}", self.peer_name()))
                            }
                        }
                    }
                    Err(e) => self.close(format!("protocol error from {}: {e}", self.peer_name())),
                }
                continue;
            }
            let cap = if self.state == SessionState::Established {
                LINE_CAP_BYTES
            } else {
                HANDSHAKE_LINE_CAP_BYTES
            };
            match self.next_line(cap) {
                Ok(None) => break,
                Err(len) => {
                    let what = if self.state == SessionState::Established {
                        "line"
                    } else {
                        "handshake line"
                    };
                    self.close(format!(
                        "{what} of {len}+ bytes exceeds the cap of {cap} bytes"
                    ));
                }
                Ok(Some((a, b))) => {
                    let decoded = RelayMessage::decode_line(&self.inbuf[a..b]);
                    match self.state {
                        SessionState::AwaitingChallenge => self.on_challenge(decoded, now),
                        SessionState::AwaitingHandshake => self.on_handshake(decoded, now),
                        SessionState::AwaitingAck => self.on_ack(decoded, now),
                        SessionState::Established => match decoded {
                            Ok(msg) => self.on_message(msg, now),
                            Err(e) => {
                                self.close(format!("protocol error from {}: {e}", self.peer_name()))
                            }
                        },
                        SessionState::Closed => {}
                    }
                }
            }
        }
    }

    /// Dialer: answer the challenge. A v1 challenge (its marker: `proto` and the acceptor's
    /// `peer` id) gets a v1 handshake whose proof is over the transcript; an unmarked one a
    /// v0 handshake, and only if this peer's `allow_v0` is on: otherwise nothing is signed.
    /// A nonce this hub issued itself is never signed (docs/relay-protocol.md §2.3).
    fn on_challenge(&mut self, decoded: Result<RelayMessage, RelayError>, now: Instant) {
        let msg = match decoded {
            Ok(m) if m.msg_type == MsgType::Challenge => m,
            Ok(m) => return self.close(format!("expected challenge, got {}", m.msg_type)),
            Err(e) => return self.close(format!("malformed challenge: {e}")),
        };
        let ch = match msg.payload_typed() {
            Ok(Payload::Challenge(c)) if is_nonce_hex(&c.nonce) => c,
            _ => {
                return self.close("malformed challenge: nonce must be 64 lowercase hex characters")
            }
        };
        let peer = self.peer_name().to_owned();
        if self.cfg.nonces.issued(&ch.nonce, now) {
            return self.close(format!(
                "refused the challenge answering our dial to {peer}: its nonce is one this hub issued itself, so someone is reflecting our own challenges back at us (nothing signed)"
            ));
        }
        let v1 = match (ch.proto, &ch.peer) {
            (Some(p), Some(id)) if p >= 1 => {
                if !valid_peer_id(id) {
                    return self.close("malformed challenge: peer is not a valid peer id");
                }
                if *id != peer {
                    return self.close(format!(
                        "the relay answering our dial to {peer} says it is {id:?} (a wrong address?); nothing signed"
                    ));
                }
                true
            }
            (Some(p), None) if p >= 1 => {
                return self.close("malformed challenge: a v1 challenge must name its peer")
            }
            _ => false,
        };
        let Some(auth) = self.auth.clone() else {
            return self.close("internal: a dialer without a key");
        };
        if !v1 && !auth.allow_v0 {
            return self.close(format!(
                "{peer}'s challenge has no v1 marker (a relay v0 peer, an older agent-hub, or a downgrade in flight) and allow_v0 is off for it: nothing signed"
            ));
        }
        let hs = if v1 {
            let offered: Vec<Feature> = Feature::ALL
                .into_iter()
                .filter(|&f| offers(&self.cfg, &auth, f))
                .collect();
            let mut hs = Handshake {
                proof: String::new(),
                version: self.cfg.software_version.clone(),
                listen_port: self.cfg.listen_port,
                transient: self.cfg.transient.then_some(true),
                proto: Some(PROTO),
                features: Some(feature_names(&offered)),
                nonce: offered
                    .contains(&Feature::MutualAuth)
                    .then(|| self.nonce_hex.clone()),
            };
            let t = Transcript::new(&self.cfg.local_peer, &peer, &ch.nonce, &hs);
            hs.proof = t.dialer_proof(&auth.key);
            self.transcript = Some(t);
            hs
        } else {
            // v0 bytes: the proof over the nonce text, and only v0's keys.
            Handshake {
                proof: auth::proof(&auth.key, &ch.nonce),
                version: self.cfg.software_version.clone(),
                listen_port: self.cfg.listen_port,
                transient: self.cfg.transient.then_some(true),
                proto: None,
                features: None,
                nonce: None,
            }
        };
        self.v1_challenge = v1;
        let from = self.cfg.local_peer.clone();
        let msg = self.make(
            MsgType::Handshake,
            &from,
            Payload::Handshake(hs).to_value(),
            now,
        );
        self.queue_line(&msg);
        self.state = SessionState::AwaitingAck;
    }

    /// Acceptor: check the claimed peer's proof (the transcript proof for `proto` ≥ 1, v0's
    /// otherwise); ack (ok or denied) or close without an ack.
    fn on_handshake(&mut self, decoded: Result<RelayMessage, RelayError>, now: Instant) {
        // A malformed handshake gets no ack at all, only a close (relay-compat.md step 3).
        let msg = match decoded {
            Ok(m) if m.msg_type == MsgType::Handshake => m,
            Ok(m) => {
                return self.close(format!(
                    "malformed handshake: expected handshake, got {}",
                    m.msg_type
                ))
            }
            Err(e) => return self.close(format!("malformed handshake: {e}")),
        };
        let hs = match msg.payload_typed() {
            Ok(Payload::Handshake(h)) => h,
            Ok(_) => return self.close("malformed handshake"),
            Err(e) => return self.close(format!("malformed handshake: {e}")),
        };
        if !valid_peer_id(&msg.from_peer) {
            return self.close("malformed handshake: from_peer is not a valid peer id");
        }
        let peer = msg.from_peer;
        let v1 = hs.proto.unwrap_or(0) >= 1;
        let theirs: Vec<Feature> = if v1 {
            hs.features
                .iter()
                .flatten()
                .filter_map(|n| Feature::parse(n))
                .collect()
        } else {
            Vec::new()
        };
        let agreed = intersect(&self.cfg.features, &theirs);
        let mutual = agreed.contains(&Feature::MutualAuth);
        if mutual && !hs.nonce.as_deref().is_some_and(is_nonce_hex) {
            return self.close(format!(
                "malformed handshake from {peer}: mutual-auth offered without a 64-hex nonce"
            ));
        }
        // The transcript is bound to our own id and nonce, so a proof made for any other
        // connection (or direction) does not verify here.
        let transcript =
            v1.then(|| Transcript::new(&peer, &self.cfg.local_peer, &self.nonce_hex, &hs));
        let check = |key: &[u8; 32]| match &transcript {
            Some(t) => t.verify_dialer_proof(key, &hs.proof),
            None => auth::verify(key, &self.nonce_hex, &hs.proof),
        };
        let auth = self.keys.take().and_then(|k| k.lookup(&peer));
        let proof_ok = match &auth {
            Some(a) => check(&a.key),
            None => {
                // Same work for an unknown id, so timing does not tell which ids exist.
                let _ = check(&[0u8; 32]);
                false
            }
        };
        let auth = match auth {
            None => return self.deny(format!("handshake denied: unknown peer id {peer:?}"), now),
            Some(_) if !proof_ok => {
                let hint = if v1 {
                    " (different key? an agent-hub built before v1 transcript proofs is refused too)"
                } else {
                    " (different key?)"
                };
                return self.deny(
                    format!("handshake denied: wrong proof from {peer}{hint}"),
                    now,
                );
            }
            Some(a) => a,
        };
        if mutual {
            let n = hs.nonce.as_deref().unwrap_or_default();
            if n == self.nonce_hex || self.cfg.nonces.issued(n, now) {
                return self.deny(
                    format!("handshake denied: {peer}'s nonce is one this hub issued itself (a reflection attempt)"),
                    now,
                );
            }
        }
        if !v1 && !auth.allow_v0 {
            return self.deny(format!("handshake denied: {peer} speaks relay v0 (no proto) and allow_v0 is off for it"), now);
        }
        let agreed: Vec<Feature> = framemac::settle(
            agreed
                .into_iter()
                .filter(|&f| offers(&self.cfg, &auth, f))
                .collect(),
        );
        if v1 && !auth.allow_v0 {
            let missing = framemac::missing_without_v0(&agreed);
            if !missing.is_empty() {
                return self.deny(
                    format!(
                        "handshake denied: the link with {peer} would lack {}, required while allow_v0 is off for it",
                        feature_names(&missing).join(", ")
                    ),
                    now,
                );
            }
        }
        let ack = match &transcript {
            Some(t) => {
                let mut ack = HandshakeAck {
                    status: HandshakeStatus::Ok,
                    proto: Some(PROTO),
                    features: Some(feature_names(&agreed)),
                    proof: None,
                    version: Some(self.cfg.software_version.clone()),
                };
                if agreed.contains(&Feature::MutualAuth) {
                    let fields = AckFields::of(&ack);
                    ack.proof = Some(t.acceptor_proof(&fields, &auth.key));
                    if agreed.contains(&Feature::FrameMac) {
                        self.mac = Some(FrameMac::for_acceptor(&t.frame_keys(&fields, &auth.key)));
                    }
                }
                ack
            }
            // v0 bytes exactly: `{"status":"ok"}` and nothing else.
            None => HandshakeAck {
                status: HandshakeStatus::Ok,
                proto: None,
                features: None,
                proof: None,
                version: None,
            },
        };
        self.peer = Some(peer);
        self.auth = Some(auth);
        self.proto = if v1 { PROTO } else { 0 };
        self.features = if v1 { agreed } else { Vec::new() };
        self.peer_version = hs.version;
        self.peer_transient = hs.transient == Some(true);
        self.peer_listen_port = hs.listen_port;
        let from = self.cfg.local_peer.clone();
        let msg = self.make(
            MsgType::HandshakeAck,
            &from,
            Payload::HandshakeAck(ack).to_value(),
            now,
        );
        self.queue_line(&msg);
        self.establish(now);
    }

    fn deny(&mut self, reason: String, now: Instant) {
        let ack = HandshakeAck {
            status: HandshakeStatus::Denied,
            proto: None,
            features: None,
            proof: None,
            version: None,
        };
        let from = self.cfg.local_peer.clone();
        let msg = self.make(
            MsgType::HandshakeAck,
            &from,
            Payload::HandshakeAck(ack).to_value(),
            now,
        );
        self.queue_line(&msg);
        self.close(reason);
    }

    /// Dialer: the acceptor's verdict. Under mutual-auth its transcript proof (which covers
    /// our offer and its answer) is checked before we send anything else, so an impostor
    /// acceptor learns nothing and can inject nothing.
    fn on_ack(&mut self, decoded: Result<RelayMessage, RelayError>, now: Instant) {
        let peer = self.peer_name().to_owned();
        let msg = match decoded {
            Ok(m) if m.msg_type == MsgType::HandshakeAck => m,
            Ok(m) => {
                return self.close(format!(
                    "expected handshake_ack from {peer}, got {}",
                    m.msg_type
                ))
            }
            Err(e) => return self.close(format!("malformed handshake_ack from {peer}: {e}")),
        };
        let ack = match msg.payload_typed() {
            Ok(Payload::HandshakeAck(a)) => a,
            Ok(_) => return self.close(format!("malformed handshake_ack from {peer}")),
            Err(e) => return self.close(format!("malformed handshake_ack from {peer}: {e}")),
        };
        if ack.status == HandshakeStatus::Denied {
            return self.close(format!(
                "{peer} denied our handshake (a different key, or it does not know us as {:?})",
                self.cfg.local_peer
            ));
        }
        let Some(auth) = self.auth.clone() else {
            return self.close("internal: a dialer without a key");
        };
        match ack.proto {
            None | Some(0) if self.v1_challenge => {
                return self.close(format!(
                    "{peer} challenged as relay v1 but answered as a relay v0 (no proto in its handshake_ack): a downgrade attempt"
                ));
            }
            None | Some(0) => {
                // An unmarked challenge is answered only with allow_v0 on (`on_challenge`).
                if !auth.allow_v0 {
                    return self.close(format!(
                        "{peer} answered as a relay v0 (no proto in its handshake_ack) and allow_v0 is off for it"
                    ));
                }
                self.proto = 0;
                self.features = Vec::new();
            }
            Some(PROTO) if !self.v1_challenge => {
                return self.close(format!(
                    "{peer} answered our relay v0 handshake with a v1 handshake_ack"
                ));
            }
            Some(PROTO) => {
                let mut agreed = Vec::new();
                for name in ack.features.iter().flatten() {
                    match Feature::parse(name) {
                        Some(f) if offers(&self.cfg, &auth, f) => agreed.push(f),
                        _ => {
                            return self.close(format!(
                                "{peer} agreed to feature {name:?}, which we did not offer"
                            ))
                        }
                    }
                }
                let agreed = intersect(&agreed, &Feature::ALL);
                if agreed.contains(&Feature::FrameMac) && !framemac::prerequisites_met(&agreed) {
                    return self.close(format!(
                        "{peer} agreed to frame-mac without frame-bin and mutual-auth"
                    ));
                }
                let Some(t) = self.transcript.take() else {
                    return self.close("internal: a v1 handshake without its transcript");
                };
                let fields = AckFields::of(&ack);
                if agreed.contains(&Feature::MutualAuth) {
                    let proven = ack
                        .proof
                        .as_deref()
                        .is_some_and(|p| t.verify_acceptor_proof(&fields, &auth.key, p));
                    if !proven {
                        return self.close(format!(
                            "{peer} failed mutual authentication: its handshake_ack does not prove this handshake with the shared key (an impostor, a tampered ack, or a different key)"
                        ));
                    }
                }
                if !auth.allow_v0 {
                    let missing = framemac::missing_without_v0(&agreed);
                    if !missing.is_empty() {
                        return self.close(format!(
                            "{peer} did not agree to {}, required while allow_v0 is off for it",
                            feature_names(&missing).join(", ")
                        ));
                    }
                }
                if agreed.contains(&Feature::FrameMac) {
                    self.mac = Some(FrameMac::for_dialer(&t.frame_keys(&fields, &auth.key)));
                }
                self.proto = PROTO;
                self.features = agreed;
            }
            Some(p) => {
                return self.close(format!(
                    "{peer} answered proto {p}; this build speaks proto {PROTO}"
                ));
            }
        }
        self.peer_version = ack.version.unwrap_or_default();
        self.peer_transient = self.cfg.transient;
        self.establish(now);
    }

    fn establish(&mut self, now: Instant) {
        self.state = SessionState::Established;
        self.handshake_deadline = None;
        self.transcript = None;
        self.framed = self.features.contains(&Feature::FrameBin);
        self.lz4 = self.framed && self.features.contains(&Feature::Lz4);
        let delta = self.features.contains(&Feature::HbDelta);
        self.beat_tx = BeatSender::new(delta);
        self.beat_rx = BeatReceiver::new(delta, &self.peer_version);
        self.liveness_from = Some(now);
        // The first beat is due at once, but goes out from `handle_timeout`, so the layer above
        // can `set_directory` on `Established` and have even the first beat carry it.
        self.next_beat_at = Some(now);
        self.events.push_back(SessionEvent::Established {
            peer: self.peer_name().to_owned(),
            proto: self.proto,
            features: self.features.clone(),
            transient: self.peer_transient,
            peer_version: self.peer_version.clone(),
        });
    }

    /// False if the id is among the last `DEDUPE_IDS` received (then the message is dropped).
    fn remember_id(&mut self, id: &str) -> bool {
        if self.seen_ids.contains(id) {
            return false;
        }
        if self.seen_order.len() == DEDUPE_IDS {
            if let Some(old) = self.seen_order.pop_front() {
                self.seen_ids.remove(&old);
            }
        }
        self.seen_ids.insert(id.to_owned());
        self.seen_order.push_back(id.to_owned());
        true
    }

    fn on_message(&mut self, mut msg: RelayMessage, now: Instant) {
        self.stats.messages_in += 1;
        if !self.remember_id(&msg.id) {
            self.stats.duplicates_dropped += 1;
            return;
        }
        match &msg.msg_type {
            MsgType::Heartbeat => self.on_heartbeat(msg, now),
            MsgType::Ack => match msg.payload_typed() {
                Ok(Payload::Ack(a)) => {
                    if !self.beat_tx.handle_ack(&a.ack_id, a.resync == Some(true)) {
                        self.events.push_back(SessionEvent::Message(msg));
                    }
                }
                Ok(_) => {}
                Err(e) => self.drop_invalid(&msg.msg_type, &e),
            },
            MsgType::Unknown(name) => self.on_unknown_type(name),
            t if feature_for(t).is_some_and(|f| !self.features.contains(&f)) => {
                let f = feature_for(t).expect("checked in the guard");
                let line = format!(
                    "dropped a {t} from {}: this link did not agree feature {f} (logged once per type)",
                    self.peer_name()
                );
                self.log_once(format!("unagreed:{t}"), line);
            }
            t if t.is_handshake() => {
                let line = format!(
                    "dropped a {t} from {} after the handshake (logged once per type)",
                    self.peer_name()
                );
                self.log_once(format!("late:{t}"), line);
            }
            // A session_transfer from a line holds its chunk as base64: the check decodes it
            // once, and the application gets the bytes (from a frame they are raw already).
            _ => match msg.make_chunk_raw().and_then(|()| msg.payload_typed()) {
                Ok(_) => self.events.push_back(SessionEvent::Message(msg)),
                Err(e) => self.drop_invalid(&msg.msg_type, &e),
            },
        }
    }

    fn drop_invalid(&mut self, t: &MsgType, e: &RelayError) {
        self.stats.invalid_dropped += 1;
        // serde's texts may quote a value (which could be part of a prompt): only a missing
        // key's name is safe to log.
        let detail = match e {
            RelayError::BadPayload { detail, .. } if detail.starts_with("missing field") => {
                detail.as_str()
            }
            _ => "a key has the wrong type",
        };
        let line = format!(
            "dropped a {t} from {}: payload does not match the catalogue ({detail}; logged once per type)",
            self.peer_name()
        );
        self.log_once(format!("invalid:{t}"), line);
    }

    /// seed §6.3: an unknown type is logged once per type per link, dropped, never fatal,
    /// never acked. The names remembered for that are capped in number and length, so a peer
    /// inventing a new type per message cannot grow the set or the log.
    fn on_unknown_type(&mut self, name: &str) {
        self.stats.unknown_dropped += 1;
        let mut cut = name.len().min(UNKNOWN_TYPE_SHOWN_BYTES);
        while !name.is_char_boundary(cut) {
            cut -= 1;
        }
        let shown = &name[..cut];
        if self.unknown_seen.contains(shown) {
            return;
        }
        if self.unknown_seen.len() >= MAX_UNKNOWN_TYPES {
            let line = format!(
                "{} sent more than {MAX_UNKNOWN_TYPES} distinct unknown message types; later new ones are dropped without a line (logged once)",
                self.peer_name()
            );
            self.log_once("unknown-types-full".into(), line);
            return;
        }
        self.unknown_seen.insert(shown.to_owned());
        self.events.push_back(SessionEvent::UnknownType {
            msg_type: shown.to_owned(),
        });
    }

    /// Whether a heartbeat at `now` comes sooner than the agreed rate allows: half an interval
    /// after the last one applied (a peer on the same interval never does, and one with a
    /// shorter interval is applied every other half interval).
    fn beat_too_soon(&self, now: Instant) -> bool {
        let gap = self.cfg.heartbeat_interval / 2;
        self.last_beat_applied
            .is_some_and(|t| now.saturating_duration_since(t) < gap)
    }

    fn log_once(&mut self, key: String, line: String) {
        if self.logged_once.insert(key) {
            self.events.push_back(SessionEvent::Log(line));
        }
    }

    fn on_heartbeat(&mut self, msg: RelayMessage, now: Instant) {
        // Liveness counts heartbeats only, whatever their payload (relay-compat.md).
        self.liveness_from = Some(now);
        self.stats.last_heartbeat_received = Some(now);
        self.stats.beats_received += 1;
        if self.beat_too_soon(now) {
            // Not applied and not acked: under hb-delta the sender's base stays the last beat
            // we acked, which we still hold, so its next delta applies.
            self.stats.beats_over_rate += 1;
            let line = format!(
                "heartbeats from {} come faster than one per {} ms; the extras are dropped (logged once)",
                self.peer_name(),
                (self.cfg.heartbeat_interval / 2).as_millis()
            );
            self.log_once("heartbeat-rate".into(), line);
            return;
        }
        self.last_beat_applied = Some(now);
        let beat = if self.proto == 0 {
            // A v0 peer's beat never carries a directory, whatever keys it has.
            Ok(Beat::Bare)
        } else {
            match msg.payload_typed() {
                Ok(Payload::Heartbeat(h)) => Beat::from_payload(&h),
                Ok(_) => Err("not a heartbeat payload".into()),
                Err(_) => Err("a directory key has the wrong type".into()),
            }
        };
        let resync = match beat {
            Ok(b) => match self.beat_rx.apply_within(b, self.directory_caps) {
                Applied::Applied => false,
                Applied::NeedResync => true,
                Applied::OverCap(over) => {
                    let caps = self.directory_caps;
                    let line = format!(
                        "heartbeat from {} describes {} agents in {} bytes, over the caps of {} agents and {} bytes (max_peer_agents, max_peer_directory_bytes); its directory is not applied (logged once)",
                        self.peer_name(),
                        over.agents,
                        over.bytes,
                        caps.max_agents,
                        caps.max_bytes
                    );
                    self.log_once("directory-cap".into(), line);
                    true
                }
            },
            Err(e) => {
                let line = format!(
                    "heartbeat from {} carries no usable directory: {e} (logged once)",
                    self.peer_name()
                );
                self.log_once("heartbeat".into(), line);
                true
            }
        };
        if self.features.contains(&Feature::HbDelta) {
            let ack = Ack {
                ack_id: msg.id,
                resync: resync.then_some(true),
                error: None,
            };
            let from = self.cfg.local_peer.clone();
            let reply = self.make(MsgType::Ack, &from, Payload::Ack(ack).to_value(), now);
            if let Err(e) = self.transmit(&reply) {
                return self.close(format!("cannot acknowledge a heartbeat: {e}"));
            }
        }
        let directory = self.beat_rx.current().clone();
        self.events.push_back(SessionEvent::Heartbeat { directory });
    }

    fn send_beat(&mut self, now: Instant) {
        let ms = self.cfg.wall_clock.unix_ms_at(now);
        let id = self.ids.next_id(ms);
        let local = self.cfg.local_peer.clone();
        let payload = if self.proto == 0 {
            // A v0 peer never gets a directory: only the keys later v0 releases send.
            v0_payload(&local, ms)
        } else {
            self.beat_tx
                .next_beat(&id, &self.directory)
                .to_payload(&local, ms)
        };
        let msg = RelayMessage::new(id, MsgType::Heartbeat, local, ms, payload);
        match self.transmit(&msg) {
            Ok(()) => self.stats.beats_sent += 1,
            Err(e) => self.close(format!("cannot send a heartbeat: {e}")),
        }
    }
}

/// Whether we offer feature `f` on a link with the peer `auth` belongs to: `bus-forward` only
/// to peers configured to forward, `frame-mac` only with its prerequisites.
fn offers(cfg: &SessionConfig, auth: &PeerAuth, f: Feature) -> bool {
    cfg.features.contains(&f)
        && (f != Feature::BusForward || auth.forward)
        && (f != Feature::FrameMac || framemac::prerequisites_met(&cfg.features))
}
