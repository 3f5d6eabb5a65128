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
//! its parked connection; `Source::Peer` a `task_answer` to the worker hub); nothing else here
//! changes for a prompt but `close_one`, for a prompt whose asker went away.
//!
//! **Across hubs** (design §7): on the worker hub a request of a peer's task is opened as any
//! other, but its `Route` says where it goes: `Relay` holds it with no envelope (the book sends
//! `task_request` over the link, `relay_request`), `NoRoute` answers it by the fallback at
//! once. On the delegating hub the worker's request is a **mirror** (`mirror`, source
//! `Source::Peer`): the same envelope, records and answer checks as a local request, the
//! worker's id kept, never in the store (the worker holds the request and sends it again on a
//! new link), closed by the worker's word (`close_mirror`), and expired here only
//! `MIRROR_GRACE` after the worker's own expiry, answering nothing (the worker is the only
//! clock).

mod body;
mod steps;

pub use body::{fallback_answer, is_request_id, request_id};
pub use steps::{
    AfterExpiry, AnswerRefusal, Answering, Asker, Closed, Decision, Expiry, Mirrored, Opened,
    PeerClose, Route, Source, TaskFacts,
};

use super::records::{StoredRequest, TaskAudit, TaskStoreOp};
use super::settings::ApprovalSettings;
use super::types::TaskId;
use super::{hub_envelope, rfc3339, TaskCommit};
use crate::acp::{PermissionFallback, RequestAnswer, RequestAsk, RequestKind};
use crate::kernel::ids::IdSource;
use crate::kernel::now::Now;
use crate::relay::message::{RelayOption, RelayToolCall, TaskRequest};
use crate::wire::approval::Fallback;
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

/// How much longer than the worker hub's own expiry a mirror waits on this hub's clock before
/// it closes by itself (design §7: the mirror never expires before the worker's): the
/// worker's `task_request_closed` normally closes it first; this covers the message's way
/// across and clocks a little apart. Past it the delegator is told the request expired, and
/// nothing is answered.
pub const MIRROR_GRACE: Duration = Duration::from_secs(60);

