//! Relay messages (relay-compat.md, "Framing" and "The v0 message catalogue"; seed §6.3,
//! §6.5): the `RelayMessage` envelope and its NDJSON line codec, `MsgType` with its unknown
//! catch-all, the typed `Payload` of every v0 type, message ids, the v1 feature names, and
//! which types a v0 peer's release knows.
//!
//! Decoding is as strict as a v0 reader where a v0 reader is strict (a float timestamp, a
//! missing payload, a wrong-case type are errors) and as liberal as one where it is liberal
//! (unknown keys anywhere are ignored), so what we accept and what we send are both what v0
//! peers accept. Refuses: deciding what a message means (that is `session`'s) and IO.

use serde::de::Deserializer;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;

/// The line cap: bytes of a line not counting its `\n` (a trailing `\r` counts).
pub const LINE_CAP_BYTES: usize = 1_048_576;

/// Why bytes are not a relay message. A peer's bytes cause one of these, never a panic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RelayError {
    /// Longer than `LINE_CAP_BYTES` (without the `\n`).
    LineTooLong {
        len_bytes: usize,
    },
    /// An empty (or `\r`-only) line: v0 readers die on these, so they are never sent.
    EmptyLine,
    NotUtf8,
    /// Not JSON at all; the detail is serde_json's.
    NotJson(String),
    /// JSON, but not an object.
    NotAnObject,
    /// A required envelope key is absent (`payload` included: it is required).
    MissingField(&'static str),
    /// An envelope key has the wrong JSON type.
    FieldType {
        field: &'static str,
        expected: &'static str,
    },
    /// `timestamp` is a float: v0 readers die on it; it must be integer milliseconds.
    FloatTimestamp,
    /// A known type in the wrong case (`Heartbeat`): v0 readers die on it.
    WrongCaseType(String),
    /// The payload does not have the keys its type requires.
    BadPayload {
        msg_type: String,
        detail: String,
    },
    /// A frame body that is not one message (plus, for `session_transfer`, its raw data).
    BadBody(String),
    /// More JSON values than `json_budget::MAX_JSON_VALUES`: refused before parsing, so a
    /// message cannot swell into a tree many times its size.
    TooManyValues {
        cap: usize,
    },
}

impl std::fmt::Display for RelayError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RelayError::LineTooLong { len_bytes } => write!(
                f,
                "line of {len_bytes} bytes exceeds the relay line cap of {LINE_CAP_BYTES} bytes"
            ),
            RelayError::EmptyLine => f.write_str("empty line (v0 peers die on blank lines)"),
            RelayError::NotUtf8 => f.write_str("line is not valid UTF-8"),
            RelayError::NotJson(d) => write!(f, "line is not JSON: {d}"),
            RelayError::NotAnObject => f.write_str("a relay message must be a JSON object"),
            RelayError::MissingField(k) => write!(f, "relay message has no {k:?} key"),
            RelayError::FieldType { field, expected } => {
                write!(f, "relay message key {field:?} must be {expected}")
            }
            RelayError::FloatTimestamp => f.write_str(
                "timestamp is a float; it must be integer unix milliseconds (v0 peers die on floats)",
            ),
            RelayError::WrongCaseType(t) => write!(
                f,
                "msg_type {t:?} is a known type in the wrong case; types are snake_case and case-sensitive"
            ),
            RelayError::BadPayload { msg_type, detail } => {
                write!(f, "{msg_type} payload is invalid: {detail}")
            }
            RelayError::BadBody(d) => write!(f, "frame body is invalid: {d}"),
            RelayError::TooManyValues { cap } => write!(
                f,
                "relay message holds more than {cap} JSON values (strings, numbers, arrays, objects); refused unparsed"
            ),
        }
    }
}

impl std::error::Error for RelayError {}

/// A relay message type. The 17 v0 types, in relay-compat.md's catalogue order (the first 12
/// are the ones claudectl 0.64 knows), and `Unknown` for any other string, kept verbatim.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MsgType {
    Challenge,
    Handshake,
    HandshakeAck,
    Heartbeat,
    Ack,
    DelegateTask,
    TaskStatus,
    TaskHandoff,
    TaskInterrupt,
    KnowledgeSync,
    KnowledgeRequest,
    KnowledgeSnapshot,
    HiveJoinRequest,
    HiveJoinResult,
    KnowledgeRejected,
    SessionTransfer,
    SessionReceived,
    /// v1 `bus-forward`: an envelope handed to the peer hub for one of its agents.
    BusForward,
    /// Any other type string, exactly as received. Logged once per type per peer and dropped
    /// (seed §6.3); never sent.
    Unknown(String),
}

/// The types v1 features added, in catalogue order after the v0 types.
pub static V1_TYPES: [MsgType; 1] = [MsgType::BusForward];

/// Every v0 type, in catalogue order.
pub static V0_TYPES: [MsgType; 17] = [
    MsgType::Challenge,
    MsgType::Handshake,
    MsgType::HandshakeAck,
    MsgType::Heartbeat,
    MsgType::Ack,
    MsgType::DelegateTask,
    MsgType::TaskStatus,
    MsgType::TaskHandoff,
    MsgType::TaskInterrupt,
    MsgType::KnowledgeSync,
    MsgType::KnowledgeRequest,
    MsgType::KnowledgeSnapshot,
    MsgType::HiveJoinRequest,
    MsgType::HiveJoinResult,
    MsgType::KnowledgeRejected,
    MsgType::SessionTransfer,
    MsgType::SessionReceived,
];

impl MsgType {
    /// The wire name (snake_case).
    pub fn as_str(&self) -> &str {
        match self {
            MsgType::Challenge => "challenge",
            MsgType::Handshake => "handshake",
            MsgType::HandshakeAck => "handshake_ack",
            MsgType::Heartbeat => "heartbeat",
            MsgType::Ack => "ack",
            MsgType::DelegateTask => "delegate_task",
            MsgType::TaskStatus => "task_status",
            MsgType::TaskHandoff => "task_handoff",
            MsgType::TaskInterrupt => "task_interrupt",
            MsgType::KnowledgeSync => "knowledge_sync",
            MsgType::KnowledgeRequest => "knowledge_request",
            MsgType::KnowledgeSnapshot => "knowledge_snapshot",
            MsgType::HiveJoinRequest => "hive_join_request",
            MsgType::HiveJoinResult => "hive_join_result",
            MsgType::KnowledgeRejected => "knowledge_rejected",
            MsgType::SessionTransfer => "session_transfer",
            MsgType::SessionReceived => "session_received",
            MsgType::BusForward => "bus_forward",
            MsgType::Unknown(s) => s,
        }
    }

    /// Reads a wire name. A known name in another case or without its underscores
    /// (`Heartbeat`, `HandshakeAck`) is an error, as it is fatal to v0 readers; any other
    /// string is `Unknown`.
    pub fn parse(s: &str) -> Result<MsgType, RelayError> {
        let known = || V0_TYPES.iter().chain(V1_TYPES.iter());
        if let Some(t) = known().find(|t| t.as_str() == s) {
            return Ok(t.clone());
        }
        let squash = |x: &str| -> String {
            x.chars()
                .filter(|&c| c != '_')
                .map(|c| c.to_ascii_lowercase())
                .collect()
        };
        let folded = squash(s);
        if known().any(|t| squash(t.as_str()) == folded) {
            return Err(RelayError::WrongCaseType(s.to_owned()));
        }
        Ok(MsgType::Unknown(s.to_owned()))
    }

