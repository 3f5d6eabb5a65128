//! Follow-up turns of delegated tasks (issue 38 design §2, §6; docs/delegation.md
//! "Follow-ups"): the task book's sub-machine that numbers each task's turns and keeps their
//! record, decides each task's keep window (`tasks.session_keep_secs`, narrowed by the
//! delegation's `keepSecs`), holds the kept sessions with their `keptUntil` and the hub-wide
//! cap (`tasks.max_kept_sessions`: over it the oldest closes), counts toward
//! `tasks.max_turns`, and owns the exact refusal texts of `task_prompt` (SPEC §16).
//!
//! The book holds it (`TaskBook::turns`) and calls it: it knows each task's state and turns
//! this machine's answers into commits and actions (`tasks::follow_up`). Refuses IO, clocks
//! (every instant is given), and anything about the session's protocol (the ACP session's
//! `acp::session::turns`). What it holds lives in memory only: the store's schema 5 keeps the
//! last turn's state as the task's (a restart closes a kept session, docs/delegation.md).

use super::types::{TaskId, TaskState};
use crate::wire::{TaskSession, TaskTurn};
use std::collections::BTreeMap;
use std::fmt;
use std::time::{Duration, Instant};

/// `tasks.session_keep_secs`: default (0: a session closes after its turn, as before issue
/// 38) and bound (a day).
pub const DEFAULT_SESSION_KEEP_SECS: u64 = 0;
pub const MAX_SESSION_KEEP_SECS: u64 = 86_400;
/// `tasks.max_kept_sessions`: default and bound.
pub const DEFAULT_MAX_KEPT_SESSIONS: u64 = 8;
pub const MAX_MAX_KEPT_SESSIONS: u64 = 256;
/// `tasks.max_turns`: default and bounds.
pub const DEFAULT_MAX_TURNS: u64 = 32;
pub const MAX_MAX_TURNS: u64 = 1000;

/// The `[tasks]` keys of follow-ups (design §6), validated by the loader.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FollowUpSettings {
    pub session_keep_secs: u64,
    pub max_kept_sessions: usize,
    pub max_turns: u32,
}

impl Default for FollowUpSettings {
    fn default() -> FollowUpSettings {
        FollowUpSettings {
            session_keep_secs: DEFAULT_SESSION_KEEP_SECS,
            // Both fit: bounded far below usize::MAX and u32::MAX.
            max_kept_sessions: DEFAULT_MAX_KEPT_SESSIONS as usize,
            max_turns: DEFAULT_MAX_TURNS as u32,
        }
    }
}

/// How a turn began (the record's `how`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum How {
    /// The delegation's prompt, or a follow-up to a kept session.
    Prompt,
    /// A follow-up that cancelled the open turn first.
    Interrupt,
}

impl How {
    pub fn as_str(self) -> &'static str {
        match self {
            How::Prompt => "prompt",
            How::Interrupt => "interrupt",
        }
    }
}

/// Why a kept session closed (the audit record `task_session_closed`'s `why`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Why {
    KeepExpired,
    Closed,
    Cap,
    AgentExited,
    HubStopping,
}

impl Why {
    pub fn as_str(self) -> &'static str {
        match self {
            Why::KeepExpired => "keep_expired",
            Why::Closed => "closed",
            Why::Cap => "cap",
            Why::AgentExited => "agent_exited",
            Why::HubStopping => "hub_stopping",
        }
    }
}

/// How a turn ended: what its outcome said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnEnd {
    pub state: TaskState,
    pub stop_reason: Option<String>,
    pub reason: Option<String>,
    pub ended_ms: i64,
    pub elapsed_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Turn {
    turn: u32,
    how: How,
    started_ms: i64,
    end: Option<TurnEnd>,
}

/// A session kept between turns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Kept {
    until: Instant,
    until_ms: i64,
    /// Kept since: the cap closes the oldest first.
    since: Instant,
}

