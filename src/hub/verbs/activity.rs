//! The `activity` verb (SPEC §14.1): what the hub is doing now, for the operator's live view
//! (`agent-hub top`): the roster as `who` shows it, the last envelopes the hub accepted
//! (`hub::recent`) with the state the ledger holds for each now, and the delegated tasks
//! that have not ended — one answer, so the view costs one connection per refresh.
//!
//! Who may see it: any roster agent, as for `who` (§14) — the roster is one trust domain on
//! one machine, and the reply holds metadata only (ids, names, kinds, states, times; never a
//! body, correlation id, prompt or task output). A task identity (docs/delegation.md "Task
//! identity") is refused: a delegated agent runs a prompt the hub did not write and is kept
//! to mailing its delegator, so it is not shown who mails whom either.

use crate::hub::{ConnId, Hub, Now};
use crate::wire::{Activity, EnvelopeMeta, HubLine};
use chrono::SecondsFormat;

fn rfc3339(ms: i64) -> Option<String> {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.to_rfc3339_opts(SecondsFormat::Millis, true))
}

impl Hub {
    pub(in crate::hub) fn on_activity(&mut self, conn: ConnId, now: Now) {
        let name = self.conns[&conn]
            .name
            .clone()
            .expect("verb phase is authenticated");
        if crate::tasks::is_task_name(&name) {
            return self.fail(
                conn,
                "invalid activity: a task identity may not ask for the hub's activity",
                now,
            );
        }
        let reply = HubLine::Activity(self.activity());
        self.reply(conn, &reply, "activity", now);
    }

    /// The `activity` answer: `who`'s work plus `recent::RECENT_ENVELOPES` ledger lookups and
    /// a walk of the task book, so an operator-rate query (one a second) costs next to nothing.
    pub fn activity(&self) -> Activity {
        let envelopes = self
            .recent
            .newest_first()
            .map(|e| {
                let record = (!e.id_cut)
                    .then(|| self.ledger.get(&e.from, &e.id))
                    .flatten();
                let (state, state_at) = match record {
                    Some(r) => (r.state.as_str(), rfc3339(r.state_ms)),
                    None if e.id_cut => ("unknown", None),
                    // The ledger let it go: settled past the idempotency window.
                    None => ("forgotten", None),
                };
                EnvelopeMeta {
                    id: e.id.clone(),
                    from: e.from.clone(),
                    to: e.to.clone(),
                    kind: e.kind.clone(),
                    accepted_at: rfc3339(e.accepted_ms).unwrap_or_default(),
                    state: state.to_owned(),
                    state_at,
                }
            })
            .collect();
        let tasks = self
            .tasks
            .as_ref()
            .map(crate::tasks::TaskBook::unfinished)
            .unwrap_or_default();
        Activity {
            agents: self.presence().agents,
            envelopes,
            tasks,
        }
    }
}