    /// Position in the v0 catalogue; None for `Unknown`.
    pub fn v0_index(&self) -> Option<usize> {
        V0_TYPES.iter().position(|t| t == self)
    }

    /// Handshake types belong to the session: the application never sends them, and they
    /// are never valid after the handshake.
    pub fn is_handshake(&self) -> bool {
        matches!(
            self,
            MsgType::Challenge | MsgType::Handshake | MsgType::HandshakeAck
        )
    }
}

impl std::fmt::Display for MsgType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for MsgType {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

// ----- features -----

/// A v1 feature (seed §6.2), on for a link only when both sides advertise it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Feature {
    /// Unknown msg_types are logged once and dropped, never fatal (seed §6.3).
    UnknownOk,
    /// The dialler checks the acceptor's proof over the dialler's own nonce too.
    MutualAuth,
    /// Length-prefixed binary frames after the ack (seed §6.4).
    FrameBin,
    /// LZ4 block compression of frame bodies of 1 KiB or more (only with `frame-bin`).
    Lz4,
    /// Heartbeats as deltas against the last acknowledged beat (seed §7.3).
    HbDelta,
    /// `bus_forward`: envelopes for `name@peer` addresses cross the link (seed §8). Offered
    /// only to peers configured with `forward = true`.
    BusForward,
    /// Every frame carries a MAC under a per-link key and an implicit sequence number
    /// (`relay::framemac`). Needs `frame-bin` and `mutual-auth`.
    FrameMac,
}

impl Feature {
    /// Every feature, in the canonical order used on the wire and in logs.
    pub const ALL: [Feature; 7] = [
        Feature::UnknownOk,
        Feature::MutualAuth,
        Feature::FrameBin,
        Feature::Lz4,
        Feature::HbDelta,
        Feature::BusForward,
        Feature::FrameMac,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Feature::UnknownOk => "unknown-ok",
            Feature::MutualAuth => "mutual-auth",
            Feature::FrameBin => "frame-bin",
            Feature::Lz4 => "lz4",
            Feature::HbDelta => "hb-delta",
            Feature::BusForward => "bus-forward",
            Feature::FrameMac => "frame-mac",
        }
    }

    /// A wire name; None for names this build does not know (ignored in negotiation).
    pub fn parse(s: &str) -> Option<Feature> {
        Feature::ALL.into_iter().find(|f| f.as_str() == s)
    }
}

impl std::fmt::Display for Feature {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The agreed set: features both sides advertise, deduplicated, in canonical order.
pub fn intersect(ours: &[Feature], theirs: &[Feature]) -> Vec<Feature> {
    Feature::ALL
        .into_iter()
        .filter(|f| ours.contains(f) && theirs.contains(f))
        .collect()
}

/// The feature that introduced a message type; None for the v0 types (and for `Unknown`,
/// which is never sent). A peer is sent a type only if this feature was agreed for the link.
/// `bus_forward` is the only type a v1 feature added (hb-delta changes `heartbeat`'s payload,
/// it adds no type). The match is exhaustive so a new type cannot be added without deciding
/// this.
pub fn feature_for(msg_type: &MsgType) -> Option<Feature> {
    match msg_type {
        MsgType::Challenge
        | MsgType::Handshake
        | MsgType::HandshakeAck
        | MsgType::Heartbeat
        | MsgType::Ack
        | MsgType::DelegateTask
        | MsgType::TaskStatus
        | MsgType::TaskHandoff
        | MsgType::TaskInterrupt
        | MsgType::KnowledgeSync
        | MsgType::KnowledgeRequest
        | MsgType::KnowledgeSnapshot
        | MsgType::HiveJoinRequest
        | MsgType::HiveJoinResult
        | MsgType::KnowledgeRejected
        | MsgType::SessionTransfer
        | MsgType::SessionReceived
        | MsgType::Unknown(_) => None,
        MsgType::BusForward => Some(Feature::BusForward),
    }
}

// ----- which types a v0 release knows -----

/// A v0 (claudectl) release and how many catalogue types (a prefix of `V0_TYPES`) it knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct V0Release {
    /// The first version (major, minor, patch) this row applies to.
    pub since: (u64, u64, u64),
    pub known_types: usize,
}

/// Observed v0 releases, oldest first. 0.64 knows the first 12 types. relay-compat.md says the
/// other five "came in later versions" without naming one, so no row grants them yet: a v0
/// peer of any version is sent only the first 12 until a release is observed to know more
/// (add its row here, with the version it was observed in).
pub const V0_RELEASES: &[V0Release] = &[V0Release {
    since: (0, 0, 0),
    known_types: 12,
}];

/// The fewest types any v0 release knows: what an unparsable version gets.
pub const V0_MIN_KNOWN_TYPES: usize = 12;

fn parse_version(v: &str) -> Option<(u64, u64, u64)> {
    let core = v.trim().trim_start_matches('v');
    let core = core.split(['-', '+', ' ']).next()?;
    let mut parts = core.split('.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next().unwrap_or("0").parse().ok()?;
    let patch = parts.next().unwrap_or("0").parse().ok()?;
    Some((major, minor, patch))
}

/// The types a v0 peer whose handshake said `version` knows, in catalogue order.
pub fn v0_known_types(version: &str) -> &'static [MsgType] {
    let count = match parse_version(version) {
        None => V0_MIN_KNOWN_TYPES,
        Some(v) => V0_RELEASES
            .iter()
            .rev()
            .find(|r| r.since <= v)
            .map_or(V0_MIN_KNOWN_TYPES, |r| r.known_types),
    };
    &V0_TYPES[..count.min(V0_TYPES.len())]
}

/// Whether a v0 peer of this version can read a message of this type without dying.
pub fn v0_knows(version: &str, msg_type: &MsgType) -> bool {
    v0_known_types(version).contains(msg_type)
}

// ----- ids -----

/// Makes message ids `msg_<unix-ms>_<counter>_<16 hex>`. v0 peers drop any id among the last
/// 1000 they saw from any sender, so ids must be unique across processes: the counter makes
/// them unique within a session, the random part across sessions and processes.
/// The randomness is a seed passed in; the generator (splitmix64) only spreads it.
#[derive(Debug, Clone)]
pub struct IdGen {
    counter: u64,
    state: u64,
}

impl IdGen {
    pub fn new(rand_seed: u64) -> IdGen {
        IdGen {
            counter: 0,
            state: rand_seed,
        }
    }

