//! Delegated work across hubs (docs/delegation.md "Across hubs"; the task messages in
//! docs/relay-protocol.md §8): both halves, as book state and `TaskAction::ToPeer` messages,
//! for claudectl 0.64 and 0.92 peers and for agent-hub peers alike.
//!
//! Delegator side: a task with `peer` waits for that peer's lasting link, goes out as
//! `delegate_task` (with `agent` only to an agent-hub peer: claudectl reads none), and is
//! settled by the peer's `task_handoff`: `completed`, `failed`, or `refused` when the handoff
//! says `refused: true` (claudectl 0.92: the task never started); its `git_ref` and
//! `verifications` go into the outcome body, bounded (`body::PeerReport`). Its timeout is kept
//! here, and a cancel is a `task_interrupt` stop with a grace for the peer's answer. A
//! `delegate_task` sent on a link that dropped before the peer answered for it is sent again
//! on the next link; the peer ignores a task id it already holds, so the task runs once
//! (claudectl 0.92 answers such a resend "task <id> already exists", refused: taken as the
//! peer's word that it holds the task, not as a refusal).
//!
//! Worker side: a `delegate_task` from a peer allowed to delegate (`relay.peers` `delegate =
//! true`) becomes an ordinary local task whose delegator is its `Origin`. It is answered with
//! `task_status` running at once and every `tasks.peer_status_secs`; its one outcome becomes
//! a final `task_handoff`, kept until confirmed: acked by an agent-hub peer, or still on the
//! link it went out on `V0_HANDOFF_GRACE` later for a claudectl one (claudectl acks nothing);
//! a link that drops first gets it again on the next link. A task this hub cannot start is
//! answered as claudectl 0.92 answers one: a `failed` handoff with `refused: true`, "Could not
//! start the task: <why>" (`refusal_handoff`). `task_interrupt` stop from the delegating peer
//! cancels (answered as claudectl does, a failed handoff "Stopped by controller"); nudge and
//! reroute get a status; another peer's interrupt finds nothing.
//!
//! Refuses IO; relay sessions and sockets are `event_loop::relay_io`'s.

use super::body;
use super::types::{TaskId, TaskState};
use super::{cancelling_commit, ms_between, running_commit, Ending, TaskAction, TaskBook};
use crate::kernel::ids::IdSource;
use crate::kernel::now::Now;
use crate::relay::message::{
    Ack, DelegateTask, DependencyGraph, Payload, TaskContext, TaskHandoff, TaskInterrupt,
    TaskStats, TaskStatus,
};
use crate::wire::{DelegateRequest, TaskProgress};
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

/// How long a peer has to answer a cancel (`task_interrupt` stop) with its handoff before the
/// task is settled `cancelled` here anyway.
pub const CANCEL_GRACE: Duration = Duration::from_secs(30);
/// A final handoff sent to a v0 peer is taken as received once the link it went out on is
/// still the peer's link this long after (docs/relay-protocol.md §2.6: a v0 sender must send
/// it again if that link drops).
pub const V0_HANDOFF_GRACE: Duration = Duration::from_secs(5);
/// Final handoffs kept unconfirmed for one peer at most; beyond it the oldest is dropped with
/// a log line (a peer that never links again cannot grow the hub).
pub const MAX_PENDING_HANDOFFS: usize = 1024;
/// Log lines a peer's task messages may cause at once, and the refill of that budget.
pub const PEER_LOG_BURST: u32 = 10;
pub const PEER_LOG_REFILL: Duration = Duration::from_secs(6);
/// The agent a peer's `delegate_task` without `agent` runs (the 000 seed's default).
pub const DEFAULT_PEER_AGENT: &str = "claude";
/// How long after a claudectl peer's `delegate_task` arrived the first report about it (its
/// `task_status`, or the handoff of a task refused or done that soon) may go out. claudectl
/// 0.92's `relay delegate` records the task in its ledger only after its one-shot's 250 ms
/// wait, and its serve reads reports once a second, dropping one for a task not yet in the
/// ledger ("not a task we delegated, ignored"): a handoff sent sooner is lost for good and the
/// task stays `delegated` there (found by scripts/claudectl-interop.sh). 2 s covers both with
/// room; an agent-hub peer (v1 link) gets its reports at once.
pub const CLAUDECTL_REPORT_DELAY: Duration = Duration::from_secs(2);
/// Held reports remembered at most (one per `delegate_task` of the last 2 s); past it a
/// report goes at once rather than the book growing.
pub const MAX_REPORT_HOLDS: usize = 4096;
/// The v0 summary of a task the delegating peer stopped (what claudectl's own worker says).
pub const STOPPED_BY_CONTROLLER: &str = "Stopped by controller";
/// How the summary of a task this hub could not start begins (claudectl 0.92's words).
pub const COULD_NOT_START: &str = "Could not start the task: ";

