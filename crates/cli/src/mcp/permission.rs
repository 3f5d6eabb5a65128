//! The `permission_prompt` tool (issue 37 design §6; docs/mcp.md "Permission prompts",
//! docs/delegation.md "Approvals"): what a headless Claude Code run with
//! `--permission-prompt-tool mcp__<server>__permission_prompt` calls before each tool use
//! that needs permission, offered by `agent-hub mcp` only when it runs as a task identity
//! (`--as task-…`), never to a roster agent.
//!
//! Claude Code calls it with exactly `{tool_name, input, tool_use_id}` (captured from 2.1.197
//! and 2.1.337, /work/notes/capture37-facts.md §7) and takes as its result one text item,
//! `isError: false`, holding `{"behavior":"allow","updatedInput":<input>}` (2.1.197 refuses an
//! allow without `updatedInput`, and `updatedInput` replaces the input, so it is always the
//! input exactly as received) or `{"behavior":"deny","message":…}` (the message reaches the
//! model verbatim).
//!
//! Owns: the tool's `tools/list` entry, its arguments, the decision taken here (a tool of the
//! hub's own server, `mcp__<this server's task-unique name>__<one of TOOL_NAMES>`, is allowed
//! at once: Claude asks this tool about those too, and the task's mail to its delegator is
//! what delegation is for; design §3), the `task_permission` line for everything else, and
//! Claude's JSON for every outcome. Anything that goes wrong (bad arguments, a hub that
//! refuses or cannot be reached) is a deny saying why, never an allow and never a tool error
//! (which Claude would report as a failed tool rather than a refusal). Refuses IO (`serve`
//! carries the line to the hub).

use super::tools::{ToolArgError, TOOL_NAMES};
use agent_hub_proto::wire::approval::{Behavior, TaskPermissionReply, TaskPermissionRequest};
use serde_json::{json, Map, Value};

/// The tool's name, as `--permission-prompt-tool mcp__<server>__permission_prompt` names it.
pub const TOOL: &str = "permission_prompt";

/// One call's arguments: the tool Claude Code wants to run, its input, its tool-use id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PromptCall {
    pub tool_name: String,
    /// Kept whole: an allow sends it back as `updatedInput`.
    pub input: Value,
    pub tool_use_id: String,
}

/// What the session makes of a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decided {
    /// Answered here (one of the hub's own tools, or arguments that cannot be asked about):
    /// the tool's result text.
    Here(String),
    /// Ask the hub; the reply becomes the result (`result`).
    Ask(PromptCall, TaskPermissionRequest),
}

/// The `tools/list` entry.
pub fn entry() -> Value {
    json!({
        "name": TOOL,
        "title": "Ask the delegator for permission",
        "description": "Claude Code's permission prompt tool for a task the hub runs headless: asked before each tool use that needs permission, it puts the question to whoever delegated the task and returns their decision as {\"behavior\":\"allow\",\"updatedInput\":…} or {\"behavior\":\"deny\",\"message\":…}. Not for the model to call.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "tool_name": {"type": "string", "description": "The tool that wants to run."},
                "input": {"type": "object", "description": "Its input."},
                "tool_use_id": {"type": "string", "description": "The tool use asked about."}
            },
            "required": ["tool_name", "input"]
        },
        "annotations": {"readOnlyHint": true, "destructiveHint": false, "idempotentHint": false, "openWorldHint": true}
    })
}

/// The call's arguments (absent or null meaning `{}`).
pub fn parse(args: Option<&Value>) -> Result<PromptCall, ToolArgError> {
    let empty = Map::new();
    let args = match args {
        None | Some(Value::Null) => &empty,
        Some(Value::Object(m)) => m,
        Some(_) => return Err(ToolArgError::BadArgs("arguments must be an object".into())),
    };
    let text = |key: &str| match args.get(key) {
        Some(Value::String(s)) => Ok(s.clone()),
        Some(_) => Err(ToolArgError::BadArgs(format!("{key} must be a string"))),
        None => Err(ToolArgError::BadArgs(format!("{key} is required"))),
    };
    let tool_name = text("tool_name")?;
    let tool_use_id = text("tool_use_id")?;
    let input = match args.get("input") {
        Some(v @ Value::Object(_)) => v.clone(),
        Some(_) => return Err(ToolArgError::BadArgs("input must be an object".into())),
        None => return Err(ToolArgError::BadArgs("input is required".into())),
    };
    Ok(PromptCall {
        tool_name,
        input,
        tool_use_id,
    })
}