    fn next_random(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub fn next_id(&mut self, unix_ms: i64) -> String {
        self.counter += 1;
        let r = self.next_random();
        format_id(unix_ms, self.counter, &r.to_be_bytes())
    }
}

/// `msg_<unix-ms>_<counter>_<hex of random>`.
pub fn format_id(unix_ms: i64, counter: u64, random: &[u8]) -> String {
    format!(
        "msg_{unix_ms}_{counter}_{}",
        crate::relay::auth::to_hex(random)
    )
}

// ----- the envelope -----

/// One relay message: `{"id","msg_type","from_peer","timestamp","payload"}`.
///
/// A `session_transfer` holds its chunk in one of two forms, and converts between them only
/// when a link needs the other (relay-protocol.md §4, "Binary data in frames"):
/// - **base64 text**, as `payload.data`: a message read from a line (`decode_line`), or made by
///   an application that had the text;
/// - **raw bytes**, in `chunk` (`payload` then has no `data`): a message read from a frame
///   (`frame::decode_body`), made with `with_chunk`, or made raw by `make_chunk_raw` (which the
///   session runs on every message it receives, and on every message it sends as a frame).
///
/// A line writes a raw chunk as `data` (one base64 encode, in `encode_json`); a frame writes a
/// text chunk as raw bytes (one decode, in `frame::encode_body`, unless `make_chunk_raw` already
/// did it). So each side decodes or encodes a chunk's base64 at most once, and a frame link
/// never does. Two messages are equal when they are the same message, whatever form each holds
/// its chunk in.
#[derive(Clone)]
pub struct RelayMessage {
    pub id: String,
    pub msg_type: MsgType,
    pub from_peer: String,
    /// Unix epoch milliseconds, always an integer on the wire.
    pub timestamp: i64,
    /// Always a JSON object. For a `session_transfer` holding its chunk as text, `data` is its
    /// padded base64; holding it raw, there is no `data` (see `chunk`).
    pub payload: Value,
    /// A `session_transfer`'s chunk as raw bytes, when the message holds it so. Private so
    /// that only `with_chunk` and `make_chunk_raw` set it, and they take `data` out of
    /// `payload` (the invariant: never both).
    chunk: Option<Arc<[u8]>>,
}

impl std::fmt::Debug for RelayMessage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // A chunk's length, not its bytes: they may be half a megabyte.
        f.debug_struct("RelayMessage")
            .field("id", &self.id)
            .field("msg_type", &self.msg_type)
            .field("from_peer", &self.from_peer)
            .field("timestamp", &self.timestamp)
            .field("payload", &self.payload)
            .field("chunk_bytes", &self.chunk.as_ref().map(|c| c.len()))
            .finish()
    }
}

impl PartialEq for RelayMessage {
    fn eq(&self, other: &RelayMessage) -> bool {
        if self.id != other.id
            || self.msg_type != other.msg_type
            || self.from_peer != other.from_peer
            || self.timestamp != other.timestamp
        {
            return false;
        }
        match (&self.chunk, &other.chunk) {
            (None, None) => self.payload == other.payload,
            (Some(a), Some(b)) => a == b && self.payload == other.payload,
            // One holds its chunk as text, the other raw: compare them as a line carries them
            // (an encode, but equality is for tests and checks, never on the data path).
            _ => self.line_payload() == other.line_payload(),
        }
    }
}

#[derive(Serialize)]
struct Envelope<'a> {
    id: &'a str,
    msg_type: &'a MsgType,
    from_peer: &'a str,
    timestamp: i64,
    payload: &'a Value,
}

impl RelayMessage {
    pub fn new(
        id: impl Into<String>,
        msg_type: MsgType,
        from_peer: impl Into<String>,
        timestamp: i64,
        payload: Value,
    ) -> RelayMessage {
        RelayMessage {
            id: id.into(),
            msg_type,
            from_peer: from_peer.into(),
            timestamp,
            payload,
            chunk: None,
        }
    }

    /// This message holding `chunk` raw as its `session_transfer` data: any `data` key is
    /// taken out of the payload. (`payload_typed`, and so `Session::send`, refuses a raw chunk
    /// on any other type.)
    pub fn with_chunk(mut self, chunk: impl Into<Arc<[u8]>>) -> RelayMessage {
        if let Value::Object(map) = &mut self.payload {
            map.remove("data");
        }
        self.chunk = Some(chunk.into());
        self
    }

    /// The chunk's raw bytes, when the message holds them raw (see the type's doc).
    pub fn chunk(&self) -> Option<&Arc<[u8]>> {
        self.chunk.as_ref()
    }

    /// A `session_transfer` holding its chunk as base64 text now holds it raw: the text is
    /// decoded (strictly: canonical padded base64, at most `CHUNK_CAP_BYTES`) and `data` leaves
    /// the payload, so no later step decodes it again. Nothing to do for any other type, for a
    /// chunk already raw, or when `data` is absent or not a string (`payload_typed` says why).
    /// On error the message is unchanged.
    pub fn make_chunk_raw(&mut self) -> Result<(), RelayError> {
        if self.msg_type != MsgType::SessionTransfer || self.chunk.is_some() {
            return Ok(());
        }
        let Value::Object(map) = &mut self.payload else {
            return Ok(());
        };
        let Some(Value::String(text)) = map.get("data") else {
            return Ok(());
        };
        let raw = decode_chunk(text)?;
        map.remove("data");
        self.chunk = Some(raw);
        Ok(())
    }

    /// The payload as a line carries it: a raw chunk goes back in as base64 `data` (the one
    /// encode on a line link's sending side).
    fn line_payload(&self) -> Cow<'_, Value> {
        match (&self.chunk, &self.payload) {
            (Some(chunk), Value::Object(map)) => {
                let mut map = map.clone();
                map.insert(
                    "data".into(),
                    Value::String(crate::relay::base64::encode(chunk)),
                );
                Cow::Owned(Value::Object(map))
            }
            _ => Cow::Borrowed(&self.payload),
        }
    }

    /// Decodes one line, given without its `\n`. A trailing `\r` is tolerated (and counts
    /// against the cap).
    pub fn decode_line(line: &[u8]) -> Result<RelayMessage, RelayError> {
        if line.len() > LINE_CAP_BYTES {
            return Err(RelayError::LineTooLong {
                len_bytes: line.len(),
            });
        }
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() {
            return Err(RelayError::EmptyLine);
        }
        RelayMessage::decode_json(line)
    }

    /// Decodes a message from JSON text (a line's content or a frame's body).
    pub fn decode_json(bytes: &[u8]) -> Result<RelayMessage, RelayError> {
        if std::str::from_utf8(bytes).is_err() {
            return Err(RelayError::NotUtf8);
        }
        crate::relay::json_budget::check(bytes).map_err(|_| RelayError::TooManyValues {
            cap: crate::relay::json_budget::MAX_JSON_VALUES,
        })?;
        let v: Value =
            serde_json::from_slice(bytes).map_err(|e| RelayError::NotJson(e.to_string()))?;
        RelayMessage::from_value(v)
    }

    /// Checks an envelope already parsed as JSON. Extra keys are ignored, as v0 peers do.
    pub fn from_value(v: Value) -> Result<RelayMessage, RelayError> {
        let Value::Object(mut map) = v else {
            return Err(RelayError::NotAnObject);
        };
        let id = take_string(&mut map, "id")?;
        let msg_type = MsgType::parse(&take_string(&mut map, "msg_type")?)?;
        let from_peer = take_string(&mut map, "from_peer")?;
        let timestamp = match map.get("timestamp") {
            None => return Err(RelayError::MissingField("timestamp")),
            Some(Value::Number(n)) => match n.as_i64() {
                Some(t) => t,
                None if n.is_f64() => return Err(RelayError::FloatTimestamp),
                None => {
                    return Err(RelayError::FieldType {
                        field: "timestamp",
                        expected: "integer unix milliseconds within i64",
                    })
                }
            },
            Some(_) => {
                return Err(RelayError::FieldType {
                    field: "timestamp",
                    expected: "integer unix milliseconds",
                })
            }
        };
        let payload = match map.remove("payload") {
            None => return Err(RelayError::MissingField("payload")),
            Some(p @ Value::Object(_)) => p,
            Some(_) => {
                return Err(RelayError::FieldType {
                    field: "payload",
                    expected: "an object",
                })
            }
        };
        Ok(RelayMessage::new(
            id, msg_type, from_peer, timestamp, payload,
        ))
    }

    /// Compact JSON in the fixed key order `id, msg_type, from_peer, timestamp, payload`;
    /// payload keys in the order `serde_json::Value` keeps (sorted).
    /// A raw `session_transfer` chunk is written as base64 `data`, as v0 lines carry it.
    pub fn encode_json(&self) -> Vec<u8> {
        let payload = self.line_payload();
        let env = Envelope {
            id: &self.id,
            msg_type: &self.msg_type,
            from_peer: &self.from_peer,
            timestamp: self.timestamp,
            payload: &payload,
        };
        // Serializing strings, an integer and a Value (whose keys are strings) cannot fail.
        serde_json::to_vec(&env).expect("a relay envelope always serializes")
    }

    /// The NDJSON line, `\n` included.
    pub fn encode_line(&self) -> Vec<u8> {
        let mut v = self.encode_json();
        v.push(b'\n');
        v
    }

    /// The typed payload of this message's type. A `session_transfer` chunk held as text is
    /// decoded here (and the bytes dropped afterwards: `make_chunk_raw` keeps them); one held
    /// raw is shared, never copied or encoded.
    pub fn payload_typed(&self) -> Result<Payload, RelayError> {
        match &self.chunk {
            None => Payload::parse(&self.msg_type, &self.payload),
            Some(chunk) if self.msg_type == MsgType::SessionTransfer => {
                SessionTransfer::from_raw(&self.payload, chunk).map(Payload::SessionTransfer)
            }
            Some(_) => Err(RelayError::BadPayload {
                msg_type: self.msg_type.as_str().to_owned(),
                detail: "only session_transfer carries a raw chunk".into(),
            }),
        }
    }
}

