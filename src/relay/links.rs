//! Which connection is a peer's lasting link (docs/relay-protocol.md §2.5, §5; SPEC §13.2).
//!
//! Owns the rules when a second connection for the same peer completes its handshake: a
//! transient connection is never registered; a newer connection in the same direction replaces
//! the older; on simultaneous dial (one dialled, one accepted) the connection opened by the
//! lexicographically lower peer id survives, on both ends alike. Refuses IO: connections are
//! opaque numbers.

use std::collections::HashMap;

/// Which side opened a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// We dialled it: it was opened by our peer id.
    Dialled,
    /// The peer dialled us: it was opened by the peer's id.
    Accepted,
}

/// What to do with a connection whose handshake just completed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// It is the peer's link now; close `replaces` if set.
    Register { replaces: Option<u64> },
    /// A one-shot connection: serve it, never make it the link.
    Transient,
    /// Keep the existing link; close this connection.
    Reject(String),
}

#[derive(Debug)]
pub struct Links {
    local: String,
    by_peer: HashMap<String, (u64, Direction)>,
}

impl Links {
    pub fn new(local_peer_id: String) -> Links {
        Links {
            local: local_peer_id,
            by_peer: HashMap::new(),
        }
    }

    pub fn established(
        &mut self,
        peer: &str,
        conn: u64,
        direction: Direction,
        transient: bool,
    ) -> Verdict {
        if transient {
            return Verdict::Transient;
        }
        let verdict = match self.by_peer.get(peer) {
            None => Verdict::Register { replaces: None },
            Some(&(old, old_dir)) if old_dir == direction => Verdict::Register {
                replaces: Some(old),
            },
            Some(&(old, _)) => {
                // Simultaneous dial: keep the connection whose opener has the lower id.
                let opener = |d: Direction| {
                    if d == Direction::Dialled {
                        self.local.as_str()
                    } else {
                        peer
                    }
                };
                if opener(direction) < opener(self.by_peer[peer].1) {
                    Verdict::Register {
                        replaces: Some(old),
                    }
                } else {
                    Verdict::Reject("a link opened by the lower peer id already exists".into())
                }
            }
        };
        if matches!(verdict, Verdict::Register { .. }) {
            self.by_peer.insert(peer.to_owned(), (conn, direction));
        }
        verdict
    }

    /// A connection closed; true if it was a peer's link.
    pub fn closed(&mut self, conn: u64) -> bool {
        let peer = self
            .by_peer
            .iter()
            .find(|(_, &(c, _))| c == conn)
            .map(|(p, _)| p.clone());
        match peer {
            Some(p) => {
                self.by_peer.remove(&p);
                true
            }
            None => false,
        }
    }

    pub fn link_of(&self, peer: &str) -> Option<u64> {
        self.by_peer.get(peer).map(|&(c, _)| c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transient_is_never_the_link() {
        let mut l = Links::new("a".into());
        assert_eq!(
            l.established("b", 1, Direction::Accepted, true),
            Verdict::Transient
        );
        assert_eq!(l.link_of("b"), None);
        assert_eq!(
            l.established("b", 2, Direction::Accepted, false),
            Verdict::Register { replaces: None }
        );
        assert_eq!(
            l.established("b", 3, Direction::Accepted, true),
            Verdict::Transient
        );
        assert_eq!(
            l.link_of("b"),
            Some(2),
            "a transient connection does not displace the link"
        );
    }

    #[test]
    fn newer_same_direction_wins() {
        let mut l = Links::new("a".into());
        l.established("b", 1, Direction::Accepted, false);
        assert_eq!(
            l.established("b", 2, Direction::Accepted, false),
            Verdict::Register { replaces: Some(1) }
        );
        assert!(
            !l.closed(1),
            "the replaced connection is no longer the link"
        );
        assert_eq!(l.link_of("b"), Some(2));
    }

    #[test]
    fn simultaneous_dial_keeps_the_lower_openers_link_on_both_ends() {
        // "a" < "b": the connection a dialled survives, seen from either end.
        let mut at_a = Links::new("a".into());
        let mut at_b = Links::new("b".into());
        at_a.established("b", 1, Direction::Accepted, false); // b dialled a
        assert_eq!(
            at_a.established("b", 2, Direction::Dialled, false),
            Verdict::Register { replaces: Some(1) }
        );
        at_b.established("a", 7, Direction::Dialled, false); // b dialled a
        assert!(matches!(
            at_b.established("a", 8, Direction::Accepted, false),
            Verdict::Register { replaces: Some(7) }
        ));
        // And in the other order of arrival.
        let mut at_a = Links::new("a".into());
        at_a.established("b", 2, Direction::Dialled, false);
        assert!(matches!(
            at_a.established("b", 1, Direction::Accepted, false),
            Verdict::Reject(_)
        ));
        assert_eq!(at_a.link_of("b"), Some(2));
    }

    #[test]
    fn closing_the_link_frees_the_peer() {
        let mut l = Links::new("a".into());
        l.established("b", 1, Direction::Dialled, false);
        assert!(l.closed(1));
        assert_eq!(l.link_of("b"), None);
    }
}
