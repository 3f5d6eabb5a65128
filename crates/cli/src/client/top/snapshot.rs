//! What one refresh of `agent-hub top` saw (docs/operations.md "Watching a hub"): the hub's
//! `activity` answer (SPEC §14.1) or, from a hub without that verb, its `who` answer, and the
//! relay's status file when `--config` names one.
//!
//! Owns the view's own reading of those replies. It is deliberately tolerant: unknown keys
//! are ignored and every key but a name may be absent, so a hub that adds fields to `who`
//! (an agent's liveness `state`, `since`, `source`) or to `activity` never breaks the view,
//! and one without them shows `-`. Values of an unexpected JSON type are shown as their JSON
//! text rather than failing the refresh. Refuses IO: `run` fetches, this reads.
// The sans-IO line (clippy.toml): no sockets, files, processes, threads, clock or OS randomness.
#![deny(clippy::disallowed_methods, clippy::disallowed_types)]

use serde::Deserialize;
use serde_json::Value;

/// One parked await's filters.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
pub struct FilterView {
    #[serde(rename = "replyTo", default)]
    pub reply_to: Option<String>,
    #[serde(default)]
    pub kind: Option<String>,
}

/// One roster agent.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
pub struct AgentView {
    pub name: String,
    #[serde(default)]
    pub parked: Vec<FilterView>,
    #[serde(default)]
    pub queued: u64,
    #[serde(rename = "lastSeen", default)]
    pub last_seen: Option<String>,
    #[serde(rename = "lastDelivery", default)]
    pub last_delivery: Option<String>,
    /// Liveness (issue 12): `waiting`, `busy`, `idle`, `gone`, `unknown`; absent from a hub
    /// that does not report it. Kept as JSON so any type reads.
    #[serde(default)]
    pub state: Option<Value>,
    #[serde(default)]
    pub since: Option<Value>,
    #[serde(default)]
    pub source: Option<Value>,
}

/// A JSON value as a short display text: a string without quotes, anything else as JSON.
pub fn text_of(v: &Option<Value>) -> Option<String> {
    match v {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(other) => Some(other.to_string()),
    }
}

impl AgentView {
    /// The liveness state, or None when the hub does not say.
    pub fn state_text(&self) -> Option<String> {
        text_of(&self.state)
    }
}

/// One recently accepted envelope (metadata only; the reply has no body).
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
pub struct EnvelopeView {
    #[serde(default)]
    pub id: String,
    #[serde(default)]
    pub from: String,
    #[serde(default)]
    pub to: String,
    #[serde(default)]
    pub kind: String,
    #[serde(rename = "acceptedAt", default)]
    pub accepted_at: Option<String>,
    #[serde(default)]
    pub state: String,
    #[serde(rename = "stateAt", default)]
    pub state_at: Option<String>,
}

/// One unfinished task.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
pub struct TaskView {
    #[serde(default)]
    pub task: String,
    #[serde(default)]
    pub agent: String,
    #[serde(default)]
    pub delegator: String,
    #[serde(default)]
    pub peer: Option<String>,
    #[serde(default)]
    pub state: String,
    #[serde(rename = "createdAt", default)]
    pub created_at: Option<String>,
    #[serde(rename = "startedAt", default)]
    pub started_at: Option<String>,
}

/// The `activity` payload as the view reads it (a `who` payload reads as one too: `agents`
/// only).
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
pub struct ActivityView {
    #[serde(default)]
    pub agents: Vec<AgentView>,
    #[serde(default)]
    pub envelopes: Vec<EnvelopeView>,
    #[serde(default)]
    pub tasks: Vec<TaskView>,
}

/// One relay link, from the relay's status file (`relay_status`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LinkView {
    pub peer: String,
    pub state: String,
    pub direction: Option<String>,
    pub last_heartbeat: Option<String>,
    pub reconnects: u64,
    pub last_error: Option<String>,
}

impl LinkView {
    pub fn from_status(s: &agent_hub_host::relay_status::RelayStatus) -> Vec<LinkView> {
        s.peers
            .iter()
            .map(|p| LinkView {
                peer: p.id.clone(),
                state: p.state.clone(),
                direction: p.direction.clone(),
                last_heartbeat: p.last_heartbeat.clone(),
                reconnects: p.reconnects,
                last_error: p.last_error.clone(),
            })
            .collect()
    }
}

/// Where the hub's part of a refresh came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The `activity` verb: agents, envelopes and tasks.
    Activity,
    /// A hub without `activity`: `who` only, so no envelopes or tasks.
    WhoOnly,
}

/// Everything one refresh saw.
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    /// When it was taken (RFC 3339, UTC), shown in the header.
    pub taken: chrono::DateTime<chrono::Utc>,
    /// The hub's answer, or why there is none this time (the view keeps refreshing).
    pub hub: Result<(Source, ActivityView), String>,
    /// Relay links: None without `--config` or without a `[relay]` table; Err when the
    /// status file cannot be read.
    pub links: Option<Result<Vec<LinkView>, String>>,
}

