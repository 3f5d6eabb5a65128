//! Decoding of client lines into their typed payloads (SPEC §2.2–§2.4), with error texts that
//! never quote the line: an error names the tag or key it is about (as the protocol spells
//! it), the kind of value that came (`string`, `integer`, `map`, …) and what was expected, and
//! nothing else. No string, number, unknown key or unknown tag taken from the line appears in
//! it, so a token sent where a name, an id or an object belongs cannot reach an error line, the
//! audit log or the service log through its error (SPEC §2.4, §8.2).
//!
//! Owns the serde visitors of every client payload (a `delegate`'s `allow` rules among them,
//! issue 37), and of an envelope arriving from a peer hub (SPEC §15). serde's derived visitors cannot serve: their errors quote the offending value
//! (`invalid type: string "…"`) and the unknown key (``unknown field `…` ``). JSON syntax errors
//! are serde_json's own; they name a position, never the text. Refuses IO.

use super::approval::{
    AllowRule, TaskAnswerRequest, TaskPermissionRequest, MAX_ALLOW_RULES, TOOL_KINDS,
};
use super::envelope::RawEnvelope;
use super::lease::{LeaseRequest, LeaseVerb, PayloadSeed};
use super::task::{DelegateRequest, TaskPromptRequest, TaskRequest};
use super::{AwaitRequest, Hello, IdRequest, StatusRequest, TurnRequest, WhoRequest};
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;
use std::fmt;

/// The tags a client line may carry, in the order error texts list them.
const TAGS: &[&str] = &[
    "hello",
    "send",
    "await",
    "ack",
    "status",
    "who",
    "delegate",
    "task_status",
    "tasks",
    "cancel",
    "task_answer",
    "task_permission",
    "turn",
    "activity",
    "task_prompt",
    "task_close",
    // Lease design §0: the lease verbs, decoded by `wire::lease`.
    "lease_claim",
    "lease_release",
    "lease_renew",
    "lease_list",
    "lease_break",
    "lease_check",
];

pub(super) const HELLO_KEYS: &[&str] = &["name", "token", "warn"];
pub(super) const ENVELOPE_KEYS: &[&str] =
    &["id", "from", "to", "ts", "kind", "correlationId", "body"];
pub(super) const AWAIT_KEYS: &[&str] = &["replyTo", "kind", "timeoutSecs", "ack", "reader"];
pub(super) const ID_KEYS: &[&str] = &["id"];
pub(super) const STATUS_KEYS: &[&str] = &["id", "waitFor", "timeoutMs"];
const DELEGATE_KEYS: &[&str] = &[
    "agent",
    "cwd",
    "prompt",
    "timeoutSecs",
    "progressSecs",
    "peer",
    "permission",
    "allow",
    "requires",
    "maxCostUsd",
    "maxTokens",
    "allowUnmetered",
    "keepSecs",
];
const TASK_KEYS: &[&str] = &["task"];
/// The keys of a follow-up turn (issue 38 design §2).
const TASK_PROMPT_KEYS: &[&str] = &["task", "prompt", "interrupt"];
const TASK_ANSWER_KEYS: &[&str] = &["task", "request", "option", "message"];
/// The keys of a headless task's permission prompt (issue 37 design §6).
const TASK_PERMISSION_KEYS: &[&str] = &["toolName", "toolUseId", "input"];
/// The keys of one rule of a `delegate`'s `allow` (issue 37).
const RULE_KEYS: &[&str] = &["kinds", "under"];
const TURN_KEYS: &[&str] = &["state", "pid", "start"];
const WHO_KEYS: &[&str] = &["offRoster"];

/// A client line's payload, by tag, before the field rules of SPEC §3.2 and §5.2.
pub(crate) enum Payload<'a> {
    Hello(Hello),
    Send(RawEnvelope<'a>),
    Await(AwaitRequest),
    Ack(IdRequest),
    Status(StatusRequest),
    Who(WhoRequest),
    /// The request, and its `permission` as the line wrote it (`ClientLine::decode` reads
    /// the word, so a wrong one is refused as `invalid delegate`, not as a malformed line).
    Delegate(DelegateRequest, Option<String>),
    TaskStatus(TaskRequest),
    Tasks,
    Cancel(TaskRequest),
    TaskAnswer(TaskAnswerRequest),
    TaskPermission(TaskPermissionRequest),
    Turn(TurnRequest),
    Activity,
    TaskPrompt(TaskPromptRequest),
    TaskClose(TaskRequest),
    /// A lease verb (lease design §0), read by `wire::lease::PayloadSeed`.
    Lease(LeaseRequest),
}

