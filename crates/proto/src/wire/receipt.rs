//! Receipts (SPEC §12.4, "Readers" and "Waiting for a stage"): the fixed list of reader kinds a
//! reading client declares in its await (`"reader":"stop-hook"`), the stages a `status` may
//! wait for, the `status` request with its optional wait, and the words of a wait's end.
//!
//! Owns those names and their parsing; both binaries use them, so client and hub cannot
//! disagree. Refuses IO, and deciding when a wait ends (the hub's `receipts` module does).

use serde::{Deserialize, Serialize};

/// Who took an envelope out of the hub: the kind of reading client, as it declared itself in
/// its await. The list is fixed; a value outside it is refused (SPEC §12.4 "Readers").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reader {
    /// `agent-hub await` (and `agent-hub delegate --wait`): printed to stdout, then acked.
    CliAwait,
    /// The MCP `await` tool of `agent-hub mcp`: the tool result written to the MCP client,
    /// then acked.
    McpAwait,
    /// `agent-hub hook stop`: printed into the agent's context as the hook's block decision,
    /// then acked.
    StopHook,
    /// `agent-hub drain --confirm`, as agent plugins (OpenCode's) run it: acked only after
    /// the plugin confirmed it handed the text to the agent's session.
    PluginDrain,
    /// `agent-hub drain` without `--confirm`: printed to stdout, then acked.
    Drain,
    /// Reserved for a runner that feeds mail into an ACP session (docs/acp.md); no built-in
    /// client sends it today (a task's agent reads its mail through MCP: `mcp-await`).
    AcpSession,
    /// A reader that declared no kind (an older or third-party client). Never declared: a
    /// client that sends `"reader":"unknown"` is refused like any other value off the list.
    Unknown,
}

impl Reader {
    /// Every kind a client may declare, in the order error texts and docs list them.
    pub const DECLARABLE: [Reader; 6] = [
        Reader::CliAwait,
        Reader::McpAwait,
        Reader::StopHook,
        Reader::PluginDrain,
        Reader::Drain,
        Reader::AcpSession,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Reader::CliAwait => "cli-await",
            Reader::McpAwait => "mcp-await",
            Reader::StopHook => "stop-hook",
            Reader::PluginDrain => "plugin-drain",
            Reader::Drain => "drain",
            Reader::AcpSession => "acp-session",
            Reader::Unknown => "unknown",
        }
    }

    /// A kind a client declared; None for anything off the list (`unknown` included).
    pub fn declared(s: &str) -> Option<Reader> {
        Reader::DECLARABLE.into_iter().find(|r| r.as_str() == s)
    }

    /// A kind read back from the store, where `unknown` stands for an undeclared reader.
    pub fn stored(s: &str) -> Option<Reader> {
        match s {
            "unknown" => Some(Reader::Unknown),
            other => Reader::declared(other),
        }
    }

    /// The declarable names joined for an error text or a doc line.
    pub fn list() -> String {
        Reader::DECLARABLE.map(Reader::as_str).join(", ")
    }
}

/// A stage a sender can wait for with `status` (SPEC §12.4 "Waiting for a stage").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitFor {
    /// Handed to a reader (or, for `name@peer`, to the link): `delivered`, `acked` and
    /// `forwarded` all reach it.
    Delivered,
    /// Acknowledged by its reader (for hooks: printed into the agent's context).
    Acked,
    /// Taken over by the peer hub (`name@peer` mail, SPEC §15).
    Forwarded,
}

impl WaitFor {
    pub const ALL: [WaitFor; 3] = [WaitFor::Delivered, WaitFor::Acked, WaitFor::Forwarded];