const ORIGIN_PREFIX: &str = "task-from:";

/// Worker side: who delegated a task over the relay. Its text form is the task's
/// `delegator`, `task-from:<peer>:<task id there>`: in the reserved `task-` namespace, so no
/// roster name can ever be mistaken for it (or see the task).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    pub peer: String,
    pub task_id: String,
}

impl Origin {
    pub fn delegator(&self) -> String {
        format!("{ORIGIN_PREFIX}{}:{}", self.peer, self.task_id)
    }

    pub fn parse(delegator: &str) -> Option<Origin> {
        let (peer, task_id) = delegator.strip_prefix(ORIGIN_PREFIX)?.split_once(':')?;
        (crate::kernel::names::valid_peer_id(peer) && valid_remote_task_id(task_id)).then(|| {
            Origin {
                peer: peer.to_owned(),
                task_id: task_id.to_owned(),
            }
        })
    }
}

/// A peer's task id: 1–128 bytes of `[A-Za-z0-9._:-]` (claudectl's are UUIDs; ours are
/// `task-<hex>`). Anything else is refused before it reaches a log or the store.
pub fn valid_remote_task_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 128
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'))
}

/// What a lasting relay link with a peer can do, as the server tells the book with the link
/// (`TaskBook::handle_peer_link`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LinkTerms {
    /// An agent-hub peer: it reads `agent` in our `delegate_task` and acks final handoffs
    /// both ways. Not the link's proto: a claudectl link of any version is not one.
    pub agent_hub: bool,
    /// The link agreed `task-approvals` (only a hardened agent-hub link can): a task's
    /// requests cross it (issue 37 design §7, `tasks::relayed`).
    pub approvals: bool,
}

/// What became of a peer's `delegate_task`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PeerSubmit {
    Accepted(TaskId),
    /// A task id this hub already holds from that peer (a resend): nothing changes.
    Duplicate,
    /// Refused; the peer has been sent a failed handoff saying why.
    Refused(String),
}

/// A final handoff not yet confirmed by the peer.
#[derive(Debug, Clone)]
pub(super) struct PendingHandoff {
    task_id: String,
    handoff: TaskHandoff,
    /// When it went out on the current link; None: to send on the next.
    sent_at: Option<Instant>,
}

/// The `task_handoff` for a task's ending: `completed`, or `failed` with the reason; a task
/// that failed or was refused before any process ran (`started` false) is answered as one
/// that could not start (`refusal_handoff`), as claudectl 0.92 does.
pub(super) fn handoff(
    o: &Origin,
    e: &Ending<'_>,
    text: &str,
    stopped: bool,
    started: bool,
    meter: &super::meter::Meter,
) -> TaskHandoff {
    if !started && matches!(e.state, TaskState::Refused | TaskState::Failed) {
        return refusal_handoff(&o.task_id, e.reason.as_deref().unwrap_or(e.state.as_str()));
    }
    let state = if e.state == TaskState::Completed {
        "completed"
    } else {
        "failed"
    };
    let summary = match (e.state, stopped) {
        (TaskState::Completed, _) => text.to_owned(),
        (TaskState::Cancelled, true) => STOPPED_BY_CONTROLLER.to_owned(),
        _ => {
            let why = e.reason.as_deref().unwrap_or(e.state.as_str());
            if text.is_empty() {
                format!("{}: {why}", e.state.as_str())
            } else {
                format!("{}: {why}\n\n{text}", e.state.as_str())
            }
        }
    };
    // Issue 38 design §7: claudectl's totals (0 when unknown, as it writes them) and our
    // `usage` object, which says whether they were reported.
    let (total_tokens, total_cost_usd, usage) = super::peer_usage::to_handoff(meter);
    TaskHandoff {
        task_id: o.task_id.clone(),
        state: state.to_owned(),
        summary,
        artifacts: Vec::new(),
        git_ref: None,
        total_cost_usd,
        total_tokens,
        model: None,
        usage: Some(usage),
        refused: false,
        verifications: Vec::new(),
    }
}

/// The handoff of a peer's task this hub could not start, in claudectl 0.92's shape: `failed`,
/// `refused: true`, "Could not start the task: <why>", nothing else set (`artifacts` `[]`,
/// `git_ref` null, totals 0). A 0.64 reader ignores the `refused` key (relay-compat.md:
/// extra keys are ignored) and shows the summary.
pub fn refusal_handoff(task_id: &str, why: &str) -> TaskHandoff {
    TaskHandoff {
        task_id: task_id.to_owned(),
        state: "failed".to_owned(),
        summary: format!("{COULD_NOT_START}{why}"),
        artifacts: Vec::new(),
        git_ref: None,
        total_cost_usd: 0.0,
        total_tokens: 0,
        model: None,
        usage: None,
        refused: true,
        verifications: Vec::new(),
    }
}

