//! Which connection is a peer's lasting link (docs/relay-protocol.md §2.6, §5; SPEC §13.2).
//!
//! Owns the rules when a second connection for the same peer completes its handshake: a
//! transient connection is never registered; a v1 connection (its peer marks one-shots
//! `transient`) replaces an older one in the same direction at once; on simultaneous dial (one
//! dialled, one accepted) the connection opened by the lexicographically lower peer id
//! survives, on both ends alike. A v0 connection may be an unmarked one-shot (claudectl 0.64's
//! `relay delegate` / `relay interrupt`), so while the link is alive it only *stands by*: it is
//! served as the peer's, and becomes the link only when the link closes or when it outlives the
//! grace period; a link that has missed a heartbeat is replaced at once. Refuses IO:
//! connections are opaque numbers and time is passed in.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// How long a v0 second connection must stay open before it replaces a live link: claudectl
/// 0.64's one-shots close about 250 ms after their handshake (docs/relay-protocol.md §2.6), so
/// twenty times that is far past any one-shot and still quick beside the 30 s heartbeat.
pub const STANDBY_GRACE: Duration = Duration::from_secs(5);

/// Which side opened a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// We dialled it: it was opened by our peer id.
    Dialled,
    /// The peer dialled us: it was opened by the peer's id.
    Accepted,
}

/// What a connection said about itself when its handshake completed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opened {
    /// It asked to be `transient`: a one-shot, never the link.
    Transient,
    /// A v1 connection not marked transient: its peer marks one-shots, so it means to last.
    Lasting,
    /// A v0 connection not marked transient: v0 peers open unmarked one-shots, so it has to
    /// prove it lasts before it may displace a live link.
    Unproven,
}

/// What to do with a connection whose handshake just completed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// It is the peer's link now; close `replaces` if set.
    Register { replaces: Option<u64> },
    /// A one-shot connection: serve it, never make it the link.
    Transient,
    /// Serve it as the peer's; the link stays where it is. `handle_timeout` or `closed` says
    /// if it becomes the link later.
    Standby,
    /// Keep the existing link; close this connection.
    Reject(String),
}

/// A later change `handle_timeout` or `closed` decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// `conn` is the peer's link now; close `replaces` if set (already forgotten here).
    Promote {
        peer: String,
        conn: u64,
        replaces: Option<u64>,
    },
    /// A standby that outlived the grace lost the simultaneous-dial rule: close it.
    Reject {
        peer: String,
        conn: u64,
        why: String,
    },
}

#[derive(Debug, Clone, Copy)]
struct Conn {
    id: u64,
    direction: Direction,
    /// When it last showed it is alive: a heartbeat, or when it became the link.
    alive: Instant,
}

#[derive(Debug, Clone, Copy)]
struct Standby {
    id: u64,
    direction: Direction,
    since: Instant,
}

#[derive(Debug, Default)]
struct PeerLinks {
    link: Option<Conn>,
    /// Oldest first.
    standby: Vec<Standby>,
}

#[derive(Debug)]
pub struct Links {
    local: String,
    grace: Duration,
    /// A link whose last heartbeat is older than this has missed one (1.5 intervals).
    stale_after: Duration,
    by_peer: HashMap<String, PeerLinks>,
    /// Every registered or standing-by connection → its peer.
    peer_of: HashMap<u64, String>,
}

impl Links {
    /// `heartbeat_interval` is ours (liveness is judged with our own interval, §5).
    pub fn new(local_peer_id: String, heartbeat_interval: Duration, grace: Duration) -> Links {
        Links {
            local: local_peer_id,
            grace,
            stale_after: heartbeat_interval.saturating_add(heartbeat_interval / 2),
            by_peer: HashMap::new(),
            peer_of: HashMap::new(),
        }
    }

    pub fn established(
        &mut self,
        peer: &str,
        conn: u64,
        direction: Direction,
        opened: Opened,
        now: Instant,
    ) -> Verdict {
        if opened == Opened::Transient {
            return Verdict::Transient;
        }
        let entry = self.by_peer.entry(peer.to_owned()).or_default();
        let verdict = match entry.link {
            None => Verdict::Register { replaces: None },
            Some(old) => {
                let stale = now.saturating_duration_since(old.alive) > self.stale_after;
                if opened == Opened::Unproven && !stale {
                    entry.standby.push(Standby {
                        id: conn,
                        direction,
                        since: now,
                    });
                    self.peer_of.insert(conn, peer.to_owned());
                    return Verdict::Standby;
                }
                if stale || old.direction == direction || self.opener_wins(peer, direction) {
                    Verdict::Register {
                        replaces: Some(old.id),
                    }
                } else {
                    Verdict::Reject("a link opened by the lower peer id already exists".into())
                }
            }
        };
        if let Verdict::Register { replaces } = verdict {
            self.register(peer, conn, direction, replaces, now);
        }
        verdict
    }

