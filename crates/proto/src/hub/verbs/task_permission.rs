//! `task_permission` (issue 37 design §6; SPEC §16.1; docs/delegation.md "Approvals"): a
//! headless task's permission prompt, carried by the hub's MCP server that the task's agent
//! runs as its `--permission-prompt-tool` (`agent-hub mcp --as task-…`).
//!
//! A function over the machines it drives (`hub::tasks::TaskWork`: the book, whose
//! `ask_permission` decides who may ask and how the prompt is answered; the staging its
//! commits go to) and the connection it parks. The asker is the task: the verb names no task,
//! so no identity can ask about another's, and a roster agent cannot ask at all. A refusal is
//! one error line with the book's exact text. A prompt taken parks its connection as
//! `Phase::Asking` under `(task, seq)`; its one reply, `{"task_permission":{"behavior":…}}`,
//! is written by `Hub::answer_prompts` when the book has decided it (at once under the
//! policy, a rule or a cap; else when the request is answered, expires, or its task is
//! cancelled or ends). Refuses IO, and every rule about a request (the book's).

use crate::hub::conn_map::ConnId;
use crate::hub::conns::Conns;
use crate::hub::outbox::Outbox;
use crate::hub::tasks::TaskWork;
use crate::kernel::now::Now;
use crate::wire::TaskPermissionRequest;

/// The refusal of a hub without `[tasks]` (SPEC §16.1).
pub(in crate::hub) const NOT_ENABLED: &str =
    "invalid task_permission: delegation is not enabled on this hub";

/// `task_permission`: refused with the book's words, or parked until its decision.
pub(in crate::hub) fn handle(
    conns: &mut Conns,
    out: &mut Outbox,
    mut work: TaskWork<'_>,
    conn: ConnId,
    req: TaskPermissionRequest,
    now: Now,
) {
    let name = conns.asker(conn);
    let Some(book) = work.book.as_deref_mut() else {
        return conns.fail(out, conn, NOT_ENABLED, now);
    };
    match book.ask_permission(&name, &req, now, &mut *work.ids) {
        Err(refusal) => conns.fail(out, conn, &refusal.to_string(), now),
        Ok(seq) => {
            // Parked before the book's instructions are carried out, so a reply decided at
            // once finds its connection.
            conns.park_asking(conn, name, seq);
            work.drain(out);
        }
    }
}
