//! Folding `session/update` notifications into a bounded progress
//! snapshot and the agent's text for the turn (docs/acp.md "Progress").
//!
//! Owns: the text accumulator (text blocks of `agent_message_chunk` only, capped at
//! `max_text_bytes` with a `truncated` flag), tool-call counting by `toolCallId` and status,
//! the latest plan, `usage_update` (with `used: null` tolerated, §1.12) and cost, folded by
//! the turn's meter (`acp::usage::TurnMeter`) and shown in the snapshot. Unknown
//! `sessionUpdate` tags and unknown fields are ignored (§5.10). Every string kept from the
//! agent here is a bounded excerpt except the text itself, which is the task's result.

use super::sanitize::{floor_char_boundary, Secrets, EXCERPT_CHARS};
use super::usage::{ContextUsage, Cost, TurnMeter, UpdateFold};
use serde_json::Value;
use std::collections::HashMap;

/// Tool calls followed by id; beyond this, new ids are only counted (`untracked`).
pub const MAX_TRACKED_TOOL_CALLS: usize = 4096;
/// Plan entries kept (a plan update replaces the whole list, §1.6).
pub const MAX_PLAN_ENTRIES: usize = 64;
/// Longest toolCallId used as a key; longer ids are cut (a hostile agent's 1 MiB id must not
/// be stored 4096 times).
const MAX_TOOL_ID_BYTES: usize = 256;

/// Tool calls by their latest status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ToolCounts {
    /// Distinct tool calls seen (tracked ones).
    pub total: u64,
    pub pending: u64,
    pub in_progress: u64,
    pub completed: u64,
    pub failed: u64,
    /// Tool calls beyond `MAX_TRACKED_TOOL_CALLS`, counted but not followed.
    pub untracked: u64,
}

/// How permission requests were answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PermissionCounts {
    pub asked: u64,
    pub allowed: u64,
    pub rejected: u64,
    pub cancelled: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanEntry {
    pub content: String,
    pub priority: String,
    pub status: String,
}

/// Who the agent says it is (`initialize.agentInfo`), as excerpts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentInfo {
    pub name: String,
    pub version: String,
}

/// A snapshot of a running session, emitted coalesced as `Event::Progress`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Progress {
    /// Since `Session::new`.
    pub elapsed_ms: u64,
    pub agent: Option<AgentInfo>,
    /// `session/update` notifications folded (for this turn).
    pub updates: u64,
    pub message_chunks: u64,
    pub thought_chunks: u64,
    /// Bytes of agent text seen, including any beyond the cap.
    pub text_bytes: u64,
    pub tool_calls: ToolCounts,
    /// Title of the tool call touched last (an excerpt).
    pub last_tool: Option<String>,
    pub plan: Vec<PlanEntry>,
    pub context: Option<ContextUsage>,
    pub cost: Option<Cost>,
    pub permissions: PermissionCounts,
    /// Lines that were not JSON-RPC.
    pub malformed_lines: u32,
    /// Protocol anomalies tolerated (responses to ids we never sent, invalid updates, …).
    pub anomalies: u64,
    /// The session mode the agent runs in, as last known (an excerpt); None when it offers
    /// no modes (docs/acp.md "Session modes").
    pub mode: Option<String>,
    /// Agent notices kept out of the text (`informational_notice`).
    pub notices: u64,
}

