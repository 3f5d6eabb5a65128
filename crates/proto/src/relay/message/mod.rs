//! Relay messages (docs/relay-protocol.md §1 "Lines", §8 "The message catalogue" and §9): the pieces, one job per file, re-exported here so callers keep writing
//! `relay::message::X`.
//!
//! - `msg_type`: `MsgType` with its unknown catch-all, the v1 feature names, and which types a
//!   v0 peer's release knows;
//! - `envelope`: the `RelayMessage` envelope, its NDJSON line codec and message ids;
//! - `agent_state`: a directory entry's liveness state (feature `liveness`), read leniently;
//! - `payload`: the typed catalogue, one struct per control and task type, and `Payload`;
//! - `transfer`: the types that carry or settle other data (`ack`, `bus_forward`,
//!   `session_transfer` with its chunk cap, `session_received`);
//! - `approval`: the `task-approvals` messages (`task_request`, `task_answer`,
//!   `task_request_closed`) with their bounds.
//!
//! This file owns the line cap and `RelayError`, which every layer above shares.
//!
//! Decoding is as strict as a v0 reader where a v0 reader is strict (a float timestamp, a
//! missing payload, a wrong-case type are errors) and as liberal as one where it is liberal
//! (unknown keys anywhere are ignored), so what we accept and what we send are both what v0
//! peers accept. Refuses: deciding what a message means (that is `session`'s) and IO.

mod agent_state;
mod approval;
mod envelope;
mod msg_type;
mod payload;
mod transfer;

pub use agent_state::AgentState;
pub use approval::{
    ApprovalMessageError, RelayOption, RelayToolCall, TaskAnswer, TaskRequest, TaskRequestClosed,
};
pub use envelope::{format_id, IdGen, RelayMessage};
pub use msg_type::{
    feature_for, intersect, v0_known_types, v0_knows, Feature, MsgType, V0Release,
    V0_MIN_KNOWN_TYPES, V0_RELEASES, V0_TYPES, V1_TYPES,
};
pub use payload::{
    AgentCard, AgentEntry, AgentUpsert, Challenge, DelegateTask, DependencyGraph, Handshake,
    HandshakeAck, HandshakeStatus, Heartbeat, HiveJoinRequest, HiveJoinResult, KnowledgeRejected,
    KnowledgeRequest, KnowledgeSnapshot, KnowledgeSync, Payload, TaskContext, TaskHandoff,
    TaskInterrupt, TaskStats, TaskStatus, Verification,
};
pub use transfer::{Ack, BusForward, SessionReceived, SessionTransfer, CHUNK_CAP_BYTES};

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

/// A payload read into its type `T`: an object, or the `BadPayload` error naming the message
/// type. Here, beside the error, because every payload module reads with it.
fn typed<T: for<'de> serde::Deserialize<'de>>(
    t: &MsgType,
    payload: &serde_json::Value,
) -> Result<T, RelayError> {
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

#[cfg(test)]
mod tests;
