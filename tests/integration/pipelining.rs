//! What follows a verb, over real sockets (SPEC §2.1, §4.3, §12.2): a blank line is a
//! malformed line, and a line after the verb gets the same answer whether it came in the
//! verb's write or in a write of its own, because the verb runs as if it were alone and the
//! extra line is answered after the verb's reply.
//!
//! Owns the one-write / two-write comparisons against the real server. Refuses timing: the
//! sans-IO simulation (`crates/proto/src/hub/tests/pipelining.rs`) covers every phase on a virtual clock.

use crate::harness::*;
use std::time::{Duration, Instant};

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
        let st = agent_hub_cli::client::status(&hub.endpoint("alpha"), &id).unwrap();
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

/// Reads everything until the hub ends the stream, as `nc` or a script's read-all does:
/// returns the lines, the time from the reply line's arrival to the end, and whether the end
/// was an orderly one (EOF) rather than a reset.
fn read_all_until_the_end(
    s: &mut std::net::TcpStream,
    reply: &str,
) -> (Vec<String>, Option<Duration>, bool) {
    use std::io::Read;
    let mut all = Vec::new();
    let mut reply_at = None;
    let mut chunk = [0u8; 64 * 1024];
    let orderly = loop {
        match s.read(&mut chunk) {
            Ok(0) => break true,
            Ok(n) => {
                all.extend_from_slice(&chunk[..n]);
                if reply_at.is_none() && String::from_utf8_lossy(&all).contains(reply) {
                    reply_at = Some(Instant::now());
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break false,
            Err(e) => panic!("reading until the end: {e}"),
        }
    };
    let gap = reply_at.map(|t| t.elapsed());
    let lines = String::from_utf8(all)
        .expect("hub lines are UTF-8")
        .lines()
        .map(str::to_owned)
        .collect();
    (lines, gap, orderly)
}

fn raw_stream(hub: &Hub) -> std::net::TcpStream {
    let s = std::net::TcpStream::connect(("127.0.0.1", hub.port)).unwrap();
    s.set_read_timeout(Some(DEADLINE)).unwrap();
    s.set_write_timeout(Some(DEADLINE)).unwrap();
    s
}

/// Issue 29: a client that reads until the hub closes waited out `answer_linger_ms` (500 ms
/// by default then) after every reply, 503.7 ms per send against 0.5 ms for one that stops
/// at the reply line. The connection now ends at its reply by default (SPEC §4.3): the hub
/// shuts down its sending side in the loop iteration that flushed the reply, so the end
/// follows the reply line by microseconds. The bound is the median of 20 exchanges under
/// 100 ms: a fifth of the old linger, so a linger still running fails it every time, and
/// twenty times what a descheduled test thread on a loaded two-core runner adds to one
/// exchange now and then; single exchanges are printed, not asserted.
#[test]
fn a_read_until_eof_client_sees_the_end_right_after_its_reply() {
    use std::io::Write;
    let hub = Hub::start();
    let mut gaps = Vec::new();
    for i in 0..20 {
        let id = format!("eof-{i}");
        let mut s = raw_stream(&hub);
        s.write_all(
            format!(
                "{}{}",
                hello_line("alpha", token_of("alpha")),
                send_line(&id, "beta", "task", None, "{}")
            )
            .as_bytes(),
        )
        .unwrap();
        let accepted = format!(r#"{{"accepted":{{"id":"{id}"}}}}"#);
        let (lines, gap, orderly) = read_all_until_the_end(&mut s, &accepted);
        assert_eq!(lines, [OK.to_owned(), accepted], "exchange {i}");
        assert!(orderly, "exchange {i}: the end was a reset");
        gaps.push(gap.expect("the reply came"));
    }
    gaps.sort();
    eprintln!("reply line to end of stream, 20 exchanges, sorted: {gaps:?}");
    assert!(
        gaps[gaps.len() / 2] < Duration::from_millis(100),
        "median {:?}: {gaps:?}",
        gaps[gaps.len() / 2]
    );
    assert_eq!(hub.drain("beta").len(), 20);
}

/// The end of the stream is an orderly one even when the client sent bytes the hub never
/// took as a verb (SPEC §4.3, §4.4): the hub shuts down its sending side and reads and
/// discards what comes until the client closes, so unread input cannot turn its close into
/// a reset that destroys the reply in flight. A line already in when the reply went out is
/// answered `a line after the verb`; bytes that come later are discarded unanswered.
#[test]
fn the_reply_survives_extra_bytes_and_the_end_is_never_a_reset() {
    use std::io::Write;
    let hub = Hub::start();
    let cases: [(&str, Vec<u8>); 3] = [
        // A second verb in the verb's own write: already in, so answered.
        (
            "a second verb",
            send_line("extra-verb", "beta", "task", None, "{}").into_bytes(),
        ),
        // A partial line that never ends.
        ("a partial line", vec![b'x'; 64 * 1024]),
        // Far more than the socket buffers hold, past the line cap: read while the reply
        // goes out, or drained after it.
        ("4 MiB of junk", vec![b'y'; 4 * 1024 * 1024]),
    ];
    for (i, (what, extra)) in cases.into_iter().enumerate() {
        let id = format!("kept-{i}");
        let mut s = raw_stream(&hub);
        let mut w = s.try_clone().unwrap();
        let head = format!(
            "{}{}",
            hello_line("alpha", token_of("alpha")),
            send_line(&id, "beta", "task", None, "{}")
        );
        let writer = std::thread::spawn(move || {
            let mut bytes = head.into_bytes();
            bytes.extend_from_slice(&extra);
            // The hub may have shut down its reading interest in a verb by the time the
            // last bytes come; it still reads them, so the write completes.
            let _ = w.write_all(&bytes);
        });
        let accepted = format!(r#"{{"accepted":{{"id":"{id}"}}}}"#);
        let (lines, _, orderly) = read_all_until_the_end(&mut s, &accepted);
        writer.join().unwrap();
        assert!(orderly, "{what}: the end was a reset after {lines:?}");
        assert_eq!(lines[..2], [OK.to_owned(), accepted], "{what}");
        match i {
            0 => assert_eq!(
                lines[2..],
                [error_line(LINE_AFTER_THE_VERB).trim_end()],
                "{what}"
            ),
            _ => assert!(
                lines[2..].is_empty() || lines[2..] == [error_line(LINE_AFTER_THE_VERB).trim_end()],
                "{what}: {lines:?}"
            ),
        }
        assert_eq!(hub.drain("beta"), [id], "{what}: the send alone, once");
    }
}