/// Whether a refusal's summary is claudectl 0.92's "task <id> already exists" for our task
/// `id` (relay-compat-0.92.md §5: its answer to an id it started within the hour).
fn is_already_exists(summary: &str, id: &TaskId) -> bool {
    let want = format!("task {id} already exists");
    let s = summary.trim();
    s == want || s.strip_prefix(COULD_NOT_START.trim_end()).map(str::trim) == Some(want.as_str())
}

fn stats(elapsed_ms: u64) -> TaskStats {
    TaskStats {
        tokens_used: 0,
        cost_usd: 0.0,
        context_pct: 0u8.into(),
        files_modified: Vec::new(),
        elapsed_secs: Some(elapsed_ms / 1000),
        last_activity: None,
    }
}

impl TaskBook {
    /// Peers this hub runs delegated work for (`delegate = true`).
    pub fn set_accept_from(&mut self, peers: impl IntoIterator<Item = String>) {
        self.accept_from = peers.into_iter().collect();
    }

    pub fn accepts_from(&self, peer: &str) -> bool {
        self.accept_from.contains(peer)
    }

    /// Worker side: a peer's `delegate_task`. A refusal is answered at once with a failed
    /// `refused: true` handoff and no `task_status` before it (claudectl shows it to its
    /// user), never silence; only a task id that is not one (`valid_remote_task_id`) is
    /// dropped unanswered, so no hostile text is echoed.
    ///
    /// A task id this hub still holds from that peer, running or settled, is `Duplicate`:
    /// ignored, not refused. claudectl 0.92 refuses such an id ("task <id> already exists"),
    /// but a refusal would settle the delegator's copy as refused while the work runs, or
    /// ran, here; our delegator resends only a task it heard nothing of, and this hub's
    /// handoff of it (kept until confirmed) is what settles it, exactly once
    /// (docs/delegation.md "Across hubs").
    pub fn submit_from_peer(
        &mut self,
        peer: &str,
        d: DelegateTask,
        now: Now,
        ids: &mut dyn IdSource,
    ) -> PeerSubmit {
        if !valid_remote_task_id(&d.task_id) {
            self.peer_log(
                peer,
                format!("relay: {peer} sent delegate_task with a task id that is not 1-128 bytes of [A-Za-z0-9._:-]; ignored"),
                now,
            );
            return PeerSubmit::Refused("bad task id".to_owned());
        }
        let origin = Origin {
            peer: peer.to_owned(),
            task_id: d.task_id.clone(),
        };
        let delegator = origin.delegator();
        if self.tasks.values().any(|t| t.delegator == delegator) {
            return PeerSubmit::Duplicate;
        }
        if self.links.get(peer) != Some(&true) && self.report_hold.len() < MAX_REPORT_HOLDS {
            self.report_hold.insert(
                (peer.to_owned(), d.task_id.clone()),
                crate::kernel::deadline::after(now.mono, CLAUDECTL_REPORT_DELAY),
            );
        }
        let refuse = |book: &mut TaskBook, why: String| {
            let h = refusal_handoff(&d.task_id, &why);
            book.queue_handoff(origin.clone(), h, now);
            let line = format!(
                "relay: delegate_task {} from {peer} refused: {why}",
                d.task_id
            );
            book.peer_log(peer, line, now);
            PeerSubmit::Refused(why)
        };
        if !self.accept_from.contains(peer) {
            let why = format!(
                "this hub does not take delegated work from {peer} (relay.peers delegate = false)"
            );
            return refuse(self, why);
        }
        let cwd = match d.cwd.clone().or_else(|| {
            self.config
                .cwd_roots
                .first()
                .map(|r| r.display().to_string())
        }) {
            Some(c) => c,
            None => return refuse(self, "no cwd given and tasks.cwd_roots is empty".to_owned()),
        };
        let req = DelegateRequest {
            agent: d.agent.unwrap_or_else(|| DEFAULT_PEER_AGENT.to_owned()),
            cwd,
            prompt: d.prompt,
            timeout_secs: None,
            progress_secs: None,
            peer: None,
            // A peer's task runs under this hub's operator bound: v0 `delegate_task` carries
            // no policy of its own.
            permission: None,
            allow: None,
            // No follow-ups across hubs yet (issue 38 design §7): its session closes at once.
            keep_secs: Some(0),
            requires: None,
            max_cost_usd: None,
            max_tokens: None,
            allow_unmetered: None,
        };
        match self.insert(req, &delegator, Some(origin.clone()), now, ids) {
            Err(r) => refuse(self, r.to_string()),
            Ok(id) => {
                // v0: `task_status` running at once, then periodically (relay-compat.md).
                self.send_status(&id, now);
                PeerSubmit::Accepted(id)
            }
        }
    }

