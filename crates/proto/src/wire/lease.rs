//! The lease verbs on the client wire (lease design §0 "Client wire", SPEC §17): what a client
//! sends in `lease_claim`, `lease_release`, `lease_renew`, `lease_list`, `lease_break` and
//! `lease_check`, what the hub answers to each, the lease record, and the bodies of the hub's
//! three lease envelopes (`lease_expiring`, `lease_lost`, `lease_granted`). Our extension:
//! 004 clients never send these tags.
//!
//! Owns the payload types, their decoding (one visitor for all six, whose error texts name
//! the tag, the key and the kind of value that came, never a value: SPEC §2.4, as
//! `wire::decode`), the rules a line can be held to without the hub's config (`check`: the
//! texts of design §A.6, the config-bound ones left to the hub) and the encodings. Refuses
//! IO and every decision about leases (`hub::leases` decides).

use crate::kernel::lease_match::{self, MAX_VALUE_BYTES, PATH_GLOB};
use chrono::{DateTime, SecondsFormat, Utc};
use serde::de::{self, DeserializeSeed, MapAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use std::fmt;

/// The longest `root` and checked path: a Linux `PATH_MAX`.
pub const MAX_ROOT_BYTES: usize = 4096;
/// The most paths one `lease_check` may carry on the wire; `leases.max_check_paths` may only
/// lower it (config bounds 1-256).
pub const MAX_CHECK_PATHS: usize = 256;
/// The most characters of a `reason` kept (claudectl's bound: control characters dropped,
/// the first 256 kept).
pub const MAX_REASON_CHARS: usize = 256;
/// The longest `owner` filter: a roster name's bound (`wire::envelope::MAX_NAME_BYTES`).
const MAX_OWNER_BYTES: usize = super::envelope::MAX_NAME_BYTES;

/// The hub's lease envelope kinds (`wire::envelope::HUB_KINDS`).
pub const LEASE_EXPIRING_KIND: &str = "lease_expiring";
pub const LEASE_LOST_KIND: &str = "lease_lost";
pub const LEASE_GRANTED_KIND: &str = "lease_granted";

/// The lease tags, in the order error texts list them after the older tags.
pub const LEASE_TAGS: [&str; 6] = [
    "lease_claim",
    "lease_release",
    "lease_renew",
    "lease_list",
    "lease_break",
    "lease_check",
];

/// A lease's mode (claudectl's four words). Only an `exclusive` claim is checked, and only
/// against another owner's active `exclusive` lease (design §0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LeaseMode {
    #[default]
    Exclusive,
    SharedRead,
    SharedAppend,
    Advisory,
}

impl LeaseMode {
    pub const ALL: [LeaseMode; 4] = [
        LeaseMode::Exclusive,
        LeaseMode::SharedRead,
        LeaseMode::SharedAppend,
        LeaseMode::Advisory,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            LeaseMode::Exclusive => "exclusive",
            LeaseMode::SharedRead => "shared_read",
            LeaseMode::SharedAppend => "shared_append",
            LeaseMode::Advisory => "advisory",
        }
    }

    pub fn parse(s: &str) -> Option<LeaseMode> {
        LeaseMode::ALL.into_iter().find(|m| m.as_str() == s)
    }
}

/// Which of the six verbs a lease line is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseVerb {
    Claim,
    Release,
    Renew,
    List,
    Break,
    Check,
}

impl LeaseVerb {
    /// In `LEASE_TAGS`' order.
    pub const ALL: [LeaseVerb; 6] = [
        LeaseVerb::Claim,
        LeaseVerb::Release,
        LeaseVerb::Renew,
        LeaseVerb::List,
        LeaseVerb::Break,
        LeaseVerb::Check,
    ];

    pub fn tag(self) -> &'static str {
        match self {
            LeaseVerb::Claim => "lease_claim",
            LeaseVerb::Release => "lease_release",
            LeaseVerb::Renew => "lease_renew",
            LeaseVerb::List => "lease_list",
            LeaseVerb::Break => "lease_break",
            LeaseVerb::Check => "lease_check",
        }
    }

    /// The payload's keys, in the order error texts list them.
    pub fn keys(self) -> &'static [&'static str] {
        match self {
            LeaseVerb::Claim => &[
                "kind",
                "value",
                "mode",
                "ttlSecs",
                "reason",
                "lease",
                "root",
                "wait",
                "timeoutSecs",
                "notify",
                "fleet",
            ],
            LeaseVerb::Release => &["lease"],
            LeaseVerb::Renew => &["lease", "ttlSecs"],
            LeaseVerb::List => &["owner", "kind", "lease"],
            LeaseVerb::Break => &["lease", "reason"],
            LeaseVerb::Check => &["kind", "paths", "root", "self"],
        }
    }
}

