//! Simulation tests of what follows a verb (SPEC §2.1, §4.3, §12.2): every line is a line, a
//! blank one included, and lines are taken in order, so a connection's outcome is the same
//! whether its extra line arrived in the same read as the verb or later. Each scenario runs
//! in both splits: "one write" feeds the extra line before the loop's commit and IO, "two
//! writes" after them, as the server sees two reads.

use super::*;
use crate::hub::pipeline::LINE_AFTER_THE_VERB;

fn extra_error() -> HubLine {
    HubLine::Error {
        message: LINE_AFTER_THE_VERB.into(),
    }
}

/// Everything a connection received, across drains, and whether the hub closed it.
#[derive(Debug, Default, PartialEq)]
struct Seen {
    lines: Vec<HubLine>,
    closed: bool,
}

impl Seen {
    fn take(&mut self, d: &Drained, c: ConnId) {
        self.lines.extend(d.lines(c).iter().cloned());
        self.closed |= d.conns.get(&c).is_some_and(|o| o.closed);
    }
}

/// Whether the extra line comes in the verb's read or in a later one.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Split {
    OneWrite,
    TwoWrites,
}

const SPLITS: [Split; 2] = [Split::OneWrite, Split::TwoWrites];

#[test]
fn blank_lines_are_malformed_lines_in_every_phase() {
    let blank_error = "malformed line: EOF while parsing a value";
    for blank in ["", "   ", "\r", "\t \r"] {
        let mut sim = Sim::new();
        // Before the hello.
        let c = sim.open();
        sim.line(c, blank);
        let d = sim.drain();
        assert_eq!(d.error(c), blank_error, "{blank:?} as the first line");
        assert!(d.closed(c));
        // As the verb.
        let c = sim.login("mneme");
        sim.line(c, blank);
        let d = sim.drain();
        assert_eq!(d.error(c), blank_error, "{blank:?} as the verb");
        // After an ack-mode delivery: the envelope comes back.
        let id = sim.sent("mneme", "datastore", "task", None);
        let r = sim.await_ack("datastore");
        sim.drain();
        sim.committed(r);
        sim.line(r, blank);
        let d = sim.drain();
        assert_eq!(
            d.error(r),
            format!("{blank_error}; the envelope will be delivered again")
        );
        assert_eq!(sim.queued_ids("datastore"), [id]);
        // After the verb: a line after the verb, like any other.
        let (s, sid) = sim.send("mneme", "scribe", "task", None);
        sim.line(s, blank);
        sim.commit_ok();
        let d = sim.drain();
        assert_eq!(d.lines(s), [accepted(sid.clone()), extra_error()]);
        assert_eq!(sim.queued_ids("scribe"), [sid]);
    }
}

/// A send with a line after it: accepted (the send runs as if alone), then the error.
#[test]
fn a_line_after_a_send_gets_an_error_after_accepted_in_both_splits() {
    let mut outcomes = Vec::new();
    for split in SPLITS {
        let mut sim = Sim::new();
        let (c, id) = sim.send("mneme", "datastore", "task", None);
        let mut seen = Seen::default();
        let extra = send_text("again", "datastore", "task", None, "{}");
        if split == Split::OneWrite {
            sim.line(c, &extra);
        }
        sim.commit_ok();
        seen.take(&sim.drain(), c);
        if split == Split::TwoWrites {
            assert_eq!(seen.lines, [accepted(id.clone())]);
            assert!(seen.closed, "answered: the exchange is over");
            sim.line(c, &extra);
            assert!(!sim.hub.has_staged(), "the extra line is not a second send");
            seen.take(&sim.drain(), c);
        }
        sim.io_flush();
        assert_eq!(
            seen.lines,
            [accepted(id.clone()), extra_error()],
            "{split:?}"
        );
        assert_eq!(sim.queued_ids("datastore"), [id], "{split:?}: queued once");
        outcomes.push(seen);
    }
    assert_eq!(outcomes[0], outcomes[1]);
}