/// The text of an agent message chunk that is an agent's notice rather than its answer, or
/// None. The Claude Code adapter (`@agentclientprotocol/claude-agent-acp`, 0.101 seen) sends
/// the SDK's informational messages (why a hook blocked, a warning) as `agent_message_chunk`
/// marked `_meta.claudeCode.kind: "informational"` to clients that did not advertise
/// `session.notices` (its `noticeOrTranscriptUpdate`); they are not the task's result.
pub fn informational_notice(update: &Value) -> Option<&str> {
    if update.get("sessionUpdate").and_then(Value::as_str) != Some("agent_message_chunk") {
        return None;
    }
    let kind = update
        .get("_meta")?
        .get("claudeCode")?
        .get("kind")?
        .as_str()?;
    if kind != "informational" {
        return None;
    }
    let content = update.get("content");
    Some(
        content
            .and_then(|c| c.get("text"))
            .and_then(Value::as_str)
            .unwrap_or(""),
    )
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ToolStatus {
    Pending,
    InProgress,
    Completed,
    Failed,
    /// An unknown status value (tolerated, counted in `total` only).
    Other,
}

impl ToolStatus {
    fn parse(s: &str) -> ToolStatus {
        match s {
            "pending" => ToolStatus::Pending,
            "in_progress" => ToolStatus::InProgress,
            "completed" => ToolStatus::Completed,
            "failed" => ToolStatus::Failed,
            _ => ToolStatus::Other,
        }
    }
}

/// Why an update was not folded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpdateError {
    NotAnObject,
    NoTag,
    NoToolCallId,
}

impl UpdateError {
    pub fn describe(self) -> &'static str {
        match self {
            UpdateError::NotAnObject => "update is not an object",
            UpdateError::NoTag => "update has no sessionUpdate tag",
            UpdateError::NoToolCallId => "tool update has no toolCallId",
        }
    }
}

/// The accumulator behind `Progress` and the outcome's text.
#[derive(Debug)]
pub struct Fold {
    pub progress: Progress,
    text: String,
    truncated: bool,
    cap: usize,
    /// Something other than message text came since the last chunk: the next chunk starts a
    /// new paragraph, so "I'll look." and "Done." around a tool call do not run together.
    break_pending: bool,
    last_message_id: Option<String>,
    tools: HashMap<String, ToolStatus>,
    /// The turn's usage figures, tagged with their source (issue 38 design §1).
    pub meter: TurnMeter,
}

impl Fold {
    pub fn new(max_text_bytes: usize) -> Fold {
        Fold {
            progress: Progress::default(),
            text: String::new(),
            truncated: false,
            cap: max_text_bytes,
            break_pending: false,
            last_message_id: None,
            tools: HashMap::new(),
            meter: TurnMeter::default(),
        }
    }

    pub fn text(&self) -> &str {
        &self.text
    }

    pub fn truncated(&self) -> bool {
        self.truncated
    }

    /// Takes the text out (for the outcome).
    pub fn take_text(&mut self) -> (String, bool) {
        (std::mem::take(&mut self.text), self.truncated)
    }

