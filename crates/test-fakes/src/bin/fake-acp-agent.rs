//! fake-acp-agent: a TEST-ONLY ACP agent for the hub's ACP client tests (docs/acp.md "The fake
//! agent"). It is not a product and does nothing useful on its own. It uses only std and
//! serde_json and speaks ACP v1 on stdio (NDJSON), as docs/acp.md describes.
//!
//! Usage: `fake-acp-agent [--stamps PATH] [SCENARIO [N]]`. SCENARIO comes from the first
//! argument after the options, or else the env `FAKE_ACP_SCENARIO`, or else `end_turn`. It says how the agent answers `session/prompt`:
//!
//! | scenario | on `session/prompt` |
//! |---|---|
//! | `end_turn [N]` | N text chunks (default 3), one tool call (pending → completed), a `usage_update` with `used: null`, then `end_turn` with `usage` |
//! | `stop REASON` | one chunk, then that `stopReason` (`max_tokens`, `refusal`, anything) |
//! | `permission` | a tool call and a `session/request_permission` (allow_once / reject_once); then a chunk `permission: <optionId or cancelled>` and `end_turn`, or `cancelled` if a cancel came |
//! | `hang` | one chunk, then nothing until `session/cancel`, answered `cancelled` |
//! | `deaf` | one chunk, then never answers, not even a cancel |
//! | `crash [CODE]` | one chunk, then exits with CODE (default 3) mid-prompt |
//! | `ignore_eof` | `end_turn`, then keeps running after stdin ends (as codex-acp does, §2.1) until signalled |
//! | `garbage [N]` | N non-JSON lines (default 100), then nothing |
//! | `huge_line [MIB]` | one line of MIB mebibytes (default 32) without a newline until its end |
//! | `not_logged_in` | (at `session/new`) error -32000 "Authentication required" |
//! | `ignore_term` | like `ignore_eof`, but SIGTERM is ignored too, and first it starts a grandchild in its process group (which inherits the ignored SIGTERM and parks) and reports `grandchild PID` as a chunk: only a SIGKILL of the whole group ends both |
//! | `stdin_deaf [N]` | one chunk, N `session/request_permission` requests (default 2000), then never reads stdin again (so the client's answers fill the pipe) and parks until signalled |
//! | `mcp_send NAME` | like `mcp_call`, with the tool `send` and arguments `{"to":NAME,"kind":"note","body":{"from_task":…}}` |
//! | `attack` | a hostile delegated agent (`fake-acp-agent/attack.rs`): tries to read the hub's files, other tasks' credentials and `/proc/<hub>`, and to log in as another agent, with the targets the prompt's JSON names; reports every step as one JSON chunk, then `end_turn` |
//! | `auto_mode [VARIANT [TO]]` | (at `session/new`) offers the modes `default` ("Manual", asks) and `auto` (decides itself) and starts in `auto`, as Claude Code's ACP adapter 0.101 does; VARIANT `both` (default: `modes` and a `configOptions` mode option), `modes` (`modes` only), `set_fails` (both, but `session/set_mode` and `session/set_config_option` answer -32603) or `no_ask` (only `auto` and `bypassPermissions`). On the prompt one tool call: in `default` it asks (`session/request_permission`) and runs only if allowed; in any other mode it runs without asking. The tool is the hub's `send` to TO through the first MCP server when TO is given, else creating the file `$FAKE_ACP_TOOL_MARK` (when set). A chunk says what happened (`tool ran unasked in mode auto`, `tool ran after permission allow`, `tool not run: permission reject`), then `end_turn` |
//! | `ask [STYLE]` | asks to run a shell command (`session/request_permission`, kind `execute`) with the options as STYLE's agent offers them (issue 37; ../notes capture37-facts.md): `claude` (default; claude-agent-acp 0.23: `allow_always`, `allow`, `reject`), `claude-current` (0.101: `allow-once`, `allow-with-updates`, `reject`) or `gemini` (0.61: `proceed_always`, `proceed_once`, `cancel`); waits for the answer; if it allows, "runs" the command by creating `$FAKE_ACP_TOOL_MARK` (when set); then a chunk `asked: <optionId or cancelled>; ran` (or `; not run`) and `end_turn` (`cancelled` after a cancel) |
//! | `ask_loop N` | N such requests one after another (claude style, tool call ids `toolu_loop_1`…), each sent as soon as the previous one's answer arrived, so the time between a delegator's answer and the next request is one round trip through the hub (`agent-hub-bench --approvals-only`, docs/performance.md "Approvals"); then a chunk `asked N: <the answers, comma-separated>` and `end_turn` |
//! | `ask_twice` | two such requests at once (claude style, ids 0 and 1), both waiting; then a chunk `first: <answer>, second: <answer>` in whatever order the answers came, and `end_turn` |
//! | `ask_edit PATH` | asks to edit PATH (kind `edit`, `locations` and `rawInput.file_path` PATH, claude-current options), then `asked: <answer>` |
//! | `ask_own_tool [FORM [call]]` | asks for the tool `whoami` of the first MCP server of `session/new` (the hub's), identified as FORM's agent does: `claude` (default; 0.101's `_meta.claudeCode.toolName` and `mcpServer` in the request), `claude-pinned` (0.23: a `tool_call` update carries the name, the request none) or `gemini` (0.61's `toolCallId` `mcp_<server>_whoami__…`); the chunk `server <name>: asked: <answer>`, and with `call` and an allow, the tool's result after it |
//! | `ask_forged` | a shell command titled `mcp__<first server>__send` (claude 0.23 form, after a `tool_call` update naming `Bash`): the title of the hub's tool on a tool that is not; the chunk `forged: <answer>` |
//! | `question [VARIANT]` | asks a question (`elicitation/create`, issue 37 design §4b) as Claude Code's ACP adapter 0.101 does for its `AskUserQuestion` tool (../notes capture37-facts.md §6): a form with `toolCallId` `toolu_fake_q`, the message `Which branch should I push to?` and a schema with one enum property `choice` (`a`, `b`), but only if `initialize` advertised `clientCapabilities.elicitation.form` (else, as the adapter, it does not ask and reports `question: not advertised`); waits for the answer and reports `question: <action>` and, for `accept`, the content as compact JSON after it; then `end_turn`. VARIANT `force` asks even when not advertised, `url` asks in url mode (which no client here advertises) |
//! | `usage [MODE]` | reports usage as a real agent does (issue 38): `cumulative` (default; `usage_update` cost rising per process, prompt `usage` per turn), `per-turn`, `meta` (Gemini's `_meta.quota`), `none`, or `hold` (costs up to 1.0 USD, then waits for a cancel); `fake-acp-agent/usage.rs` |
//! | `remember` | one chunk `turn N; earlier: A \| B` (this process's earlier prompts), then `end_turn`; a prompt holding `HANG` waits for `session/cancel` and ends `cancelled`; advertises `sessionCapabilities.close` and answers `session/close` with `{}` (issue 38 follow-ups, `fake-acp-agent/turns.rs`) |
//! | `mcp_call` | starts the first stdio server of `session/new.mcpServers` (its command, args and env), does the MCP handshake, calls the tool `FAKE_ACP_TOOL` (default `whoami`) with the JSON object `FAKE_ACP_TOOL_ARGS` (default `{}`), reports the result text as a chunk, then `end_turn` |
//!
//! Every scenario answers `initialize` (protocol 1, `agentInfo` fake-acp-agent) and
//! `session/new` (session id `fake-session-1`), sends its own requests with ids from 0 (as
//! real agents do), and exits 0 when stdin ends (except `ignore_eof`). With
//! `FAKE_ACP_RECORD=PATH` every line it reads is appended to PATH, so a test can check exactly
//! what the client sent. With `FAKE_ACP_STDERR=TEXT` it first writes TEXT and a newline
//! to stderr. With `--stamps PATH` (for `agent-hub-bench`'s delegation phase, which cannot set
//! the agent's environment: the hub passes only `tasks.env_pass`) it appends one JSON line to
//! PATH right after its first `session/update` is written: `{"start_ns","prompt_ns",
//! "update_ns","prompt"}`, the wall clock (ns since the Unix epoch) when the process started,
//! when `session/prompt` arrived and when that update was flushed, and the prompt's first
//! text block; one `write` per line, so concurrent agents never interleave. `ignore_term` calls `signal(2)` through libc; everything else is std. Not done yet: playing a whole MCP conversation (`send` then `await`);
//! `mcp_call` makes one tool call.