/// A parked await is not cancelled by a line: it waits on, delivers, and the line is then
/// answered. With "two writes" the envelope arrives between the await and the extra line.
#[test]
fn a_line_after_a_parked_await_waits_for_its_delivery_in_both_splits() {
    let mut outcomes = Vec::new();
    for split in SPLITS {
        let mut sim = Sim::new();
        let r = sim.park("datastore");
        let mut seen = Seen::default();
        let extra = await_text(None, None, None);
        if split == Split::OneWrite {
            sim.line(r, &extra);
            seen.take(&sim.drain(), r);
            assert!(seen.lines.is_empty(), "still parked");
            assert_eq!(sim.parked("datastore"), 1);
        }
        let id = sim.sent("mneme", "datastore", "task", None);
        let d = sim.drain();
        assert_eq!(d.delivered_id(r), id, "{split:?}");
        seen.take(&d, r);
        if split == Split::TwoWrites {
            sim.line(r, &extra);
            seen.take(&sim.drain(), r);
        }
        sim.io_flush();
        let d = sim.drain();
        assert!(
            d.audit
                .iter()
                .any(|e| matches!(e, AuditEvent::Delivered { id: i, .. } if *i == id)),
            "{split:?}: delivered, consumed"
        );
        assert_eq!(seen.lines.len(), 2, "{split:?}: {:?}", seen.lines);
        assert_eq!(seen.lines[1], extra_error());
        assert!(sim.queued_ids("datastore").is_empty());
        outcomes.push(seen);
    }
    assert_eq!(outcomes[0], outcomes[1]);
}

/// A claimed waiter that sends a line still gets the envelope it was claimed for.
#[test]
fn a_line_from_a_claimed_waiter_does_not_divert_its_envelope() {
    let mut sim = Sim::new();
    let r = sim.park("datastore");
    let (s, id) = sim.send("mneme", "datastore", "task", None);
    sim.line(r, "{}");
    sim.commit_ok();
    let d = sim.drain();
    assert_eq!(d.lines(s), [accepted(id.clone())]);
    assert_eq!(d.delivered_id(r), id);
    assert_eq!(d.lines(r).last(), Some(&extra_error()));
    assert!(sim.queued_ids("datastore").is_empty());
}

/// An await that times out with a line held: the timeout, then the error.
#[test]
fn a_line_held_by_a_timing_out_await_is_answered_after_the_timeout() {
    let mut sim = Sim::new();
    let r = sim.await_("datastore", None, None, Some(3));
    sim.line(r, "x");
    assert!(sim.drain().untouched(r));
    sim.advance(3_000);
    let d = sim.drain();
    assert_eq!(d.lines(r), [HubLine::Timeout, extra_error()]);
}

/// Ack mode: the line after the verb is the ack candidate whether it arrived while the await
/// was parked (one write: it was held) or after the delivery (two writes).
#[test]
fn a_pipelined_ack_is_the_line_after_the_delivery_in_both_splits() {
    for matching in [true, false] {
        let mut outcomes = Vec::new();
        for split in SPLITS {
            let mut sim = Sim::new();
            let r = sim.await_ack("datastore");
            let acked_id = if matching { "env-0001" } else { "other" };
            let mut seen = Seen::default();
            if split == Split::OneWrite {
                sim.ack(r, acked_id);
                assert!(sim.drain().untouched(r), "held while parked");
            }
            let id = sim.sent("mneme", "datastore", "task", None);
            assert_eq!(id, "env-0001");
            seen.take(&sim.drain(), r);
            if split == Split::TwoWrites {
                sim.ack(r, acked_id);
                seen.take(&sim.drain(), r);
            }
            sim.committed(r);
            sim.commit_ok();
            seen.take(&sim.drain(), r);
            sim.io_flush();
            let d = sim.drain();
            let want_tail = if matching {
                HubLine::Acked { id: id.clone() }
            } else {
                HubLine::Error {
                    message: format!(
                        "ack does not match the delivered envelope \"{id}\"; it will be delivered again"
                    ),
                }
            };
            assert_eq!(seen.lines.len(), 2, "{split:?}: {:?}", seen.lines);
            assert_eq!(seen.lines[1], want_tail, "{split:?}");
            let queued = sim.queued_ids("datastore");
            assert_eq!(queued.is_empty(), matching, "{split:?}: {queued:?} {d:?}");
            outcomes.push(seen);
        }
        assert_eq!(outcomes[0], outcomes[1], "matching ack: {matching}");
    }
}

