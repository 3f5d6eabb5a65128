//! The `await` verb (SPEC §5.2): the first queued envelope that matches the filter is handed
//! over at once, otherwise the await parks with its timeout (`timeoutSecs` 0 answers
//! `timeout` at once); ack mode (SPEC §12.2) is carried into the delivery.

//!
//! A function over the machines it drives: the connections, the router (a queued envelope
//! taken, or the await parked), and the liveness book (a run of waiting begins).

use crate::hub::conn_map::ConnId;
use crate::hub::conns::{Conns, Phase};
use crate::hub::event::AuditEvent;
use crate::hub::liveness::Liveness;
use crate::hub::outbox::Outbox;
use crate::hub::router::{Filter, Router};
use crate::hub::settings::Settings;
use crate::kernel::now::Now;
use crate::wire::{AwaitRequest, HubLine, Reader};
use std::time::Duration;

/// `await` on `conn` (SPEC §5.2): hands over the first match, answers `timeout` at once for
/// `timeoutSecs` 0, or parks.
#[allow(clippy::too_many_arguments)] // the machines it drives, each named (PLAN.md §14)
pub(in crate::hub) fn handle(
    conns: &mut Conns,
    out: &mut Outbox,
    router: &mut Router,
    liveness: &mut Liveness,
    settings: &Settings,
    conn: ConnId,
    req: AwaitRequest,
    now: Now,
) {
    let name = conns.asker(conn);
    let filter = Filter {
        reply_to: req.reply_to,
        kind: req.kind,
    };
    let ack = req.ack.unwrap_or(false);
    // Checked against the list when the line was decoded; absent: a reader of no kind.
    let reader = req
        .reader
        .as_deref()
        .and_then(Reader::declared)
        .unwrap_or(Reader::Unknown);
    if let Some(c) = conns.get_mut(&conn) {
        c.reader = Some(reader);
    }
    if let Some(env) = router.take_first_match(&name, &filter) {
        let ack_timeout = settings.limits.ack_timeout();
        let ack_deadline = crate::kernel::deadline::after(now.mono, ack_timeout);
        return conns.hand_off(out, conn, env, ack, ack_deadline, now);
    }
    match req.timeout_secs {
        Some(0) => {
            out.audit(AuditEvent::Timeout { conn, name });
            conns.reply(out, conn, &HubLine::Timeout, "timeout", now);
        }
        secs => {
            // A timeout too far away to represent waits forever.
            let deadline = secs.and_then(|s| now.mono.checked_add(Duration::from_secs(s)));
            liveness.note_parking(&name, &settings.roster, router, now);
            let parked = router.park(&name, filter, conn);
            if let Some(c) = conns.get_mut(&conn) {
                c.phase = Phase::Parked {
                    parked,
                    deadline,
                    ack,
                };
            }
            conns.set_deadline(conn, deadline);
        }
    }
}