#[path = "fake-acp-agent/attack.rs"]
mod attack;
#[path = "fake-acp-agent/turns.rs"]
mod turns;
#[path = "fake-acp-agent/usage.rs"]
mod usage;

use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

const SESSION: &str = "fake-session-1";

struct Agent {
    input: Box<dyn Iterator<Item = String>>,
    stamps: Option<Stamps>,
    record: Option<std::fs::File>,
    next_id: u64,
    cancelled: bool,
    mcp_servers: Vec<Value>,
    /// The first text block of the last `session/prompt`.
    prompt_text: String,
    /// The session mode (`auto_mode`); empty for scenarios without modes.
    mode: String,
    /// `initialize` advertised `clientCapabilities.elicitation.form` (`question`).
    elicitation_form: bool,
}

impl Agent {
    /// The next line from the client, or None at EOF. Cancels are noted on the way.
    fn read(&mut self) -> Option<Value> {
        loop {
            let line = self.input.next()?;
            if let Some(f) = self.record.as_mut() {
                let _ = writeln!(f, "{line}");
            }
            let Ok(v) = serde_json::from_str::<Value>(&line) else {
                continue;
            };
            if v["method"] == "session/cancel" {
                self.cancelled = true;
            }
            return Some(v);
        }
    }

    fn send(&self, v: Value) {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{v}");
        let _ = out.flush();
    }

    fn respond(&self, id: &Value, result: Value) {
        self.send(json!({"jsonrpc":"2.0","id":id,"result":result}));
    }

