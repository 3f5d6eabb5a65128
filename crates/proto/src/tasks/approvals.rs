//! The task book's requests (issue 37 design §4, §5, §8, §9; SPEC §16.1; docs/delegation.md
//! "Approvals"): `Approvals`, a sub-machine the book holds (PLAN.md §14 "Sub-machines"),
//! that keeps every request a delegated agent waits on from the moment it opens until it is
//! answered, expires or is closed.
//!
//! Owns: the request id (`request_id`, design §4.2's hash), the hub-wide cap
//! (`tasks.max_open_requests`; the per-task cap is the session's), the body of the
//! `task_request` envelope fitted into `tasks.max_request_bytes`, who may answer
//! (`tasks.approvers` beside the delegator, whom the book names), every refusal of
//! `task_answer` with its exact text (`AnswerRefusal`), the clock (`handle_timeout`,
//! `poll_timeout`) and the fallback (`tasks.permission_fallback`: never an allow), the closes
//! a task's cancel and end make, the records `task_status` lists, and the restart's close of
//! what the store still held (`restore`, reason `hub restarted`). Each step comes back as a
//! `TaskCommit` (store op, audit record, envelope), which the book queues as one commit, and
//! where the agent must hear of it a `Decision` the book routes to the request's `Source`.
//!
//! Refuses: IO, the clock (time is passed in), and the task's own state (the book owns the
//! task and tells this machine what it needs through `TaskFacts` and `Asker`). Never puts a
//! title, path, command or message into an audit record or a store row: those reach the
//! delegator in the envelope only (design §9).
//!
//! **Another source of requests** (design §6 headless Claude, §7 across hubs) plugs in by a
//! variant of `Source`: `TaskBook::open_request(task, ask, Source::…, now, ids)` opens one
//! as the runner's does (same id, envelope, cap, audit, expiry), and the book turns every
//! `Decision` for that source into its own action (`Source::Runner` becomes
//! `TaskAction::Answer`; `Source::Prompt`, a headless task's permission prompt, the reply to
//! its parked connection); nothing else here changes but `close_one`, for a prompt whose
//! asker went away.

mod body;
mod steps;

pub use body::{fallback_answer, is_request_id, request_id};
pub use steps::{
    AfterExpiry, AnswerRefusal, Answering, Asker, Closed, Decision, Expiry, Opened, Source,
    TaskFacts,
};

use super::records::{StoredRequest, TaskAudit, TaskStoreOp};
use super::settings::ApprovalSettings;
use super::types::TaskId;
use super::{hub_envelope, rfc3339, TaskCommit};
use crate::acp::{PermissionFallback, RequestAnswer, RequestAsk, RequestKind};
use crate::kernel::ids::IdSource;
use crate::kernel::now::Now;
use crate::wire::approval::{
    ExpiryReason, RequestExpired, RequestOpened, RequestRecord, RequestToolCall, TaskAnswerRequest,
    TaskRequestBody, TASK_REQUEST_KIND,
};
use body::{fit, wire_fallback, wire_options, wire_type};
use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

/// Closed requests remembered for the refusal `request req-… is not open (why)`: the last
/// ones, oldest forgotten first. A request forgotten here is refused as one the task never
/// had, which says less but allows nothing.
pub const CLOSED_KEPT: usize = 4096;

/// One request held open.
#[derive(Debug, Clone)]
struct Held {
    task: TaskId,
    delegator: String,
    seq: u32,
    source: Source,
    ask: RequestAsk,
    opened: Instant,
    opened_ms: i64,
    expires: Instant,
    expires_ms: i64,
    /// An answer was taken and its commit is being written: no longer open to anyone, not
    /// expired by the clock; back to open if the commit fails (`answer_settled`).
    answering: bool,
}

/// The book's requests (module doc). One per book.
#[derive(Debug)]
pub struct Approvals {
    settings: ApprovalSettings,
    /// Open (or being answered), by request id.
    held: BTreeMap<String, Held>,
    /// Closed ones, for the refusal's words: request id → its task and how it closed.
    closed: BTreeMap<String, (TaskId, Closed)>,
    closed_order: VecDeque<String>,
}

impl Approvals {
    pub fn new(settings: ApprovalSettings) -> Approvals {
        Approvals {
            settings,
            held: BTreeMap::new(),
            closed: BTreeMap::new(),
            closed_order: VecDeque::new(),
        }
    }

