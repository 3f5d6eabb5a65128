//! One relay connection's protocol state (docs/relay-protocol.md §1–§7): the acceptor's
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
//!
//! One job per file: this one holds the session's types, its inputs and outputs, what the
//! application may send, and the line/frame reader; `handshake` the challenge, handshake, ack
//! and negotiation up to `Established`; `established` what an established link receives
//! (duplicate ids, unknown types, heartbeats) and the beats it sends.

mod established;
mod handshake;

use crate::kernel::names::valid_peer_id;
use crate::relay::auth::nonce_hex;
use crate::relay::cards::CardBook;
use crate::relay::frame::{self, decode_body_as, decode_frame, BodyForm, FrameError};
use crate::relay::framemac::FrameMac;
use crate::relay::heartbeat::{BeatReceiver, BeatSender, Directory, DirectoryCaps};
use crate::relay::message::{
    feature_for, v0_knows, AgentCard, Challenge, Feature, IdGen, MsgType, Payload, RelayError,
    RelayMessage, LINE_CAP_BYTES,
};
use crate::relay::nonces::NonceBook;
use crate::relay::transcript::Transcript;
use crate::relay::worker::{Headroom, PeerWorker};
use crate::wire::LineBuffer;
use serde_json::Value;
use std::collections::{HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

/// The protocol version this build speaks.
pub const PROTO: u32 = 1;
/// v0's default heartbeat interval.
pub const DEFAULT_HEARTBEAT_INTERVAL: Duration = Duration::from_secs(30);
/// How long a connection may take to finish its handshake.
pub const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Under feature `liveness`, the least time between two beats this hub sends, so a change of
/// an agent's state goes out early but a flapping agent cannot flood the link
/// (`[relay] liveness_update_ms`; docs/relay-protocol.md §5 "Liveness").
pub const DEFAULT_LIVENESS_UPDATE: Duration = Duration::from_secs(1);
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

/// Whose relay v1 a link speaks (docs/relay-protocol.md §2.1), decided by the proof its
/// handshake carried. A proto 0 link is always `Claudectl`: relay v0 is claudectl's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// This project's v1: transcript proofs (§2.2), so `mutual-auth` and `frame-mac` can be
    /// agreed; a `session_transfer` chunk travels raw in frames (§4); task handoffs are acked.
    AgentHub,
    /// claudectl's: relay v0, or its v1 (0.90+, the 000 seed's §6) whose proof is v0's HMAC
    /// over the nonce alone. Never `mutual-auth` or `frame-mac`; `frame-bin` brings LZ4 with
    /// it; frames hold JSON only (a chunk stays base64); beats carry claudectl's
    /// `capabilities` (and `headroom` when agreed); nothing is acked.
    Claudectl,
}

impl Dialect {
    pub fn as_str(self) -> &'static str {
        match self {
            Dialect::AgentHub => "agent-hub",
            Dialect::Claudectl => "claudectl",
        }
    }
}

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
    /// Under `liveness`: beats go no closer together than this (a state change sends one
    /// early), and the peer's are applied down to half of it apart. At most the interval.
    pub liveness_update: Duration,
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
            liveness_update: DEFAULT_LIVENESS_UPDATE,
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
    pub allow_claudectl: bool,
    /// Offer `bus-forward` to this peer: its hub may queue envelopes for our agents (a trust
    /// decision per peer, docs/relay-protocol.md §2.4, §3), and ours for its agents.
    pub forward: bool,
}

