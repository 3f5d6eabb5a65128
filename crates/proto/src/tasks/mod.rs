//! The task book (issue 11; docs/delegation.md): every delegated task this hub knows, its
//! state machine, and what the hub must do about it, as data.
//!
//! Inputs: `submit` (a `delegate` verb), `next_to_start` (a free runner slot), `handle_event`
//! (the runner's `TaskEvent`s), `cancel`, `answer` (a `task_answer` verb) and
//! `answer_settled`, `handle_timeout`, `restore` (rows from the store at startup),
//! `shutdown`. Outputs, drained with `poll_action`: `Start` a runner, `Cancel` one, `Answer`
//! a held request, and `Commit`: store operations, at most one envelope for the delegator and
//! audit records that must go into ONE commit batch, so an outcome envelope and the task's
//! final state are durable together or not at all. Time is passed in (`kernel::now::Now`); ids
//! and tokens come from the caller's `IdSource`.
//!
//! The requests a task's agent waits on (issue 37) are the book's sub-machine `approvals`
//! (`Approvals`): the book hands it what it knows of the task and turns its steps into the
//! book's actions. A headless task's permission prompts (design §6) are its sub-machine
//! `prompts` (`Prompts`): each is read and numbered there, decided like any request, and its
//! reply queued for the hub's parked connection (`poll_prompt_answer`). Follow-up turns
//! (issue 38 design §2) are its sub-machine `turns` (`Turns`: numbers, keep windows, the
//! kept sessions' cap, the refusals), driven from `follow_up` (`task_prompt`, `task_close`,
//! a turn's outcome while the task goes on, a kept session's close).
//!
//! Refuses IO: processes, files (the cwd check here is lexical; the runner re-checks with the
//! filesystem), sockets, clocks. Answers visibility: a task is visible only to its delegator;
//! a name in `tasks.approvers` also sees every task with an open request (issue 37 design §5).

pub mod approvals;
mod body;
mod check;
mod event;
mod follow_up;
mod identity;
pub mod meter;
mod peer;
mod peer_usage;
pub mod placement;
mod prompt_tool;
pub mod prompts;
mod query;
mod records;
mod relayed;
mod requests;
mod restore;
pub mod settings;
pub mod turns;
mod types;
mod withdraw;

#[cfg(test)]
mod tests;

pub use body::{
    cap_tail, cap_text, summarise, GIT_REF_MAX_BYTES, MAX_VERIFICATIONS, OUTCOME_KIND,
    PEER_REASON_MAX_BYTES, PROGRESS_KIND, VERIFICATION_COMMAND_MAX_BYTES,
    VERIFICATION_OUTPUT_MAX_BYTES,
};
pub use check::{lexical_cwd, DelegateRefusal};
pub use follow_up::{CloseTaken, PromptTaken, PromptUndo};
pub use peer::{
    refusal_handoff as peer_refusal, valid_remote_task_id, LinkTerms, Origin, PeerSubmit,
    CANCEL_GRACE, CLAUDECTL_REPORT_DELAY, COULD_NOT_START, PEER_LOG_BURST, PEER_LOG_REFILL,
    STOPPED_BY_CONTROLLER, V0_HANDOFF_GRACE,
};
pub use records::{StoredRequest, StoredTask, TaskAudit, TaskStoreOp};
pub use turns::PromptRefusal;
use types::simple_hex;
pub use types::{TaskId, TaskState};

use crate::acp::{Outcome, PermissionPolicy, Status};
use crate::kernel::ids::IdSource;
use crate::kernel::names::is_task_name;
use crate::kernel::names::HUB_NAME;
use crate::kernel::now::Now;
use crate::wire::approval::{AllowRule, Permission};
use crate::wire::{DelegateRequest, Envelope, TaskProgress, TaskStateReply};
use approvals::{Approvals, Source};
use chrono::{DateTime, SecondsFormat, Utc};
pub use settings::BookConfig;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// What a task run reports, and the requests it holds open (issue 37).
pub use event::{
    OptionKind, RequestAnswer, RequestAsk, RequestKind, RequestOption, TaskEnd, TaskEvent,
};
/// `progressSecs` at most (a week, like `tasks.timeout_secs`).
pub const MAX_PROGRESS_SECS: u64 = settings::MAX_TASK_TIMEOUT_SECS;

/// What the runner (or, with `peer`, the relay) is asked to run. `Debug` hides the prompt
/// and the token.
#[derive(Clone, PartialEq, Eq)]
pub struct StartSpec {
    pub task: TaskId,
    pub delegator: String,
    pub agent: String,
    pub peer: Option<String>,
    /// Lexically normalised; the runner canonicalises and re-checks it.
    pub cwd: PathBuf,
    pub prompt: String,
    pub timeout_secs: u64,
    /// The task identity's token (`task-…` connects with it through `agent-hub mcp`).
    pub token: String,
    /// The policy the delegator asked for; None: the operator's bound. The executor runs
    /// the task under the narrower of it and the bound in force when it starts (issue 37
    /// design §1).
    pub permission: Option<PermissionPolicy>,
    /// The delegation's pre-approval rules, checked at the verb (design §2).
    pub allow: Vec<AllowRule>,
    /// Issue 38: the session is kept after a completed turn (its keep window is above 0).
    pub keep_session: bool,
}

impl fmt::Debug for StartSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StartSpec")
            .field("task", &self.task)
            .field("delegator", &self.delegator)
            .field("agent", &self.agent)
            .field("peer", &self.peer)
            .field("cwd", &self.cwd)
            .field("prompt_bytes", &self.prompt.len())
            .field("timeout_secs", &self.timeout_secs)
            .field("token", &"<redacted>")
            .field("permission", &self.permission)
            .field("allow", &self.allow)
            .field("keep_session", &self.keep_session)
            .finish()
    }
}

/// Store operations, the envelope to the delegator and the audit records of one step: the
/// hub writes all of them in ONE commit batch (hub::commit), or none.
#[derive(Debug, Clone, Default)]
pub struct TaskCommit {
    pub store: Vec<TaskStoreOp>,
    /// `from: hub`, `to:` the delegator, `correlationId:` the task id; queued like any
    /// accepted envelope (waiving the caps, as bounces do).
    pub envelope: Option<Envelope>,
    pub audit: Vec<TaskAudit>,
}

