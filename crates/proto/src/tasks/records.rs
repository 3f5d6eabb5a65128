//! What the task book asks to be made durable and recorded (docs/delegation.md "Durability"):
//! the store operations on the tasks table and on the open requests (`TaskStoreOp`), the rows
//! the store gives back at startup (`StoredTask`, `StoredRequest`), and the task audit records
//! (`TaskAudit`), those of issue 37's requests among them (design §9).
//!
//! Owns the shapes only, with plain fields, so the store (the SQLite side) and the audit
//! writer can take them as they are. A task's token is never in any of them; the prompt is
//! stored only while the task waits to start (it is needed to start it after a restart) and
//! is cleared when the task settles. Refuses IO.

use crate::wire::to_json;
use std::fmt::Write as _;

/// One change to the tasks table. All of one `TaskCommit` go into one store transaction,
/// with its envelope and its audit records.
#[derive(Clone, PartialEq, Eq)]
pub enum TaskStoreOp {
    /// A task was accepted (`queued`). Boxed: a row is several times the size of any other
    /// operation.
    Insert(Box<StoredTask>),
    /// The task's state changed to `running` (with `started_ms`) or `cancelling`.
    State {
        task: String,
        state: String,
        started_ms: Option<i64>,
        at_ms: i64,
    },
    /// The runner started the agent: its process group, so a restart can make sure it is
    /// gone.
    Pid { task: String, pid: u32 },
    /// The task reached its final state; its prompt is cleared.
    Settle {
        task: String,
        state: String,
        stop_reason: Option<String>,
        reason: Option<String>,
        ended_ms: i64,
        elapsed_ms: u64,
        /// Issue 38 design §8: the task's `meter` column (JSON of `tasks::meter::Meter`;
        /// None: no figures) and its `budget` column as it ended (`passed` in it).
        meter: Option<String>,
        budget: Option<String>,
    },
    /// A settled task left the history (`tasks.history_max`); its request rows go with it.
    Forget { task: String },
    /// A request was held open (issue 37 design §4.2): kept so that a restart can close it
    /// by the fallback (`hub restarted`) instead of forgetting it.
    OpenRequest(StoredRequest),
    /// The request closed: answered, expired, cancelled or its task ended.
    CloseRequest { request: String },
}

/// The prompt is shown by size only.
impl std::fmt::Debug for TaskStoreOp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TaskStoreOp::Insert(row) => f.debug_tuple("Insert").field(row).finish(),
            TaskStoreOp::State {
                task,
                state,
                started_ms,
                at_ms,
            } => f
                .debug_struct("State")
                .field("task", task)
                .field("state", state)
                .field("started_ms", started_ms)
                .field("at_ms", at_ms)
                .finish(),
            TaskStoreOp::Pid { task, pid } => f
                .debug_struct("Pid")
                .field("task", task)
                .field("pid", pid)
                .finish(),
            TaskStoreOp::Settle {
                task,
                state,
                stop_reason,
                reason,
                ended_ms,
                elapsed_ms,
                meter,
                budget,
            } => f
                .debug_struct("Settle")
                .field("task", task)
                .field("state", state)
                .field("stop_reason", stop_reason)
                .field("reason", reason)
                .field("ended_ms", ended_ms)
                .field("elapsed_ms", elapsed_ms)
                .field("meter", meter)
                .field("budget", budget)
                .finish(),
            TaskStoreOp::Forget { task } => f.debug_struct("Forget").field("task", task).finish(),
            TaskStoreOp::OpenRequest(r) => f.debug_tuple("OpenRequest").field(r).finish(),
            TaskStoreOp::CloseRequest { request } => f
                .debug_struct("CloseRequest")
                .field("request", request)
                .finish(),
        }
    }
}