/// `{"lease_claim":{…}}`: every key but `kind` and `value` optional; absent and null alike.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct LeaseClaim {
    pub kind: String,
    pub value: String,
    /// The word as sent (checked by `check`); absent: `exclusive`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    #[serde(rename = "ttlSecs", skip_serializing_if = "Option::is_none")]
    pub ttl_secs: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The lease id to use (a re-claim of the same id is idempotent); absent: the hub mints one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lease: Option<String>,
    /// The absolute directory a relative `path_glob` value is relative to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub root: Option<String>,
    /// Wait on this connection while the resource is held (FIFO).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wait: Option<bool>,
    /// With `wait`: give up after this many seconds (0: never wait); absent: wait forever.
    #[serde(rename = "timeoutSecs", skip_serializing_if = "Option::is_none")]
    pub timeout_secs: Option<u64>,
    /// Wait detached: answered `queued` now, granted later by a `lease_granted` envelope.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub notify: Option<bool>,
    /// Claim at the fleet's lease authority (part D; refused by this hub for now).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fleet: Option<bool>,
}

impl LeaseClaim {
    /// The mode; a word `check` refused never reaches here, so the default is only for absent.
    pub fn mode(&self) -> LeaseMode {
        self.mode
            .as_deref()
            .and_then(LeaseMode::parse)
            .unwrap_or_default()
    }

    pub fn waits(&self) -> bool {
        self.wait == Some(true)
    }

    pub fn notifies(&self) -> bool {
        self.notify == Some(true)
    }
}

/// `{"lease_release":{"lease":…}}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct LeaseRelease {
    pub lease: String,
}

/// `{"lease_renew":{"lease":…,"ttlSecs":…}}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct LeaseRenew {
    pub lease: String,
    #[serde(rename = "ttlSecs", skip_serializing_if = "Option::is_none")]
    pub ttl_secs: Option<u64>,
}

/// `{"lease_list":{"owner":…,"kind":…,"lease":…}}`: filters, each optional.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct LeaseList {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lease: Option<String>,
}

/// `{"lease_break":{"lease":…,"reason":…}}`: the operator's.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct LeaseBreak {
    pub lease: String,
    pub reason: String,
}

/// `{"lease_check":{"kind":…,"paths":[…],"root":…,"self":…}}`: the guard's one round trip.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct LeaseCheck {
    /// Absent: `path_glob`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    pub paths: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub root: Option<String>,
    /// A task identity whose leases do not count against the asker (`$AGENT_HUB_TASK`).
    #[serde(rename = "self", skip_serializing_if = "Option::is_none")]
    pub self_: Option<String>,
}

impl LeaseCheck {
    pub fn kind(&self) -> &str {
        self.kind.as_deref().unwrap_or(PATH_GLOB)
    }
}

/// One lease line from a client, decoded (`ClientLine::Lease`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseRequest {
    Claim(LeaseClaim),
    Release(LeaseRelease),
    Renew(LeaseRenew),
    List(LeaseList),
    Break(LeaseBreak),
    Check(LeaseCheck),
}

/// A refusal of `check`: the verb's tag and what to fix (`WireError::BadField`'s parts).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseLineError {
    pub tag: &'static str,
    pub why: String,
}

/// The refusal texts of design §A.6 that do not depend on the config.
pub const KIND_RULE: &str = "kind must be 1-32 characters of a-z, 0-9, _ or -";
pub const MODE_RULE: &str = "mode must be exclusive, shared_read, shared_append or advisory";
pub const LEASE_ID_RULE: &str = "lease must be 1-96 printable characters without spaces or @";
pub const ROOT_RULE: &str = "root must be an absolute path of at most 4096 bytes";

/// The value rule for a bound of `max` bytes (`leases.max_value_bytes`, at most 512).
pub fn value_rule(max: usize) -> String {
    format!("value must be 1-{max} printable characters")
}

fn root_ok(root: &str) -> bool {
    root.starts_with('/') && root.len() <= MAX_ROOT_BYTES && !root.chars().any(char::is_control)
}

impl LeaseRequest {
    pub fn verb(&self) -> LeaseVerb {
        match self {
            LeaseRequest::Claim(_) => LeaseVerb::Claim,
            LeaseRequest::Release(_) => LeaseVerb::Release,
            LeaseRequest::Renew(_) => LeaseVerb::Renew,
            LeaseRequest::List(_) => LeaseVerb::List,
            LeaseRequest::Break(_) => LeaseVerb::Break,
            LeaseRequest::Check(_) => LeaseVerb::Check,
        }
    }