/// Decodes one client line: exactly one JSON object holding exactly one known tag. The hot
/// lines' common shapes go through `wire::fast`, which yields exactly what `serde_line` would
/// or declines; everything else, every refusal included, is `serde_line`'s.
pub(crate) fn client_line(text: &str) -> Result<Payload<'_>, serde_json::Error> {
    match super::fast::client_line(text) {
        Some(p) => Ok(p),
        None => serde_line(text),
    }
}

/// Decodes one client line through serde_json and the visitors below: the reference decoder,
/// and the one that writes every error text.
pub(crate) fn serde_line(text: &str) -> Result<Payload<'_>, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_str(text);
    let value = (&mut de).deserialize_any(V(Want::Line))?;
    de.end()?;
    match value {
        Val::Line(p) => Ok(*p),
        _ => Err(de::Error::custom(
            "internal: a line decoded to something else",
        )),
    }
}

/// Decodes an envelope's own JSON object (a peer hub's `bus_forward`, SPEC §15).
pub(crate) fn envelope(text: &str) -> Result<RawEnvelope<'_>, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_str(text);
    let value = (&mut de).deserialize_any(V(Want::Object(Obj::Send)))?;
    de.end()?;
    match value {
        Val::Line(p) => match *p {
            Payload::Send(env) => Ok(env),
            _ => Err(de::Error::custom(
                "internal: an envelope decoded to something else",
            )),
        },
        _ => Err(de::Error::custom(
            "internal: an envelope decoded to something else",
        )),
    }
}

/// What the value at hand must be.
#[derive(Clone, Copy)]
enum Want {
    /// A whole line: an object with one tag.
    Line,
    /// A payload object.
    Object(Obj),
    Text,
    /// A string or null.
    OptText,
    /// A whole number of seconds or null.
    OptSecs,
    /// A boolean or null.
    OptFlag,
    /// A list of `allow` rules, or null.
    OptRules,
    /// `delegate`'s `requires` (issue 38): a list of strings, or null.
    OptTags,
    /// An amount of money (`delegate`'s `maxCostUsd`, issue 38): a number, or null.
    OptAmount,
    /// One `allow` rule: an object.
    Rule,
    /// A rule's `kinds`: a list of strings.
    Kinds,
}

#[derive(Clone, Copy)]
enum Obj {
    Hello,
    Send,
    Await,
    Ack,
    Status,
    Who,
    Delegate,
    TaskStatus,
    Tasks,
    Cancel,
    TaskAnswer,
    TaskPermission,
    Turn,
    Activity,
    TaskPrompt,
    TaskClose,
    /// A lease verb: its payload is `wire::lease`'s to read.
    Lease(LeaseVerb),
}

impl Obj {
    fn tag(self) -> &'static str {
        match self {
            Obj::Hello => "hello",
            Obj::Send => "send",
            Obj::Await => "await",
            Obj::Ack => "ack",
            Obj::Status => "status",
            Obj::Who => "who",
            Obj::Delegate => "delegate",
            Obj::TaskStatus => "task_status",
            Obj::Tasks => "tasks",
            Obj::Cancel => "cancel",
            Obj::TaskAnswer => "task_answer",
            Obj::TaskPermission => "task_permission",
            Obj::Turn => "turn",
            Obj::Activity => "activity",
            Obj::TaskPrompt => "task_prompt",
            Obj::TaskClose => "task_close",
            Obj::Lease(v) => v.tag(),
        }
    }

    fn keys(self) -> &'static [&'static str] {
        match self {
            Obj::Hello => HELLO_KEYS,
            Obj::Send => ENVELOPE_KEYS,
            Obj::Await => AWAIT_KEYS,
            Obj::Ack => ID_KEYS,
            Obj::Status => STATUS_KEYS,
            Obj::Who => WHO_KEYS,
            Obj::Tasks | Obj::Activity => &[],
            Obj::Delegate => DELEGATE_KEYS,
            Obj::TaskStatus | Obj::Cancel | Obj::TaskClose => TASK_KEYS,
            Obj::TaskPrompt => TASK_PROMPT_KEYS,
            Obj::TaskAnswer => TASK_ANSWER_KEYS,
            Obj::TaskPermission => TASK_PERMISSION_KEYS,
            Obj::Turn => TURN_KEYS,
            Obj::Lease(v) => v.keys(),
        }
    }
}

