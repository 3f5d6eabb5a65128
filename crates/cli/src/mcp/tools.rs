//! The MCP tools the hub offers: their `tools/list` entries (names, descriptions, JSON
//! Schemas), the parsing of `tools/call` arguments into typed calls, and the await bounds.
//!
//! Owns: `ToolCall` and its argument rules. Refuses: any IO (the stdio loop in `serve` runs
//! the calls). Names stay short, since every agent prefixes them its own way
//! (`mcp__hub__send`, `mcp_hub_send`, `hub_send`); `task_status` and `task_answer` are the
//! ones with an underscore, the names issues 11 and 37 give them.

use crate::client::task::{TASK_OUTCOME_KIND, TASK_REQUEST_KIND};
use agent_hub_proto::wire::approval::{check_allow, TOOL_KINDS};
use agent_hub_proto::wire::envelope::{check_field, MAX_ID_BYTES, MAX_KIND_BYTES, MAX_NAME_BYTES};
use agent_hub_proto::wire::WaitFor;
use agent_hub_proto::wire::{
    AllowRule, DelegateRequest, Permission, TaskAnswerRequest, TaskPromptRequest,
};
use serde_json::{json, Map, Value};
use std::fmt;

/// An `await` without `timeoutSecs` waits this long.
pub const AWAIT_DEFAULT_SECS: u64 = 25;
/// No `await` waits longer than this: below the tool-call timeouts clients use (Codex
/// `tool_timeout_sec` defaults to 60 s), so the answer always arrives before the client gives up.
pub const AWAIT_MAX_SECS: u64 = 50;
/// The text of an await that found nothing (a normal result, not an error).
pub const NO_MESSAGE: &str = "no message yet";

/// One tool call, arguments checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolCall {
    Send(SendCall),
    Await(AwaitCall),
    /// `status {id, waitFor?, timeoutSecs?}` (SPEC §12.4): where a message is.
    Status(StatusCall),
    Who,
    Whoami,
    /// `delegate {agent, cwd, prompt, timeoutSecs?, progressSecs?, peer?, permission?,
    /// allow?}` (issues 11, 37).
    Delegate(DelegateRequest),
    /// `task_status {task}`.
    TaskStatus(String),
    /// `tasks {}`: the caller's tasks.
    Tasks,
    /// `cancel {task}`.
    Cancel(String),
    /// `task_answer {task, request?, option, message?}` (issue 37).
    TaskAnswer(TaskAnswerRequest),
    /// `task_prompt {task, prompt, interrupt?}` (issue 38): a follow-up turn.
    TaskPrompt(TaskPromptRequest),
    /// `task_close {task}` (issue 38): a kept session ends now.
    TaskClose(String),
    /// `permission_prompt {tool_name, input, tool_use_id}` of a task identity, to be asked of
    /// the hub (issue 37 design §6; `mcp::permission` decided it needs the hub).
    PermissionPrompt {
        call: super::permission::PromptCall,
        req: agent_hub_proto::wire::approval::TaskPermissionRequest,
    },
}

/// The argument keys `delegate` takes; any other is refused, so a misspelt `timeoutSecs` is
/// not silently the hub's default.
pub const DELEGATE_KEYS: [&str; 13] = [
    "agent",
    "cwd",
    "prompt",
    "timeoutSecs",
    "progressSecs",
    "peer",
    "permission",
    "allow",
    "requires",
    "maxCostUsd",
    "maxTokens",
    "allowUnmetered",
    "keepSecs",
];

/// The argument keys `task_prompt` takes; any other is refused.
pub const TASK_PROMPT_KEYS: [&str; 3] = ["task", "prompt", "interrupt"];

/// The argument keys `task_answer` takes; any other is refused (a misspelt `requestId` must
/// not leave the hub to pick the request).
pub const TASK_ANSWER_KEYS: [&str; 4] = ["task", "request", "option", "message"];

/// What a model is told about `task_request` messages, in `delegate`, `await` and
/// `task_answer` alike (docs/delegation.md "Approvals"): what they are, how to answer one,
/// and that it may be passed up rather than guessed at.
pub fn requests_explained() -> String {
    format!(
        "While a task runs, its agent may ask for permission (to run a command, edit or delete a file, fetch a URL, …) or ask a question. Unless the hub or the delegation decides it (permission \"allow\" or \"reject\", or an allow rule), each such request comes to its delegator as a message from \"hub\" with kind {TASK_REQUEST_KIND} and correlationId = the task id (only the hub can send that kind), while the agent waits. Its body says which request (request: \"req-…\"), what the tool call would do (toolCall: title, kind, paths, command), the options (options[].optionId, with kind allow_once, allow_always, reject_once or reject_always) and when it expires (expiresAt: then the hub answers it with reject for you). Answer it with `task_answer` {{task, request, option}}, picking an optionId. A question (type \"question\") has the agent's text in message and its form in schema (JSON Schema as text), and offers accept, decline and cancel: accept with message = the form's content, a JSON object that matches schema (e.g. \"{{\\\"choice\\\":\\\"b\\\"}}\"); expiry answers cancel. Judge it as the user would: if you cannot, or it is not yours to decide, pass it up (send the body to whoever delegated your work, or ask the person you work for) and answer with their choice before it expires; allow only what the task needs. A body with state \"expired\" says the hub already answered it with its fallback (reject or cancel) and why."
    )
}

/// `send {to, kind, body, correlationId?}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendCall {
    pub to: String,
    pub kind: String,
    /// The body as compact JSON text (a string argument becomes a JSON string).
    pub body: String,
    pub correlation_id: Option<String>,
}

/// `await {replyTo?, kind?, timeoutSecs?}` with the wait already bounded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AwaitCall {
    pub reply_to: Option<String>,
    pub kind: Option<String>,
    /// Hub-side wait in whole seconds, at most `AWAIT_MAX_SECS`.
    pub timeout_secs: u64,
}

/// `status {id, waitFor?, timeoutSecs?}` with the wait already bounded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusCall {
    pub id: String,
    pub wait_for: Option<WaitFor>,
    /// Hub-side wait in whole seconds, at most `AWAIT_MAX_SECS`; only with `wait_for`.
    pub timeout_secs: u64,
}

/// The JSON-schema type `send` declares for its body. The hub takes any JSON value as a body
/// (an array, a number, a string), but schema-driven clients decide from the declared type
/// whether to send what the user typed as JSON or as a string: the MCP Inspector (2.12, CLI
/// `--tool-arg` and web form alike) parses the text as JSON only for `"object"` or `"array"`,
/// and sends it as a string for a list of types or for no type (docs/mcp.md "Typed
/// arguments"). With `"object"` it sends `{…}` and `[…]` as JSON and falls back to a string
/// for text that is not JSON, and models are steered to structured bodies.
pub const BODY_TYPE: &str = "object";

/// Why a `tools/call` could not become a `ToolCall`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolArgError {
    /// No tool of that name: a protocol fault (JSON-RPC -32602).
    UnknownTool(String),
    /// The tool exists but its arguments are wrong: a tool failure the model can fix
    /// (result with `isError`).
    BadArgs(String),
}

impl fmt::Display for ToolArgError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ToolArgError::UnknownTool(n) => write!(f, "Unknown tool: {n}"),
            ToolArgError::BadArgs(m) => write!(f, "invalid arguments: {m}"),
        }
    }
}

impl std::error::Error for ToolArgError {}

/// Every tool's name, in `tools/list` order: the one list `agent-hub mcp --help`, `is_tool`
/// and the README's tool list are held to (`list` by its unit test, the README by
/// tests/integration/readme.rs).
pub const TOOL_NAMES: [&str; 12] = [
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
];

