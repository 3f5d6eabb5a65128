//! The permission-prompt tool's asks (issue 37 design §6; docs/delegation.md "Approvals",
//! "Headless tasks"): `Prompts`, a sub-machine the task book holds (PLAN.md §14
//! "Sub-machines"), that keeps, for every task whose agent asks through the hub's
//! `permission_prompt` tool (a headless Claude Code run with `run.headless_mcp`), which
//! prompts wait for a decision and what each was told.
//!
//! A prompt is one `task_permission` verb: the connection that carried it waits, parked by
//! the hub, for exactly one reply. This machine reads the prompt into the same `RequestAsk` an
//! ACP request becomes (`acp::request::read_permission` over the tool's input as the ACP
//! `rawInput`, so paths and command are read as the ACP extraction reads them), numbers it
//! (`seq`, per task, from 1), and turns whatever decides it (the delegator's answer, the
//! fallback, the task's policy, a pre-approval rule, the task's cancel or end) into the one
//! reply, `TaskPermissionReply`, queued for the hub (`poll_answer`) under `(task, seq)`.
//!
//! Owns: which tasks ask this way and their tool kinds (from the manifest's `[tools]`, handed
//! in when the task starts: `TaskEvent::PermissionTool`), the per-task numbering, the prompts
//! still waiting, the tool-use ids a task asked about already (a repeat is refused: the
//! agent asks once per tool use, so a second ask is a replay), the input's cap
//! (`tasks.max_request_bytes`), and the words of each reply. Refuses: deciding (the book and
//! its `Approvals` do), IO, and anything about connections (the hub parks and answers them).

use super::approvals::request_id;
use super::types::TaskId;
use crate::acp::permission::RequestFacts;
use crate::acp::request::read_permission;
use crate::acp::sanitize::Secrets;
use crate::acp::{RequestAnswer, RequestAsk};
use crate::wire::approval::{TaskPermissionReply, TaskPermissionRequest};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;

/// The option a prompt offers to allow it: Claude Code's `behavior` word.
pub const ALLOW_OPTION: &str = "allow";
/// The option a prompt offers to refuse it.
pub const DENY_OPTION: &str = "deny";
/// Tool-use ids remembered per task for the repeat check; the oldest is forgotten first. A
/// task asks once per tool use, so this many is hours of work.
pub const ASKED_KEPT: usize = 1024;

/// One task that asks through the tool.
#[derive(Debug, Default)]
struct Asking {
    /// Native tool name → ACP ToolKind tag (`read`, `edit`, `execute`, …).
    kinds: BTreeMap<String, String>,
    /// The last `seq` given.
    last_seq: u32,
    /// Prompts waiting for their reply: seq → the request id they are held as (the id is
    /// known at once: `approvals::request_id`).
    open: BTreeMap<u32, String>,
    asked: BTreeSet<String>,
    asked_order: VecDeque<String>,
}

/// A decided prompt: the hub writes `reply` to the connection parked under `(task, seq)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PromptAnswer {
    pub task: TaskId,
    pub seq: u32,
    pub reply: TaskPermissionReply,
}

/// A prompt read (`Prompts::read`): what a person sees and what a rule is matched against.
#[derive(Debug, Clone)]
pub struct Prompt {
    pub ask: RequestAsk,
    pub facts: RequestFacts,
    /// The id it is held as, if it is held.
    pub request: String,
}

/// Why a `task_permission` is refused (SPEC §16.1); `Display` is the error line's exact text.
/// The MCP server turns any refusal into a deny carrying this text, so the agent goes on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PromptRefusal {
    /// The asker is not a task identity (a roster agent, or delegation is off).
    NotATask,
    /// The asker's task is not running (cancelling, ended, or unknown to the book).
    NotRunning { task: String },
    /// The task's agent does not ask through the permission tool (an ACP task).
    NoTool { task: String },
    /// The input is over `tasks.max_request_bytes`.
    InputTooLarge { bytes: usize, max_bytes: usize },
    /// The task asked about this tool use already.
    Repeated { tool_use_id: String },
}

impl fmt::Display for PromptRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PromptRefusal::NotATask => f.write_str(
                "invalid task_permission: only a delegated task's own agent may ask (as its task identity)",
            ),
            PromptRefusal::NotRunning { task } => {
                write!(f, "invalid task_permission: {task} is not running")
            }
            PromptRefusal::NoTool { task } => write!(
                f,
                "invalid task_permission: {task} does not ask through the permission tool (only a headless task whose manifest sets run.headless_mcp does)"
            ),
            PromptRefusal::InputTooLarge { bytes, max_bytes } => write!(
                f,
                "invalid task_permission: input is {bytes} bytes, over tasks.max_request_bytes ({max_bytes})"
            ),
            PromptRefusal::Repeated { tool_use_id } => write!(
                f,
                "invalid task_permission: toolUseId {tool_use_id} was asked about already"
            ),
        }
    }
}

impl std::error::Error for PromptRefusal {}

/// The book's prompts (module doc). One per book.
#[derive(Debug, Default)]
pub struct Prompts {
    tasks: BTreeMap<TaskId, Asking>,
    answers: VecDeque<PromptAnswer>,
}

/// The options every prompt offers, as the ACP request it is read as.
fn options() -> Value {
    json!([
        {"optionId": ALLOW_OPTION, "name": "Allow", "kind": "allow_once"},
        {"optionId": DENY_OPTION, "name": "Deny", "kind": "reject_once"},
    ])
}

