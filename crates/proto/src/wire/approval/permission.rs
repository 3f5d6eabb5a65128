//! The permission-prompt verb (issue 37 design §6; SPEC §16.1 "Headless"; docs/delegation.md
//! "Approvals"): a headless Claude Code asks its `--permission-prompt-tool`, the hub's MCP
//! server run as the task identity (`agent-hub mcp --as task-…`), which carries the question
//! to the hub as `{"task_permission":{"toolName":…,"toolUseId":…,"input":<json>}}` on a
//! connection it keeps open, and the hub's one reply line is the decision,
//! `{"task_permission":{"behavior":"allow"|"deny","message":…}}`.
//!
//! Owns the two types, their JSON shapes (keys in this order; `message` absent rather than
//! null) and the bounds that need no config: a tool name and a tool-use id, each non-empty,
//! within its cap and printable (both reach the delegator's envelope, the service log and the
//! duplicate check), and an input that is one JSON object (Claude Code sends its tool's input
//! object, and takes back an `updatedInput` that must be one). `input` is kept as the JSON
//! text it came in, never re-encoded: the hub reads what a person needs from it and the MCP
//! server echoes back the input it was given, never the hub's copy. Error texts name the key,
//! never the value (SPEC §2.4). Refuses: the caps that need the hub's config (the input
//! against `tasks.max_request_bytes`) and every rule about who may ask (the task book's).

use serde::{Deserialize, Serialize};
use std::fmt;

/// Most bytes of `toolName`: Claude Code's names are short (`Bash`, and an MCP tool's
/// `mcp__<server>__<tool>` under 64), so this only stops a line that is not one.
pub const TOOL_NAME_MAX_BYTES: usize = 256;
/// Most bytes of `toolUseId`, as an ACP `toolCallId` (design §4.1).
pub const TOOL_USE_ID_MAX_BYTES: usize = 128;

/// `{"task_permission":{"toolName":…,"toolUseId":…,"input":{…}}}`: the task's agent asks
/// whether it may run `toolName` with `input`; `toolUseId` names that one tool use. Only a
/// task identity may send it, for its own task (the asker is the task). `Debug` shows the
/// input's size only: it is the agent's command or file text, which no log keeps.
#[derive(Clone, PartialEq, Eq)]
pub struct TaskPermissionRequest {
    pub tool_name: String,
    pub tool_use_id: String,
    /// The input object's JSON text, as it was decoded (or as `new` wrote it).
    input: String,
}

impl fmt::Debug for TaskPermissionRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TaskPermissionRequest")
            .field("tool_name", &self.tool_name)
            .field("tool_use_id", &self.tool_use_id)
            .field("input_bytes", &self.input.len())
            .finish()
    }
}

/// Why a `task_permission` line was refused before the hub looked at it. The texts name the
/// key and what to fix, never the value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PermissionLineError {
    /// `toolName` or `toolUseId` is empty.
    Empty(&'static str),
    /// `toolName` or `toolUseId` is over its cap.
    TooLong(&'static str, usize),
    /// `toolName` or `toolUseId` holds a control or formatting character.
    Unprintable(&'static str),
    /// `input` is not a JSON object.
    InputNotObject,
}

impl fmt::Display for PermissionLineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PermissionLineError::Empty(key) => write!(f, "{key} must not be empty"),
            PermissionLineError::TooLong(key, max) => write!(f, "{key} is over {max} bytes"),
            PermissionLineError::Unprintable(key) => write!(
                f,
                "{key} must not contain control or invisible formatting characters"
            ),
            PermissionLineError::InputNotObject => f.write_str("input must be a JSON object"),
        }
    }
}

impl std::error::Error for PermissionLineError {}

impl TaskPermissionRequest {
    /// A request for `input` (the tool's input object as Claude Code gave it).
    pub fn new(
        tool_name: impl Into<String>,
        tool_use_id: impl Into<String>,
        input: &serde_json::Value,
    ) -> TaskPermissionRequest {
        TaskPermissionRequest {
            tool_name: tool_name.into(),
            tool_use_id: tool_use_id.into(),
            input: input.to_string(),
        }
    }

    /// From the decoder: `input` is the raw text of one JSON value, already validated.
    pub(crate) fn from_raw(tool_name: String, tool_use_id: String, input: &str) -> Self {
        TaskPermissionRequest {
            tool_name,
            tool_use_id,
            input: input.to_owned(),
        }
    }

    /// The input's JSON text.
    pub fn input(&self) -> &str {
        &self.input
    }

    /// The bounds that need no state (module doc). The MCP server runs the same check before
    /// connecting, so a refusal reads the same wherever it comes from.
    pub fn check(&self) -> Result<(), PermissionLineError> {
        let ids = [
            ("toolName", &self.tool_name, TOOL_NAME_MAX_BYTES),
            ("toolUseId", &self.tool_use_id, TOOL_USE_ID_MAX_BYTES),
        ];
        for (key, value, max) in ids {
            if value.is_empty() {
                return Err(PermissionLineError::Empty(key));
            }
            if value.len() > max {
                return Err(PermissionLineError::TooLong(key, max));
            }
            if crate::kernel::text::has_unsafe(value) {
                return Err(PermissionLineError::Unprintable(key));
            }
        }
        // The text is one JSON value (the decoder, or `new`, saw to it): an object is the one
        // whose first byte after whitespace is `{`.
        if !self.input.trim_start().starts_with('{') {
            return Err(PermissionLineError::InputNotObject);
        }
        Ok(())
    }

    /// The line's payload object, compact, keys in the documented order.
    pub fn to_json(&self) -> String {
        let mut s = String::with_capacity(self.input.len() + 64);
        s.push_str("{\"toolName\":");
        crate::wire::json_text::push_str(&mut s, &self.tool_name);
        s.push_str(",\"toolUseId\":");
        crate::wire::json_text::push_str(&mut s, &self.tool_use_id);
        s.push_str(",\"input\":");
        s.push_str(self.input.trim());
        s.push('}');
        s
    }
}

/// What the hub decided: Claude Code's own two words (`PermissionResult.behavior`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Behavior {
    Allow,
    Deny,
}

impl Behavior {
    pub fn as_str(self) -> &'static str {
        match self {
            Behavior::Allow => "allow",
            Behavior::Deny => "deny",
        }
    }
}

/// The hub's one reply to `task_permission`: `{"task_permission":{"behavior":"allow"}}`, or
/// `{"task_permission":{"behavior":"deny","message":"…"}}` (a deny always says why: the
/// answerer's words, or the hub's: the fallback's reason, the task's cancel or end, the
/// task's policy). `message` reaches the model verbatim.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskPermissionReply {
    pub behavior: Behavior,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

impl TaskPermissionReply {
    pub fn allow() -> TaskPermissionReply {
        TaskPermissionReply {
            behavior: Behavior::Allow,
            message: None,
        }
    }

    pub fn deny(message: impl Into<String>) -> TaskPermissionReply {
        TaskPermissionReply {
            behavior: Behavior::Deny,
            message: Some(message.into()),
        }
    }
}
