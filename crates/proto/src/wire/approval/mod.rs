//! The approvals' wire (issue 37; docs/delegation.md "Approvals", SPEC §16 "Requests and
//! answers"): what a delegator adds to `delegate` to bound a task's permissions (`permission`,
//! `allow`), the `task_answer` verb and its reply; in `request`, the open requests a task
//! record lists and the body of the hub's `task_request` envelope with its one encoder; and,
//! in `permission`, the `task_permission` verb a headless task's permission tool asks with.
//!
//! Owns the types, their JSON shapes (keys in the documented order, optional keys absent
//! rather than null) and every bound that needs no config: a permission word, at most
//! `MAX_ALLOW_RULES` rules of known tool kinds whose `under` stays inside the task's cwd
//! (lexically), an answer's ids and message within their caps. Error texts name the key and
//! what to fix, never the value (SPEC §2.4). Refuses: every rule that needs the hub's config or
//! state (the operator's bound for an agent, who may answer, whether a request is open): those
//! are the task book's (`tasks::approvals`).

use serde::{Deserialize, Serialize};
use std::fmt;

mod permission;
mod request;
pub use permission::{
    Behavior, PermissionLineError, TaskPermissionReply, TaskPermissionRequest, TOOL_NAME_MAX_BYTES,
    TOOL_USE_ID_MAX_BYTES,
};
pub use request::{
    answer_command, ExpiryReason, Fallback, RequestBodyError, RequestExpired, RequestOpened,
    RequestOption, RequestRecord, RequestToolCall, RequestType, TaskRequestBody, TASK_REQUEST_KIND,
};

/// The ACP ToolKind values a pre-approval rule may name (docs/delegation.md "Approvals"),
/// in the order ACP lists them.
pub const TOOL_KINDS: [&str; 10] = [
    "read",
    "edit",
    "delete",
    "move",
    "search",
    "execute",
    "think",
    "fetch",
    "switch_mode",
    "other",
];
/// Most rules one `delegate` may carry in `allow` (design §2).
pub const MAX_ALLOW_RULES: usize = 8;
/// Most bytes of a rule's `under`.
pub const ALLOW_UNDER_MAX_BYTES: usize = 512;
/// Most bytes of a `task_answer`'s `message` (design §5).
pub const ANSWER_MESSAGE_MAX_BYTES: usize = 4096;
/// Most bytes of a `task_answer`'s `request` and `option`: an option id is at most 128 bytes
/// wherever the hub keeps one, and a request id is `req-` and 16 hex digits.
pub const ANSWER_ID_MAX_BYTES: usize = 128;

/// A task's permission policy as a delegator asks for it (`delegate`'s `permission`). The
/// order is the policies' width, `Reject < Ask < Allow`: the hub runs a task under the
/// narrower of this and the operator's bound for the agent, and refuses one wider than it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Permission {
    /// Every request is answered with the agent's reject option.
    Reject,
    /// Every request not pre-approved is held open for the delegator (or an approver).
    Ask,
    /// Every request is answered with the agent's allow option.
    Allow,
}

impl Permission {
    /// In the order the docs and the refusal list them.
    pub const ALL: [Permission; 3] = [Permission::Ask, Permission::Reject, Permission::Allow];

    pub fn as_str(self) -> &'static str {
        match self {
            Permission::Reject => "reject",
            Permission::Ask => "ask",
            Permission::Allow => "allow",
        }
    }

    pub fn parse(word: &str) -> Option<Permission> {
        Permission::ALL.into_iter().find(|p| p.as_str() == word)
    }

    /// `ask, reject, allow`: for error texts and help.
    pub fn list() -> String {
        Permission::ALL.map(Permission::as_str).join(", ")
    }
}