/// One task's turns.
#[derive(Debug, Clone, Default)]
struct Task {
    /// The task's keep window; 0: its session closes after each turn.
    keep_secs: u64,
    /// It ran headless: no session to keep.
    headless: bool,
    turns: Vec<Turn>,
    kept: Option<Kept>,
    /// A follow-up with `interrupt` was sent: the turn before the last is still open.
    interrupting: bool,
}

/// Why `task_prompt` was refused (design §2, SPEC §16): `Display` is the error line's text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PromptRefusal {
    /// Not the asker's task (or no such task): as `task_status` answers it.
    UnknownTask,
    /// An approver sees the task but only its delegator may prompt it.
    NotDelegator,
    Queued {
        task: String,
    },
    TurnOpen {
        task: String,
        turn: u32,
    },
    /// The task ended, or its session was closed: the state it ended with.
    NoSession {
        task: String,
        state: &'static str,
    },
    Headless {
        task: String,
    },
    MaxTurns {
        task: String,
        max: u32,
    },
    /// The task runs on a relay peer: across hubs is a later part (design §7).
    OnPeer {
        task: String,
        peer: String,
    },
    /// Design §2: a task past its budget takes no more turns (`meter::Limit`'s word).
    OverBudget {
        task: String,
        what: &'static str,
    },
    PromptEmpty,
    PromptTooLarge {
        bytes: usize,
        max_bytes: usize,
    },
    /// The hub has no `[tasks]` table.
    NotEnabled,
    ShuttingDown,
}

impl fmt::Display for PromptRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const P: &str = "invalid task_prompt: ";
        match self {
            PromptRefusal::UnknownTask => f.write_str("unknown task"),
            PromptRefusal::NotDelegator => {
                write!(f, "{P}only the task's delegator may prompt it")
            }
            PromptRefusal::Queued { task } => {
                write!(f, "{P}{task} is queued; its first turn has not ended")
            }
            PromptRefusal::TurnOpen { task, turn } => write!(
                f,
                "{P}{task} has turn {turn} open; wait for its outcome or send it with interrupt"
            ),
            PromptRefusal::NoSession { task, state } => {
                write!(f, "{P}{task} has no session any more (it ended {state})")
            }
            PromptRefusal::Headless { task } => write!(
                f,
                "{P}{task} ran headless; only an ACP session takes follow-ups"
            ),
            PromptRefusal::MaxTurns { task, max } => {
                write!(f, "{P}{task} has had tasks.max_turns ({max}) turns")
            }
            PromptRefusal::OnPeer { task, peer } => write!(
                f,
                "{P}{task} runs on peer {peer}, which takes no follow-ups"
            ),
            PromptRefusal::OverBudget { task, what } => {
                write!(f, "{P}{task} passed its budget ({what})")
            }
            PromptRefusal::PromptEmpty => write!(f, "{P}prompt must not be empty"),
            PromptRefusal::PromptTooLarge { bytes, max_bytes } => write!(
                f,
                "{P}prompt is {bytes} bytes, over tasks.prompt_max_bytes ({max_bytes})"
            ),
            PromptRefusal::NotEnabled => write!(f, "{P}delegation is not enabled on this hub"),
            PromptRefusal::ShuttingDown => write!(f, "{P}the hub is shutting down"),
        }
    }
}

impl std::error::Error for PromptRefusal {}

/// `delegate`'s `keepSecs` above the hub's window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeepOutOfRange {
    pub max_secs: u64,
}

impl fmt::Display for KeepOutOfRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "keepSecs must be 0..={} (tasks.session_keep_secs)",
            self.max_secs
        )
    }
}

/// The sub-machine. See the module doc.
#[derive(Debug, Clone, Default)]
pub struct Turns {
    settings: FollowUpSettings,
    tasks: BTreeMap<TaskId, Task>,
}

impl Turns {
    pub fn new(settings: FollowUpSettings) -> Turns {
        Turns {
            settings,
            tasks: BTreeMap::new(),
        }
    }

