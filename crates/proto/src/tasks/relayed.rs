//! Requests across hubs (issue 37 design §7; docs/delegation.md "Approvals" "Across hubs";
//! docs/relay-protocol.md §3, §8 `task-approvals`): both halves, as book state and
//! `TaskAction::ToPeer` messages.
//!
//! Owns `Relayed`, the sub-machine the book holds (PLAN.md §14 "Sub-machines"): which relay
//! peers' lasting links agreed `task-approvals` now (a hardened link: `mutual-auth` and
//! `frame-mac`; never a claudectl one). And the book's handling of the three messages:
//!
//! - **Worker side** (a task a peer delegated here): its agent's request goes to the peer as
//!   `task_request` when the peer's link carries them (`Route::Relay`; `requests.rs` opens
//!   it), else it gets the fallback at once, reason `no relay route to the delegator`. This
//!   hub keeps the only clock and applies the fallback. The peer's `task_answer` is checked as
//!   a local answer is (still open? offered? the task is that peer's?) and, taken, is applied
//!   after its commit (`TaskAction::AnswerCommit`); any other is refused with a log line and
//!   never applied. Each close of such a request (answered, expired, cancelled, the task
//!   ended) is told to the peer as `task_request_closed`; a new link gets every request still
//!   open again.
//! - **Delegating side** (a task this hub delegated to a peer): the worker's `task_request` is
//!   mirrored in `approvals` (`Source::Peer`) so the delegator gets the same envelope and
//!   answers with the same verb; the answer goes to the worker as `task_answer`
//!   (`route_to_peer`); `task_request_closed` closes the mirror.
//!
//! A peer's message is checked (`check`: bounds, words) before anything is looked up; one
//! that fails, or that names a task the peer was not given (or did not give), is logged
//! through the peer's log budget and dropped. Refuses IO and every rule about a request
//! itself (`approvals`).

use super::approvals::{Decision, Mirrored, PeerClose, Route, Source, TaskFacts};
use super::peer::{valid_remote_task_id, Origin};
use super::records::TaskAudit;
use super::types::{TaskId, TaskState};
use super::{RequestAsk, RequestKind, RequestOption, TaskAction, TaskBook};
use crate::acp::OptionKind;
use crate::kernel::ids::IdSource;
use crate::kernel::now::Now;
use crate::kernel::text::for_terminal;
use crate::relay::message::{Payload, TaskAnswer, TaskRequest, TaskRequestClosed};
use crate::wire::approval::{ExpiryReason, Fallback, TaskAnswerRequest};
use std::collections::BTreeSet;

/// Which relay peers' lasting links carry requests now (`task-approvals` agreed).
#[derive(Debug, Default)]
pub struct Relayed {
    routes: BTreeSet<String>,
}

impl Relayed {
    /// `peer`'s lasting link came up (`approvals`: it agreed `task-approvals`) or went down.
    /// Returns whether requests newly have a route to it (then the open ones go again).
    pub fn set_link(&mut self, peer: &str, up: bool, approvals: bool) -> bool {
        if up && approvals {
            self.routes.insert(peer.to_owned());
            true
        } else {
            self.routes.remove(peer);
            false
        }
    }

    /// Whether a request can reach `peer` now.
    pub fn routes_to(&self, peer: &str) -> bool {
        self.routes.contains(peer)
    }
}

