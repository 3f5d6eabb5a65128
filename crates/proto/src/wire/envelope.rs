//! The envelope (SPEC §3): its field rules and its canonical JSON text.
//!
//! The body is kept as the raw JSON text the sender wrote, validated but never rebuilt, so key
//! order, number precision and escapes survive the hub byte for byte.

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use std::fmt;

/// A validated envelope. `from` is whatever the line said until the hub stamps it.
#[derive(Debug, Clone, Serialize)]
pub struct Envelope {
    pub id: String,
    pub from: String,
    pub to: String,
    pub ts: String,
    pub kind: String,
    #[serde(rename = "correlationId")]
    pub correlation_id: Option<String>,
    pub body: Box<RawValue>,
}

/// Most bytes of an envelope's `id`, and of a `correlationId` (which names an id): a UUID is
/// 36, a task id 37; the hub remembers each id for a day after it settles (SPEC §3.2, §12.3).
pub const MAX_ID_BYTES: usize = 128;
/// Most bytes of a `kind`, and of an await's `kind` filter (SPEC §3.2, §5.2).
pub const MAX_KIND_BYTES: usize = 128;
/// Most bytes of a `to`: a name, or `name@peer` with a peer id of up to 128 (SPEC §3.2, §15);
/// also of the `from` of an envelope a peer hub forwards.
pub const MAX_NAME_BYTES: usize = 256;

/// The kinds only the hub writes (SPEC §3.4): a bounce (§5.3), a delegated task's outcome and
/// progress, and the requests its agent asks the delegator to answer (§16, issue 37). A
/// client's `send` of one is refused, and so is a peer hub's forward of one (`hub::forward`);
/// a kind the hub starts writing later belongs in this list, where every check finds it.
pub const HUB_KINDS: [&str; 7] = [
    Envelope::BOUNCE_KIND,
    Envelope::TASK_OUTCOME_KIND,
    Envelope::TASK_PROGRESS_KIND,
    Envelope::TASK_REQUEST_KIND,
    // Lease design §0 "Envelopes": a lease's holder and waiters hear from the hub.
    super::lease::LEASE_EXPIRING_KIND,
    super::lease::LEASE_LOST_KIND,
    super::lease::LEASE_GRANTED_KIND,
];

/// `kind` as one of `HUB_KINDS`, if it is one.
pub fn hub_kind(kind: &str) -> Option<&'static str> {
    HUB_KINDS.into_iter().find(|k| *k == kind)
}

/// Why an envelope was refused. The text names the field and never quotes its value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EnvelopeError {
    Empty(&'static str),
    /// `ts` is not RFC 3339. The text does not quote it: error texts never repeat the
    /// line's values (SPEC §2.4).
    BadTimestamp,
    /// A kind only the hub writes (`HUB_KINDS`, named: it is one of a fixed list).
    ReservedKind(&'static str),
    /// The field is over its cap in bytes (`check_caps`).
    TooLong(&'static str, usize),
    /// The field holds a control or formatting character (`crate::kernel::text::is_unsafe`).
    Unprintable(&'static str),
}

impl fmt::Display for EnvelopeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EnvelopeError::Empty(field) => write!(f, "{field} must not be empty"),
            EnvelopeError::BadTimestamp => write!(f, "ts is not an RFC 3339 timestamp"),
            EnvelopeError::ReservedKind(kind) => {
                write!(f, "kind \"{kind}\" is reserved for the hub")
            }
            EnvelopeError::TooLong(field, max) => write!(f, "{field} is over {max} bytes"),
            EnvelopeError::Unprintable(field) => write!(
                f,
                "{field} must not contain control or invisible formatting characters"
            ),
        }
    }
}

impl std::error::Error for EnvelopeError {}

/// The envelope exactly as it arrived, before validation.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawEnvelope<'a> {
    id: String,
    from: String,
    to: String,
    ts: String,
    kind: String,
    #[serde(rename = "correlationId", default, deserialize_with = "present")]
    correlation_id: Option<Option<String>>,
    #[serde(borrow)]
    body: &'a RawValue,
}