/// A task row: what `Insert` writes and what the store loads at startup, with every later
/// change applied. Wall times are Unix milliseconds.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct StoredTask {
    /// Acceptance order (unique, increasing): the queue order after a restart.
    pub seq: u64,
    pub task: String,
    pub delegator: String,
    pub agent: String,
    pub peer: Option<String>,
    /// The lexically normalised cwd.
    pub cwd: String,
    /// Empty once settled.
    pub prompt: String,
    pub timeout_secs: u64,
    pub progress_secs: u64,
    /// A `TaskState` tag.
    pub state: String,
    pub created_ms: i64,
    pub started_ms: Option<i64>,
    pub ended_ms: Option<i64>,
    pub elapsed_ms: Option<u64>,
    pub stop_reason: Option<String>,
    pub reason: Option<String>,
    pub pid: Option<u32>,
    /// The policy the delegator asked for (`delegate`'s `permission`, a
    /// `wire::approval::Permission` word); None: the operator's bound (issue 37 design §1).
    pub permission: Option<String>,
    /// The delegation's pre-approval rules as their JSON array (`delegate`'s `allow`,
    /// checked at the verb); None: no rules (design §2).
    pub allow: Option<String>,
    /// Schema 6 (issue 38 design §8). Written by the parts that use them: `meter` and
    /// `budget` (usage, part A); the session, turn and restart columns (parts B and C) and
    /// `placement` (part D) are read back as they are and default to none.
    pub session_id: Option<String>,
    pub session_caps: Option<String>,
    pub turn: u32,
    pub restarts: u32,
    pub kept_until_ms: Option<i64>,
    /// JSON of `tasks::meter::Meter`; None: no figure yet.
    pub meter: Option<String>,
    /// JSON of `tasks::meter::Budget`; None: no budget.
    pub budget: Option<String>,
    pub placement: Option<String>,
}

/// An open request as the store keeps it (issue 37 design §4.2, §4.6): enough to close it by
/// the fallback after a restart and to say so to its delegator. Never its title, paths,
/// command or message (those reached the delegator in the envelope, and the audit keeps
/// metadata only). Wall times are Unix milliseconds.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StoredRequest {
    /// `req-` and 16 hex digits (`approvals::request_id`).
    pub request: String,
    pub task: String,
    /// The session's number for it (from 1).
    pub seq: u32,
    /// `permission` or `question`.
    pub kind: String,
    /// The ACP tool kind, when the agent gave one.
    pub tool_kind: Option<String>,
    pub opened_ms: i64,
    pub expires_ms: i64,
}

impl std::fmt::Debug for StoredTask {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoredTask")
            .field("seq", &self.seq)
            .field("task", &self.task)
            .field("delegator", &self.delegator)
            .field("agent", &self.agent)
            .field("peer", &self.peer)
            .field("cwd", &self.cwd)
            .field("prompt_bytes", &self.prompt.len())
            .field("timeout_secs", &self.timeout_secs)
            .field("progress_secs", &self.progress_secs)
            .field("state", &self.state)
            .field("created_ms", &self.created_ms)
            .field("started_ms", &self.started_ms)
            .field("ended_ms", &self.ended_ms)
            .field("elapsed_ms", &self.elapsed_ms)
            .field("stop_reason", &self.stop_reason)
            .field("reason", &self.reason)
            .field("pid", &self.pid)
            .field("permission", &self.permission)
            .field("allow", &self.allow)
            .field("session_id", &self.session_id)
            .field("session_caps", &self.session_caps)
            .field("turn", &self.turn)
            .field("restarts", &self.restarts)
            .field("kept_until_ms", &self.kept_until_ms)
            .field("meter", &self.meter)
            .field("budget", &self.budget)
            .field("placement", &self.placement)
            .finish()
    }
}

