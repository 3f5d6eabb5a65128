//! The `activity` verb's reply (SPEC §14.1): what the hub is doing now, as metadata only —
//! every roster agent as `who` shows it, the envelopes it accepted last and the delegated
//! tasks that have not ended. It feeds the operator's live view (`agent-hub top`,
//! docs/operations.md "Watching a hub"), which so needs one connection per refresh.
//!
//! Owns the types and their JSON shapes (optional keys absent rather than null). Refuses: any
//! body, correlation id, prompt, task text or token — none of them has a field here, so no
//! code path can put one on this line.

use super::{AgentPresence, OffRosterQueue};
use serde::{Deserialize, Serialize};

/// `{"activity":{"agents":[…],"envelopes":[…],"tasks":[…]}}`.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Activity {
    /// Every roster name, sorted, exactly as `who` reports it (§14).
    pub agents: Vec<AgentPresence>,
    /// The last envelopes the hub accepted since it started, newest first.
    pub envelopes: Vec<EnvelopeMeta>,
    /// Delegated tasks not yet ended (queued, running, cancelling), oldest first.
    pub tasks: Vec<TaskMeta>,
    /// The queues of names nobody holds, as `who` with `offRoster` shows them (§14 "Mail
    /// nobody holds"). Always sent: the one reader of this line, `agent-hub top`, has read it
    /// tolerantly from the start. Absent from an older hub's answer.
    #[serde(rename = "offRoster", default)]
    pub off_roster: Vec<OffRosterQueue>,
}

/// One accepted envelope, without its body.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct EnvelopeMeta {
    pub id: String,
    pub from: String,
    pub to: String,
    pub kind: String,
    /// When the hub accepted it (RFC 3339, UTC).
    #[serde(rename = "acceptedAt")]
    pub accepted_at: String,
    /// Its state now, as `status` names it (SPEC §12.4), or `forgotten` once the ledger has
    /// let its id go.
    pub state: String,
    /// When it reached that state.
    #[serde(rename = "stateAt", default, skip_serializing_if = "Option::is_none")]
    pub state_at: Option<String>,
}

/// One delegated task that has not ended, without its prompt or output.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct TaskMeta {
    pub task: String,
    pub agent: String,
    pub delegator: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer: Option<String>,
    pub state: String,
    #[serde(rename = "createdAt")]
    pub created_at: String,
    #[serde(rename = "startedAt", default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
}