/// One instruction from the book, drained in order with `poll_action`.
#[derive(Debug, Clone)]
pub enum TaskAction {
    /// Run the task. The hub should start it once the commit carrying its `running` state
    /// (queued just before this action) is written: a crash in between then reports
    /// `hub_restarted` rather than running the work twice.
    Start(StartSpec),
    /// Ask the runner to cancel the task; its outcome comes back as an event.
    Cancel(TaskId),
    /// Give the runner the decision for the task's held request `seq` (design §4.4): the
    /// session writes it to the agent. A request no longer held there is dropped and logged.
    Answer {
        task: TaskId,
        seq: u32,
        answer: RequestAnswer,
    },
    /// The commit of an answer a relay peer gave to a request of a task it delegated here
    /// (issue 37 design §7, `relayed`): stage it; once it is written, `answer_settled(request,
    /// true, decision)` (the agent gets the answer only then); if it fails,
    /// `answer_settled(request, false, None)`.
    AnswerCommit {
        commit: TaskCommit,
        request: String,
        decision: Box<approvals::Decision>,
    },
    /// Send a task message to a relay peer over its lasting link (docs/delegation.md
    /// "Across hubs"). `handoff` names the peer's task id when this is a final
    /// `task_handoff` kept for resending until confirmed (`TaskBook::handle_peer_acked`).
    ToPeer {
        peer: String,
        payload: crate::relay::message::Payload,
        handoff: Option<String>,
    },
    Commit(TaskCommit),
    /// A service-log line (no prompt, text or token).
    Log(String),
    /// Send the task's session a follow-up turn (issue 38 design §2), after the commit of
    /// its start (`task_prompt` answers then too). With `interrupt`, the open turn is
    /// cancelled first.
    Prompt {
        task: TaskId,
        turn: u32,
        text: String,
        interrupt: bool,
    },
    /// Close the task's kept session (`session/close` when the agent takes it, then the
    /// shutdown); the task has settled with its last turn's state.
    Close(TaskId),
}

#[derive(Debug)]
struct Task {
    seq: u64,
    id: TaskId,
    delegator: String,
    agent: String,
    peer: Option<String>,
    cwd: PathBuf,
    prompt: String,
    timeout_secs: u64,
    progress_secs: u64,
    state: TaskState,
    created_ms: i64,
    started_ms: Option<i64>,
    ended_ms: Option<i64>,
    elapsed_ms: Option<u64>,
    stop_reason: Option<String>,
    reason: Option<String>,
    pid: Option<u32>,
    /// The task identity's token, from start until the outcome.
    token: Option<String>,
    /// Holds a runner slot: from `Start` until the runner's `Ended`.
    holds_slot: bool,
    /// The latest progress, and what the last progress envelope said, when, with which id.
    progress: Option<TaskProgress>,
    progress_elapsed_ms: u64,
    sent: Option<TaskProgress>,
    sent_at: Option<Instant>,
    sent_envelope: Option<String>,
    /// Progress held back by an unconsumed envelope is looked at again no sooner than this,
    /// so a delegator that never reads cannot make `poll_timeout` a past instant.
    held_until: Option<Instant>,
    /// Worker side: the relay peer that delegated the task, and its id there.
    origin: Option<Origin>,
    /// Delegator side (`peer`): the worker has answered for it (a `task_status` or its
    /// handoff came), so a dropped link does not make the hub send it again.
    confirmed: bool,
    /// Delegator side: `delegate_task` must be sent (again) when the peer's link is up.
    needs_send: bool,
    /// Delegator side: the deadline (the timeout; while cancelling, the cancel grace).
    /// Worker side: when the next periodic `task_status` goes to the delegating peer.
    peer_timer: Option<Instant>,
    /// Worker side: the delegating peer asked it to stop (`task_interrupt` stop).
    stopped_by_peer: bool,
    /// The policy its delegator asked for (None: the bound) and its allow rules (issue 37).
    permission: Option<PermissionPolicy>,
    allow: Vec<AllowRule>,
    /// Why the hub itself cancelled it (a request's `cancel` fallback): the reason its
    /// `cancelled` outcome carries instead of how the agent took the cancel.
    cancel_reason: Option<String>,
    /// Issue 38: where `delegate --peer auto` placed it and why (memory only: the store is
    /// unchanged, so a restart forgets it; the audit's `task_placed` keeps it).
    placement: Option<crate::wire::PlacementReply>,
    /// Its usage figures and budget (issue 38 design §1; `meter`).
    metered: meter::Metered,
}

/// A settle that closes a kept session (issue 38 design §2): no second envelope (its
/// delegator was told `keptUntil`), a `task_session_closed` record.
#[derive(Debug, Clone, Copy)]
struct Quiet(turns::Why);

/// How a task ends, for `settle`.
struct Ending<'a> {
    state: TaskState,
    stop_reason: Option<String>,
    reason: Option<String>,
    text: &'a str,
    truncated: bool,
    elapsed_ms: u64,
    /// Delegator side: what the peer's handoff added (`gitRef`, `verifications`).
    report: Option<body::PeerReport>,
    /// Issue 38: the turn whose outcome this is, and a kept session's close.
    turn: u32,
    quiet: Option<Quiet>,
}

impl Ending<'_> {
    fn bare(state: TaskState, reason: String, elapsed_ms: u64) -> Ending<'static> {
        Ending {
            state,
            stop_reason: None,
            reason: Some(reason),
            text: "",
            truncated: false,
            elapsed_ms,
            report: None,
            turn: 0,
            quiet: None,
        }
    }
}

/// The state, stop reason and reason an ACP outcome maps to (docs/delegation.md "States").
pub fn outcome_state(status: &Status) -> (TaskState, Option<String>, Option<String>) {
    use crate::acp::CancelEnd;
    let stopped = |end: &CancelEnd| match end {
        CancelEnd::Stopped(r) => Some(r.as_str().to_owned()),
        _ => None,
    };
    match status {
        Status::Completed { stop_reason } => (
            TaskState::Completed,
            Some(stop_reason.as_str().to_owned()),
            None,
        ),
        Status::Cancelled { end } => (TaskState::Cancelled, stopped(end), Some(end.to_string())),
        Status::TimedOut { end } => (TaskState::TimedOut, stopped(end), Some(end.to_string())),
        Status::Refused(r) => (TaskState::Refused, None, Some(r.to_string())),
        Status::Failed(f) => (TaskState::Failed, None, Some(f.to_string())),
    }
}

/// Where `auto` placed a delegation (`TaskBook::place`): the peer (None: here), and what the
/// reply and the audit say of it.
#[derive(Debug, Clone)]
struct Placed {
    peer: Option<String>,
    eligible: usize,
    skipped: Vec<(String, String)>,
    reply: crate::wire::PlacementReply,
}

