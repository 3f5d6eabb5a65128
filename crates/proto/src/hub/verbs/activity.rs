//! The `activity` verb (SPEC §14.1): what the hub is doing now, for the operator's live view
//! (`agent-hub top`): the roster as `who` shows it, the last envelopes the hub accepted
//! (`hub::recent`) with the state the ledger holds for each now, and the delegated tasks
//! that have not ended — one answer, so the view costs one connection per refresh.
//!
//! Who may see what (SPEC §14 "Visibility"): any roster agent may ask; the config's
//! `operators` get the whole answer (the live view's purpose), anyone else the part that is
//! its own — `who`'s entries as `presence_for` shows them, the envelopes it sent or was sent,
//! the tasks it delegated, the queues of names nobody holds that hold its own mail — because another agent's envelope ids, task ids and filters tell
//! who works on what and are what a forged reply or a stranger's mail to a task would need.
//! The reply holds metadata only (ids, names, kinds, states, times; never a body,
//! correlation id, prompt or task output). A task identity (docs/delegation.md "Task
//! identity") is refused: a delegated agent runs a prompt the hub did not write and is kept
//! to mailing its delegator, so it is not shown who mails whom either.

//!
//! Functions over the machines `activity` reads (`View`), so it is testable without a hub.

use crate::hub::verbs::{who, View};
use crate::kernel::names::is_task_name;
use crate::wire::{Activity, EnvelopeMeta};
use chrono::SecondsFormat;

fn rfc3339(ms: i64) -> Option<String> {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.to_rfc3339_opts(SecondsFormat::Millis, true))
}

/// `activity` from `asker` (module doc), or the error a task identity gets.
pub(in crate::hub) fn answer(view: View<'_>, asker: &str) -> Result<Activity, &'static str> {
    if is_task_name(asker) {
        return Err("invalid activity: a task identity may not ask for the hub's activity");
    }
    Ok(activity_for(view, asker))
}

/// `activity` as `asker` may see it (module doc): whole for an operator; otherwise the
/// entries of `presence_for`, the envelopes `asker` sent or was sent, its own tasks.
pub(in crate::hub) fn activity_for(view: View<'_>, asker: &str) -> Activity {
    let mut a = activity(view);
    if !view.settings.sees_everything(asker) {
        a.agents = who::presence_for(view, asker).agents;
        a.envelopes.retain(|e| e.from == asker || e.to == asker);
        a.tasks.retain(|t| t.delegator == asker);
        a.off_roster = who::off_roster_for(view, Some(asker));
    }
    a
}

/// The whole `activity` answer (the operator's view): `who`'s work plus
/// `recent::RECENT_ENVELOPES` ledger lookups and a walk of the task book, so an
/// operator-rate query (one a second) costs next to nothing.
pub(in crate::hub) fn activity(view: View<'_>) -> Activity {
    let envelopes = view
        .presence
        .recent
        .newest_first()
        .map(|e| {
            let record = (!e.id_cut)
                .then(|| view.memory.ledger.get(&e.from, &e.id))
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
    let tasks = view
        .tasks
        .map(crate::tasks::TaskBook::unfinished)
        .unwrap_or_default();
    Activity {
        agents: who::presence(view).agents,
        envelopes,
        tasks,
        off_roster: who::off_roster_for(view, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hub::router::Queued;
    use crate::hub::verbs::fixture::Machines;

    /// An agent sees the envelopes it sent or was sent, an operator all; a task identity is
    /// refused; a recent envelope the ledger no longer holds is `forgotten`.
    #[test]
    fn activity_shows_an_agent_its_own_envelopes_and_refuses_a_task() {
        let mut m = Machines::new();
        m.settings.operators = vec!["ops".into()];
        let text = "{\"id\":\"e1\"}";
        let at = m.now.wall.timestamp_millis();
        m.presence
            .recent
            .note(&Queued::new("e1", "bee", "ops", "task", None, text), at);
        m.presence
            .recent
            .note(&Queued::new("e2", "ops", "x", "task", None, text), at);
        let ops = answer(m.view(), "ops").expect("a roster agent may ask");
        assert_eq!(ops.envelopes.len(), 2);
        assert_eq!(ops.envelopes[0].id, "e2", "newest first");
        assert_eq!(ops.envelopes[0].state, "forgotten");
        let bee = answer(m.view(), "bee").expect("a roster agent may ask");
        let ids: Vec<&str> = bee.envelopes.iter().map(|e| e.id.as_str()).collect();
        assert_eq!(ids, ["e1"]);
        assert!(answer(m.view(), "task-0123456789abcdef0123456789abcdef").is_err());
    }
}