impl Want {
    fn expected(self) -> &'static str {
        match self {
            Want::Line => "an object with one tag",
            Want::Object(_) => "an object",
            Want::Text | Want::OptText => "a string",
            Want::OptSecs => "u64",
            Want::OptFlag => "a boolean",
            Want::OptRules => "a list of rules",
            Want::OptTags => "a list of tags",
            Want::OptAmount => "a number",
            Want::Rule => "a rule object",
            Want::Kinds => "a list of tool kinds",
        }
    }
}

/// A decoded value of any of the shapes `Want` names.
enum Val<'de> {
    Null,
    Text(String),
    Secs(u64),
    Amount(f64),
    Flag(bool),
    /// Boxed: a `delegate` line is much larger than every other value.
    Line(Box<Payload<'de>>),
    Rules(Vec<AllowRule>),
    Rule(AllowRule),
    Texts(Vec<String>),
}

/// The error for a value of the wrong kind: the kind, never the value.
fn wrong<E: de::Error>(kind: &str, want: Want) -> E {
    E::custom(format_args!(
        "invalid type: {kind}, expected {}",
        want.expected()
    ))
}

/// `` `a` ``, `` `a` or `b` ``, `` one of `a`, `b`, `c` ``: the names a protocol expects.
struct OneOf(&'static [&'static str]);

impl fmt::Display for OneOf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            [] => f.write_str("none"),
            [a] => write!(f, "`{a}`"),
            [a, b] => write!(f, "`{a}` or `{b}`"),
            names => {
                f.write_str("one of ")?;
                for (i, n) in names.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "`{n}`")?;
                }
                Ok(())
            }
        }
    }
}

/// `OneOf`, for `wire::lease`'s key refusals (the same words as every other payload's).
pub(super) fn one_of(names: &'static [&'static str]) -> impl fmt::Display {
    OneOf(names)
}

/// One value visitor for every shape, so that each of the `visit_*` methods serde_json's
/// `deserialize_any` can call is written once, and none of serde's quoting defaults is left.
struct V(Want);

impl<'de> Visitor<'de> for V {
    type Value = Val<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0.expected())
    }

    fn visit_unit<E: de::Error>(self) -> Result<Val<'de>, E> {
        match self.0 {
            Want::OptText
            | Want::OptSecs
            | Want::OptFlag
            | Want::OptRules
            | Want::OptTags
            | Want::OptAmount => Ok(Val::Null),
            w => Err(wrong("null", w)),
        }
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Val<'de>, E> {
        match self.0 {
            Want::OptFlag => Ok(Val::Flag(v)),
            w => Err(wrong("boolean", w)),
        }
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Val<'de>, E> {
        match self.0 {
            Want::OptSecs => Ok(Val::Secs(v)),
            Want::OptAmount => Ok(Val::Amount(v as f64)),
            w => Err(wrong("integer", w)),
        }
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Val<'de>, E> {
        match self.0 {
            Want::OptSecs if v >= 0 => Ok(Val::Secs(v as u64)),
            Want::OptSecs => Err(E::custom("invalid value: negative integer, expected u64")),
            Want::OptAmount => Ok(Val::Amount(v as f64)),
            w => Err(wrong("integer", w)),
        }
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Val<'de>, E> {
        match self.0 {
            Want::OptAmount => Ok(Val::Amount(v)),
            w => Err(wrong("floating point", w)),
        }
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Val<'de>, E> {
        match self.0 {
            Want::Text | Want::OptText => Ok(Val::Text(v.to_owned())),
            w => Err(wrong("string", w)),
        }
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Val<'de>, A::Error> {
        match self.0 {
            Want::OptRules => rules(seq).map(Val::Rules),
            Want::Kinds => kinds(seq).map(Val::Texts),
            Want::OptTags => tags(seq).map(Val::Texts),
            w => Err(wrong("sequence", w)),
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Val<'de>, A::Error> {
        match self.0 {
            Want::Line => line(map).map(|p| Val::Line(Box::new(p))),
            Want::Object(obj) => payload(obj, map).map(|p| Val::Line(Box::new(p))),
            Want::Rule => rule(map).map(Val::Rule),
            w => Err(wrong("map", w)),
        }
    }
}