    /// Worker side: `task_status` running for a local task a peer delegated, and the next
    /// one's time.
    fn send_status(&mut self, id: &TaskId, now: Now) {
        let every = Duration::from_secs(self.config.peer_status_secs.max(1));
        let Some(t) = self.tasks.get_mut(id) else {
            return;
        };
        let Some(o) = t.origin.clone() else {
            return;
        };
        t.peer_timer = Some(crate::kernel::deadline::after(now.mono, every));
        if let Some(&hold) = self
            .report_hold
            .get(&(o.peer.clone(), o.task_id.clone()))
            .filter(|&&h| h > now.mono)
        {
            // A claudectl peer could not take it yet: the first status goes at the hold.
            t.peer_timer = Some(hold);
            return;
        }
        let elapsed = t
            .started_ms
            .map_or(0, |s| ms_between(s, now.wall.timestamp_millis()));
        if !self.links.contains_key(&o.peer) {
            return; // Statuses are not kept: the next one, or the handoff, says more.
        }
        let payload = Payload::TaskStatus(TaskStatus {
            task_id: o.task_id,
            state: "running".to_owned(),
            stats: stats(elapsed),
        });
        self.actions.push_back(TaskAction::ToPeer {
            peer: o.peer,
            payload,
            handoff: None,
        });
    }

    /// Worker side: a final handoff is kept until confirmed and sent now if the peer is
    /// linked.
    pub(super) fn queue_handoff(&mut self, o: Origin, h: TaskHandoff, now: Now) {
        let pending = self.handoffs.entry(o.peer.clone()).or_default();
        pending.retain(|p| p.task_id != o.task_id);
        if pending.len() >= MAX_PENDING_HANDOFFS {
            let old = pending.remove(0);
            self.actions.push_back(TaskAction::Log(format!(
                "relay: handoff of {} for {} dropped unconfirmed: more than {MAX_PENDING_HANDOFFS} wait for that peer",
                old.task_id, o.peer
            )));
        }
        let pending = self.handoffs.entry(o.peer.clone()).or_default();
        pending.push(PendingHandoff {
            task_id: o.task_id,
            handoff: h,
            sent_at: None,
        });
        self.pump_handoffs(&o.peer, now);
    }

    fn pump_handoffs(&mut self, peer: &str, now: Now) {
        if !self.links.contains_key(peer) {
            return;
        }
        let Some(pending) = self.handoffs.get_mut(peer) else {
            return;
        };
        let holds = &self.report_hold;
        let held = |task: &str| {
            holds
                .get(&(peer.to_owned(), task.to_owned()))
                .is_some_and(|&h| h > now.mono)
        };
        for p in pending
            .iter_mut()
            .filter(|p| p.sent_at.is_none() && !held(&p.task_id))
        {
            p.sent_at = Some(now.mono);
            self.actions.push_back(TaskAction::ToPeer {
                peer: peer.to_owned(),
                payload: Payload::TaskHandoff(p.handoff.clone()),
                handoff: Some(p.task_id.clone()),
            });
        }
    }

    /// A v1 peer acked our handoff of its task `task_id`: it has it.
    pub fn handle_peer_acked(&mut self, peer: &str, task_id: &str) {
        if let Some(pending) = self.handoffs.get_mut(peer) {
            pending.retain(|p| p.task_id != task_id);
        }
    }

    /// Handoffs waiting for `peer` (a test and `status` figure).
    pub fn pending_handoffs(&self, peer: &str) -> usize {
        self.handoffs.get(peer).map_or(0, Vec::len)
    }

