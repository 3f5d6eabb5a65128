//! The delegation verbs' payloads (issue 11; docs/delegation.md "Verbs and replies"): what a
//! client sends in `delegate`, `task_status`, `tasks` and `cancel`, and what the hub answers in
//! `delegated`, `task_status`, `tasks` and `cancel`. What issue 37 added for approvals
//! (`delegate`'s `permission` and `allow`, the record's `requests`, `task_answer`) has its
//! types in `wire::approval`.
//!
//! Owns the types and their JSON shapes (keys in the documented order, optional keys absent
//! rather than null). Decoding of the client side goes through `wire::decode`, like every
//! client line, so no error quotes a value; the hub side is serde-derived (the client reads
//! it). Refuses: any rule that needs the hub's state or config (agents, roots, caps): those
//! are `tasks::TaskBook::submit`'s.

use super::approval::{AllowRule, Permission, RequestRecord};
use super::usage::{Amount, BudgetFigures, ContextFigures, CostFigures, UsageFigures};
use serde::{Deserialize, Serialize};
use std::fmt;

/// Tags a `delegate`'s `requires` may name (issue 38 design §6): the decoder keeps one more
/// so that the book can refuse the list as too long.
pub const MAX_REQUIRES: usize = 8;

/// `{"delegate":{"agent":…,"cwd":…,"prompt":…,"timeoutSecs":…,"progressSecs":…,"peer":…,
/// "permission":…,"allow":[…]}}`. The optional keys may be null or absent; the encoder leaves
/// them out when `None`.
#[derive(Clone, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct DelegateRequest {
    pub agent: String,
    pub cwd: String,
    pub prompt: String,
    #[serde(
        rename = "timeoutSecs",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub timeout_secs: Option<u64>,
    /// 0 or absent: no progress envelopes.
    #[serde(
        rename = "progressSecs",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub progress_secs: Option<u64>,
    /// A relay peer id: the task runs on that hub.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer: Option<String>,
    /// Issue 37: the policy the delegator asks for; the task runs under the narrower of it
    /// and the operator's bound, and a wider one is refused (docs/delegation.md
    /// "Approvals"). Absent: the operator's bound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permission: Option<Permission>,
    /// Issue 37: pre-approval rules (`wire::approval::check_allow`'s bounds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow: Option<Vec<AllowRule>>,
    /// Issue 38 design §2: how long the task's session is kept after a turn for a follow-up
    /// (`task_prompt`), at most `tasks.session_keep_secs`; absent: that window.
    #[serde(rename = "keepSecs", default, skip_serializing_if = "Option::is_none")]
    pub keep_secs: Option<u64>,
    /// Issue 38 design §4: with `peer: "auto"`, only places whose tags (`relay.tags`,
    /// claudectl's configured tags) include every one of these (1–8 tags of
    /// `[A-Za-z0-9._-]{1,40}`; the book checks them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requires: Option<Vec<String>>,
    /// Issue 38 design §1: cancel the task when its cost passes this many US dollars
    /// (finite, over 0, at most 1000000; the book checks it against the agent's reports).
    #[serde(
        rename = "maxCostUsd",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub max_cost_usd: Option<Amount>,
    /// Cancel the task when its total tokens pass this (1 – 10^12).
    #[serde(rename = "maxTokens", default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    /// Run it even when the agent does not report what a limit needs (the budget is then
    /// not kept, and the outcome says `"kept":false`).
    #[serde(
        rename = "allowUnmetered",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub allow_unmetered: Option<bool>,
}

/// The prompt is the delegator's work and may be large or confidential: `Debug` (and so any
/// log line built from it) shows its size only.
impl fmt::Debug for DelegateRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DelegateRequest")
            .field("agent", &self.agent)
            .field("cwd", &self.cwd)
            .field("prompt_bytes", &self.prompt.len())
            .field("timeout_secs", &self.timeout_secs)
            .field("progress_secs", &self.progress_secs)
            .field("peer", &self.peer)
            .field("permission", &self.permission)
            .field("allow", &self.allow)
            .field("keep_secs", &self.keep_secs)
            .field("requires", &self.requires)
            .field("max_cost_usd", &self.max_cost_usd)
            .field("max_tokens", &self.max_tokens)
            .field("allow_unmetered", &self.allow_unmetered)
            .finish()
    }
}

/// `{"task_status":{"task":…}}` and `{"cancel":{"task":…}}`.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct TaskRequest {
    pub task: String,
}