/// Decides a call of the tool served as `server` (the hub's task-unique server name,
/// `acp::permission::hub_server_name`): a tool of that server is allowed here, arguments that
/// cannot be carried are denied here, anything else is asked of the hub.
pub fn decide(server: &str, args: Option<&Value>) -> Decided {
    let call = match parse(args) {
        Ok(c) => c,
        Err(e) => return Decided::Here(deny(&format!("{TOOL}: {e}"))),
    };
    if own_tool(server, &call.tool_name) {
        return Decided::Here(allow(&call.input));
    }
    let req = TaskPermissionRequest::new(&call.tool_name, &call.tool_use_id, &call.input);
    if let Err(e) = req.check() {
        return Decided::Here(deny(&format!("{TOOL}: invalid arguments: {e}")));
    }
    Decided::Ask(call, req)
}

/// Whether `tool_name` is Claude Code's name of one of the tools this server offers,
/// `mcp__<server>__<tool>`: compared exactly, as Claude Code's registry writes it (the name
/// of the tool being run, not model text, design §3). `permission_prompt` itself is never
/// asked about.
pub fn own_tool(server: &str, tool_name: &str) -> bool {
    let Some(tool) = tool_name
        .strip_prefix("mcp__")
        .and_then(|rest| rest.strip_prefix(server))
        .and_then(|rest| rest.strip_prefix("__"))
    else {
        return false;
    };
    TOOL_NAMES.contains(&tool)
}

/// The hub's reply as Claude's result text.
pub fn result(call: &PromptCall, reply: &TaskPermissionReply) -> String {
    match reply.behavior {
        Behavior::Allow => allow(&call.input),
        Behavior::Deny => deny(reply.message.as_deref().unwrap_or("denied")),
    }
}

/// The result when the hub could not be asked: a deny that says so.
pub fn unasked(why: &str) -> String {
    deny(&format!(
        "denied: agent-hub could not ask the task's delegator: {why}"
    ))
}

/// `{"behavior":"allow","updatedInput":<input>}`, the input as received.
fn allow(input: &Value) -> String {
    json!({"behavior": "allow", "updatedInput": input}).to_string()
}