/// The book. One per hub with a `[tasks]` table.
#[derive(Debug)]
pub struct TaskBook {
    config: BookConfig,
    /// Agents this hub can run (the runnable catalogue: installed manifests with ACP or a
    /// headless template).
    agents: BTreeSet<String>,
    /// Peers this hub may delegate to.
    peers: BTreeSet<String>,
    tasks: BTreeMap<TaskId, Task>,
    /// Waiting to start, in acceptance order.
    queue: VecDeque<TaskId>,
    /// Settled tasks kept for `task_status`/`tasks`, oldest settled first.
    settled: VecDeque<TaskId>,
    /// Runner slots held (`holds_slot`).
    slots: usize,
    next_seq: u64,
    actions: VecDeque<TaskAction>,
    shutting_down: bool,
    /// Peers whose `delegate_task` this hub runs (`relay.peers` `delegate = true`).
    accept_from: BTreeSet<String>,
    /// Peers with a lasting relay link now, and whether the peer is an agent-hub (v1) peer:
    /// it reads `agent` and acks handoffs both ways (`peer::TaskBook::handle_peer_link`).
    links: BTreeMap<String, bool>,
    /// Delegator side: tasks for a peer waiting for its link, in acceptance order.
    peer_waiting: VecDeque<TaskId>,
    /// Worker side: final handoffs not yet confirmed, by peer (`peer::PendingHandoff`).
    handoffs: BTreeMap<String, Vec<peer::PendingHandoff>>,
    /// Worker side: no report about a claudectl peer's task goes out before this instant
    /// (`peer::CLAUDECTL_REPORT_DELAY`), keyed by (peer, its task id).
    report_hold: BTreeMap<(String, String), Instant>,
    /// The log budget of each peer's task messages (`peer::peer_log`).
    peer_logs: BTreeMap<String, crate::relay::throttle::Throttle>,
    /// The requests tasks' agents wait on (issue 37; `approvals`).
    approvals: Approvals,
    /// Headless tasks' permission prompts and their replies (design §6; `prompts`).
    prompts: prompts::Prompts,
    /// Which peers' links carry requests across hubs (issue 37 design §7; `relayed`).
    relayed: relayed::Relayed,
    /// Follow-up turns and kept sessions (issue 38 design §2; `turns`, `follow_up`).
    turns: turns::Turns,
    /// What placement knows of each linked peer's room and of this machine (issue 38
    /// design §4; `placement`).
    rooms: placement::Rooms,
    /// What each runnable agent reports (its manifest's `run.reports`, issue 38 design §1):
    /// a budget is checked against it at the verb. An agent not named reports nothing.
    reports: BTreeMap<String, crate::acp::Reports>,
}

/// The wire's word for a policy as the session's (the same three, in the same order).
fn policy_of(p: Permission) -> PermissionPolicy {
    match p {
        Permission::Reject => PermissionPolicy::Reject,
        Permission::Ask => PermissionPolicy::Ask,
        Permission::Allow => PermissionPolicy::Allow,
    }
}

fn rfc3339(ms: i64) -> Option<String> {
    DateTime::<Utc>::from_timestamp_millis(ms)
        .map(|t| t.to_rfc3339_opts(SecondsFormat::Millis, true))
}

fn ms_between(from_ms: i64, to_ms: i64) -> u64 {
    u64::try_from(to_ms.saturating_sub(from_ms)).unwrap_or(0)
}

impl TaskBook {
    /// Forgets the oldest settled tasks beyond `history_max`, adding their store and audit
    /// records to the commit being built.
    fn prune_history(&mut self, store: &mut Vec<TaskStoreOp>, audit: &mut Vec<TaskAudit>) {
        while self.settled.len() > self.config.history_max {
            let Some(old) = self.settled.pop_front() else {
                break;
            };
            self.tasks.remove(&old);
            self.turns.forget(&old);
            store.push(TaskStoreOp::Forget {
                task: old.0.clone(),
            });
            audit.push(TaskAudit::Forgotten { task: old.0 });
        }
    }

    pub fn new(
        config: BookConfig,
        agents: impl IntoIterator<Item = String>,
        peers: impl IntoIterator<Item = String>,
    ) -> TaskBook {
        let approvals = Approvals::new(config.approvals.clone());
        TaskBook {
            turns: turns::Turns::new(config.follow_ups),
            approvals,
            prompts: prompts::Prompts::default(),
            config,
            agents: agents.into_iter().collect(),
            peers: peers.into_iter().collect(),
            tasks: BTreeMap::new(),
            queue: VecDeque::new(),
            settled: VecDeque::new(),
            slots: 0,
            next_seq: 1,
            actions: VecDeque::new(),
            shutting_down: false,
            accept_from: BTreeSet::new(),
            links: BTreeMap::new(),
            report_hold: BTreeMap::new(),
            peer_waiting: VecDeque::new(),
            handoffs: BTreeMap::new(),
            peer_logs: BTreeMap::new(),
            relayed: relayed::Relayed::default(),
            rooms: placement::Rooms::default(),
            reports: BTreeMap::new(),
        }
    }

    pub fn config(&self) -> &BookConfig {
        &self.config
    }

    /// The runnable catalogue changed (manifests installed or removed).
    pub fn set_agents(&mut self, agents: impl IntoIterator<Item = String>) {
        self.agents = agents.into_iter().collect();
    }

    /// What each runnable agent reports (issue 38 design §1), set with the catalogue.
    pub fn set_reports(
        &mut self,
        reports: impl IntoIterator<Item = (String, crate::acp::Reports)>,
    ) {
        self.reports = reports.into_iter().collect();
    }

    pub fn set_peers(&mut self, peers: impl IntoIterator<Item = String>) {
        self.peers = peers.into_iter().collect();
    }

    /// The relay's heartbeat interval (staleness) and this hub's `relay.tags` (what
    /// `requires` matches here), for placement.
    pub fn set_relay_placement(&mut self, heartbeat_interval: Duration, tags: Vec<String>) {
        self.rooms.set_relay(heartbeat_interval, tags);
    }

    /// A heartbeat of `peer`'s lasting link (`Hub::peer_room`).
    pub fn peer_room(&mut self, peer: &str, beat: placement::Beat) {
        self.rooms.beat(peer, beat);
    }

    /// This machine's latest figures (`Hub::local_room`).
    pub fn local_room(&mut self, machine: placement::Machine) {
        self.rooms.set_machine(machine);
    }

    /// Where a delegation asking for `auto` goes (issue 38 design §4), or its refusal.
    fn place(&self, req: &DelegateRequest, now: Now) -> Result<Option<Placed>, DelegateRefusal> {
        let auto = req.peer.as_deref() == Some(placement::AUTO);
        let Some(requires) = &req.requires else {
            if !auto {
                return Ok(None);
            }
            return self.place_among(req, &[], now).map(Some);
        };
        if !auto {
            return Err(DelegateRefusal::RequiresWithoutAuto);
        }
        if requires.is_empty()
            || requires.len() > placement::MAX_REQUIRES
            || !requires.iter().all(|t| crate::relay::worker::valid_tag(t))
        {
            return Err(DelegateRefusal::RequiresOutOfBounds);
        }
        self.place_among(req, requires, now).map(Some)
    }