    /// The lasting relay link with `peer` is up or down. `terms.agent_hub` means "an
    /// agent-hub peer": it reads `agent` in our `delegate_task` and acks our handoffs (and
    /// expects its own acked); it is not the link's proto. A claudectl link is not one
    /// whatever proto it speaks (0.92 speaks proto 1 but, like 0.64, acks nothing and reads
    /// no `agent`), so its handoffs are confirmed by `V0_HANDOFF_GRACE` (docs/delegation.md
    /// "Across hubs"). `terms.approvals`: the link carries requests (`tasks::relayed`); the
    /// requests still open of tasks the peer delegated here go to it again.
    pub fn handle_peer_link(
        &mut self,
        peer: &str,
        up: bool,
        terms: LinkTerms,
        now: Now,
        ids: &mut dyn IdSource,
    ) {
        let routed = self.relayed.set_link(peer, up, terms.approvals);
        self.rooms.link(peer, up, terms.agent_hub);
        if up {
            self.links.insert(peer.to_owned(), terms.agent_hub);
            if routed {
                self.resend_requests(peer);
            }
            self.pump_peer(peer, now);
            // Every handoff still unconfirmed goes out on the new link, also one sent on the
            // link this one replaced (its ack, or its 5 s, may have been lost with it); the
            // peer acks or ignores a second copy.
            if let Some(pending) = self.handoffs.get_mut(peer) {
                for p in pending.iter_mut() {
                    p.sent_at = None;
                }
            }
            self.pump_handoffs(peer, now);
            return;
        }
        self.links.remove(peer);
        if let Some(pending) = self.handoffs.get_mut(peer) {
            for p in pending.iter_mut() {
                p.sent_at = None;
            }
        }
        let mine: Vec<(TaskId, TaskState)> = self
            .tasks
            .values()
            .filter(|t| t.peer.as_deref() == Some(peer) && t.origin.is_none() && !t.confirmed)
            .map(|t| (t.id.clone(), t.state))
            .collect();
        for (id, state) in mine {
            match state {
                TaskState::Running => {
                    if let Some(t) = self.tasks.get_mut(&id) {
                        t.needs_send = true;
                    }
                }
                TaskState::Cancelling => {
                    let why = format!(
                        "cancelled; the link with {peer} dropped before it answered for the task"
                    );
                    self.settle(&id, Ending::bare(TaskState::Cancelled, why, 0), now, ids);
                }
                _ => {}
            }
        }
    }

    /// Delegator side: every task for `peer` that must go out, sent, if the peer is linked.
    pub(super) fn pump_peer(&mut self, peer: &str, now: Now) {
        let Some(&v1) = self.links.get(peer) else {
            return;
        };
        if self.shutting_down {
            return;
        }
        // Never-started tasks first become running (committed like a local start); other
        // peers' keep their order.
        let waiting: Vec<TaskId> = self.peer_waiting.drain(..).collect();
        let (mine, others): (Vec<TaskId>, Vec<TaskId>) = waiting
            .into_iter()
            .partition(|i| self.tasks.get(i).and_then(|t| t.peer.as_deref()) == Some(peer));
        self.peer_waiting = others.into();
        for id in mine {
            self.start_at_peer(&id, now);
        }
        let resend: Vec<TaskId> = self
            .tasks
            .values()
            .filter(|t| t.peer.as_deref() == Some(peer) && t.origin.is_none())
            .filter(|t| t.state == TaskState::Running && t.needs_send)
            .map(|t| t.id.clone())
            .collect();
        for id in resend {
            let Some(t) = self.tasks.get_mut(&id) else {
                continue;
            };
            t.needs_send = false;
            let payload = Payload::DelegateTask(DelegateTask {
                task_id: id.0.clone(),
                prompt: t.prompt.clone(),
                cwd: Some(t.cwd.display().to_string()),
                context: TaskContext {
                    git_remote: None,
                    git_ref: None,
                    git_commit: None,
                    relevant_files: None,
                    brain_context: None,
                    dependency_graph: DependencyGraph {
                        blocks: Vec::new(),
                        blocked_by: Vec::new(),
                    },
                },
                // v0 readers know no `agent` (docs/relay-protocol.md §8).
                agent: v1.then(|| t.agent.clone()),
            });
            self.actions.push_back(TaskAction::ToPeer {
                peer: peer.to_owned(),
                payload,
                handoff: None,
            });
        }
    }

    fn start_at_peer(&mut self, id: &TaskId, now: Now) {
        let Some(t) = self.tasks.get_mut(id) else {
            return;
        };
        if t.state != TaskState::Queued {
            return;
        }
        let started_ms = now.wall.timestamp_millis();
        t.state = TaskState::Running;
        t.started_ms = Some(started_ms);
        t.sent_at = Some(now.mono);
        t.needs_send = true;
        t.peer_timer = Some(crate::kernel::deadline::after(
            now.mono,
            Duration::from_secs(t.timeout_secs),
        ));
        self.actions
            .push_back(TaskAction::Commit(running_commit(id, &t.agent, started_ms)));
    }