impl<'de> DeserializeSeed<'de> for V {
    type Value = Val<'de>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Val<'de>, D::Error> {
        d.deserialize_any(self)
    }
}

/// A key among `names` (its index), or a refusal that names where it was, never the key.
struct Key {
    /// The payload whose key this is (`hello`, `send`, …); None for a line's tag.
    tag: Option<&'static str>,
    names: &'static [&'static str],
}

impl<'de> Visitor<'de> for Key {
    type Value = usize;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", OneOf(self.names))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<usize, E> {
        self.names
            .iter()
            .position(|n| *n == v)
            .ok_or_else(|| match self.tag {
                None => E::custom(format_args!("unknown tag, expected {}", OneOf(self.names))),
                Some(tag) if self.names.is_empty() => E::custom(format_args!(
                    "unknown field in `{tag}`, which has no fields"
                )),
                Some(tag) => E::custom(format_args!(
                    "unknown field in `{tag}`, expected {}",
                    OneOf(self.names)
                )),
            })
    }
}

impl<'de> DeserializeSeed<'de> for Key {
    type Value = usize;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<usize, D::Error> {
        d.deserialize_str(self)
    }
}

/// `{"<tag>":{…}}`: one key, a known tag, its payload.
fn line<'de, A: MapAccess<'de>>(mut map: A) -> Result<Payload<'de>, A::Error> {
    let tag = Key {
        tag: None,
        names: TAGS,
    };
    let Some(i) = map.next_key_seed(tag)? else {
        return Err(de::Error::custom("a line holds one tag, found none"));
    };
    let obj = [
        Obj::Hello,
        Obj::Send,
        Obj::Await,
        Obj::Ack,
        Obj::Status,
        Obj::Who,
        Obj::Delegate,
        Obj::TaskStatus,
        Obj::Tasks,
        Obj::Cancel,
        Obj::TaskAnswer,
        Obj::TaskPermission,
        Obj::Turn,
        Obj::Activity,
        Obj::TaskPrompt,
        Obj::TaskClose,
        Obj::Lease(LeaseVerb::Claim),
        Obj::Lease(LeaseVerb::Release),
        Obj::Lease(LeaseVerb::Renew),
        Obj::Lease(LeaseVerb::List),
        Obj::Lease(LeaseVerb::Break),
        Obj::Lease(LeaseVerb::Check),
    ][i];
    if let Obj::Lease(verb) = obj {
        let p = map.next_value_seed(PayloadSeed(verb))?;
        if map.next_key::<IgnoredAny>()?.is_some() {
            return Err(de::Error::custom(
                "a line holds one tag, found more than one",
            ));
        }
        return Ok(Payload::Lease(p));
    }
    let Val::Line(p) = map.next_value_seed(V(Want::Object(obj)))? else {
        return Err(de::Error::custom(
            "internal: a payload decoded to something else",
        ));
    };
    if map.next_key::<IgnoredAny>()?.is_some() {
        return Err(de::Error::custom(
            "a line holds one tag, found more than one",
        ));
    }
    Ok(*p)
}