fn take_string(map: &mut Map<String, Value>, key: &'static str) -> Result<String, RelayError> {
    match map.remove(key) {
        None => Err(RelayError::MissingField(key)),
        Some(Value::String(s)) => Ok(s),
        Some(_) => Err(RelayError::FieldType {
            field: key,
            expected: "a string",
        }),
    }
}

// ----- typed payloads -----

/// A key that must be present but may be `null` (serde treats a missing `Option` as None;
/// with a `deserialize_with` and no default, absence is an error).
fn required_nullable<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(d)
}

/// `challenge`: the acceptor's first line, `from_peer` `""`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Challenge {
    /// 64 lowercase hex characters of 32 random bytes.
    pub nonce: String,
    /// v1 marker: the acceptor verifies v1 transcript proofs (docs/relay-protocol.md §2.1).
    /// v0 dialers ignore it, as they ignore any extra key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub proto: Option<u32>,
    /// v1 marker: the acceptor's peer id, bound into both proofs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peer: Option<String>,
}

/// `handshake`: the dialler's answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Handshake {
    /// Lowercase hex HMAC-SHA256: v0, over the challenge nonce's hex text; v1 (`proto` ≥ 1),
    /// over the dialer's transcript (`relay::transcript`).
    pub proof: String,
    /// The dialler's software version.
    pub version: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub listen_port: Option<u16>,
    /// `true`: a one-shot connection that never displaces the lasting link.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub transient: Option<bool>,
    /// v1: absent means proto 0 (and then `features` is ignored).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub proto: Option<u32>,
    /// v1: the features the dialler offers, by wire name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub features: Option<Vec<String>>,
    /// v1, `mutual-auth`: the dialler's own nonce, which the acceptor proves in its ack.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nonce: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HandshakeStatus {
    Ok,
    Denied,
}

/// `handshake_ack`: the acceptor's verdict.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HandshakeAck {
    pub status: HandshakeStatus,
    /// v1: the agreed proto; absent from a v0 acceptor.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub proto: Option<u32>,
    /// v1: the agreed features (the intersection).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub features: Option<Vec<String>>,
    /// v1 `mutual-auth`: the acceptor's transcript proof (`relay::transcript`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub proof: Option<String>,
    /// v1: the acceptor's software version.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}

/// One agent in a delta heartbeat's `upsert`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentUpsert {
    pub name: String,
    pub parked: u32,
    pub queued: u32,
}

/// `heartbeat`: `{}` (0.64), `{worker_id, timestamp, sessions[]}` (later v0), and the v1
/// directory forms (see `heartbeat`): full `{…, version, agents, seq?}` and delta
/// `{seq, base, upsert[], remove[], version?}`. Every key is optional.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Heartbeat {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub worker_id: Option<String>,
    /// v0 does not pin its JSON type; we send integer unix ms and accept anything.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sessions: Option<Vec<Value>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agents: Option<BTreeMap<String, crate::relay::heartbeat::AgentEntry>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seq: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub base: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub upsert: Option<Vec<AgentUpsert>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remove: Option<Vec<String>>,
}

/// `ack`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Ack {
    pub ack_id: String,
    /// v1 `hb-delta`: the receiver could not apply the acked heartbeat; send a full one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resync: Option<bool>,
    /// v1 `bus-forward`: the acked `bus_forward` was refused for good (the reason; the
    /// sending hub bounces the envelope to its sender). Absent: the envelope is durably queued.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// `bus_forward` (v1 `bus-forward`): one envelope for an agent of the receiving hub.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BusForward {
    /// The envelope's canonical JSON text as the sending hub accepted it: `to` is
    /// `name@<receiver's peer id>`, `from` the sender's bare name (the receiver appends
    /// `@<sender's peer id>`). Carried as a string so the body stays byte for byte.
    pub envelope: String,
    /// Hubs this envelope has crossed, counting this one (1 from the hub that accepted it).
    pub hop: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DependencyGraph {
    pub blocks: Vec<String>,
    pub blocked_by: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskContext {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub git_remote: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub git_ref: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub git_commit: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub relevant_files: Option<Vec<String>>,
    /// Shape not pinned by relay-compat.md: kept as JSON.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub brain_context: Option<Value>,
    pub dependency_graph: DependencyGraph,
}

/// `delegate_task`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DelegateTask {
    pub task_id: String,
    pub prompt: String,
    /// Required key, string or null.
    #[serde(deserialize_with = "required_nullable")]
    pub cwd: Option<String>,
    pub context: TaskContext,
    /// The seed's addition: which agent runs it (default `claude` when absent).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskStats {
    pub tokens_used: u64,
    pub cost_usd: f64,
    pub context_pct: f64,
    pub files_modified: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub elapsed_secs: Option<u64>,
    /// Shape not pinned by relay-compat.md: kept as JSON.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_activity: Option<Value>,
}

/// `task_status`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskStatus {
    pub task_id: String,
    /// `running` in v0.
    pub state: String,
    pub stats: TaskStats,
}

/// `task_handoff`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskHandoff {
    pub task_id: String,
    /// `completed` or `failed`.
    pub state: String,
    pub summary: String,
    pub artifacts: Vec<Value>,
    /// Required key; null accepted (a failed task may have no ref).
    #[serde(deserialize_with = "required_nullable")]
    pub git_ref: Option<String>,
    pub total_cost_usd: f64,
    pub total_tokens: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Value>,
}

/// `task_interrupt`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskInterrupt {
    pub task_id: String,
    /// `nudge`, `stop` or `reroute`.
    pub interrupt_type: String,
    pub reason: String,
}

/// `knowledge_sync`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KnowledgeSync {
    pub units: Vec<Value>,
    pub sync_epoch: u64,
}

/// `knowledge_request`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KnowledgeRequest {
    pub since_epoch: u64,
}

/// `knowledge_snapshot`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KnowledgeSnapshot {
    pub units: Vec<Value>,
    pub page: u64,
    pub total_pages: u64,
}

/// `hive_join_request`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HiveJoinRequest {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hive_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// Shape not pinned by relay-compat.md: kept as JSON.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grant: Option<Value>,
}