/// The `tools/list` result.
pub fn list() -> Value {
    // One json! per tool: the whole list in one macro call passes serde_json's
    // recursion limit.
    let tools = vec![
        json!({
            "name": "send",
            "title": "Send a message",
            "description": "Send a message to another agent through the hub. It is queued for them until they read it, so they need not be waiting. Returns the message's id: a reply to you carries it as its correlationId, and `status` with that id tells you whether the message was delivered, read (acked) or bounced. When `to` names no agent the hub knows (a typo, or a linked hub it does not forward to), a second text is a warning naming the likely intended agent; the message is queued all the same.",
            "inputSchema": {
                "type": "object",
                "properties": {
                    "to": {"type": "string", "description": "Who gets it: an agent's name as `who` lists it (name@peer for an agent on a linked hub)."},
                    "kind": {"type": "string", "description": "What sort of message it is, in one word the recipient can filter on: task, result, question, note, …"},
                    "body": {"type": BODY_TYPE, "description": "The message itself, delivered exactly as given: a JSON object with the content (e.g. {\"text\": \"…\"} or your own fields). An array, or a string for plain text, is accepted too."},
                    "correlationId": {"type": "string", "description": "When this answers a message: that message's id."}
                },
                "required": ["to", "kind", "body"]
            },
            // openWorldHint: a message reaches other agents, who act on it (MCP: "may interact
            // with an 'open world' of external entities"). Clients that decide approval from
            // the hints ask before such a call: Codex runs a non-destructive, closed-world
            // tool unasked even in its read-only mode, so a delegated Codex never asked the
            // hub's permission policy about a send (docs/mcp.md "Tools").
            "annotations": {"readOnlyHint": false, "destructiveHint": false, "idempotentHint": false, "openWorldHint": true}
        }),
        json!({
            "name": "await",
            "title": "Wait for a message",
            "description": format!("Read your next message, waiting for one if none is there yet: returns it as JSON (id, from, to, ts, kind, correlationId, body). Waits at most timeoutSecs (default {AWAIT_DEFAULT_SECS}, capped at {AWAIT_MAX_SECS}); if nothing arrives it returns \"{NO_MESSAGE}\", and you may call it again. With replyTo it waits for the answer to one message you sent; with kind, for one kind of message. The sender sees the message as acked once you got it. For a task you delegated, await with replyTo = the task id (and no kind) gets its {TASK_REQUEST_KIND} messages as well as its {TASK_OUTCOME_KIND}: {}", requests_explained()),
            "inputSchema": {
                "type": "object",
                "properties": {
                    "replyTo": {"type": "string", "description": "Only the answer to this message id of yours (its correlationId)."},
                    "kind": {"type": "string", "description": "Only a message of this kind."},
                    "timeoutSecs": {"type": "integer", "minimum": 0, "maximum": AWAIT_MAX_SECS, "description": format!("Seconds to wait (default {AWAIT_DEFAULT_SECS}, at most {AWAIT_MAX_SECS}; 0 only checks).")}
                }
            },
            "annotations": {"readOnlyHint": false, "destructiveHint": false, "idempotentHint": false, "openWorldHint": false}
        }),
        json!({
            "name": "status",
            "title": "Where is my message",
            "description": format!("Tell where a message you sent (or one sent to you) is, by its id: state queued (waiting in the recipient's queue, with its position), delivered (handed to the recipient; reader says how: cli-await, mcp-await, stop-hook, plugin-drain, drain, acp-session or unknown), acked (the recipient read it: for hooks and plugins, it was put into the agent's context), forwarded (taken over by the peer hub of a name@peer address), bounced or lost (with reason), or unknown. With waitFor it first waits, up to timeoutSecs (default {AWAIT_DEFAULT_SECS}, at most {AWAIT_MAX_SECS}), until the message gets that far; the answer's wait then says reached, timeout (call again to keep waiting) or ended (it can no longer get there)."),
            "inputSchema": {
                "type": "object",
                "properties": {
                    "id": {"type": "string", "description": "The message id `send` returned."},
                    "waitFor": {"type": "string", "enum": WaitFor::ALL.map(WaitFor::as_str), "description": "Wait until the message is delivered, acked or forwarded before answering."},
                    "timeoutSecs": {"type": "integer", "minimum": 0, "maximum": AWAIT_MAX_SECS, "description": format!("With waitFor: seconds to wait at most (default {AWAIT_DEFAULT_SECS}, at most {AWAIT_MAX_SECS}).")}
                },
                "required": ["id"]
            },
            "annotations": {"readOnlyHint": true, "destructiveHint": false, "idempotentHint": true, "openWorldHint": false}
        }),
        json!({
            "name": "who",
            "title": "Who is on the hub",
            "description": "See which agents you can message: every agent on the hub's roster with its state, the awaits it has waiting (their filters only for your own, unless the hub names you an operator), how many messages are queued for it, when it was last seen and last given a message. state says what a message to it meets: waiting (an await is parked: it gets the message at once), busy (in a turn: it reads mail when the turn ends), idle (running, between turns), gone (its process exited: mail stays queued for its next session) or unknown (the hub has not seen enough to say); since and source tell when and how the hub learnt it. Then the agents of linked hubs as name@peer, with the state their hub reports (source relay). offRoster lists names nobody holds that have messages you sent waiting (a misspelt name: no such agent; name@peer for a hub this one does not reach: unknown peer; a task that ended): nothing will read those until the name exists, so send again to the right name.",
            "inputSchema": {"type": "object", "properties": {}},
            "annotations": {"readOnlyHint": true, "destructiveHint": false, "idempotentHint": true, "openWorldHint": false}
        }),
        json!({
            "name": "whoami",
            "title": "Who am I",
            "description": "Your own agent name on the hub (what others pass as `to` to reach you) and the hub's address.",
            "inputSchema": {"type": "object", "properties": {}},
            "annotations": {"readOnlyHint": true, "destructiveHint": false, "idempotentHint": true, "openWorldHint": false}
        }),
        json!({
            "name": "delegate",
            "title": "Delegate a task to an agent",
            "description": format!("Hand a task to another agent CLI (codex, claude, gemini, opencode, …) that the hub starts for you in a working directory you choose. Returns at once with {{\"task\":\"task-…\",\"state\":\"queued\"}}; the task then runs on its own. Its result arrives as a message to you from \"hub\" with kind {TASK_OUTCOME_KIND} and correlationId = the task id (only the hub can send that kind): call `await` with replyTo = the task id (call it again while it says \"{NO_MESSAGE}\"). The outcome's body has state (completed, failed, cancelled, timed_out, refused, hub_restarted), text (the agent's final answer, possibly truncated) and reason. While it runs, the task's agent may message you from the task id; you can answer it with `send` to that name. {} permission bounds it: \"ask\" (requests come to you), \"reject\" (all refused) or \"allow\" (all allowed unasked); the hub never runs a task wider than its own policy for that agent and refuses such a delegation. allow pre-approves requests by tool kind, e.g. [{{\"kinds\":[\"read\",\"search\"]}},{{\"kinds\":[\"edit\"],\"under\":\"src\"}}]: those never reach you.", requests_explained()),
            "inputSchema": {
                "type": "object",
                "properties": {
                    "agent": {"type": "string", "description": "Which agent runs the task, by its manifest name (e.g. codex, claude, gemini)."},
                    "cwd": {"type": "string", "description": "Absolute path of the directory the task works in; it must lie under a folder the hub allows."},
                    "prompt": {"type": "string", "description": "Everything the agent needs to know: it sees nothing of your context."},
                    "timeoutSecs": {"type": "integer", "minimum": 1, "description": "Stop the task after this many seconds (default: the hub's limit)."},
                    "progressSecs": {"type": "integer", "minimum": 0, "description": "Also send you a task_progress message at most this often, in seconds (default 0: none)."},
                    "peer": {"type": "string", "description": "Run the task on this relay peer's hub (another machine) instead of this one. \"auto\": the hub picks itself or a linked peer that has the agent and the most room (free task slots, load, free memory; peers at their cap or without a recent heartbeat are skipped); the answer's placement says which (chose) and why (reason)."},
                    "requires": {"type": "array", "items": {"type": "string", "pattern": "^[A-Za-z0-9._-]{1,40}$"}, "minItems": 1, "maxItems": agent_hub_proto::tasks::placement::MAX_REQUIRES, "description": "Only with peer \"auto\": run only where the hub's tags (relay.tags, or a claudectl peer's tags) include every one of these, e.g. [\"gpu\"]."},
                    "maxCostUsd": {"type": "number", "exclusiveMinimum": 0, "maximum": 1000000, "description": "Cancel the task once its cost passes this many US dollars (only for an agent that reports its cost; see allowUnmetered)."},
                    "maxTokens": {"type": "integer", "minimum": 1, "maximum": 1000000000000u64, "description": "Cancel the task once its total tokens pass this (only for an agent that reports tokens)."},
                    "allowUnmetered": {"type": "boolean", "description": "Run it even if the agent does not report what maxCostUsd or maxTokens needs (the budget is then not kept)."},
                    "keepSecs": {"type": "integer", "minimum": 0, "description": "Keep the task's session this many seconds after each completed turn, for a follow-up with task_prompt (default: the hub's tasks.session_keep_secs, which also bounds it)."},
                    "permission": {"type": "string", "enum": Permission::ALL.map(Permission::as_str), "description": "How the task's requests for permission are answered: ask (each comes to you as a task_request message), reject or allow; at most as wide as the hub allows for the agent (default: the hub's policy)."},
                    "allow": {
                        "type": "array",
                        "maxItems": agent_hub_proto::wire::approval::MAX_ALLOW_RULES,
                        "description": "Pre-approval rules: a request whose tool kind is in a rule's kinds (and whose paths all lie under its under, a folder relative to cwd, when given) is allowed at once and never sent to you.",
                        "items": {
                            "type": "object",
                            "properties": {
                                "kinds": {"type": "array", "items": {"type": "string", "enum": TOOL_KINDS}, "description": "ACP tool kinds."},
                                "under": {"type": "string", "description": "A folder relative to cwd; without it, anywhere."}
                            },
                            "required": ["kinds"],
                            "additionalProperties": false
                        }
                    }
                },
                "required": ["agent", "cwd", "prompt"],
                "additionalProperties": false
            },
            "annotations": {"readOnlyHint": false, "destructiveHint": false, "idempotentHint": false, "openWorldHint": true}
        }),
        json!({
            "name": "task_status",
            "title": "Status of a delegated task",
            "description": "Where a task you delegated is: its record as JSON (task, agent, peer, state — queued, running, cancelling, completed, failed, cancelled, timed_out, refused, hub_restarted — position in the queue, times, elapsedMs, reason, progress). A task that is not yours reads as state unknown.",
            "inputSchema": {
                "type": "object",
                "properties": {
                    "task": {"type": "string", "description": "The task id delegate returned (task-…)."}
                },
                "required": ["task"]
            },
            "annotations": {"readOnlyHint": true, "destructiveHint": false, "idempotentHint": true, "openWorldHint": false}
        }),
        json!({
            "name": "tasks",
            "title": "Your delegated tasks",
            "description": "List the tasks you delegated that the hub still remembers, oldest first, each as its record (task, agent, peer, state, times).",
            "inputSchema": {"type": "object", "properties": {}},
            "annotations": {"readOnlyHint": true, "destructiveHint": false, "idempotentHint": true, "openWorldHint": false}
        }),
        json!({
            "name": "cancel",
            "title": "Cancel a delegated task",
            "description": format!("Cancel a task you delegated. Returns {{\"task\",\"state\"}}: cancelled (it had not started), cancelling (it is being stopped; its {TASK_OUTCOME_KIND} message follows), the final state it had already reached, or unknown (no such task of yours)."),
            "inputSchema": {
                "type": "object",
                "properties": {
                    "task": {"type": "string", "description": "The task id delegate returned (task-…)."}
                },
                "required": ["task"]
            },
            "annotations": {"readOnlyHint": false, "destructiveHint": true, "idempotentHint": true, "openWorldHint": false}
        }),
        json!({
            "name": "task_answer",
            "title": "Answer a delegated task's request",
            "description": format!("Answer a request a task you delegated (or may approve for) waits on: pick one of the options its {TASK_REQUEST_KIND} message offered. Returns {{\"task\",\"request\",\"option\",\"state\":\"answered\"}} once the hub took it; the agent goes on at once. Refused (isError, the hub's reason) when the request is no longer open (answered, expired, cancelled, the task ended), the option was not offered, or you may not answer it. `task_status` lists a task's open requests. {}", requests_explained()),
            "inputSchema": {
                "type": "object",
                "properties": {
                    "task": {"type": "string", "description": "The task id (task-…): the message's correlationId."},
                    "request": {"type": "string", "description": "The request id (req-…) from the message's body; may be left out when the task has exactly one open."},
                    "option": {"type": "string", "description": "The optionId to answer with, one of the body's options."},
                    "message": {"type": "string", "description": "Words for the agent with the answer (at most 4096 bytes), where its protocol carries them: why you refused, what to do instead."}
                },
                "required": ["task", "option"],
                "additionalProperties": false
            },
            // openWorldHint: an answer lets another agent act (as `send` reaches others).
            "annotations": {"readOnlyHint": false, "destructiveHint": false, "idempotentHint": false, "openWorldHint": true}
        }),
        json!({
            "name": "task_prompt",
            "title": "Send a follow-up to a delegated task",
            "description": format!("Send another turn to a task you delegated whose session the hub keeps (its {TASK_OUTCOME_KIND} said session \"kept\" and keptUntil; task_status shows state idle): the same agent goes on in the same session, remembering the earlier turns, e.g. to ask for changes after reviewing its answer. Returns {{\"task\",\"turn\",\"state\":\"running\"}}; the turn's result comes as another {TASK_OUTCOME_KIND} message with the same correlationId and \"turn\": N (await with replyTo = the task id). With interrupt true a turn still running is cancelled first (its outcome says cancelled, interrupted by a follow-up). Refused (isError, the hub's reason) while a turn is open without interrupt, once the session closed (the keep window passed, task_close, the task ended otherwise), for a task run headless or on a peer, and past the hub's turn limit. Delegate with keepSecs to keep the session (the hub's tasks.session_keep_secs bounds it; 0 there keeps none)."),
            "inputSchema": {
                "type": "object",
                "properties": {
                    "task": {"type": "string", "description": "The task id (task-…)."},
                    "prompt": {"type": "string", "description": "The follow-up: what to change or do next."},
                    "interrupt": {"type": "boolean", "description": "Cancel the turn still running first (default false: refused while one runs)."}
                },
                "required": ["task", "prompt"],
                "additionalProperties": false
            },
            "annotations": {"readOnlyHint": false, "destructiveHint": false, "idempotentHint": false, "openWorldHint": true}
        }),
        json!({
            "name": "task_close",
            "title": "Close a delegated task's kept session",
            "description": "End now the session the hub keeps for a task you delegated (state idle), instead of at its keptUntil: the agent process ends and the task settles with its last turn's state, which this returns as {\"task\",\"state\"}. No further message comes (the last turn's outcome was the last one). Refused while a turn runs (use cancel).",
            "inputSchema": {
                "type": "object",
                "properties": {
                    "task": {"type": "string", "description": "The task id (task-…)."}
                },
                "required": ["task"],
                "additionalProperties": false
            },
            "annotations": {"readOnlyHint": false, "destructiveHint": true, "idempotentHint": true, "openWorldHint": false}
        }),
    ];
    json!({ "tools": tools })
}

