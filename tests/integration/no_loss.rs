//! Nothing ends unrecorded (SPEC §4.6, §5.3, §12.1, §12.2), against the real server with the
//! SQLite store: poison mail ends in a bounce after `limits.max_deliveries`, across a restart;
//! a delivery still open when the hub stops is lost and bounced (or, in ack mode, returned)
//! before the process exits; a failing store's backlog is bounded and sends are refused past
//! it.
//!
//! Owns those end-to-end checks. Refuses timing: the core's exact rules are in
//! `crates/proto/src/hub/tests/redelivery.rs` and `pipelining.rs`.

use crate::harness::*;
use agent_hub_cli::client;
use serde_json::{json, Value};

const AWAIT_ACK: &str = r#"{"await":{"ack":true}}"#;
const STORE_BYTES: u64 = 256 * 1024 * 1024;

/// A reader that takes the envelope (its socket reads the whole line) and goes away without
/// acking, as an agent that crashes on it does.
fn crash_on(hub: &Hub, name: &str) -> String {
    let mut r = hub.park(name, AWAIT_ACK);
    let id = r.envelope()["id"].as_str().unwrap().to_owned();
    drop(r);
    id
}

#[test]
fn poison_mail_is_bounced_after_max_deliveries_even_across_a_restart() {
    let mut hub = Setup::new()
        .with_limits(|l| l.max_deliveries = 2)
        .with_sqlite_store(STORE_BYTES)
        .start();
    let alpha = hub.endpoint("alpha");
    let id = hub.send("alpha", "beta", "task", None, r#"{"crash":true}"#);
    assert_eq!(crash_on(&hub, "beta"), id);
    hub.wait_audit("the first return", |a| {
        a.iter()
            .any(|v| v["event"] == "requeued" && v["attempts"] == 1)
    });
    // A status round trip: its reply leaves after the return's commit.
    assert_eq!(client::status(&alpha, &id).unwrap().attempts, Some(1));
    hub.kill();
    hub.restart();
    assert_eq!(client::status(&alpha, &id).unwrap().attempts, Some(1));

    // The second delivery that comes back is the last: the envelope is given up.
    assert_eq!(crash_on(&hub, "beta"), id);
    let audit = hub.wait_audit("the envelope to be given up", |a| {
        a.iter().any(|v| v["event"] == "given_up")
    });
    let given_up = audit.iter().find(|v| v["event"] == "given_up").unwrap();
    assert_eq!(given_up["id"], id.as_str());
    assert_eq!(given_up["to"], "beta");
    assert_eq!(given_up["attempts"], 2);
    assert_eq!(given_up["bounced"], true);
    let reason = given_up["reason"].as_str().unwrap().to_owned();
    assert!(
        reason.starts_with("not acked after 2 deliveries"),
        "{reason}"
    );
    assert_eq!(
        hub.drain("beta"),
        Vec::<String>::new(),
        "not delivered again"
    );

    // `agent-hub status` says so, and why; so it does after another restart.
    for round in 0..2 {
        let out = hub.cli("status", "alpha", &["--id", &id]);
        out.assert_code(0);
        let st: Value = serde_json::from_str(out.stdout.trim()).unwrap();
        assert_eq!(st["state"], "bounced", "round {round}: {st}");
        assert_eq!(st["reason"], reason.as_str(), "round {round}");
        if round == 0 {
            hub.kill();
            hub.restart();
        }
    }
    // The sender has the bounce, with the reason and the count.
    let bounce = hub
        .poll_envelope("alpha", &await_line(Some(&id), Some("bounce"), Some(0)))
        .expect("a bounce");
    assert_eq!(bounce["from"], "hub");
    assert_eq!(
        bounce["body"],
        json!({"id": id, "to": "beta", "reason": reason, "attempts": 2})
    );
}

/// `/proc/sys/net/ipv4/tcp_wmem`'s maximum: the most the kernel buffers for one sender.
fn tcp_wmem_max_bytes() -> usize {
    std::fs::read_to_string("/proc/sys/net/ipv4/tcp_wmem")
        .ok()
        .and_then(|s| s.split_whitespace().nth(2).and_then(|v| v.parse().ok()))
        .unwrap_or(4 * 1024 * 1024)
}

/// SIGTERM while a delivery is half written: before the process exits the delivery is
/// recorded lost and its bounce is committed, and the `shutdown` record comes last.
#[test]
fn a_delivery_half_written_when_the_hub_stops_is_lost_and_bounced_before_it_exits() {
    let body_bytes = tcp_wmem_max_bytes() + 2 * 1024 * 1024;
    if body_bytes > 48 * 1024 * 1024 {
        eprintln!(
            "skipped: tcp_wmem allows {} bytes per socket",
            body_bytes - 2 * 1024 * 1024
        );
        return;
    }
    let mut hub = Setup::new()
        .with_limits(|l| {
            l.max_line_bytes = body_bytes + 4096;
            l.write_timeout_ms = 1_000;
        })
        .with_sqlite_store(STORE_BYTES)
        .start();
    // A reader that never reads, with a tiny receive buffer: the delivery starts and stalls.
    let reader = hub.park_small_rcvbuf("beta", AWAIT, 4096);
    let id = hub.send(
        "alpha",
        "beta",
        "task",
        None,
        &format!("\"{}\"", "x".repeat(body_bytes)),
    );
    hub.wait_audit("the delivery's first byte", |a| {
        a.iter().any(|v| v["event"] == "delivered")
    });
    assert!(hub.terminate().success());
    let audit = hub.audit();
    let lost = audit
        .iter()
        .position(|v| v["event"] == "lost" && v["id"] == id.as_str())
        .expect("the loss is recorded");
    assert_eq!(audit[lost]["bounced"], true);
    let bounce = audit
        .iter()
        .position(|v| v["event"] == "accepted" && v["envelope"]["correlationId"] == id.as_str())
        .expect("the bounce is accepted before the exit");
    assert!(bounce > lost);
    let last = audit.last().unwrap();
    assert_eq!(last["event"], "shutdown", "the shutdown record comes last");
    assert_eq!(last["queued"], 1, "the bounce, kept for the next start");
    drop(reader);
    // The bounce was committed: the next start delivers it.
    hub.restart();
    let env = hub
        .poll_envelope("alpha", &await_line(Some(&id), Some("bounce"), Some(0)))
        .expect("the bounce survives the restart");
    assert_eq!(env["body"]["id"], id.as_str());
}

/// An ack-mode delivery still unacked at the end of the shutdown drain: the hub releases the
/// connection and records the return before it exits; the return is no attempt.
#[test]
fn an_unacked_delivery_open_when_the_hub_stops_is_returned_and_recorded() {
    let mut hub = Setup::new()
        .with_limits(|l| {
            l.write_timeout_ms = 500;
            l.ack_timeout_ms = 600_000;
        })
        .with_sqlite_store(STORE_BYTES)
        .start();
    let id = hub.send("alpha", "beta", "task", None, "{}");
    let mut r = hub.park("beta", AWAIT_ACK);
    assert_eq!(r.envelope()["id"], id.as_str());
    assert!(hub.terminate().success());
    let audit = hub.audit();
    let requeued = audit
        .iter()
        .position(|v| v["event"] == "requeued" && v["id"] == id.as_str())
        .expect("the return is recorded");
    assert_eq!(
        audit[requeued]["reason"],
        "the hub stopped before this connection finished"
    );
    assert_eq!(
        audit[requeued]["attempts"], 0,
        "the hub's doing, not the reader's"
    );
    let last = audit.last().unwrap();
    assert_eq!(last["event"], "shutdown");
    assert_eq!(last["queued"], 1);
    assert_eq!(r.read_until_closed(), b"", "released without another line");
    hub.restart();
    let st = client::status(&hub.endpoint("alpha"), &id).unwrap();
    assert_eq!((st.state.as_str(), st.attempts), ("queued", None));
}

/// While every commit fails, the changes deliveries make wait in memory; past
/// `limits.store_backlog_max_bytes` sends are refused with that reason (SPEC §12.1), and
/// nothing is lost: what was delivered meanwhile is still in the store at the next start.
#[test]
fn a_failing_stores_backlog_is_bounded_and_sends_are_refused_past_it() {
    if !std::path::Path::new("/dev/full").exists() {
        eprintln!("skipped: no /dev/full");
        return;
    }
    const QUEUED: usize = 400;
    let mut hub = Setup::new()
        .with_limits(|l| l.store_backlog_max_bytes = 64 * 1024)
        .with_sqlite_store(STORE_BYTES)
        .start();
    let ids: Vec<String> = (0..QUEUED)
        .map(|_| hub.send("alpha", "beta", "task", None, "{}"))
        .collect();
    assert!(hub.terminate().success());
    // The audit log on a full device: every commit fails from now on.
    let good_audit = std::mem::replace(&mut hub.setup.audit_log_path, "/dev/full".into());
    hub.restart();
    let refusal = |hub: &Hub| {
        let mut s = hub.raw();
        s.write(&format!(
            "{}{}",
            hello_line("alpha", token_of("alpha")),
            send_line(
                &uuid::Uuid::new_v4().to_string(),
                "gamma",
                "task",
                None,
                "{}"
            )
        ));
        s.expect_line(OK);
        let e = s.error();
        s.expect_eof();
        e
    };
    let first = refusal(&hub);
    assert!(
        first.starts_with("envelope not accepted: the audit log could not be written"),
        "{first}"
    );
    // Deliveries go on from memory; their removals wait for a commit that cannot happen.
    let mut delivered = Vec::new();
    let mut refused = None;
    while delivered.len() < QUEUED {
        let env = hub.poll_envelope("beta", AWAIT_NOW).expect("still queued");
        delivered.push(env["id"].as_str().unwrap().to_owned());
        if delivered.len() % 20 == 0 {
            let e = refusal(&hub);
            if e.contains("limits.store_backlog_max_bytes") {
                refused = Some(e);
                break;
            }
        }
    }
    let refused = refused.expect("the backlog reached its bound");
    assert!(
        refused.starts_with("envelope not accepted: the queue store has been failing and ")
            && refused.ends_with("sends are refused until a commit succeeds"),
        "{refused}"
    );
    assert!(
        delivered.len() < QUEUED,
        "the bound came before the queue ran dry"
    );
    let log = hub.service_log();
    assert!(log.contains("commit failed"), "{log}");
    hub.kill();
    // Nothing was lost: the store still holds every envelope whose removal never committed.
    hub.setup.audit_log_path = good_audit;
    hub.restart();
    assert_eq!(hub.drain("beta"), ids, "all back, in acceptance order");
}