/// `hive_join_result`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HiveJoinResult {
    /// `member`, `pending` or `refused`.
    pub state: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hive_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
}

/// `knowledge_rejected`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KnowledgeRejected {
    pub reason: String,
    /// relay-compat.md writes `units` without `[]` here: its shape is kept as JSON.
    pub units: Value,
}

/// The largest `session_transfer` chunk, raw: 512 KiB (relay-compat.md; the file is sent in
/// chunks of at most this, under a 64 MB file cap). Its base64 is 699,052 characters, so it
/// fits a line; raw, it fits a frame.
pub const CHUNK_CAP_BYTES: usize = 512 * 1024;

/// The length of the padded base64 of `CHUNK_CAP_BYTES`: a longer `data` is refused before
/// it is decoded.
const CHUNK_CAP_BASE64: usize = CHUNK_CAP_BYTES.div_ceil(3) * 4;

fn transfer_error(detail: String) -> RelayError {
    RelayError::BadPayload {
        msg_type: "session_transfer".into(),
        detail,
    }
}

fn over_chunk_cap(len: usize) -> RelayError {
    transfer_error(format!(
        "data holds {len} raw bytes, over the chunk cap of {CHUNK_CAP_BYTES}"
    ))
}

/// A chunk's base64 text to its bytes: the one decode on a line link's receiving side.
fn decode_chunk(text: &str) -> Result<Arc<[u8]>, RelayError> {
    if text.len() > CHUNK_CAP_BASE64 {
        return Err(over_chunk_cap(text.len() / 4 * 3));
    }
    let raw = crate::relay::base64::decode(text)
        .map_err(|e| transfer_error(format!("data is not canonical padded base64: {e}")))?;
    if raw.len() > CHUNK_CAP_BYTES {
        return Err(over_chunk_cap(raw.len()));
    }
    Ok(raw.into())
}

/// `session_transfer`'s keys other than its chunk: a frame's JSON head (beside `data_len`),
/// and the payload of a message holding its chunk raw.
#[derive(Deserialize)]
struct TransferHead {
    session_id: String,
    cwd: String,
    seq: u64,
    total: u64,
    digest: String,
}

/// `session_transfer`: one chunk of a session file.
#[derive(Clone, PartialEq)]
pub struct SessionTransfer {
    pub session_id: String,
    pub cwd: String,
    pub seq: u64,
    pub total: u64,
    /// Hex SHA-256 of the whole file.
    pub digest: String,
    /// The chunk's raw bytes, at most `CHUNK_CAP_BYTES`. A line carries them as `data`,
    /// canonical padded base64; a frame carries them raw after the JSON.
    pub data: Arc<[u8]>,
}

impl std::fmt::Debug for SessionTransfer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionTransfer")
            .field("session_id", &self.session_id)
            .field("cwd", &self.cwd)
            .field("seq", &self.seq)
            .field("total", &self.total)
            .field("digest", &self.digest)
            .field("data_bytes", &self.data.len())
            .finish()
    }
}

impl SessionTransfer {
    fn with_head(head: TransferHead, data: Arc<[u8]>) -> SessionTransfer {
        SessionTransfer {
            session_id: head.session_id,
            cwd: head.cwd,
            seq: head.seq,
            total: head.total,
            digest: head.digest,
            data,
        }
    }

    /// From a payload holding the chunk as base64 `data` (a line's form): decodes it.
    fn from_line_payload(payload: &Value) -> Result<SessionTransfer, RelayError> {
        let head: TransferHead = typed(&MsgType::SessionTransfer, payload)?;
        let data = match payload.get("data") {
            Some(Value::String(text)) => decode_chunk(text)?,
            Some(_) => return Err(transfer_error("data must be a base64 string".into())),
            None => return Err(transfer_error("missing field `data`".into())),
        };
        Ok(SessionTransfer::with_head(head, data))
    }

    /// From a payload without `data` and the chunk beside it, raw: no base64 at all.
    fn from_raw(payload: &Value, chunk: &Arc<[u8]>) -> Result<SessionTransfer, RelayError> {
        let head: TransferHead = typed(&MsgType::SessionTransfer, payload)?;
        if payload.get("data").is_some() {
            return Err(transfer_error(
                "data is given twice: as base64 in the payload and as a raw chunk".into(),
            ));
        }
        if chunk.len() > CHUNK_CAP_BYTES {
            return Err(over_chunk_cap(chunk.len()));
        }
        Ok(SessionTransfer::with_head(head, Arc::clone(chunk)))
    }

    /// The payload without `data`: what goes beside a raw chunk
    /// (`RelayMessage::with_chunk`).
    pub fn head(&self) -> Value {
        serde_json::json!({
            "session_id": self.session_id,
            "cwd": self.cwd,
            "seq": self.seq,
            "total": self.total,
            "digest": self.digest,
        })
    }

    /// The payload as a line carries it: the head plus `data` in base64 (an encode).
    pub fn to_value(&self) -> Value {
        let mut v = self.head();
        v["data"] = Value::String(crate::relay::base64::encode(&self.data));
        v
    }

    /// A copy of the chunk's bytes. Never fails any more: the chunk is checked when the
    /// payload is parsed, and `data` holds the bytes themselves.
    pub fn data_bytes(&self) -> Result<Vec<u8>, RelayError> {
        Ok(self.data.to_vec())
    }
}

/// `session_received`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionReceived {
    pub session_id: String,
    pub path: String,
    pub cwd: String,
    /// Shape not pinned by relay-compat.md: kept as JSON.
    pub resume: Value,
}

/// The typed payload of a message, one variant per v0 type.
#[derive(Debug, Clone, PartialEq)]
pub enum Payload {
    Challenge(Challenge),
    Handshake(Handshake),
    HandshakeAck(HandshakeAck),
    Heartbeat(Heartbeat),
    Ack(Ack),
    DelegateTask(DelegateTask),
    TaskStatus(TaskStatus),
    TaskHandoff(TaskHandoff),
    TaskInterrupt(TaskInterrupt),
    KnowledgeSync(KnowledgeSync),
    KnowledgeRequest(KnowledgeRequest),
    KnowledgeSnapshot(KnowledgeSnapshot),
    HiveJoinRequest(HiveJoinRequest),
    HiveJoinResult(HiveJoinResult),
    KnowledgeRejected(KnowledgeRejected),
    SessionTransfer(SessionTransfer),
    SessionReceived(SessionReceived),
    BusForward(BusForward),
    /// An unknown type's payload, untouched.
    Unknown {
        msg_type: String,
        payload: Value,
    },
}

fn typed<T: for<'de> Deserialize<'de>>(t: &MsgType, payload: &Value) -> Result<T, RelayError> {
    if !payload.is_object() {
        return Err(RelayError::BadPayload {
            msg_type: t.as_str().to_owned(),
            detail: "payload must be an object".into(),
        });
    }
    T::deserialize(payload).map_err(|e| RelayError::BadPayload {
        msg_type: t.as_str().to_owned(),
        detail: e.to_string(),
    })
}

