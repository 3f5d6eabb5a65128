//! The typed payload catalogue (docs/relay-protocol.md §8): one struct per
//! handshake, heartbeat, task, knowledge and hive type, and `Payload`, the typed form of any
//! message's payload with its parse and its JSON. The types that carry or settle other data
//! live in `transfer`. Required keys are required, optional keys optional, unknown keys
//! ignored, as v0 readers do. Refuses: the envelope and IO.
//!
//! The heartbeat's directory entry, `AgentEntry`, is defined here (not in `relay::heartbeat`)
//! so that the dependency runs one way: `heartbeat` builds on these payloads, never the reverse.

use super::agent_state::{lenient_since_ms, AgentState};
use super::approval::{TaskAnswer, TaskRequest, TaskRequestClosed};
use super::transfer::{Ack, BusForward, SessionReceived, SessionTransfer};
use super::{typed, MsgType, RelayError};
use serde::de::{Deserializer, IgnoredAny};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

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

/// One agent's counts in a hub's directory (the heartbeat's `agents` map; `relay::heartbeat`
/// keeps the directory itself).
///
/// `state` and `since_ms` are feature `liveness` (docs/relay-protocol.md §5): sent only on a
/// link that agreed it, omitted when unknown, and read leniently (`AgentState`), so a v1
/// peer that never heard of them, or one that sends a state this build does not know, costs
/// nothing and breaks nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct AgentEntry {
    pub parked: u32,
    pub queued: u32,
    #[serde(default, skip_serializing_if = "AgentState::is_unknown")]
    pub state: AgentState,
    /// When the agent entered `state`, unix ms on the sending hub's clock.
    #[serde(
        default,
        deserialize_with = "lenient_since_ms",
        skip_serializing_if = "Option::is_none"
    )]
    pub since_ms: Option<i64>,
}

/// One agent in a delta heartbeat's `upsert` (the same optional liveness keys as `AgentEntry`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentUpsert {
    pub name: String,
    pub parked: u32,
    pub queued: u32,
    #[serde(default, skip_serializing_if = "AgentState::is_unknown")]
    pub state: AgentState,
    #[serde(
        default,
        deserialize_with = "lenient_since_ms",
        skip_serializing_if = "Option::is_none"
    )]
    pub since_ms: Option<i64>,
}

impl AgentUpsert {
    pub fn entry(&self) -> AgentEntry {
        AgentEntry {
            parked: self.parked,
            queued: self.queued,
            state: self.state,
            since_ms: self.since_ms,
        }
    }
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
    pub agents: Option<BTreeMap<String, AgentEntry>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seq: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub base: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub upsert: Option<Vec<AgentUpsert>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remove: Option<Vec<String>>,
    /// Feature `agents`: the sender's installed agent manifests, the whole list. Sent in every
    /// full beat and in a delta when it changed; absent means unchanged.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent_cards: Option<Vec<AgentCard>>,
}

/// One installed agent manifest in a heartbeat's `agent_cards` (feature `agents`, 000 seed
/// §6.6): what a delegating peer needs to pick a machine for `agent = "<name>"`. The shape
/// borrows the A2A agent card's name and version; nothing else of A2A.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentCard {
    /// The manifest name (what `delegate_task.agent` names).
    pub name: String,
    /// The binary's `--version` line, when the hub knows it (probed off its event loop).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// `run.acp`'s program is on the hub's PATH.
    pub acp: bool,
    /// `run.headless`'s program is on the hub's PATH.
    pub headless: bool,
    /// Whether the agent's credential is present; absent when the manifest does not say how
    /// to tell.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub credential: Option<bool>,
}