/// `{"delegated":{"task":…,"state":…}}` and the hub's `{"cancel":{"task":…,"state":…}}`: a
/// task and its state after the request.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct TaskStateReply {
    pub task: String,
    pub state: String,
}

/// Where `delegate --peer auto` placed a task and why (issue 38 design §4; docs/delegation.md
/// "Placement"): `chose` is `local` or the peer's name, `reason` the rule's sentence.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq, Eq)]
pub struct PlacementReply {
    pub chose: String,
    pub reason: String,
}

/// `{"delegated":{"task":…,"state":…,"peer"?:…,"placement"?:{…}}}` (issue 38 design §5): its
/// own type, read tolerantly (no `deny_unknown_fields`), so a later hub's keys never break a
/// client. `peer` and `placement` are present only when the delegation asked for `auto`.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq, Eq)]
pub struct DelegatedReply {
    pub task: String,
    pub state: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<PlacementReply>,
}

/// The plan of a running task, summarised: how many entries, how many done, the first one in
/// progress (an excerpt, as `acp::progress` keeps it).
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct PlanSummary {
    pub total: u64,
    pub completed: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current: Option<String>,
}

/// A running task's progress in a task record.
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct TaskProgress {
    /// `session/update` notifications folded so far.
    pub updates: u64,
    /// Distinct tool calls seen.
    #[serde(rename = "toolCalls")]
    pub tool_calls: u64,
    #[serde(rename = "lastTool", default, skip_serializing_if = "Option::is_none")]
    pub last_tool: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<PlanSummary>,
}

/// What `task_status` answers and `tasks` lists: keys in this order, each optional one
/// absent (not null) when it does not apply. A task the asker may not see is
/// `{"task":…,"state":"unknown"}` (`TaskRecord::unknown`).
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct TaskRecord {
    pub task: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer: Option<String>,
    /// Issue 38: who delegated it (the hub always says it for a known task). The asker sees
    /// its own tasks, and an approver other delegators' too (docs/delegation.md "Approvals"),
    /// so `agent-hub top` sums usage per delegator from this key; `activity` names the
    /// delegator of every unfinished task to anyone already, so it tells no one more.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delegator: Option<String>,
    pub state: String,
    /// Queued: the 1-based place in the task queue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub position: Option<u64>,
    /// RFC 3339 with milliseconds, UTC.
    #[serde(rename = "createdAt", default, skip_serializing_if = "Option::is_none")]
    pub created_at: Option<String>,
    #[serde(rename = "startedAt", default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
    #[serde(rename = "endedAt", default, skip_serializing_if = "Option::is_none")]
    pub ended_at: Option<String>,
    #[serde(rename = "elapsedMs", default, skip_serializing_if = "Option::is_none")]
    pub elapsed_ms: Option<u64>,
    #[serde(
        rename = "stopReason",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub stop_reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<TaskProgress>,
    /// Issue 37: the task's open requests, oldest first; absent when none is open.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests: Option<Vec<RequestRecord>>,
    /// Issue 38: the open (or last) turn, from 1; absent before the task started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn: Option<u32>,
    /// Issue 38: every turn, oldest first (at most `tasks.max_turns`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turns: Option<Vec<TaskTurn>>,
    /// Issue 38: the task's session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<TaskSession>,
    /// Issue 38: why `delegate --peer auto` placed it where it runs (the `delegated` reply's
    /// reason). Kept in memory only: absent after a hub restart (no schema change).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<String>,
    /// Issue 38 design §1, §5: the task's figures so far, each only when reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// Boxed, as the other figures: a record without them stays small.
    pub usage: Option<Box<UsageFigures>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<Box<CostFigures>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<ContextFigures>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<Box<BudgetFigures>>,
}

/// One turn in a task record (issue 38 design §5).
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq, Eq)]
pub struct TaskTurn {
    pub turn: u32,
    /// `running` while open, else the state its outcome said.
    pub state: String,
    #[serde(
        rename = "stopReason",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub stop_reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(rename = "startedAt")]
    pub started_at: String,
    #[serde(rename = "endedAt", default, skip_serializing_if = "Option::is_none")]
    pub ended_at: Option<String>,
    #[serde(rename = "elapsedMs", default, skip_serializing_if = "Option::is_none")]
    pub elapsed_ms: Option<u64>,
    /// `prompt` or `interrupt`.
    pub how: String,
}

/// A task record's `session` (issue 38 design §5): `live`, `kept` (with `keptUntil`),
/// `closed` or `none`; `resumable` is `none` until resume lands (design §3).
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq, Eq)]
pub struct TaskSession {
    pub state: String,
    #[serde(rename = "keptUntil", default, skip_serializing_if = "Option::is_none")]
    pub kept_until: Option<String>,
    pub resumable: String,
}