    pub fn tag(&self) -> &'static str {
        self.verb().tag()
    }

    /// The rules a line is held to before the hub looks at it (design §A.6): the static
    /// bounds (claudectl's), each refusal naming the key and never quoting a value. What the
    /// config bounds (`ttlSecs`, a lower `max_value_bytes`, `max_check_paths`) the hub checks.
    pub fn check(&self) -> Result<(), LeaseLineError> {
        let tag = self.tag();
        let bad = |why: &str| {
            Err(LeaseLineError {
                tag,
                why: why.to_owned(),
            })
        };
        let lease_ok = |l: &str| lease_match::is_token(l);
        match self {
            LeaseRequest::Claim(c) => {
                if !lease_match::check_kind(&c.kind) {
                    return bad(KIND_RULE);
                }
                if !lease_match::check_value(&c.value, MAX_VALUE_BYTES) {
                    return bad(&value_rule(MAX_VALUE_BYTES));
                }
                if c.mode
                    .as_deref()
                    .is_some_and(|m| LeaseMode::parse(m).is_none())
                {
                    return bad(MODE_RULE);
                }
                if c.lease.as_deref().is_some_and(|l| !lease_ok(l)) {
                    return bad(LEASE_ID_RULE);
                }
                if c.root.as_deref().is_some_and(|r| !root_ok(r)) {
                    return bad(ROOT_RULE);
                }
                if c.timeout_secs.is_some() && !c.waits() {
                    return bad("timeoutSecs needs wait");
                }
                if c.waits() && c.notifies() {
                    return bad("wait and notify exclude each other");
                }
            }
            LeaseRequest::Release(LeaseRelease { lease })
            | LeaseRequest::Renew(LeaseRenew { lease, .. }) => {
                if !lease_ok(lease) {
                    return bad(LEASE_ID_RULE);
                }
            }
            LeaseRequest::Break(b) => {
                if !lease_ok(&b.lease) {
                    return bad(LEASE_ID_RULE);
                }
                if b.reason.trim().is_empty() {
                    return bad("reason must not be empty");
                }
            }
            LeaseRequest::List(l) => {
                if l.kind
                    .as_deref()
                    .is_some_and(|k| !lease_match::check_kind(k))
                {
                    return bad(KIND_RULE);
                }
                if l.lease.as_deref().is_some_and(|x| !lease_ok(x)) {
                    return bad(LEASE_ID_RULE);
                }
                let owner_ok = |o: &str| {
                    !o.is_empty()
                        && o.len() <= MAX_OWNER_BYTES
                        && !crate::kernel::text::has_unsafe(o)
                };
                if l.owner.as_deref().is_some_and(|o| !owner_ok(o)) {
                    return bad("owner must be a name of at most 256 printable bytes");
                }
            }
            LeaseRequest::Check(c) => {
                if c.kind
                    .as_deref()
                    .is_some_and(|k| !lease_match::check_kind(k))
                {
                    return bad(KIND_RULE);
                }
                if c.paths.is_empty() {
                    return bad("paths must not be empty");
                }
                if c.paths.len() > MAX_CHECK_PATHS {
                    return bad(&format!("at most {MAX_CHECK_PATHS} paths"));
                }
                if c.paths.iter().any(|p| {
                    p.is_empty() || p.len() > MAX_ROOT_BYTES || p.chars().any(char::is_control)
                }) {
                    return bad("each path must be 1-4096 bytes without control characters");
                }
                if c.root.as_deref().is_some_and(|r| !root_ok(r)) {
                    return bad(ROOT_RULE);
                }
                if c.self_.as_deref().is_some_and(|s| {
                    !crate::kernel::names::is_task_name(s) || s.len() > MAX_OWNER_BYTES
                }) {
                    return bad("self must be a task identity (task-…)");
                }
            }
        }
        Ok(())
    }

    /// The payload object's JSON text (the line is `{"<tag>":<this>}`).
    pub fn payload_json(&self) -> String {
        match self {
            LeaseRequest::Claim(c) => super::to_json(c),
            LeaseRequest::Release(r) => super::to_json(r),
            LeaseRequest::Renew(r) => super::to_json(r),
            LeaseRequest::List(l) => super::to_json(l),
            LeaseRequest::Break(b) => super::to_json(b),
            LeaseRequest::Check(c) => super::to_json(c),
        }
    }
}

/// The reason as kept and shown: control characters dropped, the first 256 characters kept
/// (claudectl's rule, design §A.6).
pub fn sanitize_reason(reason: &str) -> String {
    reason
        .chars()
        .filter(|c| !c.is_control())
        .take(MAX_REASON_CHARS)
        .collect()
}

