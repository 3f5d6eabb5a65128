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
use std::collections::BTreeMap;

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
    /// Any other type string, exactly as received. Logged once per type per peer and dropped
    /// (seed §6.3); never sent.
    Unknown(String),
}

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
            MsgType::Unknown(s) => s,
        }
    }

    /// Reads a wire name. A known name in another case or without its underscores
    /// (`Heartbeat`, `HandshakeAck`) is an error, as it is fatal to v0 readers; any other
    /// string is `Unknown`.
    pub fn parse(s: &str) -> Result<MsgType, RelayError> {
        if let Some(t) = V0_TYPES.iter().find(|t| t.as_str() == s) {
            return Ok(t.clone());
        }
        let squash = |x: &str| -> String {
            x.chars()
                .filter(|&c| c != '_')
                .map(|c| c.to_ascii_lowercase())
                .collect()
        };
        let folded = squash(s);
        if V0_TYPES.iter().any(|t| squash(t.as_str()) == folded) {
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
}

impl Feature {
    /// Every feature, in the canonical order used on the wire and in logs.
    pub const ALL: [Feature; 5] = [
        Feature::UnknownOk,
        Feature::MutualAuth,
        Feature::FrameBin,
        Feature::Lz4,
        Feature::HbDelta,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Feature::UnknownOk => "unknown-ok",
            Feature::MutualAuth => "mutual-auth",
            Feature::FrameBin => "frame-bin",
            Feature::Lz4 => "lz4",
            Feature::HbDelta => "hb-delta",
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
/// No v1 feature of this build adds a type yet (hb-delta changes `heartbeat`'s payload, it
/// adds no type); `bus_forward` (seed §8) will be the first. The match is exhaustive so a
/// new type cannot be added without deciding this.
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
#[derive(Debug, Clone, PartialEq)]
pub struct RelayMessage {
    pub id: String,
    pub msg_type: MsgType,
    pub from_peer: String,
    /// Unix epoch milliseconds, always an integer on the wire.
    pub timestamp: i64,
    /// Always a JSON object. For `session_transfer`, `data` is the padded base64 text of the
    /// chunk whatever the link (frames carry it raw; see `frame`).
    pub payload: Value,
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
        Ok(RelayMessage {
            id,
            msg_type,
            from_peer,
            timestamp,
            payload,
        })
    }

    /// Compact JSON in the fixed key order `id, msg_type, from_peer, timestamp, payload`;
    /// payload keys in the order `serde_json::Value` keeps (sorted).
    pub fn encode_json(&self) -> Vec<u8> {
        let env = Envelope {
            id: &self.id,
            msg_type: &self.msg_type,
            from_peer: &self.from_peer,
            timestamp: self.timestamp,
            payload: &self.payload,
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

    /// The typed payload of this message's type.
    pub fn payload_typed(&self) -> Result<Payload, RelayError> {
        Payload::parse(&self.msg_type, &self.payload)
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
}

/// `handshake`: the dialler's answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Handshake {
    /// Lowercase hex HMAC-SHA256 over the challenge nonce's hex text.
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
    /// v1 `mutual-auth`: HMAC over the dialler's nonce text.
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

/// `session_transfer`: one chunk of a session file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionTransfer {
    pub session_id: String,
    pub cwd: String,
    pub seq: u64,
    pub total: u64,
    /// Hex SHA-256 of the whole file.
    pub digest: String,
    /// Padded base64 of the raw chunk (at most 512 KiB raw). Checked to be canonical.
    pub data: String,
}

impl SessionTransfer {
    /// The chunk's raw bytes.
    pub fn data_bytes(&self) -> Result<Vec<u8>, RelayError> {
        crate::relay::base64::decode(&self.data).map_err(|e| RelayError::BadPayload {
            msg_type: "session_transfer".into(),
            detail: format!("data is not canonical padded base64: {e}"),
        })
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
    /// type, optional keys may be absent, unknown keys are ignored.
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
                let st: SessionTransfer = typed(t, payload)?;
                st.data_bytes()?;
                Payload::SessionTransfer(st)
            }
            MsgType::SessionReceived => Payload::SessionReceived(typed(t, payload)?),
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
            Payload::Unknown { msg_type, .. } => MsgType::Unknown(msg_type.clone()),
        }
    }

    /// The payload as JSON: required keys always written (`null` for a null-able one),
    /// optional keys only when present.
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
            Payload::SessionTransfer(p) => v(p),
            Payload::SessionReceived(p) => v(p),
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
                resync: None
            })
        );
    }

    #[test]
    fn unknown_types_are_kept_verbatim() {
        let m = RelayMessage::decode_line(line("bus_forward", r#"{"a":1}"#).as_bytes()).unwrap();
        assert_eq!(m.msg_type, MsgType::Unknown("bus_forward".into()));
        assert_eq!(m.msg_type.as_str(), "bus_forward");
        let m = RelayMessage::decode_line(line("BusForward", "{}").as_bytes()).unwrap();
        assert_eq!(m.msg_type, MsgType::Unknown("BusForward".into()));
        assert!(matches!(
            m.payload_typed().unwrap(),
            Payload::Unknown { .. }
        ));
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
        assert_eq!(Feature::parse("bus-forward"), None);
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
