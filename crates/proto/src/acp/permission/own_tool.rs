//! Recognising a request for a tool of the hub's own MCP server (issue 37 design §3;
//! docs/acp.md "The hub's own tools"), which is answered allow under every policy: the task
//! talks to its delegator through that server, and asking a person whether it may is a
//! question with one answer.
//!
//! The runner attaches the server under a name no one can write in advance,
//! `agent-hub-` + 12 hex of SHA-256(task id) (`hub_server_name`; the task id is random). A
//! request is recognised ONLY by the agent's machine identity of the tool, never by its
//! `title`, which the model writes (a shell command titled like the hub's tool gets exactly
//! that title: ../notes capture37-facts §1.3, §2.3, §3.3). The forms, as captured:
//! - Claude Code through claude-agent-acp 0.101: `toolCall._meta.claudeCode.toolName ==
//!   "mcp__<server>__<tool>"`, and its `mcpServer`, when present, `{name: server, source:
//!   "dynamic"}` (a server from the user's config says `"user"`); `toolCall.name`, when
//!   present, the same name.
//! - claude-agent-acp 0.23 sends no `_meta` in the request: the name is in the
//!   `tool_call`/`tool_call_update` updates before it, under the same `toolCallId`, which
//!   `ToolNames` remembers (an id seen with two names is nobody's).
//! - Gemini CLI 0.61: `toolCallId` begins `mcp_<server>_<tool>__` (its registered function
//!   name, which only a tool of that server has), with `kind: "other"` and the MCP-only
//!   option ids `proceed_always_server`/`proceed_always_tool`. This is Gemini's internal id
//!   form, not an ACP contract: the fixture in the tests pins it; re-check on each release.
//!
//! `<tool>` must be one of `HUB_TOOL_NAMES`. Refuses every other form: an agent that
//! identifies its tools differently is asked about them like any other tool.

use serde_json::Value;
use sha2::{Digest, Sha256};
use std::collections::VecDeque;

/// Every tool the hub's MCP server (`agent-hub mcp`) may offer a task: the client's
/// `mcp::tools::TOOL_NAMES`, the verb `task_answer`, and `permission_prompt` (headless
/// Claude Code's permission tool, design §6). tests/integration/acp_requests.rs checks that the
/// client's list is contained in this one.
pub const HUB_TOOL_NAMES: &[&str] = &[
    "send",
    "await",
    "status",
    "who",
    "whoami",
    "delegate",
    "task_status",
    "tasks",
    "cancel",
    "task_answer",
    "task_prompt",
    "task_close",
    "permission_prompt",
];

/// Hex digits of SHA-256(task id) in the server's name: 48 bits, unguessable for a task id
/// drawn at random, and short enough that Claude's tool names stay under 64 bytes
/// (`mcp__agent-hub-xxxxxxxxxxxx__permission_prompt` is 46).
const NAME_HEX: usize = 12;

/// The name the hub's MCP server is attached under for `task`: `agent-hub-` + the first 12
/// hex digits of SHA-256(task id).
pub fn hub_server_name(task: &str) -> String {
    let digest = Sha256::digest(task.as_bytes());
    let hex: String = digest
        .iter()
        .take(NAME_HEX / 2)
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("agent-hub-{hex}")
}

/// The hub tool `params` (a `session/request_permission`'s) asks for, if it is one of
/// `server`'s, recognised as the module doc says. `remembered` is the name `ToolNames` holds
/// for the request's `toolCallId`, if any.
pub fn own_tool(server: &str, params: &Value, remembered: Option<&str>) -> Option<&'static str> {
    let tool_call = params.get("toolCall")?;
    let meta_name = tool_call
        .pointer("/_meta/claudeCode/toolName")
        .and_then(Value::as_str);
    if let Some(name) = meta_name {
        if let Some(ms) = tool_call.pointer("/_meta/claudeCode/mcpServer") {
            let agrees = ms.get("name").and_then(Value::as_str) == Some(server)
                && ms.get("source").and_then(Value::as_str) == Some("dynamic");
            if !agrees {
                return None;
            }
        }
        if let Some(acp_name) = tool_call.get("name") {
            if acp_name.as_str() != Some(name) {
                return None;
            }
        }
        return claude_tool(server, name);
    }
    if tool_call.get("_meta").is_some() || tool_call.get("name").is_some() {
        // An agent that names its tools in the request and did not name this one ours.
        return None;
    }
    if let Some(name) = remembered {
        return claude_tool(server, name);
    }
    gemini_tool(server, tool_call, params.get("options"))
}