    fn place_among(
        &self,
        req: &DelegateRequest,
        requires: &[String],
        now: Now,
    ) -> Result<Placed, DelegateRefusal> {
        if !crate::kernel::names::valid_manifest_name(&req.agent) {
            return Err(DelegateRefusal::InvalidAgentName);
        }
        let local = self.rooms.local_place(
            self.agents.contains(&req.agent),
            self.slots,
            self.config.max_concurrent,
        );
        let peers = self.rooms.peer_places(&req.agent, &self.peers);
        let p = placement::choose(
            &req.agent,
            requires,
            Some(&local),
            &peers,
            &self.config.placement,
            self.rooms.stale_after(),
            now.mono,
        );
        let skipped: Vec<(String, String)> = p
            .skipped()
            .iter()
            .map(|k| (k.place.clone(), k.why.clone()))
            .collect();
        let (peer, eligible, reason) = match p {
            placement::Placement::Chosen {
                place,
                local,
                eligible,
                reason,
                ..
            } => ((!local).then_some(place), eligible, reason),
            placement::Placement::QueuedHere { reason, .. } => (None, 0, reason),
            placement::Placement::NoRoom { refusal, .. } => {
                return Err(DelegateRefusal::NoRoom(refusal))
            }
        };
        let chose = peer.clone().unwrap_or_else(|| placement::LOCAL.to_owned());
        Ok(Placed {
            peer,
            eligible,
            skipped,
            reply: crate::wire::PlacementReply { chose, reason },
        })
    }

    /// The `delegated` reply of a task just committed: its state, and where `auto` placed it.
    pub fn delegated_reply(&self, task: &TaskId) -> crate::wire::DelegatedReply {
        let t = self.tasks.get(task);
        let placement = t.and_then(|t| t.placement.clone());
        crate::wire::DelegatedReply {
            task: task.0.clone(),
            // Committed as queued; starting it is a later step of its own.
            state: TaskState::Queued.as_str().to_owned(),
            peer: t
                .filter(|_| placement.is_some())
                .and_then(|t| t.peer.clone()),
            placement,
        }
    }

    /// The next instruction, in order.
    pub fn poll_action(&mut self) -> Option<TaskAction> {
        self.actions.pop_front()
    }

    pub fn queued(&self) -> usize {
        self.queue.len()
    }

    /// Runner slots held: tasks started whose runner has not reported `Ended`.
    pub fn slots_held(&self) -> usize {
        self.slots
    }

    /// Tasks running or cancelling (their outcome not yet in).
    pub fn active(&self) -> usize {
        self.tasks
            .values()
            .filter(|t| matches!(t.state, TaskState::Running | TaskState::Cancelling))
            .filter(|t| t.peer.is_none())
            .count()
    }

    /// Accepts a delegation from `delegator` as a queued task, or refuses it with no task
    /// made. Every check here needs no filesystem (docs/delegation.md "Refusals").
    pub fn submit(
        &mut self,
        req: DelegateRequest,
        delegator: &str,
        now: Now,
        ids: &mut dyn IdSource,
    ) -> Result<TaskId, DelegateRefusal> {
        if is_task_name(delegator) {
            return Err(DelegateRefusal::TaskIdentity);
        }
        self.insert(req, delegator, None, now, ids)
    }

    /// Unfinished tasks (queued, running, cancelling; local or on a peer) of one delegator:
    /// `delegator` itself, or, for a relay peer's task (`origin`), every task from that peer.
    /// A walk of the book: `delegate` is an operator-rate verb, and the book holds at most
    /// `history_max` settled tasks beside the unfinished ones.
    fn held_by(&self, delegator: &str, origin: Option<&Origin>) -> usize {
        self.tasks
            .values()
            .filter(|t| !t.state.is_final())
            .filter(|t| match (origin, &t.origin) {
                (Some(o), Some(to)) => o.peer == to.peer,
                (None, None) => t.delegator == delegator,
                _ => false,
            })
            .count()
    }