    pub fn settings(&self) -> FollowUpSettings {
        self.settings
    }

    /// A delegation's keep window: `keepSecs` narrows the hub's (0 ..= session_keep_secs),
    /// absent takes it whole; a hub that keeps no session (`max_kept_sessions = 0`) keeps
    /// none whatever was asked.
    pub fn keep_for(&self, asked: Option<u64>) -> Result<u64, KeepOutOfRange> {
        let max = self.settings.session_keep_secs;
        let keep = asked.unwrap_or(max);
        if keep > max {
            return Err(KeepOutOfRange { max_secs: max });
        }
        Ok(if self.settings.max_kept_sessions == 0 {
            0
        } else {
            keep
        })
    }

    /// A task was accepted with this keep window.
    pub fn register(&mut self, task: &TaskId, keep_secs: u64) {
        self.tasks.insert(
            task.clone(),
            Task {
                keep_secs,
                ..Task::default()
            },
        );
    }

    pub fn keep_secs(&self, task: &TaskId) -> u64 {
        self.tasks.get(task).map_or(0, |t| t.keep_secs)
    }

    /// The task runs headless: it has no session to keep or prompt.
    pub fn mark_headless(&mut self, task: &TaskId) {
        if let Some(t) = self.tasks.get_mut(task) {
            t.headless = true;
            t.keep_secs = 0;
        }
    }

    pub fn is_headless(&self, task: &TaskId) -> bool {
        self.tasks.get(task).is_some_and(|t| t.headless)
    }

    /// A turn begins (the first at the task's start); its number. A follow-up `How::
    /// Interrupt` leaves the turn before it open until its outcome (`interrupting`).
    pub fn begin(&mut self, task: &TaskId, how: How, started_ms: i64) -> u32 {
        let t = self.tasks.entry(task.clone()).or_default();
        let turn = t.turns.last().map_or(1, |l| l.turn.saturating_add(1));
        t.turns.push(Turn {
            turn,
            how,
            started_ms,
            end: None,
        });
        t.interrupting = how == How::Interrupt && t.turns.len() > 1;
        t.kept = None;
        turn
    }

    /// Takes back a turn whose commit failed (it was never sent); the kept session, if it
    /// was kept, stays kept until `kept` (what `unkeep` returned).
    pub fn abandon(&mut self, task: &TaskId, turn: u32, kept: Option<KeptSession>) {
        if let Some(t) = self.tasks.get_mut(task) {
            if t.turns
                .last()
                .is_some_and(|l| l.turn == turn && l.end.is_none())
            {
                t.turns.pop();
            }
            t.interrupting = false;
            t.kept = kept.map(|k| k.0);
        }
    }

    /// The open (or last) turn's number; 0 before the task started.
    pub fn current(&self, task: &TaskId) -> u32 {
        self.tasks
            .get(task)
            .and_then(|t| t.turns.last())
            .map_or(0, |l| l.turn)
    }

    /// Turns begun so far.
    pub fn count(&self, task: &TaskId) -> u32 {
        self.tasks
            .get(task)
            .map_or(0, |t| u32::try_from(t.turns.len()).unwrap_or(u32::MAX))
    }

    /// True while a follow-up sent with `interrupt` waits for the outcome of the turn it
    /// interrupts.
    pub fn interrupting(&self, task: &TaskId) -> bool {
        self.tasks.get(task).is_some_and(|t| t.interrupting)
    }

    /// Turn `turn` ended. An interrupted turn's outcome clears `interrupting`.
    pub fn end(&mut self, task: &TaskId, turn: u32, end: TurnEnd) {
        let Some(t) = self.tasks.get_mut(task) else {
            return;
        };
        if let Some(r) = t.turns.iter_mut().find(|r| r.turn == turn) {
            if r.end.is_none() {
                r.end = Some(end);
            }
        }
        if t.turns.last().is_some_and(|l| l.turn > turn) {
            t.interrupting = false;
        }
    }

