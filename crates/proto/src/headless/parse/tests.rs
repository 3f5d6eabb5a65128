//! The `run.outcome` readers on realistic samples of each agent's headless output (shapes as
//! recorded in the project's agent facts; the values are ours), and on garbage.

use super::*;

fn secrets() -> Secrets {
    Secrets::new(["sk-test-0123456789abcdef".to_owned()])
}

fn p(format: Format, out: &str) -> Parsed {
    parse(format, out.as_bytes(), 64 << 10, &secrets())
}

const CLAUDE_OK: &str = r#"{"type":"result","subtype":"success","is_error":false,"duration_ms":5123,"duration_api_ms":4980,"num_turns":2,"result":"Fixed: the test expected UTC.","stop_reason":"end_turn","session_id":"2da0171f-5c1e-4d6f-9a1b-7f3e8c2d1a00","total_cost_usd":0.0213,"usage":{"input_tokens":5120,"cache_creation_input_tokens":0,"cache_read_input_tokens":2048,"output_tokens":310,"server_tool_use":{"web_search_requests":0},"service_tier":"standard"},"permission_denials":[],"terminal_reason":"completed","uuid":"b3c0e0a1-0000-4000-8000-000000000001"}"#;

#[test]
fn claude_json_success() {
    let r = p(Format::ClaudeJson, &format!("{CLAUDE_OK}\n"));
    assert!(r.found);
    assert_eq!(r.text, "Fixed: the test expected UTC.");
    assert_eq!(r.stop_reason, Some(StopReason::EndTurn));
    assert_eq!(r.error, None);
    let u = r.usage.unwrap();
    assert_eq!(u.input_tokens, Some(5120));
    assert_eq!(u.output_tokens, Some(310));
    assert_eq!(u.cached_read_tokens, Some(2048));
    assert_eq!(u.cached_write_tokens, Some(0));
    assert_eq!(
        u.total_tokens, None,
        "claude reports no total: none is invented"
    );
    let c = r.cost.unwrap();
    assert_eq!((c.amount, c.currency.as_str()), (0.0213, "USD"));
    assert_eq!(r.malformed, 0);
}

#[test]
fn claude_json_errors_and_turn_limits() {
    let err = r#"{"type":"result","subtype":"error_during_execution","is_error":true,"result":"API Error: 401 invalid x-api-key sk-test-0123456789abcdef","session_id":"s"}"#;
    let r = p(Format::ClaudeJson, err);
    assert!(r.found);
    let e = r.error.unwrap();
    assert!(e.starts_with("API Error: 401"), "{e}");
    assert!(!e.contains("0123456789abcdef"), "a secret is redacted: {e}");
    let max = r#"{"type":"result","subtype":"error_max_turns","is_error":false,"num_turns":10,"stop_reason":null,"session_id":"s"}"#;
    let r = p(Format::ClaudeJson, max);
    assert_eq!(r.stop_reason, Some(StopReason::MaxTurnRequests));
    assert_eq!(r.error, None);
    // An unknown stop reason is kept, not refused.
    let r = p(
        Format::ClaudeJson,
        r#"{"type":"result","subtype":"success","result":"x","stop_reason":"stop_sequence"}"#,
    );
    assert_eq!(
        r.stop_reason,
        Some(StopReason::Other("stop_sequence".into()))
    );
}

#[test]
fn claude_json_verbose_array_and_a_banner_before_it() {
    let arr = format!(
        r#"[{{"type":"system","subtype":"init","session_id":"s"}},{{"type":"assistant","message":{{"content":[]}}}},{CLAUDE_OK}]"#
    );
    assert_eq!(
        p(Format::ClaudeJson, &arr).text,
        "Fixed: the test expected UTC."
    );
    let banner = format!("Update available: 2.2.0\n{CLAUDE_OK}\n");
    let r = p(Format::ClaudeJson, &banner);
    assert!(r.found);
    assert_eq!(r.malformed, 1);
}

#[test]
fn codex_jsonl_turn() {
    let out = r#"{"type":"thread.started","thread_id":"01a228b5-239d-7c3e-8f00-000000000000"}
{"type":"turn.started"}
{"type":"item.completed","item":{"id":"item_0","type":"reasoning","text":"**Looking at the test**"}}
{"type":"item.started","item":{"id":"item_1","type":"mcp_tool_call","server":"agent-hub","tool":"send","arguments":{"to":"alpha"},"result":null,"error":null,"status":"in_progress"}}
{"type":"item.completed","item":{"id":"item_1","type":"mcp_tool_call","server":"agent-hub","tool":"send","arguments":{"to":"alpha"},"result":{"content":[]},"error":null,"status":"completed"}}
{"type":"item.completed","item":{"id":"item_2","type":"error","message":"Model metadata for `mock-1` not found"}}
{"type":"item.completed","item":{"id":"item_3","type":"agent_message","text":"Looking at it."}}
{"type":"item.completed","item":{"id":"item_4","type":"agent_message","text":"Done: the parser now accepts UTC."}}
{"type":"turn.completed","usage":{"input_tokens":9000,"cached_input_tokens":4000,"output_tokens":120,"reasoning_output_tokens":64}}
"#;
    let r = p(Format::CodexJsonl, out);
    assert!(r.found);
    assert_eq!(
        r.text, "Done: the parser now accepts UTC.",
        "the last message"
    );
    assert_eq!(r.stop_reason, Some(StopReason::EndTurn));
    assert_eq!(r.error, None, "an error item is a warning");
    let u = r.usage.unwrap();
    assert_eq!(
        (
            u.input_tokens,
            u.cached_read_tokens,
            u.output_tokens,
            u.thought_tokens
        ),
        (Some(9000), Some(4000), Some(120), Some(64))
    );
    assert_eq!(r.cost, None);
}