    /// The checks every delegation passes and the new queued task: a local delegator's
    /// (`origin` None) or a relay peer's (`origin`, `peer::submit_from_peer`).
    fn insert(
        &mut self,
        req: DelegateRequest,
        delegator: &str,
        origin: Option<Origin>,
        now: Now,
        ids: &mut dyn IdSource,
    ) -> Result<TaskId, DelegateRefusal> {
        // `auto` (issue 38): the rule picks the peer, or this hub, before every other check,
        // which then holds as for a delegation naming that place.
        let mut req = req;
        let placed = if origin.is_none() {
            self.place(&req, now)?
        } else {
            None
        };
        if let Some(p) = &placed {
            req.peer = p.peer.clone();
        }
        let c = &self.config;
        match &req.peer {
            Some(peer) => {
                if !self.peers.contains(peer) {
                    return Err(DelegateRefusal::UnknownPeer);
                }
                if !crate::kernel::names::valid_manifest_name(&req.agent) {
                    return Err(DelegateRefusal::InvalidAgentName);
                }
            }
            None if !self.agents.contains(&req.agent) => {
                return Err(DelegateRefusal::UnknownAgent {
                    runnable: self.agents.iter().cloned().collect(),
                })
            }
            None => {}
        }
        // A peer's cwd names a folder on the peer's machine: only its shape is checked here;
        // the peer's own roots decide (docs/delegation.md "Across hubs").
        let cwd = match &req.peer {
            Some(_) => check::remote_cwd(&req.cwd)?,
            None => lexical_cwd(&c.cwd_roots, &req.cwd)?,
        };
        if req.prompt.is_empty() {
            return Err(DelegateRefusal::PromptEmpty);
        }
        if req.prompt.len() > c.prompt_max_bytes {
            return Err(DelegateRefusal::PromptTooLarge {
                bytes: req.prompt.len(),
                max_bytes: c.prompt_max_bytes,
            });
        }
        let timeout_secs = req.timeout_secs.unwrap_or(c.timeout_secs);
        if !(1..=c.timeout_secs).contains(&timeout_secs) {
            return Err(DelegateRefusal::TimeoutOutOfRange {
                max_secs: c.timeout_secs,
            });
        }
        let progress_secs = req.progress_secs.unwrap_or(0);
        if progress_secs != 0 && !(c.min_progress_secs..=MAX_PROGRESS_SECS).contains(&progress_secs)
        {
            return Err(DelegateRefusal::ProgressOutOfRange {
                min_secs: c.min_progress_secs,
                max_secs: MAX_PROGRESS_SECS,
            });
        }
        let (permission, allow) = self.check_approvals(&req)?;
        let reports = match &req.peer {
            Some(_) => None,
            None => Some(self.reports.get(&req.agent).copied().unwrap_or_default()),
        };
        let budget = meter::Budget::check(&req, reports)?;
        // A peer's task closes at once: the relay carries no keep (design §7 is a later
        // part), so `keepSecs` is not refused but keeps nothing there.
        let keep_secs =
            match &req.peer {
                Some(_) => 0,
                None => self.turns.keep_for(req.keep_secs).map_err(|e| {
                    DelegateRefusal::KeepOutOfRange {
                        max_secs: e.max_secs,
                    }
                })?,
            };
        // One delegator's share (issue 29): a roster name, or a relay peer whose tasks have
        // a delegator each (`task-from:<peer>:<id>`) but are one delegator here.
        let held = self.held_by(delegator, origin.as_ref());
        if held >= c.max_per_delegator {
            return Err(DelegateRefusal::ShareFull {
                held,
                max: c.max_per_delegator,
            });
        }
        // Only a task that will wait needs queue room: the queued tasks the free slots take
        // next do not count against `queue_max` (0 means exactly that: no waiting at all).
        let free = c.max_concurrent.saturating_sub(self.slots);
        let would_wait = match &req.peer {
            // Tasks for peers wait only for a link, never for a local slot.
            Some(_) => self.peer_waiting.len() + 1,
            None => (self.queue.len() + 1).saturating_sub(free),
        };
        if would_wait > c.queue_max {
            return Err(DelegateRefusal::QueueFull {
                queue_max: c.queue_max,
            });
        }
        let id = loop {
            let id = TaskId::generate(ids);
            if !self.tasks.contains_key(&id) {
                break id;
            }
        };
        let seq = self.next_seq;
        self.next_seq += 1;
        let created_ms = now.wall.timestamp_millis();
        let cwd_text = cwd.display().to_string();
        let row = StoredTask {
            seq,
            task: id.0.clone(),
            delegator: delegator.to_owned(),
            agent: req.agent.clone(),
            peer: req.peer.clone(),
            cwd: cwd_text.clone(),
            prompt: req.prompt.clone(),
            timeout_secs,
            progress_secs,
            state: TaskState::Queued.as_str().to_owned(),
            created_ms,
            permission: permission.map(|p| p.tag().to_owned()),
            allow: (!allow.is_empty()).then(|| crate::wire::to_json(&allow)),
            budget: budget.as_ref().map(meter::Budget::to_column),
            ..StoredTask::default()
        };
        self.actions.push_back(TaskAction::Commit(TaskCommit {
            store: vec![TaskStoreOp::Insert(Box::new(row))],
            envelope: None,
            audit: vec![TaskAudit::Accepted {
                task: id.0.clone(),
                delegator: delegator.to_owned(),
                agent: req.agent.clone(),
                peer: req.peer.clone(),
                cwd: cwd_text,
                prompt_bytes: req.prompt.len(),
            }]
            .into_iter()
            .chain(placed.as_ref().map(|p| TaskAudit::Placed {
                task: id.0.clone(),
                chose: p.reply.chose.clone(),
                eligible: p.eligible,
                skipped: p.skipped.clone(),
            }))
            .collect(),
        }));
        self.tasks.insert(
            id.clone(),
            Task {
                seq,
                id: id.clone(),
                delegator: delegator.to_owned(),
                agent: req.agent,
                peer: req.peer,
                cwd,
                prompt: req.prompt,
                timeout_secs,
                progress_secs,
                state: TaskState::Queued,
                created_ms,
                started_ms: None,
                ended_ms: None,
                elapsed_ms: None,
                stop_reason: None,
                reason: None,
                pid: None,
                token: None,
                holds_slot: false,
                progress: None,
                progress_elapsed_ms: 0,
                sent: None,
                sent_at: None,
                sent_envelope: None,
                held_until: None,
                origin,
                confirmed: false,
                needs_send: true,
                peer_timer: None,
                stopped_by_peer: false,
                permission,
                allow,
                cancel_reason: None,
                placement: placed.as_ref().map(|p| p.reply.clone()),
                metered: meter::Metered::new(budget),
            },
        );
        self.turns.register(&id, keep_secs);
        // A task for a peer goes out from `start_ready`, as a local one starts: after the
        // commit of its row.
        if let Some(t) = self.tasks.get_mut(&id).filter(|t| t.peer.is_some()) {
            // Waiting for the peer's link is bounded by the same budget as running there.
            t.peer_timer = Some(crate::kernel::deadline::after(
                now.mono,
                Duration::from_secs(timeout_secs),
            ));
            self.peer_waiting.push_back(id.clone());
        } else {
            self.queue.push_back(id.clone());
        }
        Ok(id)
    }

    /// The oldest queued task, started, while fewer than `max_concurrent` runner slots are
    /// held (a slot is freed only by the runner's `Ended`). Queues its commit (`running`,
    /// `task_started`, drawn token) and returns what to run; the caller loops until None
    /// (`start_ready` does, queueing each as `TaskAction::Start`).
    pub fn next_to_start(&mut self, now: Now, ids: &mut dyn IdSource) -> Option<StartSpec> {
        if self.shutting_down || self.slots >= self.config.max_concurrent {
            return None;
        }
        let id = self.queue.pop_front()?;
        let Some(t) = self.tasks.get_mut(&id) else {
            // Invariant: every queued id has a task; a stray one is dropped.
            return self.next_to_start(now, ids);
        };
        let token = format!(
            "{}{}",
            simple_hex(&ids.next_id()),
            simple_hex(&ids.next_id())
        );
        let started_ms = now.wall.timestamp_millis();
        t.state = TaskState::Running;
        t.started_ms = Some(started_ms);
        t.sent_at = Some(now.mono);
        t.token = Some(token.clone());
        t.holds_slot = true;
        self.slots += 1;
        self.turns.begin(&id, turns::How::Prompt, started_ms);
        let keep_session = self.turns.keep_secs(&id) > 0;
        self.actions.push_back(TaskAction::Commit(running_commit(
            &id, &t.agent, started_ms,
        )));
        Some(StartSpec {
            task: id,
            delegator: t.delegator.clone(),
            agent: t.agent.clone(),
            peer: t.peer.clone(),
            cwd: t.cwd.clone(),
            prompt: t.prompt.clone(),
            timeout_secs: t.timeout_secs,
            token,
            permission: t.permission,
            allow: t.allow.clone(),
            keep_session,
        })
    }

    /// `delegate`'s `permission` and `allow` (issue 37 design §1, §2): the policy asked for
    /// may only narrow the operator's bound for the agent, and rules need a policy they can
    /// narrow (`ask`; under `allow` they change nothing). Neither travels to a relay peer.
    /// Returns the policy asked for (None: the bound) and the rules.
    fn check_approvals(
        &self,
        req: &DelegateRequest,
    ) -> Result<(Option<PermissionPolicy>, Vec<AllowRule>), DelegateRefusal> {
        let rules = req.allow.clone().unwrap_or_default();
        if req.peer.is_some() {
            if req.permission.is_some() || !rules.is_empty() {
                return Err(DelegateRefusal::ApprovalsForPeer);
            }
            return Ok((None, Vec::new()));
        }
        crate::wire::approval::check_allow(&rules).map_err(DelegateRefusal::Allow)?;
        let bound = self.config.bound_for(&req.agent);
        let asked = req.permission.map(policy_of);
        if let Some(a) = asked.filter(|a| *a > bound) {
            return Err(DelegateRefusal::PermissionWider {
                asked: a.tag(),
                agent: req.agent.clone(),
                bound: bound.tag(),
            });
        }
        let effective = asked.map_or(bound, |a| a.min(bound));
        if effective == PermissionPolicy::Reject && !rules.is_empty() {
            return Err(DelegateRefusal::AllowUnderReject {
                agent: req.agent.clone(),
            });
        }
        Ok((asked, rules))
    }