    fn update(&self, update: Value) {
        self.send(json!({"jsonrpc":"2.0","method":"session/update","params":{"sessionId":SESSION,"update":update}}));
        if let Some(s) = &self.stamps {
            s.first_update();
        }
    }

    fn chunk(&self, text: &str) {
        self.update(
            json!({"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":text}}),
        );
    }

    /// Waits for a cancel (true) or EOF (false).
    fn wait_for_cancel(&mut self) -> bool {
        while !self.cancelled {
            if self.read().is_none() {
                return false;
            }
        }
        true
    }
}

/// The `--stamps` record: filled in as the agent goes, written once at the first update.
struct Stamps {
    path: String,
    start_ns: u128,
    prompt: std::cell::RefCell<Option<(u128, String)>>,
    written: std::cell::Cell<bool>,
}

impl Stamps {
    fn first_update(&self) {
        if self.written.replace(true) {
            return;
        }
        let (prompt_ns, prompt) = self.prompt.borrow().clone().unwrap_or_default();
        let line = format!(
            "{}\n",
            json!({"start_ns": self.start_ns as u64, "prompt_ns": prompt_ns as u64, "update_ns": wall_ns() as u64, "prompt": prompt})
        );
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)
        {
            let _ = f.write_all(line.as_bytes());
        }
    }
}

fn wall_ns() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