/// An `activity` or `who` payload that does not read as the view's type (not JSON, or an
/// agent without a name).
#[derive(Debug)]
pub enum PayloadError {
    /// What serde said about the JSON text.
    Json(serde_json::Error),
}

impl std::fmt::Display for PayloadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PayloadError::Json(e) => write!(f, "unexpected reply from the hub: {e}"),
        }
    }
}

impl std::error::Error for PayloadError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            PayloadError::Json(e) => Some(e),
        }
    }
}

/// Reads an `activity` or `who` payload (the JSON text inside the tag).
pub fn read_payload(text: &str) -> Result<ActivityView, PayloadError> {
    serde_json::from_str(text).map_err(PayloadError::Json)
}

/// How much an agent needs an operator's eye.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Attention {
    Fine,
    /// Mail waits and nothing will take it soon without help.
    Warn(&'static str),
    /// Mail waits and no reader exists or will come.
    Stuck(&'static str),
}

/// Whether an agent looks stuck (docs/operations.md "Watching a hub"): mail queued for it and
/// no reader for it — gone, or neither parked nor running a turn; a parked await whose
/// filters let the mail sit; an idle agent (its hooks read mail only when a turn ends).
pub fn attention(a: &AgentView) -> Attention {
    if a.queued == 0 {
        return Attention::Fine;
    }
    match a.state_text().as_deref() {
        Some("gone") => Attention::Stuck("gone, mail queued"),
        Some("busy") => Attention::Fine,
        Some("idle") => Attention::Warn("idle, mail queued"),
        _ if !a.parked.is_empty() => Attention::Warn("mail its filters skip"),
        _ => Attention::Stuck("mail queued, no reader"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_who_reply_with_or_without_liveness_reads_and_unknown_keys_are_ignored() {
        let old = r#"{"agents":[{"name":"a","parked":[{"replyTo":null,"kind":"k"}],"queued":2,"lastSeen":null,"lastDelivery":null}]}"#;
        let v = read_payload(old).unwrap();
        assert_eq!(v.agents[0].parked[0].kind.as_deref(), Some("k"));
        assert_eq!(v.agents[0].state_text(), None);
        assert!(v.envelopes.is_empty());
        let new = r#"{"agents":[{"name":"a","parked":[],"queued":0,"state":"busy","since":"2026-01-01T00:00:00Z","source":"hooks","pid":4,"extra":{"x":1}}],"envelopes":[{"id":"e","from":"a","to":"b","kind":"k","acceptedAt":"t","state":"queued","future":true}],"tasks":[],"more":[]}"#;
        let v = read_payload(new).unwrap();
        assert_eq!(v.agents[0].state_text().as_deref(), Some("busy"));
        assert_eq!(text_of(&v.agents[0].source).as_deref(), Some("hooks"));
        assert_eq!(v.envelopes[0].to, "b");
        // A state of another JSON type is shown, not a failed refresh.
        let odd = r#"{"agents":[{"name":"a","state":{"code":3},"since":12345}]}"#;
        let v = read_payload(odd).unwrap();
        assert_eq!(v.agents[0].state_text().as_deref(), Some(r#"{"code":3}"#));
        assert_eq!(text_of(&v.agents[0].since).as_deref(), Some("12345"));
        let err = read_payload(r#"{"agents":[{"queued":1}]}"#).expect_err("a name is needed");
        assert!(err
            .to_string()
            .starts_with("unexpected reply from the hub: missing field `name`"));
    }

    fn agent(queued: u64, parked: usize, state: Option<&str>) -> AgentView {
        AgentView {
            name: "a".into(),
            queued,
            parked: vec![FilterView::default(); parked],
            state: state.map(|s| Value::String(s.into())),
            ..AgentView::default()
        }
    }

    #[test]
    fn queued_mail_without_a_reader_is_stuck_and_a_reader_that_will_take_it_is_fine() {
        assert_eq!(attention(&agent(0, 0, Some("gone"))), Attention::Fine);
        assert!(matches!(attention(&agent(3, 0, None)), Attention::Stuck(_)));
        assert!(matches!(
            attention(&agent(3, 0, Some("unknown"))),
            Attention::Stuck(_)
        ));
        assert!(matches!(
            attention(&agent(1, 2, Some("gone"))),
            Attention::Stuck(_)
        ));
        assert_eq!(attention(&agent(3, 0, Some("busy"))), Attention::Fine);
        assert!(matches!(
            attention(&agent(3, 0, Some("idle"))),
            Attention::Warn(_)
        ));
        // Parked, yet mail waits: its filters let it sit.
        assert!(matches!(attention(&agent(1, 1, None)), Attention::Warn(_)));
        assert!(matches!(
            attention(&agent(1, 1, Some("waiting"))),
            Attention::Warn(_)
        ));
    }
}