/// Ack mode: a line after the ack waits for `acked`, then gets the error, in both splits.
#[test]
fn a_line_after_the_ack_is_answered_after_acked_in_both_splits() {
    let mut outcomes = Vec::new();
    for split in SPLITS {
        let mut sim = Sim::new();
        let id = sim.sent("mneme", "datastore", "task", None);
        let r = sim.await_ack("datastore");
        let mut seen = Seen::default();
        seen.take(&sim.drain(), r);
        sim.committed(r);
        sim.ack(r, &id);
        if split == Split::OneWrite {
            sim.line(r, "{}");
        }
        sim.commit_ok();
        seen.take(&sim.drain(), r);
        if split == Split::TwoWrites {
            sim.line(r, "{}");
            seen.take(&sim.drain(), r);
        }
        sim.io_flush();
        assert_eq!(seen.lines.len(), 3, "{split:?}: {:?}", seen.lines);
        assert_eq!(
            seen.lines[1..],
            [HubLine::Acked { id: id.clone() }, extra_error()]
        );
        assert!(sim.queued_ids("datastore").is_empty());
        assert_eq!(sim.status("mneme", &id).state, "acked");
        outcomes.push(seen);
    }
    assert_eq!(outcomes[0], outcomes[1]);
}

/// Input over the line cap while the verb is pending waits its turn like a line.
#[test]
fn an_overlong_line_after_the_verb_is_answered_after_the_reply() {
    let mut sim = Sim::new();
    let (c, id) = sim.send("mneme", "datastore", "task", None);
    let now = sim.now();
    sim.hub
        .handle_bad_input(c, "line exceeds the limit of 1048576 bytes", now);
    assert!(sim.drain().untouched(c));
    sim.commit_ok();
    let d = sim.drain();
    assert_eq!(d.lines(c), [accepted(id.clone()), extra_error()]);
    assert_eq!(sim.queued_ids("datastore"), [id]);

    // As the line after an ack-mode delivery it returns the envelope, with its own text.
    let r = sim.await_ack("datastore");
    let now = sim.now();
    sim.hub
        .handle_bad_input(r, "line exceeds the limit of 1048576 bytes", now);
    let d = sim.drain();
    assert_eq!(d.error(r), "line exceeds the limit of 1048576 bytes");
}

/// A plain delivery followed by a line: the envelope is delivered, then the error goes out,
/// and the delivery stays delivered even if the error line is never flushed.
#[test]
fn a_line_after_a_plain_delivery_does_not_undo_it() {
    let mut sim = Sim::new();
    let id = sim.sent("mneme", "datastore", "task", None);
    let r = sim.park("datastore");
    let d = sim.drain();
    assert_eq!(d.delivered_id(r), id);
    sim.committed(r);
    sim.line(r, "{}");
    let d = sim.drain();
    assert_eq!(d.error(r), LINE_AFTER_THE_VERB);
    // The IO layer reports the delivery line itself written in full (`event_loop::conn`).
    sim.closed(r, true);
    let d = sim.drain();
    assert!(!d.audit.iter().any(|e| matches!(e, AuditEvent::Lost { .. })));
    assert_eq!(sim.status("mneme", &id).state, "delivered");
}

