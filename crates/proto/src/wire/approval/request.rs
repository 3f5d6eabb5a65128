//! A request as its delegator sees it (issue 37; SPEC §16.1): the entry a task record lists
//! for each open request, and the body of the hub's `task_request` envelope, whose one
//! encoder writes the keys in the documented order and builds the `answer` command itself, so
//! no caller can send a wrong one.
//!
//! Owns the shapes and the expiry reasons' exact words. Refuses IO and every decision about a
//! request (what opens one, when it expires, who may answer): the task book's.

use serde::{Deserialize, Serialize};
use std::fmt;

/// What a request asks (`type` in the envelope body and the task record): an ACP
/// `session/request_permission` or a headless permission prompt (`permission`), or an ACP
/// `elicitation/create` form (`question`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RequestType {
    #[default]
    Permission,
    Question,
}

impl RequestType {
    pub fn as_str(self) -> &'static str {
        match self {
            RequestType::Permission => "permission",
            RequestType::Question => "question",
        }
    }
}

/// One open request of a task, as `task_status` and `tasks` list it in the record's
/// `requests` (absent when none is open). Metadata a delegator acts on: no path, command or
/// message (those travel in the `task_request` envelope, to the delegator only).
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct RequestRecord {
    /// `req-` and 16 hex digits.
    pub request: String,
    /// `permission` or `question`.
    #[serde(rename = "type")]
    pub kind: RequestType,
    /// The tool call's title, sanitised and capped by the hub.
    pub title: String,
    /// The ACP ToolKind, when the agent gave one.
    #[serde(rename = "toolKind", default, skip_serializing_if = "Option::is_none")]
    pub tool_kind: Option<String>,
    /// The option ids offered, in the agent's order.
    pub options: Vec<String>,
    /// RFC 3339 with milliseconds, UTC.
    #[serde(rename = "openedAt")]
    pub opened_at: String,
    /// When the fallback answers it (`tasks.permission_timeout_secs` after it opened).
    #[serde(rename = "expiresAt")]
    pub expires_at: String,
    /// How long it has waited, on the hub's clock.
    #[serde(rename = "waitingMs")]
    pub waiting_ms: u64,
}

/// The kind of the hub's request envelopes: the wire's, in its list of kinds only the hub
/// writes (`wire::envelope::HUB_KINDS`, SPEC §3.4), so no client can forge one.
pub const TASK_REQUEST_KIND: &str = crate::wire::Envelope::TASK_REQUEST_KIND;

/// The tool call a request is about (`toolCall` in the envelope body).
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct RequestToolCall {
    /// The agent's `toolCallId` (at most 128 bytes).
    pub id: String,
    pub title: String,
    /// The ACP ToolKind, when the agent gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// The paths the call names (locations, diff paths), absent when none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub paths: Vec<String>,
    /// The command it runs, when it runs one (`rawInput.command`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
}

/// One option a request offers, as the agent offered it.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct RequestOption {
    #[serde(rename = "optionId")]
    pub option_id: String,
    pub name: String,
    /// `allow_once`, `allow_always`, `reject_once`, `reject_always`, or the agent's word.
    pub kind: String,
}

/// What the hub fills in for an open request's envelope; the body adds `"state":"open"` and
/// the `answer` command (`TaskRequestBody::to_json`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestOpened {
    pub task: String,
    pub request: String,
    pub kind: RequestType,
    /// The agent the task runs on.
    pub agent: String,
    pub tool_call: RequestToolCall,
    /// A question's text.
    pub message: Option<String>,
    /// A question's form: the agent's `requestedSchema` as compact JSON text (at most 4096
    /// bytes, carried exactly), which the content of an `accept` answer must match.
    pub schema: Option<String>,
    pub options: Vec<RequestOption>,
    /// RFC 3339 with milliseconds, UTC.
    pub opened_at: String,
    pub expires_at: String,
}

/// How an unanswered request was closed: the agent's reject option, or `cancelled` (design
/// §4.5). There is no allow fallback: nothing is ever allowed unasked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Fallback {
    Reject,
    Cancel,
}

impl Fallback {
    pub fn as_str(self) -> &'static str {
        match self {
            Fallback::Reject => "reject",
            Fallback::Cancel => "cancel",
        }
    }
}

/// Why a request expired (the body's `reason`, in these exact words).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExpiryReason {
    /// `no answer within N s`: `tasks.permission_timeout_secs` passed.
    Timeout { secs: u64 },
    /// `hub restarted`: it was open when the hub stopped (design §4.6).
    HubRestarted,
    /// `no relay route to the delegator`: the task came from a peer that cannot carry
    /// requests (design §7).
    NoRelayRoute,
}

impl fmt::Display for ExpiryReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExpiryReason::Timeout { secs } => write!(f, "no answer within {secs} s"),
            ExpiryReason::HubRestarted => f.write_str("hub restarted"),
            ExpiryReason::NoRelayRoute => f.write_str("no relay route to the delegator"),
        }
    }
}