/// A wall time (unix ms) as every hub time is written: RFC 3339, milliseconds, `Z`.
pub fn rfc3339_ms(ms: i64) -> String {
    DateTime::<Utc>::from_timestamp_millis(ms)
        .unwrap_or_default()
        .to_rfc3339_opts(SecondsFormat::Millis, true)
}

// ----- decoding -----

/// The seed `wire::decode` hands a lease tag's payload to: the object's fields, each known
/// key at most once, each value of its kind.
pub(super) struct PayloadSeed(pub(super) LeaseVerb);

impl<'de> DeserializeSeed<'de> for PayloadSeed {
    type Value = LeaseRequest;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<LeaseRequest, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for PayloadSeed {
    type Value = LeaseRequest;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<LeaseRequest, A::Error> {
        let verb = self.0;
        let names = verb.keys();
        let mut values: Vec<Option<&'de RawValue>> = vec![None; names.len()];
        while let Some(key) = map.next_key::<KeyText<'de>>()? {
            let Some(i) = names.iter().position(|n| *n == key.0) else {
                return Err(de::Error::custom(format_args!(
                    "unknown field in `{}`, expected {}",
                    verb.tag(),
                    super::decode::one_of(names)
                )));
            };
            if values[i].is_some() {
                return Err(de::Error::custom(format_args!(
                    "duplicate field `{}`",
                    names[i]
                )));
            }
            values[i] = Some(map.next_value::<&'de RawValue>()?);
        }
        let f = Fields { names, values };
        Ok(match verb {
            LeaseVerb::Claim => LeaseRequest::Claim(LeaseClaim {
                kind: f.text(0)?,
                value: f.text(1)?,
                mode: f.opt_text(2)?,
                ttl_secs: f.opt_u64(3)?,
                reason: f.opt_text(4)?,
                lease: f.opt_text(5)?,
                root: f.opt_text(6)?,
                wait: f.opt_flag(7)?,
                timeout_secs: f.opt_u64(8)?,
                notify: f.opt_flag(9)?,
                fleet: f.opt_flag(10)?,
            }),
            LeaseVerb::Release => LeaseRequest::Release(LeaseRelease { lease: f.text(0)? }),
            LeaseVerb::Renew => LeaseRequest::Renew(LeaseRenew {
                lease: f.text(0)?,
                ttl_secs: f.opt_u64(1)?,
            }),
            LeaseVerb::List => LeaseRequest::List(LeaseList {
                owner: f.opt_text(0)?,
                kind: f.opt_text(1)?,
                lease: f.opt_text(2)?,
            }),
            LeaseVerb::Break => LeaseRequest::Break(LeaseBreak {
                lease: f.text(0)?,
                reason: f.text(1)?,
            }),
            LeaseVerb::Check => LeaseRequest::Check(LeaseCheck {
                kind: f.opt_text(0)?,
                paths: f.texts(1)?,
                root: f.opt_text(2)?,
                self_: f.opt_text(3)?,
            }),
        })
    }

    fn visit_unit<E: de::Error>(self) -> Result<LeaseRequest, E> {
        Err(wrong("null", "an object"))
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<LeaseRequest, E> {
        Err(wrong("boolean", "an object"))
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<LeaseRequest, E> {
        Err(wrong("integer", "an object"))
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<LeaseRequest, E> {
        Err(wrong("integer", "an object"))
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<LeaseRequest, E> {
        Err(wrong("floating point", "an object"))
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<LeaseRequest, E> {
        Err(wrong("string", "an object"))
    }
    fn visit_seq<A: de::SeqAccess<'de>>(self, _: A) -> Result<LeaseRequest, A::Error> {
        Err(wrong("sequence", "an object"))
    }
}

/// A key as text, without serde's default of quoting it in an error.
struct KeyText<'de>(std::borrow::Cow<'de, str>);

impl<'de> Deserialize<'de> for KeyText<'de> {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<KeyText<'de>, D::Error> {
        struct K;
        impl<'de> Visitor<'de> for K {
            type Value = KeyText<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a key")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<KeyText<'de>, E> {
                Ok(KeyText(std::borrow::Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<KeyText<'de>, E> {
                Ok(KeyText(std::borrow::Cow::Owned(v.to_owned())))
            }
        }
        d.deserialize_str(K)
    }
}

fn wrong<E: de::Error>(kind: &str, want: &str) -> E {
    E::custom(format_args!("invalid type: {kind}, expected {want}"))
}

/// The kind of a JSON value's text, as error texts name it (`wire::decode`'s words).
fn kind_of(raw: &RawValue) -> &'static str {
    match raw.get().trim_start().as_bytes().first() {
        Some(b'"') => "string",
        Some(b't' | b'f') => "boolean",
        Some(b'n') => "null",
        Some(b'[') => "sequence",
        Some(b'{') => "map",
        Some(b'-') => "negative integer",
        _ if raw.get().contains(['.', 'e', 'E']) => "floating point",
        _ => "integer",
    }
}

/// A payload's raw values by key index, read into their types.
struct Fields<'de> {
    names: &'static [&'static str],
    values: Vec<Option<&'de RawValue>>,
}

impl Fields<'_> {
    fn raw(&self, i: usize) -> Option<&RawValue> {
        self.values[i].filter(|r| r.get().trim() != "null")
    }