    /// Delegator side: the delegator cancels a task running on a peer: `task_interrupt` stop
    /// and a grace for its handoff; with no link, it ends `cancelled` at once (the peer may
    /// still run it, and the reason says so).
    pub(super) fn cancel_at_peer(&mut self, id: &TaskId, now: Now, ids: &mut dyn IdSource) {
        let Some(t) = self.tasks.get_mut(id) else {
            return;
        };
        let Some(peer) = t.peer.clone() else {
            return;
        };
        if !self.links.contains_key(&peer) {
            let why = format!(
                "cancelled by the delegator; {peer} was not linked and could not be told, so it may still run the task"
            );
            let elapsed = t
                .started_ms
                .map_or(0, |s| ms_between(s, now.wall.timestamp_millis()));
            self.settle(
                id,
                Ending::bare(TaskState::Cancelled, why, elapsed),
                now,
                ids,
            );
            return;
        }
        t.state = TaskState::Cancelling;
        t.peer_timer = Some(crate::kernel::deadline::after(now.mono, CANCEL_GRACE));
        let mut c = cancelling_commit(id, now.wall.timestamp_millis());
        // The worker's requests mirrored here close with the cancel: nobody answers them now
        // (the worker closes its own as it cancels the task).
        let (store, audit) = self
            .approvals
            .close_task(id, super::approvals::Closed::Cancelled);
        c.store.extend(store);
        c.audit.extend(audit);
        self.actions.push_back(TaskAction::Commit(c));
        self.interrupt(&peer, id, "cancelled by the delegator");
    }

    fn interrupt(&mut self, peer: &str, id: &TaskId, reason: &str) {
        if !self.links.contains_key(peer) {
            return;
        }
        self.actions.push_back(TaskAction::ToPeer {
            peer: peer.to_owned(),
            payload: Payload::TaskInterrupt(TaskInterrupt {
                task_id: id.0.clone(),
                interrupt_type: "stop".to_owned(),
                reason: reason.to_owned(),
            }),
            handoff: None,
        });
    }

    /// Our task `task_id` delegated to `peer`, still waiting for its outcome.
    pub(super) fn at_peer(&self, peer: &str, task_id: &str) -> Option<TaskId> {
        let id = TaskId::parse(task_id)?;
        let t = self.tasks.get(&id)?;
        (t.peer.as_deref() == Some(peer) && t.origin.is_none()).then_some(id)
    }

    /// A task message from `peer` (relay message id `msg_id`): the peer's answers for tasks
    /// we delegated to it, and its requests about tasks it delegated to us.
    pub fn handle_peer_message(
        &mut self,
        peer: &str,
        msg_id: &str,
        payload: Payload,
        now: Now,
        ids: &mut dyn IdSource,
        progress_pending: &dyn Fn(&str) -> bool,
    ) {
        match payload {
            Payload::DelegateTask(d) => {
                if let PeerSubmit::Duplicate = self.submit_from_peer(peer, d, now, ids) {
                    let line = format!(
                        "relay: {peer} sent a delegate_task this hub already holds; ignored"
                    );
                    self.peer_log(peer, line, now);
                }
            }
            Payload::TaskStatus(s) => {
                let Some(id) = self.at_peer(peer, &s.task_id) else {
                    return self.stray(peer, "task_status", now);
                };
                let Some(t) = self.tasks.get_mut(&id) else {
                    return;
                };
                if !matches!(t.state, TaskState::Running | TaskState::Cancelling) {
                    return;
                }
                t.confirmed = true;
                let mut p = t.progress.clone().unwrap_or(TaskProgress {
                    updates: 0,
                    tool_calls: 0,
                    last_tool: None,
                    plan: None,
                });
                p.updates += 1;
                t.progress = Some(p);
                t.progress_elapsed_ms = s
                    .stats
                    .elapsed_secs
                    .map_or(t.progress_elapsed_ms, |e| e.saturating_mul(1000));
                self.maybe_progress(&id, now, ids, progress_pending);
            }
            Payload::TaskHandoff(h) => {
                let v1 = self.links.get(peer).copied().unwrap_or(false);
                let id = self.at_peer(peer, &h.task_id);
                if v1 && id.is_some() {
                    // Acked whenever it is ours, settled now or before (a resend), so the
                    // peer stops sending it.
                    self.actions.push_back(TaskAction::ToPeer {
                        peer: peer.to_owned(),
                        payload: Payload::Ack(Ack {
                            ack_id: msg_id.to_owned(),
                            resync: None,
                            error: None,
                        }),
                        handoff: None,
                    });
                }
                let Some(id) = id else {
                    return self.stray(peer, "task_handoff", now);
                };
                self.on_peer_handoff(&id, h, now, ids);
            }
            Payload::TaskInterrupt(i) => {
                let origin = Origin {
                    peer: peer.to_owned(),
                    task_id: i.task_id.clone(),
                };
                let delegator = origin.delegator();
                // Looked up under the sender's own origin: only the peer that delegated a
                // task can stop or nudge it; another peer's interrupt finds nothing and gets
                // nothing back, as claudectl 0.92 does (docs/delegation.md "Across hubs").
                let Some(id) = self
                    .tasks
                    .values()
                    .find(|t| t.delegator == delegator)
                    .map(|t| t.id.clone())
                else {
                    let line = format!(
                        "relay: {peer} sent task_interrupt for a task it did not delegate to this hub, or one this hub no longer holds; ignored"
                    );
                    return self.peer_log(peer, line, now);
                };
                match i.interrupt_type.as_str() {
                    "stop" => {
                        if let Some(t) = self.tasks.get_mut(&id) {
                            t.stopped_by_peer = true;
                        }
                        self.cancel(id.as_str(), &delegator, now, ids);
                    }
                    // Nudge (and reroute, which this hub does not do) get where it is, while
                    // it is not over: a settled task's answer is its handoff.
                    _ => {
                        let live = self.tasks.get(&id).is_some_and(|t| !t.state.is_final());
                        if live {
                            self.send_status(&id, now);
                        }
                    }
                }
            }
            // Issue 37 design §7: a task's requests across hubs (`tasks::relayed`).
            Payload::TaskRequest(r) => self.on_task_request(peer, r, now, ids),
            Payload::TaskAnswer(a) => self.on_task_answer(peer, a, now),
            Payload::TaskRequestClosed(c) => self.on_task_request_closed(peer, c, now, ids),
            other => {
                let line = format!(
                    "relay: {peer} sent {}; not a task message",
                    other.msg_type().as_str()
                );
                self.peer_log(peer, line, now);
            }
        }
    }