impl AgentCard {
    /// What the card costs in `DirectoryCaps`' byte count: its strings plus 8.
    pub fn size_bytes(&self) -> usize {
        self.name.len() + self.version.as_ref().map_or(0, String::len) + 8
    }
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
    /// Shape not pinned: a list of paths in the 000 seed, `{path: content}` from claudectl
    /// 0.92 (relay-compat-0.92.md §5). Kept as JSON, so either parses (docs/relay-protocol.md
    /// §8); this hub reads none of it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub relevant_files: Option<Value>,
    /// Shape not pinned by the v0 facts: kept as JSON (docs/relay-protocol.md §8).
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
    /// This project's addition (docs/relay-protocol.md §8): which agent runs it (default `claude`
    /// when absent).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskStats {
    pub tokens_used: u64,
    pub cost_usd: f64,
    /// Any JSON number on arrival, written as given: claudectl's is a `u8` (0.92 reads a
    /// status's stats as its struct and drops all of them, `elapsed_secs` too, when one key
    /// does not fit), so ours is the integer it expects.
    pub context_pct: serde_json::Number,
    pub files_modified: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub elapsed_secs: Option<u64>,
    /// Shape not pinned by the v0 facts: kept as JSON (docs/relay-protocol.md §8).
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
    /// Absent or null: no ref. Always sent (null when none), but claudectl 0.64's failed
    /// handoffs ("Stopped by controller", "Task exited with non-zero status") leave the key
    /// out, so requiring it dropped every real claudectl failure (docs/relay-protocol.md
    /// "Interop with claudectl").
    #[serde(default)]
    pub git_ref: Option<String>,
    pub total_cost_usd: f64,
    pub total_tokens: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Value>,
    /// claudectl 0.92: the worker never started the task (its summary then says why, "Could
    /// not start the task: …"). Set only by a JSON `true`; any other value, or none, reads
    /// as unset rather than dropping the whole handoff (docs/relay-protocol.md §11). Sent
    /// only when set, so a 0.64 reader sees no new key on any other handoff.
    #[serde(
        default,
        deserialize_with = "lenient_true",
        skip_serializing_if = "std::ops::Not::not"
    )]
    pub refused: bool,
    /// claudectl 0.92: the checks a worktree run ran after the agent, in order (it stops at
    /// the first failure). Entries not of the shape `{command, passed, output}` are skipped
    /// and a value that is not a list reads as none (docs/relay-protocol.md §11); the
    /// delegating book caps what it keeps. Sent only when not empty (this hub sends none).
    #[serde(
        default,
        deserialize_with = "lenient_verifications",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub verifications: Vec<Verification>,
}

/// One entry of a handoff's `verifications` (claudectl 0.92: `output` is the command's last
/// 4096 bytes).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Verification {
    pub command: String,
    pub passed: bool,
    #[serde(default)]
    pub output: String,
}

/// `true` only for JSON `true`: a mistyped flag is no flag, never a lost message.
fn lenient_true<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Flag {
        Bool(bool),
        Other(IgnoredAny),
    }
    Ok(matches!(Flag::deserialize(d)?, Flag::Bool(true)))
}

/// The well-formed entries of a list, in order; anything else reads as an empty list.
fn lenient_verifications<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Verification>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Entry {
        Good(Verification),
        Bad(IgnoredAny),
    }
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum List {
        List(Vec<Entry>),
        Other(IgnoredAny),
    }
    Ok(match List::deserialize(d)? {
        List::List(entries) => entries
            .into_iter()
            .filter_map(|e| match e {
                Entry::Good(v) => Some(v),
                Entry::Bad(_) => None,
            })
            .collect(),
        List::Other(_) => Vec::new(),
    })
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
    /// Shape not pinned by the v0 facts: kept as JSON (docs/relay-protocol.md §8).
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
    /// The v0 facts give `units` without `[]` here: its shape is kept as JSON
    /// (docs/relay-protocol.md §8).
    pub units: Value,
}

/// The typed payload of a message, one variant per known type.
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
    TaskRequest(TaskRequest),
    TaskAnswer(TaskAnswer),
    TaskRequestClosed(TaskRequestClosed),
    /// An unknown type's payload, untouched.
    Unknown {
        msg_type: String,
        payload: Value,
    },
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
            MsgType::TaskRequest => Payload::TaskRequest(typed(t, payload)?),
            MsgType::TaskAnswer => Payload::TaskAnswer(typed(t, payload)?),
            MsgType::TaskRequestClosed => Payload::TaskRequestClosed(typed(t, payload)?),
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
            Payload::TaskRequest(_) => MsgType::TaskRequest,
            Payload::TaskAnswer(_) => MsgType::TaskAnswer,
            Payload::TaskRequestClosed(_) => MsgType::TaskRequestClosed,
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
            Payload::TaskRequest(p) => v(p),
            Payload::TaskAnswer(p) => v(p),
            Payload::TaskRequestClosed(p) => v(p),
            Payload::Unknown { payload, .. } => payload.clone(),
        }
    }
}