/// A worker's request as this hub holds its mirror: every text sanitised for a terminal
/// (`kernel::text`; the worker's session did it, but a peer's bytes are a peer's), the bounds
/// already checked (`TaskRequest::check`). None for a permission that offers an option of a
/// kind ACP does not have (its answer could not be told from an allow), or a question one of
/// a kind no question has.
pub fn ask_of(r: &TaskRequest) -> Option<RequestAsk> {
    let kind = if r.kind == "question" {
        RequestKind::Question
    } else {
        RequestKind::Permission
    };
    let mut options = Vec::with_capacity(r.options.len());
    for o in &r.options {
        let k = match kind {
            RequestKind::Permission => OptionKind::from_tag(&o.kind)?,
            // A question's options are the hub's own (`acp::question`): kinds the same words
            // as their ids, so the mirror's envelope shows what the worker's would.
            RequestKind::Question => match o.kind.as_str() {
                "accept" => OptionKind::Accept,
                "decline" => OptionKind::Decline,
                "cancel" => OptionKind::Cancel,
                _ => return None,
            },
        };
        options.push(RequestOption {
            option_id: o.option_id.clone(),
            name: for_terminal(&o.name).into_owned(),
            kind: k,
        });
    }
    let clean = |s: &str| for_terminal(s).into_owned();
    Some(RequestAsk {
        seq: 0,
        kind,
        tool_call_id: clean(&r.tool_call.id),
        title: clean(&r.tool_call.title),
        tool_kind: r.tool_call.kind.as_deref().map(clean),
        paths: r.tool_call.paths.iter().map(|p| clean(p)).collect(),
        command: r.tool_call.command.as_deref().map(clean),
        message: r.message.as_deref().map(clean),
        // Checked as a JSON object's text within its cap (`TaskRequest::check`); carried as
        // it came, as the worker's own session carries a form's schema.
        schema: r.schema.clone(),
        options,
    })
}

/// How a worker's `task_request_closed` closes the mirror (checked before).
fn peer_close(c: &TaskRequestClosed) -> Option<PeerClose> {
    Some(match c.state.as_str() {
        "answered" => PeerClose::Answered,
        "cancelled" => PeerClose::Cancelled,
        "task_ended" => PeerClose::TaskEnded,
        "expired" => PeerClose::Expired {
            reason: c.expiry_reason()?,
            fallback: match c.fallback.as_deref() {
                Some("cancel") => Fallback::Cancel,
                _ => Fallback::Reject,
            },
        },
        _ => return None,
    })
}

/// The `task_request_closed` a close's audit record stands for (each close of a request is
/// exactly one record, design §4.3): None for any other record.
fn closed_of(remote_task_id: &str, a: &TaskAudit) -> Option<TaskRequestClosed> {
    let (request, state, reason, fallback) = match a {
        TaskAudit::RequestAnswered { request, .. } => (request, "answered", None, None),
        TaskAudit::RequestExpired {
            request,
            reason,
            fallback,
            ..
        } => {
            // `no relay route` is never told: there was no route to tell it on.
            if ExpiryReason::parse(reason) == Some(ExpiryReason::NoRelayRoute) {
                return None;
            }
            (
                request,
                "expired",
                Some(reason.clone()),
                Some(fallback.clone()),
            )
        }
        TaskAudit::RequestClosed { request, why, .. } => {
            let state = if why == "cancelled" {
                "cancelled"
            } else {
                "task_ended"
            };
            (request, state, None, None)
        }
        _ => return None,
    };
    Some(TaskRequestClosed {
        task_id: remote_task_id.to_owned(),
        request: request.clone(),
        state: state.to_owned(),
        reason,
        fallback,
    })
}

impl TaskBook {
    /// Where a request of a task with this delegator goes: its origin's route when a relay
    /// peer delegated it.
    pub(super) fn route_of(&self, origin: Option<&Origin>) -> Route {
        match origin {
            None => Route::Local,
            Some(o) if self.relayed.routes_to(&o.peer) => Route::Relay,
            Some(_) => Route::NoRoute,
        }
    }

    /// Worker side: the open request `request` of `task` goes to its delegating peer (held
    /// open with `Route::Relay` just before, or still open when a new link came up).
    pub(super) fn send_request(&mut self, task: &TaskId, request: &str) {
        let Some(o) = self.tasks.get(task).and_then(|t| t.origin.clone()) else {
            return;
        };
        if !self.relayed.routes_to(&o.peer) {
            return;
        }
        if let Some(r) = self.approvals.relay_request(request, &o.task_id) {
            self.actions.push_back(TaskAction::ToPeer {
                peer: o.peer,
                payload: Payload::TaskRequest(r),
                handoff: None,
            });
        }
    }

