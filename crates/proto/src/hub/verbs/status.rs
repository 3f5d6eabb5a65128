//! The `status` verb (SPEC §12.4): what the hub remembers about one of the caller's own
//! envelope ids (SPEC §12.3's ledger): its state, the kind of reader it was handed to, its
//! position in the queue, attempts and the reason it is gone, or `unknown`. With `waitFor` it
//! waits for a stage: parked on the connection (`hub::receipts`), woken by the ledger change
//! that ends it (`changed`), or answered at its `timeoutMs` deadline on the core's clock
//! (`timed_out`).
//!
//! Functions over the machines the verb reads and drives: the connections (`hub::conns`,
//! which hold the parked waits), the memory of accepted ids (`hub::memory`) and the router
//! (for a queued envelope's position). Refuses IO, like the rest of the core.

use crate::hub::conn_map::ConnId;
use crate::hub::conns::{Conns, Phase};
use crate::hub::ledger::{IdText, Record, State};
use crate::hub::memory::Memory;
use crate::hub::outbox::Outbox;
use crate::hub::receipts::judge;
use crate::hub::router::Router;
use crate::kernel::now::Now;
use crate::wire::{EnvelopeStatus, HubLine, StatusRequest, WaitEnd};
use chrono::SecondsFormat;
use std::time::Duration;

/// The machines `status` reads: the ledger and its reasons, and the queues.
#[derive(Clone, Copy)]
pub(in crate::hub) struct Lookup<'a> {
    pub(in crate::hub) memory: &'a Memory,
    pub(in crate::hub) router: &'a Router,
}

/// `status` on `conn`: the caller's envelope `req.id` as the ledger has it, at once, or with
/// `waitFor` when its stage is reached or can no longer come (SPEC §12.4). `max_waits` is
/// `limits.max_status_waits`.
pub(in crate::hub) fn handle(
    conns: &mut Conns,
    out: &mut Outbox,
    at: Lookup<'_>,
    max_waits: usize,
    conn: ConnId,
    req: StatusRequest,
    now: Now,
) {
    let name = conns.asker(conn);
    if let Some(wait_for) = req.stage() {
        // A `status` with `waitFor`: answered at once when the stage is reached or can no
        // longer come (or `timeoutMs` is 0), else parked until one of those or the deadline.
        let (id, timeout_ms) = (req.id, req.timeout_ms);
        let found = at
            .memory
            .ledger
            .lookup(&name, &id)
            .map(|(sender, rec)| (sender.to_owned(), judge(wait_for, rec)));
        let sender = match found {
            None => {
                // The same line, waited or not, as for an id never sent: nothing is revealed.
                let mut st = unknown(id);
                st.wait = Some(WaitEnd::Ended.as_str().into());
                return conns.reply(out, conn, &HubLine::Status(st), "status", now);
            }
            Some((sender, Some(end))) => {
                return answer(conns, out, at, conn, (&sender, &id), end, now);
            }
            Some((sender, None)) if timeout_ms == Some(0) => {
                return answer(conns, out, at, conn, (&sender, &id), WaitEnd::Timeout, now);
            }
            Some((sender, None)) => sender,
        };
        if conns.parked_status_waits() >= max_waits {
            let msg = format!(
                "too many status waits: {max_waits} are parked, the most limits.max_status_waits allows; ask without waitFor, or wait again later"
            );
            return conns.fail(out, conn, &msg, now);
        }
        let deadline = timeout_ms
            .map(|ms| crate::kernel::deadline::after(now.mono, Duration::from_millis(ms)));
        return conns.park_status_wait(conn, sender, id, wait_for, deadline);
    }
    let status = match at.memory.ledger.lookup(&name, &req.id) {
        None => unknown(req.id),
        Some((sender, rec)) => status_of(at, sender, &req.id, rec),
    };
    conns.reply(out, conn, &HubLine::Status(status), "status", now);
}