fn deny(message: &str) -> String {
    json!({"behavior": "deny", "message": message}).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    const SERVER: &str = "agent-hub-3f2a9c1b7d4e";

    fn args(tool: &str, input: Value) -> Value {
        json!({"tool_name": tool, "input": input, "tool_use_id": "toolu_mock_1"})
    }

    fn text(d: Decided) -> Value {
        match d {
            Decided::Here(t) => serde_json::from_str(&t).unwrap(),
            other => panic!("expected an answer here, got {other:?}"),
        }
    }

    /// The capture's two calls (§7): Bash is asked of the hub as `task_permission`, and the
    /// hub's own `echo`-like tool under this server's name is allowed here with its input.
    #[test]
    fn own_tools_are_allowed_here_and_the_rest_is_asked() {
        let input = json!({"command": "echo capture37 > proof-allow.txt"});
        match decide(SERVER, Some(&args("Bash", input.clone()))) {
            Decided::Ask(call, req) => {
                assert_eq!(call.input, input);
                assert_eq!(req.tool_name, "Bash");
                assert_eq!(req.tool_use_id, "toolu_mock_1");
                assert_eq!(req.input(), input.to_string());
            }
            other => panic!("{other:?}"),
        }
        for tool in TOOL_NAMES {
            let own = format!("mcp__{SERVER}__{tool}");
            let got = text(decide(SERVER, Some(&args(&own, json!({"to": "boss"})))));
            assert_eq!(
                got,
                json!({"behavior": "allow", "updatedInput": {"to": "boss"}})
            );
        }
    }

    /// Names a model or another server could make look alike are asked, never allowed here:
    /// another server's tool of the same name, the plain server name, a prefix of it, a tool
    /// the hub does not offer, the tool itself, `mcp_` Gemini-style, a trailing suffix.
    #[test]
    fn look_alikes_are_asked_of_the_hub() {
        for name in [
            "mcp__agent-hub__send".to_owned(),
            format!("mcp__{SERVER}x__send"),
            format!("mcp__{}__send", &SERVER[..SERVER.len() - 1]),
            format!("mcp__{SERVER}__rm"),
            format!("mcp__{SERVER}__{TOOL}"),
            format!("mcp_{SERVER}_send"),
            format!("mcp__{SERVER}__send "),
            format!("mcp__{SERVER}__send__x"),
            format!("MCP__{SERVER}__send"),
            "Bash".to_owned(),
        ] {
            assert!(
                matches!(
                    decide(SERVER, Some(&args(&name, json!({})))),
                    Decided::Ask(..)
                ),
                "{name}"
            );
        }
    }

    /// Arguments that cannot be asked about are denied here, saying why; never allowed.
    #[test]
    fn bad_arguments_are_denied_here() {
        let cases = [
            (json!({"input": {}, "tool_use_id": "u"}), "permission_prompt: invalid arguments: tool_name is required"),
            (json!({"tool_name": "Bash", "input": {}}), "permission_prompt: invalid arguments: tool_use_id is required"),
            (json!({"tool_name": "Bash", "input": [1], "tool_use_id": "u"}), "permission_prompt: invalid arguments: input must be an object"),
            (json!({"tool_name": "Bash", "tool_use_id": "u"}), "permission_prompt: invalid arguments: input is required"),
            (json!({"tool_name": 5, "input": {}, "tool_use_id": "u"}), "permission_prompt: invalid arguments: tool_name must be a string"),
            (json!({"tool_name": "Bash\u{1b}[2J", "input": {}, "tool_use_id": "u"}), "permission_prompt: invalid arguments: toolName must not contain control or invisible formatting characters"),
            (json!({"tool_name": "Bash", "input": {}, "tool_use_id": ""}), "permission_prompt: invalid arguments: toolUseId must not be empty"),
            (json!([1]), "permission_prompt: invalid arguments: arguments must be an object"),
        ];
        for (a, want) in cases {
            let got = text(decide(SERVER, Some(&a)));
            assert_eq!(got, json!({"behavior": "deny", "message": want}), "{a}");
        }
        let got = text(decide(SERVER, None));
        assert_eq!(got["behavior"], "deny");
    }

    /// The hub's reply as Claude's JSON: an allow always carries the input as received (never
    /// the hub's), a deny the hub's words; a hub that could not be asked denies.
    #[test]
    fn replies_become_claudes_json() {
        let call = PromptCall {
            tool_name: "Bash".into(),
            input: json!({"command": "make", "timeout": 1.5}),
            tool_use_id: "u".into(),
        };
        let allow: Value =
            serde_json::from_str(&result(&call, &TaskPermissionReply::allow())).unwrap();
        assert_eq!(
            allow,
            json!({"behavior": "allow", "updatedInput": {"command": "make", "timeout": 1.5}})
        );
        let deny: Value = serde_json::from_str(&result(
            &call,
            &TaskPermissionReply::deny("denied: no answer within 600 s"),
        ))
        .unwrap();
        assert_eq!(
            deny,
            json!({"behavior": "deny", "message": "denied: no answer within 600 s"})
        );
        let down: Value = serde_json::from_str(&unasked("the hub is not reachable")).unwrap();
        assert_eq!(
            down,
            json!({"behavior": "deny", "message": "denied: agent-hub could not ask the task's delegator: the hub is not reachable"})
        );
    }
}