/// Turns a tool name and its `arguments` (absent or null meaning `{}`) into a `ToolCall`.
pub fn parse_call(name: &str, args: Option<&Value>) -> Result<ToolCall, ToolArgError> {
    let empty = Map::new();
    let args = match args {
        None | Some(Value::Null) => &empty,
        Some(Value::Object(m)) => m,
        Some(_) if is_tool(name) => {
            return Err(ToolArgError::BadArgs("arguments must be an object".into()))
        }
        Some(_) => return Err(ToolArgError::UnknownTool(name.to_owned())),
    };
    match name {
        "send" => {
            let to = required_str(args, "to")?;
            let kind = required_str(args, "kind")?;
            let body = match args.get("body") {
                None => return Err(ToolArgError::BadArgs("body is required".into())),
                Some(v) => v.to_string(),
            };
            let correlation_id = optional_str(args, "correlationId")?;
            capped("to", Some(&to), MAX_NAME_BYTES)?;
            capped("kind", Some(&kind), MAX_KIND_BYTES)?;
            capped("correlationId", correlation_id.as_deref(), MAX_ID_BYTES)?;
            Ok(ToolCall::Send(SendCall {
                to,
                kind,
                body,
                correlation_id,
            }))
        }
        "await" => {
            let reply_to = optional_str(args, "replyTo")?;
            let kind = optional_str(args, "kind")?;
            capped("replyTo", reply_to.as_deref(), MAX_ID_BYTES)?;
            capped("kind", kind.as_deref(), MAX_KIND_BYTES)?;
            Ok(ToolCall::Await(AwaitCall {
                reply_to,
                kind,
                timeout_secs: bounded_timeout(args.get("timeoutSecs"))?,
            }))
        }
        "status" => status(args),
        "who" => Ok(ToolCall::Who),
        "whoami" => Ok(ToolCall::Whoami),
        "delegate" => delegate(args),
        "task_status" => Ok(ToolCall::TaskStatus(required_str(args, "task")?)),
        "tasks" => Ok(ToolCall::Tasks),
        "cancel" => Ok(ToolCall::Cancel(required_str(args, "task")?)),
        "task_answer" => task_answer(args),
        "task_prompt" => task_prompt(args),
        "task_close" => Ok(ToolCall::TaskClose(required_str(args, "task")?)),
        other => Err(ToolArgError::UnknownTool(other.to_owned())),
    }
}

