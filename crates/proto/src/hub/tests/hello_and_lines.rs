//! Simulation tests of the connection's first lines and its one verb (SPEC §2, §4.1, §4.3,
//! §4.5): hello and its authentication, malformed and overlong input, the hello and verb
//! deadlines, EOF before the verb, and a sender that leaves around its commit.

use super::*;

// ===== handshake (SPEC §4, wire-compat "Connection flow") =====

#[test]
fn hello_with_the_roster_token_gets_ok_and_is_audited() {
    let mut sim = Sim::new();
    let c = sim.open();
    sim.line(c, &hello_text("mneme", "tok-mneme"));
    let d = sim.drain();
    assert_eq!(d.lines(c), [HubLine::Ok]);
    assert!(!d.closed(c), "the verb comes next on the same connection");
    assert_eq!(
        d.audit,
        [
            AuditEvent::Connected { conn: c },
            AuditEvent::Authenticated {
                conn: c,
                name: "mneme".into()
            }
        ]
    );
}

#[test]
fn hello_with_a_wrong_token_gets_one_error_and_close() {
    let mut sim = Sim::new();
    let c = sim.open();
    // Another agent's valid token is still the wrong token for this name.
    sim.line(c, &hello_text("mneme", "tok-datastore"));
    let d = sim.drain();
    assert_eq!(d.lines(c).len(), 1);
    assert!(
        d.error(c).starts_with("authentication failed"),
        "{}",
        d.error(c)
    );
    assert!(d.closed(c));
    assert!(d.audit.contains(&AuditEvent::AuthFailed {
        conn: c,
        name: Some("mneme".into())
    }));
}

#[test]
fn hello_with_an_unknown_name_fails_like_a_wrong_token() {
    let mut sim = Sim::new();
    let wrong = sim.open();
    sim.line(wrong, &hello_text("mneme", "nope"));
    let unknown = sim.open();
    sim.line(unknown, &hello_text("ghost", "tok-mneme"));
    let d = sim.drain();
    // The same text for both, so the reply does not reveal which names exist.
    assert_eq!(d.lines(unknown), d.lines(wrong));
    assert!(d.closed(unknown));
    // The name tried is recorded, on the roster or not (v4, issue 29)...
    assert!(d.audit.contains(&AuditEvent::AuthFailed {
        conn: unknown,
        name: Some("ghost".into())
    }));
    assert!(d.audit.contains(&AuditEvent::AuthFailed {
        conn: wrong,
        name: Some("mneme".into())
    }));
    // ...unless it is a token sent in the wrong field (SPEC §6.2).
    let swapped = sim.open();
    sim.line(swapped, &hello_text("tok-mneme", "mneme"));
    let d = sim.drain();
    assert!(d.closed(swapped));
    assert!(d.audit.contains(&AuditEvent::AuthFailed {
        conn: swapped,
        name: None
    }));
}

#[test]
fn a_first_line_that_is_not_hello_is_refused() {
    let mut sim = Sim::new();
    let c = sim.open();
    sim.line(c, &await_text(None, None, None));
    let d = sim.drain();
    assert_eq!(d.error(c), "expected hello as the first line, got await");
    assert!(d.closed(c));
    assert_eq!(sim.parked("mneme"), 0);
}

#[test]
fn a_second_hello_is_refused() {
    let mut sim = Sim::new();
    let c = sim.login("mneme");
    sim.line(c, &hello_text("datastore", "tok-datastore"));
    let d = sim.drain();
    assert_eq!(d.error(c), "a second hello on one connection");
    assert!(d.closed(c));
    // The connection stays mneme's: the second hello authenticated nobody.
    assert!(!d
        .audit
        .iter()
        .any(|e| matches!(e, AuditEvent::Authenticated { name, .. } if name == "datastore")));
}

#[test]
fn malformed_json_is_refused_before_and_after_hello() {
    let mut sim = Sim::new();
    let before = sim.open();
    sim.line(before, "{\"hello\":");
    let after = sim.login("mneme");
    sim.line(after, "{\"send\":{\"id\":\"x\"}} trailing");
    let unknown_tag = sim.login("mneme");
    sim.line(unknown_tag, "{\"presence\":{}}");
    let d = sim.drain();
    for c in [before, after, unknown_tag] {
        assert!(
            d.error(c).starts_with("malformed line"),
            "conn {c}: {}",
            d.error(c)
        );
        assert_eq!(d.lines(c).len(), 1, "one error line and nothing else");
        assert!(d.closed(c));
    }
}

