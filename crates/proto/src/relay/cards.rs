//! The `agents` feature's capability list on one link (000 seed §6.6; docs/relay-protocol.md
//! §5 "Agent cards"): the cards this hub advertises, which of them the peer has already been
//! sent, and the peer's own cards as last received, within caps.
//!
//! Owns when a beat carries `agent_cards` (every full beat, and a delta beat when the list
//! changed since the last beat sent: absent means unchanged, present is the whole list, so
//! the stream needs no base bookkeeping of its own) and the caps on what a peer's list may
//! hold. Refuses: computing the cards (the server does that off its event loop, from the
//! manifests and the PATH) and deciding whether the feature is on (the session's handshake).

use crate::relay::heartbeat::{DirectoryCaps, OverCap};
use crate::relay::message::AgentCard;

/// Most cards one beat carries, either way: a hub has a handful of agent CLIs, and the cap
/// keeps a heartbeat far from the line cap whatever sits in a manifests folder. Ours past it
/// are cut (by name order, as listed); a peer's list past it is not applied.
pub const MAX_AGENT_CARDS: usize = 256;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CardBook {
    ours: Vec<AgentCard>,
    /// What the last beat that carried cards carried; None until one did.
    sent: Option<Vec<AgentCard>>,
    peer: Vec<AgentCard>,
}

impl CardBook {
    /// The cards this hub advertises from now on (the next beat carries them if they changed).
    pub fn set_ours(&mut self, mut cards: Vec<AgentCard>) {
        cards.truncate(MAX_AGENT_CARDS);
        self.ours = cards;
    }

    /// The cards this hub advertises (claudectl's `capabilities` are made from them).
    pub fn ours(&self) -> &[AgentCard] {
        &self.ours
    }

    /// What the next beat carries: the whole list for a full beat, or for a delta beat when
    /// it differs from what was last sent; None otherwise.
    pub fn for_beat(&mut self, full: bool) -> Option<Vec<AgentCard>> {
        if !full && self.sent.as_ref() == Some(&self.ours) {
            return None;
        }
        self.sent = Some(self.ours.clone());
        Some(self.ours.clone())
    }

    /// A beat carried the peer's cards. Over `MAX_AGENT_CARDS` or over the directory's byte
    /// cap they are not applied and the last list that fit stays.
    pub fn receive(&mut self, cards: Vec<AgentCard>, caps: DirectoryCaps) -> Result<(), OverCap> {
        let bytes = cards
            .iter()
            .fold(0usize, |n, c| n.saturating_add(c.size_bytes()));
        if cards.len() > MAX_AGENT_CARDS.min(caps.max_agents) || bytes > caps.max_bytes {
            return Err(OverCap {
                agents: cards.len(),
                bytes,
            });
        }
        self.peer = cards;
        Ok(())
    }

    /// The peer's cards as last applied (empty until a beat carried some).
    pub fn peer(&self) -> &[AgentCard] {
        &self.peer
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn card(name: &str, version: Option<&str>) -> AgentCard {
        AgentCard {
            name: name.into(),
            version: version.map(str::to_owned),
            acp: true,
            headless: false,
            credential: None,
        }
    }

    #[test]
    fn full_beats_always_carry_the_list_deltas_only_when_it_changed() {
        let mut b = CardBook::default();
        assert_eq!(
            b.for_beat(false),
            Some(vec![]),
            "nothing sent yet: even a delta"
        );
        assert_eq!(b.for_beat(false), None);
        assert_eq!(b.for_beat(true), Some(vec![]));
        b.set_ours(vec![card("codex", Some("0.171.0"))]);
        assert_eq!(
            b.for_beat(false),
            Some(vec![card("codex", Some("0.171.0"))])
        );
        assert_eq!(b.for_beat(false), None);
        b.set_ours(vec![card("codex", Some("0.171.0"))]);
        assert_eq!(b.for_beat(false), None, "the same list again is no change");
        assert_eq!(b.for_beat(true).map(|c| c.len()), Some(1));
    }

    #[test]
    fn ours_are_cut_at_the_cap() {
        let mut b = CardBook::default();
        b.set_ours((0..300).map(|i| card(&format!("a{i}"), None)).collect());
        assert_eq!(b.for_beat(true).unwrap().len(), MAX_AGENT_CARDS);
    }

    #[test]
    fn a_peers_list_past_a_cap_is_not_applied() {
        let mut b = CardBook::default();
        let caps = DirectoryCaps {
            max_agents: 4,
            max_bytes: 100,
        };
        assert_eq!(b.receive(vec![card("codex", None)], caps), Ok(()));
        let many: Vec<AgentCard> = (0..5).map(|i| card(&format!("a{i}"), None)).collect();
        assert!(b.receive(many, caps).is_err());
        let big = vec![card("x", Some(&"9".repeat(200)))];
        assert_eq!(
            b.receive(big, caps),
            Err(OverCap {
                agents: 1,
                bytes: 209
            })
        );
        assert_eq!(
            b.peer(),
            &[card("codex", None)],
            "the last list that fit stays"
        );
    }
}
