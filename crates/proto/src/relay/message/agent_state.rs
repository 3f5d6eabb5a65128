//! An agent's liveness state as a hub directory entry carries it (feature `liveness`,
//! docs/relay-protocol.md §5 "Liveness"; SPEC §14.1): the four states a hub states for its own
//! names, plus `Unknown`, which is also what anything a peer sends that this build does not
//! know becomes. Reading is lenient on purpose: a later release may add a state, and an older
//! or foreign peer may send any JSON in the key, and neither may cost the peer its directory.
//! Refuses: deciding what a state means for delivery (the hub's `liveness`).

use serde::de::{Deserializer, IgnoredAny};
use serde::{Deserialize, Serialize, Serializer};

/// One agent's liveness in a directory entry. Serialized as its word; `Unknown` is never
/// sent (the key is omitted), and absence reads as `Unknown`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub enum AgentState {
    Waiting,
    Busy,
    Idle,
    Gone,
    #[default]
    Unknown,
}

impl AgentState {
    pub fn as_str(self) -> &'static str {
        match self {
            AgentState::Waiting => "waiting",
            AgentState::Busy => "busy",
            AgentState::Idle => "idle",
            AgentState::Gone => "gone",
            AgentState::Unknown => "unknown",
        }
    }

    /// The state a word names; any other word is `Unknown` (never an error).
    pub fn from_word(s: &str) -> AgentState {
        match s {
            "waiting" => AgentState::Waiting,
            "busy" => AgentState::Busy,
            "idle" => AgentState::Idle,
            "gone" => AgentState::Gone,
            _ => AgentState::Unknown,
        }
    }

    pub fn is_unknown(&self) -> bool {
        *self == AgentState::Unknown
    }
}

impl Serialize for AgentState {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// A string or anything else, without keeping anything but the string.
#[derive(Deserialize)]
#[serde(untagged)]
enum Lenient {
    Word(String),
    Other(IgnoredAny),
}

impl<'de> Deserialize<'de> for AgentState {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<AgentState, D::Error> {
        // Any JSON at all: a word this build does not know, a number, an object or null all
        // read as Unknown, so one odd entry never makes a whole beat unusable.
        Ok(match Lenient::deserialize(d)? {
            Lenient::Word(w) => AgentState::from_word(&w),
            Lenient::Other(_) => AgentState::Unknown,
        })
    }
}

/// `since_ms`: unix milliseconds, read leniently too (a negative, fractional or non-number
/// value reads as absent).
pub(crate) fn lenient_since_ms<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Ms {
        Int(u64),
        Other(IgnoredAny),
    }
    Ok(match Ms::deserialize(d)? {
        Ms::Int(n) => i64::try_from(n).ok(),
        Ms::Other(_) => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn known_words_round_trip_and_anything_else_is_unknown() {
        for s in [
            AgentState::Waiting,
            AgentState::Busy,
            AgentState::Idle,
            AgentState::Gone,
        ] {
            let v = serde_json::to_value(s).unwrap();
            assert_eq!(v, json!(s.as_str()));
            assert_eq!(serde_json::from_value::<AgentState>(v).unwrap(), s);
        }
        for odd in [
            json!("asleep"),
            json!("WAITING"),
            json!(""),
            json!(7),
            json!(null),
            json!({"state": "busy"}),
            json!(["busy"]),
        ] {
            assert_eq!(
                serde_json::from_value::<AgentState>(odd.clone()).unwrap(),
                AgentState::Unknown,
                "{odd}"
            );
        }
    }
}