    pub(super) fn stray(&mut self, peer: &str, what: &str, now: Now) {
        let line = format!(
            "relay: {peer} sent {what} for a task this hub did not delegate to it, or has settled; ignored"
        );
        self.peer_log(peer, line, now);
    }

    /// A log line a peer's messages caused: at most `PEER_LOG_BURST` at once and one per
    /// `PEER_LOG_REFILL` after, per peer; the next line that passes says how many were held
    /// back (an authenticated peer cannot flood the service log, docs/relay-protocol.md
    /// "Limits").
    pub(super) fn peer_log(&mut self, peer: &str, line: String, now: Now) {
        let t = self.peer_logs.entry(peer.to_owned()).or_insert_with(|| {
            crate::relay::throttle::Throttle::new(PEER_LOG_BURST, PEER_LOG_REFILL)
        });
        match t.admit(now.mono) {
            None => {}
            Some(0) => self.actions.push_back(TaskAction::Log(line)),
            Some(n) => self.actions.push_back(TaskAction::Log(format!(
                "{line} ({n} more such lines about {peer}'s task messages were held back)"
            ))),
        }
    }

    /// Delegator side: the peer's final word on our task.
    fn on_peer_handoff(&mut self, id: &TaskId, h: TaskHandoff, now: Now, ids: &mut dyn IdSource) {
        let Some(t) = self.tasks.get(id) else {
            return;
        };
        if !matches!(t.state, TaskState::Running | TaskState::Cancelling) {
            return;
        }
        let cancelling = t.state == TaskState::Cancelling;
        let elapsed = t
            .started_ms
            .map_or(0, |s| ms_between(s, now.wall.timestamp_millis()));
        let peer = t.peer.clone().unwrap_or_default();
        // `refused` refines a failure only: a handoff saying `completed` is completed.
        let refused = h.refused && h.state != "completed";
        if refused && is_already_exists(&h.summary, id) {
            // claudectl 0.92's answer to our resend of a task it already runs, or ran: not a
            // refusal of the work but word that the peer holds it. Its own handoff settles
            // the task (or the timeout does); sent nothing more (docs/delegation.md "Across
            // hubs").
            let line = format!(
                "relay: {peer} already holds task {id} (our delegate_task was a resend); waiting for its handoff"
            );
            if let Some(t) = self.tasks.get_mut(id) {
                t.confirmed = true;
            }
            return self.peer_log(&peer, line, now);
        }
        let (state, reason) = match h.state.as_str() {
            "completed" => (TaskState::Completed, None),
            // The peer never started it (claudectl 0.92): refused, its summary the reason,
            // also when a cancel was on its way (the peer's word decides, as the runner's does
            // for a local task, docs/delegation.md "States").
            _ if refused => (
                TaskState::Refused,
                Some(if h.summary.trim().is_empty() {
                    format!("{peer} could not start the task")
                } else {
                    body::peer_reason(&h.summary)
                }),
            ),
            _ if cancelling => (TaskState::Cancelled, Some(format!("cancelled at {peer}"))),
            _ => (
                TaskState::Failed,
                Some(format!("{peer} reported the task failed")),
            ),
        };
        if let Some(t) = self.tasks.get_mut(id) {
            let folded = t.metered.end_turn(&super::peer_usage::from_handoff(&h));
            self.on_folded(id, folded, false, now);
        }
        let ending = Ending {
            state,
            stop_reason: None,
            reason,
            // A task that never ran has no text (docs/delegation.md "`task_outcome`").
            text: if refused { "" } else { &h.summary },
            truncated: false,
            elapsed_ms: elapsed,
            report: body::PeerReport::from_handoff(h.git_ref.as_deref(), &h.verifications),
            turn: 1,
            quiet: None,
        };
        self.settle(id, ending, now, ids);
    }

