//! The hub wire protocol (SPEC §2): the line types both binaries share, their decoding with the
//! exact error texts the hub sends, and their compact encoding.
//!
//! Owns: `ClientLine` (client → hub) and `HubLine` (hub → client). Refuses: any IO. The server
//! and the client both go through this module, so they cannot disagree about a line.

pub mod activity;
pub mod approval;
mod decode;
pub mod envelope;
pub mod envelope_text;
mod fast;
pub mod json_text;
pub mod lease;
pub mod lines;
pub mod receipt;
pub mod task;
pub mod usage;

use serde::de::{IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::value::RawValue;
use std::fmt;

pub use activity::{Activity, EnvelopeMeta, TaskMeta};
pub use approval::{
    AllowRule, Permission, RequestRecord, TaskAnswerReply, TaskAnswerRequest, TaskPermissionReply,
    TaskPermissionRequest, TaskRequestBody,
};
pub use envelope::{Envelope, EnvelopeError};
/// The decoder's fast path checked against its serde path on one line (fuzz target
/// `client_line`, docs/fuzzing.md); not an interface, so only built with the `fuzzing` feature
/// (the fuzz crate and the integration tests that replay its seeds turn it on).
#[cfg(feature = "fuzzing")]
pub use fast::check as fast_decode_check;
pub use lines::{LineBuffer, LineTooLong, HELLO_MAX_LINE_BYTES};
pub use receipt::{Reader, StatusRequest, WaitEnd, WaitFor};
pub use task::{
    DelegateRequest, DelegatedReply, PlacementReply, PlanSummary, TaskList, TaskProgress,
    TaskPromptReply, TaskPromptRequest, TaskRecord, TaskRequest, TaskSession, TaskStateReply,
    TaskTurn, MAX_REQUIRES,
};

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
    /// An `ack` or `status` line named an empty id.
    EmptyId(&'static str),
    /// A `task_status` or `cancel` line named an empty task.
    EmptyTask(&'static str),
    /// A field's value is off its fixed list (an await's `reader`, a status's `waitFor`) or
    /// comes without the field it needs: the tag and what is allowed, never the value.
    BadField(&'static str, String),
    /// A `turn` line broke a rule of its own (SPEC §14): what to fix, never the value.
    Turn(&'static str),
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WireError::NotUtf8 => write!(f, "line is not valid UTF-8"),
            WireError::Malformed(why) => write!(f, "malformed line: {why}"),
            WireError::Envelope(e) => write!(f, "invalid envelope: {e}"),
            WireError::EmptyFilter(key) => write!(f, "invalid await: {key} must not be empty"),
            WireError::EmptyId(tag) => write!(f, "invalid {tag}: id must not be empty"),
            WireError::EmptyTask(tag) => write!(f, "invalid {tag}: task must not be empty"),
            WireError::BadField(tag, why) => write!(f, "invalid {tag}: {why}"),
            WireError::Turn(why) => write!(f, "invalid turn: {why}"),
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
    /// Our extension (SPEC §4.1, §5.1): `true` asks the hub to add a `warning` to `accepted`
    /// when a send's `to` names nobody it knows. Never sent when absent, so a plain hello is
    /// the 004 line byte for byte; a 004 hub refuses the key (SPEC §10.3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warn: Option<bool>,
}

impl Hello {
    /// The 004 hello: a name and a token, no extension key.
    pub fn new(name: impl Into<String>, token: impl Into<String>) -> Hello {
        Hello {
            name: name.into(),
            token: token.into(),
            warn: None,
        }
    }
}

impl fmt::Debug for Hello {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Hello")
            .field("name", &self.name)
            .field("token", &"<redacted>")
            .field("warn", &self.warn)
            .finish()
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
    /// Our extension (SPEC §12.2): `true` asks for acknowledged delivery. Never sent when
    /// absent, so a plain await is the 004 line byte for byte.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ack: Option<bool>,
    /// Our extension (SPEC §12.4 "Readers"): what kind of client reads, one of
    /// `Reader::DECLARABLE`'s names; `status` reports it. Never sent when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reader: Option<String>,
}

/// `{"ack":{"id":…}}` (SPEC §12.2) and `{"status":{"id":…}}` (SPEC §12.4).
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct IdRequest {
    pub id: String,
}

/// One roster agent as the `who` verb reports it (SPEC §14).
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct AgentPresence {
    pub name: String,
    /// What a sender can act on (SPEC §14): `waiting`, `busy`, `idle`, `gone` or `unknown`.
    /// Absent from an older hub's answer, which is read as `unknown`.
    #[serde(default = "unknown_state")]
    pub state: String,
    /// When the agent entered `state` (RFC 3339, UTC), null when the hub does not know.
    #[serde(default)]
    pub since: Option<String>,
    /// What the hub knows the state from: `await`, `hook`, `acp` or `process`; null for
    /// `unknown`.
    #[serde(default)]
    pub source: Option<String>,
    /// The filters of each parked await, oldest first.
    pub parked: Vec<ParkedFilter>,
    pub queued: u64,
    /// When the agent last authenticated (RFC 3339, UTC), null if never since the hub started.
    #[serde(rename = "lastSeen")]
    pub last_seen: Option<String>,
    /// When an envelope was last delivered to it, null if never since the hub started.
    #[serde(rename = "lastDelivery")]
    pub last_delivery: Option<String>,
}

/// The `state` of an agent the hub knows nothing about (SPEC §14).
pub const UNKNOWN_STATE: &str = "unknown";

fn unknown_state() -> String {
    UNKNOWN_STATE.to_owned()
}

/// `{"turn":{"state":…,"pid":…,"start":…}}` (SPEC §14): the caller's agent process started a
/// turn (`busy`), ended one (`idle`) or its session ended (`gone`). `pid` is the agent's
/// process, which the hub then watches (never signals); `start` is that process's start
/// time as the OS counts it (Linux: `/proc/PID/stat` field 22), so a reused pid is not taken
/// for the agent.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct TurnRequest {
    pub state: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start: Option<u64>,
}

/// The turn states a `turn` line may report.
pub const TURN_STATES: [&str; 3] = ["busy", "idle", "gone"];

/// The answer to `turn`: the caller's state as `who` now shows it (a parked await still
/// makes it `waiting`).
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct TurnReply {
    pub state: String,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ParkedFilter {
    #[serde(rename = "replyTo")]
    pub reply_to: Option<String>,
    pub kind: Option<String>,
}

/// The answer to `who`: every roster name, sorted, then (when the request asked for it) the
/// queues of names nobody holds.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Presence {
    pub agents: Vec<AgentPresence>,
    /// Our extension (SPEC §14 "Mail nobody holds"): only in the answer to a `who` that asked
    /// with `offRoster`, so a client that did not ask (every client before it) reads the
    /// reply it always read; the asker's view of it follows §14 "Visibility".
    #[serde(rename = "offRoster", default, skip_serializing_if = "Option::is_none")]
    pub off_roster: Option<Vec<OffRosterQueue>>,
}

/// `{"who":{}}` or `{"who":{"offRoster":true}}` (SPEC §14): whether the asker wants the queues
/// of names nobody holds too. Never sent when absent, so a plain `who` is the line it was.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct WhoRequest {
    #[serde(rename = "offRoster", default, skip_serializing_if = "Option::is_none")]
    pub off_roster: Option<bool>,
}

impl WhoRequest {
    /// Whether the answer carries `offRoster`.
    pub fn wants_off_roster(&self) -> bool {
        self.off_roster == Some(true)
    }
}

/// A queue whose name nobody holds (SPEC §14 "Mail nobody holds"): not a roster name, not a
/// live task identity, not an address a forwarding peer takes. Its mail waits for a reader
/// that cannot come until an operator adds the name (or the sender resends elsewhere).
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct OffRosterQueue {
    pub name: String,
    /// Envelopes queued under the name: all of them for an operator, the asker's own for
    /// anyone else.
    pub queued: u64,
    /// One of `OFF_ROSTER_REASONS`.
    pub reason: String,
}

/// Why nobody holds a name (`OffRosterQueue::reason`): not on the roster; `name@peer` where
/// `peer` is no peer this hub forwards to (SPEC §15); a task identity whose task has ended.
pub const OFF_ROSTER_NO_SUCH_AGENT: &str = "no such agent";
pub const OFF_ROSTER_UNKNOWN_PEER: &str = "unknown peer";
pub const OFF_ROSTER_TASK_ENDED: &str = "task ended";
pub const OFF_ROSTER_REASONS: [&str; 3] = [
    OFF_ROSTER_NO_SUCH_AGENT,
    OFF_ROSTER_UNKNOWN_PEER,
    OFF_ROSTER_TASK_ENDED,
];

#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct EmptyPayload {}

/// Where an envelope is, as the hub answers a `status` verb (SPEC §12.4).
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct EnvelopeStatus {
    pub id: String,
    /// `queued`, `delivered`, `acked`, `forwarded`, `bounced`, `lost` or `unknown`.
    pub state: String,
    /// Which kind of reader the envelope was handed to (`Reader`'s names; `unknown` for one
    /// that declared none): with `delivered`, `acked`, and a `bounced`/`lost` lost at its reader.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reader: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
    /// 1-based place in the recipient's queue, when queued.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub position: Option<u64>,
    /// When the envelope reached its state (RFC 3339, UTC).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<String>,
    /// Deliveries that were handed out and came back unacknowledged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempts: Option<u32>,
    /// Why a `bounced` or `lost` envelope is gone, when the hub knows (SPEC §12.4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Only in the answer to a status that waited (`waitFor`): `reached`, `timeout` or
    /// `ended` (`WaitEnd`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait: Option<String>,
}

/// A line a client sends, already validated.
#[derive(Debug)]
pub enum ClientLine {
    Hello(Hello),
    Send(Envelope),
    Await(AwaitRequest),
    /// Acknowledges the envelope just delivered on this connection (ack mode only).
    Ack(IdRequest),
    /// A status query, possibly waiting for a stage (SPEC §12.4).
    Status(StatusRequest),
    /// Presence (SPEC §14): who is on the roster, parked, queued, last seen.
    Who(WhoRequest),
    /// Delegated work (docs/delegation.md): run a task on an agent.
    Delegate(DelegateRequest),
    TaskStatus(TaskRequest),
    /// The asker's tasks.
    Tasks,
    Cancel(TaskRequest),
    /// Answers a delegated task's open request (issue 37, SPEC §16 "Requests and answers").
    TaskAnswer(TaskAnswerRequest),
    /// A headless task's permission prompt (issue 37 design §6, SPEC §16.1): only a task
    /// identity sends it, about its own task, and the one reply is the decision.
    TaskPermission(TaskPermissionRequest),
    /// Liveness (SPEC §14): the caller's agent process began or ended a turn, or exited.
    Turn(TurnRequest),
    /// What the hub is doing now (SPEC §14.1): recent envelopes' metadata, unfinished tasks.
    Activity,
    /// A follow-up turn for a task's kept session (issue 38 design §2, SPEC §16).
    TaskPrompt(TaskPromptRequest),
    /// Ends a task's kept session now (issue 38 design §2).
    TaskClose(TaskRequest),
    /// A lease verb (lease design §0, SPEC §17): claim, release, renew, list, break, check.
    Lease(lease::LeaseRequest),
}

impl ClientLine {
    /// Decodes one line (without its `\n`; a trailing `\r` is tolerated as JSON whitespace).
    /// An error's text never quotes the line (`wire::decode`), so it may be logged.
    pub fn decode(line: &[u8]) -> Result<ClientLine, WireError> {
        let text = std::str::from_utf8(line).map_err(|_| WireError::NotUtf8)?;
        let raw = decode::client_line(text).map_err(|e| malformed(&e))?;
        match raw {
            decode::Payload::Hello(h) => Ok(ClientLine::Hello(h)),
            decode::Payload::Send(raw) => {
                let env = Envelope::from_raw(raw).map_err(WireError::Envelope)?;
                env.check_caps().map_err(WireError::Envelope)?;
                Ok(ClientLine::Send(env))
            }
            decode::Payload::Await(a) => {
                if a.reply_to.as_deref() == Some("") {
                    return Err(WireError::EmptyFilter("replyTo"));
                }
                if a.kind.as_deref() == Some("") {
                    return Err(WireError::EmptyFilter("kind"));
                }
                check_filter("replyTo", a.reply_to.as_deref(), envelope::MAX_ID_BYTES)?;
                check_filter("kind", a.kind.as_deref(), envelope::MAX_KIND_BYTES)?;
                if a.reader
                    .as_deref()
                    .is_some_and(|r| Reader::declared(r).is_none())
                {
                    return Err(WireError::BadField(
                        "await",
                        format!("reader must be one of {}", Reader::list()),
                    ));
                }
                Ok(ClientLine::Await(a))
            }
            decode::Payload::Ack(r) if r.id.is_empty() => Err(WireError::EmptyId("ack")),
            decode::Payload::Status(r) if r.id.is_empty() => Err(WireError::EmptyId("status")),
            // No id over the cap is accepted now, so none can be asked about; a parked status
            // wait keeps its id. (An `ack` is not capped: it names the envelope just delivered,
            // which a store may hold from before the caps, and is kept nowhere.)
            decode::Payload::Status(r) if r.id.len() > envelope::MAX_ID_BYTES => {
                Err(WireError::BadField(
                    "status",
                    format!("id is over {} bytes", envelope::MAX_ID_BYTES),
                ))
            }
            decode::Payload::Ack(r) => Ok(ClientLine::Ack(r)),
            decode::Payload::Status(r) => {
                if r.wait_for
                    .as_deref()
                    .is_some_and(|w| WaitFor::parse(w).is_none())
                {
                    return Err(WireError::BadField(
                        "status",
                        format!("waitFor must be one of {}", WaitFor::list()),
                    ));
                }
                if r.timeout_ms.is_some() && r.wait_for.is_none() {
                    return Err(WireError::BadField(
                        "status",
                        "timeoutMs needs waitFor".to_owned(),
                    ));
                }
                Ok(ClientLine::Status(r))
            }
            decode::Payload::Who(r) => Ok(ClientLine::Who(r)),
            decode::Payload::Delegate(mut d, permission) => {
                if let Some(word) = permission {
                    d.permission = Some(Permission::parse(&word).ok_or_else(|| {
                        WireError::BadField(
                            "delegate",
                            format!("permission must be one of {}", Permission::list()),
                        )
                    })?);
                }
                if let Some(rules) = &d.allow {
                    approval::check_allow(rules)
                        .map_err(|e| WireError::BadField("delegate", e.to_string()))?;
                }
                Ok(ClientLine::Delegate(d))
            }
            decode::Payload::TaskStatus(r) if r.task.is_empty() => {
                Err(WireError::EmptyTask("task_status"))
            }
            decode::Payload::Cancel(r) if r.task.is_empty() => Err(WireError::EmptyTask("cancel")),
            decode::Payload::TaskStatus(r) => Ok(ClientLine::TaskStatus(r)),
            decode::Payload::Tasks => Ok(ClientLine::Tasks),
            decode::Payload::Cancel(r) => Ok(ClientLine::Cancel(r)),
            decode::Payload::TaskAnswer(a) => match a.check() {
                Ok(()) => Ok(ClientLine::TaskAnswer(a)),
                Err(approval::AnswerError::EmptyTask) => Err(WireError::EmptyTask("task_answer")),
                Err(e) => Err(WireError::BadField("task_answer", e.to_string())),
            },
            decode::Payload::TaskPermission(p) => match p.check() {
                Ok(()) => Ok(ClientLine::TaskPermission(p)),
                Err(e) => Err(WireError::BadField("task_permission", e.to_string())),
            },
            decode::Payload::Turn(t) => {
                if !TURN_STATES.contains(&t.state.as_str()) {
                    return Err(WireError::Turn("state must be busy, idle or gone"));
                }
                // pid 0 names no process and 1 is init, never an agent; above u32 no OS has.
                if t.pid.is_some_and(|p| p <= 1 || p > u64::from(u32::MAX)) {
                    return Err(WireError::Turn("pid must be a process id above 1"));
                }
                if t.start.is_some() && t.pid.is_none() {
                    return Err(WireError::Turn("start needs pid"));
                }
                Ok(ClientLine::Turn(t))
            }
            decode::Payload::Activity => Ok(ClientLine::Activity),
            decode::Payload::TaskPrompt(r) if r.task.is_empty() => {
                Err(WireError::EmptyTask("task_prompt"))
            }
            decode::Payload::TaskPrompt(r) => Ok(ClientLine::TaskPrompt(r)),
            decode::Payload::TaskClose(r) if r.task.is_empty() => {
                Err(WireError::EmptyTask("task_close"))
            }
            decode::Payload::TaskClose(r) => Ok(ClientLine::TaskClose(r)),
            decode::Payload::Lease(r) => match r.check() {
                Ok(()) => Ok(ClientLine::Lease(r)),
                Err(e) => Err(WireError::BadField(e.tag, e.why)),
            },
        }
    }

    /// Encodes the line compactly with its trailing `\n`.
    pub fn encode(&self) -> String {
        let mut s = match self {
            ClientLine::Hello(h) => format!("{{\"hello\":{}}}", to_json(h)),
            ClientLine::Send(e) => format!("{{\"send\":{}}}", e.to_json()),
            ClientLine::Await(a) => format!("{{\"await\":{}}}", to_json(a)),
            ClientLine::Ack(r) => format!("{{\"ack\":{}}}", to_json(r)),
            ClientLine::Status(r) => format!("{{\"status\":{}}}", to_json(r)),
            ClientLine::Who(r) => format!("{{\"who\":{}}}", to_json(r)),
            ClientLine::Delegate(d) => format!("{{\"delegate\":{}}}", to_json(d)),
            ClientLine::TaskStatus(r) => format!("{{\"task_status\":{}}}", to_json(r)),
            ClientLine::Tasks => "{\"tasks\":{}}".to_owned(),
            ClientLine::Cancel(r) => format!("{{\"cancel\":{}}}", to_json(r)),
            ClientLine::TaskAnswer(a) => format!("{{\"task_answer\":{}}}", to_json(a)),
            ClientLine::TaskPermission(p) => format!("{{\"task_permission\":{}}}", p.to_json()),
            ClientLine::Turn(t) => format!("{{\"turn\":{}}}", to_json(t)),
            ClientLine::Activity => "{\"activity\":{}}".to_owned(),
            ClientLine::TaskPrompt(r) => format!("{{\"task_prompt\":{}}}", to_json(r)),
            ClientLine::TaskClose(r) => format!("{{\"task_close\":{}}}", to_json(r)),
            ClientLine::Lease(r) => format!("{{\"{}\":{}}}", r.tag(), r.payload_json()),
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
            ClientLine::Ack(_) => "ack",
            ClientLine::Status(_) => "status",
            ClientLine::Who(_) => "who",
            ClientLine::Delegate(_) => "delegate",
            ClientLine::TaskStatus(_) => "task_status",
            ClientLine::Tasks => "tasks",
            ClientLine::Cancel(_) => "cancel",
            ClientLine::TaskAnswer(_) => "task_answer",
            ClientLine::TaskPermission(_) => "task_permission",
            ClientLine::Turn(_) => "turn",
            ClientLine::Activity => "activity",
            ClientLine::TaskPrompt(_) => "task_prompt",
            ClientLine::TaskClose(_) => "task_close",
            ClientLine::Lease(r) => r.tag(),
        }
    }
}

/// A line the hub sends. `Envelope` carries the envelope's JSON text exactly as the hub holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HubLine {
    Ok,
    Error {
        message: String,
    },
    Accepted {
        id: String,
        /// Our extension (SPEC §5.1): only to a hello that asked (`Hello::warn`), and only when
        /// `to` names no roster agent, task or relay peer; the envelope is queued all the same.
        warning: Option<String>,
    },
    Envelope(String),
    Timeout,
    /// Our extension: the ack of an ack-mode delivery is durable (SPEC §12.2).
    Acked {
        id: String,
    },
    /// Our extension: the answer to `status` (SPEC §12.4).
    Status(EnvelopeStatus),
    /// Our extension: the answer to `who` (SPEC §14).
    Who(Presence),
    /// Our extension (docs/delegation.md): the task is accepted, after its commit.
    Delegated(DelegatedReply),
    /// Boxed: a record is several times the size of every other hub line.
    TaskStatus(Box<TaskRecord>),
    Tasks(TaskList),
    /// The answer to `cancel`: the task's state after the request.
    Cancel(TaskStateReply),
    /// The answer to `task_answer`, after its commit (issue 37).
    TaskAnswer(TaskAnswerReply),
    /// The decision on a headless task's permission prompt (issue 37 design §6).
    TaskPermission(TaskPermissionReply),
    /// Our extension: the answer to `turn` (SPEC §14).
    Turn(TurnReply),
    /// The answer to `activity` (SPEC §14.1).
    Activity(Activity),
    /// The answer to `task_prompt`, after its commit (issue 38).
    TaskPrompt(TaskPromptReply),
    /// The answer to `task_close`: the task's final state, after its commit (issue 38).
    TaskClose(TaskStateReply),
    /// The answer to a lease verb (lease design §0, SPEC §17).
    Lease(lease::LeaseReply),
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
struct AcceptedPayload {
    id: String,
    #[serde(default)]
    warning: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
enum RawHubLine<'a> {
    #[serde(rename = "ok", deserialize_with = "object")]
    Ok(Empty),
    #[serde(rename = "error", deserialize_with = "object")]
    Error(MessagePayload),
    #[serde(rename = "accepted", deserialize_with = "object")]
    Accepted(AcceptedPayload),
    #[serde(rename = "envelope", borrow)]
    Envelope(&'a RawValue),
    #[serde(rename = "timeout", deserialize_with = "object")]
    Timeout(Empty),
    #[serde(rename = "acked", deserialize_with = "object")]
    Acked(IdPayload),
    #[serde(rename = "status", deserialize_with = "object")]
    Status(EnvelopeStatus),
    #[serde(rename = "who", deserialize_with = "object")]
    Who(Presence),
    #[serde(rename = "delegated", deserialize_with = "object")]
    Delegated(DelegatedReply),
    /// Boxed: a record (with its turns, issue 38) is several times every other line.
    #[serde(rename = "task_status", deserialize_with = "object")]
    TaskStatus(Box<TaskRecord>),
    #[serde(rename = "tasks", deserialize_with = "object")]
    Tasks(TaskList),
    #[serde(rename = "cancel", deserialize_with = "object")]
    Cancel(TaskStateReply),
    #[serde(rename = "task_answer", deserialize_with = "object")]
    TaskAnswer(TaskAnswerReply),
    #[serde(rename = "task_permission", deserialize_with = "object")]
    TaskPermission(TaskPermissionReply),
    #[serde(rename = "turn", deserialize_with = "object")]
    Turn(TurnReply),
    #[serde(rename = "activity", deserialize_with = "object")]
    Activity(Activity),
    #[serde(rename = "task_prompt", deserialize_with = "object")]
    TaskPrompt(TaskPromptReply),
    #[serde(rename = "task_close", deserialize_with = "object")]
    TaskClose(TaskStateReply),
    // The lease replies (`wire::lease::LeaseReply::decode` reads each payload).
    #[serde(rename = "lease_claim", borrow)]
    LeaseClaim(&'a RawValue),
    #[serde(rename = "lease_release", borrow)]
    LeaseRelease(&'a RawValue),
    #[serde(rename = "lease_renew", borrow)]
    LeaseRenew(&'a RawValue),
    #[serde(rename = "lease_list", borrow)]
    LeaseList(&'a RawValue),
    #[serde(rename = "lease_break", borrow)]
    LeaseBreak(&'a RawValue),
    #[serde(rename = "lease_check", borrow)]
    LeaseCheck(&'a RawValue),
}

impl HubLine {
    /// The tag, for messages.
    pub fn tag(&self) -> &'static str {
        match self {
            HubLine::Ok => "ok",
            HubLine::Error { .. } => "error",
            HubLine::Accepted { .. } => "accepted",
            HubLine::Envelope(_) => "envelope",
            HubLine::Timeout => "timeout",
            HubLine::Acked { .. } => "acked",
            HubLine::Status(_) => "status",
            HubLine::Who(_) => "who",
            HubLine::Delegated(_) => "delegated",
            HubLine::TaskStatus(_) => "task_status",
            HubLine::Tasks(_) => "tasks",
            HubLine::Cancel(_) => "cancel",
            HubLine::TaskAnswer(_) => "task_answer",
            HubLine::TaskPermission(_) => "task_permission",
            HubLine::Turn(_) => "turn",
            HubLine::Activity(_) => "activity",
            HubLine::TaskPrompt(_) => "task_prompt",
            HubLine::TaskClose(_) => "task_close",
            HubLine::Lease(r) => r.tag(),
        }
    }

    /// Decodes a hub line (client side). An `envelope` must itself be a valid envelope whose
    /// `correlationId` key is present, as every hub sends it.
    pub fn decode(line: &[u8]) -> Result<HubLine, WireError> {
        let text = std::str::from_utf8(line).map_err(|_| WireError::NotUtf8)?;
        let raw: RawHubLine<'_> = serde_json::from_str(text).map_err(|e| malformed(&e))?;
        Ok(match raw {
            RawHubLine::Ok(Empty {}) => HubLine::Ok,
            RawHubLine::Error(m) => HubLine::Error { message: m.message },
            RawHubLine::Accepted(a) => HubLine::Accepted {
                id: a.id,
                warning: a.warning,
            },
            RawHubLine::Timeout(Empty {}) => HubLine::Timeout,
            RawHubLine::Acked(a) => HubLine::Acked { id: a.id },
            RawHubLine::Status(st) => HubLine::Status(st),
            RawHubLine::Who(p) => HubLine::Who(p),
            RawHubLine::Delegated(r) => HubLine::Delegated(r),
            RawHubLine::TaskStatus(r) => HubLine::TaskStatus(r),
            RawHubLine::Tasks(l) => HubLine::Tasks(l),
            RawHubLine::Cancel(r) => HubLine::Cancel(r),
            RawHubLine::TaskAnswer(r) => HubLine::TaskAnswer(r),
            RawHubLine::TaskPermission(r) => HubLine::TaskPermission(r),
            RawHubLine::Turn(r) => HubLine::Turn(r),
            RawHubLine::Activity(a) => HubLine::Activity(a),
            RawHubLine::TaskPrompt(r) => HubLine::TaskPrompt(r),
            RawHubLine::TaskClose(r) => HubLine::TaskClose(r),
            RawHubLine::LeaseClaim(raw) => lease_line("lease_claim", raw)?,
            RawHubLine::LeaseRelease(raw) => lease_line("lease_release", raw)?,
            RawHubLine::LeaseRenew(raw) => lease_line("lease_renew", raw)?,
            RawHubLine::LeaseList(raw) => lease_line("lease_list", raw)?,
            RawHubLine::LeaseBreak(raw) => lease_line("lease_break", raw)?,
            RawHubLine::LeaseCheck(raw) => lease_line("lease_check", raw)?,
            RawHubLine::Envelope(raw) => {
                let mut de = serde_json::Deserializer::from_str(raw.get());
                let shape: envelope::RawEnvelope<'_> =
                    object(&mut de).map_err(|e| malformed(&e))?;
                if !shape.has_correlation_key() {
                    return Err(WireError::Malformed(
                        "envelope without correlationId".into(),
                    ));
                }
                Envelope::from_raw(shape).map_err(WireError::Envelope)?;
                HubLine::Envelope(raw.get().to_owned())
            }
        })
    }

    /// Encodes compactly with the trailing `\n`.
    pub fn encode(&self) -> String {
        let mut s = match self {
            // Every connection's first reply: its newline in the one allocation.
            HubLine::Ok => return "{\"ok\":{}}\n".to_owned(),
            HubLine::Error { message } => {
                let mut s = String::with_capacity(message.len() + 28);
                s.push_str("{\"error\":{\"message\":");
                json_text::push_str(&mut s, message);
                s.push_str("}}");
                s
            }
            // The two lines of every send and delivery, without `format!` (issue 13).
            HubLine::Accepted { id, warning } => {
                let extra = warning.as_ref().map_or(0, |w| w.len() + 13);
                let mut s = String::with_capacity(id.len() + 24 + extra);
                s.push_str("{\"accepted\":{\"id\":");
                json_text::push_str(&mut s, id);
                if let Some(w) = warning {
                    s.push_str(",\"warning\":");
                    json_text::push_str(&mut s, w);
                }
                s.push_str("}}");
                s
            }
            HubLine::Envelope(text) => return envelope_line(text),
            HubLine::Timeout => return "{\"timeout\":{}}\n".to_owned(),
            HubLine::Acked { id } => format!("{{\"acked\":{{\"id\":{}}}}}", to_json(id)),
            HubLine::Status(st) => format!("{{\"status\":{}}}", to_json(st)),
            HubLine::Who(p) => format!("{{\"who\":{}}}", to_json(p)),
            HubLine::Delegated(r) => format!("{{\"delegated\":{}}}", to_json(r)),
            HubLine::TaskStatus(r) => format!("{{\"task_status\":{}}}", to_json(r)),
            HubLine::Tasks(l) => format!("{{\"tasks\":{}}}", to_json(l)),
            HubLine::Cancel(r) => format!("{{\"cancel\":{}}}", to_json(r)),
            HubLine::TaskAnswer(r) => format!("{{\"task_answer\":{}}}", to_json(r)),
            HubLine::TaskPermission(r) => format!("{{\"task_permission\":{}}}", to_json(r)),
            HubLine::Turn(r) => format!("{{\"turn\":{}}}", to_json(r)),
            HubLine::Activity(a) => format!("{{\"activity\":{}}}", to_json(a)),
            HubLine::TaskPrompt(r) => format!("{{\"task_prompt\":{}}}", to_json(r)),
            HubLine::TaskClose(r) => format!("{{\"task_close\":{}}}", to_json(r)),
            HubLine::Lease(r) => format!("{{\"{}\":{}}}", r.tag(), r.payload_json()),
        };
        s.push('\n');
        s
    }
}

/// A lease reply's payload (client side), read tolerantly (`LeaseReply::decode`).
fn lease_line(tag: &str, raw: &RawValue) -> Result<HubLine, WireError> {
    match lease::LeaseReply::decode(tag, raw.get()) {
        Some(Ok(r)) => Ok(HubLine::Lease(r)),
        Some(Err(e)) => Err(malformed(&e)),
        None => Err(WireError::Malformed(format!("unknown lease tag `{tag}`"))),
    }
}

/// The delivery line `{"envelope":TEXT}` and its newline: `HubLine::Envelope`'s bytes, for
/// a caller holding the text shared rather than owned (the hub's queued `Arc<str>`), so it is
/// not copied into a `String` first (docs/performance.md, "Design decisions").
pub fn envelope_line(text: &str) -> String {
    let mut s = String::with_capacity(text.len() + 15);
    s.push_str("{\"envelope\":");
    s.push_str(text);
    s.push_str("}\n");
    s
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

/// serde_json's message, without its " at line 1 column N" tail when the line is one line, and
/// without the string values it quotes: `{"hello":"<token>"}` must not put the token into the
/// error line and the service log (SPEC §8.2; found by the `hub_session` fuzz target).
fn malformed(e: &serde_json::Error) -> WireError {
    let mut msg = e.to_string();
    if let Some(pos) = msg.find(" at line ") {
        msg.truncate(pos);
    }
    WireError::Malformed(without_quoted_strings(&msg))
}

/// Drops each `"…"` that serde writes after `string ` for a string value (`invalid type:
/// string "x", expected …`), escapes inside it included. Keys and tags (in backticks) stay:
/// they name what to fix.
fn without_quoted_strings(msg: &str) -> String {
    let mut out = String::with_capacity(msg.len());
    let mut rest = msg;
    while let Some(at) = rest.find("string \"") {
        out.push_str(&rest[..at + "string".len()]);
        let quoted = &rest[at + "string \"".len()..];
        let mut escaped = false;
        let end = quoted.char_indices().find_map(|(i, c)| match c {
            _ if escaped => {
                escaped = false;
                None
            }
            '\\' => {
                escaped = true;
                None
            }
            '"' => Some(i + 1),
            _ => None,
        });
        rest = &quoted[end.unwrap_or(quoted.len())..];
    }
    out.push_str(rest);
    out
}

/// Decodes an envelope's JSON object under SPEC §3's rules and caps, with the error texts of
/// `ClientLine::decode`: used for envelopes a peer hub forwards (SPEC §15).
pub fn decode_envelope(text: &str) -> Result<Envelope, WireError> {
    let raw = decode::envelope(text).map_err(|e| malformed(&e))?;
    let env = Envelope::from_raw(raw).map_err(WireError::Envelope)?;
    env.check_caps().map_err(WireError::Envelope)?;
    Ok(env)
}

/// An await filter's caps (SPEC §5.2): at most `max` bytes (a longer one could never match an
/// accepted envelope, whose fields have the same caps) and no control or formatting character
/// (filters are shown by `who` and `top`). The text names the key, never the value.
fn check_filter(key: &'static str, value: Option<&str>, max: usize) -> Result<(), WireError> {
    let Some(v) = value else {
        return Ok(());
    };
    if v.len() > max {
        return Err(WireError::BadField(
            "await",
            format!("{key} is over {max} bytes"),
        ));
    }
    if crate::kernel::text::has_unsafe(v) {
        return Err(WireError::BadField(
            "await",
            format!("{key} must not contain control or invisible formatting characters"),
        ));
    }
    Ok(())
}

/// Serialises a value that cannot fail to serialise (strings and plain structs).
pub fn to_json<T: Serialize + ?Sized>(v: &T) -> String {
    // Invariant: only strings, options and derived structs of them reach here; serde_json
    // cannot fail on those (no maps with non-string keys, no custom Serialize errors).
    serde_json::to_string(v).expect("plain values always serialise")
}

/// Checks that a text is one JSON value (used by the client for `--body`).
pub fn is_json(text: &str) -> bool {
    serde_json::from_str::<IgnoredAny>(text).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Regression (fuzz target `hub_session`): a hello whose payload is the token as a bare
    /// string put the token into the error line and the service log.
    #[test]
    fn a_malformed_line_error_never_quotes_a_string_value() {
        for line in [
            r#"{"hello":"tok-secret-1"}"#,
            r#"{"hello":{"name":"a","token":["tok-secret-1"]}}"#,
            r#"{"ack":"tok-secret-1"}"#,
            r#"{"await":{"kind":{"x":"tok-secret-1"}}}"#,
        ] {
            let e = ClientLine::decode(line.as_bytes()).unwrap_err().to_string();
            assert!(e.starts_with("malformed line: "), "{e}");
            assert!(!e.contains("tok-secret-1"), "{line}: {e}");
        }
        assert_eq!(
            without_quoted_strings(r#"invalid type: string "a\"b\\", expected x; string "c""#),
            "invalid type: string, expected x; string"
        );
        assert_eq!(
            without_quoted_strings("unknown field `extra`, expected `name` or `token`"),
            "unknown field `extra`, expected `name` or `token`"
        );
    }

    fn decode_err(line: &str) -> String {
        ClientLine::decode(line.as_bytes())
            .err()
            .unwrap_or_else(|| panic!("decoded: {line}"))
            .to_string()
    }

    fn send_line(id: &str, to: &str, kind: &str, corr: Option<&str>) -> String {
        serde_json::json!({"send": {"id": id, "from": "x", "to": to,
            "ts": "2026-07-21T06:40:51Z", "kind": kind, "correlationId": corr, "body": {}}})
        .to_string()
    }

    /// Issue 29: the ledger kept every id for a day outside every byte cap (200 sends with
    /// 1 MB ids pinned 201 MiB). Ids, names, kinds, correlation ids and filters are capped at
    /// decode, before anything is remembered; the error names the field, never the value.
    #[test]
    fn a_megabyte_id_and_every_oversized_field_are_refused_at_decode() {
        let mb = "i".repeat(1 << 20);
        for (line, want) in [
            (
                send_line(&mb, "b", "k", None),
                "invalid envelope: id is over 128 bytes",
            ),
            (
                send_line("e", &"n".repeat(257), "k", None),
                "invalid envelope: to is over 256 bytes",
            ),
            (
                send_line("e", "b", &"k".repeat(129), None),
                "invalid envelope: kind is over 128 bytes",
            ),
            (
                send_line("e", "b", "k", Some(&mb)),
                "invalid envelope: correlationId is over 128 bytes",
            ),
            (
                serde_json::json!({"await": {"replyTo": mb}}).to_string(),
                "invalid await: replyTo is over 128 bytes",
            ),
            (
                serde_json::json!({"await": {"kind": "k".repeat(129)}}).to_string(),
                "invalid await: kind is over 128 bytes",
            ),
            (
                serde_json::json!({"status": {"id": mb}}).to_string(),
                "invalid status: id is over 128 bytes",
            ),
        ] {
            let err = decode_err(&line);
            assert_eq!(err, want);
            assert!(!err.contains("iiii") && !err.contains("kkkk") && !err.contains("nnnn"));
        }
        // At the caps exactly, and what real clients send (UUIDs, task ids), all pass.
        let uuid = "6d1f0c52-3c1e-4b7a-9f43-0a4a3b7c1e25";
        let task = "task-6d1f0c523c1e4b7a9f430a4a3b7c1e25";
        for line in [
            send_line(
                &"i".repeat(128),
                &"n".repeat(256),
                &"k".repeat(128),
                Some(&"c".repeat(128)),
            ),
            send_line(uuid, "alpha@east", "task_result", Some(task)),
        ] {
            assert!(ClientLine::decode(line.as_bytes()).is_ok(), "{line}");
        }
        let line = serde_json::json!({"await": {"replyTo": task, "kind": "task_outcome"}});
        assert!(ClientLine::decode(line.to_string().as_bytes()).is_ok());
    }

    /// Issue 29: kinds and filters are shown by `who` and `top`; a terminal escape in one
    /// (OSC 52 writes the reader's clipboard) is refused where it comes in, and so are the
    /// other fields the hub remembers and shows.
    #[test]
    fn control_and_bidi_characters_are_refused_in_kinds_filters_and_ids() {
        let osc52 = r"x\u001b]52;c;ZXZpbA==\u0007";
        let rlo = r"txt\u202eexe";
        let send = |field: &str, v: &str| {
            let (mut id, mut to, mut kind, mut corr) = (
                "\"e\"".to_owned(),
                "\"b\"".to_owned(),
                "\"k\"".to_owned(),
                "null".to_owned(),
            );
            match field {
                "id" => id = format!("\"{v}\""),
                "to" => to = format!("\"{v}\""),
                "kind" => kind = format!("\"{v}\""),
                _ => corr = format!("\"{v}\""),
            }
            format!(
                r#"{{"send":{{"id":{id},"from":"x","to":{to},"ts":"2026-07-21T06:40:51Z","kind":{kind},"correlationId":{corr},"body":{{}}}}}}"#
            )
        };
        for field in ["id", "to", "kind", "correlationId"] {
            for v in [osc52, rlo, r"a\u007fb", r"a\u009bb"] {
                assert_eq!(
                    decode_err(&send(field, v)),
                    format!("invalid envelope: {field} must not contain control or invisible formatting characters"),
                    "{field}: {v}"
                );
            }
        }
        for key in ["replyTo", "kind"] {
            for v in [osc52, rlo, r"tab\there"] {
                let line = format!(r#"{{"await":{{"{key}":"{v}"}}}}"#);
                assert_eq!(
                    decode_err(&line),
                    format!("invalid await: {key} must not contain control or invisible formatting characters")
                );
            }
        }
        // Non-ASCII that is text stays welcome.
        assert!(ClientLine::decode(send("kind", r"r\u00e9sultat 😀").as_bytes()).is_ok());
    }

    /// A forwarded envelope (SPEC §15) meets the same caps as a send.
    #[test]
    fn a_forwarded_envelope_meets_the_same_caps() {
        let text = serde_json::json!({"id": "i".repeat(129), "from": "a", "to": "b@h",
            "ts": "2026-07-21T06:40:51Z", "kind": "k", "correlationId": null, "body": 1});
        assert_eq!(
            decode_envelope(&text.to_string()).unwrap_err().to_string(),
            "invalid envelope: id is over 128 bytes"
        );
    }

    /// A client reads what a hub delivers whatever its size: an envelope accepted before the
    /// caps existed still reaches its reader.
    #[test]
    fn the_client_decodes_a_delivered_envelope_over_the_caps() {
        let env = serde_json::json!({"id": "i".repeat(4096), "from": "a", "to": "b",
            "ts": "2026-07-21T06:40:51Z", "kind": "k\u{1b}", "correlationId": null, "body": 1});
        let line = format!("{{\"envelope\":{env}}}");
        assert!(matches!(
            HubLine::decode(line.as_bytes()),
            Ok(HubLine::Envelope(_))
        ));
    }

    /// The hello's `warn` and the `accepted` line's `warning` (SPEC §4.1, §5.1): absent unless
    /// set, so the 004 lines stay byte for byte, and each round-trips when set.
    #[test]
    fn warn_and_warning_are_sent_only_when_set_and_round_trip() {
        let plain = ClientLine::Hello(Hello::new("mneme", "s3cret"));
        assert_eq!(
            plain.encode(),
            "{\"hello\":{\"name\":\"mneme\",\"token\":\"s3cret\"}}\n"
        );
        let asked = ClientLine::Hello(Hello {
            warn: Some(true),
            ..Hello::new("mneme", "s3cret")
        });
        let line = asked.encode();
        assert_eq!(
            line,
            "{\"hello\":{\"name\":\"mneme\",\"token\":\"s3cret\",\"warn\":true}}\n"
        );
        match ClientLine::decode(line.trim_end().as_bytes()) {
            Ok(ClientLine::Hello(h)) => assert_eq!(h.warn, Some(true)),
            other => panic!("{other:?}"),
        }
        let warned = HubLine::Accepted {
            id: "e1".into(),
            warning: Some("no agent named \"x\" \u{1b}".into()),
        };
        let text = warned.encode();
        assert_eq!(
            text,
            "{\"accepted\":{\"id\":\"e1\",\"warning\":\"no agent named \\\"x\\\" \\u001b\"}}\n"
        );
        assert_eq!(HubLine::decode(text.trim_end().as_bytes()), Ok(warned));
        let null = HubLine::decode(br#"{"accepted":{"id":"e1","warning":null}}"#);
        assert_eq!(
            null,
            Ok(HubLine::Accepted {
                id: "e1".into(),
                warning: None
            })
        );
    }

    /// The hand-written lines (`ok`, `error`, `accepted`, `envelope`, `timeout`) are what the
    /// earlier `format!`-and-`to_json` encoding wrote, byte for byte, escapes included.
    #[test]
    fn hot_hub_lines_are_the_earlier_bytes() {
        let nasty = "q\"b\\s\n\t\u{1}\u{7f}é😀";
        for v in ["", "e-1", nasty] {
            assert_eq!(
                HubLine::Accepted {
                    id: v.into(),
                    warning: None
                }
                .encode(),
                format!("{{\"accepted\":{{\"id\":{}}}}}\n", to_json(v))
            );
            assert_eq!(
                HubLine::Error { message: v.into() }.encode(),
                format!("{{\"error\":{{\"message\":{}}}}}\n", to_json(v))
            );
        }
        let text = "{\"id\":\"x\",\"body\": [1, {\"a\" : \"\\u0041\"}]}";
        assert_eq!(
            HubLine::Envelope(text.into()).encode(),
            format!("{{\"envelope\":{text}}}\n")
        );
        assert_eq!(envelope_line(text), format!("{{\"envelope\":{text}}}\n"));
        assert_eq!(HubLine::Ok.encode(), "{\"ok\":{}}\n");
        assert_eq!(HubLine::Timeout.encode(), "{\"timeout\":{}}\n");
    }
}
