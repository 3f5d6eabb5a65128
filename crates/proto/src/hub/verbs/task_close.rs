//! `task_close` (issue 38 design §2; SPEC §16; docs/delegation.md "Follow-ups"): a task's
//! delegator ends its kept session now; the task settles with its last turn's state.
//!
//! A function over the machines it drives (`hub::tasks::TaskWork`) and the connection it
//! answers. The settle is staged as a task step whose `TaskThen::Line` answers
//! `{"task_close":{"task":…,"state":<final>}}` after the commit; the session's close goes out
//! at once (the task is settled in the book either way). A settled task is answered with its
//! state, as `cancel` answers one; a queued or running one is refused with the book's words.
//! Refuses IO, and every rule about who may close what (the book's).

use crate::hub::commit::TaskThen;
use crate::hub::conn_map::ConnId;
use crate::hub::conns::{Conns, Phase};
use crate::hub::outbox::Outbox;
use crate::hub::tasks::TaskWork;
use crate::kernel::now::Now;
use crate::wire::{HubLine, TaskRequest, TaskStateReply};

/// The refusal of a hub without `[tasks]` (SPEC §16).
const NOT_ENABLED: &str = "invalid task_close: delegation is not enabled on this hub";

/// `task_close`: refused, answered at once (nothing to close), or staged until its commit.
pub(in crate::hub) fn handle(
    conns: &mut Conns,
    out: &mut Outbox,
    work: TaskWork<'_>,
    conn: ConnId,
    req: TaskRequest,
    now: Now,
) {
    let name = conns.asker(conn);
    let Some(book) = work.book else {
        return conns.fail(out, conn, NOT_ENABLED, now);
    };
    match book.close(&req.task, &name, now, work.ids) {
        Err(refusal) => conns.fail(out, conn, &refusal, now),
        Ok(None) => {
            let line = HubLine::TaskClose(TaskStateReply {
                task: req.task.clone(),
                state: book.state_of(&req.task).to_owned(),
            });
            conns.reply(out, conn, &line, "task_close", now);
        }
        Ok(Some(taken)) => {
            let then = TaskThen::Line {
                conn,
                line: Box::new(HubLine::TaskClose(taken.reply)),
                tag: "task_close",
            };
            work.commit
                .stage_task_commit(work.router, taken.commit, Some(then));
            // The session's close (and any log line) the settle queued.
            work.commit.stage_task_actions(book, work.router, out);
            conns.set_deadline(conn, None);
            if let Some(c) = conns.get_mut(&conn) {
                c.phase = Phase::Staged;
            }
        }
    }
}