/// Distinguishes an absent `correlationId` (outer `None`) from an explicit null.
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Option<String>>, D::Error> {
    Option::<String>::deserialize(d).map(Some)
}

impl<'a> RawEnvelope<'a> {
    /// The envelope as `wire::decode` read it; `correlation_id` is None when the key was
    /// absent and Some(None) when it was null.
    pub(crate) fn from_parts(
        id: String,
        from: String,
        to: String,
        ts: String,
        kind: String,
        correlation_id: Option<Option<String>>,
        body: &'a RawValue,
    ) -> RawEnvelope<'a> {
        RawEnvelope {
            id,
            from,
            to,
            ts,
            kind,
            correlation_id,
            body,
        }
    }

    pub(crate) fn has_correlation_key(&self) -> bool {
        self.correlation_id.is_some()
    }

    /// Field by field, the body by its text byte for byte (`wire::fast`'s differential check).
    #[cfg(any(test, feature = "fuzzing"))]
    pub(crate) fn same_as(&self, other: &RawEnvelope<'_>) -> bool {
        self.id == other.id
            && self.from == other.from
            && self.to == other.to
            && self.ts == other.ts
            && self.kind == other.kind
            && self.correlation_id == other.correlation_id
            && self.body.get() == other.body.get()
    }
}

impl Envelope {
    pub(crate) fn from_raw(raw: RawEnvelope<'_>) -> Result<Envelope, EnvelopeError> {
        let correlation_id = raw.correlation_id.flatten();
        if raw.id.is_empty() {
            return Err(EnvelopeError::Empty("id"));
        }
        if raw.to.is_empty() {
            return Err(EnvelopeError::Empty("to"));
        }
        if raw.kind.is_empty() {
            return Err(EnvelopeError::Empty("kind"));
        }
        if correlation_id.as_deref() == Some("") {
            return Err(EnvelopeError::Empty("correlationId"));
        }
        if chrono::DateTime::parse_from_rfc3339(&raw.ts).is_err() {
            return Err(EnvelopeError::BadTimestamp);
        }
        Ok(Envelope {
            id: raw.id,
            from: raw.from,
            to: raw.to,
            ts: raw.ts,
            kind: raw.kind,
            correlation_id,
            body: raw.body.to_owned(),
        })
    }

    /// The hub's caps on what it remembers and shows (SPEC §3.2), checked at decode after the
    /// rules of `from_raw`, field by field in the order `id`, `to`, `kind`, `correlationId`:
    /// `id` and `correlationId` at most `MAX_ID_BYTES`, `to` at most `MAX_NAME_BYTES`, `kind`
    /// at most `MAX_KIND_BYTES`, and none of them holding a control or invisible formatting
    /// character (`crate::kernel::text::is_unsafe`): they are remembered for a day, matched by await
    /// filters that refuse such characters, and shown by `status`, `who` and `top`. Only the
    /// hub applies them, to envelopes coming in; a client reads whatever a hub delivers, so an
    /// envelope accepted before the caps existed still reaches its reader.
    pub fn check_caps(&self) -> Result<(), EnvelopeError> {
        let fields = [
            ("id", Some(self.id.as_str()), MAX_ID_BYTES),
            ("to", Some(self.to.as_str()), MAX_NAME_BYTES),
            ("kind", Some(self.kind.as_str()), MAX_KIND_BYTES),
            (
                "correlationId",
                self.correlation_id.as_deref(),
                MAX_ID_BYTES,
            ),
        ];
        for (field, value, max) in fields {
            let Some(v) = value else { continue };
            check_field(field, v, max)?;
        }
        Ok(())
    }

    /// Builds an envelope from parts; the body must be one JSON value.
    pub fn new(
        id: String,
        from: String,
        to: String,
        ts: String,
        kind: String,
        correlation_id: Option<String>,
        body_json: String,
    ) -> Result<Envelope, serde_json::Error> {
        Ok(Envelope {
            id,
            from,
            to,
            ts,
            kind,
            correlation_id,
            body: RawValue::from_string(body_json)?,
        })
    }