    pub fn as_str(self) -> &'static str {
        match self {
            WaitFor::Delivered => "delivered",
            WaitFor::Acked => "acked",
            WaitFor::Forwarded => "forwarded",
        }
    }

    pub fn parse(s: &str) -> Option<WaitFor> {
        WaitFor::ALL.into_iter().find(|w| w.as_str() == s)
    }

    pub fn list() -> String {
        WaitFor::ALL.map(WaitFor::as_str).join(", ")
    }

    /// Whether an envelope in `state` (a `status` state word) has reached this stage.
    pub fn reached_by(self, state: &str) -> bool {
        match self {
            WaitFor::Delivered => matches!(state, "delivered" | "acked" | "forwarded"),
            WaitFor::Acked => state == "acked",
            WaitFor::Forwarded => state == "forwarded",
        }
    }
}

/// How a `status` wait ended: the reply's `wait` key (SPEC §12.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitEnd {
    /// The envelope is at the stage waited for, or past it.
    Reached,
    /// `timeoutMs` passed first; `state` is where it is now.
    Timeout,
    /// The envelope settled where the stage can no longer come: bounced, lost, consumed
    /// without it (a plain delivery never becomes `acked`; a forwarded one is the peer's), or
    /// `unknown` (never accepted, forgotten, or not the asker's to see).
    Ended,
}

impl WaitEnd {
    pub fn as_str(self) -> &'static str {
        match self {
            WaitEnd::Reached => "reached",
            WaitEnd::Timeout => "timeout",
            WaitEnd::Ended => "ended",
        }
    }

    pub fn parse(s: &str) -> Option<WaitEnd> {
        [WaitEnd::Reached, WaitEnd::Timeout, WaitEnd::Ended]
            .into_iter()
            .find(|w| w.as_str() == s)
    }
}

/// `{"status":{"id":…,"waitFor":…,"timeoutMs":…}}` (SPEC §12.4). Without `waitFor` it is the
/// plain status query, encoded exactly as before (the two new keys are never sent absent).
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct StatusRequest {
    pub id: String,
    /// A stage word of `WaitFor`; checked when the line is decoded.
    #[serde(rename = "waitFor", default, skip_serializing_if = "Option::is_none")]
    pub wait_for: Option<String>,
    /// How long the hub waits, in milliseconds; absent with `waitFor`: as long as it takes.
    #[serde(rename = "timeoutMs", default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
}

impl StatusRequest {
    /// The stage waited for, once the line was decoded (`ClientLine::decode` checked it).
    pub fn stage(&self) -> Option<WaitFor> {
        self.wait_for.as_deref().and_then(WaitFor::parse)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reader_names_round_trip_and_unknown_is_not_declarable() {
        for r in Reader::DECLARABLE {
            assert_eq!(Reader::declared(r.as_str()), Some(r));
            assert_eq!(Reader::stored(r.as_str()), Some(r));
        }
        assert_eq!(Reader::declared("unknown"), None);
        assert_eq!(Reader::stored("unknown"), Some(Reader::Unknown));
        assert_eq!(Reader::declared("Stop-Hook"), None);
        assert_eq!(Reader::declared(""), None);
        assert_eq!(
            Reader::list(),
            "cli-await, mcp-await, stop-hook, plugin-drain, drain, acp-session"
        );
    }

    #[test]
    fn stages_reached() {
        use WaitFor::*;
        for (w, state, want) in [
            (Delivered, "queued", false),
            (Delivered, "delivered", true),
            (Delivered, "acked", true),
            (Delivered, "forwarded", true),
            (Delivered, "bounced", false),
            (Acked, "delivered", false),
            (Acked, "acked", true),
            (Acked, "forwarded", false),
            (Forwarded, "delivered", false),
            (Forwarded, "forwarded", true),
            (Forwarded, "unknown", false),
        ] {
            assert_eq!(w.reached_by(state), want, "{w:?} {state}");
        }
        assert_eq!(WaitFor::parse("lost"), None);
        assert_eq!(WaitFor::list(), "delivered, acked, forwarded");
    }

    #[test]
    fn a_plain_status_request_encodes_as_before() {
        let r = StatusRequest {
            id: "x".into(),
            ..StatusRequest::default()
        };
        assert_eq!(serde_json::to_string(&r).unwrap(), r#"{"id":"x"}"#);
    }
}