    pub fn settings(&self) -> &ApprovalSettings {
        &self.settings
    }

    /// Whether `name` is in `tasks.approvers`.
    pub fn is_approver(&self, name: &str) -> bool {
        self.settings.approvers.iter().any(|a| a == name)
    }

    /// Keeps the approvers `keep` says are still roster names (a roster reload); returns the
    /// ones dropped, for the service log. A dropped name stays dropped until the next start.
    pub fn retain_approvers(&mut self, keep: impl Fn(&str) -> bool) -> Vec<String> {
        let (kept, dropped) = self
            .settings
            .approvers
            .drain(..)
            .partition::<Vec<String>, _>(|a| keep(a));
        self.settings.approvers = kept;
        dropped
    }

    /// Requests held open now, hub-wide (those being answered included).
    pub fn open_count(&self) -> usize {
        self.held.len()
    }

    /// Whether `task` has a request open to an answer.
    pub fn has_open(&self, task: &TaskId) -> bool {
        self.held.values().any(|h| h.task == *task && !h.answering)
    }

    fn remember_closed(&mut self, request: String, task: TaskId, why: Closed) {
        if self.closed.insert(request.clone(), (task, why)).is_none() {
            self.closed_order.push_back(request);
        }
        while self.closed_order.len() > CLOSED_KEPT {
            if let Some(old) = self.closed_order.pop_front() {
                self.closed.remove(&old);
            }
        }
    }

    /// A request the agent asks (design §4.2): held open with its envelope, or, past the cap,
    /// for a relay peer's task, or when it cannot be carried, answered by the fallback now.
    pub fn open(
        &mut self,
        t: TaskFacts<'_>,
        ask: RequestAsk,
        source: Source,
        now: Now,
        ids: &mut dyn IdSource,
    ) -> Opened {
        let request = request_id(t.task, &ask);
        let fallback = self.settings.permission_fallback;
        let decision = Decision {
            task: t.task.clone(),
            seq: ask.seq,
            source,
            answer: fallback_answer(&ask, fallback),
        };
        let task = t.task.as_str().to_owned();
        let refused = |why: &str| TaskCommit {
            audit: vec![TaskAudit::RequestRefused {
                task: task.clone(),
                why: why.to_owned(),
            }],
            ..TaskCommit::default()
        };
        if t.remote {
            let commit = TaskCommit {
                audit: vec![TaskAudit::RequestExpired {
                    task: task.clone(),
                    request,
                    fallback: fallback.tag().to_owned(),
                    reason: ExpiryReason::NoRelayRoute.to_string(),
                }],
                ..TaskCommit::default()
            };
            return Opened::AtOnce { commit, decision };
        }
        if self.held.contains_key(&request) || self.closed.contains_key(&request) {
            // The session numbers requests once each; a repeat is an anomaly, never a
            // second envelope for the same id.
            let commit = refused("duplicate_request");
            return Opened::AtOnce { commit, decision };
        }
        if self.held.len() >= self.settings.max_open_requests {
            let commit = refused("max_open_requests");
            return Opened::AtOnce { commit, decision };
        }
        let wait = Duration::from_secs(self.settings.permission_timeout_secs);
        let opened_ms = now.wall.timestamp_millis();
        let expires_ms = opened_ms.saturating_add(wait.as_millis() as i64);
        let body = RequestOpened {
            task: task.clone(),
            request: request.clone(),
            kind: wire_type(ask.kind),
            agent: t.agent.to_owned(),
            tool_call: RequestToolCall {
                id: ask.tool_call_id.clone(),
                title: ask.title.clone(),
                kind: ask.tool_kind.clone(),
                paths: ask.paths.clone(),
                command: ask.command.clone(),
            },
            message: ask.message.clone(),
            schema: ask.schema.clone(),
            options: wire_options(&ask),
            opened_at: rfc3339(opened_ms).unwrap_or_default(),
            expires_at: rfc3339(expires_ms).unwrap_or_default(),
        };
        let Some(body) = fit(body, self.settings.max_request_bytes) else {
            let commit = refused("max_request_bytes");
            return Opened::AtOnce { commit, decision };
        };
        let text = TaskRequestBody::Open(Box::new(body)).to_json();
        let envelope = hub_envelope(t.delegator, t.task, TASK_REQUEST_KIND, text, now, ids);
        let kind = wire_type(ask.kind).as_str().to_owned();
        let commit = TaskCommit {
            store: vec![TaskStoreOp::OpenRequest(StoredRequest {
                request: request.clone(),
                task: task.clone(),
                seq: ask.seq,
                kind: kind.clone(),
                tool_kind: ask.tool_kind.clone(),
                opened_ms,
                expires_ms,
            })],
            envelope: Some(envelope),
            audit: vec![TaskAudit::RequestOpened {
                task,
                request: request.clone(),
                kind,
                tool_kind: ask.tool_kind.clone(),
            }],
        };
        self.held.insert(
            request.clone(),
            Held {
                task: t.task.clone(),
                delegator: t.delegator.to_owned(),
                seq: ask.seq,
                source,
                ask,
                opened: now.mono,
                opened_ms,
                expires: crate::kernel::deadline::after(now.mono, wait),
                expires_ms,
                answering: false,
            },
        );
        Opened::Held { request, commit }
    }

