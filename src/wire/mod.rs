//! The hub wire protocol (SPEC §2): the line types both binaries share, their decoding with the
//! exact error texts the hub sends, and their compact encoding.
//!
//! Owns: `ClientLine` (client → hub) and `HubLine` (hub → client). Refuses: any IO. The server
//! and the client both go through this module, so they cannot disagree about a line.

pub mod envelope;
pub mod lines;

use serde::de::{IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::value::RawValue;
use std::fmt;

pub use envelope::{Envelope, EnvelopeError};
pub use lines::{LineBuffer, LineTooLong};

/// Why a line from a peer was refused. The `Display` text is what travels in the error line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WireError {
    /// The bytes are not UTF-8.
    NotUtf8,
    /// Not JSON, not an object of exactly one known tag, or a payload of the wrong shape.
    Malformed(String),
    /// The envelope of a `send` broke a field rule (SPEC §3).
    Envelope(EnvelopeError),
    /// An await filter was an empty string.
    EmptyFilter(&'static str),
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WireError::NotUtf8 => write!(f, "line is not valid UTF-8"),
            WireError::Malformed(why) => write!(f, "malformed line: {why}"),
            WireError::Envelope(e) => write!(f, "invalid envelope: {e}"),
            WireError::EmptyFilter(key) => write!(f, "invalid await: {key} must not be empty"),
        }
    }
}

impl std::error::Error for WireError {}

/// `{"hello":{"name":…,"token":…}}`. `Debug` hides the token so it can never reach a log.
#[derive(Clone, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Hello {
    pub name: String,
    pub token: String,
}

impl fmt::Debug for Hello {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Hello").field("name", &self.name).field("token", &"<redacted>").finish()
    }
}

/// `{"await":{"replyTo":…,"kind":…,"timeoutSecs":…}}`; every key may be null or absent.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct AwaitRequest {
    #[serde(rename = "replyTo", default)]
    pub reply_to: Option<String>,
    #[serde(default)]
    pub kind: Option<String>,
    /// Whole seconds; `None` waits forever, `Some(0)` polls.
    #[serde(rename = "timeoutSecs", default)]
    pub timeout_secs: Option<u64>,
}

/// A line a client sends, already validated.
#[derive(Debug)]
pub enum ClientLine {
    Hello(Hello),
    Send(Envelope),
    Await(AwaitRequest),
}

/// The raw shape of a client line: exactly one known tag. Borrowed from the line so the body's
/// raw text can be kept verbatim.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
enum RawClientLine<'a> {
    #[serde(rename = "hello", deserialize_with = "object")]
    Hello(Hello),
    #[serde(rename = "send", borrow, deserialize_with = "object")]
    Send(envelope::RawEnvelope<'a>),
    #[serde(rename = "await", deserialize_with = "object")]
    Await(AwaitRequest),
}

impl ClientLine {
    /// Decodes one line (without its `\n`; a trailing `\r` is tolerated as JSON whitespace).
    pub fn decode(line: &[u8]) -> Result<ClientLine, WireError> {
        let text = std::str::from_utf8(line).map_err(|_| WireError::NotUtf8)?;
        let raw: RawClientLine<'_> = serde_json::from_str(text).map_err(|e| malformed(&e))?;
        match raw {
            RawClientLine::Hello(h) => Ok(ClientLine::Hello(h)),
            RawClientLine::Send(raw) => Ok(ClientLine::Send(Envelope::from_raw(raw).map_err(WireError::Envelope)?)),
            RawClientLine::Await(a) => {
                if a.reply_to.as_deref() == Some("") {
                    return Err(WireError::EmptyFilter("replyTo"));
                }
                if a.kind.as_deref() == Some("") {
                    return Err(WireError::EmptyFilter("kind"));
                }
                Ok(ClientLine::Await(a))
            }
        }
    }

    /// Encodes the line compactly with its trailing `\n`.
    pub fn encode(&self) -> String {
        let mut s = match self {
            ClientLine::Hello(h) => format!("{{\"hello\":{}}}", to_json(h)),
            ClientLine::Send(e) => format!("{{\"send\":{}}}", e.to_json()),
            ClientLine::Await(a) => format!("{{\"await\":{}}}", to_json(a)),
        };
        s.push('\n');
        s
    }

