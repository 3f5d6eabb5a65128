//! Cancel racing completion, the task deadline, per-step deadlines, the cancel grace,
//! progress coalescing, the agent's exit and the shutdown escalation, all on a virtual clock
//! (docs/acp.md "Cancel racing completion", "Deadlines", "Shutdown").

use super::*;

fn limits_fast() -> SessionConfig {
    let mut c = config();
    c.task_timeout_ms = 10_000;
    c.limits.initialize_timeout_ms = 1_000;
    c.limits.session_new_timeout_ms = 2_000;
    c.limits.cancel_grace_ms = 500;
    c.limits.progress_interval_ms = 100;
    c.limits.eof_exit_wait_ms = 50;
    c.limits.stdin_grace_ms = 300;
    c.limits.term_grace_ms = 700;
    c
}

#[test]
fn completion_then_cancel_is_completed() {
    let mut d = Drive::prompting(config());
    d.chunk("all done");
    d.prompt_result(json!({"stopReason":"end_turn"}));
    assert!(!d.cancel(), "the outcome was already decided");
    assert!(
        d.take_sent().is_empty(),
        "no session/cancel after the turn ended"
    );
    let o = d.outcome();
    assert_eq!(completed(&o), &StopReason::EndTurn);
    assert_eq!(o.text, "all done");
}

#[test]
fn cancel_then_completion_is_cancelled() {
    let mut d = Drive::prompting(config());
    d.chunk("partial");
    assert!(d.cancel());
    assert!(!d.cancel(), "a second cancel changes nothing");
    let sent = d.take_sent();
    assert_eq!(sent.len(), 1, "one session/cancel: {sent:?}");
    // The agent had already finished when our cancel arrived.
    d.prompt_result(json!({"stopReason":"end_turn","usage":{"totalTokens":3}}));
    let o = d.outcome();
    assert_eq!(
        o.status,
        Status::Cancelled {
            end: CancelEnd::Stopped(StopReason::EndTurn)
        }
    );
    assert_eq!(o.text, "partial", "the partial text is kept");
    assert_eq!(o.meter.tokens.unwrap().value.total_tokens, Some(3));
}

