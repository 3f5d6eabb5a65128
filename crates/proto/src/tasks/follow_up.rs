//! The task book's follow-ups (issue 38 design §2; docs/delegation.md "Follow-ups"):
//! `task_prompt` (a turn for a kept session, or with `interrupt` one that cancels the open
//! turn first), `task_close` (a kept session ends now), a turn's outcome while the task goes
//! on (its session kept, or its turn interrupted), and a kept session's close by its keep
//! window, the cap, its agent's exit, the delegator or the hub stopping: the task then
//! settles with its last turn's state, without a second envelope.
//!
//! Owns these steps of the book, as commits and actions; `turns` (`Turns`) decides numbers,
//! windows, the cap and the refusal texts. Refuses IO. What is durable stays schema 5's: a
//! kept turn writes the task's row as settled with that turn's state (so a restart, which
//! closes every kept session, finds the task ended as its last turn did), and a follow-up
//! writes it `running` again.

use super::turns::{How, KeptSession, PromptRefusal, TurnEnd, Why};
use super::{
    approvals, body, cap_text, hub_envelope, outcome_state, rfc3339, Ending, Quiet, TaskAction,
    TaskAudit, TaskBook, TaskCommit, TaskId, TaskState, TaskStoreOp, OUTCOME_KIND,
};
use crate::acp::Outcome;
use crate::kernel::ids::IdSource;
use crate::kernel::now::Now;
use crate::wire::{TaskPromptReply, TaskPromptRequest, TaskStateReply};

/// A follow-up the book took: its commit (the task `running` again, `task_turn_started`, the
/// interrupted turn's requests closed), then, once that is written, the prompt for the
/// runner and the reply to the asker. If the commit fails, `prompt_failed(undo)`.
#[derive(Debug)]
pub struct PromptTaken {
    pub commit: TaskCommit,
    pub go: TaskAction,
    pub reply: TaskPromptReply,
    pub undo: PromptUndo,
}

/// What `prompt_failed` needs to take a follow-up back.
#[derive(Debug, Clone)]
pub struct PromptUndo {
    task: TaskId,
    turn: u32,
    was_idle: bool,
    kept: Option<KeptSession>,
}

/// A `task_close` the book took: the settle's commit (no envelope) and its reply; the
/// session's close is among the book's actions.
#[derive(Debug)]
pub struct CloseTaken {
    pub commit: TaskCommit,
    pub reply: TaskStateReply,
}

