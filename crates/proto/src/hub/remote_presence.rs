//! Remote presence (SPEC §14.1 "Remote names"): what linked peers' directories say about their
//! own agents, shown by `who` and `activity` as `name@peer` with `source` `relay`, and the
//! directory this hub states about its own roster names for its peers.
//!
//! A peer speaks only for itself: its entries are filed under the authenticated link's peer id
//! (never a value of the payload), so a name in its directory can never reach a roster name's
//! state nor another peer's names. An entry whose name holds `@`, or that is not a name this
//! hub would accept on a roster, is not shown (a peer could otherwise dress its entry up as
//! `x@other`); an address that is also a local roster name stays the local one. A peer's
//! entries are forgotten when its lasting link goes down: a directory is known only while a
//! link carries it. The size is the relay's `DirectoryCaps` per peer (the session applies no
//! directory past them). Refuses: IO, and any say over local state (`liveness` owns that).

use crate::relay::message::{AgentEntry, AgentState};
use crate::roster::Roster;
use crate::wire::AgentPresence;
use chrono::SecondsFormat;
use std::collections::BTreeMap;

/// The `source` of a remote name's state.
pub const SOURCE_RELAY: &str = "relay";

/// Each linked peer's agents as its last applied beat described them.
#[derive(Debug, Default)]
pub struct RemotePresence {
    peers: BTreeMap<String, BTreeMap<String, AgentEntry>>,
}

impl RemotePresence {
    pub fn peer(&self, peer: &str) -> Option<&BTreeMap<String, AgentEntry>> {
        self.peers.get(peer)
    }

    /// A lasting link's peer applied a heartbeat: `agents` is its whole directory now.
    /// `peer` is the authenticated link's peer id.
    pub(super) fn apply(&mut self, peer: &str, agents: BTreeMap<String, AgentEntry>) {
        self.peers.insert(peer.to_owned(), agents);
    }

    /// The lasting link with `peer` is gone: what it said is no longer known.
    pub(super) fn forget(&mut self, peer: &str) {
        self.peers.remove(peer);
    }

    /// The `who` entries of remote names, sorted by address, leaving out any address that is
    /// a local roster name. `parked` is empty (a directory carries counts, not filters) and
    /// `queued` is the peer's own count for the name; `lastSeen` and `lastDelivery` are null.
    pub(super) fn entries(&self, roster: &Roster) -> Vec<AgentPresence> {
        let ts = |ms: Option<i64>| {
            ms.and_then(chrono::DateTime::from_timestamp_millis)
                .map(|t| t.to_rfc3339_opts(SecondsFormat::Millis, true))
        };
        let mut out: Vec<AgentPresence> = Vec::new();
        for (peer, agents) in &self.peers {
            for (name, e) in agents {
                if !showable(name) {
                    continue;
                }
                let address = format!("{name}@{peer}");
                if roster.contains(&address) {
                    continue;
                }
                let known = !e.state.is_unknown();
                out.push(AgentPresence {
                    name: address,
                    state: e.state.as_str().to_owned(),
                    since: if known { ts(e.since_ms) } else { None },
                    source: known.then(|| SOURCE_RELAY.to_owned()),
                    parked: Vec::new(),
                    queued: u64::from(e.queued),
                    last_seen: None,
                    last_delivery: None,
                });
            }
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }
}

/// This hub's own roster names as its heartbeats state them (docs/relay-protocol.md §5):
/// parked awaits, queue length, and the liveness `who` shows (`local`, `who`'s roster
/// entries). Never a peer's entry.
pub(super) fn directory(local: Vec<AgentPresence>) -> Vec<(String, AgentEntry)> {
    local
        .into_iter()
        .map(|a| {
            let state = AgentState::from_word(&a.state);
            let since_ms = if state.is_unknown() {
                None
            } else {
                a.since
                    .as_deref()
                    .and_then(|s| chrono::DateTime::parse_from_rfc3339(s).ok())
                    .map(|t| t.timestamp_millis())
            };
            let entry = AgentEntry {
                parked: a.parked.len().min(u32::MAX as usize) as u32,
                queued: a.queued.min(u64::from(u32::MAX)) as u32,
                state,
                since_ms,
            };
            (a.name, entry)
        })
        .collect()
}

/// Whether a peer's directory name may be shown as `name@peer`: not empty, no `@`, no
/// control or white space characters, at most 128 bytes (so the address stays one word
/// in `who`'s table and cannot pose as another peer's).
fn showable(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 128
        && !name
            .chars()
            .any(|c| c == '@' || c.is_control() || c.is_whitespace())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(state: &str, since_ms: Option<i64>) -> AgentEntry {
        AgentEntry {
            parked: 0,
            queued: 3,
            state: AgentState::from_word(state),
            since_ms,
        }
    }

    /// A peer's names are shown under its link's id, never when they could pose as another
    /// address or a local name, and are forgotten with the link.
    #[test]
    fn a_peers_names_are_its_own_and_go_with_its_link() {
        let roster = Roster::parse("[agents]\n\"bee@west\" = \"tok\"\n").expect("valid roster");
        let mut r = RemotePresence::default();
        let agents = BTreeMap::from([
            ("bee".to_owned(), entry("idle", Some(0))),
            ("ant".to_owned(), entry("unknown", Some(5))),
            ("x@east".to_owned(), entry("busy", None)),
            ("two words".to_owned(), entry("busy", None)),
        ]);
        r.apply("west", agents);
        let shown = r.entries(&roster);
        let names: Vec<&str> = shown.iter().map(|a| a.name.as_str()).collect();
        assert_eq!(names, ["ant@west"], "bee@west is a local name");
        assert_eq!(shown[0].since, None, "an unknown state has no time");
        assert_eq!(shown[0].source, None);
        assert_eq!(shown[0].queued, 3);
        assert!(r.peer("west").is_some());
        r.forget("west");
        assert!(r.entries(&roster).is_empty() && r.peer("west").is_none());
    }

    #[test]
    fn the_local_directory_carries_counts_and_the_known_states_time() {
        let local = vec![
            AgentPresence {
                name: "bee".into(),
                state: "idle".into(),
                since: Some("2026-07-21T06:40:51.000Z".into()),
                source: Some("hook".into()),
                parked: Vec::new(),
                queued: u64::MAX,
                last_seen: None,
                last_delivery: None,
            },
            AgentPresence {
                name: "ant".into(),
                state: "unknown".into(),
                since: Some("2026-07-21T06:40:51.000Z".into()),
                source: None,
                parked: Vec::new(),
                queued: 1,
                last_seen: None,
                last_delivery: None,
            },
        ];
        let d = directory(local);
        assert_eq!(d[0].0, "bee");
        assert_eq!(d[0].1.queued, u32::MAX, "capped, not wrapped");
        assert!(d[0].1.since_ms.is_some());
        assert_eq!(d[1].1.since_ms, None, "an unknown state carries no time");
    }
}
