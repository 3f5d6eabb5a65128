//! The hub's side of delegated work (docs/delegation.md): the task book's instructions
//! turned into staged commits and outputs, the runner's events fed to the book, and the task
//! identities' place in authentication and routing.
//!
//! Owns the glue only. The book (`crate::tasks`) decides every task's state; the commit
//! (`commit`) decides batches. What this file guarantees is the pairing the book asks for:
//! an outcome envelope and its task's final state go into one batch (`Staged::rider`), a
//! `delegated` reply waits for the commit of its task's row, and an agent is started only
//! after the commit of its task's `running` state (`StagedTask`). Refuses IO.

use super::{AuditEvent, ConnId, Hub, Now, Output, PeerSend, Rider, StagedTask, TaskThen};
use crate::hub::durable::StoreOp;
use crate::hub::ledger::State;
use crate::tasks::TaskEvent;
use crate::tasks::{StoredTask, TaskAction, TaskBook, TaskCommit, TaskId};
use crate::wire::{HubLine, TaskStateReply};

impl Hub {
    /// Turns delegation on (a `[tasks]` table): `book` holds the runnable agents.
    pub fn with_tasks(mut self, book: TaskBook) -> Hub {
        self.tasks = Some(book);
        self
    }

    /// The agents this hub can run from now on (the manifests read again on SIGHUP): later
    /// delegations are checked against them; tasks already accepted are not touched, since
    /// the executor resolves a task's agent when it starts it. Without `[tasks]`, nothing.
    pub fn set_task_agents(&mut self, agents: Vec<String>) {
        if let Some(book) = self.tasks.as_mut() {
            book.set_agents(agents);
        }
    }

    /// Rebuilds the task book from the store's rows at startup (docs/delegation.md
    /// "Durability"): outcome envelopes of tasks that were running are staged for the first
    /// batch, queued tasks start as slots allow (after that batch), and every task that was
    /// running with a known process group is named for the IO layer to make sure it is gone.
    pub fn restore_tasks(&mut self, rows: Vec<StoredTask>, now: Now) {
        let Some(book) = self.tasks.as_mut() else {
            return;
        };
        let orphans: Vec<(String, u32)> = rows
            .iter()
            .filter(|r| matches!(r.state.as_str(), "running" | "cancelling"))
            .filter_map(|r| r.pid.map(|pid| (r.task.clone(), pid)))
            .collect();
        book.restore(rows, now, &mut *self.ids);
        for (task, pid) in orphans {
            self.outputs.push_back(Output::KillOrphan { task, pid });
        }
        self.start_tasks(now);
    }

    /// Starts what the book can start now, then carries out its instructions.
    pub(super) fn start_tasks(&mut self, now: Now) {
        if let Some(book) = self.tasks.as_mut() {
            book.start_ready(now, &mut *self.ids);
        }
        self.drain_task_actions(now);
    }

    /// One event from a task's runner (the IO layer drains them after its waker fires).
    pub fn handle_task_event(&mut self, task: &str, event: TaskEvent, now: Now) {
        let Some(id) = TaskId::parse(task) else {
            return;
        };
        let ended = matches!(event, TaskEvent::Ended(_));
        if let TaskEvent::Log(log) = &event {
            // The session's and runner's lines hold no prompt, text or secret (runner docs).
            let line = format!("task {id}: {}", log.message);
            self.outputs.push_back(match log.level {
                crate::acp::Level::Info => Output::Log(line),
                _ => Output::LogError(line),
            });
            return;
        }
        let Some(book) = self.tasks.as_mut() else {
            return;
        };
        let ledger = &self.ledger;
        let pending = |envelope_id: &str| {
            ledger.state_of(crate::kernel::names::HUB_NAME, envelope_id) == Some(State::Queued)
        };
        book.handle_event(&id, event, now, &mut *self.ids, &pending);
        self.drain_task_actions(now);
        if ended {
            // A slot is free only once the process is reaped (docs/delegation.md).
            self.start_tasks(now);
        }
    }

    /// Progress envelopes held back by their interval (called from `handle_timeout`).
    pub(super) fn expire_tasks(&mut self, now: Now) {
        let Some(book) = self.tasks.as_mut() else {
            return;
        };
        if !book.poll_timeout().is_some_and(|at| at <= now.mono) {
            return;
        }
        let ledger = &self.ledger;
        let pending = |envelope_id: &str| {
            ledger.state_of(crate::kernel::names::HUB_NAME, envelope_id) == Some(State::Queued)
        };
        book.handle_timeout(now, &mut *self.ids, &pending);
        self.drain_task_actions(now);
    }

    /// The hub is stopping: running tasks are asked to cancel; nothing new starts.
    pub(super) fn shutdown_tasks(&mut self, now: Now) {
        if let Some(book) = self.tasks.as_mut() {
            book.shutdown();
        }
        self.drain_task_actions(now);
    }

    /// Tasks whose outcome has not come in yet (the drain waits for them).
    pub fn active_tasks(&self) -> usize {
        self.tasks.as_ref().map_or(0, TaskBook::active)
    }

    /// Whether `name`/`token` authenticate a live task identity (docs/delegation.md
    /// "Task identity").
    pub(super) fn verify_task_identity(&self, name: &str, token: &str) -> bool {
        self.tasks
            .as_ref()
            .is_some_and(|b| b.verify_identity(name, token).is_some())
    }

