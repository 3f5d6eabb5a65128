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

use super::Hub;
use crate::relay::message::{AgentEntry, AgentState};
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

impl Hub {
    /// A lasting link's peer applied a heartbeat: `agents` is its whole directory now.
    /// `peer` is the authenticated link's peer id.
    pub fn handle_peer_directory(&mut self, peer: &str, agents: BTreeMap<String, AgentEntry>) {
        self.remote.peers.insert(peer.to_owned(), agents);
    }

    /// The lasting link with `peer` is gone: what it said is no longer known.
    pub(super) fn forget_peer_directory(&mut self, peer: &str) {
        self.remote.peers.remove(peer);
    }

    pub fn remote_presence(&self) -> &RemotePresence {
        &self.remote
    }

    /// This hub's own roster names as its heartbeats state them (docs/relay-protocol.md §5):
    /// parked awaits, queue length, and the liveness `who` shows. Never a peer's entry.
    pub fn local_directory(&self) -> Vec<(String, AgentEntry)> {
        self.local_presence()
            .agents
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

    /// The `who` entries of remote names, sorted by address, leaving out any address that is
    /// a local roster name. `parked` is empty (a directory carries counts, not filters) and
    /// `queued` is the peer's own count for the name; `lastSeen` and `lastDelivery` are null.
    pub(super) fn remote_entries(&self) -> Vec<AgentPresence> {
        let ts = |ms: Option<i64>| {
            ms.and_then(chrono::DateTime::from_timestamp_millis)
                .map(|t| t.to_rfc3339_opts(SecondsFormat::Millis, true))
        };
        let mut out: Vec<AgentPresence> = Vec::new();
        for (peer, agents) in &self.remote.peers {
            for (name, e) in agents {
                if !showable(name) {
                    continue;
                }
                let address = format!("{name}@{peer}");
                if self.settings.roster.contains(&address) {
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