    /// Worker side: the closes among `audit` (a commit of `task`'s, queued just before) told
    /// to the task's delegating peer, when a route carries them; they leave after that commit.
    pub(super) fn tell_closed(&mut self, task: &TaskId, audit: &[TaskAudit]) {
        let Some(o) = self.tasks.get(task).and_then(|t| t.origin.clone()) else {
            return;
        };
        if !self.relayed.routes_to(&o.peer) {
            return;
        }
        for c in audit.iter().filter_map(|a| closed_of(&o.task_id, a)) {
            self.actions.push_back(TaskAction::ToPeer {
                peer: o.peer.clone(),
                payload: Payload::TaskRequestClosed(c),
                handoff: None,
            });
        }
    }

    /// The lasting link with `peer` now carries requests: every request still open of a
    /// task it delegated here goes to it again (the peer keeps one mirror per request id).
    pub(super) fn resend_requests(&mut self, peer: &str) {
        let mine: Vec<TaskId> = self
            .tasks
            .values()
            .filter(|t| t.origin.as_ref().is_some_and(|o| o.peer == peer))
            .filter(|t| !t.state.is_final())
            .map(|t| t.id.clone())
            .collect();
        for task in mine {
            for request in self.approvals.open_of(&task) {
                self.send_request(&task, &request);
            }
        }
    }

    /// Delegating side: a decision about a mirror goes to the worker hub as `task_answer`.
    /// One without an option (a cancel) is not sent: the worker's clock answers it.
    pub(super) fn route_to_peer(&mut self, d: Decision) {
        let Some(option) = d.answer.option_id else {
            return;
        };
        let Some(peer) = self.tasks.get(&d.task).and_then(|t| t.peer.clone()) else {
            return;
        };
        self.actions.push_back(TaskAction::ToPeer {
            peer,
            payload: Payload::TaskAnswer(TaskAnswer {
                task_id: d.task.as_str().to_owned(),
                request: d.request,
                option,
                message: d.answer.message,
            }),
            handoff: None,
        });
    }

    /// Delegating side: `peer`'s `task_request` for our task delegated to it.
    pub(super) fn on_task_request(
        &mut self,
        peer: &str,
        r: TaskRequest,
        now: Now,
        ids: &mut dyn IdSource,
    ) {
        if let Err(e) = r.check() {
            let line = format!("relay: {peer} sent a task_request whose {e}; dropped");
            return self.peer_log(peer, line, now);
        }
        let Some(id) = self.at_peer(peer, &r.task_id) else {
            return self.stray(peer, "task_request", now);
        };
        if !super::approvals::is_request_id(&r.request) {
            let line = format!(
                "relay: {peer} sent a task_request whose request is not req- and 16 hex digits; dropped"
            );
            return self.peer_log(peer, line, now);
        }
        let Some(ask) = ask_of(&r) else {
            let line = format!(
                "relay: {peer} sent a task_request offering an option of a kind ACP has not; dropped"
            );
            return self.peer_log(peer, line, now);
        };
        let Some(t) = self.tasks.get_mut(&id) else {
            return;
        };
        if t.state != TaskState::Running {
            // Being cancelled or settled: the worker closes its request with the task.
            let line = format!(
                "task {id}: request {} from {peer} not mirrored: the task is {}",
                r.request,
                t.state.as_str()
            );
            self.actions.push_back(TaskAction::Log(line));
            return;
        }
        // The peer holds the task: a dropped link does not send it again.
        t.confirmed = true;
        let facts = TaskFacts {
            task: &t.id,
            delegator: &t.delegator,
            agent: &t.agent,
            route: Route::Local,
        };
        let request = r.request.clone();
        match self
            .approvals
            .mirror(facts, r.request, ask, r.expires_at, now, ids)
        {
            Mirrored::Known => {}
            Mirrored::Held { commit } => {
                self.actions.push_back(TaskAction::Log(format!(
                    "task {id}: request {request} of {peer} mirrored for {}",
                    t.delegator
                )));
                self.actions.push_back(TaskAction::Commit(commit));
            }
            Mirrored::Refused { commit, decision } => {
                let why = commit
                    .audit
                    .first()
                    .map_or_else(String::new, |a| format!(" ({})", a.event()));
                self.actions.push_back(TaskAction::Log(format!(
                    "task {id}: request {request} of {peer} not mirrored{why}: {} sent to {peer}",
                    decision
                        .as_ref()
                        .and_then(|d| d.answer.option_id.as_deref())
                        .unwrap_or("nothing")
                )));
                self.actions.push_back(TaskAction::Commit(commit));
                if let Some(d) = decision {
                    self.route_to_peer(d);
                }
            }
        }
    }