    /// Every task that can start now, each as a `TaskAction::Start` after its commit.
    pub fn start_ready(&mut self, now: Now, ids: &mut dyn IdSource) {
        while let Some(spec) = self.next_to_start(now, ids) {
            self.actions.push_back(TaskAction::Start(spec));
        }
        let linked: Vec<String> = self.links.keys().cloned().collect();
        for peer in linked {
            self.pump_peer(&peer, now);
        }
    }

    /// One event from the task's runner. `progress_pending(envelope_id)` says whether an
    /// envelope the hub queued is still waiting unconsumed (the previous progress envelope
    /// holds back the next, docs/delegation.md "Envelopes").
    pub fn handle_event(
        &mut self,
        task: &TaskId,
        event: TaskEvent,
        now: Now,
        ids: &mut dyn IdSource,
        progress_pending: &dyn Fn(&str) -> bool,
    ) {
        let Some(t) = self.tasks.get_mut(task) else {
            self.actions.push_back(TaskAction::Log(format!(
                "task {task}: runner event for a task the hub does not hold"
            )));
            return;
        };
        match event {
            TaskEvent::Started { pid } => {
                t.pid = Some(pid);
                self.actions.push_back(TaskAction::Commit(TaskCommit {
                    store: vec![TaskStoreOp::Pid {
                        task: task.0.clone(),
                        pid,
                    }],
                    ..TaskCommit::default()
                }));
            }
            TaskEvent::Progress(p) => {
                if matches!(t.state, TaskState::Running | TaskState::Cancelling) {
                    t.progress = Some(summarise(&p));
                    t.progress_elapsed_ms = p.elapsed_ms;
                    let folded = t.metered.on_progress(&p);
                    self.on_folded(task, folded, true, now);
                    self.maybe_progress(task, now, ids, progress_pending);
                }
            }
            // The hub writes the runner's log lines itself; nothing here decides on them.
            TaskEvent::Log(_) => {}
            // Issue 37 design §4.2: `approvals` holds it open (envelope, audit, store) or
            // answers it by the fallback at once (`requests`).
            TaskEvent::Request(ask) => self.open_request(task, ask, Source::Runner, now, ids),
            // Answered allow by the session already: its audit record only (design §2, §9).
            TaskEvent::Preapproved { ask, rule } => {
                self.actions.push_back(TaskAction::Log(format!(
                    "task {task}: request {} pre-approved by allow rule {}",
                    ask.seq,
                    rule + 1
                )));
                let c = Approvals::preapproved(task, &ask, rule);
                self.actions.push_back(TaskAction::Commit(c));
            }
            // The executor starts this agent with the hub's permission tool (design §6).
            TaskEvent::PermissionTool { tool_kinds } => {
                if t.state == TaskState::Running {
                    self.actions.push_back(TaskAction::Log(format!(
                        "task {task}: its agent asks through the hub's permission_prompt tool ({} tool kinds known)",
                        tool_kinds.len()
                    )));
                    self.prompts.enable(task, tool_kinds);
                }
            }
            TaskEvent::Outcome(o) => self.on_outcome(task, o, now, ids),
            TaskEvent::Headless => self.turns.mark_headless(task),
            // The outcome before it freed the slot and made the task `idle` already
            // (`follow_up`); the event says only that the session took it so.
            TaskEvent::Idle { turn } => self.actions.push_back(TaskAction::Log(format!(
                "task {task}: session kept after turn {turn}"
            ))),
            TaskEvent::Ended(end) => {
                if t.holds_slot {
                    t.holds_slot = false;
                    self.slots -= 1;
                }
                if t.state == TaskState::Idle {
                    // The kept session's agent went away between turns: the task settles
                    // with its last turn's state (design §2).
                    self.close_kept(task, turns::Why::AgentExited, now, ids);
                } else if !t.state.is_final() {
                    // The runner promises an outcome before Ended; if one never came, the
                    // delegator still gets exactly one.
                    let why = match end.exit {
                        Some(s) => format!("the runner ended ({s}) without an outcome"),
                        None => "the runner ended without an outcome".to_owned(),
                    };
                    let elapsed = t
                        .started_ms
                        .map_or(0, |s| ms_between(s, now.wall.timestamp_millis()));
                    self.settle(
                        task,
                        Ending::bare(TaskState::Failed, why, elapsed),
                        now,
                        ids,
                    );
                }
                if !self.shutting_down {
                    self.start_ready(now, ids);
                }
            }
        }
    }

    fn on_outcome(&mut self, task: &TaskId, o: Outcome, now: Now, ids: &mut dyn IdSource) {
        if self.turn_goes_on(task, &o, now, ids) {
            return;
        }
        let Some(t) = self.tasks.get(task) else {
            return;
        };
        if !matches!(t.state, TaskState::Running | TaskState::Cancelling) {
            // Exactly one outcome: a second one, or one for a task settled another way
            // (cancelled while queued, restored as hub_restarted), changes nothing.
            self.actions.push_back(TaskAction::Log(format!(
                "task {task}: outcome {} ignored, the task is already {}",
                o.status.name(),
                t.state.as_str()
            )));
            return;
        }
        // Cancel racing completion: whatever the runner decided is the outcome (its session
        // makes every prompt that ends after a cancel `cancelled`, docs/acp.md).
        let (state, stop_reason, mut reason) = outcome_state(&o.status);
        if state == TaskState::Cancelled && t.cancel_reason.is_some() {
            // The hub cancelled it for a request nobody answered (`cancel` fallback): that
            // is why it ended, whatever the agent made of the cancel.
            reason = t.cancel_reason.clone();
        }
        if let Some(t) = self.tasks.get_mut(task) {
            let folded = t.metered.end_turn(&o.meter);
            self.on_folded(task, folded, false, now);
        }
        let ending = Ending {
            state,
            stop_reason,
            reason,
            text: &o.text,
            truncated: o.truncated,
            elapsed_ms: o.progress.elapsed_ms,
            report: None,
            turn: o.turn,
            quiet: None,
        };
        self.settle(task, ending, now, ids);
        if o.kept {
            // The session offered to stay, but the task ends here (the hub is stopping):
            // it is closed.
            self.actions.push_back(TaskAction::Close(task.clone()));
        }
    }

