//! The decisions of delivery, kept apart from their IO: how much mail one run takes (the
//! message and byte budget), when a stop hook may block (`stop_hook_active`, the consecutive
//! block cap), and which taken envelopes were already handed over. Pure: state and inputs in,
//! decisions out; time is a parameter.
//!
//! Owns `StopState`, the small persisted record per hub identity. Refuses file access:
//! `state.rs` loads and saves it.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The version written into every state file. Bump it when a field changes meaning; a file
/// with another version is ignored and replaced (it holds only hints, never mail).
pub const STATE_VERSION: u32 = 1;
/// Envelope ids remembered as handed over, newest last. Enough to recognise the redelivery
/// of anything whose ack went unconfirmed in the last several runs.
pub const MAX_REMEMBERED_IDS: usize = 512;
/// Sessions whose block counts are kept; the least recently updated go first.
pub const MAX_SESSIONS: usize = 64;

/// Per-identity record kept between hook and drain runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StopState {
    pub version: u32,
    /// Envelopes already handed over to the agent, newest last. An ack that was not
    /// confirmed can bring one back; it is then acked again silently, not shown twice.
    #[serde(default)]
    pub delivered_ids: Vec<String>,
    /// Block counts by session key (`session_key`).
    #[serde(default)]
    pub sessions: BTreeMap<String, SessionState>,
}

impl Default for StopState {
    fn default() -> StopState {
        StopState {
            version: STATE_VERSION,
            delivered_ids: Vec::new(),
            sessions: BTreeMap::new(),
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionState {
    /// Blocks in a row in the current `stop_hook_active` chain.
    pub consecutive_blocks: u32,
    /// Unix seconds of the last update, for pruning.
    pub updated_at_secs: u64,
}

/// The key a session's counts live under. Inputs without a session id share one key.
pub fn session_key(session_id: Option<&str>) -> String {
    match session_id {
        Some(id) => format!("s:{id}"),
        None => "none".to_owned(),
    }
}

/// Whether the hook may contact the hub at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    /// Take mail; block if there is any that was not handed over yet.
    Proceed,
    /// `stop_hook_active` and this session already blocked `blocks` times in a row: let the
    /// agent stop; the mail stays queued for the next stop.
    Capped { blocks: u32 },
    /// `stop_hook_active` but no state could be kept, so neither "new mail" nor the cap can
    /// be told: the agent's own loop rule (never block again) applies.
    ActiveWithoutState,
}

/// Decides before anything is taken. Mail handed over earlier is acked, so whatever the hub
/// still holds on a `stop_hook_active` stop is new; the cap alone bounds the chain.
pub fn gate(stop_hook_active: bool, state: Option<&StopState>, key: &str, max_blocks: u32) -> Gate {
    if !stop_hook_active {
        return Gate::Proceed;
    }
    let Some(state) = state else {
        return Gate::ActiveWithoutState;
    };
    let blocks = state
        .sessions
        .get(key)
        .map(|s| s.consecutive_blocks)
        .unwrap_or(0);
    if blocks >= max_blocks {
        Gate::Capped { blocks }
    } else {
        Gate::Proceed
    }
}

impl StopState {
    /// Whether an envelope was already handed over (its ack may not have been confirmed).
    pub fn already_delivered(&self, id: &str) -> bool {
        self.delivered_ids.iter().any(|d| d == id)
    }

    /// Remembers envelopes as handed over, keeping the newest `MAX_REMEMBERED_IDS`.
    pub fn remember_delivered<'a>(&mut self, ids: impl IntoIterator<Item = &'a str>) {
        for id in ids {
            if !self.already_delivered(id) {
                self.delivered_ids.push(id.to_owned());
            }
        }
        let excess = self.delivered_ids.len().saturating_sub(MAX_REMEMBERED_IDS);
        self.delivered_ids.drain(..excess);
    }

    /// Records how a hook run ended for a session. A block extends the chain (or starts one
    /// on a fresh stop); letting the agent stop ends it.
    pub fn record_stop(&mut self, key: &str, stop_hook_active: bool, blocked: bool, now_secs: u64) {
        let prev = self
            .sessions
            .get(key)
            .map(|s| s.consecutive_blocks)
            .unwrap_or(0);
        let consecutive_blocks = match (blocked, stop_hook_active) {
            (false, _) => 0,
            (true, false) => 1,
            (true, true) => prev.saturating_add(1),
        };
        self.sessions.insert(
            key.to_owned(),
            SessionState {
                consecutive_blocks,
                updated_at_secs: now_secs,
            },
        );
        while self.sessions.len() > MAX_SESSIONS {
            let oldest = self
                .sessions
                .iter()
                .min_by_key(|(k, s)| (s.updated_at_secs, (*k).clone()))
                .map(|(k, _)| k.clone());
            match oldest {
                Some(k) => self.sessions.remove(&k),
                None => break,
            };
        }
    }
}

/// How much one run takes: at most `max_messages` envelopes, and shown messages adding up to
/// about `max_bytes` of text. The first message is always shown (cut if it alone is too big),
/// so mail never gets stuck behind one large body.
#[derive(Debug, Clone)]
pub struct Budget {
    max_messages: usize,
    max_bytes: usize,
    taken: usize,
    shown: usize,
    used_bytes: usize,
}

/// What to do with a taken envelope.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    /// Show it whole.
    Whole,
    /// Show the first `body_bytes` of its body and save the whole envelope to a file.
    Cut { body_bytes: usize },
    /// Give it back unacked (it returns to the front of the queue) and stop taking.
    Later,
}

