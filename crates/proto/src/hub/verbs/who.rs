//! The `who` verb (SPEC §14): presence, every roster name with its state (`hub::liveness`),
//! parked awaits, queue length and when it was last seen and last delivered to; then the
//! linked peers' names (`hub::remote_presence`, SPEC §14.1 "Remote names"); and, when asked,
//! the queues of names nobody holds (SPEC §14 "Mail nobody holds").
//!
//! A send to a name off the roster is accepted and queued under that name, as the 004
//! contract says (SPEC §5.1): a typo (`wrker`), an address for a hub this one does not forward
//! to (`x@nowhere`, which §15 keeps local), a task identity whose task has ended. Nothing will
//! ever read such a queue until an operator adds the name, so `who` (asked with `offRoster`)
//! and `activity` name them with the reason. Who sees which (SPEC §14 "Visibility"): an
//! operator every such name with its whole count; anyone else only the names holding mail it
//! sent itself, counted as its own envelopes only, so no agent learns another's typos,
//! correspondents or task ids through it.

//!
//! Functions over the machines `who` reads (`View`), so presence is testable without a hub.

use crate::hub::conns::Phase;
use crate::hub::verbs::View;
use crate::kernel::names::is_task_name;
use crate::wire::{
    AgentPresence, OffRosterQueue, ParkedFilter, Presence, OFF_ROSTER_NO_SUCH_AGENT,
    OFF_ROSTER_TASK_ENDED, OFF_ROSTER_UNKNOWN_PEER,
};
use chrono::SecondsFormat;
use std::collections::HashMap;

/// `who` from `asker` (SPEC §14): presence as `asker` may see it and, when asked
/// (`offRoster`), the queues of names nobody holds that hold its mail.
pub(in crate::hub) fn answer(view: View<'_>, asker: &str, off_roster: bool) -> Presence {
    let mut presence = presence_for(view, asker);
    if off_roster {
        presence.off_roster = Some(off_roster_for(view, Some(asker)));
    }
    presence
}

/// Every roster name with its parked awaits (oldest first), queue length, and when it was
/// last seen and last delivered to (SPEC §14). Linear in open connections: an
/// operator-rate query. This is the operator's view; `presence_for` is what an asker gets.
pub(in crate::hub) fn presence(view: View<'_>) -> Presence {
    let mut p = local(view);
    p.agents
        .extend(view.presence.remote.entries(&view.settings.roster));
    p
}

/// `presence` as `asker` may see it (SPEC §14 "Visibility"): an operator sees it whole;
/// anyone else sees every name, state, queue length and time, but the filters of its own
/// parked awaits only. A filter names what an agent waits for, often a task id (`delegate
/// --wait` parks on its task's outcome): shown to others it would tell them which tasks
/// exist and whom they answer. Another agent's parked awaits are left out (its `state`
/// still says `waiting`).
pub(in crate::hub) fn presence_for(view: View<'_>, asker: &str) -> Presence {
    let mut p = presence(view);
    if !view.settings.sees_everything(asker) {
        for a in p.agents.iter_mut().filter(|a| a.name != asker) {
            a.parked.clear();
        }
    }
    p
}

/// The roster names alone, as `presence` lists them first.
pub(in crate::hub) fn local(view: View<'_>) -> Presence {
    let mut parked: HashMap<&str, Vec<(u64, ParkedFilter)>> = HashMap::new();
    for (_, c) in view.conns.iter() {
        if let (Phase::Parked { parked: p, .. } | Phase::Claimed { parked: p, .. }, Some(name)) =
            (&c.phase, &c.name)
        {
            let f = ParkedFilter {
                reply_to: p.filter.reply_to.clone(),
                kind: p.filter.kind.clone(),
            };
            parked.entry(name.as_str()).or_default().push((p.seq, f));
        }
    }
    let ts = |ms: Option<i64>| {
        ms.and_then(chrono::DateTime::from_timestamp_millis)
            .map(|t| t.to_rfc3339_opts(SecondsFormat::Millis, true))
    };
    let agents = view
        .settings
        .roster
        .names()
        .into_iter()
        .map(|name| {
            let mut waits = parked.remove(name).unwrap_or_default();
            waits.sort_by_key(|(seq, _)| *seq);
            let (seen, delivered) = view.presence.seen(name);
            let (state, since, source) = view.presence.liveness.state_of(name, !waits.is_empty());
            AgentPresence {
                name: name.to_owned(),
                state: state.to_owned(),
                since: ts(since),
                source: source.map(str::to_owned),
                parked: waits.into_iter().map(|(_, f)| f).collect(),
                queued: view.router.stats(name).queued as u64,
                last_seen: ts(seen),
                last_delivery: ts(delivered),
            }
        })
        .collect();
    Presence {
        agents,
        off_roster: None,
    }
}