impl Prompts {
    /// `task`'s agent asks through the tool; `kinds` maps its native tool names to ACP tool
    /// kinds. A second call replaces the kinds and keeps the rest.
    pub fn enable(&mut self, task: &TaskId, kinds: BTreeMap<String, String>) {
        self.tasks.entry(task.clone()).or_default().kinds = kinds;
    }

    /// Whether `task`'s agent asks through the tool.
    pub fn enabled(&self, task: &TaskId) -> bool {
        self.tasks.contains_key(task)
    }

    /// Prompts of `task` waiting for their reply.
    pub fn open_count(&self, task: &TaskId) -> usize {
        self.tasks.get(task).map_or(0, |a| a.open.len())
    }

    /// Reads one prompt of `task` and numbers it; it waits from now on (`decide`, `answer`,
    /// `deny_all` or `gone` ends the wait). `max_input_bytes` is `tasks.max_request_bytes`;
    /// `secrets` are redacted from everything a person will see (the task's token).
    pub fn read(
        &mut self,
        task: &TaskId,
        req: &TaskPermissionRequest,
        max_input_bytes: usize,
        secrets: &Secrets,
    ) -> Result<Prompt, PromptRefusal> {
        let Some(a) = self.tasks.get_mut(task) else {
            return Err(PromptRefusal::NoTool {
                task: task.as_str().to_owned(),
            });
        };
        let bytes = req.input().len();
        if bytes > max_input_bytes {
            return Err(PromptRefusal::InputTooLarge {
                bytes,
                max_bytes: max_input_bytes,
            });
        }
        if a.asked.contains(&req.tool_use_id) {
            return Err(PromptRefusal::Repeated {
                tool_use_id: req.tool_use_id.clone(),
            });
        }
        // Within the cap just checked, and one JSON value (the wire decoded it).
        let input: Value = serde_json::from_str(req.input()).unwrap_or(Value::Null);
        let mut tool_call = json!({
            "toolCallId": req.tool_use_id,
            "title": req.tool_name,
            "rawInput": input,
        });
        if let Some(kind) = a.kinds.get(&req.tool_name) {
            tool_call["kind"] = json!(kind);
        }
        let params = json!({"options": options(), "toolCall": tool_call});
        let Some(read) = read_permission(&params, secrets) else {
            // Invariant: `options()` offers two options every reader keeps.
            return Err(PromptRefusal::NoTool {
                task: task.as_str().to_owned(),
            });
        };
        a.last_seq = a.last_seq.saturating_add(1);
        let mut ask = read.ask;
        ask.seq = a.last_seq;
        let request = request_id(task, &ask);
        a.open.insert(ask.seq, request.clone());
        a.asked.insert(req.tool_use_id.clone());
        a.asked_order.push_back(req.tool_use_id.clone());
        while a.asked_order.len() > ASKED_KEPT {
            if let Some(old) = a.asked_order.pop_front() {
                a.asked.remove(&old);
            }
        }
        Ok(Prompt {
            ask,
            facts: read.facts,
            request,
        })
    }

    /// The reply for prompt `seq` of `task`, if it still waits: queued for the hub. False when
    /// it does not (answered already, its asker gone, never asked).
    pub fn decide(&mut self, task: &TaskId, seq: u32, reply: TaskPermissionReply) -> bool {
        let waiting = self
            .tasks
            .get_mut(task)
            .is_some_and(|a| a.open.remove(&seq).is_some());
        if waiting {
            self.answers.push_back(PromptAnswer {
                task: task.clone(),
                seq,
                reply,
            });
        }
        waiting
    }

    /// A request's decision (the delegator's answer, or the fallback) as the reply: `allow`
    /// allows; anything else denies, with the answer's message, else `why`.
    pub fn answer(&mut self, task: &TaskId, seq: u32, answer: RequestAnswer, why: &str) -> bool {
        let reply = match answer.option_id.as_deref() {
            Some(ALLOW_OPTION) => TaskPermissionReply::allow(),
            _ => TaskPermissionReply::deny(answer.message.unwrap_or_else(|| why.to_owned())),
        };
        self.decide(task, seq, reply)
    }

    /// Denies every prompt of `task` still waiting, with `message` (the task was cancelled,
    /// or ended). Returns how many.
    pub fn deny_all(&mut self, task: &TaskId, message: &str) -> usize {
        let seqs: Vec<u32> = self
            .tasks
            .get(task)
            .map(|a| a.open.keys().copied().collect())
            .unwrap_or_default();
        for &seq in &seqs {
            self.decide(task, seq, TaskPermissionReply::deny(message));
        }
        seqs.len()
    }

    /// The asker of prompt `seq` went away before its reply: it waits no more. Returns the
    /// request id it was held as, for the book to close.
    pub fn gone(&mut self, task: &TaskId, seq: u32) -> Option<String> {
        self.tasks.get_mut(task)?.open.remove(&seq)
    }

    /// The task ended: everything about it is forgotten (its waiting prompts were denied
    /// first, `deny_all`).
    pub fn forget(&mut self, task: &TaskId) {
        self.tasks.remove(task);
    }

    /// The next reply for the hub to write, oldest first.
    pub fn poll_answer(&mut self) -> Option<PromptAnswer> {
        self.answers.pop_front()
    }
}

#[cfg(test)]
mod tests;
