//! The `send` verb (SPEC §5.1, §3.2, §12.3): the checks a client's envelope passes before it
//! is staged (`hub::admit`), and the answer to a resend or a conflict. What the commit of a
//! staged send does with it (`accept`) and how a refused staging is undone (`unstage`) are
//! the batch's result, carried out in `hub::settle`. The `accepted` line's optional
//! `warning` is `hub::recipient`'s.
//!
//! A function over the machines it drives: the connections, the admission (staging, ledger,
//! router), and what the hub knows of recipients (`Known`: roster, forwarding peers, tasks).

use crate::hub::admit::{Admission, Admit};
use crate::hub::commit::flush_failed_refusal;
use crate::hub::conn_map::ConnId;
use crate::hub::conns::{Conns, Phase};
use crate::hub::event::AuditEvent;
use crate::hub::outbox::Outbox;
use crate::hub::recipient::Known;
use crate::hub::verbs::reply_durable;
use crate::kernel::names::{is_task_name, HUB_NAME};
use crate::kernel::now::Now;
use crate::tasks::TaskBook;
use crate::wire::Envelope;

/// `send` on `conn` (SPEC §5.1): the envelope's checks, then its admission; staged, it waits
/// for the commit (`accepted` follows it), otherwise it is answered now.
pub(in crate::hub) fn handle(
    conns: &mut Conns,
    out: &mut Outbox,
    mut admit: Admit<'_>,
    known: Known<'_>,
    conn: ConnId,
    mut env: Envelope,
    now: Now,
) {
    let name = conns.asker(conn);
    // Kinds only the hub writes (SPEC §3.4): a bounce, a task's outcome or progress. A
    // `task_outcome` from anyone else would end a delegator's `delegate --wait`.
    if let Some(kind) = crate::wire::envelope::hub_kind(&env.kind) {
        let why = crate::wire::EnvelopeError::ReservedKind(kind);
        return conns.fail(out, conn, &format!("invalid envelope: {why}"), now);
    }
    if env.to.eq_ignore_ascii_case(HUB_NAME) {
        // Nobody can authenticate as the hub, so such an envelope could only pile up.
        return conns.fail(
            out,
            conn,
            "invalid envelope: to \"hub\" names the hub itself, which receives nothing",
            now,
        );
    }
    if let Some(why) = task_send_refusal(known.tasks, &name, &env.to) {
        return conns.fail(out, conn, why, now);
    }
    if let Some(why) = task_inbox_refusal(known.tasks, &name, &env.to) {
        return conns.fail(out, conn, why, now);
    }
    env.from = name;
    match admit.admit(conns, &mut env, Some(conn), None) {
        Admission::Staged => {
            conns.set_deadline(conn, None);
            if let Some(c) = conns.get_mut(&conn) {
                c.phase = Phase::Staged;
            }
        }
        Admission::Duplicate if admit.commit.flush_failed().is_some() => {
            let why = flush_failed_refusal(admit.commit.flush_failed().unwrap_or(""));
            conns.fail(out, conn, &format!("envelope not accepted: {why}"), now)
        }
        Admission::Duplicate => {
            // A resend of an envelope already accepted (and durable): same answer, no copy.
            out.audit(AuditEvent::Duplicate {
                conn,
                id: env.id.clone(),
            });
            let line = known.accepted_line(conns, conn, env.id, &env.to);
            reply_durable(conns, out, admit.commit, conn, line, "duplicate", now)
        }
        Admission::Conflict => {
            let msg = format!(
                "id {:?} was already accepted from you with another destination, kind, correlationId or body; use a new id",
                env.id
            );
            conns.fail(out, conn, &msg, now)
        }
        Admission::InProgress => {
            let msg = format!(
                "a send with id {:?} is being accepted on another connection; retry",
                env.id
            );
            conns.fail(out, conn, &msg, now)
        }
        Admission::Full(reason) => {
            out.audit(AuditEvent::Refused {
                conn,
                id: env.id,
                reason: reason.clone(),
            });
            conns.fail(out, conn, &reason, now)
        }
    }
}

/// A task identity may mail only its delegator and `tasks.may_mail`; anyone else may mail
/// anyone. The refusal names no value (SPEC §8.2).
fn task_send_refusal(tasks: Option<&TaskBook>, from: &str, to: &str) -> Option<&'static str> {
    if !is_task_name(from) {
        return None;
    }
    let allowed = tasks.is_some_and(|b| b.may_mail(from, to));
    (!allowed).then_some(
        "invalid envelope: a task may mail only its delegator and the agents tasks.may_mail names",
    )
}

/// Mail to a task identity (`task-…`) comes only from its delegator and the names in
/// `tasks.may_mail`, while the task has not ended (`TaskBook::may_receive`); a hub without
/// `[tasks]` has no task to mail. One text for every refusal, so it tells a stranger nothing
/// about which tasks exist.
fn task_inbox_refusal(tasks: Option<&TaskBook>, from: &str, to: &str) -> Option<&'static str> {
    if !is_task_name(to) {
        return None;
    }
    let allowed = tasks.is_some_and(|b| b.may_receive(to, from));
    (!allowed).then_some(
        "invalid envelope: a task takes mail only from its delegator and the agents tasks.may_mail names, and only until it ends",
    )
}