/// Status and who are verbs like the others.
#[test]
fn status_and_who_answer_then_refuse_a_line_after_them() {
    let mut sim = Sim::new();
    let c = sim.login("mneme");
    sim.line(c, &status_text("nope"));
    sim.line(c, &status_text("nope"));
    let d = sim.drain();
    assert_eq!(d.lines(c).len(), 2);
    assert!(matches!(d.lines(c)[0], HubLine::Status(_)));
    assert_eq!(d.lines(c)[1], extra_error());
    let c = sim.login("mneme");
    sim.line(c, r#"{"who":{}}"#);
    sim.line(c, r#"{"who":{}}"#);
    let d = sim.drain();
    assert!(matches!(d.lines(c), [HubLine::Who(_), e] if *e == extra_error()));
}

/// After an error line, input is discarded: nothing more is written.
#[test]
fn lines_after_an_error_are_discarded() {
    let mut sim = Sim::new();
    let c = sim.login("mneme");
    sim.line(c, "{}");
    sim.line(c, "{}");
    sim.line(c, &await_text(None, None, Some(0)));
    let d = sim.drain();
    assert_eq!(d.lines(c).len(), 1);
}

/// A stopping hub closes answered connections without waiting for the client.
#[test]
fn shutdown_closes_answered_connections() {
    let mut sim = Sim::new();
    let c = sim.login("mneme");
    sim.line(c, &status_text("x"));
    let d = sim.drain();
    assert!(d.closed(c));
    let now = sim.now();
    sim.hub.shutdown(now);
    let mut closes = 0;
    while let Some(o) = sim.hub.poll_output() {
        closes += usize::from(matches!(o, Output::Close { conn, .. } if conn == c));
    }
    assert_eq!(closes, 1);
}

/// Regression (fuzz target `hub_session`, transcript `pipelined_ack_while_parked`): an ack
/// written while the await was parked was taken the moment the envelope was handed to the
/// IO layer, before the socket had accepted a byte of it. The envelope was acked without a
/// `delivered` record, and a delivery that then failed with zero bytes was gone though its
/// reader never saw it. The held ack now waits for the delivery's first byte.
#[test]
fn a_held_ack_waits_for_the_delivery_to_reach_the_socket() {
    // The delivery fails before its first byte: the envelope is queued again, not acked.
    let mut sim = Sim::new();
    let r = sim.await_ack("datastore");
    sim.ack(r, "env-0001");
    sim.drain();
    let id = sim.sent("mneme", "datastore", "task", None);
    sim.commit_ok();
    let d = sim.drain();
    assert!(
        !d.lines(r)
            .iter()
            .any(|l| matches!(l, HubLine::Acked { .. })),
        "acked before a byte of the delivery was taken: {:?}",
        d.lines(r)
    );
    assert!(!d
        .audit
        .iter()
        .any(|e| matches!(e, AuditEvent::Acked { .. })));
    sim.closed(r, false);
    sim.commit_ok();
    sim.drain();
    assert_eq!(sim.queued_ids("datastore"), std::slice::from_ref(&id));
    assert_ne!(sim.status("mneme", &id).state, "acked");

    // The delivery reaches the socket: `delivered`, then the held ack, then `acked`.
    let mut sim = Sim::new();
    let r = sim.await_ack("datastore");
    sim.ack(r, "env-0001");
    sim.drain();
    let id = sim.sent("mneme", "datastore", "task", None);
    sim.drain();
    sim.committed(r);
    sim.commit_ok();
    let d = sim.drain();
    assert_eq!(d.lines(r).last(), Some(&HubLine::Acked { id: id.clone() }));
    let order: Vec<&str> = d
        .audit
        .iter()
        .filter_map(|e| match e {
            AuditEvent::Delivered { .. } => Some("delivered"),
            AuditEvent::Acked { .. } => Some("acked"),
            _ => None,
        })
        .collect();
    assert_eq!(order, ["delivered", "acked"]);
    assert!(sim.queued_ids("datastore").is_empty());
}

/// The core says when a close lingers (SPEC §4.4): after an error line, and not after a
/// connection that ended without one; the IO layer never looks at a line's text to decide.
#[test]
fn a_close_lingers_after_an_error_line_only() {
    let closes = |sim: &mut Sim, c: ConnId| -> Vec<bool> {
        let mut v = Vec::new();
        while let Some(o) = sim.hub.poll_output() {
            if let Output::Close { conn, linger } = o {
                if conn == c {
                    v.push(linger);
                }
            }
        }
        v
    };
    let mut sim = Sim::new();
    let c = sim.open();
    sim.line(c, "not json");
    assert_eq!(closes(&mut sim, c), [true], "a malformed first line");
    let c = sim.login("mneme");
    sim.eof(c);
    assert_eq!(
        closes(&mut sim, c),
        [false],
        "the client left before its verb"
    );
}