    /// A task identity may mail only its delegator and `tasks.may_mail`; anyone else may
    /// mail anyone. The refusal names no value (SPEC §8.2).
    pub(super) fn task_send_refusal(&self, from: &str, to: &str) -> Option<&'static str> {
        if !crate::kernel::names::is_task_name(from) {
            return None;
        }
        let allowed = self.tasks.as_ref().is_some_and(|b| b.may_mail(from, to));
        (!allowed).then_some(
            "invalid envelope: a task may mail only its delegator and the agents tasks.may_mail names",
        )
    }

    /// Mail to a task identity (`task-…`) comes only from its delegator and the names in
    /// `tasks.may_mail`, while the task has not ended (`TaskBook::may_receive`); a hub
    /// without `[tasks]` has no task to mail. One text for every refusal, so it tells a
    /// stranger nothing about which tasks exist.
    pub(super) fn task_inbox_refusal(&self, from: &str, to: &str) -> Option<&'static str> {
        if !crate::kernel::names::is_task_name(to) {
            return None;
        }
        let allowed = self.tasks.as_ref().is_some_and(|b| b.may_receive(to, from));
        (!allowed).then_some(
            "invalid envelope: a task takes mail only from its delegator and the agents tasks.may_mail names, and only until it ends",
        )
    }

    /// Carries out every instruction the book queued.
    pub(super) fn drain_task_actions(&mut self, now: Now) {
        loop {
            let Some(action) = self.tasks.as_mut().and_then(TaskBook::poll_action) else {
                return;
            };
            match action {
                TaskAction::Commit(c) => self.stage_task_commit(c, None, now),
                TaskAction::Start(spec) => {
                    // Its `running` state was queued just before: the agent starts once that
                    // commit is written, so a crash in between reports `hub_restarted`
                    // instead of running the work twice.
                    match self.staged_tasks.last_mut() {
                        Some(StagedTask {
                            then: then @ TaskThen::Nothing,
                            ..
                        }) => *then = TaskThen::Start(Box::new(spec)),
                        _ => self.staged_tasks.push(StagedTask {
                            store: Vec::new(),
                            audit: Vec::new(),
                            then: TaskThen::Start(Box::new(spec)),
                        }),
                    }
                }
                TaskAction::Cancel(task) => self.outputs.push_back(Output::CancelTask { task }),
                TaskAction::Answer { task, seq, answer } => self
                    .outputs
                    .push_back(Output::AnswerTask { task, seq, answer }),
                TaskAction::Log(line) => self.outputs.push_back(Output::Log(line)),
                TaskAction::ToPeer {
                    peer,
                    payload,
                    handoff,
                } => self.stage_peer_send(PeerSend {
                    peer,
                    payload,
                    handoff,
                }),
            }
        }
    }

    /// One book commit: with an envelope, the envelope is staged and everything else rides
    /// with it; without one, it is a `StagedTask` (answered to `reply_to` when given).
    pub(super) fn stage_task_commit(
        &mut self,
        c: TaskCommit,
        reply_to: Option<(ConnId, TaskId)>,
        _now: Now,
    ) {
        let store: Vec<StoreOp> = if self.durable {
            c.store.into_iter().map(StoreOp::Task).collect()
        } else {
            Vec::new()
        };
        let audit: Vec<AuditEvent> = c.audit.into_iter().map(AuditEvent::Task).collect();
        let Some(env) = c.envelope else {
            let then = match reply_to {
                Some((conn, task)) => TaskThen::Reply { conn, task },
                None => TaskThen::Nothing,
            };
            self.staged_tasks.push(StagedTask { store, audit, then });
            return;
        };
        self.stage_hub_envelope(&env, Some(Box::new(Rider { store, audit })));
    }

    /// The outcome of a batch for its task steps.
    pub(super) fn settle_staged_tasks(
        &mut self,
        tasks: Vec<StagedTask>,
        result: &Result<(), String>,
        now: Now,
    ) {
        for t in tasks {
            match (result, t.then) {
                (Ok(()), TaskThen::Reply { conn, task }) => {
                    // Committed as queued; starting it is a later step of its own.
                    let line = HubLine::Delegated(TaskStateReply {
                        task: task.as_str().to_owned(),
                        state: "queued".to_owned(),
                    });
                    if self.conns.contains_key(&conn) {
                        self.reply_durable(conn, line, "delegated", now);
                    }
                    self.start_tasks(now);
                }
                (Ok(()), TaskThen::Start(spec)) => {
                    self.outputs.push_back(Output::StartTask(spec));
                }
                (Ok(()), TaskThen::Nothing) => {}
                (Ok(()), TaskThen::ToPeer(sends)) => {
                    for send in sends {
                        self.outputs.push_back(Output::ToPeer(Box::new(send)));
                    }
                }
                (Err(why), TaskThen::Reply { conn, task }) => {
                    if let Some(book) = self.tasks.as_mut() {
                        book.withdraw(&task);
                    }
                    let msg = format!("delegation not accepted: {why}");
                    if self.conns.contains_key(&conn) {
                        self.fail(conn, &msg, now);
                    }
                }
                (Err(_), then) => {
                    // Kept for the next batch, as a bounce is: the book already counts the
                    // task as started, and starting it waits for its state to be durable.
                    self.staged_tasks.push(StagedTask {
                        store: t.store,
                        audit: t.audit,
                        then,
                    });
                }
            }
        }
    }
}

impl Hub {
    /// Turns delegation on in a running hub (the server, once its executor exists).
    pub fn enable_tasks(&mut self, book: TaskBook) {
        self.tasks = Some(book);
    }
}