/// `mcp__<server>__<tool>` for one of the hub's tools.
fn claude_tool(server: &str, name: &str) -> Option<&'static str> {
    let tool = name
        .strip_prefix("mcp__")?
        .strip_prefix(server)?
        .strip_prefix("__")?;
    HUB_TOOL_NAMES.iter().copied().find(|t| *t == tool)
}

/// Gemini CLI's `toolCallId` `mcp_<server>_<tool>__…`, kind `other`, an MCP option set.
fn gemini_tool(server: &str, tool_call: &Value, options: Option<&Value>) -> Option<&'static str> {
    if tool_call.get("kind").and_then(Value::as_str) != Some("other") {
        return None;
    }
    let mcp_options = options
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|o| o.get("optionId").and_then(Value::as_str))
        .any(|id| id == "proceed_always_server" || id == "proceed_always_tool");
    if !mcp_options {
        return None;
    }
    let id = tool_call.get("toolCallId").and_then(Value::as_str)?;
    let rest = id
        .strip_prefix("mcp_")?
        .strip_prefix(server)?
        .strip_prefix('_')?;
    HUB_TOOL_NAMES.iter().copied().find(|t| {
        rest.strip_prefix(*t)
            .is_some_and(|after| after.starts_with("__"))
    })
}

/// Most tool call ids `ToolNames` remembers; older ones are forgotten first (a request
/// follows its tool call's updates closely, ../notes capture §1.1).
pub const REMEMBERED_TOOL_CALLS: usize = 256;
/// Longest tool call id or tool name remembered; longer ones are not (no hub tool's name or
/// a real id is near it).
const MAX_REMEMBERED_BYTES: usize = 256;

/// The tool names claude-agent-acp 0.23 gives in `session/update`s
/// (`_meta.claudeCode.toolName`), by `toolCallId`, for a request that carries none. Bounded;
/// an id seen with two different names is remembered as nobody's.
#[derive(Debug, Default)]
pub struct ToolNames {
    entries: VecDeque<(String, Option<String>)>,
}

impl ToolNames {
    /// Notes the name a `tool_call`/`tool_call_update` update gives its tool call, if any.
    pub fn observe(&mut self, update: &Value) {
        let kind = update.get("sessionUpdate").and_then(Value::as_str);
        if !matches!(kind, Some("tool_call" | "tool_call_update")) {
            return;
        }
        let (Some(id), Some(name)) = (
            update.get("toolCallId").and_then(Value::as_str),
            update
                .pointer("/_meta/claudeCode/toolName")
                .and_then(Value::as_str),
        ) else {
            return;
        };
        if id.len() > MAX_REMEMBERED_BYTES || name.len() > MAX_REMEMBERED_BYTES {
            return;
        }
        if let Some((_, seen)) = self.entries.iter_mut().find(|(i, _)| i == id) {
            if seen.as_deref() != Some(name) {
                *seen = None;
            }
            return;
        }
        if self.entries.len() == REMEMBERED_TOOL_CALLS {
            self.entries.pop_front();
        }
        self.entries
            .push_back((id.to_owned(), Some(name.to_owned())));
    }