fn is_tool(name: &str) -> bool {
    TOOL_NAMES.contains(&name)
}

fn status(args: &Map<String, Value>) -> Result<ToolCall, ToolArgError> {
    let id = required_str(args, "id")?;
    capped("id", Some(&id), MAX_ID_BYTES)?;
    let wait_for = match optional_str(args, "waitFor")? {
        None => None,
        Some(w) => Some(WaitFor::parse(&w).ok_or_else(|| {
            ToolArgError::BadArgs(format!("waitFor must be one of {}", WaitFor::list()))
        })?),
    };
    let timeout = args.get("timeoutSecs").filter(|v| !v.is_null());
    if wait_for.is_none() && timeout.is_some() {
        return Err(ToolArgError::BadArgs(
            "timeoutSecs needs waitFor (without it status answers at once)".into(),
        ));
    }
    Ok(ToolCall::Status(StatusCall {
        id,
        wait_for,
        timeout_secs: bounded_timeout(timeout)?,
    }))
}

fn delegate(args: &Map<String, Value>) -> Result<ToolCall, ToolArgError> {
    if let Some(k) = args.keys().find(|k| !DELEGATE_KEYS.contains(&k.as_str())) {
        return Err(ToolArgError::BadArgs(format!(
            "unknown argument {k:?} (delegate takes {})",
            DELEGATE_KEYS.join(", ")
        )));
    }
    let agent = required_str(args, "agent")?;
    let cwd = required_str(args, "cwd")?;
    // The MCP server runs in whatever directory the agent CLI started it in, which need not be
    // the model's idea of "here": a relative path is refused rather than guessed.
    if !cwd.starts_with('/') {
        return Err(ToolArgError::BadArgs(format!(
            "cwd must be an absolute path, got {cwd:?}"
        )));
    }
    let prompt = required_str(args, "prompt")?;
    if prompt.trim().is_empty() {
        return Err(ToolArgError::BadArgs("prompt must not be empty".into()));
    }
    let permission = match optional_str(args, "permission")? {
        None => None,
        Some(p) => Some(Permission::parse(&p).ok_or_else(|| {
            ToolArgError::BadArgs(format!("permission must be one of {}", Permission::list()))
        })?),
    };
    Ok(ToolCall::Delegate(DelegateRequest {
        agent,
        cwd,
        prompt,
        timeout_secs: optional_secs(args, "timeoutSecs", 1)?,
        progress_secs: optional_secs(args, "progressSecs", 0)?,
        peer: optional_str(args, "peer")?,
        permission,
        allow: allow_rules(args.get("allow"))?,
        keep_secs: optional_secs(args, "keepSecs", 0)?,
        requires: required_tags(args.get("requires"))?,
        max_cost_usd: optional_amount(args, "maxCostUsd")?,
        max_tokens: optional_secs(args, "maxTokens", 1)?,
        allow_unmetered: match args.get("allowUnmetered") {
            None | Some(Value::Null) => None,
            Some(Value::Bool(b)) => Some(*b),
            Some(_) => {
                return Err(ToolArgError::BadArgs(
                    "allowUnmetered must be true or false".into(),
                ))
            }
        },
    }))
}

/// `requires`: absent or null, or a list of strings; the hub checks each tag and the count
/// (one more than the bound is kept, enough for its refusal).
fn required_tags(v: Option<&Value>) -> Result<Option<Vec<String>>, ToolArgError> {
    let items = match v {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Array(a)) => a,
        Some(_) => {
            return Err(ToolArgError::BadArgs(
                "requires must be a list of tags".into(),
            ))
        }
    };
    items
        .iter()
        .take(agent_hub_proto::tasks::placement::MAX_REQUIRES + 1)
        .map(|t| match t {
            Value::String(s) => Ok(s.clone()),
            _ => Err(ToolArgError::BadArgs(
                "requires must be a list of tags (strings)".into(),
            )),
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}

/// `allow`: absent or null, or a list of `{kinds: [string], under?: string}`, within the
/// wire's bounds (`check_allow`, whose words the model gets).
fn allow_rules(v: Option<&Value>) -> Result<Option<Vec<AllowRule>>, ToolArgError> {
    let bad = |why: &str| ToolArgError::BadArgs(format!("allow: {why}"));
    let items = match v {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Array(a)) => a,
        Some(_) => return Err(bad("must be a list of rules {kinds, under}")),
    };
    let mut rules = Vec::with_capacity(items.len().min(16));
    for (i, item) in items.iter().enumerate() {
        let n = i + 1;
        let Value::Object(m) = item else {
            return Err(bad(&format!("rule {n} must be an object {{kinds, under}}")));
        };
        if let Some(k) = m.keys().find(|k| !["kinds", "under"].contains(&k.as_str())) {
            return Err(bad(&format!(
                "rule {n} has an unknown key {k:?} (a rule takes kinds, under)"
            )));
        }
        let kinds = match m.get("kinds") {
            Some(Value::Array(ks)) => ks
                .iter()
                .map(|k| k.as_str().map(str::to_owned))
                .collect::<Option<Vec<String>>>()
                .ok_or_else(|| bad(&format!("rule {n}: kinds must be a list of strings")))?,
            _ => return Err(bad(&format!("rule {n}: kinds must be a list of strings"))),
        };
        let under = match m.get("under") {
            None | Some(Value::Null) => None,
            Some(Value::String(u)) => Some(u.clone()),
            Some(_) => return Err(bad(&format!("rule {n}: under must be a string"))),
        };
        rules.push(AllowRule { kinds, under });
    }
    check_allow(&rules).map_err(|e| ToolArgError::BadArgs(e.to_string()))?;
    Ok(Some(rules))
}