#[test]
fn codex_jsonl_failures() {
    let out = r#"{"type":"thread.started","thread_id":"t"}
{"type":"turn.started"}
{"type":"error","message":"Reconnecting... 1/5"}
{"type":"turn.failed","error":{"message":"unexpected status 401 Unauthorized"}}
"#;
    let r = p(Format::CodexJsonl, out);
    assert!(!r.found);
    assert_eq!(
        r.error.as_deref(),
        Some("unexpected status 401 Unauthorized")
    );
    // A retry notice followed by a completed turn is no failure.
    let ok = "{\"type\":\"error\",\"message\":\"Reconnecting... 1/5\"}\n{\"type\":\"item.completed\",\"item\":{\"type\":\"agent_message\",\"text\":\"hi\"}}\n{\"type\":\"turn.completed\",\"usage\":{}}\n";
    let r = p(Format::CodexJsonl, ok);
    assert_eq!((r.found, r.error, r.text.as_str()), (true, None, "hi"));
    assert_eq!(r.usage, None, "an empty usage object is no usage");
}

#[test]
fn gemini_json_response_and_summed_stats() {
    let out = r#"{
  "session_id": "8a970032-1111-4222-8333-444455556666",
  "response": "The failing test now passes.",
  "stats": {
    "models": {
      "gemini-2.5-pro": {"api": {"totalRequests": 2, "totalErrors": 0, "totalLatencyMs": 4100},
                         "tokens": {"prompt": 24939, "candidates": 20, "total": 25113, "cached": 21263, "thoughts": 154, "tool": 0}},
      "gemini-2.5-flash": {"api": {"totalRequests": 1, "totalErrors": 0, "totalLatencyMs": 300},
                           "tokens": {"prompt": 100, "candidates": 5, "total": 105, "cached": 0, "thoughts": 0, "tool": 0}}
    },
    "tools": {"totalCalls": 1, "totalSuccess": 1, "totalFail": 0, "byName": {}},
    "files": {"totalLinesAdded": 2, "totalLinesRemoved": 1}
  }
}"#;
    let r = p(Format::GeminiJson, out);
    assert!(r.found);
    assert_eq!(r.text, "The failing test now passes.");
    assert_eq!(r.stop_reason, Some(StopReason::EndTurn));
    let u = r.usage.unwrap();
    assert_eq!(u.input_tokens, Some(25039));
    assert_eq!(u.output_tokens, Some(25));
    assert_eq!(u.total_tokens, Some(25218));
    assert_eq!(u.cached_read_tokens, Some(21263));
    assert_eq!(u.thought_tokens, Some(154));
}

#[test]
fn gemini_json_error() {
    let out = r#"{"session_id":"s","error":{"type":"FatalAuthenticationError","message":"GEMINI_API_KEY environment variable not found.","code":41}}"#;
    let r = p(Format::GeminiJson, out);
    assert!(!r.found);
    assert_eq!(
        r.error.as_deref(),
        Some("GEMINI_API_KEY environment variable not found.")
    );
}

#[test]
fn opencode_jsonl_steps() {
    let out = r#"{"type":"step_start","timestamp":1764443000000,"sessionID":"ses_1","part":{"id":"prt_1","type":"step-start"}}
{"type":"text","timestamp":1764443000100,"sessionID":"ses_1","part":{"id":"prt_2","type":"text","text":"Let me look."}}
{"type":"tool_use","timestamp":1764443000200,"sessionID":"ses_1","part":{"id":"prt_3","type":"tool","tool":"read","state":{"status":"completed","input":{"filePath":"/w/a.rs"}}}}
{"type":"step_finish","timestamp":1764443000300,"sessionID":"ses_1","part":{"id":"prt_4","type":"step-finish","reason":"tool-calls","cost":0.001,"tokens":{"input":1000,"output":20,"reasoning":0,"cache":{"read":500,"write":0}}}}
{"type":"step_start","timestamp":1764443000400,"sessionID":"ses_1","part":{"id":"prt_5","type":"step-start"}}
{"type":"text","timestamp":1764443000500,"sessionID":"ses_1","part":{"id":"prt_6","type":"text","text":"Fixed "}}
{"type":"text","timestamp":1764443000550,"sessionID":"ses_1","part":{"id":"prt_6","type":"text","text":"Fixed the import."}}
{"type":"step_finish","timestamp":1764443000600,"sessionID":"ses_1","part":{"id":"prt_7","type":"step-finish","reason":"stop","cost":0.002,"tokens":{"input":1200,"output":30,"reasoning":5,"cache":{"read":700,"write":10}}}}
"#;
    let r = p(Format::OpencodeJsonl, out);
    assert!(r.found);
    assert_eq!(
        r.text, "Fixed the import.",
        "the last step's text, a part replaced by id"
    );
    assert_eq!(r.stop_reason, Some(StopReason::EndTurn));
    let u = r.usage.unwrap();
    assert_eq!(
        (
            u.input_tokens,
            u.output_tokens,
            u.thought_tokens,
            u.cached_read_tokens,
            u.cached_write_tokens
        ),
        (Some(2200), Some(50), Some(5), Some(1200), Some(10))
    );
    let c = r.cost.unwrap();
    assert!((c.amount - 0.003).abs() < 1e-12, "{}", c.amount);
    // The finish reasons map onto ACP's where one means the same.
    let len = "{\"type\":\"step_finish\",\"part\":{\"reason\":\"length\"}}\n";
    assert_eq!(
        p(Format::OpencodeJsonl, len).stop_reason,
        Some(StopReason::MaxTokens)
    );
}