/// The status line of the remembered envelope `(sender, id)` (SPEC §12.4 table).
pub(in crate::hub) fn status_of(
    at: Lookup<'_>,
    sender: &str,
    id: &str,
    rec: &Record,
) -> EnvelopeStatus {
    // One binary search in the recipient's queue (sorted by seq), not a walk of it.
    let found = at.router.find(&rec.to, rec.seq);
    let position = (rec.state == State::Queued)
        .then_some(found)
        .flatten()
        .filter(|(_, q)| q.id.is(id))
        .map(|(p, _)| p as u64 + 1);
    let attempts = found.map(|(_, q)| q.attempts);
    // The reader belongs to a hand-off: shown while it holds or consumed the envelope, and
    // for one lost at it (the ledger clears it when the envelope comes back).
    let reader = matches!(
        rec.state,
        State::Delivered | State::Acked | State::Bounced | State::Lost
    )
    .then_some(rec.reader)
    .flatten()
    .map(|r| r.as_str().to_owned());
    EnvelopeStatus {
        id: id.to_owned(),
        state: rec.state.as_str().into(),
        reader,
        from: Some(sender.to_owned()),
        to: Some(rec.to.to_string()),
        position,
        at: chrono::DateTime::from_timestamp_millis(rec.state_ms)
            .map(|t| t.to_rfc3339_opts(SecondsFormat::Millis, true)),
        attempts: attempts.filter(|&a| a > 0),
        reason: at.memory.reason_of(rec.seq, rec.state),
        wait: None,
    }
}

/// `{"state":"unknown"}` for `id`: never accepted, forgotten, or not the asker's to see.
pub(in crate::hub) fn unknown(id: String) -> EnvelopeStatus {
    EnvelopeStatus {
        id,
        state: "unknown".into(),
        ..EnvelopeStatus::default()
    }
}

/// The remembered envelope `(sender, id)` changed: every wait on it that this ends is
/// answered now.
pub(in crate::hub) fn changed<I: IdText + ?Sized>(
    conns: &mut Conns,
    out: &mut Outbox,
    at: Lookup<'_>,
    sender: &str,
    id: &I,
    now: Now,
) {
    if conns.parked_status_waits() == 0 {
        return;
    }
    id.with_text(|id| changed_text(conns, out, at, sender, id, now));
}

fn changed_text(
    conns: &mut Conns,
    out: &mut Outbox,
    at: Lookup<'_>,
    sender: &str,
    id: &str,
    now: Now,
) {
    // A record no longer remembered cannot be reached: it ends the wait as `unknown`.
    let ended = conns.status_waits_ended(sender, id, |wait_for| {
        match at.memory.ledger.get(sender, id) {
            Some(rec) => judge(wait_for, rec),
            None => Some(WaitEnd::Ended),
        }
    });
    for (conn, end) in ended {
        conns.unwatch_key(conn, sender, id);
        answer(conns, out, at, conn, (sender, id), end, now);
    }
}

/// A parked wait's `timeoutMs` passed: it is answered with where the envelope is now.
pub(in crate::hub) fn timed_out(
    conns: &mut Conns,
    out: &mut Outbox,
    at: Lookup<'_>,
    conn: ConnId,
    now: Now,
) {
    let Some(Phase::StatusWait { sender, id, .. }) = conns.get(&conn).map(|c| &c.phase) else {
        return;
    };
    let (sender, id) = (sender.clone(), id.clone());
    conns.unwatch_key(conn, &sender, &id);
    answer(conns, out, at, conn, (&sender, &id), WaitEnd::Timeout, now);
}