    /// The task's one outcome: final state, its envelope, its store op and audit record in
    /// one commit, with any history pruning it causes.
    fn settle(&mut self, task: &TaskId, e: Ending<'_>, now: Now, ids: &mut dyn IdSource) {
        let max_text = self.config.outcome_text_max_bytes;
        let Some(t) = self.tasks.get_mut(task) else {
            return;
        };
        let ended_ms = now.wall.timestamp_millis();
        let (text, cut) = cap_text(e.text, max_text);
        let handoff = t.origin.clone().map(|o| {
            // No process ran (none reported): the task was never started here.
            let h = peer::handoff(
                &o,
                &e,
                text,
                t.stopped_by_peer,
                t.pid.is_some(),
                &t.metered.meter,
            );
            (o, h)
        });
        let state = e.state.as_str();
        let turn = match e.turn {
            0 => self.turns.current(task).max(1),
            n => n,
        };
        let body = body::json(&body::OutcomeBody {
            task: task.as_str(),
            agent: &t.agent,
            peer: t.peer.as_deref(),
            turn,
            state,
            stop_reason: e.stop_reason.as_deref(),
            text,
            truncated: e.truncated || cut,
            reason: e.reason.as_deref(),
            elapsed_ms: e.elapsed_ms,
            usage: t.metered.meter.usage(),
            cost: t.metered.meter.cost_figures(),
            context: t.metered.meter.context(),
            budget: t.metered.budget_figures(),
            session: "closed",
            kept_until: None,
            report: e.report.as_ref(),
        });
        let envelope = match &t.origin {
            // A kept session's close: its delegator had the last turn's outcome already.
            None if e.quiet.is_some() => None,
            None => Some(hub_envelope(
                &t.delegator,
                task,
                OUTCOME_KIND,
                body,
                now,
                ids,
            )),
            Some(_) => None,
        };
        let mut store = vec![TaskStoreOp::Settle {
            task: task.0.clone(),
            state: state.to_owned(),
            stop_reason: e.stop_reason.clone(),
            reason: e.reason.clone(),
            ended_ms,
            elapsed_ms: e.elapsed_ms,
            meter: t.metered.meter.to_column(),
            budget: t.metered.budget.as_ref().map(meter::Budget::to_column),
        }];
        // Requests still open close with the task (design §4.3), in its final commit.
        let (closes, close_audit) = self
            .approvals
            .close_task(task, approvals::Closed::TaskEnded);
        store.extend(closes);
        // A peer's task: its delegating hub hears of each close, after this commit.
        let closes = close_audit.clone();
        let mut audit = close_audit;
        // A permission prompt still waiting is told no (design §6): its agent is gone or going.
        self.prompts.deny_all(task, "denied: the task ended");
        self.prompts.forget(task);
        if let Some(Quiet(why)) = e.quiet {
            audit.push(TaskAudit::SessionClosed {
                task: task.0.clone(),
                why: why.as_str().to_owned(),
            });
        }
        audit.push(TaskAudit::Ended {
            task: task.0.clone(),
            state: state.to_owned(),
            stop_reason: e.stop_reason.clone(),
            reason: e.reason.clone(),
            elapsed_ms: e.elapsed_ms,
            tokens: t.metered.meter.total_tokens(),
            cost_usd: t.metered.meter.cost_usd().map(crate::wire::usage::Amount),
        });
        t.state = e.state;
        t.ended_ms = Some(ended_ms);
        t.elapsed_ms = Some(e.elapsed_ms);
        t.stop_reason = e.stop_reason;
        t.reason = e.reason;
        t.token = None;
        t.prompt = String::new();
        t.progress = None;
        t.peer_timer = None;
        self.queue.retain(|q| q != task);
        self.peer_waiting.retain(|q| q != task);
        self.settled.push_back(task.clone());
        self.prune_history(&mut store, &mut audit);
        self.actions.push_back(TaskAction::Commit(TaskCommit {
            store,
            envelope,
            audit,
        }));
        self.tell_closed(task, &closes);
        if let Some((origin, h)) = handoff {
            self.queue_handoff(origin, h, now);
        }
    }

    /// A progress envelope for `task` if the task asked for them, an interval has passed
    /// since the last, something changed since, and the last one was consumed.
    fn maybe_progress(
        &mut self,
        task: &TaskId,
        now: Now,
        ids: &mut dyn IdSource,
        progress_pending: &dyn Fn(&str) -> bool,
    ) {
        let Some(t) = self.tasks.get_mut(task) else {
            return;
        };
        if t.progress_secs == 0 || t.state != TaskState::Running {
            return;
        }
        let Some(p) = &t.progress else {
            return;
        };
        if t.sent.as_ref() == Some(p) {
            return;
        }
        let due = t
            .sent_at
            .map(|at| crate::kernel::deadline::after(at, Duration::from_secs(t.progress_secs)));
        if due.is_some_and(|d| now.mono < d) {
            return;
        }
        if t.sent_envelope.as_deref().is_some_and(progress_pending) {
            t.held_until = Some(crate::kernel::deadline::after(
                now.mono,
                Duration::from_secs(t.progress_secs),
            ));
            return;
        }
        let body = body::json(&body::ProgressBody {
            task: task.as_str(),
            agent: &t.agent,
            turn: self.turns.current(task).max(1),
            state: TaskState::Running.as_str(),
            elapsed_ms: t.progress_elapsed_ms,
            updates: p.updates,
            tool_calls: p.tool_calls,
            last_tool: p.last_tool.as_deref(),
            plan: p.plan.as_ref(),
            usage: t.metered.meter.usage(),
            cost: t.metered.meter.cost_figures(),
            context: t.metered.meter.context(),
        });
        let env = hub_envelope(&t.delegator, task, PROGRESS_KIND, body, now, ids);
        t.sent = Some(p.clone());
        t.sent_at = Some(now.mono);
        t.sent_envelope = Some(env.id.clone());
        t.held_until = None;
        self.actions.push_back(TaskAction::Commit(TaskCommit {
            envelope: Some(env),
            ..TaskCommit::default()
        }));
    }

    /// Progress held back by the interval or by an unconsumed envelope goes out once it can.
    pub fn handle_timeout(
        &mut self,
        now: Now,
        ids: &mut dyn IdSource,
        progress_pending: &dyn Fn(&str) -> bool,
    ) {
        let waiting: Vec<TaskId> = self
            .tasks
            .values()
            .filter(|t| t.progress_secs > 0 && t.state == TaskState::Running)
            .filter(|t| t.progress.is_some() && t.progress != t.sent)
            .map(|t| t.id.clone())
            .collect();
        for id in waiting {
            self.maybe_progress(&id, now, ids, progress_pending);
        }
        self.expire_peer(now, ids);
        self.expire_requests(now, ids);
        self.expire_kept(now, ids);
    }

