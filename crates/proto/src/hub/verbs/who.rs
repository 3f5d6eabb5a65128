//! The `who` verb (SPEC §14): presence, every roster name with its state (`hub::liveness`),
//! parked awaits, queue length and when it was last seen and last delivered to; then the
//! linked peers' names (`hub::remote_presence`, SPEC §14.1 "Remote names").

use crate::hub::session::Phase;
use crate::hub::Hub;
use crate::wire::{AgentPresence, ParkedFilter, Presence};
use chrono::SecondsFormat;
use std::collections::HashMap;

impl Hub {
    /// Every roster name with its parked awaits (oldest first), queue length, and when it was
    /// last seen and last delivered to (SPEC §14). Linear in open connections: an
    /// operator-rate query. This is the operator's view; `presence_for` is what an asker gets.
    pub fn presence(&self) -> Presence {
        let mut p = self.local_presence();
        p.agents.extend(self.remote_entries());
        p
    }

    /// Whether `asker` gets the operator's view of `who` and `activity`: it is named in the
    /// config's `operators` (SPEC §14 "Visibility").
    pub(in crate::hub) fn sees_everything(&self, asker: &str) -> bool {
        self.operators.iter().any(|o| o == asker)
    }

    /// `presence` as `asker` may see it (SPEC §14 "Visibility"): an operator sees it whole;
    /// anyone else sees every name, state, queue length and time, but the filters of its own
    /// parked awaits only. A filter names what an agent waits for, often a task id (`delegate
    /// --wait` parks on its task's outcome): shown to others it would tell them which tasks
    /// exist and whom they answer. Another agent's parked awaits are left out (its `state`
    /// still says `waiting`).
    pub fn presence_for(&self, asker: &str) -> Presence {
        let mut p = self.presence();
        if !self.sees_everything(asker) {
            for a in p.agents.iter_mut().filter(|a| a.name != asker) {
                a.parked.clear();
            }
        }
        p
    }

    /// The roster names alone, as `presence` lists them first.
    pub fn local_presence(&self) -> Presence {
        let mut parked: HashMap<&str, Vec<(u64, ParkedFilter)>> = HashMap::new();
        for c in self.conns.values() {
            if let (
                Phase::Parked { parked: p, .. } | Phase::Claimed { parked: p, .. },
                Some(name),
            ) = (&c.phase, &c.name)
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
        let agents = self
            .roster
            .names()
            .into_iter()
            .map(|name| {
                let mut waits = parked.remove(name).unwrap_or_default();
                waits.sort_by_key(|(seq, _)| *seq);
                let (seen, delivered) = self.seen.get(name).copied().unwrap_or_default();
                let (state, since, source) = self.state_of(name, !waits.is_empty());
                AgentPresence {
                    name: name.to_owned(),
                    state: state.to_owned(),
                    since: ts(since),
                    source: source.map(str::to_owned),
                    parked: waits.into_iter().map(|(_, f)| f).collect(),
                    queued: self.router.stats(name).queued as u64,
                    last_seen: ts(seen),
                    last_delivery: ts(delivered),
                }
            })
            .collect();
        Presence { agents }
    }
}
