//! The transfer types (docs/relay-protocol.md §8 and §4): the payloads that carry or settle
//! other data. `ack` (with the v1 `resync` and `error`), `bus_forward` (an envelope handed to
//! the peer hub), `session_transfer` (one chunk of a session file, held as base64 text or raw
//! bytes, under `CHUNK_CAP_BYTES`) and `session_received`. Refuses: the envelope, which
//! decides which form a chunk is held in (`envelope`), and IO.

use super::typed;
use super::{MsgType, RelayError};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::sync::Arc;

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

/// The largest `session_transfer` chunk, raw: 512 KiB (docs/relay-protocol.md §8; the file is sent
/// in chunks of at most this, under a 64 MB file cap). Its base64 is 699,052 characters, so it fits
/// a line; raw, it fits a frame.
pub const CHUNK_CAP_BYTES: usize = 512 * 1024;

/// The length of the padded base64 of `CHUNK_CAP_BYTES`: a longer `data` is refused before
/// it is decoded.
pub(super) const CHUNK_CAP_BASE64: usize = CHUNK_CAP_BYTES.div_ceil(3) * 4;

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
pub(super) fn decode_chunk(text: &str) -> Result<Arc<[u8]>, RelayError> {
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
    pub(super) fn from_line_payload(payload: &Value) -> Result<SessionTransfer, RelayError> {
        let head: TransferHead = typed(&MsgType::SessionTransfer, payload)?;
        let data = match payload.get("data") {
            Some(Value::String(text)) => decode_chunk(text)?,
            Some(_) => return Err(transfer_error("data must be a base64 string".into())),
            None => return Err(transfer_error("missing field `data`".into())),
        };
        Ok(SessionTransfer::with_head(head, data))
    }

    /// From a payload without `data` and the chunk beside it, raw: no base64 at all.
    pub(super) fn from_raw(
        payload: &Value,
        chunk: &Arc<[u8]>,
    ) -> Result<SessionTransfer, RelayError> {
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
    /// Shape not pinned by the v0 facts: kept as JSON (docs/relay-protocol.md §8).
    pub resume: Value,
}
