//! Real agents' transcripts (docs/acp.md "How the agent's messages are answered"), replayed against
//! the session. Our request ids count from 0 where the probe's counted from 1; everything the
//! agents sent is as recorded, with the transcript's elisions (`…`) filled in with representative
//! values.

use super::*;

const A1_SID: &str = "a4966880a7260d3c323523dd81ffd745";

fn a1_upd(update: Value) -> String {
    json!({"method":"session/update","params":{"sessionId":A1_SID,"update":update}}).to_string()
}

/// A.1 up to the prompt: initialize and session/new as the example agent answered them.
fn a1_prompting(c: SessionConfig) -> Drive {
    let mut d = Drive::new(c);
    d.agent(r#"{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":1,"agentCapabilities":{"loadSession":false}}}"#);
    d.agent(&format!(
        r#"{{"jsonrpc":"2.0","id":1,"result":{{"sessionId":"{A1_SID}"}}}}"#
    ));
    d
}

/// The example agent's first turn, to its permission request.
fn a1_turn_to_permission(d: &mut Drive) {
    d.agent(&a1_upd(json!({"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"I'll help you with that. Let me start by reading some files to understand the current situation."}})));
    d.agent(&a1_upd(json!({"sessionUpdate":"tool_call","toolCallId":"call_1","title":"Reading project files","kind":"read","status":"pending","locations":[{"path":"/project/README.md"}],"rawInput":{"path":"/project/README.md"}})));
    d.agent(&a1_upd(json!({"sessionUpdate":"tool_call_update","toolCallId":"call_1","status":"completed","content":[{"type":"content","content":{"type":"text","text":"# My Project\n\nThis is a sample project..."}}],"rawOutput":{"content":"# My Project\n\nThis is a sample project..."}})));
    d.agent(&a1_upd(json!({"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":" Now I understand the project structure. I need to make some changes to improve it."}})));
    d.agent(&a1_upd(json!({"sessionUpdate":"tool_call","toolCallId":"call_2","title":"Modifying critical configuration file","kind":"edit","status":"pending","locations":[{"path":"/project/config.json"}],"rawInput":{"path":"/project/config.json","content":"{\"database\": {\"host\": \"new-host\"}}"}})));
    d.agent(&format!(r#"{{"jsonrpc":"2.0","id":0,"method":"session/request_permission","params":{{"sessionId":"{A1_SID}","toolCall":{{"toolCallId":"call_2","title":"Modifying critical configuration file","kind":"edit","status":"pending","locations":[{{"path":"/home/user/project/config.json"}}],"rawInput":{{"path":"/home/user/project/config.json","content":"{{\"database\": {{\"host\": \"new-host\"}}}}"}}}},"options":[{{"kind":"allow_once","name":"Allow this change","optionId":"allow"}},{{"kind":"reject_once","name":"Skip this change","optionId":"reject"}}]}}}}"#));
}

fn a1_finish_turn(d: &mut Drive) {
    d.agent(&a1_upd(json!({"sessionUpdate":"tool_call_update","toolCallId":"call_2","status":"completed","rawOutput":{"success":true,"message":"Configuration updated"}})));
    d.agent(&a1_upd(json!({"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":" Perfect! I've successfully updated the configuration."}})));
    d.agent(r#"{"jsonrpc":"2.0","id":2,"result":{"stopReason":"end_turn"}}"#);
}

#[test]
fn our_first_lines_are_exact() {
    let mut d = Drive::new(config());
    let sent = d.take_sent();
    assert_eq!(sent.len(), 1);
    assert_eq!(
        sent[0],
        json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{
            "protocolVersion":1,
            "clientCapabilities":{"fs":{"readTextFile":false,"writeTextFile":false},"terminal":false},
            "clientInfo":{"name":"agent-hub","title":"agent-hub","version":crate::VERSION}
        }})
    );
    d.agent(r#"{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":1}}"#);
    let sent = d.take_sent();
    assert_eq!(
        sent,
        [
            json!({"jsonrpc":"2.0","id":1,"method":"session/new","params":{
                "cwd":"/work/proj",
                "mcpServers":[{"name":"agent-hub","command":"/usr/local/bin/agent-hub","args":["mcp","--as","task-1"],"env":[{"name":"AGENT_HUB_TOKEN","value":SECRET}]}]
            }})
        ]
    );
    d.agent(&format!(
        r#"{{"jsonrpc":"2.0","id":1,"result":{{"sessionId":"{SID}"}}}}"#
    ));
    assert_eq!(
        d.take_sent(),
        [
            json!({"jsonrpc":"2.0","id":2,"method":"session/prompt","params":{
                "sessionId":SID,"prompt":[{"type":"text","text":"Please CALL_TOOL:echo now"}]
            }})
        ]
    );
    assert_eq!(d.s.session_id(), Some(SID));
    assert!(!d.s.has_outcome());
}

#[test]
fn a1_example_agent_end_turn_under_the_default_policy() {
    let mut d = a1_prompting(config());
    d.take_sent();
    a1_turn_to_permission(&mut d);
    // Default policy: reject, and the example agent offers reject_once.
    assert_eq!(
        d.take_sent(),
        [
            json!({"jsonrpc":"2.0","id":0,"result":{"outcome":{"outcome":"selected","optionId":"reject"}}})
        ]
    );
    a1_finish_turn(&mut d);
    let o = d.outcome();
    assert_eq!(completed(&o), &StopReason::EndTurn);
    assert_eq!(
        o.text,
        "I'll help you with that. Let me start by reading some files to understand the current situation.\n\n Now I understand the project structure. I need to make some changes to improve it.\n\n Perfect! I've successfully updated the configuration."
    );
    assert!(!o.truncated);
    assert_eq!(o.meter.tokens, None);
    let t = o.progress.tool_calls;
    assert_eq!((t.total, t.completed, t.pending), (2, 2, 0));
    assert_eq!(o.progress.permissions.asked, 1);
    assert_eq!(o.progress.permissions.rejected, 1);
    assert_eq!(o.progress.anomalies, 0);
    assert_eq!(o.progress.malformed_lines, 0);
    // Then the shutdown: stdin closed at once.
    let ev = d.take_events();
    assert!(matches!(ev.last(), Some(Event::CloseStdin)), "{ev:?}");
    d.assert_logs_clean("Please CALL_TOOL");
    // A.1: "stdin closed → agent exited in 0.0 s, rc 0".
    d.eof();
    d.exit(0);
    assert_eq!(
        d.take_events(),
        [Event::Signal(Signal::Kill), Event::Finished]
    );
    assert!(d.s.is_finished());
    assert_eq!(d.s.poll_timeout(), None);
}

#[test]
fn a1_example_agent_end_turn_under_the_allow_policy() {
    let mut c = config();
    c.permission = PermissionPolicy::Allow;
    let mut d = a1_prompting(c);
    d.take_sent();
    a1_turn_to_permission(&mut d);
    // The line the probe sent in A.1.
    assert_eq!(
        d.take_sent(),
        [
            json!({"jsonrpc":"2.0","id":0,"result":{"outcome":{"outcome":"selected","optionId":"allow"}}})
        ]
    );
    a1_finish_turn(&mut d);
    let o = d.outcome();
    assert_eq!(completed(&o), &StopReason::EndTurn);
    assert_eq!(o.progress.permissions.allowed, 1);
}

#[test]
fn a1_example_agent_cancel() {
    let mut d = a1_prompting(config());
    d.take_sent();
    d.agent(&a1_upd(json!({"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"I'll help you with that."}})));
    d.agent(&a1_upd(json!({"sessionUpdate":"tool_call","toolCallId":"call_1","title":"Reading project files","kind":"read","status":"pending"})));
    assert!(d.cancel());
    assert_eq!(
        d.take_sent(),
        [json!({"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":A1_SID}})]
    );
    assert!(
        !d.s.has_outcome(),
        "the outcome waits for the prompt to resolve"
    );
    d.agent(r#"{"jsonrpc":"2.0","id":2,"result":{"stopReason":"cancelled"}}"#);
    let o = d.outcome();
    assert_eq!(
        o.status,
        Status::Cancelled {
            end: CancelEnd::Stopped(StopReason::Cancelled)
        }
    );
    assert_eq!(o.text, "I'll help you with that.");
    assert_eq!(o.progress.tool_calls.pending, 1);
}

const A2_INIT: &str = r#"{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":1,"agentCapabilities":{"_meta":{"claudeCode":{"promptQueueing":true}},"promptCapabilities":{"image":true,"embeddedContext":true},"mcpCapabilities":{"http":true,"sse":true},"loadSession":true,"sessionCapabilities":{"fork":{},"list":{},"resume":{},"close":{}}},"agentInfo":{"name":"@zed-industries/claude-agent-acp","title":"Claude Agent","version":"0.23.1"},"authMethods":[]}}"#;
const A2_SID: &str = "fc105c82-5e3a-4b7e-9d1e-1b2c3d4e5f60";

fn a2_upd(update: Value) -> String {
    json!({"jsonrpc":"2.0","method":"session/update","params":{"sessionId":A2_SID,"update":update}})
        .to_string()
}

fn a2_prompting(c: SessionConfig) -> Drive {
    let mut d = Drive::new(c);
    d.agent(A2_INIT);
    d.agent(&format!(r#"{{"id":1,"result":{{"sessionId":"{A2_SID}","models":{{"currentModelId":"default","availableModels":[{{"modelId":"default","name":"Default"}}]}},"modes":{{"currentModeId":"default","availableModes":[{{"id":"default","name":"Default"}},{{"id":"plan","name":"Plan Mode"}}]}}}}}}"#));
    d.take_sent();
    d
}

#[test]
fn a2_claude_adapter_tool_call_permission_usage() {
    let mut c = config();
    c.permission = PermissionPolicy::Allow;
    let mut d = a2_prompting(c);
    d.agent(&a2_upd(json!({"sessionUpdate":"available_commands_update","availableCommands":[{"name":"compact","description":"Clear conversation history but keep a summary","input":{"hint":"<optional custom summarization instructions>"}},{"name":"init","description":"Initialize a new CLAUDE.md file"}]})));
    d.agent(&a2_upd(json!({"_meta":{"claudeCode":{"toolName":"mcp__hubtest__echo"}},"toolCallId":"toolu_mock_1","sessionUpdate":"tool_call","rawInput":{},"status":"pending","title":"mcp__hubtest__echo","kind":"other","content":[]})));
    d.agent(&a2_upd(json!({"_meta":{"claudeCode":{"toolName":"mcp__hubtest__echo"}},"toolCallId":"toolu_mock_1","sessionUpdate":"tool_call_update","rawInput":{"text":"ping-from-mock"},"title":"mcp__hubtest__echo","kind":"other","content":[]})));
    d.agent(&format!(r#"{{"jsonrpc":"2.0","id":0,"method":"session/request_permission","params":{{"options":[{{"kind":"allow_always","name":"Always Allow","optionId":"allow_always"}},{{"kind":"allow_once","name":"Allow","optionId":"allow"}},{{"kind":"reject_once","name":"Reject","optionId":"reject"}}],"sessionId":"{A2_SID}","toolCall":{{"toolCallId":"toolu_mock_1","rawInput":{{"text":"ping-from-mock"}},"title":"mcp__hubtest__echo","kind":"other","content":[]}}}}}}"#));
    // The probe picked allow_always; our Allow policy prefers allow_once, which leaves no
    // standing rule in the agent.
    assert_eq!(
        d.take_sent(),
        [
            json!({"jsonrpc":"2.0","id":0,"result":{"outcome":{"outcome":"selected","optionId":"allow"}}})
        ]
    );
    d.agent(&a2_upd(json!({"_meta":{"claudeCode":{"toolName":"mcp__hubtest__echo"}},"toolCallId":"toolu_mock_1","sessionUpdate":"tool_call_update","status":"completed","rawOutput":[{"type":"text","text":"ping-from-mock"}],"content":[{"type":"content","content":{"type":"text","text":"ping-from-mock"}}]})));
    d.agent(&a2_upd(json!({"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"MOCK_REPLY 2"}})));
    d.agent(&a2_upd(json!({"sessionUpdate":"usage_update","used":null,"size":200000,"cost":{"amount":0.00021,"currency":"USD"}})));
    d.agent(r#"{"id":2,"result":{"stopReason":"end_turn","usage":{"inputTokens":20,"outputTokens":10,"cachedReadTokens":0,"cachedWriteTokens":0,"totalTokens":30}}}"#);
    let o = d.outcome();
    assert_eq!(completed(&o), &StopReason::EndTurn);
    assert_eq!(o.text, "MOCK_REPLY 2");
    assert_eq!(
        o.meter.tokens.map(|t| t.value),
        Some(crate::wire::usage::Tokens {
            input_tokens: Some(20),
            output_tokens: Some(10),
            total_tokens: Some(30),
            cached_read_tokens: Some(0),
            cached_write_tokens: Some(0),
            thought_tokens: None,
        })
    );
    assert_eq!(
        o.progress.context,
        Some(ContextUsage {
            used: None,
            size: Some(200000)
        })
    );
    assert_eq!(
        o.progress.cost,
        Some(Cost {
            amount: 0.00021,
            currency: "USD".into()
        })
    );
    assert_eq!(o.progress.tool_calls.completed, 1);
    assert_eq!(o.progress.last_tool.as_deref(), Some("mcp__hubtest__echo"));
    assert_eq!(
        o.progress.agent,
        Some(AgentInfo {
            name: "@zed-industries/claude-agent-acp".into(),
            version: "0.23.1".into()
        })
    );
    assert_eq!(o.progress.anomalies, 0);
    d.assert_logs_clean("Please CALL_TOOL");
}

#[test]
fn a2_claude_adapter_under_the_default_policy_rejects() {
    let mut d = a2_prompting(config());
    d.agent(&format!(r#"{{"jsonrpc":"2.0","id":0,"method":"session/request_permission","params":{{"options":[{{"kind":"allow_always","name":"Always Allow","optionId":"allow_always"}},{{"kind":"allow_once","name":"Allow","optionId":"allow"}},{{"kind":"reject_once","name":"Reject","optionId":"reject"}}],"sessionId":"{A2_SID}","toolCall":{{"toolCallId":"toolu_mock_1","title":"mcp__hubtest__echo"}}}}}}"#));
    assert_eq!(
        d.take_sent(),
        [
            json!({"jsonrpc":"2.0","id":0,"result":{"outcome":{"outcome":"selected","optionId":"reject"}}})
        ]
    );
    assert!(d
        .logs()
        .iter()
        .any(|l| l
            == "permission asked for tool mcp__hubtest__echo: rejected (reject) (policy reject)"));
}

#[test]
fn a2_claude_adapter_cancel() {
    let mut d = a2_prompting(config());
    assert!(d.cancel());
    assert_eq!(
        d.take_sent(),
        [json!({"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":A2_SID}})]
    );
    d.agent(r#"{"id":2,"result":{"stopReason":"cancelled"}}"#);
    assert_eq!(
        d.status(),
        Status::Cancelled {
            end: CancelEnd::Stopped(StopReason::Cancelled)
        }
    );
}

/// codex-acp 0.16.0 without credentials (§1.3, §1.8, §1.12): env_var auth methods, `acp` in
/// mcpCapabilities, the id last; then -32000 on session/new.
const CODEX_INIT: &str = r#"{"jsonrpc":"2.0","result":{"protocolVersion":1,"agentCapabilities":{"loadSession":true,"promptCapabilities":{"image":true,"audio":false,"embeddedContext":true},"mcpCapabilities":{"http":true,"sse":false,"acp":false},"sessionCapabilities":{"list":{},"resume":{},"close":{}},"auth":{"logout":{}}},"agentInfo":{"name":"codex-acp","title":"Codex","version":"0.16.0"},"authMethods":[{"id":"chatgpt","name":"Login with ChatGPT","description":"Use your ChatGPT login with Codex CLI (requires a paid ChatGPT subscription)"},{"id":"codex-api-key","name":"Use CODEX_API_KEY","description":"Requires setting the `CODEX_API_KEY` environment variable.","type":"env_var","vars":[{"name":"CODEX_API_KEY"}]},{"id":"openai-api-key","name":"Use OPENAI_API_KEY","description":"Requires setting the `OPENAI_API_KEY` environment variable.","type":"env_var","vars":[{"name":"OPENAI_API_KEY"}]},{"bogus":true},"not-an-object"]},"id":0}"#;

#[test]
fn codex_env_var_auth_methods_then_not_logged_in() {
    let mut d = Drive::new(config());
    d.agent(CODEX_INIT);
    assert_eq!(d.take_sent().last().unwrap()["method"], "session/new");
    d.agent(
        r#"{"jsonrpc":"2.0","error":{"code":-32000,"message":"Authentication required"},"id":1}"#,
    );
    let o = d.outcome();
    let Status::Refused(r) = &o.status else {
        panic!("{o:?}");
    };
    assert_eq!(
        r,
        &Refusal::NotLoggedIn {
            message: "Authentication required".into(),
            auth_methods: vec![
                "chatgpt".into(),
                "codex-api-key (env CODEX_API_KEY)".into(),
                "openai-api-key (env OPENAI_API_KEY)".into()
            ]
        }
    );
    assert_eq!(o.status.name(), "refused");
    // We never authenticate, never prompt: initialize, session/new, nothing else.
    let methods: Vec<Value> = d.all_sent().iter().map(|v| v["method"].clone()).collect();
    assert_eq!(methods, [json!("initialize"), json!("session/new")]);
    assert!(matches!(d.take_events().last(), Some(Event::CloseStdin)));
}

#[test]
fn codex_end_turn_with_id_last() {
    // codex-acp 0.16.0 starts in `read-only` here (recorded), which its manifest names as the
    // mode where it asks (docs/acp.md "Session modes"), so nothing is switched.
    let mut c = config();
    c.ask_modes = Some(vec!["read-only".into()]);
    let mut d = Drive::new(c);
    d.agent(CODEX_INIT);
    d.agent(&format!(r#"{{"jsonrpc":"2.0","result":{{"sessionId":"{SID}","modes":{{"currentModeId":"read-only","availableModes":[{{"id":"read-only","name":"Read Only"}},{{"id":"auto","name":"Default"}},{{"id":"full-access","name":"Full Access"}}]}}}},"id":1}}"#));
    d.chunk("MOCK_REPLY 1");
    d.agent(r#"{"jsonrpc":"2.0","result":{"stopReason":"end_turn","usage":{"inputTokens":5,"outputTokens":2,"totalTokens":7}},"id":2}"#);
    let o = d.outcome();
    assert_eq!(completed(&o), &StopReason::EndTurn);
    assert_eq!(o.text, "MOCK_REPLY 1");
    assert_eq!(o.meter.tokens.unwrap().value.total_tokens, Some(7));
}

#[test]
fn gemini_not_logged_in() {
    let mut d = Drive::new(config());
    d.agent(r#"{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":1,"authMethods":[{"id":"oauth-personal","name":"Log in with Google","description":null},{"id":"gemini-api-key","name":"Use Gemini API key","description":"Requires setting the `GEMINI_API_KEY` environment variable"},{"id":"vertex-ai","name":"Vertex AI","description":null},{"id":"gateway","name":"Gateway","description":null}],"agentCapabilities":{"loadSession":true,"promptCapabilities":{"image":true,"audio":true,"embeddedContext":true},"mcpCapabilities":{"http":true,"sse":true}}}}"#);
    d.agent(r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":"Gemini API key is missing or not configured."}}"#);
    let reason = d.status().to_string();
    assert_eq!(
        reason,
        "refused: agent not logged in (Gemini API key is missing or not configured.); it offers: oauth-personal, gemini-api-key, vertex-ai, gateway; log in to the agent yourself, the hub never does"
    );
}

#[test]
fn gemini_meta_quota_in_the_result_is_its_token_figures() {
    let mut d = Drive::prompting(config());
    d.chunk("MOCK_REPLY 1");
    d.prompt_result(json!({"stopReason":"end_turn","_meta":{"quota":{"token_count":{"input_tokens":12,"output_tokens":3},"model_usage":[{"model":"gemini-2.5-pro","token_count":{"input_tokens":12,"output_tokens":3}}]}}}));
    let o = d.outcome();
    assert_eq!(completed(&o), &StopReason::EndTurn);
    // Issue 38 design §1: Gemini 0.61's only figures, read as `acp-meta`.
    let t = o.meter.tokens.unwrap();
    assert_eq!(t.source, crate::acp::UsageSource::AcpMeta);
    assert_eq!(
        (t.value.input_tokens, t.value.output_tokens),
        (Some(12), Some(3))
    );
    assert_eq!(o.meter.cost, None);
    assert_eq!(o.text, "MOCK_REPLY 1");
}

#[test]
fn opencode_unsolicited_updates_after_the_result_are_ignored() {
    let mut d = Drive::prompting(config());
    let chunk = |id: &str, t: &str| json!({"jsonrpc":"2.0","method":"session/update","params":{"sessionId":SID,"update":{"sessionUpdate":"agent_message_chunk","messageId":id,"content":{"type":"text","text":t}}}});
    d.agent_json(chunk("msg_01", "MOCK_REPLY "));
    d.agent_json(chunk("msg_01", "1"));
    d.prompt_result(json!({"stopReason":"end_turn","usage":{"inputTokens":9,"outputTokens":2,"totalTokens":11}}));
    // A plugin queued a prompt (§4.2): a turn we never asked for streams on, and even asks a
    // permission; nothing of it reaches the outcome, and nothing is written to closed stdin.
    d.agent_json(chunk("msg_02", "injected turn"));
    d.agent_json(json!({"jsonrpc":"2.0","id":5,"method":"session/request_permission","params":{"sessionId":SID,"options":[]}}));
    d.agent_json(json!({"jsonrpc":"2.0","id":2,"result":{"stopReason":"end_turn"}}));
    let o = d.outcome();
    assert_eq!(o.text, "MOCK_REPLY 1");
    assert_eq!(o.progress.anomalies, 0);
    let sent = d.take_sent();
    assert!(sent.is_empty(), "{sent:?}");
    d.exit(0);
    assert!(d
        .logs()
        .iter()
        .any(|l| l == "agent exited (exit code 0); 3 lines after the outcome ignored"));
}

#[test]
fn updates_before_the_prompt_are_ignored() {
    let mut d = Drive::new(config());
    d.agent(r#"{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":1}}"#);
    // Before session/new answered: no session id yet.
    d.update(
        json!({"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"early"}}),
    );
    d.agent(&format!(
        r#"{{"jsonrpc":"2.0","id":1,"result":{{"sessionId":"{SID}"}}}}"#
    ));
    d.chunk("late");
    d.prompt_result(json!({"stopReason":"end_turn"}));
    assert_eq!(d.outcome().text, "late");
}

#[test]
fn input_split_anywhere_gives_the_same_session() {
    // The A.2 turn as one byte stream, fed in every chunk size from 1 to 97 bytes.
    let mut stream = String::new();
    for line in [
        A2_INIT.to_owned(),
        format!(r#"{{"id":1,"result":{{"sessionId":"{A2_SID}"}}}}"#),
        a2_upd(
            json!({"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"héllo ✓ "}}),
        ),
        a2_upd(
            json!({"sessionUpdate":"tool_call","toolCallId":"t","title":"x","status":"completed"}),
        ),
        a2_upd(
            json!({"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"done"}}),
        ),
        r#"{"id":2,"result":{"stopReason":"end_turn"}}"#.to_owned(),
    ] {
        stream.push_str(&line);
        stream.push_str("\r\n");
    }
    let bytes = stream.as_bytes();
    let mut want: Option<Outcome> = None;
    for step in 1..98 {
        let mut d = Drive::new(config());
        for piece in bytes.chunks(step) {
            d.s.handle_input(piece, d.now);
            d.drain();
        }
        let mut o = d.outcome();
        o.progress.elapsed_ms = 0;
        assert_eq!(o.text, "héllo ✓ \n\ndone");
        match &want {
            None => want = Some(o),
            Some(w) => assert_eq!(&o, w, "chunk size {step}"),
        }
    }
}

#[test]
fn the_last_line_without_a_newline_is_read_at_eof() {
    let mut d = Drive::prompting(config());
    d.s.handle_input(
        br#"{"jsonrpc":"2.0","id":2,"result":{"stopReason":"max_tokens"}}"#,
        d.now,
    );
    d.drain();
    assert!(!d.s.has_outcome());
    d.eof();
    assert_eq!(completed(&d.outcome()), &StopReason::MaxTokens);
}