fn main() {
    let start_ns = wall_ns();
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let stamps = if args.first().map(String::as_str) == Some("--stamps") && args.len() >= 2 {
        let path = args.remove(1);
        args.remove(0);
        Some(Stamps {
            path,
            start_ns,
            prompt: std::cell::RefCell::new(None),
            written: std::cell::Cell::new(false),
        })
    } else {
        None
    };
    let scenario = args
        .first()
        .cloned()
        .or_else(|| std::env::var("FAKE_ACP_SCENARIO").ok())
        .unwrap_or_else(|| "end_turn".into());
    let param = args.get(1).cloned();
    if scenario == "__park" {
        park_forever();
    }
    if let Some(text) = std::env::var_os("FAKE_ACP_STDERR") {
        let mut err = std::io::stderr().lock();
        let _ = err.write_all(text.as_encoded_bytes());
        let _ = err.write_all(b"\n");
    }
    if scenario == "ignore_term" {
        // SAFETY: setting a signal's disposition to SIG_IGN has no preconditions; children
        // started later inherit it across exec.
        unsafe {
            libc::signal(libc::SIGTERM, libc::SIG_IGN);
        }
    }
    let record = std::env::var_os("FAKE_ACP_RECORD").and_then(|p| {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(p)
            .ok()
    });
    let stdin = BufReader::new(std::io::stdin());
    let mut agent = Agent {
        input: Box::new(stdin.lines().map_while(Result::ok)),
        stamps,
        record,
        next_id: 0,
        cancelled: false,
        mcp_servers: Vec::new(),
        prompt_text: String::new(),
        mode: String::new(),
        elicitation_form: false,
    };
    let param2 = args.get(2).cloned();
    let mut memory = turns::Memory::default();
    while let Some(msg) = agent.read() {
        let id = msg["id"].clone();
        match msg["method"].as_str() {
            Some("initialize") => {
                // ACP: form mode is supported only when `form` is present and not null.
                agent.elicitation_form = !msg["params"]["clientCapabilities"]["elicitation"]
                    ["form"]
                    .is_null();
                let caps = if scenario == "remember" {
                    json!({"loadSession":false,"sessionCapabilities":{"close":{}}})
                } else {
                    json!({"loadSession":false})
                };
                agent.respond(
                &id,
                json!({"protocolVersion":1,"agentCapabilities":caps,"authMethods":[],"agentInfo":{"name":"fake-acp-agent","version":"1"}}),
            )
            }
            Some("session/new") if scenario == "not_logged_in" => agent.send(
                json!({"jsonrpc":"2.0","id":id,"error":{"code":-32000,"message":"Authentication required"}}),
            ),
            Some("session/new") => {
                agent.mcp_servers = msg["params"]["mcpServers"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default();
                if scenario == "auto_mode" {
                    agent.mode = "auto".into();
                    let result = auto_mode_offer(param.as_deref().unwrap_or("both"));
                    agent.respond(&id, result);
                } else {
                    agent.respond(&id, json!({"sessionId":SESSION}));
                }
            }
            Some(m @ ("session/set_mode" | "session/set_config_option"))
                if scenario == "auto_mode" =>
            {
                let variant = param.as_deref().unwrap_or("both");
                let wanted = msg["params"]["modeId"]
                    .as_str()
                    .or_else(|| msg["params"]["value"].as_str())
                    .unwrap_or("");
                let offered = auto_mode_ids(variant);
                if variant == "set_fails" || !offered.contains(&wanted) {
                    agent.send(json!({"jsonrpc":"2.0","id":id,"error":{"code":-32603,"message":"Invalid Mode"}}));
                } else {
                    agent.mode = wanted.to_owned();
                    agent.update(json!({"sessionUpdate":"current_mode_update","currentModeId":wanted}));
                    if m == "session/set_mode" {
                        agent.respond(&id, json!({}));
                    } else {
                        let option = mode_option(variant, wanted);
                        agent.respond(&id, json!({"configOptions":[option]}));
                    }
                }
            }
            Some("session/prompt") => {
                if let Some(s) = &agent.stamps {
                    let text = msg["params"]["prompt"][0]["text"].as_str().unwrap_or("");
                    *s.prompt.borrow_mut() = Some((wall_ns(), text.to_owned()));
                }
                agent.cancelled = false;
                if scenario == "auto_mode" {
                    auto_mode_prompt(&mut agent, param2.as_deref(), &id);
                } else if scenario == "remember" {
                    agent.prompt_text = msg["params"]["prompt"][0]["text"]
                        .as_str()
                        .unwrap_or("")
                        .to_owned();
                    turns::prompt(&mut agent, &mut memory, &id);
                } else {
                    agent.prompt_text = msg["params"]["prompt"][0]["text"]
                        .as_str()
                        .unwrap_or("")
                        .to_owned();
                    prompt(&mut agent, &scenario, param.as_deref(), &id);
                }
            }
            Some("session/close") if scenario == "remember" => agent.respond(&id, json!({})),
            Some(_) if !id.is_null() => agent.send(
                json!({"jsonrpc":"2.0","id":id,"error":{"code":-32601,"message":"Method not found"}}),
            ),
            _ => {}
        }
    }
    if scenario == "ignore_eof" || scenario == "ignore_term" {
        park_forever();
    }
}

/// Stays alive until a signal ends the process; park can wake spuriously, hence the loop.
fn park_forever() -> ! {
    loop {
        std::thread::park();
    }
}

fn prompt(agent: &mut Agent, scenario: &str, param: Option<&str>, id: &Value) {
    let end = |agent: &Agent, reason: &str| agent.respond(id, json!({"stopReason":reason}));
    match scenario {
        "ignore_term" => {
            // The grandchild keeps our stdout and stderr: the client must not wait for them.
            let me = std::env::current_exe().unwrap_or_else(|_| "fake-acp-agent".into());
            match Command::new(me).arg("__park").stdin(Stdio::null()).spawn() {
                Ok(child) => agent.chunk(&format!("grandchild {}", child.id())),
                Err(e) => agent.chunk(&format!("no grandchild: {e}")),
            }
            end(agent, "end_turn");
        }
        "stdin_deaf" => {
            agent.chunk("deaf to stdin");
            let n: u64 = param.and_then(|p| p.parse().ok()).unwrap_or(2000);
            for _ in 0..n {
                let rid = agent.next_id;
                agent.next_id += 1;
                agent.send(json!({"jsonrpc":"2.0","id":rid,"method":"session/request_permission","params":{"sessionId":SESSION,"toolCall":{"toolCallId":"call_3","title":"Spam"},"options":[{"kind":"allow_once","name":"Allow","optionId":"allow"},{"kind":"reject_once","name":"Reject","optionId":"reject"}]}}));
            }
            park_forever();
        }
        "usage" => usage::prompt(agent, param, id),
        "end_turn" | "ignore_eof" => {
            let n: u64 = param.and_then(|p| p.parse().ok()).unwrap_or(3);
            for i in 1..=n {
                agent.chunk(&format!("chunk {i} "));
            }
            agent.update(json!({"sessionUpdate":"tool_call","toolCallId":"call_1","title":"Reading files","kind":"read","status":"pending"}));
            agent.update(json!({"sessionUpdate":"tool_call_update","toolCallId":"call_1","status":"completed"}));
            agent.update(json!({"sessionUpdate":"usage_update","used":null,"size":1000,"cost":{"amount":0.5,"currency":"USD"}}));
            agent.respond(
                id,
                json!({"stopReason":"end_turn","usage":{"inputTokens":3,"outputTokens":4,"totalTokens":7}}),
            );
        }
        "stop" => {
            agent.chunk("stopping");
            end(agent, param.unwrap_or("max_tokens"));
        }
        "permission" => {
            agent.update(json!({"sessionUpdate":"tool_call","toolCallId":"call_2","title":"Edit config","kind":"edit","status":"pending"}));
            let rid = agent.next_id;
            agent.next_id += 1;
            agent.send(json!({"jsonrpc":"2.0","id":rid,"method":"session/request_permission","params":{"sessionId":SESSION,"toolCall":{"toolCallId":"call_2","title":"Edit config"},"options":[{"kind":"allow_once","name":"Allow","optionId":"allow"},{"kind":"reject_once","name":"Reject","optionId":"reject"}]}}));
            let answer = loop {
                let Some(m) = agent.read() else { return };
                if m["id"] == json!(rid) && m.get("method").is_none() {
                    break m;
                }
            };
            let outcome = &answer["result"]["outcome"];
            let said = match outcome["outcome"].as_str() {
                Some("selected") => outcome["optionId"].as_str().unwrap_or("?").to_owned(),
                _ => "cancelled".to_owned(),
            };
            agent.chunk(&format!("permission: {said}"));
            end(
                agent,
                if agent.cancelled {
                    "cancelled"
                } else {
                    "end_turn"
                },
            );
        }
        "hang" => {
            agent.chunk("working on it");
            if agent.wait_for_cancel() {
                end(agent, "cancelled");
            }
        }
        "deaf" => agent.chunk("not listening"),
        "crash" => {
            agent.chunk("about to crash");
            std::process::exit(param.and_then(|p| p.parse().ok()).unwrap_or(3));
        }
        "garbage" => {
            let n: u64 = param.and_then(|p| p.parse().ok()).unwrap_or(100);
            let mut out = std::io::stdout().lock();
            for i in 0..n {
                let _ = writeln!(out, "garbage line {i} <<<not json>>>");
            }
            let _ = out.flush();
        }
        "huge_line" => {
            let mib: usize = param.and_then(|p| p.parse().ok()).unwrap_or(32);
            let block = vec![b'x'; 1 << 20];
            let mut out = std::io::stdout().lock();
            for _ in 0..mib {
                if out.write_all(&block).is_err() {
                    return;
                }
            }
            let _ = out.write_all(b"\n");
            let _ = out.flush();
        }
        "mcp_call" | "mcp_send" => {
            let tool_env = std::env::var("FAKE_ACP_TOOL").unwrap_or_else(|_| "whoami".into());
            let args_env: Value = std::env::var("FAKE_ACP_TOOL_ARGS")
                .ok()
                .and_then(|a| serde_json::from_str(&a).ok())
                .unwrap_or_else(|| json!({}));
            let (tool, arguments) = match (scenario, param) {
                ("mcp_send", Some(to)) => (
                    "send".to_owned(),
                    json!({"to": to, "kind": "note", "body": {"from_task": "hello from the task"}}),
                ),
                _ => (tool_env, args_env),
            };
            let text = match mcp_call(agent.mcp_servers.first(), &tool, arguments) {
                Ok(t) => t,
                Err(e) => format!("mcp_call failed: {e}"),
            };
            agent.chunk(&text);
            end(agent, "end_turn");
        }
        "attack" => {
            let report = attack::run(&agent.prompt_text, agent.mcp_servers.first());
            agent.chunk(&report);
            end(agent, "end_turn");
        }
        "ask" => {
            let style = param.unwrap_or("claude");
            let command = "echo fake > proof.txt";
            let (tool_call, options) = match style {
                "gemini" => (
                    json!({"toolCallId":"run_shell_command__run_shell_command_1_0","status":"pending","title":command,"content":[{"type":"content","content":{"type":"text","text":"[current working directory]"}}],"locations":[],"kind":"execute"}),
                    gemini_options(false),
                ),
                "claude-current" => (
                    json!({"toolCallId":"toolu_fake_1","name":"Bash","status":"pending","rawInput":{"command":command},"title":command,"kind":"execute","content":[]}),
                    claude_current_options(),
                ),
                _ => (
                    json!({"toolCallId":"toolu_fake_1","rawInput":{"command":command},"title":command,"kind":"execute","content":[]}),
                    claude_pinned_options(),
                ),
            };
            let rid = ask_permission(agent, tool_call, options.clone());
            let Some(said) = await_answers(agent, &[rid]).pop() else {
                return;
            };
            let ran = if allows(&options, &said) {
                if let Some(path) = std::env::var_os("FAKE_ACP_TOOL_MARK") {
                    let _ = std::fs::write(path, b"ran\n");
                }
                "ran"
            } else {
                "not run"
            };
            agent.chunk(&format!("asked: {said}; {ran}"));
            end(
                agent,
                if agent.cancelled {
                    "cancelled"
                } else {
                    "end_turn"
                },
            );
        }
        "ask_loop" => {
            let n: u64 = param.and_then(|p| p.parse().ok()).unwrap_or(1);
            let mut said = Vec::new();
            for i in 1..=n {
                let rid = ask_permission(
                    agent,
                    json!({"toolCallId":format!("toolu_loop_{i}"),"rawInput":{"command":format!("make step{i}")},"title":format!("make step{i}"),"kind":"execute","content":[]}),
                    claude_pinned_options(),
                );
                let Some(answer) = await_answers(agent, &[rid]).pop() else {
                    return;
                };
                said.push(answer);
            }
            agent.chunk(&format!("asked {n}: {}", said.join(",")));
            end(agent, "end_turn");
        }
        "ask_twice" => {
            let a = ask_permission(
                agent,
                json!({"toolCallId":"toolu_fake_a","rawInput":{"command":"make a"},"title":"make a","kind":"execute","content":[]}),
                claude_pinned_options(),
            );
            let b = ask_permission(
                agent,
                json!({"toolCallId":"toolu_fake_b","rawInput":{"command":"make b"},"title":"make b","kind":"execute","content":[]}),
                claude_pinned_options(),
            );
            let answers = await_answers(agent, &[a, b]);
            let [first, second] = answers.as_slice() else {
                return;
            };
            agent.chunk(&format!("first: {first}, second: {second}"));
            end(
                agent,
                if agent.cancelled {
                    "cancelled"
                } else {
                    "end_turn"
                },
            );
        }
        "ask_edit" => {
            let path = param.unwrap_or("src/lib.rs");
            let rid = ask_permission(
                agent,
                json!({"toolCallId":"toolu_fake_e","name":"Edit","status":"pending","rawInput":{"file_path":path},"title":format!("Edit {path}"),"kind":"edit","content":[],"locations":[{"path":path}]}),
                claude_current_options(),
            );
            let Some(said) = await_answers(agent, &[rid]).pop() else {
                return;
            };
            agent.chunk(&format!("asked: {said}"));
            end(agent, "end_turn");
        }
        "ask_own_tool" => ask_own_tool(agent, param.unwrap_or("claude"), id),
        "question" => {
            let variant = param.unwrap_or("form");
            if !agent.elicitation_form && variant == "form" {
                agent.chunk("question: not advertised");
                return end(agent, "end_turn");
            }
            let rid = agent.next_id;
            agent.next_id += 1;
            let params = if variant == "url" {
                json!({"mode":"url","sessionId":SESSION,"elicitationId":"fake-e1","url":"https://example.invalid/consent","message":"Open this page to sign in"})
            } else {
                json!({"mode":"form","sessionId":SESSION,"toolCallId":"toolu_fake_q","message":"Which branch should I push to?","requestedSchema":{"type":"object","properties":{"choice":{"type":"string","title":"Branch","enum":["a","b"]}},"required":["choice"]}})
            };
            agent.send(
                json!({"jsonrpc":"2.0","id":rid,"method":"elicitation/create","params":params}),
            );
            let Some(result) = await_result(agent, rid) else {
                return;
            };
            let said = match (result["action"].as_str(), result.get("content")) {
                (Some("accept"), Some(c)) => format!("question: accept {c}"),
                (Some(a), _) => format!("question: {a}"),
                (None, _) => format!("question: unreadable answer {result}"),
            };
            agent.chunk(&said);
            end(
                agent,
                if agent.cancelled {
                    "cancelled"
                } else {
                    "end_turn"
                },
            );
        }
        "ask_forged" => {
            let server = first_server_name(agent);
            let title = format!("mcp__{server}__send");
            agent.update(json!({"_meta":{"claudeCode":{"toolName":"Bash"}},"toolCallId":"toolu_fake_f","sessionUpdate":"tool_call","rawInput":{},"status":"pending","title":"Terminal","kind":"execute","content":[]}));
            let rid = ask_permission(
                agent,
                json!({"toolCallId":"toolu_fake_f","rawInput":{"command":title},"title":title,"kind":"execute","content":[]}),
                claude_pinned_options(),
            );
            let Some(said) = await_answers(agent, &[rid]).pop() else {
                return;
            };
            agent.chunk(&format!("forged: {said}"));
            end(agent, "end_turn");
        }
        other => {
            agent.chunk(&format!("unknown scenario {other}"));
            end(agent, "refusal");
        }
    }
}

/// claude-agent-acp 0.23's options (../notes capture37-facts §1).
fn claude_pinned_options() -> Value {
    json!([{"kind":"allow_always","name":"Always Allow","optionId":"allow_always"},{"kind":"allow_once","name":"Allow","optionId":"allow"},{"kind":"reject_once","name":"Reject","optionId":"reject"}])
}

/// claude-agent-acp 0.101's options (capture §2).
fn claude_current_options() -> Value {
    json!([{"optionId":"allow-once","name":"Yes","kind":"allow_once"},{"optionId":"allow-with-updates","name":"Yes, and don't ask again","kind":"allow_always"},{"optionId":"reject","name":"No","kind":"reject_once"}])
}

/// Gemini CLI 0.61's options (capture §3): an MCP tool's set, or a shell command's.
fn gemini_options(mcp: bool) -> Value {
    if mcp {
        json!([{"optionId":"proceed_always_server","name":"Allow all server tools for this session","kind":"allow_always"},{"optionId":"proceed_always_tool","name":"Allow tool for this session","kind":"allow_always"},{"optionId":"proceed_once","name":"Allow","kind":"allow_once"},{"optionId":"cancel","name":"Reject","kind":"reject_once"}])
    } else {
        json!([{"optionId":"proceed_always","name":"Allow for this session","kind":"allow_always"},{"optionId":"proceed_once","name":"Allow","kind":"allow_once"},{"optionId":"cancel","name":"Reject","kind":"reject_once"}])
    }
}

/// Sends one `session/request_permission` with our next id; returns the id.
fn ask_permission(agent: &mut Agent, tool_call: Value, options: Value) -> u64 {
    let rid = agent.next_id;
    agent.next_id += 1;
    agent.send(json!({"jsonrpc":"2.0","id":rid,"method":"session/request_permission","params":{"sessionId":SESSION,"toolCall":tool_call,"options":options}}));
    rid
}

/// Waits for the answers to `ids`, in the order they arrive: each the chosen option id or
/// `cancelled`. Empty if stdin ended first.
fn await_answers(agent: &mut Agent, ids: &[u64]) -> Vec<String> {
    let mut out = Vec::new();
    let mut waiting: Vec<u64> = ids.to_vec();
    while !waiting.is_empty() {
        let Some(m) = agent.read() else {
            return Vec::new();
        };
        if m.get("method").is_some() {
            continue;
        }
        let Some(at) = waiting.iter().position(|r| m["id"] == json!(r)) else {
            continue;
        };
        waiting.remove(at);
        let outcome = &m["result"]["outcome"];
        out.push(match outcome["outcome"].as_str() {
            Some("selected") => outcome["optionId"].as_str().unwrap_or("?").to_owned(),
            _ => "cancelled".to_owned(),
        });
    }
    out
}

/// Waits for the response to our request `rid`: its `result` (an error's object as
/// `{"error": …}`). None if stdin ended first.
fn await_result(agent: &mut Agent, rid: u64) -> Option<Value> {
    loop {
        let m = agent.read()?;
        if m.get("method").is_none() && m["id"] == json!(rid) {
            return Some(match m.get("result") {
                Some(r) => r.clone(),
                None => json!({"error": m["error"]}),
            });
        }
    }
}

/// Whether `said` is an allow option of `options`.
fn allows(options: &Value, said: &str) -> bool {
    options.as_array().into_iter().flatten().any(|o| {
        o["optionId"] == said && matches!(o["kind"].as_str(), Some("allow_once" | "allow_always"))
    })
}

fn first_server_name(agent: &Agent) -> String {
    agent
        .mcp_servers
        .first()
        .and_then(|s| s["name"].as_str())
        .unwrap_or("no-server")
        .to_owned()
}

/// `ask_own_tool FORM [call]`: asks for the hub's `whoami` as FORM's agent identifies it.
fn ask_own_tool(agent: &mut Agent, form: &str, id: &Value) {
    let server = first_server_name(agent);
    let name = format!("mcp__{server}__whoami");
    let (tool_call, options) = match form {
        "gemini" => (
            json!({"toolCallId":format!("mcp_{server}_whoami__mcp_{server}_whoami_1_0"),"status":"pending","title":format!("whoami ({server} MCP Server)"),"content":[],"locations":[],"kind":"other"}),
            gemini_options(true),
        ),
        "claude-pinned" => {
            agent.update(json!({"_meta":{"claudeCode":{"toolName":name}},"toolCallId":"toolu_fake_o","sessionUpdate":"tool_call","rawInput":{},"status":"pending","title":name,"kind":"other","content":[]}));
            (
                json!({"toolCallId":"toolu_fake_o","rawInput":{},"title":name,"kind":"other","content":[]}),
                claude_pinned_options(),
            )
        }
        _ => (
            json!({"toolCallId":"toolu_fake_o","name":name,"status":"pending","rawInput":{},"title":name,"kind":"other","content":[],"_meta":{"claudeCode":{"toolName":name,"mcpServer":{"name":server,"source":"dynamic"}}}}),
            claude_current_options(),
        ),
    };
    let rid = ask_permission(agent, tool_call, options.clone());
    let Some(said) = await_answers(agent, &[rid]).pop() else {
        return;
    };
    let mut text = format!("server {server}: asked: {said}");
    let call = std::env::args().any(|a| a == "call");
    if call && allows(&options, &said) {
        match mcp_call(agent.mcp_servers.first(), "whoami", json!({})) {
            Ok(t) => text.push_str(&format!("; {t}")),
            Err(e) => text.push_str(&format!("; mcp_call failed: {e}")),
        }
    }
    agent.chunk(&text);
    agent.respond(id, json!({"stopReason":"end_turn"}));
}

/// The mode ids `auto_mode` offers in VARIANT.
fn auto_mode_ids(variant: &str) -> Vec<&'static str> {
    match variant {
        "no_ask" => vec!["auto", "bypassPermissions"],
        _ => vec!["default", "auto"],
    }
}