    fn text<E: de::Error>(&self, i: usize) -> Result<String, E> {
        match self.values[i] {
            None => Err(E::custom(format_args!("missing field `{}`", self.names[i]))),
            Some(raw) => string(raw),
        }
    }

    fn opt_text<E: de::Error>(&self, i: usize) -> Result<Option<String>, E> {
        self.raw(i).map(string).transpose()
    }

    fn opt_u64<E: de::Error>(&self, i: usize) -> Result<Option<u64>, E> {
        let Some(raw) = self.raw(i) else {
            return Ok(None);
        };
        match kind_of(raw) {
            "integer" => serde_json::from_str::<u64>(raw.get())
                .map(Some)
                .map_err(|_| wrong("floating point", "u64")),
            "negative integer" => Err(E::custom("invalid value: negative integer, expected u64")),
            kind => Err(wrong(kind, "u64")),
        }
    }

    fn opt_flag<E: de::Error>(&self, i: usize) -> Result<Option<bool>, E> {
        let Some(raw) = self.raw(i) else {
            return Ok(None);
        };
        match raw.get().trim() {
            "true" => Ok(Some(true)),
            "false" => Ok(Some(false)),
            _ => Err(wrong(kind_of(raw), "a boolean")),
        }
    }

    /// A list of strings; at most `MAX_CHECK_PATHS + 1` kept (enough for `check` to refuse
    /// the count), so a long list costs no more than its own bytes.
    fn texts<E: de::Error>(&self, i: usize) -> Result<Vec<String>, E> {
        let Some(raw) = self.values[i] else {
            return Err(E::custom(format_args!("missing field `{}`", self.names[i])));
        };
        if kind_of(raw) != "sequence" {
            return Err(wrong(kind_of(raw), "a list of strings"));
        }
        let items: Vec<&RawValue> =
            serde_json::from_str(raw.get()).map_err(|_| wrong("sequence", "a list of strings"))?;
        let mut out = Vec::new();
        for item in items.into_iter().take(MAX_CHECK_PATHS + 1) {
            out.push(string(item)?);
        }
        Ok(out)
    }
}

fn string<E: de::Error>(raw: &RawValue) -> Result<String, E> {
    if kind_of(raw) != "string" {
        return Err(wrong(kind_of(raw), "a string"));
    }
    // A JSON string's text always reads as a string; no value reaches an error.
    serde_json::from_str::<String>(raw.get()).map_err(|_| wrong("string", "a string"))
}

// ----- replies -----

/// A lease as the hub shows it (design §0 "Record"; keys in this order, optional ones absent).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseRecord {
    pub lease: String,
    pub owner: String,
    pub kind: String,
    pub value: String,
    pub mode: String,
    pub reason: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root: Option<String>,
    #[serde(rename = "acquiredAt")]
    pub acquired_at: String,
    #[serde(rename = "expiresAt")]
    pub expires_at: String,
    #[serde(rename = "ttlSecs")]
    pub ttl_secs: u64,
    /// `active`, `released`, `expired` or `broken`.
    pub state: String,
    /// The authority peer id, for a lease held there (part D).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fleet: Option<String>,
    /// The claims queued behind it, in FIFO order (`lease_list`, `status --lease`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiters: Option<Vec<WaiterView>>,
}

/// A waiter queued behind a lease.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaiterView {
    pub waiter: String,
    pub owner: String,
    pub since: String,
    pub ahead: u64,
}

/// The answer to `lease_claim`. `outcome`: `granted` (with `lease`, `waitedMs`), `conflict`
/// (the holder's keys, or only `ahead` when only earlier waiters block), `queued` (with
/// `waiter`, `ahead`; only to `notify`), `timeout` (a waiting claim's deadline passed: the
/// holder's keys, nothing granted).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseClaimReply {
    pub outcome: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<LeaseRecord>,
    #[serde(rename = "waitedMs", default, skip_serializing_if = "Option::is_none")]
    pub waited_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder: Option<String>,
    #[serde(
        rename = "holderLease",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub holder_lease: Option<String>,
    #[serde(rename = "expiresAt", default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ahead: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiter: Option<String>,
}