    /// The peer timers: delegator-side timeouts and cancel graces, worker-side statuses,
    /// v0 handoff confirmations.
    pub(super) fn expire_peer(&mut self, now: Now, ids: &mut dyn IdSource) {
        let due: Vec<(TaskId, TaskState, bool)> = self
            .tasks
            .values()
            .filter(|t| t.peer_timer.is_some_and(|at| at <= now.mono))
            .map(|t| (t.id.clone(), t.state, t.origin.is_some()))
            .collect();
        for (id, state, worker) in due {
            if worker {
                if matches!(state, TaskState::Queued | TaskState::Running) {
                    self.send_status(&id, now);
                } else if let Some(t) = self.tasks.get_mut(&id) {
                    t.peer_timer = None;
                }
                continue;
            }
            let Some(t) = self.tasks.get(&id) else {
                continue;
            };
            let peer = t.peer.clone().unwrap_or_default();
            let elapsed = t
                .started_ms
                .map_or(0, |s| ms_between(s, now.wall.timestamp_millis()));
            match state {
                TaskState::Queued => {
                    let why = format!(
                        "timed out: {peer} was not linked within {} s, so the task never left this hub",
                        t.timeout_secs
                    );
                    self.settle(&id, Ending::bare(TaskState::TimedOut, why, 0), now, ids);
                }
                TaskState::Running => {
                    let why = format!(
                        "timed out after {} s at {peer}; it was asked to stop",
                        t.timeout_secs
                    );
                    self.interrupt(&peer, &id, "timed out");
                    self.settle(
                        &id,
                        Ending::bare(TaskState::TimedOut, why, elapsed),
                        now,
                        ids,
                    );
                }
                TaskState::Cancelling => {
                    let why = format!(
                        "cancelled; {peer} did not answer the cancel within {} s",
                        CANCEL_GRACE.as_secs()
                    );
                    self.settle(
                        &id,
                        Ending::bare(TaskState::Cancelled, why, elapsed),
                        now,
                        ids,
                    );
                }
                _ => {
                    if let Some(t) = self.tasks.get_mut(&id) {
                        t.peer_timer = None;
                    }
                }
            }
        }
        // Held handoffs whose hold has passed go out now.
        let released: BTreeSet<String> = self
            .report_hold
            .iter()
            .filter(|(_, &h)| h <= now.mono)
            .map(|((peer, _), _)| peer.clone())
            .collect();
        self.report_hold.retain(|_, h| *h > now.mono);
        for peer in released {
            self.pump_handoffs(&peer, now);
        }
        // A v0 peer acks nothing: a handoff still on its link after the grace arrived.
        let links = &self.links;
        for (peer, pending) in self.handoffs.iter_mut() {
            if links.get(peer) == Some(&false) {
                pending.retain(|p| {
                    !p.sent_at.is_some_and(|at| {
                        crate::kernel::deadline::after(at, V0_HANDOFF_GRACE) <= now.mono
                    })
                });
            }
        }
        self.handoffs.retain(|_, p| !p.is_empty());
    }

    /// The earliest peer timer.
    pub(super) fn peer_timeout(&self) -> Option<Instant> {
        let tasks = self.tasks.values().filter_map(|t| t.peer_timer);
        let handoffs = self
            .handoffs
            .iter()
            .filter(|(peer, _)| self.links.get(*peer) == Some(&false))
            .flat_map(|(_, p)| p.iter().filter_map(|p| p.sent_at))
            .map(|at| crate::kernel::deadline::after(at, V0_HANDOFF_GRACE));
        let holds = self.report_hold.values().copied();
        tasks.chain(handoffs).chain(holds).min()
    }
}