/// Why nobody holds `name` (`wire::OFF_ROSTER_REASONS`), or None when someone does or
/// will: a roster name, a task identity whose task has not ended (its agent reads it), an
/// address a forwarding peer takes (its queue drains into the link, SPEC §15).
fn nobody_holds(view: View<'_>, name: &str) -> Option<&'static str> {
    if view.settings.roster.contains(name) {
        return None;
    }
    if is_task_name(name) {
        let live = view.tasks.is_some_and(|b| b.is_live_task(name));
        return (!live).then_some(OFF_ROSTER_TASK_ENDED);
    }
    if view.remote_peer(name).is_some() {
        return None;
    }
    // The split `remote_peer` makes (SPEC §15 "Addresses"): a `name@peer` it did not take
    // names a peer this hub does not forward to; with either side empty it is no
    // address, just a name no agent holds.
    match name.rsplit_once('@') {
        Some((local, peer)) if !local.is_empty() && !peer.is_empty() => {
            Some(OFF_ROSTER_UNKNOWN_PEER)
        }
        _ => Some(OFF_ROSTER_NO_SUCH_AGENT),
    }
}

/// The queues of names nobody holds as `asker` may see them (module doc), sorted by name:
/// an operator's view (`asker` None, or a name in `operators`) counts every envelope,
/// anyone else's only those it sent, and a name holding none of its envelopes is left
/// out. Looks at every mailbox with mail, and for a non-operator walks the queues of
/// names nobody holds (never a roster name's): an operator-rate query whose cost is
/// bounded by the hub's total cap (`limits.hub_max_bytes`).
pub(in crate::hub) fn off_roster_for(view: View<'_>, asker: Option<&str>) -> Vec<OffRosterQueue> {
    let own = asker.filter(|a| !view.settings.sees_everything(a));
    let mut out: Vec<OffRosterQueue> = view
        .router
        .with_mail()
        .filter_map(|(name, queued)| {
            let reason = nobody_holds(view, name)?;
            let queued = match own {
                None => queued,
                Some(a) => view.router.queued(name).filter(|q| &*q.from == a).count(),
            };
            (queued > 0).then(|| OffRosterQueue {
                name: name.to_owned(),
                queued: queued as u64,
                reason: reason.to_owned(),
            })
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hub::router::Queued;
    use crate::hub::verbs::fixture::Machines;

    /// Every roster name is shown, a parked await's name as `waiting`; its filter only to
    /// its own agent and to an operator (SPEC §14 "Visibility").
    #[test]
    fn who_shows_every_name_and_a_filter_to_its_agent_and_an_operator_only() {
        let mut m = Machines::new();
        m.settings.operators = vec!["ops".into()];
        m.park(1, "bee", "task-secret");
        let names = |p: &Presence| p.agents.iter().map(|a| a.name.clone()).collect::<Vec<_>>();
        let filters = |p: &Presence| p.agents.iter().map(|a| a.parked.len()).collect::<Vec<_>>();
        let ops = answer(m.view(), "ops", false);
        assert_eq!(names(&ops), ["bee", "ops"]);
        assert_eq!(ops.agents[0].state, "waiting");
        assert_eq!(filters(&ops), [1, 0], "an operator sees every filter");
        assert_eq!(ops.off_roster, None, "not asked for");
        let bee = answer(m.view(), "bee", false);
        assert_eq!(filters(&bee), [1, 0], "its own");
        m.settings.operators.clear();
        let other = answer(m.view(), "ops", false);
        assert_eq!(
            filters(&other),
            [0, 0],
            "another agent's filter is left out"
        );
        assert_eq!(other.agents[0].state, "waiting", "its state still says so");
    }

    /// Mail for a name nobody holds is listed with its reason; an agent sees only its own.
    #[test]
    fn mail_nobody_holds_is_named_to_its_sender_only() {
        let mut m = Machines::new();
        let text = "{\"id\":\"e1\"}";
        m.router
            .enqueue_back(Queued::new("e1", "bee", "wrker", "task", None, text));
        m.router
            .enqueue_back(Queued::new("e2", "ops", "x@nowhere", "task", None, text));
        let bee = answer(m.view(), "bee", true).off_roster.expect("asked for");
        assert_eq!(bee.len(), 1);
        assert_eq!(
            (bee[0].name.as_str(), bee[0].queued, bee[0].reason.as_str()),
            ("wrker", 1, OFF_ROSTER_NO_SUCH_AGENT)
        );
        let all = off_roster_for(m.view(), None);
        let reasons: Vec<&str> = all.iter().map(|q| q.reason.as_str()).collect();
        assert_eq!(reasons, [OFF_ROSTER_NO_SUCH_AGENT, OFF_ROSTER_UNKNOWN_PEER]);
    }
}
