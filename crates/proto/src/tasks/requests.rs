//! The task book's side of the requests its tasks' agents wait on (issue 37 design §4, §5;
//! docs/delegation.md "Approvals"): what the book knows of a task handed to its sub-machine
//! `approvals::Approvals`, and that machine's steps turned into the book's actions (commits,
//! answers to the request's source, the `cancel` fallback's cancel).
//!
//! Owns `TaskBook::open_request`, `answer`, `answer_settled`, the expiry step of
//! `handle_timeout` and the approvers' roster check. A relay peer's task's request and a
//! mirror of a worker hub's are routed through `relayed` (issue 37 design §7). Refuses IO, and
//! every rule about a request itself (the machine's).

use super::approvals::{
    AfterExpiry, AnswerRefusal, Answering, Asker, Closed, Decision, Opened, Route, Source,
    TaskFacts,
};
use super::peer::Origin;
use super::records::TaskAudit;
use super::types::{TaskId, TaskState};
use super::{RequestAsk, TaskAction, TaskBook, TaskCommit};
use crate::kernel::ids::IdSource;
use crate::kernel::now::Now;
use crate::wire::approval::TaskAnswerRequest;

impl TaskBook {
    /// A request the agent of `task` asks, from `source` (design §4.2): held open with its
    /// envelope to the delegator, or answered by the fallback at once. A request for a task
    /// that is not running (one being cancelled: its session answers every request
    /// `cancelled` itself) is only logged.
    pub fn open_request(
        &mut self,
        task: &TaskId,
        ask: RequestAsk,
        source: Source,
        now: Now,
        ids: &mut dyn IdSource,
    ) {
        let Some(t) = self.tasks.get(task) else {
            return;
        };
        if t.state != TaskState::Running {
            let line = format!(
                "task {task}: request {} not held: the task is {}",
                ask.seq,
                t.state.as_str()
            );
            self.actions.push_back(TaskAction::Log(line));
            return;
        }
        let route = self.route_of(t.origin.as_ref());
        let facts = TaskFacts {
            task,
            delegator: &t.delegator,
            agent: &t.agent,
            route,
        };
        let (seq, kind, tool) = (ask.seq, ask.kind.tag(), ask.tool_kind.clone());
        match self.approvals.open(facts, ask, source, now, ids) {
            Opened::Held { request, commit } => {
                self.actions.push_back(TaskAction::Log(format!(
                    "task {task}: request {seq} ({kind}, tool kind {}) held as {request} for {}",
                    tool.as_deref().unwrap_or("none"),
                    t.delegator
                )));
                self.actions.push_back(TaskAction::Commit(commit));
                // A peer's task: the request crosses after its commit (design §7).
                if route == Route::Relay {
                    self.send_request(task, &request);
                }
            }
            Opened::AtOnce {
                commit,
                mut decision,
            } => {
                if decision.source == Source::Prompt {
                    decision.answer.message = Some(not_held(commit.audit.first()));
                }
                let why = commit
                    .audit
                    .first()
                    .map_or_else(String::new, |a| format!(" ({})", a.event()));
                self.actions.push_back(TaskAction::Log(format!(
                    "task {task}: request {seq} not held{why}: answered by the fallback {}",
                    decision.answer.option_id.as_deref().unwrap_or("cancelled")
                )));
                self.actions.push_back(TaskAction::Commit(commit));
                self.route(decision);
            }
        }
    }

    /// A decision goes where its request came from.
    pub(super) fn route(&mut self, d: Decision) {
        match d.source {
            Source::Runner => self.actions.push_back(TaskAction::Answer {
                task: d.task,
                seq: d.seq,
                answer: d.answer,
            }),
            // The reply to the parked prompt (design §6); a deny without the answerer's words
            // says who denied it.
            Source::Prompt => {
                let told =
                    self.prompts
                        .answer(&d.task, d.seq, d.answer, "denied by the task's delegator");
                if !told {
                    self.actions.push_back(TaskAction::Log(format!(
                        "task {}: permission prompt {} no longer waits; its decision is dropped",
                        d.task, d.seq
                    )));
                }
            }
            Source::Peer => self.route_to_peer(d),
        }
    }

    /// `task_answer` from `asker` (design §5): the answer taken, its commit for the caller to
    /// stage (the reply and the agent wait for it: `answer_settled`), or the refusal. The
    /// task is visible to its delegator and to every name in `tasks.approvers`; both may
    /// answer.
    pub fn answer(
        &mut self,
        req: &TaskAnswerRequest,
        asker: &str,
    ) -> Result<Answering, AnswerRefusal> {
        let Some(t) = TaskId::parse(&req.task).and_then(|id| self.tasks.get(&id)) else {
            return Err(AnswerRefusal::UnknownTask);
        };
        let approver = self.approvals.is_approver(asker);
        let delegator = t.delegator == asker;
        let who = Asker {
            name: asker,
            sees: delegator || approver,
            may_answer: delegator || approver,
        };
        let facts = TaskFacts {
            task: &t.id,
            delegator: &t.delegator,
            agent: &t.agent,
            route: self.route_of(t.origin.as_ref()),
        };
        let taken = self.approvals.answer(facts, who, req)?;
        // A mirror's answer must reach its worker hub: with no link that carries it now, the
        // request stays open (here and there) rather than an answer being lost (design §7).
        if let Some(peer) = self.unroutable(&taken.decision) {
            self.approvals.answer_settled(&taken.request, false);
            return Err(AnswerRefusal::NoRoute { peer });
        }
        Ok(taken)
    }

