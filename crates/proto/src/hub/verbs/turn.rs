//! The `turn` verb (SPEC §14): an agent's hooks report its turn state (busy, idle, gone) and
//! the process to watch for it (`hub::liveness`); the answer is its state as `who` now shows
//! it. Only a roster name has a state; a task identity is refused.

use crate::hub::liveness::{TurnState, WatchedProcess};
use crate::hub::{ConnId, Hub, Now};
use crate::wire::{HubLine, TurnReply, TurnRequest};

impl Hub {
    /// `turn` (SPEC §14): records the caller's report and answers with its state as `who`
    /// now shows it. Only a roster name has a state; a task identity is refused.
    pub(in crate::hub) fn on_turn(&mut self, conn: ConnId, req: TurnRequest, now: Now) {
        let name = self.conns.asker(conn);
        if !self.settings.roster.contains(&name) {
            return self.fail(conn, "turn is for roster agents only", now);
        }
        let Some(state) = TurnState::parse(&req.state) else {
            // `ClientLine::decode` admits only the three states.
            return self.fail(conn, "invalid turn: state must be busy, idle or gone", now);
        };
        let process = req
            .pid
            .and_then(|p| u32::try_from(p).ok())
            .map(|pid| WatchedProcess {
                pid,
                start: req.start,
            });
        let liveness = &mut self.presence.liveness;
        liveness.report(&name, state, process, now);
        let parked = self.router.stats(&name).parked > 0;
        let state = liveness.state_of(&name, parked).0;
        self.reply(
            conn,
            &HubLine::Turn(TurnReply {
                state: state.to_owned(),
            }),
            "turn",
            now,
        );
    }
}