/// The longest a mirror waits (grace aside), whatever the worker says: the longest
/// `tasks.permission_timeout_secs` (design §8), so a hostile worker's `expires_at` cannot pin a
/// mirror for ever.
pub const MIRROR_MAX_WAIT: Duration = Duration::from_secs(86_400);

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
    /// The expiry's `no answer within N s`: this hub's timeout, or a mirror's whole wait.
    wait_secs: u64,
    /// Kept in the store (a mirror is not: its worker holds the request).
    stored: bool,
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
            request: request.clone(),
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
        if t.route == Route::NoRoute {
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
        // A request for a relay peer crosses as `task_request` (its bounds are the session's;
        // the delegating hub fits its own envelope), so only a local one is fitted here.
        let envelope = match t.route {
            Route::Relay => None,
            _ => {
                let Some(body) = fit(body, self.settings.max_request_bytes) else {
                    let commit = refused("max_request_bytes");
                    return Opened::AtOnce { commit, decision };
                };
                let text = TaskRequestBody::Open(Box::new(body)).to_json();
                Some(hub_envelope(
                    t.delegator,
                    t.task,
                    TASK_REQUEST_KIND,
                    text,
                    now,
                    ids,
                ))
            }
        };
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
            envelope,
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
                wait_secs: self.settings.permission_timeout_secs,
                stored: true,
                answering: false,
            },
        );
        Opened::Held { request, commit }
    }

    /// A worker hub's request for a task this hub delegated to it (design §7), mirrored:
    /// held with the worker's id under `Source::Peer`, its envelope to the delegator as a
    /// local request's (fitted to `tasks.max_request_bytes`, `expiresAt` the worker's expiry
    /// as this hub's clock reads it), `request_opened`; never stored. It waits here
    /// `MIRROR_GRACE` longer than the worker says (at most `MIRROR_MAX_WAIT`). A request held
    /// or closed here already (the worker sends its open requests again on every new link)
    /// is `Known`. Past the hub-wide cap, or unfittable, it is refused as a local one would be,
    /// and the worker is sent the fallback's reject option, when the request has one.
    pub fn mirror(
        &mut self,
        t: TaskFacts<'_>,
        request: String,
        ask: RequestAsk,
        expires_at_ms: u64,
        now: Now,
        ids: &mut dyn IdSource,
    ) -> Mirrored {
        if self.held.contains_key(&request) || self.closed.contains_key(&request) {
            return Mirrored::Known;
        }
        let task = t.task.as_str().to_owned();
        let refused = |why: &str, ask: &RequestAsk| {
            let answer = fallback_answer(ask, PermissionFallback::Reject);
            Mirrored::Refused {
                commit: TaskCommit {
                    audit: vec![TaskAudit::RequestRefused {
                        task: task.clone(),
                        why: why.to_owned(),
                    }],
                    ..TaskCommit::default()
                },
                decision: answer.option_id.is_some().then(|| Decision {
                    task: t.task.clone(),
                    request: request.clone(),
                    seq: ask.seq,
                    source: Source::Peer,
                    answer,
                }),
            }
        };
        if self.held.len() >= self.settings.max_open_requests {
            return refused("max_open_requests", &ask);
        }
        let opened_ms = now.wall.timestamp_millis();
        let left_ms = i64::try_from(expires_at_ms)
            .unwrap_or(i64::MAX)
            .saturating_sub(opened_ms)
            .clamp(0, MIRROR_MAX_WAIT.as_millis() as i64);
        let left = Duration::from_millis(left_ms as u64);
        let expires_ms = opened_ms.saturating_add(left_ms);
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
            return refused("max_request_bytes", &ask);
        };
        let text = TaskRequestBody::Open(Box::new(body)).to_json();
        let envelope = hub_envelope(t.delegator, t.task, TASK_REQUEST_KIND, text, now, ids);
        let kind = wire_type(ask.kind).as_str().to_owned();
        let commit = TaskCommit {
            store: Vec::new(),
            envelope: Some(envelope),
            audit: vec![TaskAudit::RequestOpened {
                task,
                request: request.clone(),
                kind,
                tool_kind: ask.tool_kind.clone(),
            }],
        };
        self.held.insert(
            request,
            Held {
                task: t.task.clone(),
                delegator: t.delegator.to_owned(),
                seq: ask.seq,
                source: Source::Peer,
                ask,
                opened: now.mono,
                opened_ms,
                expires: crate::kernel::deadline::after(
                    crate::kernel::deadline::after(now.mono, left),
                    MIRROR_GRACE,
                ),
                expires_ms,
                wait_secs: left.as_secs(),
                stored: false,
                answering: false,
            },
        );
        Mirrored::Held { commit }
    }

    /// The worker hub says its request `request` of `task` closed (`task_request_closed`):
    /// the mirror closes the same way, with one audit record (`request_expired` with the
    /// worker's reason and fallback, and the delegator's `expired` envelope; else
    /// `request_closed`). None for a request this hub holds no open mirror of for that task
    /// (closed here already, being answered here, or never mirrored).
    pub fn close_mirror(
        &mut self,
        task: &TaskId,
        request: &str,
        how: PeerClose,
        now: Now,
        ids: &mut dyn IdSource,
    ) -> Option<TaskCommit> {
        let h = self.held.get(request)?;
        if h.task != *task || h.source != Source::Peer || h.answering {
            return None;
        }
        let h = self.held.remove(request)?;
        let (why, commit) = match how {
            PeerClose::Expired { reason, fallback } => {
                let commit = self.expired_commit(
                    task,
                    Some(&h.delegator),
                    request,
                    (reason, fallback),
                    false,
                    now,
                    ids,
                );
                (Closed::Expired, commit)
            }
            other => {
                let why = match other {
                    PeerClose::Answered => Closed::Answered,
                    PeerClose::Cancelled => Closed::Cancelled,
                    _ => Closed::TaskEnded,
                };
                let commit = TaskCommit {
                    audit: vec![TaskAudit::RequestClosed {
                        task: task.as_str().to_owned(),
                        request: request.to_owned(),
                        why: why.audit_why().to_owned(),
                    }],
                    ..TaskCommit::default()
                };
                (why, commit)
            }
        };
        self.remember_closed(request.to_owned(), task.clone(), why);
        Some(commit)
    }

    /// The `task_request` that carries the open request `request` to the delegating hub,
    /// which knows the task as `remote_task_id` (design §7); None for a request not open.
    pub fn relay_request(&self, request: &str, remote_task_id: &str) -> Option<TaskRequest> {
        let h = self.held.get(request).filter(|h| !h.answering)?;
        Some(TaskRequest {
            task_id: remote_task_id.to_owned(),
            request: request.to_owned(),
            kind: h.ask.kind.tag().to_owned(),
            tool_call: RelayToolCall {
                id: h.ask.tool_call_id.clone(),
                title: h.ask.title.clone(),
                kind: h.ask.tool_kind.clone(),
                paths: h.ask.paths.clone(),
                command: h.ask.command.clone(),
            },
            message: h.ask.message.clone(),
            schema: h.ask.schema.clone(),
            options: h
                .ask
                .options
                .iter()
                .map(|o| RelayOption {
                    option_id: o.option_id.clone(),
                    name: o.name.clone(),
                    kind: o.kind.tag().to_owned(),
                })
                .collect(),
            expires_at: u64::try_from(h.expires_ms).unwrap_or(0),
        })
    }

    /// The requests of `task` open to an answer, oldest first (a relink sends them again).
    pub fn open_of(&self, task: &TaskId) -> Vec<String> {
        let mut open: Vec<(&String, &Held)> = self
            .held
            .iter()
            .filter(|(_, h)| h.task == *task && !h.answering)
            .collect();
        open.sort_by_key(|(_, h)| (h.opened, h.seq));
        open.into_iter().map(|(id, _)| id.clone()).collect()
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
            request: request.clone(),
            seq: h.seq,
            source: h.source,
            answer: RequestAnswer {
                option_id: Some(req.option.clone()),
                message: req.message.clone(),
            },
        };
        let store = if h.stored {
            vec![TaskStoreOp::CloseRequest {
                request: request.clone(),
            }]
        } else {
            Vec::new()
        };
        let commit = TaskCommit {
            store,
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
        let mut out = Vec::new();
        for (_, request) in due {
            let Some(h) = self.held.remove(&request) else {
                continue;
            };
            self.remember_closed(request.clone(), h.task.clone(), Closed::Expired);
            let secs = h.wait_secs;
            let reason = ExpiryReason::Timeout { secs };
            let how = (reason, wire_fallback(fallback));
            let commit = self.expired_commit(
                &h.task,
                Some(&h.delegator),
                &request,
                how,
                h.stored,
                now,
                ids,
            );
            let then = match (h.source, fallback) {
                // A mirror: the worker hub answered its agent by its own fallback already.
                (Source::Peer, _) => AfterExpiry::Nothing,
                (_, PermissionFallback::Reject) => AfterExpiry::Answer(Decision {
                    task: h.task.clone(),
                    request: request.clone(),
                    seq: h.seq,
                    source: h.source,
                    answer: fallback_answer(&h.ask, fallback),
                }),
                (_, PermissionFallback::Cancel) => AfterExpiry::CancelTask {
                    task: h.task.clone(),
                    reason: format!("no answer to request {request} within {secs} s"),
                },
            };
            out.push(Expiry { commit, then });
        }
        out
    }

    /// The commit of a request closed by a fallback (`how`: why, and which fallback): the
    /// `expired` envelope to a local delegator (`delegator` None or a relay peer's task:
    /// none), `request_expired`, the row's close when it was `stored`.
    #[allow(clippy::too_many_arguments)]
    fn expired_commit(
        &self,
        task: &TaskId,
        delegator: Option<&str>,
        request: &str,
        how: (ExpiryReason, Fallback),
        stored: bool,
        now: Now,
        ids: &mut dyn IdSource,
    ) -> TaskCommit {
        let (reason, fallback) = how;
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
        let store = if stored {
            vec![TaskStoreOp::CloseRequest {
                request: request.to_owned(),
            }]
        } else {
            Vec::new()
        };
        TaskCommit {
            store,
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
            let stored = self.held.remove(&request).is_some_and(|h| h.stored);
            self.remember_closed(request.clone(), task.clone(), why);
            if stored {
                store.push(TaskStoreOp::CloseRequest {
                    request: request.clone(),
                });
            }
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
            let how = (
                ExpiryReason::HubRestarted,
                wire_fallback(self.settings.permission_fallback),
            );
            out.push(self.expired_commit(
                &task,
                delegator.as_deref(),
                &r.request,
                how,
                true,
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
        open.sort_by_key(|(_, h)| (h.opened, h.seq));
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

    /// Where the open request `request` came from; None for one not held.
    pub fn source_of(&self, request: &str) -> Option<Source> {
        self.held.get(request).map(|h| h.source)
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