impl Payload {
    /// Parses a payload for its type: required keys must be present with the right JSON
    /// type, optional keys may be absent, unknown keys are ignored. A `session_transfer`
    /// payload here is a line's, with `data` in base64 (decoded once, into the typed chunk);
    /// `RelayMessage::payload_typed` also reads a message holding its chunk raw.
    pub fn parse(msg_type: &MsgType, payload: &Value) -> Result<Payload, RelayError> {
        let t = msg_type;
        Ok(match msg_type {
            MsgType::Challenge => Payload::Challenge(typed(t, payload)?),
            MsgType::Handshake => Payload::Handshake(typed(t, payload)?),
            MsgType::HandshakeAck => Payload::HandshakeAck(typed(t, payload)?),
            MsgType::Heartbeat => Payload::Heartbeat(typed(t, payload)?),
            MsgType::Ack => Payload::Ack(typed(t, payload)?),
            MsgType::DelegateTask => Payload::DelegateTask(typed(t, payload)?),
            MsgType::TaskStatus => Payload::TaskStatus(typed(t, payload)?),
            MsgType::TaskHandoff => Payload::TaskHandoff(typed(t, payload)?),
            MsgType::TaskInterrupt => Payload::TaskInterrupt(typed(t, payload)?),
            MsgType::KnowledgeSync => Payload::KnowledgeSync(typed(t, payload)?),
            MsgType::KnowledgeRequest => Payload::KnowledgeRequest(typed(t, payload)?),
            MsgType::KnowledgeSnapshot => Payload::KnowledgeSnapshot(typed(t, payload)?),
            MsgType::HiveJoinRequest => Payload::HiveJoinRequest(typed(t, payload)?),
            MsgType::HiveJoinResult => Payload::HiveJoinResult(typed(t, payload)?),
            MsgType::KnowledgeRejected => Payload::KnowledgeRejected(typed(t, payload)?),
            MsgType::SessionTransfer => {
                Payload::SessionTransfer(SessionTransfer::from_line_payload(payload)?)
            }
            MsgType::SessionReceived => Payload::SessionReceived(typed(t, payload)?),
            MsgType::BusForward => Payload::BusForward(typed(t, payload)?),
            MsgType::Unknown(name) => Payload::Unknown {
                msg_type: name.clone(),
                payload: payload.clone(),
            },
        })
    }

    pub fn msg_type(&self) -> MsgType {
        match self {
            Payload::Challenge(_) => MsgType::Challenge,
            Payload::Handshake(_) => MsgType::Handshake,
            Payload::HandshakeAck(_) => MsgType::HandshakeAck,
            Payload::Heartbeat(_) => MsgType::Heartbeat,
            Payload::Ack(_) => MsgType::Ack,
            Payload::DelegateTask(_) => MsgType::DelegateTask,
            Payload::TaskStatus(_) => MsgType::TaskStatus,
            Payload::TaskHandoff(_) => MsgType::TaskHandoff,
            Payload::TaskInterrupt(_) => MsgType::TaskInterrupt,
            Payload::KnowledgeSync(_) => MsgType::KnowledgeSync,
            Payload::KnowledgeRequest(_) => MsgType::KnowledgeRequest,
            Payload::KnowledgeSnapshot(_) => MsgType::KnowledgeSnapshot,
            Payload::HiveJoinRequest(_) => MsgType::HiveJoinRequest,
            Payload::HiveJoinResult(_) => MsgType::HiveJoinResult,
            Payload::KnowledgeRejected(_) => MsgType::KnowledgeRejected,
            Payload::SessionTransfer(_) => MsgType::SessionTransfer,
            Payload::SessionReceived(_) => MsgType::SessionReceived,
            Payload::BusForward(_) => MsgType::BusForward,
            Payload::Unknown { msg_type, .. } => MsgType::Unknown(msg_type.clone()),
        }
    }