/// A task audit record. Never holds the prompt, the agent's text or the token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TaskAudit {
    /// `task_accepted`: a delegation was accepted and queued.
    Accepted {
        task: String,
        delegator: String,
        agent: String,
        peer: Option<String>,
        cwd: String,
        prompt_bytes: usize,
    },
    /// `task_started`: the runner is asked to start it.
    Started { task: String, agent: String },
    /// `task_cancel_asked`: the delegator asked a running task to stop.
    CancelAsked { task: String },
    /// `task_ended`: its final state, committed with its outcome envelope.
    Ended {
        task: String,
        state: String,
        stop_reason: Option<String>,
        reason: Option<String>,
        elapsed_ms: u64,
        /// Issue 38 design §9: its total tokens and its cost in US dollars, when known.
        tokens: Option<u64>,
        cost_usd: Option<crate::wire::usage::Amount>,
    },
    /// `task_budget_passed`: a figure passed the delegator's limit (design §1, §9).
    BudgetPassed {
        task: String,
        /// `cost` or `tokens`.
        what: String,
        limit: String,
        value: String,
    },
    /// `task_forgotten`: dropped from the history.
    Forgotten { task: String },
    /// `request_opened`: a request is held open for the delegator (issue 37 design §9).
    RequestOpened {
        task: String,
        request: String,
        /// `permission` or `question`.
        kind: String,
        tool_kind: Option<String>,
    },
    /// `request_preapproved`: the delegation's allow rule number `rule` (from 1, in the
    /// order of `allow`) let the request through; nobody was asked.
    RequestPreapproved {
        task: String,
        request: String,
        rule: usize,
    },
    /// `request_answered`: `by` answered it with `option`.
    RequestAnswered {
        task: String,
        request: String,
        by: String,
        option: String,
    },
    /// `request_expired`: nobody answered; the fallback (`reject` | `cancel`) did, for
    /// `reason` (`no answer within N s`, `hub restarted`, `no relay route to the delegator`).
    RequestExpired {
        task: String,
        request: String,
        fallback: String,
        reason: String,
    },
    /// `request_closed`: closed unanswered because the task was cancelled (`cancelled`) or
    /// ended (`task_ended`).
    RequestClosed {
        task: String,
        request: String,
        why: String,
    },
    /// `request_refused`: a request the hub would not hold (a cap, `why`), answered by the
    /// fallback at once.
    RequestRefused { task: String, why: String },
    /// `task_turn_started`: a follow-up turn began (issue 38 design §9; the first turn is
    /// `task_started`). `how`: `prompt` or `interrupt`.
    TurnStarted {
        task: String,
        turn: u32,
        how: String,
    },
    /// `task_turn_ended`: a turn's outcome while the task goes on (kept, or interrupted);
    /// the last turn's is `task_ended`.
    TurnEnded {
        task: String,
        turn: u32,
        state: String,
        stop_reason: Option<String>,
    },
    /// `task_session_closed`: a kept session closed and the task settled with its last
    /// turn's state; `why`: keep_expired, closed, cap, agent_exited or hub_stopping.
    SessionClosed { task: String, why: String },
    /// `task_placed` (issue 38 design §9): where `delegate --peer auto` placed the task
    /// (`local` or a peer), how many places were eligible, and those skipped with why (at
    /// most `placement::MAX_NAMED`; metadata only).
    Placed {
        task: String,
        chose: String,
        eligible: usize,
        skipped: Vec<(String, String)>,
    },
}