    /// The tag, for logs.
    pub fn tag(&self) -> &'static str {
        match self {
            ClientLine::Hello(_) => "hello",
            ClientLine::Send(_) => "send",
            ClientLine::Await(_) => "await",
        }
    }
}

/// A line the hub sends. `Envelope` carries the envelope's JSON text exactly as the hub holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HubLine {
    Ok,
    Error { message: String },
    Accepted { id: String },
    Envelope(String),
    Timeout,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Empty {}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct MessagePayload {
    message: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct IdPayload {
    id: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
enum RawHubLine<'a> {
    #[serde(rename = "ok", deserialize_with = "object")]
    Ok(Empty),
    #[serde(rename = "error", deserialize_with = "object")]
    Error(MessagePayload),
    #[serde(rename = "accepted", deserialize_with = "object")]
    Accepted(IdPayload),
    #[serde(rename = "envelope", borrow)]
    Envelope(&'a RawValue),
    #[serde(rename = "timeout", deserialize_with = "object")]
    Timeout(Empty),
}

impl HubLine {
    /// Decodes a hub line (client side). An `envelope` must itself be a valid envelope whose
    /// `correlationId` key is present, as every hub sends it.
    pub fn decode(line: &[u8]) -> Result<HubLine, WireError> {
        let text = std::str::from_utf8(line).map_err(|_| WireError::NotUtf8)?;
        let raw: RawHubLine<'_> = serde_json::from_str(text).map_err(|e| malformed(&e))?;
        Ok(match raw {
            RawHubLine::Ok(Empty {}) => HubLine::Ok,
            RawHubLine::Error(m) => HubLine::Error { message: m.message },
            RawHubLine::Accepted(a) => HubLine::Accepted { id: a.id },
            RawHubLine::Timeout(Empty {}) => HubLine::Timeout,
            RawHubLine::Envelope(raw) => {
                let mut de = serde_json::Deserializer::from_str(raw.get());
                let shape: envelope::RawEnvelope<'_> = object(&mut de).map_err(|e| malformed(&e))?;
                if !shape.has_correlation_key() {
                    return Err(WireError::Malformed("envelope without correlationId".into()));
                }
                Envelope::from_raw(shape).map_err(WireError::Envelope)?;
                HubLine::Envelope(raw.get().to_owned())
            }
        })
    }

    /// Encodes compactly with the trailing `\n`.
    pub fn encode(&self) -> String {
        let mut s = match self {
            HubLine::Ok => "{\"ok\":{}}".to_owned(),
            HubLine::Error { message } => format!("{{\"error\":{{\"message\":{}}}}}", to_json(message)),
            HubLine::Accepted { id } => format!("{{\"accepted\":{{\"id\":{}}}}}", to_json(id)),
            HubLine::Envelope(text) => format!("{{\"envelope\":{text}}}"),
            HubLine::Timeout => "{\"timeout\":{}}".to_owned(),
        };
        s.push('\n');
        s
    }
}

/// Deserialises a payload that must be a JSON object. serde's derived structs also accept a
/// sequence of field values (`{"hello":["n","t"]}`), which no peer may send (SPEC §2.2).
fn object<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<T, D::Error> {
    struct ObjectOnly<T>(std::marker::PhantomData<T>);
    impl<'de, T: Deserialize<'de>> Visitor<'de> for ObjectOnly<T> {
        type Value = T;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("an object")
        }
        fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
            T::deserialize(serde::de::value::MapAccessDeserializer::new(map))
        }
    }
    d.deserialize_map(ObjectOnly(std::marker::PhantomData))
}

/// serde_json's message, without its " at line 1 column N" tail when the line is one line.
fn malformed(e: &serde_json::Error) -> WireError {
    let mut msg = e.to_string();
    if let Some(pos) = msg.find(" at line ") {
        msg.truncate(pos);
    }
    WireError::Malformed(msg)
}

/// Serialises a value that cannot fail to serialise (strings and plain structs).
pub(crate) fn to_json<T: Serialize + ?Sized>(v: &T) -> String {
    // Invariant: only strings, options and derived structs of them reach here; serde_json
    // cannot fail on those (no maps with non-string keys, no custom Serialize errors).
    serde_json::to_string(v).expect("plain values always serialise")
}

/// Checks that a text is one JSON value (used by the client for `--body`).
pub fn is_json(text: &str) -> bool {
    serde_json::from_str::<IgnoredAny>(text).is_ok()
}
