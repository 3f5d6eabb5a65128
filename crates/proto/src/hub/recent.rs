//! The hub's short memory of the envelopes it accepted last (SPEC §14.1), for the `activity`
//! verb and so for the operator's live view (`agent-hub top`).
//!
//! Owns a ring of at most `RECENT_ENVELOPES` entries of metadata: id, sender, recipient,
//! kind and acceptance time. Never a body or a correlation id. Each field is kept to
//! `FIELD_MAX_BYTES`, so the ring's memory is bounded whatever the line cap (an id is
//! limited only by `max_line_bytes`, SPEC §3.2). Noting an envelope reuses the evicted
//! entry's strings, so a send in steady state allocates nothing here. Refuses IO and clocks:
//! the acceptance time is passed in.

use super::router::Queued;
use std::collections::VecDeque;

/// Envelopes the ring remembers: more than a terminal shows, few enough that answering
/// `activity` (one ledger lookup each) stays trivial at one query a second.
pub const RECENT_ENVELOPES: usize = 32;

/// Bytes kept of each field. A longer id is shown cut and its state as `unknown`: the cut id
/// no longer names a ledger record.
pub const FIELD_MAX_BYTES: usize = 256;

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Entry {
    pub id: String,
    pub from: String,
    pub to: String,
    pub kind: String,
    pub accepted_ms: i64,
    /// Whether `id` was cut to `FIELD_MAX_BYTES` (its ledger state cannot be looked up).
    pub id_cut: bool,
}

#[derive(Debug, Default)]
pub struct Recent {
    ring: VecDeque<Entry>,
}

/// Copies `src` into `dst` (reusing its allocation), cut at a char boundary at most
/// `FIELD_MAX_BYTES` long; true if it was cut.
fn keep(dst: &mut String, src: &str) -> bool {
    let mut end = src.len().min(FIELD_MAX_BYTES);
    while !src.is_char_boundary(end) {
        end -= 1;
    }
    dst.clear();
    dst.push_str(&src[..end]);
    end < src.len()
}

impl Recent {
    /// Remembers an envelope the hub just accepted, forgetting the oldest past the bound.
    pub fn note(&mut self, env: &Queued, accepted_ms: i64) {
        let mut e = if self.ring.len() >= RECENT_ENVELOPES {
            self.ring.pop_front().unwrap_or_default()
        } else {
            Entry::default()
        };
        e.id_cut = env.id.with_text(|id| keep(&mut e.id, id));
        keep(&mut e.from, &env.from);
        keep(&mut e.to, &env.to);
        keep(&mut e.kind, &env.kind);
        e.accepted_ms = accepted_ms;
        self.ring.push_back(e);
    }

    /// The remembered envelopes, newest first.
    pub fn newest_first(&self) -> impl Iterator<Item = &Entry> {
        self.ring.iter().rev()
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.ring.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queued(id: &str, kind: &str) -> Queued {
        Queued::stored(
            id.into(),
            "a".into(),
            "b".into(),
            kind.into(),
            Some("secret-corr".into()),
            "{\"body\":\"secret-body\"}",
            None,
        )
    }

    #[test]
    fn the_ring_keeps_the_newest_and_forgets_the_oldest_past_its_bound() {
        let mut r = Recent::default();
        for i in 0..RECENT_ENVELOPES + 5 {
            r.note(&queued(&format!("e{i}"), "task"), i as i64);
        }
        assert_eq!(r.len(), RECENT_ENVELOPES);
        let ids: Vec<&str> = r.newest_first().map(|e| e.id.as_str()).collect();
        assert_eq!(ids[0], format!("e{}", RECENT_ENVELOPES + 4));
        assert_eq!(*ids.last().unwrap(), "e5");
        assert_eq!(r.newest_first().next().unwrap().accepted_ms, 36);
    }

    #[test]
    fn long_fields_are_cut_at_a_char_boundary_and_the_cut_id_is_flagged() {
        let mut r = Recent::default();
        let long_id = "é".repeat(FIELD_MAX_BYTES); // 2 bytes a char
        let long_kind = "k".repeat(FIELD_MAX_BYTES * 4);
        r.note(&queued(&long_id, &long_kind), 1);
        let e = r.newest_first().next().unwrap();
        assert!(e.id_cut);
        assert_eq!(e.id.len(), FIELD_MAX_BYTES);
        assert!(long_id.starts_with(&e.id));
        assert_eq!(e.kind.len(), FIELD_MAX_BYTES);
        r.note(&queued("short", "task"), 2);
        let e = r.newest_first().next().unwrap();
        assert!(!e.id_cut);
        assert_eq!((e.id.as_str(), e.kind.as_str()), ("short", "task"));
    }
}