    /// The payload as JSON: required keys always written (`null` for a null-able one),
    /// optional keys only when present; a `session_transfer` chunk as base64 `data`, as a
    /// line carries it.
    pub fn to_value(&self) -> Value {
        fn v<T: Serialize>(x: &T) -> Value {
            // These structs hold strings, numbers, Values and string-keyed maps only.
            serde_json::to_value(x).expect("a typed payload always serializes")
        }
        match self {
            Payload::Challenge(p) => v(p),
            Payload::Handshake(p) => v(p),
            Payload::HandshakeAck(p) => v(p),
            Payload::Heartbeat(p) => v(p),
            Payload::Ack(p) => v(p),
            Payload::DelegateTask(p) => v(p),
            Payload::TaskStatus(p) => v(p),
            Payload::TaskHandoff(p) => v(p),
            Payload::TaskInterrupt(p) => v(p),
            Payload::KnowledgeSync(p) => v(p),
            Payload::KnowledgeRequest(p) => v(p),
            Payload::KnowledgeSnapshot(p) => v(p),
            Payload::HiveJoinRequest(p) => v(p),
            Payload::HiveJoinResult(p) => v(p),
            Payload::KnowledgeRejected(p) => v(p),
            Payload::SessionTransfer(p) => p.to_value(),
            Payload::SessionReceived(p) => v(p),
            Payload::BusForward(p) => v(p),
            Payload::Unknown { payload, .. } => payload.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn line(t: &str, payload: &str) -> String {
        format!(
            r#"{{"id":"msg_1_1","msg_type":"{t}","from_peer":"mini","timestamp":1700000000000,"payload":{payload}}}"#
        )
    }

    #[test]
    fn decodes_and_reencodes_a_v0_line_exactly() {
        let l = line("heartbeat", "{}");
        let m = RelayMessage::decode_line(l.as_bytes()).unwrap();
        assert_eq!(m.msg_type, MsgType::Heartbeat);
        assert_eq!(m.timestamp, 1_700_000_000_000);
        assert_eq!(m.from_peer, "mini");
        assert_eq!(m.encode_json(), l.as_bytes());
        assert_eq!(m.encode_line(), format!("{l}\n").into_bytes());
    }

    #[test]
    fn envelope_errors_are_typed_never_panics() {
        let cases: Vec<(String, RelayError)> = vec![
            (
                line("heartbeat", "{}").replace("1700000000000", "1700000000000.5"),
                RelayError::FloatTimestamp,
            ),
            (
                line("heartbeat", "{}").replace("1700000000000", "1.7e12"),
                RelayError::FloatTimestamp,
            ),
            (
                r#"{"id":"x","msg_type":"heartbeat","from_peer":"p","timestamp":1}"#.into(),
                RelayError::MissingField("payload"),
            ),
            (
                line("heartbeat", "null"),
                RelayError::FieldType {
                    field: "payload",
                    expected: "an object",
                },
            ),
            (
                line("Heartbeat", "{}"),
                RelayError::WrongCaseType("Heartbeat".into()),
            ),
            (
                line("HandshakeAck", "{}"),
                RelayError::WrongCaseType("HandshakeAck".into()),
            ),
            (
                line("HEARTBEAT", "{}"),
                RelayError::WrongCaseType("HEARTBEAT".into()),
            ),
            (
                line("heartbeat", "{}").replace("1700000000000", "\"1700000000000\""),
                RelayError::FieldType {
                    field: "timestamp",
                    expected: "integer unix milliseconds",
                },
            ),
            (
                line("heartbeat", "{}").replace("1700000000000", "18446744073709551615"),
                RelayError::FieldType {
                    field: "timestamp",
                    expected: "integer unix milliseconds within i64",
                },
            ),
            (
                r#"{"msg_type":"heartbeat","from_peer":"p","timestamp":1,"payload":{}}"#.into(),
                RelayError::MissingField("id"),
            ),
            (
                r#"{"id":7,"msg_type":"heartbeat","from_peer":"p","timestamp":1,"payload":{}}"#
                    .into(),
                RelayError::FieldType {
                    field: "id",
                    expected: "a string",
                },
            ),
            ("[1,2]".into(), RelayError::NotAnObject),
            ("".into(), RelayError::EmptyLine),
            ("\r".into(), RelayError::EmptyLine),
        ];
        for (l, want) in cases {
            assert_eq!(RelayMessage::decode_line(l.as_bytes()), Err(want), "{l}");
        }
        assert!(matches!(
            RelayMessage::decode_line(b"{not json"),
            Err(RelayError::NotJson(_))
        ));
        assert!(matches!(
            RelayMessage::decode_line(b"   "),
            Err(RelayError::NotJson(_))
        ));
        assert_eq!(
            RelayMessage::decode_line(b"{\"id\":\"\xff\"}"),
            Err(RelayError::NotUtf8)
        );
    }

    #[test]
    fn trailing_cr_is_tolerated_and_counts_against_the_cap() {
        let l = format!("{}\r", line("heartbeat", "{}"));
        assert!(RelayMessage::decode_line(l.as_bytes()).is_ok());

        // A line of exactly the cap passes; one byte more does not; the \r is one of them.
        let base = line("heartbeat", r#"{"pad":""}"#);
        let fill = LINE_CAP_BYTES - base.len();
        let exact = base.replace(r#""pad":"""#, &format!(r#""pad":"{}""#, "x".repeat(fill)));
        assert_eq!(exact.len(), LINE_CAP_BYTES);
        assert!(RelayMessage::decode_line(exact.as_bytes()).is_ok());
        let with_cr = format!("{exact}\r");
        assert_eq!(
            RelayMessage::decode_line(with_cr.as_bytes()),
            Err(RelayError::LineTooLong {
                len_bytes: LINE_CAP_BYTES + 1
            })
        );
        // The \r counts: cap - 1 bytes of JSON plus \r is exactly the cap and passes.
        let shorter = base.replace(
            r#""pad":"""#,
            &format!(r#""pad":"{}""#, "x".repeat(fill - 1)),
        );
        let shorter_cr = format!("{shorter}\r");
        assert_eq!(shorter_cr.len(), LINE_CAP_BYTES);
        assert!(RelayMessage::decode_line(shorter_cr.as_bytes()).is_ok());
    }

    #[test]
    fn extra_keys_are_ignored_everywhere() {
        let l = r#"{"id":"a","msg_type":"ack","from_peer":"p","timestamp":5,"payload":{"ack_id":"z","later":1},"trace":"x"}"#;
        let m = RelayMessage::decode_line(l.as_bytes()).unwrap();
        assert_eq!(
            m.payload_typed().unwrap(),
            Payload::Ack(Ack {
                ack_id: "z".into(),
                resync: None,
                error: None,
            })
        );
    }

    #[test]
    fn unknown_types_are_kept_verbatim() {
        let m = RelayMessage::decode_line(line("bus_relay", r#"{"a":1}"#).as_bytes()).unwrap();
        assert_eq!(m.msg_type, MsgType::Unknown("bus_relay".into()));
        assert_eq!(m.msg_type.as_str(), "bus_relay");
        let m = RelayMessage::decode_line(line("BusRelay", "{}").as_bytes()).unwrap();
        assert_eq!(m.msg_type, MsgType::Unknown("BusRelay".into()));
        assert!(matches!(
            m.payload_typed().unwrap(),
            Payload::Unknown { .. }
        ));
    }

    #[test]
    fn bus_forward_is_a_v1_type_of_its_feature() {
        let m = RelayMessage::decode_line(
            line("bus_forward", r#"{"envelope":"{}","hop":1}"#).as_bytes(),
        )
        .unwrap();
        assert_eq!(m.msg_type, MsgType::BusForward);
        assert_eq!(m.msg_type.v0_index(), None);
        assert_eq!(feature_for(&m.msg_type), Some(Feature::BusForward));
        assert_eq!(
            m.payload_typed().unwrap(),
            Payload::BusForward(BusForward {
                envelope: "{}".into(),
                hop: 1
            })
        );
        // Its v0-style spellings are refused like the v0 types' are.
        assert_eq!(
            MsgType::parse("BusForward"),
            Err(RelayError::WrongCaseType("BusForward".into()))
        );
        assert!(
            RelayMessage::decode_line(line("bus_forward", r#"{"hop":1}"#).as_bytes())
                .unwrap()
                .payload_typed()
                .is_err()
        );
    }

    #[test]
    fn every_v0_type_round_trips_its_name() {
        for (i, t) in V0_TYPES.iter().enumerate() {
            assert_eq!(MsgType::parse(t.as_str()).unwrap(), *t);
            assert_eq!(t.v0_index(), Some(i));
            assert_eq!(feature_for(t), None);
        }
        assert_eq!(MsgType::Unknown("x".into()).v0_index(), None);
    }

    #[test]
    fn required_keys_are_required_and_optional_ones_optional() {
        let ok = |t: MsgType, v: Value| Payload::parse(&t, &v).unwrap();
        let bad = |t: MsgType, v: Value| Payload::parse(&t, &v).unwrap_err();
        let ctx = json!({"dependency_graph": {"blocks": [], "blocked_by": []}});
        // cwd: required, null allowed.
        ok(
            MsgType::DelegateTask,
            json!({"task_id":"t","prompt":"p","cwd":null,"context":ctx}),
        );
        let e = bad(
            MsgType::DelegateTask,
            json!({"task_id":"t","prompt":"p","context":ctx}),
        );
        assert!(e.to_string().contains("cwd"), "{e}");
        // dependency_graph: always present.
        bad(
            MsgType::DelegateTask,
            json!({"task_id":"t","prompt":"p","cwd":"/x","context":{}}),
        );
        ok(MsgType::Heartbeat, json!({}));
        ok(
            MsgType::Heartbeat,
            json!({"worker_id":"w","timestamp":1,"sessions":[]}),
        );
        ok(MsgType::Handshake, json!({"proof":"p","version":"0.64.0"}));
        bad(MsgType::Handshake, json!({"proof":"p"}));
        bad(
            MsgType::Handshake,
            json!({"proof":"p","version":"1","listen_port":70000}),
        );
        ok(MsgType::HandshakeAck, json!({"status":"ok"}));
        bad(MsgType::HandshakeAck, json!({"status":"OK"}));
        ok(MsgType::HiveJoinRequest, json!({}));
        bad(MsgType::HiveJoinResult, json!({}));
        bad(MsgType::Ack, json!({}));
        let st = json!({"session_id":"s","cwd":"/","seq":0,"total":1,"digest":"d","data":"Zm9v"});
        ok(MsgType::SessionTransfer, st.clone());
        let mut not_b64 = st.clone();
        not_b64["data"] = json!("Zm9");
        bad(MsgType::SessionTransfer, not_b64);
        // Typed round trip.
        let p = ok(MsgType::SessionTransfer, st.clone());
        assert_eq!(p.to_value(), st);
        assert_eq!(p.msg_type(), MsgType::SessionTransfer);
    }

    fn transfer_payload(data: Value) -> Value {
        json!({"session_id":"s","cwd":"/","seq":0,"total":1,"digest":"d","data":data})
    }

    fn base64_calls_since(before: (usize, usize)) -> (usize, usize) {
        let now = crate::relay::base64::calls::get();
        (now.0 - before.0, now.1 - before.1)
    }

    #[test]
    fn a_transfer_holds_its_chunk_as_text_or_raw_and_stays_the_same_message() {
        let raw: Vec<u8> = (0..=255u8).cycle().take(10_000).collect();
        let text = crate::relay::base64::encode(&raw);
        let l = line(
            "session_transfer",
            &transfer_payload(json!(text)).to_string(),
        );
        let as_text = RelayMessage::decode_line(l.as_bytes()).unwrap();
        assert!(
            as_text.chunk().is_none(),
            "a line's message holds base64 text"
        );
        assert_eq!(as_text.payload["data"], json!(text));

        let before = crate::relay::base64::calls::get();
        let mut as_raw = as_text.clone();
        as_raw.make_chunk_raw().unwrap();
        assert_eq!(base64_calls_since(before), (0, 1), "one decode");
        assert_eq!(as_raw.chunk().map(|c| &c[..]), Some(&raw[..]));
        assert!(as_raw.payload.get("data").is_none(), "never both");
        let before = crate::relay::base64::calls::get();
        as_raw.make_chunk_raw().unwrap();
        let typed = as_raw.payload_typed().unwrap();
        assert_eq!(base64_calls_since(before), (0, 0), "raw: nothing to decode");
        assert_eq!(typed, as_text.payload_typed().unwrap());
        let Payload::SessionTransfer(st) = &typed else {
            panic!("{typed:?}")
        };
        assert_eq!(st.data_bytes().unwrap(), raw);
        assert!(
            !format!("{st:?}{as_raw:?}").contains("255, 0, 1"),
            "Debug shows a chunk's length, not its bytes"
        );

        // Either form is the same message and the same line (the raw one encodes once).
        assert_eq!(as_raw, as_text);
        assert_eq!(as_text, as_raw);
        let before = crate::relay::base64::calls::get();
        assert_eq!(as_raw.encode_json(), l.as_bytes());
        assert_eq!(base64_calls_since(before), (1, 0));
        // Made from bytes with `with_chunk`: the same again; any `data` key is dropped.
        let made = RelayMessage::new(
            "msg_1_1",
            MsgType::SessionTransfer,
            "mini",
            1_700_000_000_000,
            transfer_payload(json!("stale")),
        )
        .with_chunk(raw.clone());
        assert_eq!(made, as_text);
        let mut other = made.clone();
        other.id = "msg_1_2".into();
        assert_ne!(other, as_text);
        let mut other = made.clone();
        other.payload["seq"] = json!(1);
        assert_ne!(other, as_text);
        let shorter = made.clone().with_chunk(&raw[1..]);
        assert_ne!(shorter, as_text);
        assert_ne!(shorter, made);
    }

    #[test]
    fn a_bad_chunk_is_refused_and_leaves_the_message_as_it_was() {
        for bad in ["Zm9", "Zh==", "Zm9v\n", "Zm-v"] {
            let l = line(
                "session_transfer",
                &transfer_payload(json!(bad)).to_string(),
            );
            let mut m = RelayMessage::decode_line(l.as_bytes()).unwrap();
            let e = m.make_chunk_raw().unwrap_err();
            assert!(
                e.to_string()
                    .contains("data is not canonical padded base64"),
                "{e}"
            );
            assert!(m.chunk().is_none());
            assert_eq!(m.encode_json(), l.as_bytes());
            assert!(m.payload_typed().is_err());
        }
        // Absent or not a string: nothing to make raw; the typed check says why.
        for p in [
            json!({"session_id":"s","cwd":"/","seq":0,"total":1,"digest":"d"}),
            transfer_payload(json!(5)),
        ] {
            let mut m = RelayMessage::new("i", MsgType::SessionTransfer, "p", 1, p);
            m.make_chunk_raw().unwrap();
            assert!(m.chunk().is_none());
            let e = m.payload_typed().unwrap_err().to_string();
            assert!(e.contains("data"), "{e}");
        }
        // Given twice: as a raw chunk and as a `data` key added afterwards.
        let mut twice = RelayMessage::new(
            "i",
            MsgType::SessionTransfer,
            "p",
            1,
            transfer_payload(json!("Zm9v")),
        )
        .with_chunk(&b"foo"[..]);
        twice.payload["data"] = json!("Zm9v");
        assert!(twice.payload_typed().is_err());
        // A raw chunk on another type.
        let m = RelayMessage::new("i", MsgType::Ack, "p", 1, json!({"ack_id": "x"}))
            .with_chunk(&b"foo"[..]);
        assert!(m.payload_typed().is_err());
    }

    #[test]
    fn the_chunk_cap_holds_in_either_form() {
        let at_cap = vec![7u8; CHUNK_CAP_BYTES];
        let over = vec![7u8; CHUNK_CAP_BYTES + 1];
        let parse = |raw: &[u8]| {
            Payload::parse(
                &MsgType::SessionTransfer,
                &transfer_payload(json!(crate::relay::base64::encode(raw))),
            )
        };
        assert!(parse(&at_cap).is_ok());
        let e = parse(&over).unwrap_err().to_string();
        assert!(e.contains("over the chunk cap of 524288"), "{e}");
        let raw_msg = |raw: &[u8]| {
            RelayMessage::new(
                "i",
                MsgType::SessionTransfer,
                "p",
                1,
                transfer_payload(json!(0)),
            )
            .with_chunk(raw)
        };
        assert!(raw_msg(&at_cap).payload_typed().is_ok());
        let e = raw_msg(&over).payload_typed().unwrap_err().to_string();
        assert!(e.contains("over the chunk cap"), "{e}");
        // A text form over the cap is refused before it is decoded.
        let mut m = RelayMessage::new(
            "i",
            MsgType::SessionTransfer,
            "p",
            1,
            transfer_payload(json!("A".repeat(CHUNK_CAP_BASE64 + 4))),
        );
        let before = crate::relay::base64::calls::get();
        assert!(m.make_chunk_raw().is_err());
        assert_eq!(base64_calls_since(before), (0, 0));
    }

    #[test]
    fn ids_are_unique_and_shaped() {
        let mut a = IdGen::new(1);
        let mut b = IdGen::new(2);
        let ia = a.next_id(1_700_000_000_000);
        let ib = b.next_id(1_700_000_000_000);
        assert_ne!(ia, ib, "same ms and counter, different sessions");
        assert!(ia.starts_with("msg_1700000000000_1_"), "{ia}");
        assert_eq!(ia.len(), "msg_1700000000000_1_".len() + 16);
        assert_ne!(a.next_id(1_700_000_000_000), ia);
        assert_eq!(format_id(5, 2, &[0xab, 0x01]), "msg_5_2_ab01");
    }

    #[test]
    fn v0_release_table() {
        assert_eq!(v0_known_types("0.64.0").len(), 12);
        assert_eq!(v0_known_types("0.64").len(), 12);
        assert_eq!(v0_known_types("garbage").len(), 12);
        assert!(v0_knows("0.64.0", &MsgType::KnowledgeSnapshot));
        assert!(!v0_knows("0.64.0", &MsgType::HiveJoinRequest));
        assert!(!v0_knows("0.64.0", &MsgType::SessionTransfer));
        assert!(!v0_knows("0.64.0", &MsgType::Unknown("x".into())));
        assert_eq!(parse_version("v0.80.1-beta"), Some((0, 80, 1)));
    }

    #[test]
    fn feature_names_and_intersection() {
        for f in Feature::ALL {
            assert_eq!(Feature::parse(f.as_str()), Some(f));
        }
        assert_eq!(Feature::parse("bus_forward"), None);
        assert_eq!(Feature::parse("LZ4"), None);
        let ours = [Feature::HbDelta, Feature::Lz4, Feature::UnknownOk];
        let theirs = [
            Feature::Lz4,
            Feature::UnknownOk,
            Feature::FrameBin,
            Feature::Lz4,
        ];
        assert_eq!(
            intersect(&ours, &theirs),
            vec![Feature::UnknownOk, Feature::Lz4]
        );
    }
}