impl TaskBook {
    /// `task_prompt` from `asker`: refused with the design's exact words, or taken (see
    /// `PromptTaken`). Only the task's delegator may prompt it; an approver who sees it is
    /// told so, anyone else gets `unknown task` as `task_status` would.
    pub fn prompt(
        &mut self,
        req: TaskPromptRequest,
        asker: &str,
        now: Now,
    ) -> Result<PromptTaken, PromptRefusal> {
        let id = TaskId::parse(&req.task).ok_or(PromptRefusal::UnknownTask)?;
        let t = self.tasks.get(&id).ok_or(PromptRefusal::UnknownTask)?;
        if !self.visible(t, asker) {
            return Err(PromptRefusal::UnknownTask);
        }
        if t.delegator != asker {
            return Err(PromptRefusal::NotDelegator);
        }
        let task = id.as_str().to_owned();
        if let Some(peer) = &t.peer {
            return Err(PromptRefusal::OnPeer {
                task,
                peer: peer.clone(),
            });
        }
        if self.turns.is_headless(&id) {
            return Err(PromptRefusal::Headless { task });
        }
        if let Some(what) = t
            .metered
            .budget
            .as_ref()
            .and_then(|b| b.passed)
            .map(|l| l.as_str())
        {
            return Err(PromptRefusal::OverBudget { task, what });
        }
        let interrupt = req.interrupts();
        let open = self.turns.current(&id);
        let how = match t.state {
            TaskState::Queued => return Err(PromptRefusal::Queued { task }),
            TaskState::Idle => How::Prompt,
            TaskState::Running if interrupt && !self.turns.interrupting(&id) => How::Interrupt,
            TaskState::Running | TaskState::Cancelling => {
                return Err(PromptRefusal::TurnOpen { task, turn: open })
            }
            s => {
                return Err(PromptRefusal::NoSession {
                    task,
                    state: s.as_str(),
                })
            }
        };
        if self.shutting_down {
            return Err(PromptRefusal::ShuttingDown);
        }
        let max = self.turns.settings().max_turns;
        if self.turns.count(&id) >= max {
            return Err(PromptRefusal::MaxTurns { task, max });
        }
        if req.prompt.is_empty() {
            return Err(PromptRefusal::PromptEmpty);
        }
        if req.prompt.len() > self.config.prompt_max_bytes {
            return Err(PromptRefusal::PromptTooLarge {
                bytes: req.prompt.len(),
                max_bytes: self.config.prompt_max_bytes,
            });
        }
        let was_idle = how == How::Prompt;
        let now_ms = now.wall.timestamp_millis();
        let kept = if was_idle {
            self.turns.unkeep(&id)
        } else {
            None
        };
        let turn = self.turns.begin(&id, how, now_ms);
        let mut commit = TaskCommit {
            store: vec![TaskStoreOp::State {
                task: task.clone(),
                state: TaskState::Running.as_str().to_owned(),
                started_ms: None,
                at_ms: now_ms,
            }],
            envelope: None,
            audit: vec![TaskAudit::TurnStarted {
                task: task.clone(),
                turn,
                how: how.as_str().to_owned(),
            }],
        };
        if !was_idle {
            // The interrupted turn's requests close with it (the session answers the agent
            // `cancelled` as it cancels, as for the delegator's cancel).
            let (store, audit) = self.approvals.close_task(&id, approvals::Closed::Cancelled);
            commit.store.extend(store);
            commit.audit.extend(audit);
        }
        let Some(t) = self.tasks.get_mut(&id) else {
            return Err(PromptRefusal::UnknownTask);
        };
        t.state = TaskState::Running;
        if !t.holds_slot {
            // The agent is already running, so a follow-up never waits for a slot; it
            // holds one (possibly past `max_concurrent`) until its turn ends.
            t.holds_slot = true;
            self.slots += 1;
        }
        if was_idle {
            t.ended_ms = None;
            t.elapsed_ms = None;
            t.stop_reason = None;
            t.reason = None;
            t.progress = None;
            t.sent = None;
        }
        Ok(PromptTaken {
            commit,
            go: TaskAction::Prompt {
                task: id.clone(),
                turn,
                text: req.prompt,
                interrupt,
            },
            reply: TaskPromptReply {
                task,
                turn,
                state: TaskState::Running.as_str().to_owned(),
            },
            undo: PromptUndo {
                task: id,
                turn,
                was_idle,
                kept,
            },
        })
    }

    /// A taken follow-up whose commit failed: it was never sent; the task is as it was
    /// (kept again until the same `keptUntil`, or its open turn still running).
    pub fn prompt_failed(&mut self, undo: PromptUndo) {
        self.turns.abandon(&undo.task, undo.turn, undo.kept);
        if !undo.was_idle {
            return;
        }
        let last = self.turns.last_end(&undo.task).cloned();
        let Some(t) = self.tasks.get_mut(&undo.task) else {
            return;
        };
        t.state = TaskState::Idle;
        if t.holds_slot {
            t.holds_slot = false;
            self.slots -= 1;
        }
        if let Some(e) = last {
            t.ended_ms = Some(e.ended_ms);
            t.elapsed_ms = Some(e.elapsed_ms);
            t.stop_reason = e.stop_reason;
            t.reason = e.reason;
        }
    }