    /// Whether a connection in `direction` beats one in the other direction on simultaneous
    /// dial: the one opened by the lower peer id survives.
    fn opener_wins(&self, peer: &str, direction: Direction) -> bool {
        let opener = |d: Direction| {
            if d == Direction::Dialled {
                self.local.as_str()
            } else {
                peer
            }
        };
        let other = match direction {
            Direction::Dialled => Direction::Accepted,
            Direction::Accepted => Direction::Dialled,
        };
        opener(direction) < opener(other)
    }

    fn register(
        &mut self,
        peer: &str,
        conn: u64,
        direction: Direction,
        replaces: Option<u64>,
        now: Instant,
    ) {
        if let Some(old) = replaces {
            self.peer_of.remove(&old);
        }
        let entry = self.by_peer.entry(peer.to_owned()).or_default();
        entry.standby.retain(|s| s.id != conn);
        entry.link = Some(Conn {
            id: conn,
            direction,
            alive: now,
        });
        self.peer_of.insert(conn, peer.to_owned());
    }

    /// The connection's last heartbeat arrived at `at` (only the link's matters).
    pub fn heartbeat(&mut self, conn: u64, at: Instant) {
        let Some(peer) = self.peer_of.get(&conn) else {
            return;
        };
        if let Some(link) = self.by_peer.get_mut(peer).and_then(|p| p.link.as_mut()) {
            if link.id == conn && at > link.alive {
                link.alive = at;
            }
        }
    }

    /// A connection closed. Returns whether it was a peer's link, and the standby that took
    /// its place, if any (the oldest: it has lasted longest).
    pub fn closed(&mut self, conn: u64, now: Instant) -> (bool, Option<Change>) {
        let Some(peer) = self.peer_of.remove(&conn) else {
            return (false, None);
        };
        let Some(entry) = self.by_peer.get_mut(&peer) else {
            return (false, None);
        };
        if entry.link.is_some_and(|l| l.id == conn) {
            entry.link = None;
            let next = (!entry.standby.is_empty()).then(|| entry.standby.remove(0));
            let change = next.map(|s| {
                self.register(&peer, s.id, s.direction, None, now);
                Change::Promote {
                    peer: peer.clone(),
                    conn: s.id,
                    replaces: None,
                }
            });
            if change.is_none() {
                self.by_peer.remove(&peer);
            }
            return (true, change);
        }
        entry.standby.retain(|s| s.id != conn);
        (false, None)
    }

    /// When the next standby outlives its grace.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.by_peer
            .values()
            .flat_map(|p| p.standby.iter())
            .map(|s| crate::kernel::deadline::after(s.since, self.grace))
            .min()
    }

    /// Standbys that outlived the grace: each replaces the link (same direction, or it wins
    /// the simultaneous-dial rule) or is rejected. In order of arrival.
    pub fn handle_timeout(&mut self, now: Instant) -> Vec<Change> {
        let mut changes = Vec::new();
        let mut peers: Vec<String> = self.by_peer.keys().cloned().collect();
        peers.sort();
        for peer in peers {
            while let Some(entry) = self.by_peer.get(&peer) {
                let due = entry
                    .standby
                    .iter()
                    .find(|s| crate::kernel::deadline::after(s.since, self.grace) <= now)
                    .copied();
                let Some(s) = due else { break };
                let old = entry.link;
                let wins = match old {
                    None => true,
                    Some(old) => {
                        old.direction == s.direction || self.opener_wins(&peer, s.direction)
                    }
                };
                if wins {
                    let replaces = old.map(|o| o.id);
                    self.register(&peer, s.id, s.direction, replaces, now);
                    changes.push(Change::Promote {
                        peer: peer.clone(),
                        conn: s.id,
                        replaces,
                    });
                } else {
                    self.peer_of.remove(&s.id);
                    if let Some(e) = self.by_peer.get_mut(&peer) {
                        e.standby.retain(|x| x.id != s.id);
                    }
                    changes.push(Change::Reject {
                        peer: peer.clone(),
                        conn: s.id,
                        why: "a link opened by the lower peer id already exists".into(),
                    });
                }
            }
        }
        changes
    }

    pub fn link_of(&self, peer: &str) -> Option<u64> {
        self.by_peer.get(peer).and_then(|p| p.link).map(|c| c.id)
    }

    /// Whether `conn` is standing by (served, not the link).
    pub fn is_standby(&self, conn: u64) -> bool {
        self.peer_of
            .get(&conn)
            .and_then(|p| self.by_peer.get(p))
            .is_some_and(|p| p.standby.iter().any(|s| s.id == conn))
    }
}

#[cfg(test)]
mod tests;