/// The outcomes of `lease_claim`.
pub const GRANTED: &str = "granted";
pub const CONFLICT: &str = "conflict";
pub const QUEUED: &str = "queued";
pub const TIMEOUT: &str = "timeout";

/// `{"lease_release":{"lease":…,"outcome":"released"}}` and `lease_break`'s `broken`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseOutcome {
    pub lease: String,
    pub outcome: String,
}

/// `{"lease_renew":{"lease":{record}}}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseRenewReply {
    pub lease: LeaseRecord,
}

/// `{"lease_list":{"leases":[…],"waiting":[…]}}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseListReply {
    pub leases: Vec<LeaseRecord>,
    #[serde(default)]
    pub waiting: Vec<WaitingView>,
}

/// A queued claim as `lease_list` shows it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaitingView {
    pub waiter: String,
    pub owner: String,
    pub kind: String,
    pub value: String,
    pub since: String,
    pub ahead: u64,
    /// A `notify` waiter: its grant comes as a `lease_granted` envelope.
    pub detached: bool,
}

/// `{"lease_check":{"verdict":"free"|"held","held":[…]}}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseCheckReply {
    pub verdict: String,
    pub held: Vec<HeldPath>,
}

/// A checked path another owner holds.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeldPath {
    pub path: String,
    pub lease: String,
    pub holder: String,
    pub mode: String,
    #[serde(rename = "expiresAt")]
    pub expires_at: String,
}

/// One lease reply (`HubLine::Lease`). The two that carry a record are boxed, so a hub line
/// stays the size of its common variants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseReply {
    Claim(Box<LeaseClaimReply>),
    Release(LeaseOutcome),
    Renew(Box<LeaseRenewReply>),
    List(LeaseListReply),
    Break(LeaseOutcome),
    Check(LeaseCheckReply),
}

impl LeaseReply {
    pub fn tag(&self) -> &'static str {
        match self {
            LeaseReply::Claim(_) => LeaseVerb::Claim.tag(),
            LeaseReply::Release(_) => LeaseVerb::Release.tag(),
            LeaseReply::Renew(_) => LeaseVerb::Renew.tag(),
            LeaseReply::List(_) => LeaseVerb::List.tag(),
            LeaseReply::Break(_) => LeaseVerb::Break.tag(),
            LeaseReply::Check(_) => LeaseVerb::Check.tag(),
        }
    }

    /// The payload's JSON text.
    pub fn payload_json(&self) -> String {
        match self {
            LeaseReply::Claim(r) => super::to_json(r),
            LeaseReply::Release(r) | LeaseReply::Break(r) => super::to_json(r),
            LeaseReply::Renew(r) => super::to_json(r),
            LeaseReply::List(r) => super::to_json(r),
            LeaseReply::Check(r) => super::to_json(r),
        }
    }

    /// Reads a lease tag's payload (client side), tolerant of keys a later hub adds.
    pub fn decode(tag: &str, payload: &str) -> Option<Result<LeaseReply, serde_json::Error>> {
        let verb = LeaseVerb::ALL.into_iter().find(|v| v.tag() == tag)?;
        Some(match verb {
            LeaseVerb::Claim => {
                serde_json::from_str(payload).map(|r| LeaseReply::Claim(Box::new(r)))
            }
            LeaseVerb::Release => serde_json::from_str(payload).map(LeaseReply::Release),
            LeaseVerb::Renew => {
                serde_json::from_str(payload).map(|r| LeaseReply::Renew(Box::new(r)))
            }
            LeaseVerb::List => serde_json::from_str(payload).map(LeaseReply::List),
            LeaseVerb::Break => serde_json::from_str(payload).map(LeaseReply::Break),
            LeaseVerb::Check => serde_json::from_str(payload).map(LeaseReply::Check),
        })
    }
}

// ----- envelope bodies -----

/// `lease_expiring`'s body: sent once per lease per expiry to its owner.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseExpiringBody {
    pub lease: String,
    pub kind: String,
    pub value: String,
    #[serde(rename = "expiresAt")]
    pub expires_at: String,
    /// The command that renews it.
    pub renew: String,
}