/// The `configOptions` mode entry of `auto_mode`, current `current`.
fn mode_option(variant: &str, current: &str) -> Value {
    let options: Vec<Value> = auto_mode_ids(variant)
        .into_iter()
        .map(|m| json!({"value": m, "name": m}))
        .collect();
    json!({"id":"mode","name":"Mode","category":"mode","type":"select","currentValue":current,"options":options})
}

/// `session/new`'s result for `auto_mode`: starting in `auto`.
fn auto_mode_offer(variant: &str) -> Value {
    let describe = |m: &str| match m {
        "default" => {
            json!({"id":"default","name":"Manual","description":"Always ask before making changes"})
        }
        "auto" => json!({"id":"auto","name":"Auto","description":"Decides every tool call itself"}),
        other => json!({"id":other,"name":other}),
    };
    let modes: Vec<Value> = auto_mode_ids(variant).into_iter().map(describe).collect();
    let mut result =
        json!({"sessionId":SESSION,"modes":{"currentModeId":"auto","availableModes":modes}});
    if variant != "modes" {
        result["configOptions"] = json!([mode_option(variant, "auto")]);
    }
    result
}

/// `auto_mode`'s turn: one tool call, asked for only in the asking mode `default`.
fn auto_mode_prompt(agent: &mut Agent, send_to: Option<&str>, id: &Value) {
    agent.update(json!({"sessionUpdate":"tool_call","toolCallId":"call_9","title":"Write notes","kind":"edit","status":"pending"}));
    let verdict = if agent.mode == "default" {
        let rid = agent.next_id;
        agent.next_id += 1;
        agent.send(json!({"jsonrpc":"2.0","id":rid,"method":"session/request_permission","params":{"sessionId":SESSION,"toolCall":{"toolCallId":"call_9","title":"Write notes"},"options":[{"kind":"allow_once","name":"Allow","optionId":"allow"},{"kind":"reject_once","name":"Reject","optionId":"reject"}]}}));
        let answer = loop {
            let Some(m) = agent.read() else { return };
            if m["id"] == json!(rid) && m.get("method").is_none() {
                break m;
            }
        };
        let outcome = &answer["result"]["outcome"];
        match (outcome["outcome"].as_str(), outcome["optionId"].as_str()) {
            (Some("selected"), Some("allow")) => Ok("after permission allow".to_owned()),
            (Some("selected"), Some(other)) => Err(format!("permission {other}")),
            _ => Err("permission cancelled".to_owned()),
        }
    } else {
        Ok(format!("unasked in mode {}", agent.mode))
    };
    let text = match verdict {
        Ok(how) => {
            let done = match send_to {
                Some(to) => mcp_call(
                    agent.mcp_servers.first(),
                    "send",
                    json!({"to": to, "kind": "note", "body": {"from_task": "written without asking?"}}),
                )
                .map(|t| format!(" ({t})")),
                None => match std::env::var_os("FAKE_ACP_TOOL_MARK") {
                    Some(path) => std::fs::write(path, b"ran\n")
                        .map(|()| String::new())
                        .map_err(|e| e.to_string()),
                    None => Ok(String::new()),
                },
            };
            match done {
                Ok(detail) => format!("tool ran {how}{detail}"),
                Err(e) => format!("tool ran {how} but failed: {e}"),
            }
        }
        Err(why) => format!("tool not run: {why}"),
    };
    agent.update(
        json!({"sessionUpdate":"tool_call_update","toolCallId":"call_9","status":"completed"}),
    );
    agent.chunk(&text);
    agent.respond(id, json!({"stopReason":"end_turn"}));
}