/// Body bytes always shown of a cut body, even when the header alone fills the budget.
const MIN_CUT_BODY_BYTES: usize = 1024;
/// Room kept for the note a cut adds after the body.
const CUT_NOTE_BYTES: usize = 256;

impl Budget {
    pub fn new(max_messages: usize, max_bytes: usize) -> Budget {
        Budget {
            max_messages: max_messages.max(1),
            max_bytes,
            taken: 0,
            shown: 0,
            used_bytes: 0,
        }
    }

    /// Whether another envelope may be taken.
    pub fn can_take(&self) -> bool {
        self.taken < self.max_messages
    }

    /// Counts an envelope taken (shown or not).
    pub fn note_taken(&mut self) {
        self.taken += 1;
    }

    /// Decides for a message whose whole rendering is `item_bytes`, of which `body_bytes` are
    /// its body, and counts it if shown.
    pub fn admit(&mut self, item_bytes: usize, body_bytes: usize) -> Admit {
        if self.shown > 0 && self.used_bytes.saturating_add(item_bytes) > self.max_bytes {
            return Admit::Later;
        }
        self.shown += 1;
        if item_bytes <= self.max_bytes.saturating_sub(self.used_bytes) {
            self.used_bytes += item_bytes;
            return Admit::Whole;
        }
        // Only the first message gets here: it alone is larger than the budget.
        let overhead = item_bytes - body_bytes;
        let keep = self
            .max_bytes
            .saturating_sub(overhead + CUT_NOTE_BYTES)
            .max(MIN_CUT_BODY_BYTES)
            .min(body_bytes);
        self.used_bytes = self.max_bytes;
        Admit::Cut { body_bytes: keep }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "s:abc";

    fn with_blocks(n: u32) -> StopState {
        let mut s = StopState::default();
        s.sessions.insert(
            KEY.into(),
            SessionState {
                consecutive_blocks: n,
                updated_at_secs: 5,
            },
        );
        s
    }

    #[test]
    fn fresh_stops_always_proceed() {
        assert_eq!(gate(false, None, KEY, 5), Gate::Proceed);
        assert_eq!(gate(false, Some(&with_blocks(99)), KEY, 5), Gate::Proceed);
        assert_eq!(gate(false, Some(&with_blocks(0)), KEY, 0), Gate::Proceed);
    }

    #[test]
    fn active_stops_proceed_below_the_cap() {
        assert_eq!(
            gate(true, Some(&StopState::default()), KEY, 5),
            Gate::Proceed
        );
        assert_eq!(gate(true, Some(&with_blocks(4)), KEY, 5), Gate::Proceed);
        assert_eq!(
            gate(true, Some(&with_blocks(4)), "s:other", 5),
            Gate::Proceed
        );
    }

    #[test]
    fn active_stops_at_the_cap_let_the_agent_stop() {
        assert_eq!(
            gate(true, Some(&with_blocks(5)), KEY, 5),
            Gate::Capped { blocks: 5 }
        );
        assert_eq!(
            gate(true, Some(&with_blocks(1)), KEY, 0),
            Gate::Capped { blocks: 1 }
        );
    }

    #[test]
    fn active_without_state_never_blocks() {
        assert_eq!(gate(true, None, KEY, 5), Gate::ActiveWithoutState);
    }

    #[test]
    fn block_chain_counts_and_resets() {
        let mut s = StopState::default();
        s.record_stop(KEY, false, true, 1);
        assert_eq!(s.sessions[KEY].consecutive_blocks, 1);
        s.record_stop(KEY, true, true, 2);
        s.record_stop(KEY, true, true, 3);
        assert_eq!(s.sessions[KEY].consecutive_blocks, 3);
        assert_eq!(s.sessions[KEY].updated_at_secs, 3);
        // A fresh stop that blocks starts a new chain at 1.
        s.record_stop(KEY, false, true, 4);
        assert_eq!(s.sessions[KEY].consecutive_blocks, 1);
        // Letting the agent stop ends the chain.
        s.record_stop(KEY, true, false, 5);
        assert_eq!(s.sessions[KEY].consecutive_blocks, 0);
    }

    #[test]
    fn the_cap_is_reached_after_max_blocks_in_a_row() {
        let mut s = StopState::default();
        let max = 3;
        s.record_stop(KEY, false, true, 0);
        let mut active_blocks = 0;
        while gate(true, Some(&s), KEY, max) == Gate::Proceed {
            s.record_stop(KEY, true, true, 0);
            active_blocks += 1;
            assert!(active_blocks < 10, "the cap must stop the chain");
        }
        assert_eq!(s.sessions[KEY].consecutive_blocks, max);
        assert_eq!(active_blocks, 2, "1 fresh block + 2 active blocks = 3");
    }

    #[test]
    fn sessions_are_pruned_oldest_first() {
        let mut s = StopState::default();
        for i in 0..(MAX_SESSIONS as u64 + 3) {
            s.record_stop(&format!("s:{i}"), false, true, 100 + i);
        }
        assert_eq!(s.sessions.len(), MAX_SESSIONS);
        assert!(!s.sessions.contains_key("s:0"));
        assert!(!s.sessions.contains_key("s:2"));
        assert!(s.sessions.contains_key("s:3"));
    }

    #[test]
    fn delivered_ids_are_remembered_and_bounded() {
        let mut s = StopState::default();
        s.remember_delivered(["a", "b", "a"]);
        assert_eq!(s.delivered_ids, ["a", "b"]);
        assert!(s.already_delivered("a"));
        assert!(!s.already_delivered("c"));
        let many: Vec<String> = (0..MAX_REMEMBERED_IDS + 10)
            .map(|i| format!("id{i}"))
            .collect();
        s.remember_delivered(many.iter().map(String::as_str));
        assert_eq!(s.delivered_ids.len(), MAX_REMEMBERED_IDS);
        assert!(!s.already_delivered("a"), "oldest forgotten first");
        assert!(s.already_delivered(&format!("id{}", MAX_REMEMBERED_IDS + 9)));
    }

    #[test]
    fn session_keys() {
        assert_eq!(session_key(Some("x")), "s:x");
        assert_eq!(session_key(None), "none");
    }

    #[test]
    fn state_round_trips_and_tolerates_missing_fields() {
        let mut s = with_blocks(2);
        s.remember_delivered(["e1"]);
        let text = serde_json::to_string(&s).unwrap();
        assert_eq!(serde_json::from_str::<StopState>(&text).unwrap(), s);
        let bare: StopState = serde_json::from_str(r#"{"version":1}"#).unwrap();
        assert_eq!(bare, StopState::default());
    }

    #[test]
    fn budget_caps_the_message_count() {
        let mut b = Budget::new(2, 1_000_000);
        assert!(b.can_take());
        b.note_taken();
        assert_eq!(b.admit(10, 5), Admit::Whole);
        b.note_taken();
        assert!(!b.can_take());
        assert!(
            Budget::new(0, 10).can_take(),
            "at least one message per run"
        );
    }

    #[test]
    fn budget_caps_the_bytes_and_gives_back_the_rest() {
        let mut b = Budget::new(20, 100);
        assert_eq!(b.admit(60, 10), Admit::Whole);
        assert_eq!(b.admit(40, 10), Admit::Whole, "exactly full is fine");
        assert_eq!(b.admit(1, 1), Admit::Later);
    }

    #[test]
    fn a_later_message_that_does_not_fit_waits() {
        let mut b = Budget::new(20, 100);
        assert_eq!(b.admit(60, 10), Admit::Whole);
        assert_eq!(b.admit(50, 10), Admit::Later);
    }

    #[test]
    fn the_first_message_is_cut_when_it_alone_is_too_big() {
        let mut b = Budget::new(20, 4096);
        match b.admit(100_000, 99_800) {
            Admit::Cut { body_bytes } => {
                assert_eq!(body_bytes, 4096 - 200 - CUT_NOTE_BYTES);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(b.admit(10, 5), Admit::Later, "the budget is spent");
        // A header alone over budget still shows some body.
        let mut b = Budget::new(20, 100);
        assert_eq!(
            b.admit(5000, 4000),
            Admit::Cut {
                body_bytes: MIN_CUT_BODY_BYTES
            }
        );
    }
}