    /// How the last ended turn ended.
    pub fn last_end(&self, task: &TaskId) -> Option<&TurnEnd> {
        self.tasks
            .get(task)?
            .turns
            .iter()
            .rev()
            .find_map(|r| r.end.as_ref())
    }

    /// Keeps the task's session from `now` for its keep window; the wall-clock `keptUntil`
    /// (Unix ms). None: the task keeps nothing (its window is 0).
    pub fn keep(&mut self, task: &TaskId, now: Instant, now_ms: i64) -> Option<i64> {
        let t = self.tasks.get_mut(task)?;
        if t.keep_secs == 0 || t.headless {
            return None;
        }
        let secs = t.keep_secs;
        let until_ms = now_ms.saturating_add(i64::try_from(secs * 1000).unwrap_or(i64::MAX));
        t.kept = Some(Kept {
            until: crate::kernel::deadline::after(now, Duration::from_secs(secs)),
            until_ms,
            since: now,
        });
        Some(until_ms)
    }

    /// The session is no longer kept (a follow-up took it, or it closes); what it was, for
    /// `abandon`.
    pub fn unkeep(&mut self, task: &TaskId) -> Option<KeptSession> {
        self.tasks.get_mut(task)?.kept.take().map(KeptSession)
    }

    pub fn kept_until_ms(&self, task: &TaskId) -> Option<i64> {
        self.tasks.get(task)?.kept.map(|k| k.until_ms)
    }

    /// Kept sessions now.
    pub fn kept(&self) -> usize {
        self.tasks.values().filter(|t| t.kept.is_some()).count()
    }

    /// Past `max_kept_sessions`: the oldest kept session (the one to close, `Why::Cap`).
    pub fn over_cap(&self) -> Option<TaskId> {
        if self.kept() <= self.settings.max_kept_sessions {
            return None;
        }
        self.tasks
            .iter()
            .filter_map(|(id, t)| t.kept.map(|k| (k.since, id)))
            .min()
            .map(|(_, id)| id.clone())
    }

    /// Kept sessions whose window has passed at `now`, oldest first.
    pub fn expired(&self, now: Instant) -> Vec<TaskId> {
        let mut due: Vec<(Instant, TaskId)> = self
            .tasks
            .iter()
            .filter_map(|(id, t)| {
                t.kept
                    .filter(|k| k.until <= now)
                    .map(|k| (k.until, id.clone()))
            })
            .collect();
        due.sort();
        due.into_iter().map(|(_, id)| id).collect()
    }

    /// The earliest end of a keep window.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.tasks
            .values()
            .filter_map(|t| t.kept.map(|k| k.until))
            .min()
    }

    /// Every kept session (the hub stopping closes them all).
    pub fn all_kept(&self) -> Vec<TaskId> {
        self.tasks
            .iter()
            .filter(|(_, t)| t.kept.is_some())
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// A task left the book.
    pub fn forget(&mut self, task: &TaskId) {
        self.tasks.remove(task);
    }

    /// The record's `turns` (oldest first; absent before the first start) with RFC 3339
    /// times from `rfc3339`.
    pub fn records(
        &self,
        task: &TaskId,
        rfc3339: impl Fn(i64) -> Option<String>,
    ) -> Option<Vec<TaskTurn>> {
        let t = self.tasks.get(task)?;
        if t.turns.is_empty() {
            return None;
        }
        Some(
            t.turns
                .iter()
                .map(|r| TaskTurn {
                    turn: r.turn,
                    state: r
                        .end
                        .as_ref()
                        .map_or(TaskState::Running.as_str(), |e| e.state.as_str())
                        .to_owned(),
                    stop_reason: r.end.as_ref().and_then(|e| e.stop_reason.clone()),
                    reason: r.end.as_ref().and_then(|e| e.reason.clone()),
                    started_at: rfc3339(r.started_ms).unwrap_or_default(),
                    ended_at: r.end.as_ref().and_then(|e| rfc3339(e.ended_ms)),
                    elapsed_ms: r.end.as_ref().map(|e| e.elapsed_ms),
                    how: r.how.as_str().to_owned(),
                })
                .collect(),
        )
    }

    /// The record's `session`: `live` while a turn runs, `kept` between turns, `closed`
    /// once it ended, `none` before it started or for a headless run. `resumable` is
    /// `none` in this release (resume after a restart is a later part, design §3).
    pub fn session(&self, task: &TaskId, state: TaskState) -> TaskSession {
        let t = self.tasks.get(task);
        let headless = t.is_some_and(|t| t.headless);
        let started = t.is_some_and(|t| !t.turns.is_empty());
        let word = match state {
            _ if headless || !started => "none",
            TaskState::Idle => "kept",
            TaskState::Running | TaskState::Cancelling => "live",
            _ => "closed",
        };
        TaskSession {
            state: word.to_owned(),
            kept_until: None,
            resumable: "none".to_owned(),
        }
    }
}

