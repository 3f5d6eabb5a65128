//! Relay message types (docs/relay-protocol.md §3, §8, §9): `MsgType`, the 17 v0 types in catalogue
//! order plus the v1 ones and an `Unknown` catch-all kept verbatim; the v1 `Feature` names
//! and which feature introduced a type; and which types each observed v0 release knows, so a
//! v0 peer is never sent one it would die on. Refuses: payloads (`payload`, `transfer`) and
//! the envelope (`envelope`).

use super::RelayError;
use serde::Serialize;

/// A relay message type. The 17 v0 types, in the catalogue order of docs/relay-protocol.md §8 (the
/// first 12 are the ones claudectl 0.64 knows), and `Unknown` for any other string, kept verbatim.
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
    /// v1 `task-approvals`: a request a peer's task's agent waits on, worker → delegating.
    TaskRequest,
    /// v1 `task-approvals`: the delegator's answer to one, delegating → worker.
    TaskAnswer,
    /// v1 `task-approvals`: the worker's request is no longer open, worker → delegating.
    TaskRequestClosed,
    /// Any other type string, exactly as received. Logged once per type per peer and dropped
    /// (docs/relay-protocol.md §6); never sent.
    Unknown(String),
}

/// The types v1 features added, in catalogue order after the v0 types.
pub static V1_TYPES: [MsgType; 4] = [
    MsgType::BusForward,
    MsgType::TaskRequest,
    MsgType::TaskAnswer,
    MsgType::TaskRequestClosed,
];

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
            MsgType::TaskRequest => "task_request",
            MsgType::TaskAnswer => "task_answer",
            MsgType::TaskRequestClosed => "task_request_closed",
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

/// A v1 feature (docs/relay-protocol.md §3), on for a link only when both sides advertise it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Feature {
    /// Unknown msg_types are logged once and dropped, never fatal (docs/relay-protocol.md §6).
    UnknownOk,
    /// The dialler checks the acceptor's proof over the dialler's own nonce too.
    MutualAuth,
    /// Length-prefixed binary frames after the ack (docs/relay-protocol.md §4).
    FrameBin,
    /// LZ4 block compression of frame bodies of 1 KiB or more (only with `frame-bin`).
    Lz4,
    /// Heartbeats as deltas against the last acknowledged beat (docs/relay-protocol.md §5).
    HbDelta,
    /// `bus_forward`: envelopes for `name@peer` addresses cross the link (SPEC §15). Offered
    /// only to peers configured with `forward = true`.
    BusForward,
    /// Every frame carries a MAC under a per-link key and an implicit sequence number
    /// (`relay::framemac`). Needs `frame-bin` and `mutual-auth`.
    FrameMac,
    /// Heartbeats carry `agent_cards`: one entry per agent manifest installed on the sending
    /// hub, so a delegator can pick a machine (000 seed §6.6; docs/relay-protocol.md §5).
    Agents,
    /// Directory entries carry each agent's liveness `state` and `since_ms`, and a change of
    /// state sends a beat early, at most one per `liveness_update_ms` (docs/relay-protocol.md
    /// §5 "Liveness"). Adds no type.
    Liveness,
    /// claudectl's (0.90+): heartbeats carry `headroom`, the sender's room for another task
    /// (free memory, load per core, free disk, running and max tasks, tags), which its
    /// placement reads (docs/relay-protocol.md §5 "claudectl's heartbeat"). Offered only in
    /// claudectl's dialect: hubs of this project exchange `agent_cards` instead.
    Headroom,
    /// `task_request`, `task_answer`, `task_request_closed`: a task delegated over the link
    /// carries its agent's requests back to the delegating hub (issue 37 design §7). Offered
    /// only in this project's dialect, agreed only with `mutual-auth` and `frame-mac`: an
    /// answer may let an agent act, so it travels only on a link where every frame is
    /// authenticated.
    TaskApprovals,
}

impl Feature {
    /// Every feature, in the canonical order used on the wire and in logs.
    pub const ALL: [Feature; 11] = [
        Feature::UnknownOk,
        Feature::MutualAuth,
        Feature::FrameBin,
        Feature::Lz4,
        Feature::HbDelta,
        Feature::BusForward,
        Feature::FrameMac,
        Feature::Agents,
        Feature::Liveness,
        Feature::Headroom,
        Feature::TaskApprovals,
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
            Feature::Agents => "agents",
            Feature::Liveness => "liveness",
            Feature::Headroom => "headroom",
            Feature::TaskApprovals => "task-approvals",
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
/// `bus_forward` came with `bus-forward`, the three request messages with `task-approvals`
/// (hb-delta changes `heartbeat`'s payload, it adds no type). The match is exhaustive so a
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
        MsgType::BusForward => Some(Feature::BusForward),
        MsgType::TaskRequest | MsgType::TaskAnswer | MsgType::TaskRequestClosed => {
            Some(Feature::TaskApprovals)
        }
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

/// Observed v0 releases, oldest first. 0.64 knows the first 12 types. The v0 facts
/// (docs/relay-protocol.md §9) say the other five "came in later versions" without naming one, so
/// no row grants them yet: a v0 peer of any version is sent only the first 12 until a release is
/// observed to know more (add its row here, with the version it was observed in).
pub const V0_RELEASES: &[V0Release] = &[V0Release {
    since: (0, 0, 0),
    known_types: 12,
}];

/// The fewest types any v0 release knows: what an unparsable version gets.
pub const V0_MIN_KNOWN_TYPES: usize = 12;

pub(super) fn parse_version(v: &str) -> Option<(u64, u64, u64)> {
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
