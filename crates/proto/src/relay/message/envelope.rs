//! The relay envelope (docs/relay-protocol.md §1, §4): `RelayMessage`
//! `{"id","msg_type","from_peer","timestamp","payload"}`, its strict NDJSON line and JSON
//! codec, the two forms a `session_transfer` chunk is held in, and message ids. Refuses:
//! what a payload's keys mean (`payload`, `transfer`) and framing (`relay::frame`).

use super::payload::Payload;
use super::transfer::{decode_chunk, SessionTransfer};
use super::{MsgType, RelayError, LINE_CAP_BYTES};
use serde::Serialize;
use serde_json::{Map, Value};
use std::borrow::Cow;
use std::sync::Arc;

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