/// Answers the wait on `conn` for the envelope `(sender, id)` with where it is now and how
/// the wait `end`ed.
fn answer(
    conns: &mut Conns,
    out: &mut Outbox,
    at: Lookup<'_>,
    conn: ConnId,
    (sender, id): (&str, &str),
    end: WaitEnd,
    now: Now,
) {
    let mut st = match at.memory.ledger.get(sender, id) {
        Some(rec) => status_of(at, sender, id, rec),
        None => unknown(id.to_owned()),
    };
    st.wait = Some(end.as_str().into());
    conns.reply(out, conn, &HubLine::Status(st), "status", now);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hub::event::Output;
    use crate::hub::ledger::Record;
    use crate::hub::router::Queued;
    use crate::hub::verbs::fixture::Machines;
    use crate::wire::WaitFor;

    fn remember(m: &mut Machines, id: &str, seq: u64) {
        let at = m.now.wall.timestamp_millis();
        let record = Record {
            to: m.memory.ledger.name("ops"),
            digest: [0; 16],
            accepted_ms: at,
            state: State::Queued,
            state_ms: at,
            seq,
            ack_pending: false,
            reader: None,
        };
        m.memory.ledger.remember("bee", id, record);
        let mut env = Queued::new(id, "bee", "ops", "task", None, "{}");
        env.seq = seq;
        m.router.enqueue_back(env);
    }

    fn status_line(m: &mut Machines) -> EnvelopeStatus {
        loop {
            match m.out.pop() {
                Some(Output::Write { line, .. }) => {
                    let body = line.trim_end().as_bytes();
                    match HubLine::decode(body).expect("a hub line") {
                        HubLine::Status(st) => return st,
                        other => panic!("expected a status line, got {other:?}"),
                    }
                }
                Some(_) => {}
                None => panic!("no status line"),
            }
        }
    }

    /// The sender sees its queued envelope with its position; anyone else `unknown`.
    #[test]
    fn status_answers_the_sender_from_the_ledger_and_the_queue() {
        let mut m = Machines::new();
        remember(&mut m, "e1", 4);
        m.agent(1, "bee");
        let at = Lookup {
            memory: &m.memory,
            router: &m.router,
        };
        let req = |id: &str| StatusRequest {
            id: id.into(),
            ..StatusRequest::default()
        };
        handle(&mut m.conns, &mut m.out, at, 10, 1, req("e1"), m.now);
        let st = status_line(&mut m);
        assert_eq!((st.state.as_str(), st.position), ("queued", Some(1)));
        assert_eq!(st.to.as_deref(), Some("ops"));
        m.agent(2, "stranger-agent");
        let at = Lookup {
            memory: &m.memory,
            router: &m.router,
        };
        handle(&mut m.conns, &mut m.out, at, 10, 2, req("e1"), m.now);
        assert_eq!(status_line(&mut m), unknown("e1".into()));
    }

    /// A wait parks on its connection and is answered by the change that ends it.
    #[test]
    fn a_status_wait_parks_and_ends_with_the_change() {
        let mut m = Machines::new();
        remember(&mut m, "e1", 4);
        m.agent(1, "bee");
        let at = Lookup {
            memory: &m.memory,
            router: &m.router,
        };
        let req = StatusRequest {
            id: "e1".into(),
            wait_for: Some(WaitFor::Delivered.as_str().into()),
            ..StatusRequest::default()
        };
        handle(&mut m.conns, &mut m.out, at, 10, 1, req, m.now);
        assert_eq!(m.conns.parked_status_waits(), 1);
        assert_eq!(m.out.pop(), None, "parked, not answered");
        let at_ms = m.now.wall.timestamp_millis();
        m.memory
            .ledger
            .set_state("bee", "e1", State::Delivered, false, at_ms);
        let at = Lookup {
            memory: &m.memory,
            router: &m.router,
        };
        changed(&mut m.conns, &mut m.out, at, "bee", "e1", m.now);
        let st = status_line(&mut m);
        assert_eq!(
            (st.state.as_str(), st.wait.as_deref()),
            ("delivered", Some("reached"))
        );
        assert_eq!(m.conns.parked_status_waits(), 0);
    }
}