    /// The one name seen for `tool_call_id`.
    pub fn get(&self, tool_call_id: &str) -> Option<&str> {
        self.entries
            .iter()
            .find(|(i, _)| i == tool_call_id)
            .and_then(|(_, n)| n.as_deref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const SERVER: &str = "agent-hub-3f2a9c1b7d4e";

    /// The requests of ../notes capture37-facts.md, byte for byte where it matters (the
    /// fixture the module doc pins the agents' forms to).
    fn claude_current_mcp() -> Value {
        json!({"toolCall":{"toolCallId":"toolu_mock_3","name":"mcp__agent-hub-3f2a9c1b7d4e__echo","status":"pending","rawInput":{"text":"ping-from-mock"},"title":"mcp__agent-hub-3f2a9c1b7d4e__echo","kind":"other","content":[],"_meta":{"claudeCode":{"toolName":"mcp__agent-hub-3f2a9c1b7d4e__echo","mcpServer":{"name":"agent-hub-3f2a9c1b7d4e","source":"dynamic"}}}},"options":[{"optionId":"allow-once","name":"Yes","kind":"allow_once"},{"optionId":"allow-with-updates","name":"Yes, and don't ask again for Echo commands","kind":"allow_always"},{"optionId":"reject","name":"No","kind":"reject_once"}],"sessionId":"19b53181-f38b-4799-a0da-57470a6080e3"})
    }

    fn claude_pinned_mcp() -> Value {
        json!({"options":[{"kind":"allow_always","name":"Always Allow","optionId":"allow_always"},{"kind":"allow_once","name":"Allow","optionId":"allow"},{"kind":"reject_once","name":"Reject","optionId":"reject"}],"sessionId":"2f511259-c3df-46f0-af57-503f307d52cb","toolCall":{"toolCallId":"toolu_mock_1","rawInput":{"text":"ping-from-mock"},"title":"mcp__agent-hub-3f2a9c1b7d4e__echo","kind":"other","content":[]}})
    }

    fn gemini_mcp() -> Value {
        json!({"sessionId":"4b59ea13-3a3c-4837-af99-a13844ce5bf8","options":[{"optionId":"proceed_always_server","name":"Allow all server tools for this session","kind":"allow_always"},{"optionId":"proceed_always_tool","name":"Allow tool for this session","kind":"allow_always"},{"optionId":"proceed_once","name":"Allow","kind":"allow_once"},{"optionId":"cancel","name":"Reject","kind":"reject_once"}],"toolCall":{"toolCallId":"mcp_agent-hub-3f2a9c1b7d4e_echo__mcp_agent-hub-3f2a9c1b7d4e_echo_1796677444299_0","status":"pending","title":"echo (agent-hub-3f2a9c1b7d4e MCP Server)","content":[{"type":"content","content":{"type":"text","text":"{\"text\":\"ping-from-mock\"}"}}],"locations":[],"kind":"other"}})
    }

    /// The captures used the MCP echo server's tool `echo`; the hub's tools are named
    /// otherwise, so each fixture is read with `echo` replaced by a hub tool.
    fn as_tool(v: &Value, tool: &str) -> Value {
        serde_json::from_str(&v.to_string().replace("_echo", &format!("_{tool}"))).unwrap()
    }

    #[test]
    fn the_server_name_is_the_task_ids_digest() {
        let n = hub_server_name("task-6d1f0c523c1e4b7a9f430a4a3b7c1e25");
        assert_eq!(n.len(), "agent-hub-".len() + 12);
        assert!(n.starts_with("agent-hub-"));
        assert!(n[10..]
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
        assert_eq!(n, hub_server_name("task-6d1f0c523c1e4b7a9f430a4a3b7c1e25"));
        assert_ne!(n, hub_server_name("task-6d1f0c523c1e4b7a9f430a4a3b7c1e26"));
        // SHA-256("abc") begins ba7816bf8f01.
        assert_eq!(hub_server_name("abc"), "agent-hub-ba7816bf8f01");
        let longest = format!("mcp__{n}__permission_prompt");
        assert!(longest.len() < 64, "{longest}");
    }

    #[test]
    fn each_captured_form_is_recognised() {
        for tool in [
            "send",
            "task_answer",
            "tasks",
            "task_status",
            "permission_prompt",
        ] {
            assert_eq!(
                own_tool(SERVER, &as_tool(&claude_current_mcp(), tool), None),
                Some(tool)
            );
            assert_eq!(
                own_tool(SERVER, &as_tool(&gemini_mcp(), tool), None),
                Some(tool)
            );
            let pinned = as_tool(&claude_pinned_mcp(), tool);
            let name = format!("mcp__{SERVER}__{tool}");
            assert_eq!(own_tool(SERVER, &pinned, Some(&name)), Some(tool));
            assert_eq!(
                own_tool(SERVER, &pinned, None),
                None,
                "pinned: nothing to go by"
            );
        }
        // `echo` itself is no hub tool.
        assert_eq!(own_tool(SERVER, &claude_current_mcp(), None), None);
        assert_eq!(own_tool(SERVER, &gemini_mcp(), None), None);
    }

    #[test]
    fn a_title_never_makes_a_tool_ours() {
        // ../notes capture §1.3, §2.3, §3.3: shell commands titled like the hub's tool.
        let title = format!("mcp__{SERVER}__send");
        let forged = [
            json!({"toolCall":{"toolCallId":"toolu_mock_1","rawInput":{"command":title},"title":title,"kind":"execute","content":[]},"options":[{"kind":"allow_once","optionId":"allow"}]}),
            json!({"toolCall":{"toolCallId":"toolu_mock_2","name":"Bash","status":"pending","rawInput":{"command":title},"title":title,"kind":"execute","content":[]},"options":[{"optionId":"allow-once","kind":"allow_once"}]}),
            json!({"options":[{"optionId":"proceed_always","kind":"allow_always"},{"optionId":"proceed_once","kind":"allow_once"}],"toolCall":{"toolCallId":"run_shell_command__run_shell_command_1796677874672_0","title":format!("send ({SERVER} MCP Server)"),"kind":"execute"}}),
        ];
        for f in &forged {
            assert_eq!(own_tool(SERVER, f, None), None, "{f}");
        }
        // The pinned adapter's earlier update said Bash: the memory says so too.
        assert_eq!(own_tool(SERVER, &forged[0], Some("Bash")), None);
    }

    #[test]
    fn near_misses_are_not_ours() {
        let name = |n: &str| json!({"toolCall":{"toolCallId":"t","kind":"other","_meta":{"claudeCode":{"toolName":n}}}});
        for n in [
            "mcp__agent-hub-3f2a9c1b7d4f__send".to_owned(), // another task's server
            format!("mcp__{SERVER}__sendx"),
            format!("mcp__{SERVER}__"),
            format!("mcp__{SERVER}_send"),
            format!("mcp_{SERVER}__send"),
            format!("MCP__{SERVER}__send"),
            format!("mcp__{SERVER}__send "),
            "mcp__agent-hub__send".to_owned(),
            format!("mcp__{SERVER}__echo"),
        ] {
            assert_eq!(own_tool(SERVER, &name(&n), None), None, "{n}");
        }
        assert_eq!(
            own_tool(SERVER, &name(&format!("mcp__{SERVER}__send")), None),
            Some("send")
        );
        // A user-configured server, or one named otherwise, in the adapter's own words.
        let mut user = as_tool(&claude_current_mcp(), "send");
        user["toolCall"]["_meta"]["claudeCode"]["mcpServer"]["source"] = json!("user");
        assert_eq!(own_tool(SERVER, &user, None), None);
        let mut other = as_tool(&claude_current_mcp(), "send");
        other["toolCall"]["_meta"]["claudeCode"]["mcpServer"]["name"] = json!("agent-hub");
        assert_eq!(own_tool(SERVER, &other, None), None);
        let mut renamed = as_tool(&claude_current_mcp(), "send");
        renamed["toolCall"]["name"] = json!("Bash");
        assert_eq!(own_tool(SERVER, &renamed, None), None);
        // A request that names its tool otherwise is not rescued by an earlier update.
        let bash = json!({"toolCall":{"toolCallId":"t","name":"Bash","kind":"other"}});
        assert_eq!(
            own_tool(SERVER, &bash, Some(&format!("mcp__{SERVER}__send"))),
            None
        );
        // Gemini's form without its other marks.
        let g = as_tool(&gemini_mcp(), "send");
        let mut kind = g.clone();
        kind["toolCall"]["kind"] = json!("execute");
        assert_eq!(own_tool(SERVER, &kind, None), None);
        let mut opts = g.clone();
        opts["options"] = json!([{"optionId":"proceed_once","kind":"allow_once"}]);
        assert_eq!(own_tool(SERVER, &opts, None), None);
        let mut id = g.clone();
        id["toolCall"]["toolCallId"] = json!(format!("mcp_{SERVER}_sendx__1"));
        assert_eq!(own_tool(SERVER, &id, None), None);
        id["toolCall"]["toolCallId"] = json!(format!("run_shell_command__mcp_{SERVER}_send__1"));
        assert_eq!(own_tool(SERVER, &id, None), None);
        for junk in [
            json!(null),
            json!({}),
            json!({"toolCall":7}),
            json!({"toolCall":{"_meta":{"claudeCode":{"toolName":7}}}}),
        ] {
            assert_eq!(own_tool(SERVER, &junk, None), None, "{junk}");
        }
    }

    #[test]
    fn tool_names_are_remembered_bounded_and_conflicts_forget() {
        let mut m = ToolNames::default();
        let up = |kind: &str, id: &str, name: &str| json!({"sessionUpdate":kind,"toolCallId":id,"_meta":{"claudeCode":{"toolName":name}}});
        m.observe(&up("tool_call", "a", "mcp__s__send"));
        m.observe(&up("tool_call_update", "a", "mcp__s__send"));
        assert_eq!(m.get("a"), Some("mcp__s__send"));
        m.observe(&up("tool_call_update", "a", "Bash"));
        assert_eq!(m.get("a"), None, "two names: nobody's");
        m.observe(&up("tool_call", "a", "mcp__s__send"));
        assert_eq!(m.get("a"), None, "stays nobody's");
        m.observe(&up("agent_message_chunk", "b", "x"));
        assert_eq!(m.get("b"), None);
        m.observe(&up("tool_call", &"i".repeat(MAX_REMEMBERED_BYTES + 1), "x"));
        assert_eq!(m.entries.len(), 1);
        for i in 0..REMEMBERED_TOOL_CALLS + 10 {
            m.observe(&up("tool_call", &format!("c{i}"), "n"));
        }
        assert_eq!(m.entries.len(), REMEMBERED_TOOL_CALLS);
        assert_eq!(m.get("c0"), None);
        assert_eq!(m.get(&format!("c{}", REMEMBERED_TOOL_CALLS + 9)), Some("n"));
    }
}