    /// Folds one `params.update`. Unknown tags are `Ok` (ignored by design).
    pub fn apply(&mut self, update: &Value, secrets: &Secrets) -> Result<(), UpdateError> {
        let Some(obj) = update.as_object() else {
            return Err(UpdateError::NotAnObject);
        };
        let Some(tag) = obj.get("sessionUpdate").and_then(Value::as_str) else {
            return Err(UpdateError::NoTag);
        };
        self.progress.updates += 1;
        match tag {
            "agent_message_chunk" if informational_notice(update).is_some() => {
                // Not the answer: counted, kept out of the text, and it separates the text
                // around it like a tool call does.
                self.progress.notices += 1;
                self.break_pending = true;
            }
            "agent_message_chunk" => {
                self.progress.message_chunks += 1;
                let id = obj.get("messageId").and_then(Value::as_str);
                if let Some(id) = id {
                    let cut = &id[..floor_char_boundary(id, MAX_TOOL_ID_BYTES)];
                    if self
                        .last_message_id
                        .as_deref()
                        .is_some_and(|last| last != cut)
                    {
                        self.break_pending = true;
                    }
                    self.last_message_id = Some(cut.to_owned());
                }
                let content = obj.get("content");
                if content.and_then(|c| c.get("type")).and_then(Value::as_str) == Some("text") {
                    if let Some(t) = content.and_then(|c| c.get("text")).and_then(Value::as_str) {
                        self.push_text(t);
                    }
                }
            }
            "agent_thought_chunk" => self.progress.thought_chunks += 1,
            "tool_call" | "tool_call_update" => {
                let Some(id) = obj.get("toolCallId").and_then(Value::as_str) else {
                    return Err(UpdateError::NoToolCallId);
                };
                self.break_pending = true;
                let status = obj
                    .get("status")
                    .and_then(Value::as_str)
                    .map(ToolStatus::parse);
                // A tool_call without status is pending (§1.6 default).
                let status = match (tag, status) {
                    ("tool_call", None) => Some(ToolStatus::Pending),
                    (_, s) => s,
                };
                self.track_tool(id, status);
                if let Some(title) = obj.get("title").and_then(Value::as_str) {
                    self.progress.last_tool = Some(secrets.token(title));
                }
            }
            "plan" => {
                self.break_pending = true;
                let entries = obj.get("entries").and_then(Value::as_array);
                self.progress.plan = entries
                    .into_iter()
                    .flatten()
                    .take(MAX_PLAN_ENTRIES)
                    .map(|e| {
                        let s = |k: &str| e.get(k).and_then(Value::as_str).unwrap_or("");
                        PlanEntry {
                            content: secrets.excerpt(s("content"), EXCERPT_CHARS),
                            priority: secrets.token(s("priority")),
                            status: secrets.token(s("status")),
                        }
                    })
                    .collect();
            }
            "usage_update" => {
                // The fold is the meter's (`acp::usage`, issue 38 design §1); the snapshot
                // shows what it holds.
                if self.meter.on_usage_update(obj) == UpdateFold::CostDropped {
                    self.progress.anomalies += 1;
                }
                self.progress.context = self.meter.context;
                self.progress.cost = self.meter.cost.as_ref().map(|c| c.value.clone());
            }
            // user_message_chunk, available_commands_update, current_mode_update,
            // config_option_update, session_info_update, notice, compaction_* and every tag
            // not yet invented: nothing to fold.
            _ => {}
        }
        Ok(())
    }

    fn push_text(&mut self, t: &str) {
        self.progress.text_bytes += t.len() as u64;
        if t.is_empty() || self.truncated {
            return;
        }
        if self.break_pending && !self.text.is_empty() {
            let sep = if self.text.ends_with("\n\n") {
                ""
            } else if self.text.ends_with('\n') {
                "\n"
            } else {
                "\n\n"
            };
            if !self.append_capped(sep) {
                return;
            }
        }
        self.break_pending = false;
        self.append_capped(t);
    }

    /// Appends what fits; false (and `truncated`) when something was dropped.
    fn append_capped(&mut self, s: &str) -> bool {
        let room = self.cap - self.text.len();
        if s.len() <= room {
            self.text.push_str(s);
            return true;
        }
        self.text.push_str(&s[..floor_char_boundary(s, room)]);
        self.truncated = true;
        false
    }

    fn track_tool(&mut self, id: &str, status: Option<ToolStatus>) {
        let key = &id[..floor_char_boundary(id, MAX_TOOL_ID_BYTES)];
        let tracked = self.tools.len();
        let counts = &mut self.progress.tool_calls;
        match self.tools.get_mut(key) {
            Some(slot) => {
                if let Some(new) = status {
                    bump(counts, *slot, -1);
                    bump(counts, new, 1);
                    *slot = new;
                }
            }
            None if tracked >= MAX_TRACKED_TOOL_CALLS => counts.untracked += 1,
            None => {
                // An update for a call we never saw announced still counts as a call.
                let s = status.unwrap_or(ToolStatus::Pending);
                self.tools.insert(key.to_owned(), s);
                counts.total += 1;
                bump(counts, s, 1);
            }
        }
    }
}