/// A payload object's fields: each known key at most once, the required ones present.
fn payload<'de, A: MapAccess<'de>>(obj: Obj, mut map: A) -> Result<Payload<'de>, A::Error> {
    let names = obj.keys();
    let mut seen = 0u32;
    let mut texts: [Option<String>; 16] = Default::default();
    let mut secs: [Option<u64>; 16] = Default::default();
    let mut amount: Option<f64> = None;
    let mut flag = None;
    let mut allow: Option<Vec<AllowRule>> = None;
    let mut requires: Option<Vec<String>> = None;
    let mut correlation: Option<Option<String>> = None;
    let mut body: Option<&'de RawValue> = None;
    let mut input: Option<&'de RawValue> = None;
    let key = || Key {
        tag: Some(obj.tag()),
        names,
    };
    while let Some(i) = map.next_key_seed(key())? {
        if seen & (1 << i) != 0 {
            return Err(de::Error::custom(format_args!(
                "duplicate field `{}`",
                names[i]
            )));
        }
        seen |= 1 << i;
        let want = match (obj, names[i]) {
            (Obj::Send, "body") => {
                body = Some(map.next_value::<&'de RawValue>()?);
                continue;
            }
            // The tool's input as its JSON text (any JSON value here; `check` wants an
            // object), so the hub's copy is the agent's bytes, never a re-encoding.
            (Obj::TaskPermission, "input") => {
                input = Some(map.next_value::<&'de RawValue>()?);
                continue;
            }
            (Obj::Send, "correlationId")
            | (Obj::Await, "replyTo" | "kind" | "reader")
            | (Obj::Status, "waitFor") => Want::OptText,
            (Obj::Await, "timeoutSecs")
            | (Obj::Delegate, "timeoutSecs" | "progressSecs" | "keepSecs")
            | (Obj::Status, "timeoutMs")
            | (Obj::Turn, "pid" | "start") => Want::OptSecs,
            (Obj::Delegate, "peer" | "permission") | (Obj::TaskAnswer, "request" | "message") => {
                Want::OptText
            }
            (Obj::Delegate, "allow") => Want::OptRules,
            (Obj::Delegate, "requires") => Want::OptTags,
            (Obj::Delegate, "maxCostUsd") => Want::OptAmount,
            (Obj::Delegate, "maxTokens") => Want::OptSecs,
            (Obj::Delegate, "allowUnmetered") => Want::OptFlag,
            (Obj::Await, "ack")
            | (Obj::Who, "offRoster")
            | (Obj::Hello, "warn")
            | (Obj::TaskPrompt, "interrupt") => Want::OptFlag,
            _ => Want::Text,
        };
        match map.next_value_seed(V(want))? {
            Val::Text(s) if matches!((obj, names[i]), (Obj::Send, "correlationId")) => {
                correlation = Some(Some(s))
            }
            Val::Null if matches!((obj, names[i]), (Obj::Send, "correlationId")) => {
                correlation = Some(None)
            }
            Val::Text(s) => texts[i] = Some(s),
            Val::Null => {}
            Val::Secs(s) => secs[i] = Some(s),
            Val::Flag(b) => flag = Some(b),
            Val::Amount(a) => amount = Some(a),
            Val::Rules(r) => allow = Some(r),
            Val::Texts(t) if matches!((obj, names[i]), (Obj::Delegate, "requires")) => {
                requires = Some(t)
            }
            Val::Line(_) | Val::Rule(_) | Val::Texts(_) => {
                return Err(de::Error::custom("internal: a field decoded to a part"))
            }
        }
    }
    let mut take = |i: usize| {
        texts[i]
            .take()
            .ok_or_else(|| de::Error::custom(format_args!("missing field `{}`", names[i])))
    };
    Ok(match obj {
        Obj::Hello => Payload::Hello(Hello {
            name: take(0)?,
            token: take(1)?,
            warn: flag,
        }),
        Obj::Send => {
            // serde's order for the first missing field: declaration order, body last.
            let (id, from, to, ts, kind) = (take(0)?, take(1)?, take(2)?, take(3)?, take(4)?);
            let body = body.ok_or_else(|| de::Error::custom("missing field `body`"))?;
            Payload::Send(RawEnvelope::from_parts(
                id,
                from,
                to,
                ts,
                kind,
                correlation,
                body,
            ))
        }
        Obj::Await => Payload::Await(AwaitRequest {
            reply_to: texts[0].take(),
            kind: texts[1].take(),
            timeout_secs: secs[2],
            ack: flag,
            reader: texts[4].take(),
        }),
        Obj::Ack => Payload::Ack(IdRequest { id: take(0)? }),
        Obj::Status => {
            let id = take(0)?;
            Payload::Status(StatusRequest {
                id,
                wait_for: texts[1].take(),
                timeout_ms: secs[2],
            })
        }
        Obj::Who => Payload::Who(WhoRequest { off_roster: flag }),
        Obj::Delegate => {
            let (agent, cwd, prompt) = (take(0)?, take(1)?, take(2)?);
            let req = DelegateRequest {
                agent,
                cwd,
                prompt,
                timeout_secs: secs[3],
                progress_secs: secs[4],
                peer: texts[5].take(),
                permission: None,
                allow,
                keep_secs: names
                    .iter()
                    .position(|n| *n == "keepSecs")
                    .and_then(|i| secs[i]),
                requires,
                max_cost_usd: amount.map(crate::wire::usage::Amount),
                max_tokens: names
                    .iter()
                    .position(|n| *n == "maxTokens")
                    .and_then(|i| secs[i]),
                allow_unmetered: flag,
            };
            Payload::Delegate(req, texts[6].take())
        }
        Obj::TaskStatus => Payload::TaskStatus(TaskRequest { task: take(0)? }),
        Obj::Tasks => Payload::Tasks,
        Obj::Cancel => Payload::Cancel(TaskRequest { task: take(0)? }),
        Obj::TaskAnswer => {
            let task = take(0)?;
            let option = take(2)?;
            Payload::TaskAnswer(TaskAnswerRequest {
                task,
                request: texts[1].take(),
                option,
                message: texts[3].take(),
            })
        }
        Obj::TaskPermission => {
            let (tool_name, tool_use_id) = (take(0)?, take(1)?);
            let input = input.ok_or_else(|| de::Error::custom("missing field `input`"))?;
            Payload::TaskPermission(TaskPermissionRequest::from_raw(
                tool_name,
                tool_use_id,
                input.get(),
            ))
        }
        Obj::Turn => Payload::Turn(TurnRequest {
            state: take(0)?,
            pid: secs[1],
            start: secs[2],
        }),
        Obj::Activity => Payload::Activity,
        Obj::TaskPrompt => {
            let (task, prompt) = (take(0)?, take(1)?);
            Payload::TaskPrompt(TaskPromptRequest {
                task,
                prompt,
                interrupt: flag,
            })
        }
        Obj::TaskClose => Payload::TaskClose(TaskRequest { task: take(0)? }),
        // Read by `line` through `wire::lease::PayloadSeed`; never a `payload` object.
        Obj::Lease(_) => {
            return Err(de::Error::custom(
                "internal: a lease payload read as another verb's",
            ))
        }
    })
}

/// `allow`'s rules. At most `MAX_ALLOW_RULES + 1` are kept and the rest read and dropped:
/// one more than the bound is enough for `wire::approval::check_allow` to refuse the count,
/// and a line of a million empty rules costs no more memory than its own bytes.
fn rules<'de, A: SeqAccess<'de>>(mut seq: A) -> Result<Vec<AllowRule>, A::Error> {
    let mut out = Vec::new();
    while out.len() <= MAX_ALLOW_RULES {
        match seq.next_element_seed(V(Want::Rule))? {
            None => return Ok(out),
            Some(Val::Rule(r)) => out.push(r),
            Some(_) => {
                return Err(de::Error::custom(
                    "internal: a rule decoded to something else",
                ))
            }
        }
    }
    while seq.next_element_seed(V(Want::Rule))?.is_some() {}
    Ok(out)
}

/// `requires`' tags: strings, at most one more than `wire::MAX_REQUIRES` kept
/// (enough for the book to refuse the count), the rest read and dropped, so a long list costs
/// no more memory than its own bytes.
fn tags<'de, A: SeqAccess<'de>>(mut seq: A) -> Result<Vec<String>, A::Error> {
    let mut out = Vec::new();
    while let Some(v) = seq.next_element_seed(V(Want::Text))? {
        match v {
            Val::Text(t) if out.len() <= super::task::MAX_REQUIRES => out.push(t),
            Val::Text(_) => {}
            _ => {
                return Err(de::Error::custom(
                    "internal: a tag decoded to something else",
                ))
            }
        }
    }
    Ok(out)
}

/// One rule: `{"kinds":[…],"under":…}`, each key at most once, `kinds` required.
fn rule<'de, A: MapAccess<'de>>(mut map: A) -> Result<AllowRule, A::Error> {
    let mut kinds: Option<Vec<String>> = None;
    let mut under: Option<Option<String>> = None;
    let key = || Key {
        tag: Some("allow"),
        names: RULE_KEYS,
    };
    while let Some(i) = map.next_key_seed(key())? {
        let dup = match i {
            0 => kinds.is_some(),
            _ => under.is_some(),
        };
        if dup {
            return Err(de::Error::custom(format_args!(
                "duplicate field `{}`",
                RULE_KEYS[i]
            )));
        }
        let want = if i == 0 { Want::Kinds } else { Want::OptText };
        match (i, map.next_value_seed(V(want))?) {
            (0, Val::Texts(k)) => kinds = Some(k),
            (_, Val::Text(u)) => under = Some(Some(u)),
            (_, Val::Null) => under = Some(None),
            _ => {
                return Err(de::Error::custom(
                    "internal: a rule field decoded to something else",
                ))
            }
        }
    }
    Ok(AllowRule {
        kinds: kinds.ok_or_else(|| de::Error::custom("missing field `kinds`"))?,
        under: under.flatten(),
    })
}

/// A rule's `kinds`: strings, at most one more than there are tool kinds kept (a list longer
/// than that names one twice or one that does not exist, and is refused for it).
fn kinds<'de, A: SeqAccess<'de>>(mut seq: A) -> Result<Vec<String>, A::Error> {
    let mut out = Vec::new();
    while let Some(v) = seq.next_element_seed(V(Want::Text))? {
        match v {
            Val::Text(k) if out.len() <= TOOL_KINDS.len() => out.push(k),
            Val::Text(_) => {}
            _ => {
                return Err(de::Error::custom(
                    "internal: a kind decoded to something else",
                ))
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "Tok3n-9f2c";

    fn error_of(line: &str) -> String {
        match client_line(line) {
            Ok(_) => panic!("{line} decoded"),
            Err(e) => {
                let mut m = e.to_string();
                if let Some(at) = m.find(" at line ") {
                    m.truncate(at);
                }
                m
            }
        }
    }

    /// Every shape of a wrong value, an unknown key or an unknown tag, each carrying the
    /// secret where the value, key or tag goes: the error names none of them.
    #[test]
    fn no_error_quotes_the_line() {
        let s = SECRET;
        let cases = [
            format!(r#"{{"hello":"{s}"}}"#),
            format!(r#"{{"hello":["mneme","{s}"]}}"#),
            format!(r#"{{"hello":{{"name":"mneme","token":["{s}"]}}}}"#),
            format!(r#"{{"hello":{{"name":"mneme","token":{{"{s}":1}}}}}}"#),
            format!(r#"{{"hello":{{"name":"mneme","{s}":"x"}}}}"#),
            format!(r#"{{"hello":{{"name":{{"t":"{s}"}},"token":"x"}}}}"#),
            format!(r#"{{"{s}":{{}}}}"#),
            format!(r#"{{"hello":{{"name":"a","token":"b"}},"{s}":1}}"#),
            format!(r#""{s}""#),
            format!(r#"["{s}"]"#),
            format!(r#"{{"await":{{"timeoutSecs":"{s}"}}}}"#),
            format!(r#"{{"await":{{"ack":"{s}"}}}}"#),
            format!(r#"{{"await":{{"kind":["{s}"]}}}}"#),
            format!(r#"{{"ack":"{s}"}}"#),
            format!(r#"{{"ack":{{"id":["{s}"]}}}}"#),
            format!(r#"{{"status":{{"id":{{"a":"{s}"}}}}}}"#),
            format!(r#"{{"who":{{"{s}":1}}}}"#),
            format!(
                r#"{{"send":{{"id":"e","from":"a","to":"b","ts":"{s}x","kind":1,"body":{{}}}}}}"#
            ),
            format!(
                r#"{{"send":{{"id":"e","from":"a","to":"b","ts":"t","kind":"k","correlationId":["{s}"],"body":{{}}}}}}"#
            ),
            format!(
                r#"{{"send":{{"id":"e","from":"a","to":"b","ts":"t","kind":"k","body":{{"m":"{s}"}},"{s}":2}}}}"#
            ),
            format!(
                r#"{{"send":{{"id":"e","from":"a","to":"b","ts":"t","kind":"k","body":{{"m":"{s}"}}}}}}x{s}"#
            ),
            format!(
                r#"{{"send":{{"id":"e","from":"a","to":"b","ts":"t","kind":"k","body":{{"m":"{s}",}}}}}}"#
            ),
        ];
        for line in &cases {
            let err = error_of(line);
            assert!(!err.contains(SECRET), "{line}\n  -> {err}");
            assert!(!err.contains("Tok3n"), "{line}\n  -> {err}");
        }
        // Numbers are values too.
        let err = error_of(r#"{"await":{"timeoutSecs":-987654321}}"#);
        assert!(!err.contains("987654321"), "{err}");
        let err = error_of(r#"{"hello":{"name":"a","token":987654321}}"#);
        assert!(!err.contains("987654321"), "{err}");
        let err = error_of(r#"{"await":{"timeoutSecs":98765.4321}}"#);
        assert!(!err.contains("98765"), "{err}");
    }

    #[test]
    fn errors_name_the_key_the_kind_and_what_was_expected() {
        let cases = [
            (
                r#"{"hello":"x"}"#,
                "invalid type: string, expected an object",
            ),
            (
                r#"{"hello":null}"#,
                "invalid type: null, expected an object",
            ),
            (
                r#"{"hello":["a","b"]}"#,
                "invalid type: sequence, expected an object",
            ),
            (
                r#"{"hello":{"name":"a","token":5}}"#,
                "invalid type: integer, expected a string",
            ),
            (
                r#"{"hello":{"name":"a","token":"t","x":1}}"#,
                "unknown field in `hello`, expected one of `name`, `token`, `warn`",
            ),
            (
                r#"{"hello":{"name":"a","token":"t","warn":"yes"}}"#,
                "invalid type: string, expected a boolean",
            ),
            (r#"{"hello":{"name":"a"}}"#, "missing field `token`"),
            (
                r#"{"hello":{"name":"a","name":"b","token":"t"}}"#,
                "duplicate field `name`",
            ),
            (
                r#"{"ping":{}}"#,
                "unknown tag, expected one of `hello`, `send`, `await`, `ack`, `status`, `who`, `delegate`, `task_status`, `tasks`, `cancel`, `task_answer`, `task_permission`, `turn`, `activity`, `task_prompt`, `task_close`, `lease_claim`, `lease_release`, `lease_renew`, `lease_list`, `lease_break`, `lease_check`",
            ),
            ("{}", "a line holds one tag, found none"),
            (
                r#"{"who":{},"who":{}}"#,
                "a line holds one tag, found more than one",
            ),
            (
                "42",
                "invalid type: integer, expected an object with one tag",
            ),
            (
                r#"{"await":{"timeoutSecs":-1}}"#,
                "invalid value: negative integer, expected u64",
            ),
            (
                r#"{"await":{"timeoutSecs":1.0}}"#,
                "invalid type: floating point, expected u64",
            ),
            (
                r#"{"await":{"ack":"true"}}"#,
                "invalid type: string, expected a boolean",
            ),
            (
                r#"{"who":{"x":1}}"#,
                "unknown field in `who`, expected `offRoster`",
            ),
            (
                r#"{"who":{"offRoster":1}}"#,
                "invalid type: integer, expected a boolean",
            ),
            (
                r#"{"tasks":{"x":1}}"#,
                "unknown field in `tasks`, which has no fields",
            ),
            ("", "EOF while parsing a value"),
            ("hello", "expected value"),
        ];
        for (line, want) in cases {
            assert_eq!(error_of(line), want, "{line}");
        }
    }

    #[test]
    fn good_lines_decode_with_every_field() {
        let Payload::Send(env) = client_line(
            r#"{"send":{"body":{"a": [1]},"kind":"k","ts":"t","to":"b","from":"a","id":"e","correlationId":null}}"#,
        )
        .unwrap() else {
            panic!("a send")
        };
        assert!(env.has_correlation_key());
        let Payload::Await(a) =
            client_line(r#"{"await":{"replyTo":"r","kind":null,"timeoutSecs":5,"ack":true}}"#)
                .unwrap()
        else {
            panic!("an await")
        };
        assert_eq!(
            a,
            AwaitRequest {
                reply_to: Some("r".into()),
                kind: None,
                timeout_secs: Some(5),
                ack: Some(true),
                reader: None,
            }
        );
        assert!(matches!(
            client_line(r#"{"who":{}}"#).unwrap(),
            Payload::Who(WhoRequest { off_roster: None })
        ));
        assert!(matches!(
            client_line(r#"{"who":{"offRoster":true}}"#).unwrap(),
            Payload::Who(WhoRequest {
                off_roster: Some(true)
            })
        ));
        let Payload::Hello(h) = client_line(r#"{"hello":{"token":"t\u0041","name":"n"}}"#).unwrap()
        else {
            panic!("a hello")
        };
        assert_eq!((h.name.as_str(), h.token.as_str()), ("n", "tA"));
    }
}