    /// A request the delegation's allow rule `rule` (from 0) let through: its audit record
    /// only (design §2: nobody is asked, nothing is held).
    pub fn preapproved(task: &TaskId, ask: &RequestAsk, rule: usize) -> TaskCommit {
        TaskCommit {
            audit: vec![TaskAudit::RequestPreapproved {
                task: task.as_str().to_owned(),
                request: request_id(task, ask),
                rule: rule + 1,
            }],
            ..TaskCommit::default()
        }
    }

    /// `task_answer` (design §5): every refusal in SPEC §16.1's order (may the asker see the
    /// task, may they answer, which request, is it open, was the option offered, does an
    /// `accept` carry a form), or the answer taken: the request is no longer open to anyone
    /// and waits for its commit (`answer_settled`).
    pub fn answer(
        &mut self,
        t: TaskFacts<'_>,
        asker: Asker<'_>,
        req: &TaskAnswerRequest,
    ) -> Result<Answering, AnswerRefusal> {
        if !asker.sees {
            return Err(AnswerRefusal::UnknownTask);
        }
        if !asker.may_answer {
            return Err(AnswerRefusal::NotAllowed);
        }
        let task = t.task.as_str();
        let request = match &req.request {
            Some(r) => match self.held.get(r) {
                Some(h) if h.task == *t.task && h.answering => {
                    return Err(AnswerRefusal::NotOpen {
                        request: r.clone(),
                        why: Closed::Answered,
                    })
                }
                Some(h) if h.task == *t.task => r.clone(),
                _ => {
                    return Err(match self.closed.get(r) {
                        Some((owner, why)) if owner == t.task => AnswerRefusal::NotOpen {
                            request: r.clone(),
                            why: *why,
                        },
                        _ => AnswerRefusal::NoSuchRequest {
                            task: task.to_owned(),
                            request: crate::kernel::text::for_terminal(r).into_owned(),
                        },
                    })
                }
            },
            None => {
                let open: Vec<&String> = self
                    .held
                    .iter()
                    .filter(|(_, h)| h.task == *t.task && !h.answering)
                    .map(|(id, _)| id)
                    .collect();
                match open[..] {
                    [] => {
                        return Err(AnswerRefusal::NoOpenRequest {
                            task: task.to_owned(),
                        })
                    }
                    [one] => one.clone(),
                    _ => {
                        return Err(AnswerRefusal::SeveralOpen {
                            task: task.to_owned(),
                            count: open.len(),
                        })
                    }
                }
            }
        };
        let Some(h) = self.held.get_mut(&request) else {
            // Invariant: `request` was found in `held` just above.
            return Err(AnswerRefusal::NoOpenRequest {
                task: task.to_owned(),
            });
        };
        if !h.ask.options.iter().any(|o| o.option_id == req.option) {
            return Err(AnswerRefusal::NotOffered {
                option: crate::kernel::text::for_terminal(&req.option).into_owned(),
                offered: h.ask.options.iter().map(|o| o.option_id.clone()).collect(),
            });
        }
        if h.ask.kind == RequestKind::Question && req.option == "accept" {
            let object = req
                .message
                .as_deref()
                .and_then(|m| serde_json::from_str::<serde_json::Value>(m).ok())
                .is_some_and(|v| v.is_object());
            if !object {
                return Err(AnswerRefusal::AcceptNeedsObject);
            }
        }
        h.answering = true;
        let decision = Decision {
            task: h.task.clone(),
            seq: h.seq,
            source: h.source,
            answer: RequestAnswer {
                option_id: Some(req.option.clone()),
                message: req.message.clone(),
            },
        };
        let commit = TaskCommit {
            store: vec![TaskStoreOp::CloseRequest {
                request: request.clone(),
            }],
            envelope: None,
            audit: vec![TaskAudit::RequestAnswered {
                task: task.to_owned(),
                request: request.clone(),
                by: asker.name.to_owned(),
                option: req.option.clone(),
            }],
        };
        Ok(Answering {
            request,
            option: req.option.clone(),
            decision,
            commit,
        })
    }

