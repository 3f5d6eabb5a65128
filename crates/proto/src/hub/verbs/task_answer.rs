//! `task_answer` (issue 37 design §5; SPEC §16.1; docs/delegation.md "Approvals"): a task's
//! delegator, or a name in `tasks.approvers`, answers a request the task's agent waits on.
//!
//! A function over the machines it drives (`hub::tasks::TaskWork`: the book, whose
//! `approvals` decide; the staging its commit goes to) and the connection it answers. A
//! refusal is one error line with the book's exact text. An answer taken is staged as a task
//! step (`request_answered`, the request row's close) whose `TaskThen::Answer` waits for the
//! commit: only then is the answerer told `{"task_answer":{…,"state":"answered"}}` and the
//! agent given the answer (`hub::settle`), so no agent acts on an answer the audit log does
//! not hold. A failed commit, or an answerer gone before it, leaves the request open again.
//! Refuses IO, and every rule about who may answer what (the book's).

use crate::hub::commit::TaskThen;
use crate::hub::conn_map::ConnId;
use crate::hub::conns::{Conns, Phase};
use crate::hub::outbox::Outbox;
use crate::hub::tasks::TaskWork;
use crate::kernel::now::Now;
use crate::wire::approval::{TaskAnswerReply, ANSWERED};
use crate::wire::TaskAnswerRequest;

/// The refusal of a hub without `[tasks]` (SPEC §16.1).
pub(in crate::hub) const NOT_ENABLED: &str =
    "invalid task_answer: delegation is not enabled on this hub";

/// `task_answer`: refused with the book's words, or staged until its commit answers.
pub(in crate::hub) fn handle(
    conns: &mut Conns,
    out: &mut Outbox,
    work: TaskWork<'_>,
    conn: ConnId,
    req: TaskAnswerRequest,
    now: Now,
) {
    let name = conns.asker(conn);
    let Some(book) = work.book else {
        return conns.fail(out, conn, NOT_ENABLED, now);
    };
    let taken = match book.answer(&req, &name) {
        Err(refusal) => return conns.fail(out, conn, &refusal.to_string(), now),
        Ok(taken) => taken,
    };
    out.log(format!(
        "task {}: {} answers {} with {} (its commit next)",
        req.task, name, taken.request, taken.option
    ));
    let then = TaskThen::Answer {
        conn,
        reply: TaskAnswerReply {
            task: req.task.clone(),
            request: taken.request.clone(),
            option: taken.option.clone(),
            state: ANSWERED.to_owned(),
        },
        request: taken.request,
        decision: Box::new(taken.decision),
    };
    work.commit
        .stage_task_commit(work.router, taken.commit, Some(then));
    conns.set_deadline(conn, None);
    if let Some(c) = conns.get_mut(&conn) {
        c.phase = Phase::Staged;
    }
}