    /// `task_close`: a kept session ends now and the task settles with its last turn's
    /// state (`reply` holds it). A settled task is answered with its state; a queued or
    /// running one is refused (`task cancel` stops those).
    pub fn close(
        &mut self,
        task: &str,
        asker: &str,
        now: Now,
        ids: &mut dyn IdSource,
    ) -> Result<Option<CloseTaken>, String> {
        let id = TaskId::parse(task).ok_or_else(|| "unknown task".to_owned())?;
        let t = self
            .tasks
            .get(&id)
            .ok_or_else(|| "unknown task".to_owned())?;
        if !self.visible(t, asker) {
            return Err("unknown task".to_owned());
        }
        if t.delegator != asker {
            return Err("invalid task_close: only the task's delegator may close it".to_owned());
        }
        match t.state {
            TaskState::Idle => {}
            s if s.is_final() => return Ok(None),
            TaskState::Queued => {
                return Err(format!(
                    "invalid task_close: {task} is queued; it has no session yet (task cancel ends it)"
                ))
            }
            _ => {
                return Err(format!(
                    "invalid task_close: {task} has turn {} open; wait for its outcome, or task cancel ends it",
                    self.turns.current(&id)
                ))
            }
        }
        let before = self.actions.len();
        self.close_kept(&id, Why::Closed, now, ids);
        // The settle's commit is the one it queued; the session's close follows it.
        let mut rest: Vec<TaskAction> = self.actions.drain(before..).collect();
        let at = rest
            .iter()
            .position(|a| matches!(a, TaskAction::Commit(_)))
            .ok_or_else(|| "invalid task_close: nothing to close".to_owned())?;
        let TaskAction::Commit(commit) = rest.remove(at) else {
            return Err("invalid task_close: nothing to close".to_owned());
        };
        self.actions.extend(rest);
        let state = self
            .tasks
            .get(&id)
            .map_or("unknown", |t| t.state.as_str())
            .to_owned();
        Ok(Some(CloseTaken {
            commit,
            reply: TaskStateReply {
                task: task.to_owned(),
                state,
            },
        }))
    }

