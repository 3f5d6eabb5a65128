//! The hub's side of delegated work (docs/delegation.md): the task book's instructions
//! turned into staged commits and outputs, the runner's events fed to the book, and the task
//! identities' place in authentication and routing.
//!
//! Owns the glue only. The book (`crate::tasks`) decides every task's state; the commit
//! (`commit`) decides batches. What this file guarantees is the pairing the book asks for:
//! an outcome envelope and its task's final state go into one batch (`Staged::rider`), a
//! `delegated` reply waits for the commit of its task's row, and an agent is started only
//! after the commit of its task's `running` state (`StagedTask`). Refuses IO.

use super::{Hub, Now, Output};
use crate::tasks::TaskEvent;
use crate::tasks::{StoredTask, TaskBook, TaskId};

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
            self.outputs.push(Output::KillOrphan { task, pid });
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
            self.outputs.push(match log.level {
                crate::acp::Level::Info => Output::Log(line),
                _ => Output::LogError(line),
            });
            return;
        }
        let Some(book) = self.tasks.as_mut() else {
            return;
        };
        let memory = &self.memory;
        let pending = |envelope_id: &str| memory.hub_envelope_queued(envelope_id);
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
        let memory = &self.memory;
        let pending = |envelope_id: &str| memory.hub_envelope_queued(envelope_id);
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

    /// Carries out every instruction the book queued (`Commits::stage_task_actions`).
    pub(super) fn drain_task_actions(&mut self, _now: Now) {
        if let Some(book) = self.tasks.as_mut() {
            self.commit
                .stage_task_actions(book, &mut self.router, &mut self.outputs);
        }
    }
}

impl Hub {
    /// Turns delegation on in a running hub (the server, once its executor exists).
    pub fn enable_tasks(&mut self, book: TaskBook) {
        self.tasks = Some(book);
    }
}