    /// The canonical compact text: fixed key order, `correlationId` always present, body raw.
    /// Written field by field (`wire::json_text`), not through serde's serializer: it runs for
    /// every send (the queued copy's text), and the bytes are the derived `Serialize`'s, which
    /// the tests below hold it to.
    pub fn to_json(&self) -> String {
        use super::json_text::push_str;
        let body = self.body.get();
        let mut out = String::with_capacity(
            80 + self.id.len()
                + self.from.len()
                + self.to.len()
                + self.ts.len()
                + self.kind.len()
                + self.correlation_id.as_ref().map_or(0, String::len)
                + body.len(),
        );
        out.push_str("{\"id\":");
        push_str(&mut out, &self.id);
        out.push_str(",\"from\":");
        push_str(&mut out, &self.from);
        out.push_str(",\"to\":");
        push_str(&mut out, &self.to);
        out.push_str(",\"ts\":");
        push_str(&mut out, &self.ts);
        out.push_str(",\"kind\":");
        push_str(&mut out, &self.kind);
        out.push_str(",\"correlationId\":");
        match &self.correlation_id {
            Some(c) => push_str(&mut out, c),
            None => out.push_str("null"),
        }
        out.push_str(",\"body\":");
        out.push_str(body);
        out.push('}');
        out
    }

    /// The kind the hub reserves for its own loss notices (SPEC §5.3).
    pub const BOUNCE_KIND: &'static str = "bounce";
    /// The kind of a delegated task's one outcome envelope (SPEC §16), the hub's alone.
    pub const TASK_OUTCOME_KIND: &'static str = "task_outcome";
    /// The kind of a delegated task's progress envelopes (SPEC §16), the hub's alone.
    pub const TASK_PROGRESS_KIND: &'static str = "task_progress";
    /// The kind of a delegated task's requests for an answer (SPEC §16 "Requests and
    /// answers", issue 37): opened and expired, the hub's alone. A forged one could make a
    /// delegator answer a question no agent asked.
    pub const TASK_REQUEST_KIND: &'static str = "task_request";
}

/// One field under the caps `Envelope::check_caps` applies (at most `max` bytes, no control or
/// invisible formatting character), for a client that checks what it is about to send, as the
/// MCP tools do, so an agent hears the reason from its tool rather than as the hub's refusal.
pub fn check_field(field: &'static str, value: &str, max: usize) -> Result<(), EnvelopeError> {
    if value.len() > max {
        return Err(EnvelopeError::TooLong(field, max));
    }
    if crate::kernel::text::has_unsafe(value) {
        return Err(EnvelopeError::Unprintable(field));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(id: &str, from: &str, kind: &str, corr: Option<&str>, body: &str) -> Envelope {
        Envelope::new(
            id.into(),
            from.into(),
            "b\u{e9}\"b".into(),
            "2026-01-01T00:00:00Z".into(),
            kind.into(),
            corr.map(str::to_owned),
            body.into(),
        )
        .unwrap()
    }

    /// The hand-written text is the derived `Serialize`'s byte for byte: escapes in every
    /// field, a null and a present `correlationId`, a body with whitespace, key order and
    /// escapes of its own kept raw.
    #[test]
    fn to_json_is_the_serde_text() {
        let cases = [
            env("e1", "a", "note", None, "{\"b\":1}"),
            env(
                "e\"2\\",
                "a\nb\u{1}",
                "k\t",
                Some("c\u{7f}\u{2028}"),
                "[1, 2 ,{\"z\":0,\"a\":\"\\u0041\"}]",
            ),
            env("😀", "", "k", Some(""), " \"x\" "),
            env("id", "from", "kind", None, "1.0e+3"),
        ];
        for e in &cases {
            assert_eq!(e.to_json(), serde_json::to_string(e).unwrap());
        }
    }
}
