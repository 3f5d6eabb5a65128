//! The `task-approvals` messages (issue 37 design §7; docs/relay-protocol.md §8, §3;
//! docs/delegation.md "Approvals", "Across hubs"): a task a peer delegated here carries its
//! agent's requests back to the delegating hub (`task_request`), that hub forwards its
//! delegator's answer (`task_answer`), and the worker says when a request stopped being open
//! (`task_request_closed`). `task_id` is always the id the delegating hub knows the task by
//! (as in `task_status`).
//!
//! Owns the three payloads, their key names and every bound a receiver checks before it looks
//! anything up (`check`): ids non-empty, printable and within their caps, the texts within
//! the caps the ACP session keeps (issue 37 design §4.1), 1–8 distinct options, the words of
//! `type`, `state` and `fallback`, an expiry's `reason` one the hub gives. A message past one
//! is dropped by its receiver with a log line naming the key, never the value.
//!
//! Refuses: deciding what a message means (which task it is, whether its request is open,
//! who may answer: the task book's, `tasks::relayed`), sanitising texts for a terminal (the
//! delegating book does it when it mirrors the request), and IO.

use crate::kernel::text::has_unsafe;
use crate::wire::approval::{ExpiryReason, ANSWER_ID_MAX_BYTES, ANSWER_MESSAGE_MAX_BYTES};
use serde::{Deserialize, Serialize};
use std::fmt;

/// A task id, a request id, a tool call id and an option id: at most this many bytes.
pub const ID_MAX_BYTES: usize = 128;
/// A request's title (the ACP session's cap, issue 37 design §4.1).
pub const TITLE_MAX_BYTES: usize = 256;
/// A tool kind word (ACP's are at most 11 bytes: `switch_mode`).
pub const TOOL_KIND_MAX_BYTES: usize = 32;
/// At most this many paths, each at most `PATH_MAX_BYTES`.
pub const MAX_PATHS: usize = 8;
pub const PATH_MAX_BYTES: usize = 512;
pub const COMMAND_MAX_BYTES: usize = 1024;
/// A question's text.
pub const QUESTION_MAX_BYTES: usize = 2048;
/// A question's form schema: compact JSON text, as the worker's ACP session carries it
/// (`acp::request::MAX_SCHEMA_BYTES`, the same 4096).
pub const SCHEMA_MAX_BYTES: usize = 4096;
/// 1..=`MAX_OPTIONS` options a request offers.
pub const MAX_OPTIONS: usize = 8;
pub const OPTION_NAME_MAX_BYTES: usize = 256;
/// An option's kind word (`allow_once`, `reject_always`, …).
pub const OPTION_KIND_MAX_BYTES: usize = 32;
/// A closed request's `reason` (the longest the hub gives is `no relay route to the delegator`).
pub const REASON_MAX_BYTES: usize = 256;

/// The words of `task_request.type`.
pub const REQUEST_TYPES: [&str; 2] = ["permission", "question"];
/// The words of `task_request_closed.state`: how the worker's request stopped being open.
pub const CLOSED_STATES: [&str; 4] = ["answered", "expired", "cancelled", "task_ended"];
/// The words of `task_request_closed.fallback` (the worker's `tasks.permission_fallback`).
pub const FALLBACKS: [&str; 2] = ["reject", "cancel"];

/// The tool call a request is about, as the worker's session read it (bounded, sanitised
/// there; the delegating hub sanitises again before a person sees it).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RelayToolCall {
    /// The agent's `toolCallId`.
    pub id: String,
    pub title: String,
    /// The ACP ToolKind, when the agent gave one the hub knows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub paths: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
}

/// One option a request offers. `option_id` is the agent's, exactly: the answer echoes it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RelayOption {
    pub option_id: String,
    pub name: String,
    /// `allow_once`, `allow_always`, `reject_once`, `reject_always` for a permission.
    pub kind: String,
}