#[test]
fn invalid_utf8_is_refused() {
    let mut sim = Sim::new();
    let c = sim.open();
    sim.raw_line(c, b"{\"hello\":{\"name\":\"mn\xffeme\",\"token\":\"t\"}}");
    let verb = sim.login("mneme");
    sim.raw_line(verb, b"\xc3\x28");
    let d = sim.drain();
    assert_eq!(d.error(c), "line is not valid UTF-8");
    assert_eq!(d.error(verb), "line is not valid UTF-8");
    assert!(d.closed(c) && d.closed(verb));
}

#[test]
fn an_overlong_line_gets_the_io_layers_error() {
    let mut sim = Sim::new();
    let c = sim.login("mneme");
    let now = sim.now();
    sim.hub
        .handle_bad_input(c, "line exceeds the limit of 1048576 bytes", now);
    let d = sim.drain();
    assert_eq!(d.error(c), "line exceeds the limit of 1048576 bytes");
    assert!(d.closed(c));
}

#[test]
fn the_hello_deadline_expires_exactly_at_the_limit() {
    let mut sim = Sim::new();
    let c = sim.open();
    assert_eq!(sim.next_deadline_ms(), Some(HELLO_MS as u128));
    sim.advance(HELLO_MS - 1);
    assert!(sim.drain().untouched(c), "not one millisecond early");
    sim.advance(1);
    let d = sim.drain();
    assert_eq!(d.error(c), "no hello within 1000 ms");
    assert!(d.closed(c));
    assert_eq!(sim.next_deadline_ms(), None);
}

#[test]
fn the_verb_deadline_counts_from_the_ok_line() {
    let mut sim = Sim::new();
    let c = sim.open();
    sim.advance(500);
    sim.line(c, &hello_text("mneme", "tok-mneme"));
    sim.drain();
    // The hello deadline is replaced, not added to.
    assert_eq!(sim.next_deadline_ms(), Some(500 + VERB_MS as u128));
    sim.advance(VERB_MS - 1);
    assert!(sim.drain().untouched(c));
    sim.advance(1);
    let d = sim.drain();
    assert_eq!(d.error(c), "no verb within 2000 ms");
    assert!(d.closed(c));
}

#[test]
fn peer_eof_before_the_verb_closes_without_a_reply() {
    let mut sim = Sim::new();
    let c = sim.login("mneme");
    sim.eof(c);
    let d = sim.drain();
    assert_eq!(d.lines(c), []);
    assert!(d.closed(c));
    assert_eq!(sim.next_deadline_ms(), None, "its verb deadline is gone");
}

// ===== one verb per connection (wire-compat "Known faults") =====

#[test]
fn a_sender_that_closes_before_the_commit_cancels_its_send() {
    let mut sim = Sim::new();
    let w = sim.park("datastore");
    let (c, id) = sim.send("mneme", "datastore", "task", None);
    sim.closed(c, false);
    let d = sim.drain();
    assert_eq!(d.refused_ids(), [id.as_str()]);
    // Its claimed waiter is free again.
    assert_eq!(sim.parked("datastore"), 1);
    sim.commit_ok();
    let d = sim.drain();
    assert!(d.accepted_ids().is_empty());
    assert!(d.untouched(w));
    let next = sim.sent("mneme", "datastore", "task", None);
    assert_eq!(sim.drain().delivered_id(w), next);
}

#[test]
fn a_sender_that_reaches_eof_after_its_verb_still_gets_accepted() {
    let mut sim = Sim::new();
    let (c, id) = sim.send("mneme", "datastore", "task", None);
    sim.eof(c);
    sim.commit_ok();
    let d = sim.drain();
    assert_eq!(d.lines(c), [accepted(id.clone())]);
    assert_eq!(sim.queued_ids("datastore"), [id]);
}
