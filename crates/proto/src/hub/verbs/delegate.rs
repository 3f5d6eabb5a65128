//! The delegation verbs (docs/delegation.md "Verbs and replies"; our extension, SPEC §16):
//! `delegate` (answered `delegated` once the task's row is committed), `task_status`,
//! `tasks` and `cancel`, each one verb per connection like `status` and `who`.
//!
//! Owns the verbs' handling; the task book (`crate::tasks`) decides. A hub without a
//! `[tasks]` table answers every one of them with the same clear error.

use crate::hub::session::Phase;
use crate::hub::{ConnId, Hub, Now};
use crate::tasks::{DelegateRefusal, TaskAction};
use crate::wire::{DelegateRequest, HubLine, TaskRequest};

impl Hub {
    fn asker(&self, conn: ConnId) -> String {
        self.conns[&conn]
            .name
            .clone()
            .expect("verb phase is authenticated")
    }

    fn not_enabled(&mut self, conn: ConnId, verb: &str, now: Now) {
        let msg = format!("invalid {verb}: delegation is not enabled on this hub");
        self.fail(conn, &msg, now)
    }

    pub(in crate::hub) fn on_delegate(&mut self, conn: ConnId, req: DelegateRequest, now: Now) {
        let name = self.asker(conn);
        let Some(book) = self.tasks.as_mut() else {
            return self.fail(conn, &DelegateRefusal::NotEnabled.to_string(), now);
        };
        if self.shutting_down {
            return self.fail(conn, "invalid delegate: the hub is shutting down", now);
        }
        match book.submit(req, &name, now, &mut *self.ids) {
            Err(refusal) => self.fail(conn, &refusal.to_string(), now),
            Ok(task) => {
                // The submit's one instruction is the commit of the task's row; the reply
                // waits for it (docs/delegation.md "Durability").
                let mut rest = Vec::new();
                while let Some(a) = self.tasks.as_mut().and_then(|b| b.poll_action()) {
                    rest.push(a);
                }
                let mut answered = false;
                for a in rest {
                    match a {
                        TaskAction::Commit(c) if !answered => {
                            answered = true;
                            self.stage_task_commit(c, Some((conn, task.clone())), now);
                        }
                        TaskAction::Commit(c) => self.stage_task_commit(c, None, now),
                        TaskAction::Log(l) => self.outputs.push_back(crate::hub::Output::Log(l)),
                        // A submit starts nothing, cancels nothing, answers nothing and tells
                        // no peer.
                        TaskAction::Start(_)
                        | TaskAction::Cancel(_)
                        | TaskAction::Answer { .. }
                        | TaskAction::ToPeer { .. } => {}
                    }
                }
                self.set_deadline(conn, None);
                self.conns.get_mut(&conn).expect("caller checked").phase = Phase::Staged;
            }
        }
    }

    pub(in crate::hub) fn on_task_status(&mut self, conn: ConnId, req: TaskRequest, now: Now) {
        let name = self.asker(conn);
        let Some(book) = self.tasks.as_ref() else {
            return self.not_enabled(conn, "task_status", now);
        };
        let record = book.status(&req.task, &name, now);
        self.reply(
            conn,
            &HubLine::TaskStatus(Box::new(record)),
            "task_status",
            now,
        );
    }

    pub(in crate::hub) fn on_tasks(&mut self, conn: ConnId, now: Now) {
        let name = self.asker(conn);
        let Some(book) = self.tasks.as_ref() else {
            return self.not_enabled(conn, "tasks", now);
        };
        let list = book.list(&name, now);
        self.reply(conn, &HubLine::Tasks(list), "tasks", now);
    }

    pub(in crate::hub) fn on_cancel(&mut self, conn: ConnId, req: TaskRequest, now: Now) {
        let name = self.asker(conn);
        let Some(book) = self.tasks.as_mut() else {
            return self.not_enabled(conn, "cancel", now);
        };
        let reply = book.cancel(&req.task, &name, now, &mut *self.ids);
        self.drain_task_actions(now);
        self.reply(conn, &HubLine::Cancel(reply), "cancel", now);
    }
}