impl ExpiryReason {
    /// The reason read back from its words; None for any other text.
    pub fn parse(text: &str) -> Option<ExpiryReason> {
        match text {
            "hub restarted" => Some(ExpiryReason::HubRestarted),
            "no relay route to the delegator" => Some(ExpiryReason::NoRelayRoute),
            t => {
                let secs = t.strip_prefix("no answer within ")?.strip_suffix(" s")?;
                // Digits only, as `Display` writes them (`parse` would take a `+`).
                if secs.is_empty() || !secs.bytes().all(|b| b.is_ascii_digit()) {
                    return None;
                }
                secs.parse().ok().map(|secs| ExpiryReason::Timeout { secs })
            }
        }
    }
}

/// An expired request's envelope: the fallback the hub answered the agent with, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestExpired {
    pub task: String,
    pub request: String,
    pub fallback: Fallback,
    pub reason: ExpiryReason,
}

/// The body of a `task_request` envelope (from `hub`, to the delegator, `correlationId` the
/// task id): a request that opened, or one that expired.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TaskRequestBody {
    /// Boxed: an open request is several times the size of an expired one.
    Open(Box<RequestOpened>),
    Expired(RequestExpired),
}

/// The command that answers a request, as the body's `answer` gives it.
pub fn answer_command(task: &str, request: &str) -> String {
    format!("agent-hub task answer --id {task} --request {request} --option OPTION")
}

/// The open body's keys in their order (design §5); `state` and `answer` are the encoder's.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct OpenText {
    task: String,
    request: String,
    state: String,
    #[serde(rename = "type")]
    kind: RequestType,
    agent: String,
    #[serde(rename = "toolCall")]
    tool_call: RequestToolCall,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    schema: Option<String>,
    options: Vec<RequestOption>,
    #[serde(rename = "openedAt")]
    opened_at: String,
    #[serde(rename = "expiresAt")]
    expires_at: String,
    answer: String,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ExpiredText {
    task: String,
    request: String,
    state: String,
    fallback: Fallback,
    reason: String,
}

/// Why a text is not a `task_request` body this hub writes.
#[derive(Debug)]
pub enum RequestBodyError {
    Json(serde_json::Error),
    /// A `state` other than `open` or `expired`, an `answer` that is not the request's own
    /// command, or a `reason` not among `ExpiryReason`'s.
    Shape(&'static str),
}

impl fmt::Display for RequestBodyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RequestBodyError::Json(e) => write!(f, "not a task_request body: {e}"),
            RequestBodyError::Shape(why) => write!(f, "not a task_request body: {why}"),
        }
    }
}

impl std::error::Error for RequestBodyError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            RequestBodyError::Json(e) => Some(e),
            RequestBodyError::Shape(_) => None,
        }
    }
}

impl TaskRequestBody {
    pub fn task(&self) -> &str {
        match self {
            TaskRequestBody::Open(o) => &o.task,
            TaskRequestBody::Expired(e) => &e.task,
        }
    }

    /// The body's JSON text, keys in the documented order, optional ones absent.
    pub fn to_json(&self) -> String {
        match self {
            TaskRequestBody::Open(o) => crate::wire::to_json(&OpenText {
                task: o.task.clone(),
                request: o.request.clone(),
                state: "open".to_owned(),
                kind: o.kind,
                agent: o.agent.clone(),
                tool_call: o.tool_call.clone(),
                message: o.message.clone(),
                schema: o.schema.clone(),
                options: o.options.clone(),
                opened_at: o.opened_at.clone(),
                expires_at: o.expires_at.clone(),
                answer: answer_command(&o.task, &o.request),
            }),
            TaskRequestBody::Expired(e) => crate::wire::to_json(&ExpiredText {
                task: e.task.clone(),
                request: e.request.clone(),
                state: "expired".to_owned(),
                fallback: e.fallback,
                reason: e.reason.to_string(),
            }),
        }
    }

    /// Reads a body back strictly (the fixtures' and tests' check that the encoder writes
    /// what the docs say). Clients read the envelope tolerantly instead, as JSON.
    pub fn from_json(text: &str) -> Result<TaskRequestBody, RequestBodyError> {
        let v: serde_json::Value = serde_json::from_str(text).map_err(RequestBodyError::Json)?;
        match v.get("state").and_then(serde_json::Value::as_str) {
            Some("open") => {
                let o: OpenText = serde_json::from_value(v).map_err(RequestBodyError::Json)?;
                if o.answer != answer_command(&o.task, &o.request) {
                    return Err(RequestBodyError::Shape(
                        "answer is not the request's command",
                    ));
                }
                Ok(TaskRequestBody::Open(Box::new(RequestOpened {
                    task: o.task,
                    request: o.request,
                    kind: o.kind,
                    agent: o.agent,
                    tool_call: o.tool_call,
                    message: o.message,
                    schema: o.schema,
                    options: o.options,
                    opened_at: o.opened_at,
                    expires_at: o.expires_at,
                })))
            }
            Some("expired") => {
                let e: ExpiredText = serde_json::from_value(v).map_err(RequestBodyError::Json)?;
                let reason = ExpiryReason::parse(&e.reason)
                    .ok_or(RequestBodyError::Shape("reason is not one the hub gives"))?;
                Ok(TaskRequestBody::Expired(RequestExpired {
                    task: e.task,
                    request: e.request,
                    fallback: e.fallback,
                    reason,
                }))
            }
            _ => Err(RequestBodyError::Shape("state is neither open nor expired")),
        }
    }
}