#[test]
fn cancel_then_an_error_is_cancelled() {
    let mut d = Drive::prompting(config());
    d.cancel();
    d.agent(r#"{"jsonrpc":"2.0","id":2,"error":{"code":-32800,"message":"Request cancelled"}}"#);
    assert_eq!(
        d.status(),
        Status::Cancelled {
            end: CancelEnd::Errored {
                code: -32800,
                message: "Request cancelled".into()
            }
        }
    );
}

#[test]
fn cancel_unanswered_ends_after_the_grace() {
    let mut d = Drive::prompting(limits_fast());
    d.at(1000);
    d.cancel();
    d.at(1499);
    assert!(!d.s.has_outcome());
    assert_eq!(d.s.poll_timeout(), Some(d.t0 + Duration::from_millis(1500)));
    d.at(1500);
    assert_eq!(
        d.status(),
        Status::Cancelled {
            end: CancelEnd::NoAnswer { waited_ms: 500 }
        }
    );
    // A late answer is an anomaly, not a second outcome.
    d.prompt_result(json!({"stopReason":"cancelled"}));
    d.outcome();
}

#[test]
fn cancel_before_the_prompt_sends_no_session_cancel() {
    // During initialize.
    let mut d = Drive::new(config());
    d.take_sent();
    assert!(d.cancel());
    assert_eq!(
        d.status(),
        Status::Cancelled {
            end: CancelEnd::BeforePrompt
        }
    );
    assert!(d.take_sent().is_empty());
    // During session/new.
    let mut d = Drive::new(config());
    d.agent(r#"{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":1}}"#);
    d.take_sent();
    assert!(d.cancel());
    assert!(d.take_sent().is_empty());
    // The agent's late session/new answer sends no prompt.
    d.agent(&format!(
        r#"{{"jsonrpc":"2.0","id":1,"result":{{"sessionId":"{SID}"}}}}"#
    ));
    assert!(d.take_sent().is_empty());
    assert_eq!(d.outcome().status.name(), "cancelled");
}

#[test]
fn timeout_mid_prompt_cancels_then_times_out() {
    let mut d = Drive::prompting(limits_fast());
    d.chunk("working");
    assert_eq!(
        d.s.poll_timeout(),
        Some(d.t0 + Duration::from_millis(10_000))
    );
    d.at(9_999);
    assert!(d.take_sent().is_empty());
    d.at(10_000);
    assert_eq!(
        d.take_sent(),
        [json!({"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":SID}})]
    );
    assert!(!d.s.has_outcome());
    // A caller's cancel now does not change the cause.
    assert!(!d.cancel());
    d.prompt_result(json!({"stopReason":"cancelled"}));
    let o = d.outcome();
    assert_eq!(
        o.status,
        Status::TimedOut {
            end: CancelEnd::Stopped(StopReason::Cancelled)
        }
    );
    assert_eq!(o.text, "working");
    assert_eq!(o.status.name(), "timed_out");
}

#[test]
fn timeout_with_an_agent_that_ignores_the_cancel() {
    let mut d = Drive::prompting(limits_fast());
    d.run_until(20_000);
    assert_eq!(
        d.status(),
        Status::TimedOut {
            end: CancelEnd::NoAnswer { waited_ms: 500 }
        }
    );
    let methods: Vec<Value> = d.all_sent().iter().map(|v| v["method"].clone()).collect();
    assert_eq!(
        methods,
        [
            json!("initialize"),
            json!("session/new"),
            json!("session/prompt"),
            json!("session/cancel")
        ]
    );
}

#[test]
fn timeout_before_the_prompt() {
    let mut c = limits_fast();
    c.task_timeout_ms = 800; // before initialize's own 1 s deadline
    let mut d = Drive::new(c);
    d.run_until(5_000);
    assert_eq!(
        d.status(),
        Status::TimedOut {
            end: CancelEnd::BeforePrompt
        }
    );
}

#[test]
fn initialize_and_session_new_have_their_own_deadlines() {
    let mut d = Drive::new(limits_fast());
    d.run_until(999);
    assert!(!d.s.has_outcome());
    d.run_until(1000);
    assert_eq!(
        d.status(),
        Status::Failed(Failure::NoAnswer {
            step: Step::Initialize,
            waited_ms: 1000
        })
    );
    assert_eq!(
        d.status().to_string(),
        "failed: agent did not answer initialize within 1000 ms"
    );
    let mut d = Drive::new(limits_fast());
    d.at(600);
    d.agent(r#"{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":1}}"#);
    // session/new's 2 s count from when it was sent.
    d.run_until(2_599);
    assert!(!d.s.has_outcome());
    d.run_until(2_600);
    assert_eq!(
        d.status(),
        Status::Failed(Failure::NoAnswer {
            step: Step::SessionNew,
            waited_ms: 2000
        })
    );
}

#[test]
fn a_late_timer_call_decides_by_the_earliest_deadline() {
    let mut c = limits_fast();
    c.task_timeout_ms = 1_500;
    // initialize's 1 s deadline passed first, the task's 1.5 s later; one late call sees both.
    let mut d = Drive::new(c.clone());
    d.at(5_000);
    assert_eq!(d.status().name(), "failed");
    c.task_timeout_ms = 900;
    let mut d = Drive::new(c);
    d.at(5_000);
    assert_eq!(d.status().name(), "timed_out");
}

#[test]
fn progress_is_coalesced() {
    let mut d = Drive::prompting(limits_fast());
    // The first update is reported at once (the benchmark's "first session/update").
    d.chunk("a");
    assert_eq!(d.progress_events().len(), 1);
    for _ in 0..50 {
        d.chunk("b");
    }
    assert_eq!(
        d.progress_events().len(),
        1,
        "coalesced inside the interval"
    );
    assert_eq!(d.s.poll_timeout(), Some(d.t0 + Duration::from_millis(100)));
    d.at(100);
    let p = d.progress_events();
    assert_eq!(p.len(), 2);
    assert_eq!(p[1].message_chunks, 51);
    assert_eq!(p[1].elapsed_ms, 100);
    // Nothing new: no event and no progress timer.
    d.at(250);
    assert_eq!(d.progress_events().len(), 2);
    assert_eq!(
        d.s.poll_timeout(),
        Some(d.t0 + Duration::from_millis(10_000))
    );
    // After the interval has passed, the next change is reported at once.
    d.chunk("c");
    assert_eq!(d.progress_events().len(), 3);
    d.chunk("d");
    d.prompt_result(json!({"stopReason":"end_turn"}));
    // The pending snapshot is folded into the outcome, not emitted after it.
    let o = d.outcome();
    assert_eq!(o.progress.message_chunks, 53);
    assert_eq!(d.progress_events().len(), 3);
}

#[test]
fn progress_interval_zero_reports_every_change() {
    let mut c = config();
    c.limits.progress_interval_ms = 0;
    let mut d = Drive::prompting(c);
    for _ in 0..5 {
        d.chunk("x");
    }
    assert_eq!(d.progress_events().len(), 5);
}

#[test]
fn shutdown_escalates_to_term_then_kill() {
    let mut d = Drive::prompting(limits_fast());
    d.at(1_000);
    d.prompt_result(json!({"stopReason":"end_turn"}));
    let ev = d.take_events();
    assert!(
        matches!(ev.as_slice(), [Event::Outcome(_), Event::CloseStdin]),
        "{ev:?}"
    );
    assert_eq!(
        d.s.poll_timeout(),
        Some(d.t0 + Duration::from_millis(1_300))
    );
    d.at(1_299);
    assert!(d.take_events().is_empty());
    d.at(1_300);
    assert_eq!(d.take_events(), [Event::Signal(Signal::Term)]);
    d.at(1_999);
    assert!(d.take_events().is_empty());
    d.at(2_000);
    assert_eq!(d.take_events(), [Event::Signal(Signal::Kill)]);
    assert_eq!(d.s.poll_timeout(), None);
    d.exit(137);
    // Killed already: no second kill.
    assert_eq!(d.take_events(), [Event::Finished]);
}

#[test]
fn an_agent_that_exits_on_eof_is_not_signalled_term() {
    let mut d = Drive::prompting(limits_fast());
    d.prompt_result(json!({"stopReason":"end_turn"}));
    d.take_events();
    d.eof();
    d.exit(0);
    // One group kill for anything the agent left behind (§5.2), then done.
    assert_eq!(
        d.take_events(),
        [Event::Signal(Signal::Kill), Event::Finished]
    );
    d.run_until(60_000);
    assert!(d.take_events().is_empty());
}

#[test]
fn a_crash_mid_prompt_fails_with_the_status() {
    let mut d = Drive::prompting(limits_fast());
    d.chunk("half");
    d.eof();
    assert!(!d.s.has_outcome(), "waits briefly for the exit status");
    d.exit(3);
    let o = d.outcome();
    assert_eq!(
        o.status,
        Status::Failed(Failure::Exited {
            during: Step::Prompt,
            status: Some(ExitStatus::code(3))
        })
    );
    assert_eq!(o.text, "half");
    // The process is gone: no CloseStdin, no TERM; a kill for stragglers; finished.
    let ev = d.take_events();
    assert!(
        matches!(
            ev.as_slice(),
            [
                Event::Progress(_),
                Event::Outcome(_),
                Event::Signal(Signal::Kill),
                Event::Finished
            ]
        ),
        "{ev:?}"
    );
}

#[test]
fn eof_without_an_exit_status_fails_after_the_wait() {
    let mut d = Drive::prompting(limits_fast());
    d.at(100);
    d.eof();
    d.at(149);
    assert!(!d.s.has_outcome());
    d.at(150);
    assert_eq!(
        d.status(),
        Status::Failed(Failure::Exited {
            during: Step::Prompt,
            status: None
        })
    );
    // The process may still be alive: the usual shutdown follows.
    assert!(matches!(d.take_events().last(), Some(Event::CloseStdin)));
    d.run_until(10_000);
    assert_eq!(
        d.take_events(),
        [Event::Signal(Signal::Term), Event::Signal(Signal::Kill)]
    );
}

#[test]
fn lines_still_in_the_pipe_after_the_exit_are_read() {
    let mut d = Drive::prompting(limits_fast());
    d.at(10);
    d.exit(0);
    assert!(!d.s.has_outcome(), "waits for the rest of the output");
    assert_eq!(d.s.poll_timeout(), Some(d.t0 + Duration::from_millis(60)));
    d.chunk("last words");
    d.prompt_result(json!({"stopReason":"end_turn"}));
    let o = d.outcome();
    assert_eq!(completed(&o), &StopReason::EndTurn);
    assert_eq!(o.text, "last words");
    // Exited already: no CloseStdin, no TERM; one kill for stragglers; finished.
    let ev = d.take_events();
    assert!(
        matches!(
            ev.as_slice(),
            [
                Event::Progress(_),
                Event::Outcome(_),
                Event::Signal(Signal::Kill),
                Event::Finished
            ]
        ),
        "{ev:?}"
    );
}

#[test]
fn an_exit_without_eof_decides_after_the_wait() {
    let mut d = Drive::prompting(limits_fast());
    d.chunk("half");
    d.exit(3);
    d.at(49);
    assert!(!d.s.has_outcome());
    d.at(50);
    assert_eq!(
        d.status(),
        Status::Failed(Failure::Exited {
            during: Step::Prompt,
            status: Some(ExitStatus::code(3))
        })
    );
    assert!(d.s.is_finished());
}

#[test]
fn exit_during_the_handshake_and_during_a_cancel() {
    let mut d = Drive::new(config());
    d.eof();
    d.s.handle_exit(ExitStatus::signal(9), d.now);
    d.drain();
    assert_eq!(
        d.status().to_string(),
        "failed: agent exited (signal 9) while waiting for initialize"
    );
    let mut d = Drive::prompting(config());
    d.cancel();
    d.exit(0);
    d.eof();
    assert_eq!(
        d.status(),
        Status::Cancelled {
            end: CancelEnd::Exited(Some(ExitStatus::code(0)))
        }
    );
}

#[test]
fn nothing_happens_after_finished() {
    let mut d = Drive::prompting(config());
    d.prompt_result(json!({"stopReason":"end_turn"}));
    d.exit(0);
    assert!(d.s.is_finished());
    let before = d.io.len();
    d.chunk("more");
    d.exit(1);
    d.eof();
    assert!(!d.cancel());
    d.run_until(1_000_000);
    d.agent(r#"{"jsonrpc":"2.0","id":9,"method":"fs/read_text_file","params":{}}"#);
    assert_eq!(d.io.len(), before);
    assert_eq!(d.s.poll_timeout(), None);
}