    /// The commit of an answer taken by `answer` was written (`durable`): the request is
    /// closed `answered`. It was not: the request is open again, with its own expiry, as if
    /// the answer had never come. Returns its task (None for a request not being answered).
    pub fn answer_settled(&mut self, request: &str, durable: bool) -> Option<TaskId> {
        let h = self.held.get_mut(request).filter(|h| h.answering)?;
        let task = h.task.clone();
        if durable {
            self.held.remove(request);
            self.remember_closed(request.to_owned(), task.clone(), Closed::Answered);
        } else {
            h.answering = false;
        }
        Some(task)
    }

    /// Expires every open request whose time is up (design §4.3, §4.5), oldest first.
    pub fn handle_timeout(&mut self, now: Now, ids: &mut dyn IdSource) -> Vec<Expiry> {
        let mut due: Vec<(Instant, String)> = self
            .held
            .iter()
            .filter(|(_, h)| !h.answering && h.expires <= now.mono)
            .map(|(id, h)| (h.expires, id.clone()))
            .collect();
        due.sort();
        let fallback = self.settings.permission_fallback;
        let secs = self.settings.permission_timeout_secs;
        let mut out = Vec::new();
        for (_, request) in due {
            let Some(h) = self.held.remove(&request) else {
                continue;
            };
            self.remember_closed(request.clone(), h.task.clone(), Closed::Expired);
            let reason = ExpiryReason::Timeout { secs };
            let commit =
                self.expired_commit(&h.task, Some(&h.delegator), &request, reason, now, ids);
            let then = match fallback {
                PermissionFallback::Reject => AfterExpiry::Answer(Decision {
                    task: h.task.clone(),
                    seq: h.seq,
                    source: h.source,
                    answer: fallback_answer(&h.ask, fallback),
                }),
                PermissionFallback::Cancel => AfterExpiry::CancelTask {
                    task: h.task.clone(),
                    reason: format!("no answer to request {request} within {secs} s"),
                },
            };
            out.push(Expiry { commit, then });
        }
        out
    }

    /// The commit of a request closed by the fallback: the `expired` envelope to a local
    /// delegator (`delegator` None or a relay peer's task: none), `request_expired`, the
    /// row's close.
    fn expired_commit(
        &self,
        task: &TaskId,
        delegator: Option<&str>,
        request: &str,
        reason: ExpiryReason,
        now: Now,
        ids: &mut dyn IdSource,
    ) -> TaskCommit {
        let fallback = wire_fallback(self.settings.permission_fallback);
        let envelope = delegator
            .filter(|d| super::peer::Origin::parse(d).is_none())
            .map(|d| {
                let body = TaskRequestBody::Expired(RequestExpired {
                    task: task.as_str().to_owned(),
                    request: request.to_owned(),
                    fallback,
                    reason,
                });
                hub_envelope(d, task, TASK_REQUEST_KIND, body.to_json(), now, ids)
            });
        TaskCommit {
            store: vec![TaskStoreOp::CloseRequest {
                request: request.to_owned(),
            }],
            envelope,
            audit: vec![TaskAudit::RequestExpired {
                task: task.as_str().to_owned(),
                request: request.to_owned(),
                fallback: fallback.as_str().to_owned(),
                reason: reason.to_string(),
            }],
        }
    }

