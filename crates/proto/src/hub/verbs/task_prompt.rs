//! `task_prompt` (issue 38 design §2; SPEC §16; docs/delegation.md "Follow-ups"): a task's
//! delegator sends its kept session another turn, or with `interrupt` cancels the open turn
//! first.
//!
//! A function over the machines it drives (`hub::tasks::TaskWork`: the book, whose `turns`
//! decide; the staging its commit goes to) and the connection it answers. A refusal is one
//! error line with the book's exact text. A follow-up taken is staged as a task step (the task
//! `running` again, `task_turn_started`) whose `TaskThen::Prompt` waits for the commit: only
//! then is the asker told `{"task_prompt":{…,"turn":N,"state":"running"}}` and the runner given
//! the prompt (`hub::settle`), so no agent works on a turn the audit log does not hold. A
//! failed commit takes the turn back (`TaskBook::prompt_failed`) and refuses the asker.
//! Refuses IO, and every rule about who may prompt what (the book's).

use crate::hub::commit::TaskThen;
use crate::hub::conn_map::ConnId;
use crate::hub::conns::{Conns, Phase};
use crate::hub::outbox::Outbox;
use crate::hub::tasks::TaskWork;
use crate::kernel::now::Now;
use crate::tasks::PromptRefusal;
use crate::wire::TaskPromptRequest;

/// `task_prompt`: refused with the book's words, or staged until its commit answers.
pub(in crate::hub) fn handle(
    conns: &mut Conns,
    out: &mut Outbox,
    work: TaskWork<'_>,
    conn: ConnId,
    req: TaskPromptRequest,
    now: Now,
) {
    let name = conns.asker(conn);
    let Some(book) = work.book else {
        return conns.fail(out, conn, &PromptRefusal::NotEnabled.to_string(), now);
    };
    if conns.shutting_down() {
        return conns.fail(out, conn, &PromptRefusal::ShuttingDown.to_string(), now);
    }
    let taken = match book.prompt(req, &name, now) {
        Err(refusal) => return conns.fail(out, conn, &refusal.to_string(), now),
        Ok(taken) => taken,
    };
    out.log(format!(
        "task {}: {} sends turn {} (its commit next)",
        taken.reply.task, name, taken.reply.turn
    ));
    let then = TaskThen::Prompt {
        conn,
        reply: taken.reply,
        go: Box::new(taken.go),
        undo: Box::new(taken.undo),
    };
    work.commit
        .stage_task_commit(work.router, taken.commit, Some(then));
    conns.set_deadline(conn, None);
    if let Some(c) = conns.get_mut(&conn) {
        c.phase = Phase::Staged;
    }
}
