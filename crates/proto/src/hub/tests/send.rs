//! Simulation tests of `send` (SPEC §3, §5.1): acceptance after the commit, `from` stamped
//! from the authenticated name, the body byte for byte, reserved kinds and names, the hub-wide
//! cap.

use super::*;

// ===== send (SPEC §3, §5.1) =====

#[test]
fn a_send_is_accepted_only_after_its_audit_record_is_committed() {
    let mut sim = Sim::new();
    let (c, id) = sim.send("mneme", "datastore", "task", None);
    let d = sim.drain();
    assert!(d.untouched(c), "no reply before the commit");
    assert!(sim.hub.has_staged());
    assert_eq!(
        sim.next_deadline_ms(),
        None,
        "a staged send has no verb deadline"
    );
    sim.commit_ok();
    let d = sim.drain();
    assert_eq!(d.lines(c), [accepted(id.clone())]);
    assert!(d.closed(c));
    assert_eq!(d.accepted_ids(), std::slice::from_ref(&id));
    assert_eq!(sim.queued_ids("datastore"), [id]);
    assert!(!sim.hub.has_staged());
}

#[test]
fn send_stamps_from_with_the_authenticated_name() {
    let mut sim = Sim::new();
    let w = sim.park("datastore");
    // send_text claims from = "forged"; the hub must not believe it.
    let (c, id) = sim.send("mneme", "datastore", "task", None);
    sim.commit_ok();
    let d = sim.drain();
    assert_eq!(d.lines(c), [accepted(id.clone())]);
    let env = d.envelope(w);
    assert_eq!(env["from"], "mneme");
    assert_eq!(env["id"], id.as_str());
    assert_eq!(env["to"], "datastore");
    assert_eq!(
        env["correlationId"],
        Value::Null,
        "correlationId is always present"
    );
    // The audit record holds the same stamped text the reader got.
    let audited = d
        .audit
        .iter()
        .find_map(|e| match e {
            AuditEvent::Accepted {
                conn: Some(conn),
                envelope,
            } if *conn == c => Some(envelope.clone()),
            _ => None,
        })
        .expect("the accepted envelope is audited");
    assert_eq!(&*audited, d.envelope_text(w));
}

#[test]
fn the_body_passes_through_byte_for_byte() {
    let mut sim = Sim::new();
    let body = r#"{"z":1,"a":[1.0,2e3],"big":123456789012345678901234567890,"s":"\u00e9\n"}"#;
    let (_, _) = sim.send_body("mneme", "datastore", "task", None, body);
    sim.commit_ok();
    sim.drain();
    let w = sim.park("datastore");
    let d = sim.drain();
    let text = d.envelope_text(w);
    assert!(text.ends_with(&format!(",\"body\":{body}}}")), "{text}");
}

#[test]
fn send_of_kind_bounce_is_refused() {
    let mut sim = Sim::new();
    let (c, _) = sim.send("mneme", "datastore", "bounce", Some("x"));
    let d = sim.drain();
    assert_eq!(
        d.error(c),
        "invalid envelope: kind \"bounce\" is reserved for the hub"
    );
    assert!(d.closed(c));
    assert!(!sim.hub.has_staged());
    assert!(sim.queued_ids("datastore").is_empty());
}

#[test]
fn a_send_to_the_hub_itself_is_refused_in_any_case() {
    for to in ["hub", "HUB", "Hub"] {
        let mut sim = Sim::new();
        let (c, _) = sim.send("mneme", to, "task", None);
        let d = sim.drain();
        assert_eq!(
            d.error(c),
            "invalid envelope: to \"hub\" names the hub itself, which receives nothing"
        );
        assert!(!sim.hub.has_staged());
        assert!(sim.queued_ids(to).is_empty());
    }
}

#[test]
fn the_hub_wide_byte_cap_refuses_across_agents() {
    // Each of these envelopes is the same size; room for exactly two of them.
    let mut probe = Sim::new();
    probe.sent("mneme", "x1", "task", None);
    let size = probe.hub.stats("x1").queued_bytes;
    let mut sim = Sim::with_limits(|l| l.hub_max_bytes = 2 * size + size / 2);
    let a = sim.sent("mneme", "x1", "task", None);
    let b = sim.sent("mneme", "x2", "task", None);
    assert_eq!(
        (sim.queued_ids("x1"), sim.queued_ids("x2")),
        (vec![a], vec![b])
    );
    let (c, _) = sim.send("mneme", "x3", "task", None);
    sim.commit_ok();
    let d = sim.drain();
    assert!(d.error(c).contains("across all agents"), "{}", d.error(c));
    assert!(sim.queued_ids("x3").is_empty());
}

#[test]
fn a_send_to_an_agent_not_on_the_roster_is_queued() {
    let mut sim = Sim::new();
    let id = sim.sent("mneme", "newcomer", "task", None);
    assert_eq!(sim.queued_ids("newcomer"), [id]);
}

/// The service line of a plain close is written without `format!` (issue 13): the same
/// text, field by field, as before.
#[test]
fn an_accepted_send_logs_its_connection_line() {
    let mut sim = Sim::new();
    let (c, _) = sim.send("mneme", "datastore", "task", None);
    sim.commit_ok();
    let d = sim.drain();
    let prefix = format!("conn={c} name=mneme verb=send outcome=accepted elapsed_us=");
    let line = d
        .logs
        .iter()
        .find(|l| l.starts_with(&prefix))
        .unwrap_or_else(|| panic!("no line starting {prefix:?} in {:?}", d.logs));
    let elapsed = &line[prefix.len()..];
    assert!(
        !elapsed.is_empty() && elapsed.bytes().all(|b| b.is_ascii_digit()),
        "{line}"
    );
}