impl TaskAudit {
    pub fn event(&self) -> &'static str {
        match self {
            TaskAudit::Accepted { .. } => "task_accepted",
            TaskAudit::Started { .. } => "task_started",
            TaskAudit::CancelAsked { .. } => "task_cancel_asked",
            TaskAudit::Ended { .. } => "task_ended",
            TaskAudit::BudgetPassed { .. } => "task_budget_passed",
            TaskAudit::Forgotten { .. } => "task_forgotten",
            TaskAudit::RequestOpened { .. } => "request_opened",
            TaskAudit::RequestPreapproved { .. } => "request_preapproved",
            TaskAudit::RequestAnswered { .. } => "request_answered",
            TaskAudit::RequestExpired { .. } => "request_expired",
            TaskAudit::RequestClosed { .. } => "request_closed",
            TaskAudit::RequestRefused { .. } => "request_refused",
            TaskAudit::TurnStarted { .. } => "task_turn_started",
            TaskAudit::TurnEnded { .. } => "task_turn_ended",
            TaskAudit::SessionClosed { .. } => "task_session_closed",
            TaskAudit::Placed { .. } => "task_placed",
        }
    }

    /// The record's event and fields as `hub::event::AuditEvent::encode_into` writes them
    /// after `"event":` — `"task_ended","task":"…",…` — for the audit writer to wrap.
    pub fn encode_fields_into(&self, out: &mut String) {
        let opt = |v: &Option<String>| v.as_deref().map_or_else(|| "null".to_owned(), to_json);
        let _ = write!(out, "\"{}\"", self.event());
        let _ = match self {
            TaskAudit::Accepted {
                task,
                delegator,
                agent,
                peer,
                cwd,
                prompt_bytes,
            } => write!(
                out,
                ",\"task\":{},\"delegator\":{},\"agent\":{},\"peer\":{},\"cwd\":{},\"prompt_bytes\":{prompt_bytes}",
                to_json(task),
                to_json(delegator),
                to_json(agent),
                opt(peer),
                to_json(cwd)
            ),
            TaskAudit::Started { task, agent } => write!(
                out,
                ",\"task\":{},\"agent\":{}",
                to_json(task),
                to_json(agent)
            ),
            TaskAudit::Placed {
                task,
                chose,
                eligible,
                skipped,
            } => {
                let list: Vec<String> = skipped
                    .iter()
                    .take(super::placement::MAX_NAMED)
                    .map(|(place, why)| {
                        format!("{{\"place\":{},\"why\":{}}}", to_json(place), to_json(why))
                    })
                    .collect();
                write!(
                    out,
                    ",\"task\":{},\"chose\":{},\"eligible\":{eligible},\"skipped\":[{}]",
                    to_json(task),
                    to_json(chose),
                    list.join(",")
                )
            }
            TaskAudit::CancelAsked { task } | TaskAudit::Forgotten { task } => {
                write!(out, ",\"task\":{}", to_json(task))
            }
            TaskAudit::Ended {
                task,
                state,
                stop_reason,
                reason,
                elapsed_ms,
                tokens,
                cost_usd,
            } => {
                let _ = write!(
                    out,
                    ",\"task\":{},\"state\":{},\"stop_reason\":{},\"reason\":{},\"elapsed_ms\":{elapsed_ms}",
                    to_json(task),
                    to_json(state),
                    opt(stop_reason),
                    opt(reason)
                );
                // Issue 38 design §9: present only when known (an older reader ignores them).
                if let Some(t) = tokens {
                    let _ = write!(out, ",\"tokens\":{t}");
                }
                match cost_usd {
                    Some(c) => write!(out, ",\"cost_usd\":{}", to_json(c)),
                    None => Ok(()),
                }
            }
            TaskAudit::BudgetPassed {
                task,
                what,
                limit,
                value,
            } => write!(
                out,
                ",\"task\":{},\"what\":{},\"limit\":{limit},\"value\":{value}",
                to_json(task),
                to_json(what),
            ),
            TaskAudit::RequestOpened {
                task,
                request,
                kind,
                tool_kind,
            } => write!(
                out,
                ",\"task\":{},\"request\":{},\"type\":{},\"tool_kind\":{}",
                to_json(task),
                to_json(request),
                to_json(kind),
                opt(tool_kind)
            ),
            TaskAudit::RequestPreapproved {
                task,
                request,
                rule,
            } => write!(
                out,
                ",\"task\":{},\"request\":{},\"rule\":{rule}",
                to_json(task),
                to_json(request)
            ),
            TaskAudit::RequestAnswered {
                task,
                request,
                by,
                option,
            } => write!(
                out,
                ",\"task\":{},\"request\":{},\"by\":{},\"option\":{}",
                to_json(task),
                to_json(request),
                to_json(by),
                to_json(option)
            ),
            TaskAudit::RequestExpired {
                task,
                request,
                fallback,
                reason,
            } => write!(
                out,
                ",\"task\":{},\"request\":{},\"fallback\":{},\"reason\":{}",
                to_json(task),
                to_json(request),
                to_json(fallback),
                to_json(reason)
            ),
            TaskAudit::RequestClosed { task, request, why } => write!(
                out,
                ",\"task\":{},\"request\":{},\"why\":{}",
                to_json(task),
                to_json(request),
                to_json(why)
            ),
            TaskAudit::RequestRefused { task, why } | TaskAudit::SessionClosed { task, why } => {
                write!(out, ",\"task\":{},\"why\":{}", to_json(task), to_json(why))
            }
            TaskAudit::TurnStarted { task, turn, how } => write!(
                out,
                ",\"task\":{},\"turn\":{turn},\"how\":{}",
                to_json(task),
                to_json(how)
            ),
            TaskAudit::TurnEnded {
                task,
                turn,
                state,
                stop_reason,
            } => write!(
                out,
                ",\"task\":{},\"turn\":{turn},\"state\":{},\"stop_reason\":{}",
                to_json(task),
                to_json(state),
                opt(stop_reason)
            ),
        };
    }
}