/// `task_request` (worker → delegating hub): one request the task's agent waits on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskRequest {
    pub task_id: String,
    /// The worker's request id, `req-` and 16 hex digits: the delegating hub's mirror keeps it.
    pub request: String,
    /// `permission` or `question`.
    #[serde(rename = "type")]
    pub kind: String,
    pub tool_call: RelayToolCall,
    /// A question's text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// A question's form (`requestedSchema`) as compact JSON text, so the delegator sees what
    /// an accept must hold; optional (a worker of the first `task-approvals` release omits it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<String>,
    pub options: Vec<RelayOption>,
    /// When the worker applies its fallback, unix ms on the worker's clock: the worker is the
    /// only clock (the delegating hub's mirror waits a grace longer).
    pub expires_at: u64,
}

/// `task_answer` (delegating hub → worker): the delegator's answer, which the worker checks
/// as it checks a local one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskAnswer {
    pub task_id: String,
    pub request: String,
    pub option: String,
    /// The delegator's words for the agent (a form's content, a denial's reason).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// `task_request_closed` (worker → delegating hub): the worker's request is no longer open.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskRequestClosed {
    pub task_id: String,
    pub request: String,
    /// `answered`, `expired`, `cancelled` or `task_ended`.
    pub state: String,
    /// With `expired`: why, in the hub's words (`no answer within N s`, `hub restarted`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// With `expired`: the fallback the worker answered the agent with (`reject` or
    /// `cancel`), which the delegator's `expired` envelope names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback: Option<String>,
}

/// Why a `task-approvals` payload was dropped: the message type and the key, never the value
/// (a peer's text may hold anything).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalMessageError {
    pub msg_type: &'static str,
    pub key: &'static str,
    pub why: &'static str,
}

impl fmt::Display for ApprovalMessageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} {}", self.msg_type, self.key, self.why)
    }
}

impl std::error::Error for ApprovalMessageError {}

/// The checks' vocabulary: one closure per message type names it once.
fn err(msg_type: &'static str) -> impl Fn(&'static str, &'static str) -> ApprovalMessageError {
    move |key, why| ApprovalMessageError { msg_type, key, why }
}

/// An id: 1..=`max` bytes, no control or invisible formatting character (ids reach the
/// audit log, the service log and a terminal as they are).
fn id_ok(s: &str, max: usize) -> Result<(), &'static str> {
    if s.is_empty() {
        return Err("is empty");
    }
    if s.len() > max {
        return Err("is over its cap");
    }
    if has_unsafe(s) {
        return Err("holds a control or formatting character");
    }
    Ok(())
}

fn text_ok(s: &str, max: usize) -> Result<(), &'static str> {
    if s.len() > max {
        return Err("is over its cap");
    }
    Ok(())
}