#[test]
fn opencode_jsonl_error() {
    let out = r#"{"type":"error","timestamp":1,"sessionID":"ses_1","error":{"name":"ProviderAuthError","data":{"providerID":"anthropic","message":"Invalid API key"}}}"#;
    let r = p(Format::OpencodeJsonl, out);
    assert!(!r.found);
    assert_eq!(r.error.as_deref(), Some("Invalid API key"));
}

#[test]
fn exit_code_takes_stdout_as_text() {
    let r = p(Format::ExitCode, "\n  done: 3 files changed \n\n");
    assert!(r.found);
    assert_eq!(r.text, "done: 3 files changed");
    assert_eq!(r.stop_reason, None);
    let bad = parse(Format::ExitCode, b"ok \xff\xfe", 100, &secrets());
    assert_eq!(bad.text, "ok \u{fffd}\u{fffd}");
}

#[test]
fn garbage_is_never_fatal_and_is_counted() {
    let junk: &[&[u8]] = &[
        b"",
        b"\xff\xfe\x00garbage",
        b"{\"type\":\"result\"",
        b"[1,2,3]",
        b"null\n42\n\"x\"\n",
        b"{\"type\":\"result\",\"result\":12,\"usage\":\"lots\",\"total_cost_usd\":\"free\"}",
        b"{\"type\":\"item.completed\",\"item\":7}\n{\"type\":5}\n",
        b"{\"response\":{\"nested\":true},\"stats\":{\"models\":[]}}",
        b"{\"type\":\"text\",\"part\":{\"text\":null}}\n{\"type\":\"step_finish\",\"part\":{\"cost\":-1,\"tokens\":{\"input\":-5}}}\n",
    ];
    for format in [
        Format::ClaudeJson,
        Format::CodexJsonl,
        Format::GeminiJson,
        Format::OpencodeJsonl,
        Format::ExitCode,
    ] {
        for j in junk {
            let r = parse(format, j, 1024, &secrets());
            assert!(r.text.len() <= 1024);
            if let Some(c) = &r.cost {
                assert!(c.amount >= 0.0, "{format:?} {j:?}");
            }
        }
    }
    let r = p(
        Format::CodexJsonl,
        "not json\n{\"type\":\"turn.completed\"}\n\x01\n",
    );
    assert_eq!((r.found, r.malformed), (true, 2));
    // A claude result whose `result` is not a string: found, no text.
    let r = parse(Format::ClaudeJson, junk[5], 1024, &secrets());
    assert!(r.found);
    assert_eq!((r.text.as_str(), r.usage, r.cost), ("", None, None));
    assert!(!p(Format::ClaudeJson, "{\"type\":\"result\"").found);
    assert!(!p(Format::GeminiJson, "[1,2,3]").found);
}

#[test]
fn text_is_capped_on_a_char_boundary() {
    let long = "é".repeat(100);
    let out = serde_json::json!({"type":"result","subtype":"success","result":long}).to_string();
    let r = parse(Format::ClaudeJson, out.as_bytes(), 11, &secrets());
    assert_eq!(r.text, "é".repeat(5));
    assert!(r.text_truncated);
    let r = parse(Format::ClaudeJson, out.as_bytes(), 200, &secrets());
    assert!(!r.text_truncated);
}

#[test]
fn every_format_tag_names_its_format_and_no_other_tag_does() {
    let formats: Vec<Format> = Format::TAGS
        .iter()
        .map(|t| Format::from_tag(t).unwrap_or_else(|| panic!("{t} is listed but not read")))
        .collect();
    // Five tags, five distinct readers: a tag added to TAGS without a reader, or two tags
    // mapped to one reader, fails here.
    for (i, a) in formats.iter().enumerate() {
        for b in &formats[i + 1..] {
            assert_ne!(a, b);
        }
    }
    assert_eq!(formats.len(), 5);
    for bad in ["", "Claude-JSON", "claude-json ", "json", "exit_code"] {
        assert_eq!(Format::from_tag(bad), None, "{bad:?}");
    }
}