impl std::fmt::Debug for PeerAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PeerAuth")
            .field("key", &"<redacted>")
            .field("allow_claudectl", &self.allow_claudectl)
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
        dialect: Dialect,
    },
    /// A `heartbeat` arrived: the peer's directory after applying it (a v0 peer's has no
    /// agents; a delta that could not be applied leaves it as it was until the resync; a
    /// claudectl peer's agents are its sessions), and what a claudectl peer's beat says of
    /// its machine (None when the beat said nothing of it: 0.64's `{}`, this project's hubs).
    /// `room`: the beat's `headroom` in either dialect, bounded (`Headroom::bounded`), on a
    /// link that agreed `headroom` (issue 38 design §4); None when it carried none.
    Heartbeat {
        directory: Directory,
        worker: Option<Box<PeerWorker>>,
        room: Option<Headroom>,
    },
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
    /// Dialer: the features our claudectl-dialect handshake offered (an unmarked challenge,
    /// `allow_claudectl` on); the ack may agree only these.
    dialect_offer: Vec<Feature>,
    dialect: Dialect,
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
    /// Bytes read and not yet consumed: lines before (and without) `frame-bin`, frames after
    /// the upgrade, both from this one buffer.
    input: LineBuffer,
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
    /// When we last sent a beat: under `liveness` an early one waits `liveness_update` from it.
    last_beat_sent: Option<Instant>,
    /// Under `liveness`: an agent's state changed since the last beat sent.
    states_changed: bool,
    /// Log lines already written once on this link (so a misbehaving peer cannot flood the
    /// service log): keyed by what was wrong.
    logged_once: HashSet<String>,
    stats: SessionStats,
    /// Feature `agents`: our capability list and the peer's (`relay::cards`).
    cards: CardBook,
    /// Feature `headroom`: this hub's room for another task, as the server last measured it.
    headroom: Option<Headroom>,
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
        let deadline = crate::kernel::deadline::after(now, cfg.handshake_timeout);
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
            dialect_offer: Vec::new(),
            dialect: Dialect::Claudectl,
            transcript: None,
            mac: None,
            proto: 0,
            features: Vec::new(),
            peer_version: String::new(),
            peer_transient: false,
            peer_listen_port: None,
            framed: false,
            lz4: false,
            input: LineBuffer::new(),
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
            last_beat_sent: None,
            states_changed: false,
            logged_once: HashSet::new(),
            stats: SessionStats::default(),
            cards: CardBook::default(),
            headroom: None,
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
        // The v1 marker (proto, our id): a v0 dialer ignores extra keys (docs/relay-protocol.md
        // §2.1), a v1 dialer learns it must answer with a transcript proof and may sign nothing
        // else.
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
        self.input.push(bytes);
        self.process(now);
        if self.input.pending_len() == 0 {
            // Nothing pending: hold no buffer between messages.
            self.input = LineBuffer::new();
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
                        let mut next =
                            crate::kernel::deadline::after(due, self.cfg.heartbeat_interval);
                        if next <= now {
                            // Late (a stalled loop): do not send a burst to catch up.
                            next = crate::kernel::deadline::after(now, self.cfg.heartbeat_interval);
                        }
                        if self.state == SessionState::Established {
                            self.next_beat_at = Some(next);
                        }
                    }
                }
                if let Some(due) = self.early_beat_at() {
                    if now >= due {
                        self.send_beat(now);
                        // A beat just went: the regular one is an interval from it (so no two
                        // beats are ever closer than `liveness_update`, which is at most the
                        // interval).
                        if self.state == SessionState::Established {
                            self.next_beat_at = Some(crate::kernel::deadline::after(
                                now,
                                self.cfg.heartbeat_interval,
                            ));
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
            SessionState::Established => [
                self.next_beat_at,
                self.liveness_deadline(),
                self.early_beat_at(),
            ]
            .into_iter()
            .flatten()
            .min(),
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
        if self.framed && self.body_form() == BodyForm::RawChunks {
            msg.make_chunk_raw().map_err(SendError::InvalidPayload)?;
        }
        msg.payload_typed().map_err(SendError::InvalidPayload)?;
        self.transmit(&msg)?;
        self.stats.messages_out += 1;
        Ok(())
    }

    /// The hub's directory, carried by every heartbeat from now on.
    /// Under `liveness`, a change of any agent's state makes a beat due early: at once if the
    /// last beat went `liveness_update` ago or more, else then (changes in between coalesce
    /// into that one beat).
    pub fn set_directory(&mut self, directory: Directory) {
        if self.features.contains(&Feature::Liveness) && !directory.same_states(&self.directory) {
            self.states_changed = true;
        }
        self.directory = directory;
    }

    /// The installed agent manifests this hub advertises under feature `agents` (computed by
    /// the server off its loop); carried by the next full beat, or the next beat if changed.
    pub fn set_agent_cards(&mut self, cards: Vec<AgentCard>) {
        self.cards.set_ours(cards);
    }

    /// This hub's headroom, carried by every beat from now on on links that agreed
    /// `headroom` (claudectl's placement reads it; the server measures it off the session).
    pub fn set_headroom(&mut self, headroom: Option<Headroom>) {
        self.headroom = headroom;
    }

    /// The peer's agent cards as last received (empty without feature `agents`).
    pub fn peer_agent_cards(&self) -> &[AgentCard] {
        self.cards.peer()
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
        self.input = LineBuffer::new();
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

    /// Whose v1 the link speaks (meaningful once established; a v0 link is claudectl's).
    pub fn dialect(&self) -> Dialect {
        self.dialect
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

    /// How this link's frames hold a message: a claudectl peer keeps a chunk base64.
    fn body_form(&self) -> BodyForm {
        match self.dialect {
            Dialect::AgentHub => BodyForm::RawChunks,
            Dialect::Claudectl => BodyForm::Json,
        }
    }

    fn established_once(&self) -> bool {
        self.liveness_from.is_some()
    }

    fn peer_name(&self) -> &str {
        self.peer.as_deref().unwrap_or("peer")
    }

    fn liveness_deadline(&self) -> Option<Instant> {
        self.liveness_from.map(|t| {
            crate::kernel::deadline::after(
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
            let bytes = frame::encode_message_as(msg, self.lz4, self.body_form())
                .map_err(SendError::Frame)?;
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

    fn process(&mut self, now: Instant) {
        while self.state != SessionState::Closed {
            if self.framed {
                // Under frame-mac each frame's tag is checked before its payload is touched.
                let next = match &mut self.mac {
                    Some(mac) => mac.open(self.input.pending()).map_err(|e| e.to_string()),
                    None => decode_frame(self.input.pending()).map_err(|e| e.to_string()),
                };
                match next {
                    Ok(None) => break,
                    Ok(Some((frame, n))) => {
                        self.input.consume(n);
                        match decode_body_as(&frame.body, self.body_form()) {
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
            // The one line splitter (`wire::LineBuffer`): the cap excludes the `\n`, and a
            // partial line is refused as soon as it passes the cap.
            let decoded = match self.input.next_line(cap) {
                Ok(None) => break,
                Err(too_long) => Err(too_long.len_bytes),
                Ok(Some(line)) => Ok(RelayMessage::decode_line(line)),
            };
            match decoded {
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
                Ok(decoded) => match self.state {
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
                },
            }
        }
    }
}