/// `{"task_prompt":{"task":…,"prompt":…,"interrupt":false}}` (issue 38 design §2): a
/// follow-up turn for a task's kept session. `Debug` shows the prompt's size only.
#[derive(Clone, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct TaskPromptRequest {
    pub task: String,
    pub prompt: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interrupt: Option<bool>,
}

impl TaskPromptRequest {
    pub fn interrupts(&self) -> bool {
        self.interrupt == Some(true)
    }
}

impl fmt::Debug for TaskPromptRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TaskPromptRequest")
            .field("task", &self.task)
            .field("prompt_bytes", &self.prompt.len())
            .field("interrupt", &self.interrupt)
            .finish()
    }
}

/// `{"task_prompt":{"task":…,"turn":2,"state":"running"}}`: the follow-up's turn, answered
/// once its start is committed.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Eq)]
pub struct TaskPromptReply {
    pub task: String,
    pub turn: u32,
    pub state: String,
}

impl TaskRecord {
    /// The answer about a task that does not exist or is not the asker's: the two are not
    /// told apart (docs/delegation.md "Visibility").
    pub fn unknown(task: &str) -> TaskRecord {
        TaskRecord {
            task: task.to_owned(),
            state: "unknown".to_owned(),
            ..TaskRecord::default()
        }
    }
}

