//! What `Approvals` hands back (its module doc): who asks and about which task (`TaskFacts`,
//! `Asker`), the source a request came from (`Source`), the steps it decides (`Opened`,
//! `Answering`, `Expiry` with `AfterExpiry`, the `Decision` for the agent), how a request
//! closed (`Closed`), and why an answer is refused, in SPEC §16.1's exact words
//! (`AnswerRefusal`). Plain data; refuses deciding anything.

use crate::acp::RequestAnswer;
use crate::tasks::types::TaskId;
use crate::tasks::TaskCommit;
use std::fmt;

/// Where a request came from, and so where its answer goes (module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The task's ACP session through its runner (`TaskEvent::Request`): answered with
    /// `TaskAction::Answer { task, seq }`.
    Runner,
    /// The task's agent asked through the hub's permission-prompt tool (`task_permission`,
    /// design §6): answered with the reply the hub writes to the connection parked under
    /// `(task, seq)` (`tasks::prompts`).
    Prompt,
}

/// What the book tells this machine about a request's task.
#[derive(Debug, Clone, Copy)]
pub struct TaskFacts<'a> {
    pub task: &'a TaskId,
    /// A roster name, or for a relay peer's task `task-from:<peer>:<id>`.
    pub delegator: &'a str,
    pub agent: &'a str,
    /// The delegator is a relay peer: no route carries a request to it yet (design §7), so a
    /// request gets the fallback at once, reason `no relay route to the delegator`.
    pub remote: bool,
}

/// Who asks to answer, as the book sees them: whether the task is visible to them (its
/// delegator; an approver sees every task's requests) and whether they may answer it.
#[derive(Debug, Clone, Copy)]
pub struct Asker<'a> {
    pub name: &'a str,
    pub sees: bool,
    pub may_answer: bool,
}

/// An answer on its way to where the request came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub task: TaskId,
    pub seq: u32,
    pub source: Source,
    pub answer: RequestAnswer,
}

/// What `open` made of a request.
#[derive(Debug, Clone)]
pub enum Opened {
    /// Held open: the commit carries the `task_request` envelope, `request_opened` and the
    /// store row.
    Held { request: String, commit: TaskCommit },
    /// Not held: the fallback answers it at once (`decision`); the commit records why
    /// (`request_refused` for a cap, `request_expired` for no relay route).
    AtOnce {
        commit: TaskCommit,
        decision: Decision,
    },
}

/// An answer taken (`answer`): its commit (`request_answered`, the row's close) must be
/// durable before the answerer is told and the agent hears it (`answer_settled`).
#[derive(Debug, Clone)]
pub struct Answering {
    pub request: String,
    pub option: String,
    pub decision: Decision,
    pub commit: TaskCommit,
}

/// A request that expired (`handle_timeout`): its commit (the `expired` envelope,
/// `request_expired`, the row's close), then what the fallback does.
#[derive(Debug, Clone)]
pub struct Expiry {
    pub commit: TaskCommit,
    pub then: AfterExpiry,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AfterExpiry {
    /// `reject`: the agent's reject option (else `cancelled`) goes to it.
    Answer(Decision),
    /// `cancel`: the task is cancelled as `cancel` does, ending with `reason`.
    CancelTask { task: TaskId, reason: String },
}

/// How a request stopped being open, in the words of the refusal `is not open (…)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Closed {
    Answered,
    Expired,
    Cancelled,
    TaskEnded,
}

impl Closed {
    /// The refusal's words (SPEC §16.1).
    pub fn words(self) -> &'static str {
        match self {
            Closed::Answered => "answered",
            Closed::Expired => "expired",
            Closed::Cancelled => "cancelled",
            Closed::TaskEnded => "the task ended",
        }
    }

    /// `request_closed`'s `why` (design §9), for the two closes without an answer.
    pub(super) fn audit_why(self) -> &'static str {
        match self {
            Closed::Cancelled => "cancelled",
            _ => "task_ended",
        }
    }
}

/// Why a `task_answer` was refused; `Display` is the error line's exact text (SPEC §16.1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AnswerRefusal {
    /// A task the asker may not see, or none at all: the same words either way.
    UnknownTask,
    /// The asker sees the task but may not answer it.
    NotAllowed,
    NotOpen {
        request: String,
        why: Closed,
    },
    /// The request names no request this task ever had (an id changed, or another task's).
    NoSuchRequest {
        task: String,
        request: String,
    },
    NoOpenRequest {
        task: String,
    },
    SeveralOpen {
        task: String,
        count: usize,
    },
    /// `option` is sanitised for a terminal; `offered` are the request's ids.
    NotOffered {
        option: String,
        offered: Vec<String>,
    },
    /// `accept` of a question without a JSON object in `message` (design §4b).
    AcceptNeedsObject,
}

impl fmt::Display for AnswerRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AnswerRefusal::UnknownTask => f.write_str("unknown task"),
            AnswerRefusal::NotAllowed => f.write_str(
                "invalid task_answer: only the task's delegator or a name in tasks.approvers may answer",
            ),
            AnswerRefusal::NotOpen { request, why } => write!(
                f,
                "invalid task_answer: request {request} is not open ({})",
                why.words()
            ),
            AnswerRefusal::NoSuchRequest { task, request } => {
                write!(f, "invalid task_answer: {task} has no request {request}")
            }
            AnswerRefusal::NoOpenRequest { task } => {
                write!(f, "invalid task_answer: {task} has no open request")
            }
            AnswerRefusal::SeveralOpen { task, count } => write!(
                f,
                "invalid task_answer: {task} has {count} open requests; name one with request"
            ),
            AnswerRefusal::NotOffered { option, offered } => write!(
                f,
                "invalid task_answer: option \"{option}\" was not offered (offered: {})",
                offered.join(", ")
            ),
            AnswerRefusal::AcceptNeedsObject => f.write_str(
                "invalid task_answer: accept needs message to hold the form's content as a JSON object",
            ),
        }
    }
}