impl TaskRequest {
    /// The bounds a delegating hub checks before it mirrors the request (module doc).
    pub fn check(&self) -> Result<(), ApprovalMessageError> {
        let e = err("task_request");
        id_ok(&self.task_id, ID_MAX_BYTES).map_err(|w| e("task_id", w))?;
        id_ok(&self.request, ID_MAX_BYTES).map_err(|w| e("request", w))?;
        if !REQUEST_TYPES.contains(&self.kind.as_str()) {
            return Err(e("type", "is neither permission nor question"));
        }
        let tc = &self.tool_call;
        text_ok(&tc.id, ID_MAX_BYTES).map_err(|w| e("tool_call.id", w))?;
        text_ok(&tc.title, TITLE_MAX_BYTES).map_err(|w| e("tool_call.title", w))?;
        if let Some(k) = &tc.kind {
            id_ok(k, TOOL_KIND_MAX_BYTES).map_err(|w| e("tool_call.kind", w))?;
        }
        if tc.paths.len() > MAX_PATHS {
            return Err(e("tool_call.paths", "lists more than 8 paths"));
        }
        for p in &tc.paths {
            text_ok(p, PATH_MAX_BYTES).map_err(|w| e("tool_call.paths", w))?;
        }
        if let Some(c) = &tc.command {
            text_ok(c, COMMAND_MAX_BYTES).map_err(|w| e("tool_call.command", w))?;
        }
        if let Some(m) = &self.message {
            text_ok(m, QUESTION_MAX_BYTES).map_err(|w| e("message", w))?;
        }
        if let Some(sc) = &self.schema {
            text_ok(sc, SCHEMA_MAX_BYTES).map_err(|w| e("schema", w))?;
            if self.kind != "question" {
                return Err(e("schema", "is only for a question"));
            }
            if !serde_json::from_str::<serde_json::Value>(sc).is_ok_and(|v| v.is_object()) {
                return Err(e("schema", "is not a JSON object's text"));
            }
        }
        if self.options.is_empty() {
            return Err(e("options", "is empty"));
        }
        if self.options.len() > MAX_OPTIONS {
            return Err(e("options", "lists more than 8 options"));
        }
        for (i, o) in self.options.iter().enumerate() {
            id_ok(&o.option_id, ID_MAX_BYTES).map_err(|w| e("options.option_id", w))?;
            text_ok(&o.name, OPTION_NAME_MAX_BYTES).map_err(|w| e("options.name", w))?;
            id_ok(&o.kind, OPTION_KIND_MAX_BYTES).map_err(|w| e("options.kind", w))?;
            if self.options[..i].iter().any(|x| x.option_id == o.option_id) {
                return Err(e("options.option_id", "is offered twice"));
            }
        }
        Ok(())
    }
}

impl TaskAnswer {
    /// The bounds a worker checks before it looks the task up: the same as the `task_answer`
    /// verb's (`wire::approval::TaskAnswerRequest::check`), with the request named.
    pub fn check(&self) -> Result<(), ApprovalMessageError> {
        let e = err("task_answer");
        id_ok(&self.task_id, ID_MAX_BYTES).map_err(|w| e("task_id", w))?;
        id_ok(&self.request, ANSWER_ID_MAX_BYTES).map_err(|w| e("request", w))?;
        id_ok(&self.option, ANSWER_ID_MAX_BYTES).map_err(|w| e("option", w))?;
        if let Some(m) = &self.message {
            text_ok(m, ANSWER_MESSAGE_MAX_BYTES).map_err(|w| e("message", w))?;
        }
        Ok(())
    }
}

impl TaskRequestClosed {
    /// The bounds a delegating hub checks before it closes its mirror: a known `state`, and
    /// for `expired` a `reason` in the hub's words and a known `fallback`.
    pub fn check(&self) -> Result<(), ApprovalMessageError> {
        let e = err("task_request_closed");
        id_ok(&self.task_id, ID_MAX_BYTES).map_err(|w| e("task_id", w))?;
        id_ok(&self.request, ID_MAX_BYTES).map_err(|w| e("request", w))?;
        if !CLOSED_STATES.contains(&self.state.as_str()) {
            return Err(e(
                "state",
                "is none of answered, expired, cancelled, task_ended",
            ));
        }
        if let Some(r) = &self.reason {
            text_ok(r, REASON_MAX_BYTES).map_err(|w| e("reason", w))?;
        }
        if self.state == "expired" {
            if self
                .reason
                .as_deref()
                .and_then(ExpiryReason::parse)
                .is_none()
            {
                return Err(e("reason", "is not one the hub gives for an expiry"));
            }
            if !self
                .fallback
                .as_deref()
                .is_some_and(|f| FALLBACKS.contains(&f))
            {
                return Err(e("fallback", "is neither reject nor cancel"));
            }
        }
        Ok(())
    }

    /// The expiry's reason, for a `state` of `expired` that passed `check`.
    pub fn expiry_reason(&self) -> Option<ExpiryReason> {
        self.reason.as_deref().and_then(ExpiryReason::parse)
    }
}