    /// When `handle_timeout` may have progress to send: the earliest end of an interval of a
    /// task with unsent progress; a task held back by an unconsumed envelope is looked at
    /// again one interval after it was held back (never a past instant over and over).
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.tasks
            .values()
            .filter(|t| t.progress_secs > 0 && t.state == TaskState::Running)
            .filter(|t| t.progress.is_some() && t.progress != t.sent)
            .filter_map(|t| {
                let due = t.sent_at.map(|at| {
                    crate::kernel::deadline::after(at, Duration::from_secs(t.progress_secs))
                })?;
                Some(t.held_until.map_or(due, |h| h.max(due)))
            })
            .chain(self.peer_timeout())
            .chain(self.approvals.poll_timeout())
            .chain(self.turns.poll_timeout())
            .min()
    }

    /// The delegator's cancel: a queued task ends `cancelled` at once; a running one becomes
    /// `cancelling` and its runner is asked to stop (its outcome follows as an event); any
    /// other state is answered as it is. Another asker gets `unknown`, as for no such task.
    pub fn cancel(
        &mut self,
        task: &str,
        asker: &str,
        now: Now,
        ids: &mut dyn IdSource,
    ) -> TaskStateReply {
        let reply = |state: &str| TaskStateReply {
            task: task.to_owned(),
            state: state.to_owned(),
        };
        let Some(id) = TaskId::parse(task) else {
            return reply("unknown");
        };
        let Some(t) = self.tasks.get_mut(&id) else {
            return reply("unknown");
        };
        if t.delegator != asker {
            return reply("unknown");
        }
        match t.state {
            TaskState::Queued => {
                self.settle(
                    &id,
                    Ending::bare(
                        TaskState::Cancelled,
                        "cancelled by the delegator before it started".to_owned(),
                        0,
                    ),
                    now,
                    ids,
                );
            }
            TaskState::Running if t.peer.is_some() => self.cancel_at_peer(&id, now, ids),
            TaskState::Running => self.cancel_running(&id, None, now),
            // A kept session has no turn to cancel: it closes, and the task settles with
            // its last turn's state (issue 38 design §2).
            TaskState::Idle => self.close_kept(&id, turns::Why::Closed, now, ids),
            _ => {}
        }
        let state = self.tasks.get(&id).map_or("unknown", |t| t.state.as_str());
        reply(state)
    }

    /// A running local task becomes `cancelling` and its runner is asked to stop: the
    /// `cancelling` commit, which also closes its open requests `cancelled` (issue 37 design
    /// §4.3; the session answers the agent `cancelled` itself, as ACP requires). `reason`:
    /// the hub's own reason for the cancel, which its outcome will carry.
    fn cancel_running(&mut self, id: &TaskId, reason: Option<String>, now: Now) {
        let Some(t) = self.tasks.get_mut(id) else {
            return;
        };
        t.state = TaskState::Cancelling;
        t.cancel_reason = reason;
        let mut c = cancelling_commit(id, now.wall.timestamp_millis());
        let (store, audit) = self.approvals.close_task(id, approvals::Closed::Cancelled);
        c.store.extend(store);
        c.audit.extend(audit.iter().cloned());
        // Permission prompts still waiting are denied with why (design §6): the hub's own
        // reason (a request's `cancel` fallback) or the delegator's cancel.
        let why = match &t.cancel_reason {
            Some(r) => format!("denied: {r}"),
            None => "denied: the task was cancelled".to_owned(),
        };
        self.prompts.deny_all(id, &why);
        self.actions.push_back(TaskAction::Commit(c));
        self.tell_closed(id, &audit);
        self.actions.push_back(TaskAction::Cancel(id.clone()));
    }

    /// What a fold of the task's figures found (issue 38 design §1): a cost in another
    /// currency is logged; a limit passed is audited (`task_budget_passed`) and, while the
    /// task runs, cancels it as `task cancel` does, its outcome's reason saying why. A figure
    /// that passes when the turn has already ended (a prompt's usage, a headless run's or a
    /// peer's totals) cancels nothing: the outcome keeps its state and its `budget` says
    /// `passed`.
    fn on_folded(&mut self, id: &TaskId, folded: meter::Folded, live: bool, now: Now) {
        if let Some(d) = folded.dropped {
            self.actions
                .push_back(TaskAction::Log(format!("task {id}: {d}")));
        }
        let Some(p) = folded.passed else {
            return;
        };
        self.actions.push_back(TaskAction::Commit(TaskCommit {
            audit: vec![TaskAudit::BudgetPassed {
                task: id.0.clone(),
                what: p.what.as_str().to_owned(),
                limit: p.limit.clone(),
                value: p.value.clone(),
            }],
            ..TaskCommit::default()
        }));
        let Some(t) = self.tasks.get(id) else {
            return;
        };
        match (t.state, &t.peer) {
            (TaskState::Running, None) if live => self.cancel_running(id, Some(p.to_string()), now),
            _ => self
                .actions
                .push_back(TaskAction::Log(format!("task {id}: {p}"))),
        }
    }

    /// The agent's process group, once the runner reported it (also after a restart, from
    /// the store: the server makes sure a `hub_restarted` task's group is gone).
    pub fn pid(&self, task: &TaskId) -> Option<u32> {
        self.tasks.get(task).and_then(|t| t.pid)
    }

    /// The delegator of a task, whoever asks (for the hub's routing of peer replies).
    pub fn delegator(&self, task: &TaskId) -> Option<&str> {
        self.tasks.get(task).map(|t| t.delegator.as_str())
    }
}

/// The commit of a task's start: its `running` state and the `task_started` record.
fn running_commit(id: &TaskId, agent: &str, started_ms: i64) -> TaskCommit {
    TaskCommit {
        store: vec![TaskStoreOp::State {
            task: id.0.clone(),
            state: TaskState::Running.as_str().to_owned(),
            started_ms: Some(started_ms),
            at_ms: started_ms,
        }],
        envelope: None,
        audit: vec![TaskAudit::Started {
            task: id.0.clone(),
            agent: agent.to_owned(),
        }],
    }
}

/// The commit of a cancel asked of a running task: its `cancelling` state and the
/// `task_cancel_asked` record (local and peer tasks alike).
fn cancelling_commit(id: &TaskId, at_ms: i64) -> TaskCommit {
    TaskCommit {
        store: vec![TaskStoreOp::State {
            task: id.0.clone(),
            state: TaskState::Cancelling.as_str().to_owned(),
            started_ms: None,
            at_ms,
        }],
        envelope: None,
        audit: vec![TaskAudit::CancelAsked { task: id.0.clone() }],
    }
}

/// An envelope from the hub to the delegator about `task`.
fn hub_envelope(
    to: &str,
    task: &TaskId,
    kind: &str,
    body: String,
    now: Now,
    ids: &mut dyn IdSource,
) -> Envelope {
    Envelope::new(
        ids.next_id(),
        HUB_NAME.to_owned(),
        to.to_owned(),
        now.wall.to_rfc3339_opts(SecondsFormat::Millis, true),
        kind.to_owned(),
        Some(task.0.clone()),
        body,
    )
    // Invariant: the body is serde_json's own output, one JSON value.
    .expect("a task body is one JSON value")
}
