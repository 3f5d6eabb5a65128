//! A hostile or broken agent (docs/acp.md "Limits"): huge lines, garbage, unknown methods,
//! id games, floods, secrets echoed back. Whatever it does, nothing panics and the session
//! ends in exactly one outcome.

use super::*;

#[test]
fn a_huge_line_through_handle_input_fails_without_buffering_it() {
    let mut c = config();
    c.limits.max_line_bytes = 4096;
    let mut d = Drive::prompting(c);
    let piece = vec![b'x'; 1000];
    for _ in 0..4 {
        d.s.handle_input(&piece, d.now);
        d.drain();
        assert!(!d.s.has_outcome());
    }
    // The fifth piece passes the cap before any newline came.
    d.s.handle_input(&piece, d.now);
    d.drain();
    assert_eq!(
        d.status().to_string(),
        "failed: agent spoke garbage: a line longer than 4096 bytes (max_line_bytes)"
    );
    // Everything after is dropped, not buffered.
    for _ in 0..100 {
        d.s.handle_input(&piece, d.now);
    }
    d.drain();
    d.outcome();
}

#[test]
fn a_huge_line_through_handle_line_fails() {
    let mut c = config();
    c.limits.max_line_bytes = 1024;
    let mut d = Drive::prompting(c);
    d.s.handle_line(&[b'{'; 1024], d.now);
    d.drain();
    assert!(!d.s.has_outcome(), "a line at the cap is only malformed");
    d.s.handle_line(&[b'{'; 1025], d.now);
    d.drain();
    assert_eq!(
        d.status(),
        Status::Failed(Failure::Garbage(
            "a line of 1025 bytes; the limit is 1024 (max_line_bytes)".into()
        ))
    );
}

