//! What `Approvals` hands back (its module doc): who asks and about which task (`TaskFacts`
//! with its `Route`, `Asker`), the source a request came from (`Source`), the steps it decides
//! (`Opened`, `Mirrored`, `Answering`, `Expiry` with `AfterExpiry`, the `Decision` for the
//! agent), how a request closed (`Closed`, and a worker hub's word for a mirror, `PeerClose`),
//! and why an answer is refused, in SPEC §16.1's exact words (`AnswerRefusal`). Plain data;
//! refuses deciding anything.

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
    /// The worker hub of a task this hub delegated to a relay peer (issue 37 design §7): the
    /// request is that hub's, mirrored here (`Approvals::mirror`) so the delegator sees and
    /// answers it as a local one; the answer goes to the worker as `task_answer`, which
    /// decides and keeps the only clock (this hub's expiry of a mirror answers nothing).
    Peer,
}

/// Where a request of the task goes (issue 37 design §5, §7).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// The delegator is a roster name: the `task_request` envelope goes to it.
    Local,
    /// The delegator is a relay peer whose lasting link agreed `task-approvals`: no envelope
    /// here; the book sends the request to that hub (`task_request`).
    Relay,
    /// The delegator is a relay peer without such a link (claudectl, an older agent-hub, a
    /// link without frame-mac, or none now): the fallback at once, reason `no relay route to
    /// the delegator`.
    NoRoute,
}

/// What the book tells this machine about a request's task.
#[derive(Debug, Clone, Copy)]
pub struct TaskFacts<'a> {
    pub task: &'a TaskId,
    /// A roster name, or for a relay peer's task `task-from:<peer>:<id>`.
    pub delegator: &'a str,
    pub agent: &'a str,
    /// Where a request of the task goes.
    pub route: Route,
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
    /// The request's id (what a `task_answer` to a worker hub names).
    pub request: String,
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

/// What `mirror` made of a worker hub's request.
#[derive(Debug, Clone)]
pub enum Mirrored {
    /// Held: the commit carries the delegator's `task_request` envelope and `request_opened`.
    Held { commit: TaskCommit },
    /// Not held (a cap, or an envelope that cannot fit): the commit records why
    /// (`request_refused`), and the decision is the answer the worker is sent at once, as a
    /// local request past the cap gets the fallback (never an allow; None when the request
    /// offers nothing to reject with, and then the worker's own clock answers it).
    Refused {
        commit: TaskCommit,
        decision: Option<Decision>,
    },
    /// Held or closed here already: a resend after a new link, ignored.
    Known,
}

/// How a worker hub says its request closed (`task_request_closed`), for its mirror.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PeerClose {
    /// Answered there (by an approver of that hub, or this hub's answer arrived).
    Answered,
    /// The worker's fallback answered it.
    Expired {
        reason: crate::wire::approval::ExpiryReason,
        fallback: crate::wire::approval::Fallback,
    },
    Cancelled,
    TaskEnded,
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
    /// A mirror of a worker hub's request (`Source::Peer`) outlived the worker's expiry and
    /// its grace: the delegator is told, and nothing is answered (the worker decided).
    Nothing,
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

    /// `request_closed`'s `why` (design §9), for the closes without an answer here:
    /// `cancelled`, `task_ended`, and for a mirror a worker hub said was answered there,
    /// `answered`.
    pub(super) fn audit_why(self) -> &'static str {
        match self {
            Closed::Cancelled => "cancelled",
            Closed::Answered => "answered",
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
    /// The request is a worker hub's (the task runs on relay peer `peer`), and no link that
    /// carries answers is up now: the request stays open here and there.
    NoRoute {
        peer: String,
    },
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
            AnswerRefusal::NoRoute { peer } => write!(
                f,
                "invalid task_answer: the task runs on {peer}, which is not linked now; answer again once it is (the request waits there until it expires)"
            ),
        }
    }
}