    /// Worker side: `peer`'s `task_answer` for a request of a task it delegated here, checked
    /// as a local answer is and, taken, applied once its commit is written.
    pub(super) fn on_task_answer(&mut self, peer: &str, a: TaskAnswer, now: Now) {
        if let Err(e) = a.check() {
            let line = format!("relay: {peer} sent a task_answer whose {e}; refused");
            return self.peer_log(peer, line, now);
        }
        // Looked up under the sender's own origin: only the peer that delegated a task can
        // answer its requests; another peer's answer finds nothing.
        let task = valid_remote_task_id(&a.task_id)
            .then(|| {
                Origin {
                    peer: peer.to_owned(),
                    task_id: a.task_id.clone(),
                }
                .delegator()
            })
            .and_then(|d| self.tasks.values().find(|t| t.delegator == d))
            .map(|t| t.id.clone());
        let Some(task) = task else {
            let line = format!(
                "relay: {peer} sent a task_answer for a task it did not delegate to this hub, or one this hub no longer holds; refused"
            );
            return self.peer_log(peer, line, now);
        };
        let req = TaskAnswerRequest {
            task: task.as_str().to_owned(),
            request: Some(a.request),
            option: a.option,
            message: a.message,
        };
        let Some(t) = self.tasks.get(&task) else {
            return;
        };
        let facts = TaskFacts {
            task: &t.id,
            delegator: &t.delegator,
            agent: &t.agent,
            route: Route::Relay,
        };
        let asker = super::approvals::Asker {
            name: &t.delegator,
            sees: true,
            may_answer: true,
        };
        match self.approvals.answer(facts, asker, &req) {
            Err(refusal) => {
                let line =
                    format!("relay: {peer}'s task_answer for task {task} refused: {refusal}");
                self.peer_log(peer, line, now);
            }
            Ok(taken) => {
                self.actions.push_back(TaskAction::Log(format!(
                    "task {task}: {peer} answers {} with {} (its commit next)",
                    taken.request, taken.option
                )));
                self.actions.push_back(TaskAction::AnswerCommit {
                    commit: taken.commit,
                    request: taken.request,
                    decision: Box::new(taken.decision),
                });
            }
        }
    }

    /// Delegating side: `peer` says its request closed; the mirror follows.
    pub(super) fn on_task_request_closed(
        &mut self,
        peer: &str,
        c: TaskRequestClosed,
        now: Now,
        ids: &mut dyn IdSource,
    ) {
        if let Err(e) = c.check() {
            let line = format!("relay: {peer} sent a task_request_closed whose {e}; dropped");
            return self.peer_log(peer, line, now);
        }
        let Some(id) = self.at_peer(peer, &c.task_id) else {
            return self.stray(peer, "task_request_closed", now);
        };
        let Some(how) = peer_close(&c) else {
            return;
        };
        if let Some(commit) = self.approvals.close_mirror(&id, &c.request, how, now, ids) {
            self.actions.push_back(TaskAction::Log(format!(
                "task {id}: request {} closed at {peer} ({})",
                c.request, c.state
            )));
            self.actions.push_back(TaskAction::Commit(commit));
        }
    }

    /// Whether a decision is for a mirror (`Source::Peer`) whose worker cannot be reached now.
    pub(super) fn unroutable(&self, d: &Decision) -> Option<String> {
        if d.source != Source::Peer {
            return None;
        }
        let peer = self.tasks.get(&d.task)?.peer.clone()?;
        (!self.relayed.routes_to(&peer)).then_some(peer)
    }
}
