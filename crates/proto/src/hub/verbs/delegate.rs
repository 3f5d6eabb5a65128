//! The delegation verbs (docs/delegation.md "Verbs and replies"; our extension, SPEC §16):
//! `delegate` (answered `delegated` once the task's row is committed; its `permission` and
//! `allow` are the book's to check, issue 37), `task_status`, `tasks` and `cancel`, each one
//! verb per connection like `status` and `who`. `task_answer` has its own file.
//!
//! Owns the verbs' handling; the task book (`crate::tasks`) decides. A hub without a
//! `[tasks]` table answers every one of them with the same clear error.

//!
//! Functions over the machines they drive (`hub::tasks::TaskWork`: the book, the id source,
//! the staging and the router its envelopes are named by) and the connection they answer.

use crate::hub::commit::TaskThen;
use crate::hub::conn_map::ConnId;
use crate::hub::conns::{Conns, Phase};
use crate::hub::outbox::Outbox;
use crate::hub::tasks::TaskWork;
use crate::kernel::now::Now;
use crate::tasks::{DelegateRefusal, TaskAction, TaskBook};
use crate::wire::{DelegateRequest, HubLine, TaskRequest};

fn not_enabled(conns: &mut Conns, out: &mut Outbox, conn: ConnId, verb: &str, now: Now) {
    let msg = format!("invalid {verb}: delegation is not enabled on this hub");
    conns.fail(out, conn, &msg, now)
}

/// `delegate` (docs/delegation.md "Verbs and replies"): the task is submitted to the book and
/// its row staged; `delegated` answers once that row is committed (`hub::settle`).
pub(in crate::hub) fn delegate(
    conns: &mut Conns,
    out: &mut Outbox,
    work: TaskWork<'_>,
    conn: ConnId,
    req: DelegateRequest,
    now: Now,
) {
    let name = conns.asker(conn);
    let Some(book) = work.book else {
        return conns.fail(out, conn, &DelegateRefusal::NotEnabled.to_string(), now);
    };
    if conns.shutting_down() {
        return conns.fail(out, conn, "invalid delegate: the hub is shutting down", now);
    }
    match book.submit(req, &name, now, work.ids) {
        Err(refusal) => conns.fail(out, conn, &refusal.to_string(), now),
        Ok(task) => {
            // The submit's one instruction is the commit of the task's row; the reply
            // waits for it (docs/delegation.md "Durability").
            let mut rest = Vec::new();
            while let Some(a) = book.poll_action() {
                rest.push(a);
            }
            let mut answered = false;
            for a in rest {
                match a {
                    TaskAction::Commit(c) if !answered => {
                        answered = true;
                        let reply = TaskThen::Reply {
                            conn,
                            task: task.clone(),
                        };
                        work.commit.stage_task_commit(work.router, c, Some(reply));
                    }
                    TaskAction::Commit(c) => work.commit.stage_task_commit(work.router, c, None),
                    TaskAction::Log(l) => out.log(l),
                    // A submit starts nothing, cancels nothing, answers nothing and tells no
                    // peer.
                    TaskAction::Start(_)
                    | TaskAction::Cancel(_)
                    | TaskAction::Answer { .. }
                    | TaskAction::AnswerCommit { .. }
                    | TaskAction::Prompt { .. }
                    | TaskAction::Close(_)
                    | TaskAction::ToPeer { .. } => {}
                }
            }
            conns.set_deadline(conn, None);
            if let Some(c) = conns.get_mut(&conn) {
                c.phase = Phase::Staged;
            }
        }
    }
}

/// `task_status`: the task's record if the asker delegated it.
pub(in crate::hub) fn task_status(
    conns: &mut Conns,
    out: &mut Outbox,
    book: Option<&TaskBook>,
    conn: ConnId,
    req: TaskRequest,
    now: Now,
) {
    let name = conns.asker(conn);
    let Some(book) = book else {
        return not_enabled(conns, out, conn, "task_status", now);
    };
    let record = book.status(&req.task, &name, now);
    let line = HubLine::TaskStatus(Box::new(record));
    conns.reply(out, conn, &line, "task_status", now);
}

/// `tasks`: the asker's own tasks.
pub(in crate::hub) fn tasks(
    conns: &mut Conns,
    out: &mut Outbox,
    book: Option<&TaskBook>,
    conn: ConnId,
    now: Now,
) {
    let name = conns.asker(conn);
    let Some(book) = book else {
        return not_enabled(conns, out, conn, "tasks", now);
    };
    let list = book.list(&name, now);
    conns.reply(out, conn, &HubLine::Tasks(list), "tasks", now);
}

/// `cancel`: the book decides; what it asks for (a cancel of the runner, the `cancelling`
/// state) is carried out before the answer.
pub(in crate::hub) fn cancel(
    conns: &mut Conns,
    out: &mut Outbox,
    work: TaskWork<'_>,
    conn: ConnId,
    req: TaskRequest,
    now: Now,
) {
    let name = conns.asker(conn);
    let Some(book) = work.book else {
        return not_enabled(conns, out, conn, "cancel", now);
    };
    let reply = book.cancel(&req.task, &name, now, work.ids);
    work.commit.stage_task_actions(book, work.router, out);
    conns.reply(out, conn, &HubLine::Cancel(reply), "cancel", now);
}