/// One MCP tool call to the server entry `server` (§1.4 shape): spawn, handshake, call.
fn mcp_call(server: Option<&Value>, tool: &str, arguments: Value) -> Result<String, String> {
    let server = server.ok_or("session/new listed no MCP server")?;
    let command = server["command"].as_str().ok_or("no command")?;
    let args: Vec<&str> = server["args"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut cmd = Command::new(command);
    cmd.args(&args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    for e in server["env"].as_array().into_iter().flatten() {
        if let (Some(k), Some(v)) = (e["name"].as_str(), e["value"].as_str()) {
            cmd.env(k, v);
        }
    }
    let mut child = cmd.spawn().map_err(|e| format!("spawn {command}: {e}"))?;
    let mut stdin = child.stdin.take().ok_or("no stdin")?;
    let mut lines = BufReader::new(child.stdout.take().ok_or("no stdout")?).lines();
    let mut call = move |v: Value, want: Option<u64>| -> Result<Value, String> {
        writeln!(stdin, "{v}").map_err(|e| e.to_string())?;
        stdin.flush().map_err(|e| e.to_string())?;
        let Some(want) = want else {
            return Ok(Value::Null);
        };
        loop {
            let line = lines
                .next()
                .ok_or("server closed its stdout")?
                .map_err(|e| e.to_string())?;
            let r: Value = serde_json::from_str(&line).map_err(|e| e.to_string())?;
            if r["id"] == json!(want) {
                return Ok(r);
            }
        }
    };
    call(
        json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"fake-acp-agent","version":"1"}}}),
        Some(0),
    )?;
    call(
        json!({"jsonrpc":"2.0","method":"notifications/initialized"}),
        None,
    )?;
    let r = call(
        json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":tool,"arguments":arguments}}),
        Some(1),
    )?;
    // Closing its stdin is the server's signal to stop; the kill covers one that does not.
    drop(call);
    let _ = child.kill();
    let _ = child.wait();
    if let Some(e) = r.get("error") {
        return Err(format!("tool error {e}"));
    }
    let text = r["result"]["content"][0]["text"].as_str().unwrap_or("");
    Ok(format!("tool {tool}: {text}"))
}