    /// Closes every request of `task` still open to an answer, because it was cancelled or
    /// ended (design §4.3): one store op and one audit record each, for the commit of the
    /// task's step. The agent is told by its session (`cancelled`, as ACP requires), not here.
    pub fn close_task(&mut self, task: &TaskId, why: Closed) -> (Vec<TaskStoreOp>, Vec<TaskAudit>) {
        let ids: Vec<String> = self
            .held
            .iter()
            .filter(|(_, h)| h.task == *task && !h.answering)
            .map(|(id, _)| id.clone())
            .collect();
        let mut store = Vec::new();
        let mut audit = Vec::new();
        for request in ids {
            self.held.remove(&request);
            self.remember_closed(request.clone(), task.clone(), why);
            store.push(TaskStoreOp::CloseRequest {
                request: request.clone(),
            });
            audit.push(TaskAudit::RequestClosed {
                task: task.as_str().to_owned(),
                request,
                why: why.audit_why().to_owned(),
            });
        }
        (store, audit)
    }

    /// Closes the one request `request`, still open to an answer, because the agent that
    /// asked stopped waiting for it (a permission prompt whose connection closed): its store
    /// op and `request_closed` record (`why` `cancelled`), or None when it is not open (answered,
    /// being answered, expired, closed). An answer that comes later is refused as for a
    /// cancelled request.
    pub fn close_one(&mut self, request: &str) -> Option<(TaskStoreOp, TaskAudit)> {
        let h = self.held.get(request).filter(|h| !h.answering)?;
        let task = h.task.clone();
        self.held.remove(request);
        self.remember_closed(request.to_owned(), task.clone(), Closed::Cancelled);
        Some((
            TaskStoreOp::CloseRequest {
                request: request.to_owned(),
            },
            TaskAudit::RequestClosed {
                task: task.as_str().to_owned(),
                request: request.to_owned(),
                why: Closed::Cancelled.audit_why().to_owned(),
            },
        ))
    }

    /// The requests the store still held at startup (design §4.6): each closed by the
    /// fallback with the reason `hub restarted`, never allowed; the agent that asked is gone
    /// with the hub. `delegator_of` names a task's delegator (None: the task is not in the
    /// book). One commit per request, oldest first.
    pub fn restore(
        &mut self,
        mut rows: Vec<StoredRequest>,
        delegator_of: &dyn Fn(&TaskId) -> Option<String>,
        now: Now,
        ids: &mut dyn IdSource,
    ) -> Vec<TaskCommit> {
        rows.sort_by(|a, b| (a.opened_ms, &a.task, a.seq).cmp(&(b.opened_ms, &b.task, b.seq)));
        let mut out = Vec::new();
        for r in rows {
            let Some(task) = TaskId::parse(&r.task) else {
                continue;
            };
            let delegator = delegator_of(&task);
            let reason = ExpiryReason::HubRestarted;
            out.push(self.expired_commit(
                &task,
                delegator.as_deref(),
                &r.request,
                reason,
                now,
                ids,
            ));
            self.remember_closed(r.request, task, Closed::Expired);
        }
        out
    }

    /// The open requests of `task`, oldest first, as its record lists them (design §5);
    /// None when it has none.
    pub fn records(&self, task: &TaskId, now: Now) -> Option<Vec<RequestRecord>> {
        let mut open: Vec<(&String, &Held)> = self
            .held
            .iter()
            .filter(|(_, h)| h.task == *task && !h.answering)
            .collect();
        if open.is_empty() {
            return None;
        }
        open.sort_by_key(|(_, h)| h.seq);
        Some(
            open.into_iter()
                .map(|(id, h)| RequestRecord {
                    request: id.clone(),
                    kind: wire_type(h.ask.kind),
                    title: h.ask.title.clone(),
                    tool_kind: h.ask.tool_kind.clone(),
                    options: h.ask.options.iter().map(|o| o.option_id.clone()).collect(),
                    opened_at: rfc3339(h.opened_ms).unwrap_or_default(),
                    expires_at: rfc3339(h.expires_ms).unwrap_or_default(),
                    waiting_ms: now.mono.saturating_duration_since(h.opened).as_millis() as u64,
                })
                .collect(),
        )
    }

    /// When the next open request expires.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.held
            .values()
            .filter(|h| !h.answering)
            .map(|h| h.expires)
            .min()
    }
}

#[cfg(test)]
mod tests;