fn task_prompt(args: &Map<String, Value>) -> Result<ToolCall, ToolArgError> {
    if let Some(k) = args
        .keys()
        .find(|k| !TASK_PROMPT_KEYS.contains(&k.as_str()))
    {
        return Err(ToolArgError::BadArgs(format!(
            "unknown argument {k:?} (task_prompt takes {})",
            TASK_PROMPT_KEYS.join(", ")
        )));
    }
    let prompt = required_str(args, "prompt")?;
    if prompt.trim().is_empty() {
        return Err(ToolArgError::BadArgs("prompt must not be empty".into()));
    }
    let interrupt = match args.get("interrupt") {
        None | Some(Value::Null) => None,
        Some(Value::Bool(b)) => Some(*b),
        Some(_) => {
            return Err(ToolArgError::BadArgs(
                "interrupt must be true or false".into(),
            ))
        }
    };
    Ok(ToolCall::TaskPrompt(TaskPromptRequest {
        task: required_str(args, "task")?,
        prompt,
        interrupt,
    }))
}

fn task_answer(args: &Map<String, Value>) -> Result<ToolCall, ToolArgError> {
    if let Some(k) = args
        .keys()
        .find(|k| !TASK_ANSWER_KEYS.contains(&k.as_str()))
    {
        return Err(ToolArgError::BadArgs(format!(
            "unknown argument {k:?} (task_answer takes {})",
            TASK_ANSWER_KEYS.join(", ")
        )));
    }
    let req = TaskAnswerRequest {
        task: required_str(args, "task")?,
        request: optional_str(args, "request")?,
        option: required_str(args, "option")?,
        message: optional_str(args, "message")?,
    };
    // The wire's own bounds, so every call accepted here makes a line the hub decodes.
    req.check()
        .map_err(|e| ToolArgError::BadArgs(e.to_string()))?;
    Ok(ToolCall::TaskAnswer(req))
}

/// A whole number of seconds, at least `min`: an integer, an integral float (`600.0`) or a
/// numeric string; absent or null is None (the hub's default).
/// A number of US dollars (`maxCostUsd`, issue 38): a JSON number or its text; the hub checks
/// its bounds.
fn optional_amount(
    args: &Map<String, Value>,
    key: &str,
) -> Result<Option<agent_hub_proto::wire::usage::Amount>, ToolArgError> {
    let bad = || ToolArgError::BadArgs(format!("{key} must be a number of US dollars"));
    let n = match args.get(key) {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Number(n)) => n.as_f64().ok_or_else(bad)?,
        Some(Value::String(s)) => s.trim().parse::<f64>().map_err(|_| bad())?,
        Some(_) => return Err(bad()),
    };
    if !n.is_finite() {
        return Err(bad());
    }
    Ok(Some(agent_hub_proto::wire::usage::Amount(n)))
}

fn optional_secs(
    args: &Map<String, Value>,
    key: &str,
    min: u64,
) -> Result<Option<u64>, ToolArgError> {
    let bad = || {
        ToolArgError::BadArgs(format!(
            "{key} must be a whole number of seconds, {min} or more"
        ))
    };
    let n = match args.get(key) {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Number(n)) => n.clone(),
        Some(Value::String(s)) => s.trim().parse::<serde_json::Number>().map_err(|_| bad())?,
        Some(_) => return Err(bad()),
    };
    let secs = match (n.as_u64(), n.as_f64()) {
        (Some(u), _) => u,
        (None, Some(f)) if f.fract() == 0.0 && f >= 0.0 && f <= u64::MAX as f64 => f as u64,
        _ => return Err(bad()),
    };
    if secs < min {
        return Err(bad());
    }
    Ok(Some(secs))
}

/// The caps the hub applies to this field when it decodes the line (SPEC §3, §5.2): checked
/// here so that the agent gets the reason from its tool call, and so that every call this
/// accepts makes a line the hub accepts (the `mcp_session` fuzz target's property).
fn capped(key: &'static str, value: Option<&str>, max: usize) -> Result<(), ToolArgError> {
    match value {
        Some(v) => check_field(key, v, max).map_err(|e| ToolArgError::BadArgs(e.to_string())),
        None => Ok(()),
    }
}

fn required_str(args: &Map<String, Value>, key: &str) -> Result<String, ToolArgError> {
    match args.get(key) {
        Some(Value::String(s)) if !s.is_empty() => Ok(s.clone()),
        Some(Value::String(_)) => Err(ToolArgError::BadArgs(format!("{key} must not be empty"))),
        None | Some(Value::Null) => Err(ToolArgError::BadArgs(format!("{key} is required"))),
        Some(_) => Err(ToolArgError::BadArgs(format!("{key} must be a string"))),
    }
}

fn optional_str(args: &Map<String, Value>, key: &str) -> Result<Option<String>, ToolArgError> {
    match args.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if !s.is_empty() => Ok(Some(s.clone())),
        Some(Value::String(_)) => Err(ToolArgError::BadArgs(format!(
            "{key} must not be empty (leave it out instead)"
        ))),
        Some(_) => Err(ToolArgError::BadArgs(format!("{key} must be a string"))),
    }
}