impl fmt::Display for Permission {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One pre-approval rule (`delegate`'s `allow`): a request whose tool kind is in `kinds` and,
/// when `under` is set, every one of whose paths lies under the task's cwd joined with
/// `under` is answered allow at once (the matching is the book's, `tasks::approvals`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AllowRule {
    /// ACP ToolKind values, each one of `TOOL_KINDS`, none twice.
    pub kinds: Vec<String>,
    /// A folder relative to the task's cwd; absent: anywhere.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub under: Option<String>,
}

impl AllowRule {
    /// `under` lexically normalised (`normalise_under`), `None` without one.
    pub fn normalised_under(&self) -> Option<Result<String, RuleProblem>> {
        self.under.as_deref().map(normalise_under)
    }
}

/// What is wrong with one rule. The texts name the key, never the value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuleProblem {
    NoKinds,
    UnknownKind,
    KindTwice,
    UnderEmpty,
    UnderTooLong,
    UnderUnsafe,
    UnderAbsolute,
    UnderEscapes,
}

impl fmt::Display for RuleProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RuleProblem::NoKinds => f.write_str("kinds must name at least one tool kind"),
            RuleProblem::UnknownKind => {
                write!(f, "kinds must be among {}", TOOL_KINDS.join(", "))
            }
            RuleProblem::KindTwice => f.write_str("kinds names a kind twice"),
            RuleProblem::UnderEmpty => {
                f.write_str("under must not be empty (leave it out for anywhere)")
            }
            RuleProblem::UnderTooLong => {
                write!(f, "under is over {ALLOW_UNDER_MAX_BYTES} bytes")
            }
            RuleProblem::UnderUnsafe => {
                f.write_str("under must not contain control or invisible formatting characters")
            }
            RuleProblem::UnderAbsolute => {
                f.write_str("under must be a path relative to the task's cwd")
            }
            RuleProblem::UnderEscapes => f.write_str("under must not leave the task's cwd"),
        }
    }
}

/// Why `delegate`'s `allow` was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AllowError {
    /// More than `MAX_ALLOW_RULES` rules.
    TooManyRules,
    /// The rule at this 1-based place.
    Rule { index: usize, problem: RuleProblem },
}

impl fmt::Display for AllowError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AllowError::TooManyRules => write!(f, "allow holds at most {MAX_ALLOW_RULES} rules"),
            AllowError::Rule { index, problem } => write!(f, "allow rule {index}: {problem}"),
        }
    }
}

impl std::error::Error for AllowError {}

/// The bounds every `allow` meets before the hub looks at it (design §2): at most
/// `MAX_ALLOW_RULES` rules, each naming known tool kinds once, and an `under` that is
/// relative, within its cap, printable and inside the cwd once normalised. The same check
/// runs in the client (`agent-hub delegate --allow`, the MCP `delegate` tool), so a refusal
/// reads the same wherever it comes from.
pub fn check_allow(rules: &[AllowRule]) -> Result<(), AllowError> {
    if rules.len() > MAX_ALLOW_RULES {
        return Err(AllowError::TooManyRules);
    }
    for (i, r) in rules.iter().enumerate() {
        check_rule(r).map_err(|problem| AllowError::Rule {
            index: i + 1,
            problem,
        })?;
    }
    Ok(())
}

fn check_rule(r: &AllowRule) -> Result<(), RuleProblem> {
    if r.kinds.is_empty() {
        return Err(RuleProblem::NoKinds);
    }
    for (i, k) in r.kinds.iter().enumerate() {
        if !TOOL_KINDS.contains(&k.as_str()) {
            return Err(RuleProblem::UnknownKind);
        }
        if r.kinds[..i].contains(k) {
            return Err(RuleProblem::KindTwice);
        }
    }
    if let Some(under) = r.normalised_under() {
        under?;
    }
    Ok(())
}

/// `under` lexically normalised against the task's cwd: `.` and empty components dropped,
/// `..` taking back the one before it, no trailing `/`; `""` is the cwd itself. Refused: an
/// empty text, one over `ALLOW_UNDER_MAX_BYTES`, a control or formatting character (a NUL
/// among them), an absolute path, and a `..` that would leave the cwd (`a/../../b`). The
/// filesystem is never asked: a symlink inside the cwd is the sandbox's business, as for the
/// cwd itself (docs/delegation.md "Refusals").
pub fn normalise_under(under: &str) -> Result<String, RuleProblem> {
    if under.is_empty() {
        return Err(RuleProblem::UnderEmpty);
    }
    if under.len() > ALLOW_UNDER_MAX_BYTES {
        return Err(RuleProblem::UnderTooLong);
    }
    if crate::kernel::text::has_unsafe(under) {
        return Err(RuleProblem::UnderUnsafe);
    }
    if under.starts_with('/') {
        return Err(RuleProblem::UnderAbsolute);
    }
    let mut parts: Vec<&str> = Vec::new();
    for c in under.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                if parts.pop().is_none() {
                    return Err(RuleProblem::UnderEscapes);
                }
            }
            c => parts.push(c),
        }
    }
    Ok(parts.join("/"))
}