    /// The state a task is in, for a `task_close` that had nothing to close.
    pub fn state_of(&self, task: &str) -> &'static str {
        TaskId::parse(task)
            .and_then(|id| self.tasks.get(&id))
            .map_or("unknown", |t| t.state.as_str())
    }

    /// A turn's outcome while the task goes on: the turn an interrupt cancelled, or a
    /// completed turn whose session is kept. True when handled here; false leaves the
    /// outcome to `on_outcome`, which ends the task with it.
    pub(super) fn turn_goes_on(
        &mut self,
        task: &TaskId,
        o: &Outcome,
        now: Now,
        ids: &mut dyn IdSource,
    ) -> bool {
        let Some(t) = self.tasks.get(task) else {
            return false;
        };
        let current = self.turns.current(task);
        let interrupted = o.turn < current && t.state == TaskState::Running;
        let kept = o.kept
            && t.state == TaskState::Running
            && o.turn == current
            && !self.shutting_down
            && self.turns.keep_secs(task) > 0;
        if !interrupted && !kept {
            return false;
        }
        let (state, stop_reason, mut reason) = outcome_state(&o.status);
        if interrupted && state == TaskState::Cancelled {
            reason = Some(format!("interrupted by a follow-up (turn {current})"));
        }
        let now_ms = now.wall.timestamp_millis();
        self.turns.end(
            task,
            o.turn,
            TurnEnd {
                state,
                stop_reason: stop_reason.clone(),
                reason: reason.clone(),
                ended_ms: now_ms,
                elapsed_ms: o.progress.elapsed_ms,
            },
        );
        let kept_until = if kept {
            self.turns.keep(task, now.mono, now_ms)
        } else {
            None
        };
        // The turn's figures join the task's (tokens summed, the run's cost its latest,
        // `tasks::meter`); a budget passed now ends nothing (the turn is done) but refuses
        // the next follow-up.
        if let Some(t) = self.tasks.get_mut(task) {
            let folded = t.metered.end_turn(&o.meter);
            self.on_folded(task, folded, false, now);
        }
        let max_text = self.config.outcome_text_max_bytes;
        let Some(t) = self.tasks.get_mut(task) else {
            return true;
        };
        let (text, cut) = cap_text(&o.text, max_text);
        let body = body::json(&body::OutcomeBody {
            task: task.as_str(),
            agent: &t.agent,
            peer: t.peer.as_deref(),
            turn: o.turn,
            state: state.as_str(),
            stop_reason: stop_reason.as_deref(),
            text,
            truncated: o.truncated || cut,
            reason: reason.as_deref(),
            elapsed_ms: o.progress.elapsed_ms,
            usage: t.metered.meter.usage(),
            cost: t.metered.meter.cost_figures(),
            context: t.metered.meter.context(),
            budget: t.metered.budget_figures(),
            session: "kept",
            kept_until: kept_until.and_then(rfc3339),
            report: None,
        });
        let envelope = hub_envelope(&t.delegator, task, OUTCOME_KIND, body, now, ids);
        let mut store = Vec::new();
        let mut audit = vec![TaskAudit::TurnEnded {
            task: task.0.clone(),
            turn: o.turn,
            state: state.as_str().to_owned(),
            stop_reason: stop_reason.clone(),
        }];
        if kept {
            // Durable as the task's ending until a follow-up: a restart closes every kept
            // session, and the task then reads as its last turn ended (schema 5).
            store.push(TaskStoreOp::Settle {
                task: task.0.clone(),
                state: state.as_str().to_owned(),
                stop_reason: stop_reason.clone(),
                reason: reason.clone(),
                ended_ms: now_ms,
                elapsed_ms: o.progress.elapsed_ms,
                meter: t.metered.meter.to_column(),
                budget: t
                    .metered
                    .budget
                    .as_ref()
                    .map(super::meter::Budget::to_column),
            });
            t.state = TaskState::Idle;
            t.ended_ms = Some(now_ms);
            t.elapsed_ms = Some(o.progress.elapsed_ms);
            t.stop_reason = stop_reason;
            t.reason = reason;
            t.progress = None;
            t.sent = None;
            if t.holds_slot {
                // Idle holds no runner slot (design §2): queued work may start.
                t.holds_slot = false;
                self.slots -= 1;
            }
            // Requests are per turn (design §2): what the turn left open closes with it.
            let (closes, close_audit) = self
                .approvals
                .close_task(task, approvals::Closed::TaskEnded);
            store.extend(closes);
            audit.extend(close_audit);
        }
        self.actions.push_back(TaskAction::Commit(TaskCommit {
            store,
            envelope: Some(envelope),
            audit,
        }));
        if kept {
            if let Some(oldest) = self.turns.over_cap() {
                self.close_kept(&oldest, Why::Cap, now, ids);
            }
            if !self.shutting_down {
                self.start_ready(now, ids);
            }
        }
        true
    }

    /// A kept session closes (`why`): the task settles with its last turn's state, with no
    /// second envelope; the session is told to close unless its agent is gone already.
    pub(super) fn close_kept(&mut self, task: &TaskId, why: Why, now: Now, ids: &mut dyn IdSource) {
        if self.tasks.get(task).map(|t| t.state) != Some(TaskState::Idle) {
            return;
        }
        self.turns.unkeep(task);
        let last = self.turns.last_end(task).cloned();
        let (state, stop_reason, reason, elapsed_ms) = match last {
            Some(e) => (e.state, e.stop_reason, e.reason, e.elapsed_ms),
            None => (TaskState::Completed, None, None, 0),
        };
        let ending = Ending {
            state,
            stop_reason,
            reason,
            text: "",
            truncated: false,
            elapsed_ms,
            report: None,
            turn: self.turns.current(task),
            quiet: Some(Quiet(why)),
        };
        self.actions.push_back(TaskAction::Log(format!(
            "task {task}: kept session closed ({})",
            why.as_str()
        )));
        self.settle(task, ending, now, ids);
        if why != Why::AgentExited {
            self.actions.push_back(TaskAction::Close(task.clone()));
        }
    }

    /// Kept sessions whose window passed close (`keep_expired`).
    pub(super) fn expire_kept(&mut self, now: Now, ids: &mut dyn IdSource) {
        for id in self.turns.expired(now.mono) {
            self.close_kept(&id, Why::KeepExpired, now, ids);
        }
    }
}