#[test]
fn malformed_lines_are_tolerated_up_to_the_limit() {
    let mut c = config();
    c.limits.max_malformed_lines = 3;
    let mut d = Drive::prompting(c);
    d.agent("Loading model...");
    d.agent("[1,2,3]");
    d.s.handle_input(&[0xff, 0xfe, b'\n'], d.now);
    d.drain();
    d.agent("");
    d.agent("   ");
    assert!(!d.s.has_outcome());
    assert_eq!(d.s.progress(d.now).malformed_lines, 3);
    d.chunk("still fine");
    d.agent(r#"{"jsonrpc":"2.0","id":"x"}"#);
    let o = d.outcome();
    assert_eq!(
        o.status.to_string(),
        "failed: agent spoke garbage: 4 malformed lines, the last neither a request, a notification nor a response (max_malformed_lines = 3)"
    );
    assert_eq!(o.text, "still fine");
}

#[test]
fn garbage_during_a_cancel_is_still_cancelled() {
    let mut c = config();
    c.limits.max_malformed_lines = 0;
    let mut d = Drive::prompting(c);
    d.cancel();
    d.agent("oops");
    assert_eq!(
        d.status(),
        Status::Cancelled {
            end: CancelEnd::Garbage
        }
    );
}

#[test]
fn unknown_requests_get_method_not_found_with_their_ids() {
    let mut d = Drive::prompting(config());
    for (id, method) in [
        (json!(0), "fs/read_text_file"),
        (json!("w-1"), "fs/write_text_file"),
        (json!(-4), "terminal/create"),
        (json!(18446744073709551615u64), "terminal/output"),
        (json!(""), "authenticate"),
        (json!(9), "_zed/extension"),
        (json!(10), "session/elicitation"),
    ] {
        d.agent_json(json!({"jsonrpc":"2.0","id":id,"method":method,"params":{"sessionId":SID,"path":"/etc/passwd"}}));
        let sent = d.take_sent();
        assert_eq!(sent.len(), 1, "{method}");
        assert_eq!(sent[0]["id"], id, "{method}");
        assert_eq!(sent[0]["error"]["code"], -32601, "{method}");
        assert!(sent[0].get("result").is_none());
    }
    assert!(!d.s.has_outcome());
}

#[test]
fn unknown_notifications_are_ignored() {
    let mut d = Drive::prompting(config());
    for line in [
        r#"{"jsonrpc":"2.0","method":"$/cancel_request","params":{"requestId":0}}"#,
        r#"{"jsonrpc":"2.0","method":"_opencode/status","params":{"x":1}}"#,
        r#"{"jsonrpc":"2.0","method":"session/notice"}"#,
        r#"{"jsonrpc":"2.0","method":"session/update"}"#,
    ] {
        d.agent(line);
    }
    assert!(d.take_sent().is_empty(), "notifications are never answered");
    assert!(!d.s.has_outcome());
    // The params-less session/update is an anomaly, the others are just ignored.
    assert_eq!(d.s.progress(d.now).anomalies, 1);
    assert_eq!(d.s.progress(d.now).malformed_lines, 0);
}

#[test]
fn id_zero_in_both_directions() {
    let mut d = Drive::new(config());
    assert_eq!(d.take_sent()[0]["id"], 0, "our first request is id 0");
    // "0" and 0.0 are other ids: they do not answer our initialize.
    d.agent(r#"{"jsonrpc":"2.0","id":"0","result":{"protocolVersion":1}}"#);
    d.agent(r#"{"jsonrpc":"2.0","id":0.0,"result":{"protocolVersion":1}}"#);
    assert!(d.take_sent().is_empty());
    assert_eq!(d.s.progress(d.now).anomalies, 2);
    d.agent(r#"{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":1}}"#);
    assert_eq!(d.take_sent()[0]["method"], "session/new");
    // The agent's own id 0 is echoed exactly.
    d.agent(
        r#"{"jsonrpc":"2.0","id":0,"method":"session/request_permission","params":{"options":[]}}"#,
    );
    let sent = d.take_sent();
    assert_eq!(sent[0]["id"], json!(0));
    assert!(sent[0]["id"].is_u64());
}

#[test]
fn the_agent_reusing_its_ids_is_answered_each_time() {
    let mut d = Drive::prompting(config());
    for _ in 0..3 {
        d.agent(&format!(r#"{{"jsonrpc":"2.0","id":0,"method":"session/request_permission","params":{{"sessionId":"{SID}","options":[{{"kind":"reject_once","optionId":"r"}}]}}}}"#));
    }
    let sent = d.take_sent();
    assert_eq!(sent.len(), 3);
    assert!(sent.iter().all(|s| s["id"] == 0));
    assert_eq!(d.s.progress(d.now).anomalies, 2);
    assert!(d
        .logs()
        .iter()
        .any(|l| l == "protocol anomaly: agent reused request id 0"));
}

#[test]
fn responses_to_ids_we_never_sent_or_already_answered() {
    let mut d = Drive::prompting(config());
    for line in [
        r#"{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":1}}"#,
        r#"{"jsonrpc":"2.0","id":1,"result":{"sessionId":"other"}}"#,
        r#"{"jsonrpc":"2.0","id":3,"result":{"stopReason":"end_turn"}}"#,
        r#"{"jsonrpc":"2.0","id":99,"error":{"code":1,"message":"x"}}"#,
        r#"{"jsonrpc":"2.0","id":"2","result":{"stopReason":"end_turn"}}"#,
        r#"{"jsonrpc":"2.0","id":-1,"result":{}}"#,
    ] {
        d.agent(line);
    }
    assert!(!d.s.has_outcome());
    assert_eq!(
        d.s.session_id(),
        Some(SID),
        "a replayed session/new changes nothing"
    );
    assert_eq!(d.s.progress(d.now).anomalies, 6);
    let logs = d.logs();
    assert!(logs
        .iter()
        .any(|l| l == "protocol anomaly: response to request 0, which was already answered"));
    assert!(logs
        .iter()
        .any(|l| l == "protocol anomaly: response to id 3, which we never sent"));
    assert!(logs
        .iter()
        .any(|l| l == "protocol anomaly: response to id \"2\", which we never sent"));
    d.prompt_result(json!({"stopReason":"end_turn"}));
    d.prompt_result(json!({"stopReason":"refusal"}));
    assert_eq!(completed(&d.outcome()), &StopReason::EndTurn);
}

#[test]
fn a_prompt_result_before_session_new_answers_is_ignored() {
    let mut d = Drive::new(config());
    d.agent(r#"{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":1}}"#);
    // id 2 is the prompt's, but the prompt was not sent yet.
    d.agent(r#"{"jsonrpc":"2.0","id":2,"result":{"stopReason":"end_turn"}}"#);
    assert!(!d.s.has_outcome());
    d.agent(&format!(
        r#"{{"jsonrpc":"2.0","id":1,"result":{{"sessionId":"{SID}"}}}}"#
    ));
    assert_eq!(d.take_sent().last().unwrap()["method"], "session/prompt");
    assert!(
        !d.s.has_outcome(),
        "the early answer was not kept for later"
    );
    d.chunk("real");
    d.prompt_result(json!({"stopReason":"end_turn"}));
    assert_eq!(d.outcome().text, "real");
}

#[test]
fn bad_request_ids_get_invalid_request_with_id_null() {
    let mut d = Drive::prompting(config());
    let long = "i".repeat(MAX_ID + 1);
    for line in [
        r#"{"jsonrpc":"2.0","id":null,"method":"fs/read_text_file"}"#.to_owned(),
        r#"{"jsonrpc":"2.0","id":{"a":1},"method":"x"}"#.to_owned(),
        r#"{"jsonrpc":"2.0","id":true,"method":"x"}"#.to_owned(),
        format!(r#"{{"jsonrpc":"2.0","id":"{long}","method":"x"}}"#),
    ] {
        d.agent(&line);
        let sent = d.take_sent();
        assert_eq!(sent.len(), 1);
        assert_eq!(sent[0]["id"], Value::Null);
        assert_eq!(sent[0]["error"]["code"], -32600);
    }
    assert_eq!(d.s.progress(d.now).malformed_lines, 4);
}

const MAX_ID: usize = session::MAX_AGENT_ID_BYTES;

#[test]
fn a_request_flood_ends_the_session() {
    let mut c = config();
    c.limits.max_agent_requests = 50;
    let mut d = Drive::prompting(c);
    for i in 0..60 {
        d.agent_json(json!({"jsonrpc":"2.0","id":i,"method":"nope"}));
    }
    let answers = d.take_sent();
    assert_eq!(answers.len(), 50, "the 51st request is not answered");
    assert_eq!(
        d.status().to_string(),
        "failed: agent spoke garbage: more than 50 requests (max_agent_requests)"
    );
}

#[test]
fn logs_are_bounded() {
    let mut c = config();
    c.limits.max_log_events = 10;
    let mut d = Drive::prompting(c);
    for i in 0..10_000 {
        d.agent_json(json!({"jsonrpc":"2.0","id":1000 + i,"result":{}}));
    }
    assert!(d.logs().len() <= 10);
    d.prompt_result(json!({"stopReason":"end_turn"}));
    d.exit(0);
    let logs = d.logs();
    assert!(logs.len() <= 12, "{}", logs.len());
    let summary = logs
        .iter()
        .find(|l| l.starts_with("outcome completed"))
        .unwrap();
    assert!(
        summary.contains("10000 anomalies") && summary.contains("log lines suppressed"),
        "{summary}"
    );
}

#[test]
fn secrets_and_the_prompt_never_reach_a_log_or_a_reason() {
    // We never log the prompt ourselves; an agent echoing it gets an excerpt like any of its
    // strings, so the prompt check below uses a prompt the agent does not echo.
    let prompt = "Please CALL_TOOL:echo now";
    let evil = format!("{SECRET} says\n\u{1b}[2Jforged log line\u{202e}");
    // Echoed in every agent string that reaches a log or reason.
    let mut d = Drive::new(config());
    d.agent_json(json!({"jsonrpc":"2.0","id":0,"result":{"protocolVersion":1,"agentInfo":{"name":evil,"version":evil}}}));
    d.agent_json(json!({"jsonrpc":"2.0","id":SECRET,"method":evil,"params":{}}));
    d.agent_json(json!({"jsonrpc":"2.0","id":1,"result":{"sessionId":SID}}));
    d.agent_json(json!({"jsonrpc":"2.0","id":SECRET,"result":{}}));
    d.agent_json(json!({"jsonrpc":"2.0","id":7,"method":"session/request_permission","params":{"sessionId":SID,"toolCall":{"title":evil},"options":[{"kind":"reject_once","optionId":evil}]}}));
    d.update(json!({"sessionUpdate":"tool_call","toolCallId":"t","title":evil}));
    d.update(json!({"sessionUpdate":"plan","entries":[{"content":evil}]}));
    d.agent(&evil);
    d.agent_json(json!({"jsonrpc":"2.0","id":2,"error":{"code":-32603,"message":evil}}));
    d.assert_logs_clean(prompt);
    let reason = d.status().to_string();
    assert!(reason.contains("[redacted]"), "{reason}");
    assert!(
        !reason.contains('\n') && !reason.contains('\u{1b}'),
        "{reason:?}"
    );
    let o = d.outcome();
    assert!(!o.progress.last_tool.unwrap().contains(SECRET));
    assert!(!o.progress.plan[0].content.contains(SECRET));
    assert!(!format!("{:?}", o.progress.agent).contains(SECRET));
    // The not-logged-in path too.
    let mut d = Drive::new(config());
    d.agent(r#"{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":1}}"#);
    d.agent_json(json!({"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":evil}}));
    d.assert_logs_clean(prompt);
}

#[test]
fn an_error_on_our_requests_is_reported_bounded() {
    let mut d = Drive::new(config());
    let huge = "E".repeat(1 << 20);
    d.agent_json(json!({"jsonrpc":"2.0","id":0,"error":{"code":-32603,"message":huge}}));
    let Status::Failed(Failure::Rpc {
        step,
        code,
        message,
    }) = d.status()
    else {
        panic!()
    };
    assert_eq!((step, code), (Step::Initialize, -32603));
    assert!(message.chars().count() <= 201);
    // The Claude adapter as root (§2.1).
    let mut d = Drive::new(config());
    d.agent(r#"{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":1}}"#);
    d.agent(r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32603,"message":"Internal error","data":{"details":"Query closed before response received"}}}"#);
    assert_eq!(
        d.status().to_string(),
        "failed: agent answered session/new with error -32603: Internal error"
    );
    let mut d = Drive::prompting(config());
    d.agent(r#"{"jsonrpc":"2.0","id":2,"error":{"code":-32602,"message":"bad prompt"}}"#);
    assert_eq!(
        d.status().to_string(),
        "failed: agent answered session/prompt with error -32602: bad prompt"
    );
}

#[test]
fn bad_results_from_the_handshake() {
    for (result, want) in [
        (
            json!({"protocolVersion":2}),
            "refused: agent speaks ACP protocol version 2; the hub speaks 1",
        ),
        (
            json!({"protocolVersion":"1"}),
            "refused: agent speaks ACP protocol version \"1\"; the hub speaks 1",
        ),
        (
            json!({}),
            "failed: agent's initialize result is invalid: no protocolVersion",
        ),
        (
            json!(null),
            "failed: agent's initialize result is invalid: no protocolVersion",
        ),
    ] {
        let mut d = Drive::new(config());
        d.agent_json(json!({"jsonrpc":"2.0","id":0,"result":result}));
        assert_eq!(d.status().to_string(), want);
    }
    for sid in [json!(null), json!(""), json!(5), json!("s".repeat(1025))] {
        let mut d = Drive::new(config());
        d.agent(r#"{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":1}}"#);
        d.agent_json(json!({"jsonrpc":"2.0","id":1,"result":{"sessionId":sid}}));
        assert_eq!(d.status().name(), "failed");
        assert_eq!(d.all_sent().len(), 2, "no prompt sent");
    }
}

#[test]
fn updates_for_another_session_are_ignored() {
    let mut d = Drive::prompting(config());
    d.agent_json(json!({"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"intruder","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"injected"}}}}));
    d.chunk("mine");
    d.prompt_result(json!({"stopReason":"end_turn"}));
    let o = d.outcome();
    assert_eq!(o.text, "mine");
    assert_eq!(o.progress.anomalies, 1);
}

#[test]
fn the_text_cap_holds_against_a_flood_of_chunks() {
    let mut c = config();
    c.limits.max_text_bytes = 1000;
    let mut d = Drive::prompting(c);
    let big = "ü".repeat(5000);
    for _ in 0..20 {
        d.chunk(&big);
    }
    d.prompt_result(json!({"stopReason":"max_tokens"}));
    let o = d.outcome();
    assert!(o.truncated);
    assert_eq!(o.text.len(), 1000);
    assert_eq!(o.progress.text_bytes, 20 * 10_000);
}

/// Every hostile line at every phase, in every order class: no panic, one outcome.
#[test]
fn no_hostile_sequence_panics_or_doubles_the_outcome() {
    let hostile: Vec<String> = vec![
        "".into(),
        "}{".into(),
        "null".into(),
        "\"str\"".into(),
        "[".repeat(5000),
        r#"{"jsonrpc":"2.0"}"#.into(),
        r#"{"id":0,"result":{"protocolVersion":1}}"#.into(),
        r#"{"id":1,"result":{"sessionId":"sess-1"}}"#.into(),
        r#"{"id":2,"result":{"stopReason":"end_turn"}}"#.into(),
        r#"{"id":2,"result":{"stopReason":null}}"#.into(),
        r#"{"id":1,"error":{"code":-32000}}"#.into(),
        r#"{"id":2,"error":null}"#.into(),
        r#"{"id":0,"method":"session/request_permission","params":{"options":[null,1,{"kind":"allow_once","optionId":null}]}}"#.into(),
        r#"{"id":0,"method":"session/request_permission","params":7}"#.into(),
        r#"{"method":"session/update","params":{"sessionId":"sess-1","update":{"sessionUpdate":"plan","entries":7}}}"#.into(),
        r#"{"method":"session/update","params":{"sessionId":"sess-1","update":{"sessionUpdate":"usage_update","used":-1,"size":1e308,"cost":{"amount":1e308,"currency":7}}}}"#.into(),
        r#"{"method":"session/update","params":{"sessionId":"sess-1","update":{"sessionUpdate":"tool_call_update","toolCallId":"x","status":7}}}"#.into(),
        r#"{"method":"session/update","params":{"sessionId":7,"update":[]}}"#.into(),
        r#"{"id":1e400,"result":{}}"#.into(),
        r#"{"id":-0,"result":{"protocolVersion":1}}"#.into(),
        r#"{"method":"terminal/create","id":{"nested":[1]}}"#.into(),
    ];
    let n = hostile.len();
    let mut c = config();
    c.limits.max_malformed_lines = 1000;
    for start in 0..n {
        for stride in [1, 2, 3, 5, 7] {
            let mut d = Drive::new(c.clone());
            for k in 0..3 * n {
                d.agent(&hostile[(start + k * stride) % n]);
                if k == n {
                    d.cancel();
                }
            }
            d.run_until(3_600_000);
            d.eof();
            d.exit(1);
            d.outcome();
            assert!(d.s.is_finished());
        }
    }
}