/// `{"task_answer":{"task":…,"request":…,"option":…,"message":…}}`: answer one open request
/// of a task with one of the options it offered. `request` may be left out when the task has
/// exactly one open request; `message` goes to the agent with the answer where its protocol
/// carries one. `Debug` shows the message's size only: it is the answerer's words to an
/// agent, and no log or audit record keeps it (design §9).
#[derive(Clone, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct TaskAnswerRequest {
    pub task: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<String>,
    pub option: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

impl fmt::Debug for TaskAnswerRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TaskAnswerRequest")
            .field("task", &self.task)
            .field("request", &self.request)
            .field("option", &self.option)
            .field("message_bytes", &self.message.as_ref().map(String::len))
            .finish()
    }
}

/// Why a `task_answer` line was refused before the hub looked at it. The texts name the key
/// and what to fix, never the value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AnswerError {
    /// `task` is empty.
    EmptyTask,
    /// `request` or `option` is empty.
    Empty(&'static str),
    /// `request` or `option` is over `ANSWER_ID_MAX_BYTES`.
    TooLong(&'static str),
    /// `request` or `option` holds a control or formatting character.
    Unprintable(&'static str),
    /// `message` is over `ANSWER_MESSAGE_MAX_BYTES`.
    MessageTooLong,
}

impl fmt::Display for AnswerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AnswerError::EmptyTask => f.write_str("task must not be empty"),
            AnswerError::Empty(key) => write!(f, "{key} must not be empty"),
            AnswerError::TooLong(key) => write!(f, "{key} is over {ANSWER_ID_MAX_BYTES} bytes"),
            AnswerError::Unprintable(key) => write!(
                f,
                "{key} must not contain control or invisible formatting characters"
            ),
            AnswerError::MessageTooLong => {
                write!(f, "message is over {ANSWER_MESSAGE_MAX_BYTES} bytes")
            }
        }
    }
}

impl std::error::Error for AnswerError {}

impl TaskAnswerRequest {
    /// The bounds of design §5 that need no state: a task, an option and (when named) a
    /// request, each non-empty, within `ANSWER_ID_MAX_BYTES` and printable (they reach the
    /// audit log and `top`), and a message within `ANSWER_MESSAGE_MAX_BYTES`. The clients run
    /// the same check before connecting.
    pub fn check(&self) -> Result<(), AnswerError> {
        if self.task.is_empty() {
            return Err(AnswerError::EmptyTask);
        }
        let ids = [
            ("request", self.request.as_deref()),
            ("option", Some(&*self.option)),
        ];
        for (key, value) in ids {
            let Some(v) = value else { continue };
            if v.is_empty() {
                return Err(AnswerError::Empty(key));
            }
            if v.len() > ANSWER_ID_MAX_BYTES {
                return Err(AnswerError::TooLong(key));
            }
            if crate::kernel::text::has_unsafe(v) {
                return Err(AnswerError::Unprintable(key));
            }
        }
        if self
            .message
            .as_ref()
            .is_some_and(|m| m.len() > ANSWER_MESSAGE_MAX_BYTES)
        {
            return Err(AnswerError::MessageTooLong);
        }
        Ok(())
    }
}

/// The hub's answer to `task_answer`, sent after the answer's commit:
/// `{"task_answer":{"task":…,"request":…,"option":…,"state":"answered"}}` (`request` is the
/// one answered, also when the line left it out).
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct TaskAnswerReply {
    pub task: String,
    pub request: String,
    pub option: String,
    pub state: String,
}

/// The one `state` of a `TaskAnswerReply` today.
pub const ANSWERED: &str = "answered";

#[cfg(test)]
mod tests;
