//! The `turn` verb (SPEC §14): an agent's hooks report its turn state (busy, idle, gone) and
//! the process to watch for it (`hub::liveness`); the answer is its state as `who` now shows
//! it. Only a roster name has a state; a task identity is refused.
//!
//! A function over the machines it reads and drives: the liveness book, the roster, the
//! router (whether the name has a parked await). Refuses answering: the dispatcher replies
//! with what it returns.

use crate::hub::event::WatchedProcess;
use crate::hub::liveness::{Liveness, TurnState};
use crate::hub::router::Router;
use crate::kernel::now::Now;
use crate::roster::Roster;
use crate::wire::{TurnReply, TurnRequest};

/// `turn` from `name` (SPEC §14): records the report and answers with the name's state as
/// `who` now shows it, and whether the name entered `gone` with it (its leases end, lease
/// design §A.5); or the error the line gets.
pub(in crate::hub) fn answer(
    liveness: &mut Liveness,
    roster: &Roster,
    router: &Router,
    name: &str,
    req: TurnRequest,
    now: Now,
) -> Result<(TurnReply, bool), &'static str> {
    if !roster.contains(name) {
        return Err("turn is for roster agents only");
    }
    let Some(state) = TurnState::parse(&req.state) else {
        // `ClientLine::decode` admits only the three states.
        return Err("invalid turn: state must be busy, idle or gone");
    };
    let process = req
        .pid
        .and_then(|p| u32::try_from(p).ok())
        .map(|pid| WatchedProcess {
            pid,
            start: req.start,
        });
    let entered_gone = liveness.report(name, state, process, now);
    let parked = router.stats(name).parked > 0;
    let state = liveness.state_of(name, parked).0;
    let reply = TurnReply {
        state: state.to_owned(),
    };
    Ok((reply, entered_gone))
}
