//! What follows a verb, over real sockets (SPEC §2.1, §4.3, §12.2): a blank line is a
//! malformed line, and a line after the verb gets the same answer whether it came in the
//! verb's write or in a write of its own, because the verb runs as if it were alone and the
//! extra line is answered after the verb's reply.
//!
//! Owns the one-write / two-write comparisons against the real server. Refuses timing: the
//! sans-IO simulation (`src/hub/tests/pipelining.rs`) covers every phase on a virtual clock.

use crate::harness::*;

const LINE_AFTER_THE_VERB: &str =
    "a line after the verb: one verb per connection; that line was not executed";
const AWAIT_ACK: &str = r#"{"await":{"ack":true}}"#;

#[derive(Debug, Clone, Copy)]
enum Split {
    /// The extra line in the verb's own write.
    OneWrite,
    /// The extra line in a write of its own, right after the verb's, before any reply is read.
    TwoWrites,
    /// The extra line written only once the verb's reply has been read.
    AfterTheReply,
}

const SPLITS: [Split; 3] = [Split::OneWrite, Split::TwoWrites, Split::AfterTheReply];

#[test]
fn blank_lines_are_malformed_lines() {
    let hub = Hub::start();
    let blank = "malformed line: EOF while parsing a value";
    let mut s = hub.raw();
    s.write("\n");
    assert_eq!(s.error(), blank);
    s.expect_eof();

    let mut s = hub.login("alpha");
    s.write(" \r\n");
    assert_eq!(s.error(), blank);
    s.expect_eof();

    // After the verb a blank line is a line after the verb, and the send stands.
    let mut s = hub.raw();
    s.write(&format!(
        "{}{}\n",
        hello_line("alpha", token_of("alpha")),
        send_line("blank-after", "beta", "task", None, "1")
    ));
    s.expect_line(OK);
    s.expect_line(r#"{"accepted":{"id":"blank-after"}}"#);
    assert_eq!(s.error(), LINE_AFTER_THE_VERB);
    s.expect_eof();
    assert_eq!(hub.drain("beta"), ["blank-after"]);
    assert!(hub.audit_events("connected").len() >= 3);
}

#[test]
fn crlf_line_ends_are_tolerated() {
    let hub = Hub::start();
    let mut s = hub.raw();
    s.write(&format!(
        "{}\r\n{}\r\n",
        hello_line("alpha", token_of("alpha")).trim_end(),
        send_line("crlf-1", "beta", "task", None, "1").trim_end()
    ));
    s.expect_line(OK);
    s.expect_line(r#"{"accepted":{"id":"crlf-1"}}"#);
    s.expect_eof();
}

#[test]
fn a_line_after_a_send_gets_the_same_answer_however_it_was_written() {
    // A linger no scheduling stall outlasts: the line written after the reply is read.
    let hub = Hub::with_limits(|l| l.answer_linger_ms = 600_000);
    for (i, split) in SPLITS.into_iter().enumerate() {
        let id = format!("send-{i}");
        let verb = format!(
            "{}{}",
            hello_line("alpha", token_of("alpha")),
            send_line(&id, "beta", "task", None, "{}")
        );
        let extra = send_line(&format!("extra-{i}"), "beta", "task", None, "{}");
        let mut s = hub.raw();
        match split {
            Split::OneWrite => s.write(&format!("{verb}{extra}")),
            Split::TwoWrites => {
                s.write(&verb);
                s.write(&extra);
            }
            Split::AfterTheReply => s.write(&verb),
        }
        s.expect_line(OK);
        s.expect_line(&format!(r#"{{"accepted":{{"id":"{id}"}}}}"#));
        if let Split::AfterTheReply = split {
            s.write(&extra);
        }
        assert_eq!(s.error(), LINE_AFTER_THE_VERB, "{split:?}");
        s.expect_eof();
        assert_eq!(hub.drain("beta"), [id], "{split:?}: the send alone, once");
    }
    let accepted = hub.audit_events("accepted");
    assert_eq!(accepted.len(), SPLITS.len(), "{accepted:?}");
    assert!(hub.audit_events("refused").is_empty());
}

#[test]
fn a_line_after_a_parked_await_gets_the_same_answer_however_it_was_written() {
    // A linger no scheduling stall outlasts: the line written after the reply is read.
    let hub = Hub::with_limits(|l| l.answer_linger_ms = 600_000);
    for (i, split) in SPLITS.into_iter().enumerate() {
        let await_line = format!("{AWAIT}\n");
        // `park` writes hello and await in one write and reads ok: the await is parked then.
        let mut r = match split {
            Split::OneWrite => hub.park("beta", &format!("{AWAIT}\n{AWAIT}")),
            _ => hub.park("beta", AWAIT),
        };
        if let Split::TwoWrites = split {
            r.write(&await_line);
        }
        let id = hub.send("alpha", "beta", "task", None, &format!("{i}"));
        let env = r.envelope();
        assert_eq!(
            env["id"],
            id.as_str(),
            "{split:?}: still parked, it gets the envelope"
        );
        if let Split::AfterTheReply = split {
            r.write(&await_line);
        }
        assert_eq!(r.error(), LINE_AFTER_THE_VERB, "{split:?}");
        r.expect_eof();
        assert!(hub.drain("beta").is_empty(), "{split:?}: consumed once");
    }
    assert_eq!(hub.audit_events("delivered").len(), SPLITS.len());
}

#[test]
fn an_ack_written_with_its_await_is_the_ack_however_it_was_written() {
    // A linger no scheduling stall outlasts: the line written after the reply is read.
    let hub = Hub::with_limits(|l| l.answer_linger_ms = 600_000);
    for (i, split) in SPLITS.into_iter().enumerate() {
        let id = format!("acked-{i}");
        let ack = format!(r#"{{"ack":{{"id":"{id}"}}}}"#);
        let mut r = match split {
            Split::OneWrite => hub.park("beta", &format!("{AWAIT_ACK}\n{ack}")),
            _ => hub.park("beta", AWAIT_ACK),
        };
        if let Split::TwoWrites = split {
            r.write(&format!("{ack}\n"));
        }
        let mut s = hub.raw();
        s.write(&format!(
            "{}{}",
            hello_line("alpha", token_of("alpha")),
            send_line(&id, "beta", "task", None, "{}")
        ));
        s.expect_line(OK);
        s.expect_line(&format!(r#"{{"accepted":{{"id":"{id}"}}}}"#));
        s.expect_eof();
        assert_eq!(r.envelope()["id"], id.as_str(), "{split:?}");
        if let Split::AfterTheReply = split {
            r.write(&format!("{ack}\n"));
        }
        r.expect_line(&format!(r#"{{"acked":{{"id":"{id}"}}}}"#));
        r.expect_eof();
        let st = agent_hub::client::status(&hub.endpoint("alpha"), &id).unwrap();
        assert_eq!(st.state, "acked", "{split:?}");
    }
}

/// The hub ends an answered connection by itself once `answer_linger_ms` passes, for a client
/// that reads its reply and then reads on until the hub closes (SPEC §4.3); the hello
/// deadline, far longer here, is not what ends it.
#[test]
fn an_answered_connection_is_ended_after_the_answer_linger() {
    let hub = Hub::with_limits(|l| {
        l.answer_linger_ms = 200;
        l.hello_timeout_ms = 600_000;
    });
    let mut s = hub.login("alpha");
    s.write(&format!("{AWAIT_NOW}\n"));
    s.expect_line(TIMEOUT);
    s.expect_hub_close();
}

/// With no linger the end of the stream follows the reply at once, and a line written after
/// it is discarded unanswered: it is never executed.
#[test]
fn with_no_answer_linger_the_end_follows_the_reply() {
    let hub = Hub::with_limits(|l| {
        l.answer_linger_ms = 0;
        l.hello_timeout_ms = 600_000;
    });
    let mut s = hub.raw();
    s.write(&format!(
        "{}{}",
        hello_line("alpha", token_of("alpha")),
        send_line("nolinger-1", "beta", "task", None, "{}")
    ));
    s.expect_line(OK);
    s.expect_line(r#"{"accepted":{"id":"nolinger-1"}}"#);
    s.expect_hub_close();
    s.write(&send_line("nolinger-2", "beta", "task", None, "{}"));
    s.shutdown_write();
    assert_eq!(hub.drain("beta"), ["nolinger-1"]);
}