fn bump(c: &mut ToolCounts, s: ToolStatus, by: i64) {
    let slot = match s {
        ToolStatus::Pending => &mut c.pending,
        ToolStatus::InProgress => &mut c.in_progress,
        ToolStatus::Completed => &mut c.completed,
        ToolStatus::Failed => &mut c.failed,
        ToolStatus::Other => return,
    };
    *slot = slot.saturating_add_signed(by);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn chunk(t: &str) -> Value {
        json!({"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":t}})
    }

    fn fold(cap: usize, updates: &[Value]) -> Fold {
        let mut f = Fold::new(cap);
        for u in updates {
            f.apply(u, &Secrets::default()).unwrap();
        }
        f
    }

    #[test]
    fn text_accumulates_with_paragraphs_between_tool_calls() {
        let f = fold(
            1000,
            &[
                chunk("I'll help "),
                chunk("with that."),
                json!({"sessionUpdate":"tool_call","toolCallId":"c1","title":"Read","status":"pending"}),
                json!({"sessionUpdate":"agent_thought_chunk","content":{"type":"text","text":"hmm"}}),
                chunk("Done."),
                json!({"sessionUpdate":"agent_message_chunk","content":{"type":"image","data":"AAAA","mimeType":"image/png"}}),
            ],
        );
        assert_eq!(f.text(), "I'll help with that.\n\nDone.");
        assert_eq!(f.progress.message_chunks, 4);
        assert_eq!(f.progress.thought_chunks, 1);
        assert_eq!(f.progress.updates, 6);
        assert!(!f.truncated());
    }

    #[test]
    fn informational_notices_stay_out_of_the_text() {
        // Recorded from @agentclientprotocol/claude-agent-acp 0.101.0 (acp-agent.js, the SDK's
        // "informational" system message rendered for a client without session.notices).
        let notice: Value = serde_json::from_str(
            r#"{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"**Warning:** Stop hook blocked continuation"},"_meta":{"claudeCode":{"kind":"informational","level":"warning"}}}"#,
        )
        .unwrap();
        assert_eq!(
            informational_notice(&notice),
            Some("**Warning:** Stop hook blocked continuation")
        );
        let f = fold(1000, &[chunk("Before."), notice.clone(), chunk("After.")]);
        assert_eq!(f.text(), "Before.\n\nAfter.");
        assert_eq!(f.progress.notices, 1);
        assert_eq!(f.progress.message_chunks, 2);
        // Other _meta on a chunk (tool names, message ids) is not a notice.
        let mut plain = chunk("kept");
        plain["_meta"] = json!({"claudeCode": {"kind": "something_else"}});
        assert_eq!(informational_notice(&plain), None);
        assert_eq!(fold(100, &[plain]).text(), "kept");
        let mut thought = notice;
        thought["sessionUpdate"] = json!("agent_thought_chunk");
        assert_eq!(informational_notice(&thought), None);
    }

    #[test]
    fn a_new_message_id_starts_a_paragraph() {
        let mut a = chunk("one");
        a["messageId"] = json!("m1");
        let mut b = chunk(" still one");
        b["messageId"] = json!("m1");
        let mut c = chunk("two");
        c["messageId"] = json!("m2");
        let f = fold(1000, &[a, b, c]);
        assert_eq!(f.text(), "one still one\n\ntwo");
    }

    #[test]
    fn text_is_capped_on_a_char_boundary() {
        let f = fold(10, &[chunk("abcdefgh"), chunk("ééé")]);
        assert_eq!(f.text(), "abcdefghé");
        assert!(f.truncated());
        assert_eq!(f.progress.text_bytes, 14);
        let f = fold(0, &[chunk("x")]);
        assert_eq!((f.text(), f.truncated()), ("", true));
        let f = fold(5, &[chunk("abcde")]);
        assert_eq!((f.text(), f.truncated()), ("abcde", false));
    }

    #[test]
    fn tool_calls_are_counted_by_id_and_status() {
        let f = fold(
            100,
            &[
                json!({"sessionUpdate":"tool_call","toolCallId":"c1","title":"Reading project files","status":"pending"}),
                json!({"sessionUpdate":"tool_call_update","toolCallId":"c1","status":"completed"}),
                json!({"sessionUpdate":"tool_call","toolCallId":"c2","title":"Edit"}),
                json!({"sessionUpdate":"tool_call_update","toolCallId":"c2","status":"in_progress"}),
                json!({"sessionUpdate":"tool_call_update","toolCallId":"c2","rawInput":{}}),
                json!({"sessionUpdate":"tool_call_update","toolCallId":"c3","status":"failed"}),
                json!({"sessionUpdate":"tool_call_update","toolCallId":"c1","status":"weird_new_status"}),
            ],
        );
        assert_eq!(
            f.progress.tool_calls,
            ToolCounts {
                total: 3,
                pending: 0,
                in_progress: 1,
                completed: 0,
                failed: 1,
                untracked: 0
            }
        );
        assert_eq!(f.progress.last_tool.as_deref(), Some("Edit"));
    }

    #[test]
    fn tracked_tool_calls_are_bounded() {
        let mut f = Fold::new(10);
        for i in 0..MAX_TRACKED_TOOL_CALLS + 5 {
            let id = format!("{i}{}", "x".repeat(1000));
            f.apply(
                &json!({"sessionUpdate":"tool_call","toolCallId":id}),
                &Secrets::default(),
            )
            .unwrap();
        }
        assert_eq!(f.progress.tool_calls.total, MAX_TRACKED_TOOL_CALLS as u64);
        assert_eq!(f.progress.tool_calls.untracked, 5);
        assert!(f.tools.keys().all(|k| k.len() <= MAX_TOOL_ID_BYTES));
    }

    #[test]
    fn plan_usage_and_cost() {
        let entries: Vec<Value> = (0..100)
            .map(|i| json!({"content":format!("step {i}\nmore"),"priority":"high","status":"pending","_meta":{}}))
            .collect();
        let f = fold(
            100,
            &[
                json!({"sessionUpdate":"plan","entries":[{"content":"old","priority":"low","status":"pending"}]}),
                json!({"sessionUpdate":"plan","entries":entries}),
                json!({"sessionUpdate":"usage_update","used":null,"size":200000,"cost":{"amount":0.00021,"currency":"USD"}}),
            ],
        );
        assert_eq!(f.progress.plan.len(), MAX_PLAN_ENTRIES);
        assert_eq!(f.progress.plan[0].content, "step 0?more");
        assert_eq!(
            f.progress.context,
            Some(ContextUsage {
                used: None,
                size: Some(200000)
            })
        );
        assert_eq!(
            f.progress.cost,
            Some(Cost {
                amount: 0.00021,
                currency: "USD".into()
            })
        );
        let f = fold(
            100,
            &[json!({"sessionUpdate":"usage_update","used":12,"size":"big","cost":{"amount":"x"}})],
        );
        assert_eq!(
            f.progress.context,
            Some(ContextUsage {
                used: Some(12),
                size: None
            })
        );
        assert_eq!(f.progress.cost, None);
    }

    #[test]
    fn unknown_tags_are_ignored_and_invalid_updates_reported() {
        let f = fold(
            100,
            &[
                json!({"sessionUpdate":"available_commands_update","availableCommands":[]}),
                json!({"sessionUpdate":"compaction_summary_chunk","whatever":1}),
                json!({"sessionUpdate":"brand_new_thing_2027"}),
            ],
        );
        assert_eq!(f.progress.updates, 3);
        assert_eq!(f.text(), "");
        let mut f = Fold::new(10);
        let s = Secrets::default();
        assert_eq!(f.apply(&json!(3), &s), Err(UpdateError::NotAnObject));
        assert_eq!(f.apply(&json!({"x":1}), &s), Err(UpdateError::NoTag));
        assert_eq!(
            f.apply(&json!({"sessionUpdate":"tool_call"}), &s),
            Err(UpdateError::NoToolCallId)
        );
    }
}