/// `{"tasks":{"tasks":[…]}}`: the asker's tasks, oldest first (newest last).
#[derive(Debug, Clone, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct TaskList {
    pub tasks: Vec<TaskRecord>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{ClientLine, HubLine, WireError};
    use serde_json::{json, Value};

    fn round_trip_client(line: &str) -> ClientLine {
        let decoded = ClientLine::decode(line.as_bytes()).unwrap_or_else(|e| panic!("{line}: {e}"));
        assert_eq!(decoded.encode().trim_end(), line, "canonical");
        decoded
    }

    #[test]
    fn client_task_lines_round_trip() {
        let ClientLine::Delegate(d) = round_trip_client(
            r#"{"delegate":{"agent":"codex","cwd":"/srv/p","prompt":"fix it","timeoutSecs":600,"progressSecs":0,"peer":"lab"}}"#,
        ) else {
            panic!("a delegate")
        };
        assert_eq!(
            (d.timeout_secs, d.progress_secs, d.peer.as_deref()),
            (Some(600), Some(0), Some("lab"))
        );
        let ClientLine::Delegate(d) =
            round_trip_client(r#"{"delegate":{"agent":"codex","cwd":"/srv/p","prompt":"x"}}"#)
        else {
            panic!("a delegate")
        };
        assert_eq!(
            (d.timeout_secs, d.progress_secs, d.peer),
            (None, None, None)
        );
        // Nulls decode as absent and are not written back.
        let nulls = ClientLine::decode(
            br#"{"delegate":{"peer":null,"prompt":"x","timeoutSecs":null,"cwd":"/a","agent":"c","progressSecs":null}}"#,
        )
        .unwrap();
        assert_eq!(
            nulls.encode(),
            "{\"delegate\":{\"agent\":\"c\",\"cwd\":\"/a\",\"prompt\":\"x\"}}\n"
        );
        assert!(matches!(
            round_trip_client(r#"{"task_status":{"task":"task-1"}}"#),
            ClientLine::TaskStatus(TaskRequest { task }) if task == "task-1"
        ));
        assert!(matches!(
            round_trip_client(r#"{"cancel":{"task":"task-1"}}"#),
            ClientLine::Cancel(TaskRequest { task }) if task == "task-1"
        ));
        assert!(matches!(
            round_trip_client(r#"{"tasks":{}}"#),
            ClientLine::Tasks
        ));
        assert_eq!(ClientLine::Tasks.tag(), "tasks");
    }

    // The exact bytes a client writes for each task verb (these tests came from
    // `agent_hub_cli::client::task` with the encoders it had before issue 36: one encoder now).
    fn parsed(line: &str) -> Value {
        assert!(
            line.ends_with('\n') && line.matches('\n').count() == 1,
            "{line:?}"
        );
        serde_json::from_str(line.trim_end()).unwrap()
    }

    fn req() -> DelegateRequest {
        DelegateRequest {
            agent: "codex".into(),
            cwd: "/abs/dir".into(),
            prompt: "fix \"it\"\nplease".into(),
            timeout_secs: Some(600),
            progress_secs: Some(0),
            peer: None,
            permission: None,
            allow: None,
            keep_secs: None,
            requires: None,
            max_cost_usd: None,
            max_tokens: None,
            allow_unmetered: None,
        }
    }

    #[test]
    fn delegate_line_has_the_design_shape_in_order() {
        let l = ClientLine::Delegate(req()).encode();
        assert_eq!(
            l,
            "{\"delegate\":{\"agent\":\"codex\",\"cwd\":\"/abs/dir\",\"prompt\":\"fix \\\"it\\\"\\nplease\",\"timeoutSecs\":600,\"progressSecs\":0}}\n"
        );
        let mut r = req();
        r.timeout_secs = None;
        r.progress_secs = None;
        r.peer = Some("lab".into());
        assert_eq!(
            parsed(&ClientLine::Delegate(r).encode()),
            json!({"delegate":{"agent":"codex","cwd":"/abs/dir","prompt":"fix \"it\"\nplease","peer":"lab"}})
        );
    }

    #[test]
    fn a_prompt_with_control_characters_stays_one_line() {
        let mut r = req();
        r.prompt = "a\nb\r\u{2028}\u{0}c".into();
        let l = ClientLine::Delegate(r.clone()).encode();
        assert_eq!(l.matches('\n').count(), 1);
        assert_eq!(parsed(&l)["delegate"]["prompt"], r.prompt.as_str());
    }

    fn task(id: &str) -> TaskRequest {
        TaskRequest { task: id.into() }
    }

    #[test]
    fn the_other_lines() {
        assert_eq!(
            ClientLine::TaskStatus(task("task-1")).encode(),
            "{\"task_status\":{\"task\":\"task-1\"}}\n"
        );
        assert_eq!(ClientLine::Tasks.encode(), "{\"tasks\":{}}\n");
        assert_eq!(
            ClientLine::Cancel(task("t\"x")).encode(),
            "{\"cancel\":{\"task\":\"t\\\"x\"}}\n"
        );
    }

    #[test]
    fn client_task_lines_are_refused_without_quoting_them() {
        let secret = "Pr0mpt-s3cret";
        let cases = [
            (
                format!(r#"{{"delegate":{{"agent":"a","cwd":"/x","prompt":"p","{secret}":1}}}}"#),
                "malformed line: unknown field in `delegate`, expected one of `agent`, `cwd`, `prompt`, `timeoutSecs`, `progressSecs`, `peer`, `permission`, `allow`, `requires`, `maxCostUsd`, `maxTokens`, `allowUnmetered`, `keepSecs`",
            ),
            (
                r#"{"delegate":{"agent":"a","cwd":"/x"}}"#.to_owned(),
                "malformed line: missing field `prompt`",
            ),
            (
                format!(r#"{{"delegate":{{"agent":"a","cwd":"/x","prompt":["{secret}"]}}}}"#),
                "malformed line: invalid type: sequence, expected a string",
            ),
            (
                format!(r#"{{"delegate":{{"agent":"a","cwd":"/x","prompt":"p","timeoutSecs":"{secret}"}}}}"#),
                "malformed line: invalid type: string, expected u64",
            ),
            (
                r#"{"delegate":{"agent":"a","cwd":"/x","prompt":"p","progressSecs":-5}}"#.into(),
                "malformed line: invalid value: negative integer, expected u64",
            ),
            (
                r#"{"delegate":{"agent":"a","cwd":"/x","prompt":"p","peer":7}}"#.to_owned(),
                "malformed line: invalid type: integer, expected a string",
            ),
            (
                r#"{"delegate":{"agent":"a","agent":"b","cwd":"/x","prompt":"p"}}"#.into(),
                "malformed line: duplicate field `agent`",
            ),
            (
                format!(r#"{{"task_status":{{"task":"t","{secret}":1}}}}"#),
                "malformed line: unknown field in `task_status`, expected `task`",
            ),
            (
                r#"{"task_status":{}}"#.into(),
                "malformed line: missing field `task`",
            ),
            (
                r#"{"task_status":{"task":""}}"#.into(),
                "invalid task_status: task must not be empty",
            ),
            (
                r#"{"cancel":{"task":""}}"#.into(),
                "invalid cancel: task must not be empty",
            ),
            (
                format!(r#"{{"cancel":"{secret}"}}"#),
                "malformed line: invalid type: string, expected an object",
            ),
            (
                format!(r#"{{"tasks":{{"{secret}":1}}}}"#),
                "malformed line: unknown field in `tasks`, which has no fields",
            ),
            (
                r#"{"delegated":{"task":"t","state":"queued"}}"#.into(),
                "malformed line: unknown tag, expected one of `hello`, `send`, `await`, `ack`, `status`, `who`, `delegate`, `task_status`, `tasks`, `cancel`, `task_answer`, `task_permission`, `turn`, `activity`, `task_prompt`, `task_close`, `lease_claim`, `lease_release`, `lease_renew`, `lease_list`, `lease_break`, `lease_check`",
            ),
        ];
        for (line, want) in &cases {
            let e = ClientLine::decode(line.as_bytes()).unwrap_err();
            assert_eq!(e.to_string(), *want, "{line}");
            assert!(!e.to_string().contains(secret));
        }
        assert_eq!(
            ClientLine::decode(br#"{"cancel":{"task":""}}"#).unwrap_err(),
            WireError::EmptyTask("cancel")
        );
    }

    #[test]
    fn the_prompt_never_reaches_debug() {
        let d = DelegateRequest {
            agent: "codex".into(),
            cwd: "/srv".into(),
            prompt: "the secret plan".into(),
            ..DelegateRequest::default()
        };
        let shown = format!("{:?}", ClientLine::Delegate(d));
        assert!(!shown.contains("secret plan"), "{shown}");
        assert!(shown.contains("prompt_bytes: 15"), "{shown}");
    }

    fn round_trip_hub(line: &str) -> HubLine {
        let decoded = HubLine::decode(line.as_bytes()).unwrap_or_else(|e| panic!("{line}: {e}"));
        assert_eq!(decoded.encode().trim_end(), line, "canonical");
        decoded
    }

    #[test]
    fn hub_task_lines_round_trip() {
        assert_eq!(
            round_trip_hub(r#"{"delegated":{"task":"task-1","state":"queued"}}"#),
            HubLine::Delegated(DelegatedReply {
                task: "task-1".into(),
                state: "queued".into(),
                ..DelegatedReply::default()
            })
        );
        // Issue 38: `auto`'s keys, and a later hub's unknown key read tolerantly.
        let placed = r#"{"delegated":{"task":"task-1","state":"queued","peer":"b","placement":{"chose":"b","reason":"chose b: 1 of 1 task slots free"}}}"#;
        let HubLine::Delegated(r) = round_trip_hub(placed) else {
            panic!("delegated")
        };
        assert_eq!(r.placement.map(|p| p.chose).as_deref(), Some("b"));
        let later: DelegatedReply =
            serde_json::from_str(r#"{"task":"t","state":"queued","turn":1}"#).unwrap();
        assert_eq!(later.task, "t");
        assert!(matches!(
            round_trip_hub(r#"{"cancel":{"task":"task-1","state":"cancelling"}}"#),
            HubLine::Cancel(TaskStateReply { state, .. }) if state == "cancelling"
        ));
        let full = r#"{"task_status":{"task":"task-1","agent":"codex","peer":"lab","state":"running","createdAt":"2026-12-01T10:00:00.000Z","startedAt":"2026-12-01T10:00:01.000Z","elapsedMs":1500,"progress":{"updates":4,"toolCalls":2,"lastTool":"Read","plan":{"total":3,"completed":1,"current":"edit"}}}}"#;
        let HubLine::TaskStatus(r) = round_trip_hub(full) else {
            panic!("a task_status")
        };
        assert_eq!(r.progress.unwrap().plan.unwrap().total, 3);
        assert_eq!(
            round_trip_hub(r#"{"task_status":{"task":"task-9","state":"unknown"}}"#),
            HubLine::TaskStatus(Box::new(TaskRecord::unknown("task-9")))
        );
        let HubLine::Tasks(list) = round_trip_hub(
            r#"{"tasks":{"tasks":[{"task":"task-1","agent":"codex","state":"queued","position":1,"createdAt":"2026-12-01T10:00:00.000Z"},{"task":"task-2","agent":"codex","state":"completed","createdAt":"2026-12-01T10:00:00.000Z","startedAt":"2026-12-01T10:00:00.000Z","endedAt":"2026-12-01T10:00:02.000Z","elapsedMs":2000,"stopReason":"end_turn"}]}}"#,
        ) else {
            panic!("a tasks")
        };
        assert_eq!(list.tasks.len(), 2);
        round_trip_hub(r#"{"tasks":{"tasks":[]}}"#);
        assert!(HubLine::decode(br#"{"delegated":{"task":"t"}}"#).is_err());
        assert!(HubLine::decode(br#"{"task_status":{"task":"t","state":"x","extra":1}}"#).is_err());
    }
}