/// A kept session taken by `unkeep`, to be given back by `abandon`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeptSession(Kept);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::deadline::test_origin;

    fn id(n: u8) -> TaskId {
        TaskId(format!("task-{:032x}", n))
    }

    fn turns(keep: u64, max_kept: usize, max_turns: u32) -> Turns {
        Turns::new(FollowUpSettings {
            session_keep_secs: keep,
            max_kept_sessions: max_kept,
            max_turns,
        })
    }

    fn end(state: TaskState) -> TurnEnd {
        TurnEnd {
            state,
            stop_reason: Some("end_turn".into()),
            reason: None,
            ended_ms: 2_000,
            elapsed_ms: 1_000,
        }
    }

    #[test]
    fn turns_are_numbered_from_one_and_recorded_with_how_they_began() {
        let mut t = turns(60, 8, 32);
        let a = id(1);
        t.register(&a, 60);
        assert_eq!(t.current(&a), 0);
        assert_eq!(t.begin(&a, How::Prompt, 1_000), 1);
        t.end(&a, 1, end(TaskState::Completed));
        assert_eq!(t.begin(&a, How::Prompt, 3_000), 2);
        assert_eq!(t.begin(&a, How::Interrupt, 4_000), 3);
        assert!(t.interrupting(&a));
        t.end(&a, 2, end(TaskState::Cancelled));
        assert!(!t.interrupting(&a), "the interrupted turn's outcome came");
        let r = t.records(&a, |ms| Some(ms.to_string())).unwrap();
        let hows: Vec<_> = r
            .iter()
            .map(|x| (x.turn, x.how.as_str(), x.state.as_str()))
            .collect();
        assert_eq!(
            hows,
            [
                (1, "prompt", "completed"),
                (2, "prompt", "cancelled"),
                (3, "interrupt", "running")
            ]
        );
        assert_eq!(t.count(&a), 3);
        assert_eq!(t.last_end(&a).unwrap().state, TaskState::Cancelled);
    }

    #[test]
    fn keep_secs_narrows_the_hub_window_and_never_widens_it() {
        let t = turns(600, 8, 32);
        assert_eq!(t.keep_for(None), Ok(600));
        assert_eq!(t.keep_for(Some(30)), Ok(30));
        assert_eq!(t.keep_for(Some(0)), Ok(0));
        assert_eq!(t.keep_for(Some(601)), Err(KeepOutOfRange { max_secs: 600 }));
        assert_eq!(
            KeepOutOfRange { max_secs: 600 }.to_string(),
            "keepSecs must be 0..=600 (tasks.session_keep_secs)"
        );
        assert_eq!(
            turns(0, 8, 32).keep_for(None),
            Ok(0),
            "the default keeps nothing"
        );
        assert_eq!(
            turns(600, 0, 32).keep_for(Some(60)),
            Ok(0),
            "no room for any"
        );
    }

    #[test]
    fn the_keep_window_expires_on_the_virtual_clock() {
        let t0 = test_origin();
        let mut t = turns(60, 8, 32);
        let a = id(1);
        t.register(&a, 30);
        t.begin(&a, How::Prompt, 0);
        assert_eq!(t.keep(&a, t0, 1_000), Some(31_000));
        assert_eq!(t.poll_timeout(), Some(t0 + Duration::from_secs(30)));
        assert!(t.expired(t0 + Duration::from_millis(29_999)).is_empty());
        assert_eq!(t.expired(t0 + Duration::from_secs(30)), vec![a.clone()]);
        t.unkeep(&a);
        assert_eq!(t.poll_timeout(), None);
        // A task with no window keeps nothing; neither does a headless one.
        let b = id(2);
        t.register(&b, 0);
        assert_eq!(t.keep(&b, t0, 0), None);
        let c = id(3);
        t.register(&c, 30);
        t.mark_headless(&c);
        assert_eq!(t.keep(&c, t0, 0), None);
    }

    #[test]
    fn over_the_cap_the_oldest_kept_session_is_named() {
        let t0 = test_origin();
        let mut t = turns(60, 2, 32);
        for n in 1..=3 {
            t.register(&id(n), 60);
            t.keep(&id(n), t0 + Duration::from_secs(u64::from(n)), 0);
            if n < 3 {
                assert_eq!(t.over_cap(), None);
            }
        }
        assert_eq!(t.over_cap(), Some(id(1)));
        t.unkeep(&id(1));
        assert_eq!(t.over_cap(), None);
    }

    #[test]
    fn an_abandoned_turn_gives_the_kept_session_back() {
        let t0 = test_origin();
        let mut t = turns(60, 8, 32);
        let a = id(1);
        t.register(&a, 60);
        t.begin(&a, How::Prompt, 0);
        t.end(&a, 1, end(TaskState::Completed));
        t.keep(&a, t0, 0);
        let kept = t.unkeep(&a);
        assert_eq!(t.begin(&a, How::Prompt, 5), 2);
        t.abandon(&a, 2, kept);
        assert_eq!(t.current(&a), 1);
        assert_eq!(t.kept(), 1);
    }

    #[test]
    fn every_refusal_text_is_the_designs() {
        let task = "task-0123".to_owned();
        let cases = [
            (PromptRefusal::UnknownTask, "unknown task".to_owned()),
            (
                PromptRefusal::NotDelegator,
                "invalid task_prompt: only the task's delegator may prompt it".into(),
            ),
            (
                PromptRefusal::Queued { task: task.clone() },
                "invalid task_prompt: task-0123 is queued; its first turn has not ended".into(),
            ),
            (
                PromptRefusal::TurnOpen { task: task.clone(), turn: 2 },
                "invalid task_prompt: task-0123 has turn 2 open; wait for its outcome or send it with interrupt".into(),
            ),
            (
                PromptRefusal::NoSession { task: task.clone(), state: "completed" },
                "invalid task_prompt: task-0123 has no session any more (it ended completed)".into(),
            ),
            (
                PromptRefusal::Headless { task: task.clone() },
                "invalid task_prompt: task-0123 ran headless; only an ACP session takes follow-ups".into(),
            ),
            (
                PromptRefusal::MaxTurns { task: task.clone(), max: 32 },
                "invalid task_prompt: task-0123 has had tasks.max_turns (32) turns".into(),
            ),
            (
                PromptRefusal::OnPeer { task, peer: "lab".into() },
                "invalid task_prompt: task-0123 runs on peer lab, which takes no follow-ups".into(),
            ),
            (
                PromptRefusal::PromptTooLarge { bytes: 10, max_bytes: 4 },
                "invalid task_prompt: prompt is 10 bytes, over tasks.prompt_max_bytes (4)".into(),
            ),
        ];
        for (r, text) in cases {
            assert_eq!(r.to_string(), text);
        }
    }
}