    /// The commit of an answer `answer` took was written (`durable`, with the `decision` it
    /// carries): the request closes `answered` and the decision goes to its source. It was
    /// not, or the answerer went away before it: the request is open again (closed at once
    /// if its task ended meanwhile).
    pub fn answer_settled(&mut self, request: &str, durable: bool, decision: Option<Decision>) {
        let Some(task) = self.approvals.answer_settled(request, durable) else {
            return;
        };
        if durable {
            if let Some(d) = decision {
                // A peer's task: its delegating hub hears the request is answered.
                let answered = TaskAudit::RequestAnswered {
                    task: task.as_str().to_owned(),
                    request: request.to_owned(),
                    by: String::new(),
                    option: d.answer.option_id.clone().unwrap_or_default(),
                };
                self.route(d);
                self.tell_closed(&task, &[answered]);
            }
            return;
        }
        let ended = self.tasks.get(&task).map_or(true, |t| t.state.is_final());
        if ended {
            let (store, audit) = self.approvals.close_task(&task, Closed::TaskEnded);
            self.actions.push_back(TaskAction::Commit(TaskCommit {
                store,
                envelope: None,
                audit: audit.clone(),
            }));
            self.tell_closed(&task, &audit);
        }
    }

    /// The step of `handle_timeout` for requests (design §4.3, §4.5): each expired one's
    /// commit, then the fallback: `reject` answers the agent, `cancel` cancels the task as
    /// `cancel` does, with the reason `no answer to request req-… within N s`.
    pub(super) fn expire_requests(&mut self, now: Now, ids: &mut dyn IdSource) {
        if !self
            .approvals
            .poll_timeout()
            .is_some_and(|at| at <= now.mono)
        {
            return;
        }
        let secs = self.approvals.settings().permission_timeout_secs;
        for e in self.approvals.handle_timeout(now, ids) {
            let task = match &e.then {
                AfterExpiry::Answer(d) => Some(d.task.clone()),
                AfterExpiry::CancelTask { task, .. } => Some(task.clone()),
                AfterExpiry::Nothing => None,
            };
            let audit = e.commit.audit.clone();
            self.actions.push_back(TaskAction::Commit(e.commit));
            if let Some(task) = task {
                self.tell_closed(&task, &audit);
            }
            match e.then {
                // A permission prompt is denied with the fallback's reason (design §6).
                AfterExpiry::Answer(mut d) if d.source == Source::Prompt => {
                    d.answer.message = Some(format!("denied: no answer within {secs} s"));
                    self.route(d)
                }
                AfterExpiry::Nothing => {}
                AfterExpiry::Answer(d) => self.route(d),
                AfterExpiry::CancelTask { task, reason } => {
                    let running = self
                        .tasks
                        .get(&task)
                        .is_some_and(|t| t.state == TaskState::Running && t.peer.is_none());
                    if running {
                        self.actions.push_back(TaskAction::Log(format!(
                            "task {task}: cancelled: {reason} (tasks.permission_fallback = \"cancel\")"
                        )));
                        self.cancel_running(&task, Some(reason), now);
                    }
                }
            }
        }
    }

    /// The roster changed (a reload): names of `tasks.approvers` no longer on it are dropped
    /// and returned, for the service log.
    pub fn retain_approvers(&mut self, on_roster: impl Fn(&str) -> bool) -> Vec<String> {
        self.approvals.retain_approvers(on_roster)
    }

    /// Whether `name` may answer every task's requests (`tasks.approvers`).
    pub fn is_approver(&self, name: &str) -> bool {
        self.approvals.is_approver(name)
    }

    /// The delegator of a stored task, for the restart's `expired` envelopes: None for a
    /// task not in the book.
    pub(super) fn local_delegator(&self, task: &TaskId) -> Option<String> {
        self.tasks
            .get(task)
            .map(|t| t.delegator.clone())
            .filter(|d| Origin::parse(d).is_none())
    }
}

/// Why a permission prompt was not held, in the deny its agent reads (design §6): the cap or
/// the route the `AtOnce` commit's record names.
fn not_held(record: Option<&super::TaskAudit>) -> String {
    use super::TaskAudit;
    let why = match record {
        Some(TaskAudit::RequestRefused { why, .. }) => match why.as_str() {
            "max_open_requests" => {
                "the hub holds as many open requests as it may (tasks.max_open_requests)".to_owned()
            }
            "max_request_bytes" => "the request does not fit tasks.max_request_bytes".to_owned(),
            other => format!("the hub could not hold it ({other})"),
        },
        Some(TaskAudit::RequestExpired { reason, .. }) => reason.clone(),
        _ => "the hub could not hold it".to_owned(),
    };
    format!("denied: {why}")
}