/// `lease_lost`'s body: the lease expired or was broken (or its authority dropped it).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseLostBody {
    pub lease: String,
    pub kind: String,
    pub value: String,
    /// `expired`, `broken` or `authority`.
    pub why: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// `lease_granted`'s body: a detached (`notify`) waiter's claim is granted.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseGrantedBody {
    pub lease: LeaseRecord,
    #[serde(rename = "waitedMs")]
    pub waited_ms: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{ClientLine, HubLine};

    fn err(line: &str) -> String {
        ClientLine::decode(line.as_bytes())
            .err()
            .unwrap_or_else(|| panic!("decoded: {line}"))
            .to_string()
    }

    /// Every verb decodes, and re-encodes to the same canonical line.
    #[test]
    fn each_verb_round_trips() {
        for line in [
            r#"{"lease_claim":{"kind":"path_glob","value":"src/**"}}"#,
            r#"{"lease_claim":{"kind":"path_glob","value":"src/**","mode":"exclusive","ttlSecs":300,"reason":"refactor relay","lease":"lease-0123456789abcdef","root":"/abs/repo","wait":true,"timeoutSecs":60,"notify":false,"fleet":false}}"#,
            r#"{"lease_release":{"lease":"lease-1"}}"#,
            r#"{"lease_renew":{"lease":"lease-1","ttlSecs":600}}"#,
            r#"{"lease_renew":{"lease":"lease-1"}}"#,
            r#"{"lease_list":{}}"#,
            r#"{"lease_list":{"owner":"bee","kind":"path_glob","lease":"lease-1"}}"#,
            r#"{"lease_break":{"lease":"lease-1","reason":"bee's session hung"}}"#,
            r#"{"lease_check":{"kind":"path_glob","paths":["/abs/repo/src/a.rs"],"root":"/abs/repo","self":"task-1"}}"#,
        ] {
            let decoded =
                ClientLine::decode(line.as_bytes()).unwrap_or_else(|e| panic!("{line}: {e}"));
            assert_eq!(decoded.encode().trim_end(), line);
        }
    }

    /// Nulls read as absent; the re-encoding leaves them out.
    #[test]
    fn null_keys_are_absent() {
        let line = r#"{"lease_claim":{"kind":"db","value":"main","mode":null,"ttlSecs":null,"wait":null}}"#;
        let d = ClientLine::decode(line.as_bytes()).expect("decodes");
        assert_eq!(
            d.encode().trim_end(),
            r#"{"lease_claim":{"kind":"db","value":"main"}}"#
        );
    }

    /// The refusals of design §A.6 a line can get before the hub looks, each naming the key,
    /// none quoting a value.
    #[test]
    fn bad_lines_are_refused_with_the_designs_texts() {
        let long = "v".repeat(513);
        let cases = [
            (
                r#"{"lease_claim":{"kind":"Path","value":"x"}}"#.to_owned(),
                "invalid lease_claim: kind must be 1-32 characters of a-z, 0-9, _ or -",
            ),
            (
                format!(r#"{{"lease_claim":{{"kind":"db","value":"{long}"}}}}"#),
                "invalid lease_claim: value must be 1-512 printable characters",
            ),
            (
                r#"{"lease_claim":{"kind":"db","value":"a\u001bb"}}"#.to_owned(),
                "invalid lease_claim: value must be 1-512 printable characters",
            ),
            (
                r#"{"lease_claim":{"kind":"db","value":"x","mode":"SECRET"}}"#.to_owned(),
                "invalid lease_claim: mode must be exclusive, shared_read, shared_append or advisory",
            ),
            (
                r#"{"lease_claim":{"kind":"db","value":"x","lease":"a b"}}"#.to_owned(),
                "invalid lease_claim: lease must be 1-96 printable characters without spaces or @",
            ),
            (
                r#"{"lease_claim":{"kind":"db","value":"x","root":"rel/dir"}}"#.to_owned(),
                "invalid lease_claim: root must be an absolute path of at most 4096 bytes",
            ),
            (
                r#"{"lease_claim":{"kind":"db","value":"x","timeoutSecs":5}}"#.to_owned(),
                "invalid lease_claim: timeoutSecs needs wait",
            ),
            (
                r#"{"lease_claim":{"kind":"db","value":"x","wait":true,"notify":true}}"#.to_owned(),
                "invalid lease_claim: wait and notify exclude each other",
            ),
            (
                r#"{"lease_release":{"lease":"x@y"}}"#.to_owned(),
                "invalid lease_release: lease must be 1-96 printable characters without spaces or @",
            ),
            (
                r#"{"lease_break":{"lease":"l","reason":"  "}}"#.to_owned(),
                "invalid lease_break: reason must not be empty",
            ),
            (
                r#"{"lease_check":{"paths":[]}}"#.to_owned(),
                "invalid lease_check: paths must not be empty",
            ),
            (
                r#"{"lease_check":{"paths":["a"],"self":"bee"}}"#.to_owned(),
                "invalid lease_check: self must be a task identity (task-…)",
            ),
        ];
        for (line, want) in cases {
            let got = err(&line);
            assert_eq!(got, want, "{line}");
            assert!(!got.contains("SECRET"));
        }
    }

    /// Shape errors name the key and the kind of value, never the value or an unknown key.
    #[test]
    fn shape_errors_never_quote_the_line() {
        for (line, want) in [
            (
                r#"{"lease_claim":{"kind":"db"}}"#,
                "malformed line: missing field `value`",
            ),
            (
                r#"{"lease_claim":{"kind":"db","value":"x","tok-SECRET":1}}"#,
                "malformed line: unknown field in `lease_claim`, expected one of `kind`, `value`, `mode`, `ttlSecs`, `reason`, `lease`, `root`, `wait`, `timeoutSecs`, `notify`, `fleet`",
            ),
            (
                r#"{"lease_claim":{"kind":"db","value":"x","kind":"db"}}"#,
                "malformed line: duplicate field `kind`",
            ),
            (
                r#"{"lease_claim":{"kind":"db","value":["tok-SECRET"]}}"#,
                "malformed line: invalid type: sequence, expected a string",
            ),
            (
                r#"{"lease_claim":{"kind":"db","value":"x","ttlSecs":"tok-SECRET"}}"#,
                "malformed line: invalid type: string, expected u64",
            ),
            (
                r#"{"lease_claim":{"kind":"db","value":"x","ttlSecs":-3}}"#,
                "malformed line: invalid value: negative integer, expected u64",
            ),
            (
                r#"{"lease_claim":{"kind":"db","value":"x","wait":"tok-SECRET"}}"#,
                "malformed line: invalid type: string, expected a boolean",
            ),
            (
                r#"{"lease_release":"tok-SECRET"}"#,
                "malformed line: invalid type: string, expected an object",
            ),
            (
                r#"{"lease_check":{"paths":"tok-SECRET"}}"#,
                "malformed line: invalid type: string, expected a list of strings",
            ),
            (
                r#"{"lease_check":{"paths":[1]}}"#,
                "malformed line: invalid type: integer, expected a string",
            ),
        ] {
            let got = err(line);
            assert_eq!(got, want, "{line}");
            assert!(!got.contains("SECRET"), "{got}");
        }
    }

    /// Every reply and body round-trips through the hub line's decoder.
    #[test]
    fn replies_round_trip() {
        let record = LeaseRecord {
            lease: "lease-1".into(),
            owner: "bee".into(),
            kind: "path_glob".into(),
            value: "src/**".into(),
            mode: "exclusive".into(),
            reason: "r".into(),
            root: Some("/repo".into()),
            acquired_at: rfc3339_ms(0),
            expires_at: rfc3339_ms(300_000),
            ttl_secs: 300,
            state: "active".into(),
            fleet: None,
            waiters: None,
        };
        for reply in [
            LeaseReply::Claim(Box::new(LeaseClaimReply {
                outcome: GRANTED.into(),
                lease: Some(record.clone()),
                waited_ms: Some(12),
                ..Default::default()
            })),
            LeaseReply::Claim(Box::new(LeaseClaimReply {
                outcome: CONFLICT.into(),
                holder: Some("bee".into()),
                holder_lease: Some("lease-1".into()),
                expires_at: Some(rfc3339_ms(1)),
                ahead: Some(2),
                ..Default::default()
            })),
            LeaseReply::Release(LeaseOutcome {
                lease: "lease-1".into(),
                outcome: "released".into(),
            }),
            LeaseReply::Renew(Box::new(LeaseRenewReply {
                lease: record.clone(),
            })),
            LeaseReply::List(LeaseListReply {
                leases: vec![record],
                waiting: vec![],
            }),
            LeaseReply::Check(LeaseCheckReply {
                verdict: "free".into(),
                held: vec![],
            }),
        ] {
            let line = HubLine::Lease(reply.clone());
            let text = line.encode();
            assert_eq!(
                HubLine::decode(text.trim_end().as_bytes()),
                Ok(line),
                "{text}"
            );
        }
        assert_eq!(rfc3339_ms(1_500), "1970-01-01T00:00:01.500Z");
    }

    #[test]
    fn reasons_lose_control_characters_and_stop_at_256_chars() {
        assert_eq!(sanitize_reason("a\u{1b}[2Jb\nc"), "a[2Jbc");
        assert_eq!(sanitize_reason(&"é".repeat(300)).chars().count(), 256);
    }
}