/// `timeoutSecs`: absent → the default; a number ≥ 0 (fractions round down, some models send
/// `10.0`) capped at `AWAIT_MAX_SECS`; a numeric string is accepted too.
fn bounded_timeout(v: Option<&Value>) -> Result<u64, ToolArgError> {
    let secs = match v {
        None | Some(Value::Null) => return Ok(AWAIT_DEFAULT_SECS),
        Some(Value::Number(n)) => n.as_f64(),
        Some(Value::String(s)) => s.trim().parse::<f64>().ok(),
        Some(_) => None,
    };
    match secs {
        Some(s) if s.is_finite() && s >= 0.0 => Ok((s.floor() as u64).min(AWAIT_MAX_SECS)),
        _ => Err(ToolArgError::BadArgs(
            "timeoutSecs must be a number of seconds, 0 or more".into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_has_short_tools_with_object_schemas() {
        let l = list();
        let tools = l["tools"].as_array().unwrap();
        let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
        assert_eq!(names, TOOL_NAMES);
        for t in tools {
            let name = t["name"].as_str().unwrap();
            assert_eq!(t["inputSchema"]["type"], "object");
            assert!(!t["description"].as_str().unwrap().is_empty());
            assert!(!t["title"].as_str().unwrap().is_empty());
            assert!(
                name.len() <= 12 && name.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'),
                "{name}"
            );
            assert!(is_tool(name), "{name}");
            // Every declared argument has a JSON-schema type (send's body: every type, so a
            // structured body is sent as JSON) and words for the model; every required one is
            // declared.
            let props = t["inputSchema"]["properties"].as_object().unwrap();
            for (arg, schema) in props {
                let ty = &schema["type"];
                let names: Vec<&str> = match ty {
                    Value::String(s) => vec![s.as_str()],
                    Value::Array(a) => a.iter().map(|v| v.as_str().unwrap()).collect(),
                    other => panic!("{name}.{arg}: type {other}"),
                };
                assert!(!names.is_empty(), "{name}.{arg}");
                for n in &names {
                    assert!(
                        ["object", "array", "string", "number", "integer", "boolean", "null"]
                            .contains(n),
                        "{name}.{arg}: {n}"
                    );
                }
                assert!(ty.is_string(), "{name}.{arg}: one type");
                if (name, arg.as_str()) == ("send", "body") {
                    assert_eq!(ty, "object", "structured bodies (BODY_TYPE)");
                }
                assert!(
                    !schema["description"].as_str().unwrap().is_empty(),
                    "{name}.{arg}"
                );
            }
            for req in t["inputSchema"]["required"]
                .as_array()
                .into_iter()
                .flatten()
            {
                assert!(props.contains_key(req.as_str().unwrap()), "{name}: {req}");
            }
        }
    }

    #[test]
    fn task_tool_schemas_match_what_parse_call_takes() {
        let l = list();
        let tool = |n: &str| {
            l["tools"]
                .as_array()
                .unwrap()
                .iter()
                .find(|t| t["name"] == n)
                .unwrap()
                .clone()
        };
        let d = tool("delegate");
        let props: Vec<&str> = d["inputSchema"]["properties"]
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        let mut keys = DELEGATE_KEYS.to_vec();
        keys.sort_unstable();
        let mut props = props;
        props.sort_unstable();
        assert_eq!(props, keys);
        assert_eq!(
            d["inputSchema"]["required"],
            json!(["agent", "cwd", "prompt"])
        );
        assert_eq!(
            d["inputSchema"]["properties"]["timeoutSecs"]["type"],
            "integer"
        );
        assert_eq!(d["inputSchema"]["properties"]["timeoutSecs"]["minimum"], 1);
        assert_eq!(d["inputSchema"]["properties"]["progressSecs"]["minimum"], 0);
        assert!(d["description"].as_str().unwrap().contains("task_outcome"));
        for n in ["task_status", "cancel"] {
            assert_eq!(tool(n)["inputSchema"]["required"], json!(["task"]), "{n}");
        }
        assert_eq!(tool("tasks")["inputSchema"]["properties"], json!({}));
    }

    #[test]
    fn delegate_arguments() {
        let c = parse_call(
            "delegate",
            Some(&json!({"agent":"codex","cwd":"/w/repo","prompt":"fix it","timeoutSecs":600,"progressSecs":"30","peer":"lab"})),
        )
        .unwrap();
        assert_eq!(
            c,
            ToolCall::Delegate(DelegateRequest {
                agent: "codex".into(),
                cwd: "/w/repo".into(),
                prompt: "fix it".into(),
                timeout_secs: Some(600),
                progress_secs: Some(30),
                peer: Some("lab".into()),
                permission: None,
                allow: None,
                keep_secs: None,
                requires: None,
                ..Default::default()
            })
        );
        // Issue 38: `auto` and its tags pass through; the hub checks them.
        let ToolCall::Delegate(d) = parse_call(
            "delegate",
            Some(&json!({"agent":"a","cwd":"/","prompt":"p","peer":"auto","requires":["gpu","x86_64"]})),
        )
        .unwrap() else {
            panic!("a delegate")
        };
        assert_eq!(
            d.requires,
            Some(vec!["gpu".to_owned(), "x86_64".to_owned()])
        );
        for bad in [json!("gpu"), json!([7])] {
            assert!(parse_call(
                "delegate",
                Some(&json!({"agent":"a","cwd":"/","prompt":"p","peer":"auto","requires":bad})),
            )
            .is_err());
        }
        let ToolCall::Delegate(d) = parse_call(
            "delegate",
            Some(&json!({"agent":"a","cwd":"/","prompt":"p","timeoutSecs":null,"progressSecs":0,"peer":null})),
        )
        .unwrap() else {
            panic!()
        };
        assert_eq!(
            (d.timeout_secs, d.progress_secs, d.peer),
            (None, Some(0), None)
        );
        let ToolCall::Delegate(d) = parse_call(
            "delegate",
            Some(&json!({"agent":"a","cwd":"/","prompt":"p","timeoutSecs":90.0})),
        )
        .unwrap() else {
            panic!()
        };
        assert_eq!(d.timeout_secs, Some(90));
    }

    #[test]
    fn delegate_argument_errors_are_bad_args() {
        let ok = json!({"agent":"codex","cwd":"/w","prompt":"p"});
        let with = |k: &str, v: Value| {
            let mut m = ok.as_object().unwrap().clone();
            m.insert(k.into(), v);
            Value::Object(m)
        };
        let without = |k: &str| {
            let mut m = ok.as_object().unwrap().clone();
            m.remove(k);
            Value::Object(m)
        };
        for (args, needle) in [
            (without("agent"), "agent is required"),
            (without("cwd"), "cwd is required"),
            (without("prompt"), "prompt is required"),
            (with("agent", json!("")), "agent must not be empty"),
            (with("agent", json!(["codex"])), "agent must be a string"),
            (with("cwd", json!("repo")), "absolute"),
            (with("cwd", json!("./repo")), "absolute"),
            (
                with(
                    "prompt",
                    json!(
                        " 
 "
                    ),
                ),
                "prompt must not be empty",
            ),
            (
                with("prompt", json!({"text":"p"})),
                "prompt must be a string",
            ),
            (with("timeoutSecs", json!(0)), "timeoutSecs"),
            (with("timeoutSecs", json!(-5)), "timeoutSecs"),
            (with("timeoutSecs", json!(1.5)), "timeoutSecs"),
            (with("timeoutSecs", json!("soon")), "timeoutSecs"),
            (with("timeoutSecs", json!(true)), "timeoutSecs"),
            (with("timeoutSecs", json!(1e300)), "timeoutSecs"),
            (with("progressSecs", json!(-1)), "progressSecs"),
            (with("peer", json!(7)), "peer must be a string"),
            (with("peer", json!("")), "peer must not be empty"),
            (
                with("timeout_secs", json!(60)),
                "unknown argument \"timeout_secs\"",
            ),
        ] {
            match parse_call("delegate", Some(&args)) {
                Err(ToolArgError::BadArgs(m)) => assert!(m.contains(needle), "{args}: {m}"),
                other => panic!("{args}: {other:?}"),
            }
        }
        assert!(matches!(
            parse_call("delegate", None),
            Err(ToolArgError::BadArgs(_))
        ));
        assert!(matches!(
            parse_call("delegate", Some(&json!("codex"))),
            Err(ToolArgError::BadArgs(_))
        ));
    }

    #[test]
    fn task_status_tasks_and_cancel_arguments() {
        assert_eq!(
            parse_call("task_status", Some(&json!({"task":"task-1"}))),
            Ok(ToolCall::TaskStatus("task-1".into()))
        );
        assert_eq!(
            parse_call("cancel", Some(&json!({"task":"task-2"}))),
            Ok(ToolCall::Cancel("task-2".into()))
        );
        assert_eq!(parse_call("tasks", None), Ok(ToolCall::Tasks));
        for name in ["task_status", "cancel"] {
            for args in [
                json!({}),
                json!({"task":""}),
                json!({"task":3}),
                json!({"id":"task-1"}),
            ] {
                assert!(
                    matches!(parse_call(name, Some(&args)), Err(ToolArgError::BadArgs(_))),
                    "{name} {args}"
                );
            }
        }
        assert_eq!(
            parse_call("taskstatus", None),
            Err(ToolArgError::UnknownTool("taskstatus".into()))
        );
    }

    /// Issue 37: an orchestrating model learns from the tools themselves what a task_request
    /// message is and how to answer or pass it up.
    #[test]
    fn delegate_await_and_task_answer_explain_requests() {
        let l = list();
        let tool = |n: &str| {
            l["tools"]
                .as_array()
                .unwrap()
                .iter()
                .find(|t| t["name"] == n)
                .unwrap()
                .clone()
        };
        for n in ["delegate", "await", "task_answer"] {
            let d = tool(n)["description"].as_str().unwrap().to_owned();
            for needle in [
                "task_request",
                "correlationId = the task id",
                "`task_answer`",
                "pass it up",
                "expired",
                "optionId",
            ] {
                assert!(d.contains(needle), "{n}: {needle} missing from {d}");
            }
        }
        let a = tool("task_answer");
        assert_eq!(a["inputSchema"]["required"], json!(["task", "option"]));
        let mut props: Vec<String> = a["inputSchema"]["properties"]
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect();
        props.sort();
        let mut keys = TASK_ANSWER_KEYS.map(str::to_owned).to_vec();
        keys.sort();
        assert_eq!(props, keys);
        let d = tool("delegate");
        assert_eq!(
            d["inputSchema"]["properties"]["permission"]["enum"],
            json!(["ask", "reject", "allow"])
        );
        assert_eq!(
            d["inputSchema"]["properties"]["allow"]["items"]["properties"]["kinds"]["items"]
                ["enum"],
            json!(TOOL_KINDS)
        );
        assert_eq!(d["inputSchema"]["properties"]["allow"]["maxItems"], 8);
    }

    #[test]
    fn task_answer_arguments() {
        assert_eq!(
            parse_call(
                "task_answer",
                Some(&json!({"task":"task-1","request":"req-1","option":"allow","message":"ok"}))
            ),
            Ok(ToolCall::TaskAnswer(TaskAnswerRequest {
                task: "task-1".into(),
                request: Some("req-1".into()),
                option: "allow".into(),
                message: Some("ok".into()),
            }))
        );
        assert_eq!(
            parse_call(
                "task_answer",
                Some(&json!({"task":"task-1","option":"deny","request":null}))
            ),
            Ok(ToolCall::TaskAnswer(TaskAnswerRequest {
                task: "task-1".into(),
                request: None,
                option: "deny".into(),
                message: None,
            }))
        );
        let long = "m".repeat(4097);
        for (args, why) in [
            (json!({"option":"allow"}), "task is required"),
            (json!({"task":"t"}), "option is required"),
            (json!({"task":"t","option":""}), "option must not be empty"),
            (json!({"task":"t","option":7}), "option must be a string"),
            (
                json!({"task":"t","option":"a","request":""}),
                "request must not be empty",
            ),
            (
                json!({"task":"t","option":"a","message":long}),
                "message is over 4096 bytes",
            ),
            (
                json!({"task":"t","option":"o".repeat(129)}),
                "option is over 128 bytes",
            ),
            (
                json!({"task":"t","option":"a","id":"req-1"}),
                "unknown argument \"id\"",
            ),
        ] {
            match parse_call("task_answer", Some(&args)) {
                Err(ToolArgError::BadArgs(m)) => assert!(m.contains(why), "{args}: {m}"),
                other => panic!("{args}: {other:?}"),
            }
        }
    }

    #[test]
    fn delegate_permission_and_allow_arguments() {
        let ToolCall::Delegate(d) = parse_call(
            "delegate",
            Some(&json!({"agent":"a","cwd":"/w","prompt":"p","permission":"reject",
                "allow":[{"kinds":["read"]},{"kinds":["edit","delete"],"under":"src/x"},{"kinds":["fetch"],"under":null}]})),
        )
        .unwrap() else {
            panic!()
        };
        assert_eq!(d.permission, Some(Permission::Reject));
        let rules = d.allow.unwrap();
        assert_eq!(rules.len(), 3);
        assert_eq!(rules[1].under.as_deref(), Some("src/x"));
        assert_eq!(rules[2].under, None);
        let ToolCall::Delegate(d) = parse_call(
            "delegate",
            Some(&json!({"agent":"a","cwd":"/w","prompt":"p","permission":null,"allow":null})),
        )
        .unwrap() else {
            panic!()
        };
        assert_eq!((d.permission, d.allow), (None, None));
        let nine: Vec<Value> = vec![json!({"kinds":["read"]}); 9];
        for (extra, why) in [
            (
                json!({"permission":"Allow"}),
                "permission must be one of ask, reject, allow",
            ),
            (json!({"permission":1}), "permission must be a string"),
            (json!({"allow":nine}), "allow holds at most 8 rules"),
            (
                json!({"allow":[{"kinds":"read"}]}),
                "allow: rule 1: kinds must be a list of strings",
            ),
            (
                json!({"allow":[{"kinds":[1]}]}),
                "allow: rule 1: kinds must be a list of strings",
            ),
            (
                json!({"allow":[{"under":"src"}]}),
                "allow: rule 1: kinds must be a list of strings",
            ),
            (
                json!({"allow":["read"]}),
                "allow: rule 1 must be an object {kinds, under}",
            ),
            (
                json!({"allow":[{"kinds":["read"],"path":"x"}]}),
                "allow: rule 1 has an unknown key \"path\"",
            ),
            (
                json!({"allow":[{"kinds":["read"],"under":5}]}),
                "allow: rule 1: under must be a string",
            ),
            (
                json!({"allow":[{"kinds":["write"]}]}),
                "allow rule 1: kinds must be among read, edit",
            ),
            (
                json!({"allow":[{"kinds":["read"]},{"kinds":["edit"],"under":"/etc"}]}),
                "allow rule 2: under must be a path relative to the task's cwd",
            ),
        ] {
            let mut args = json!({"agent":"a","cwd":"/w","prompt":"p"});
            for (k, v) in extra.as_object().unwrap() {
                args[k] = v.clone();
            }
            match parse_call("delegate", Some(&args)) {
                Err(ToolArgError::BadArgs(m)) => assert!(m.contains(why), "{args}: {m}"),
                other => panic!("{args}: {other:?}"),
            }
        }
    }

    #[test]
    fn send_keeps_the_body_json_and_wraps_strings() {
        let c = parse_call(
            "send",
            Some(&json!({"to":"b","kind":"task","body":{"x":[1,2]},"correlationId":"c1"})),
        )
        .unwrap();
        assert_eq!(
            c,
            ToolCall::Send(SendCall {
                to: "b".into(),
                kind: "task".into(),
                body: r#"{"x":[1,2]}"#.into(),
                correlation_id: Some("c1".into())
            })
        );
        let ToolCall::Send(s) = parse_call(
            "send",
            Some(&json!({"to":"b","kind":"k","body":"hi\nthere"})),
        )
        .unwrap() else {
            panic!()
        };
        assert_eq!(s.body, r#""hi\nthere""#);
        assert_eq!(s.correlation_id, None);
        // Declared an object, but any JSON value is taken as it came.
        for body in [json!([1, {"a": null}]), json!(42), json!(null), json!(true)] {
            let ToolCall::Send(s) = parse_call(
                "send",
                Some(&json!({"to":"b","kind":"k","body":body.clone()})),
            )
            .unwrap() else {
                panic!()
            };
            assert_eq!(s.body, body.to_string());
        }
    }

    /// What the hub's decoder would refuse (SPEC §3, §5.2) is refused by the tool itself,
    /// naming the field and never echoing the value: a control or invisible formatting
    /// character, or a field over its cap (found by the `mcp_session` fuzz target: an await
    /// with kind "\rreply" made a line the hub refuses).
    #[test]
    fn fields_the_hub_would_refuse_are_refused_by_the_tool() {
        let long_id = "i".repeat(MAX_ID_BYTES + 1);
        let long_kind = "k".repeat(MAX_KIND_BYTES + 1);
        let long_name = "n".repeat(MAX_NAME_BYTES + 1);
        let cases = [
            (
                "await",
                json!({"kind": "\rreply"}),
                "kind must not contain control or invisible formatting characters",
            ),
            (
                "await",
                json!({"replyTo": "a\u{202e}b"}),
                "replyTo must not contain control or invisible formatting characters",
            ),
            (
                "await",
                json!({"kind": long_kind}),
                "kind is over 128 bytes",
            ),
            (
                "await",
                json!({"replyTo": long_id}),
                "replyTo is over 128 bytes",
            ),
            (
                "send",
                json!({"to": "b\u{1b}]52;c;x\u{7}", "kind": "k", "body": 1}),
                "to must not contain control or invisible formatting characters",
            ),
            (
                "send",
                json!({"to": "b", "kind": "\ttab", "body": 1}),
                "kind must not contain control or invisible formatting characters",
            ),
            (
                "send",
                json!({"to": "b", "kind": "k", "body": 1, "correlationId": "c\u{0}"}),
                "correlationId must not contain control or invisible formatting characters",
            ),
            (
                "send",
                json!({"to": long_name, "kind": "k", "body": 1}),
                "to is over 256 bytes",
            ),
            ("status", json!({"id": long_id}), "id is over 128 bytes"),
            (
                "status",
                json!({"id": "x\u{200b}y"}),
                "id must not contain control or invisible formatting characters",
            ),
        ];
        for (tool, args, why) in cases {
            match parse_call(tool, Some(&args)) {
                Err(ToolArgError::BadArgs(m)) => assert_eq!(m, why, "{tool} {args}"),
                other => panic!("{tool} {args}: {other:?}"),
            }
        }
        // Text that is not a control or formatting character stays welcome.
        assert!(parse_call(
            "send",
            Some(&json!({"to": "b", "kind": "résultat 😀", "body": 1}))
        )
        .is_ok());
        assert!(parse_call("await", Some(&json!({"kind": "k".repeat(MAX_KIND_BYTES)}))).is_ok());
    }

    #[test]
    fn send_argument_errors_are_bad_args() {
        for args in [
            json!({"kind":"k","body":1}),
            json!({"to":"","kind":"k","body":1}),
            json!({"to":5,"kind":"k","body":1}),
            json!({"to":"b","kind":"k"}),
            json!({"to":"b","kind":"k","body":1,"correlationId":7}),
        ] {
            assert!(
                matches!(
                    parse_call("send", Some(&args)),
                    Err(ToolArgError::BadArgs(_))
                ),
                "{args}"
            );
        }
        assert!(matches!(
            parse_call("send", Some(&json!([1]))),
            Err(ToolArgError::BadArgs(_))
        ));
        assert!(matches!(
            parse_call("send", None),
            Err(ToolArgError::BadArgs(_))
        ));
    }

    #[test]
    fn await_is_bounded() {
        let t = |v: Value| match parse_call("await", Some(&v)) {
            Ok(ToolCall::Await(a)) => Ok(a.timeout_secs),
            Ok(other) => panic!("{other:?}"),
            Err(e) => Err(e),
        };
        assert_eq!(t(json!({})), Ok(AWAIT_DEFAULT_SECS));
        assert_eq!(t(json!({"timeoutSecs": null})), Ok(AWAIT_DEFAULT_SECS));
        assert_eq!(t(json!({"timeoutSecs": 0})), Ok(0));
        assert_eq!(t(json!({"timeoutSecs": 7.9})), Ok(7));
        assert_eq!(t(json!({"timeoutSecs": "12"})), Ok(12));
        assert_eq!(t(json!({"timeoutSecs": 3600})), Ok(AWAIT_MAX_SECS));
        assert_eq!(t(json!({"timeoutSecs": u64::MAX})), Ok(AWAIT_MAX_SECS));
        assert!(t(json!({"timeoutSecs": -1})).is_err());
        assert!(t(json!({"timeoutSecs": "soon"})).is_err());
        assert!(t(json!({"timeoutSecs": true})).is_err());
        assert_eq!(
            parse_call("await", Some(&json!({"replyTo":"r","kind":"result"}))).unwrap(),
            ToolCall::Await(AwaitCall {
                reply_to: Some("r".into()),
                kind: Some("result".into()),
                timeout_secs: AWAIT_DEFAULT_SECS
            })
        );
        assert!(parse_call("await", Some(&json!({"replyTo":""}))).is_err());
    }

    #[test]
    fn status_arguments() {
        assert_eq!(
            parse_call("status", Some(&json!({"id":"m1"}))),
            Ok(ToolCall::Status(StatusCall {
                id: "m1".into(),
                wait_for: None,
                timeout_secs: AWAIT_DEFAULT_SECS
            }))
        );
        assert_eq!(
            parse_call(
                "status",
                Some(&json!({"id":"m1","waitFor":"acked","timeoutSecs":3600}))
            ),
            Ok(ToolCall::Status(StatusCall {
                id: "m1".into(),
                wait_for: Some(WaitFor::Acked),
                timeout_secs: AWAIT_MAX_SECS
            }))
        );
        for (args, needle) in [
            (json!({}), "id is required"),
            (json!({"id":""}), "id must not be empty"),
            (
                json!({"id":"m","waitFor":"read"}),
                "waitFor must be one of delivered, acked, forwarded",
            ),
            (
                json!({"id":"m","timeoutSecs":5}),
                "timeoutSecs needs waitFor",
            ),
            (
                json!({"id":"m","waitFor":"acked","timeoutSecs":-1}),
                "timeoutSecs",
            ),
        ] {
            match parse_call("status", Some(&args)) {
                Err(ToolArgError::BadArgs(m)) => assert!(m.contains(needle), "{args}: {m}"),
                other => panic!("{args}: {other:?}"),
            }
        }
        // The schema offers exactly the stages the hub takes.
        let l = list();
        let st = l["tools"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == "status")
            .unwrap();
        assert_eq!(
            st["inputSchema"]["properties"]["waitFor"]["enum"],
            json!(["delivered", "acked", "forwarded"])
        );
        assert_eq!(st["inputSchema"]["required"], json!(["id"]));
    }

    #[test]
    fn unknown_tools_and_argless_tools() {
        assert_eq!(
            parse_call("nope", None),
            Err(ToolArgError::UnknownTool("nope".into()))
        );
        assert_eq!(
            parse_call("nope", Some(&json!(3))),
            Err(ToolArgError::UnknownTool("nope".into()))
        );
        assert_eq!(parse_call("who", None), Ok(ToolCall::Who));
        assert_eq!(
            parse_call("whoami", Some(&json!({"extra":1}))),
            Ok(ToolCall::Whoami)
        );
    }
}
