//! Delivery end to end (SPEC §5, §12.2): queueing for names that never connected, the routing
//! tiers, filters, FIFO order at volume, the dead-waiter regressions of SPEC §11 ("Differences
//! from the implementation in use"), and acknowledged delivery, which closes the window a plain
//! delivery leaves when its reader dies with the bytes in the kernel.
//!
//! Owns: which connection receives which envelope, and that none is lost when a waiter dies.
//! Refuses: deadlines and caps (see `limits`), line syntax (see `wire`).

use crate::harness::*;
use agent_hub_cli::client::{self, AwaitOutcome};
use agent_hub_proto::wire::{AwaitRequest, Envelope};
use serde_json::json;

#[test]
fn a_name_that_never_connected_gets_its_queue_when_it_awaits() {
    let hub = Hub::start();
    // delta is on the roster but has never connected; "stranger" is not on the roster at all.
    let first = hub.send("alpha", "delta", "task", None, r#"{"n":1}"#);
    let second = hub.send("alpha", "delta", "task", None, r#"{"n":2}"#);
    let stray = hub.send("alpha", "stranger", "task", None, "{}");
    let out = hub.cli("await", "delta", &["--timeout", "5"]);
    out.assert_code(0);
    let env: serde_json::Value = serde_json::from_str(out.stdout.trim_end()).unwrap();
    assert_eq!(env["id"], first.as_str());
    assert_eq!(hub.drain("delta"), vec![second]);
    let accepted = hub.wait_audit("the stray send's accepted record", |a| {
        a.iter()
            .any(|v| v["event"] == "accepted" && v["envelope"]["id"] == stray.as_str())
    });
    let rec = accepted
        .iter()
        .find(|v| v["envelope"]["id"] == stray.as_str())
        .unwrap();
    assert_eq!(rec["envelope"]["to"], "stranger");
}

#[test]
fn a_send_wakes_a_parked_cli_await() {
    let hub = Hub::start();
    let child = spawn(hub.cli_command("await", "beta", &[]));
    // The CLI writes hello and await in one write: once its hello is audited, the await is
    // parked too (both lines are handled in the same iteration, before the audit flush).
    hub.wait_audit("the CLI await to authenticate", |a| {
        a.iter().any(|v| v["event"] == "authenticated")
    });
    let id = hub.cli_send("alpha", "beta", "task", r#"{"wake":true}"#);
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let env: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(env["id"], id.as_str());
    assert_eq!(env["body"], json!({"wake": true}));
}

#[test]
fn routing_prefers_reply_to_and_kind_then_reply_to_then_kind_then_unfiltered() {
    let hub = Hub::start();
    let mut unfiltered = hub.park("beta", &await_line(None, None, None));
    let mut by_kind = hub.park("beta", &await_line(None, Some("result"), None));
    let mut by_reply = hub.park("beta", &await_line(Some("X"), None, None));
    let mut both_old = hub.park("beta", &await_line(Some("X"), Some("result"), None));
    let mut both_new = hub.park("beta", &await_line(Some("X"), Some("result"), None));
    let mut other_reply = hub.park("beta", &await_line(Some("Y"), Some("result"), None));
    let mut other_kind = hub.park("beta", &await_line(None, Some("task"), None));

    for (who, conn) in [
        ("reply-to + kind, oldest", &mut both_old),
        ("reply-to + kind, newer", &mut both_new),
        ("reply-to", &mut by_reply),
        ("kind", &mut by_kind),
        ("unfiltered", &mut unfiltered),
    ] {
        let id = hub.send("alpha", "beta", "result", Some("X"), "{}");
        let env = conn.envelope();
        assert_eq!(env["id"], id.as_str(), "the {who} waiter gets the envelope");
        conn.expect_eof();
    }
    // Waiters whose filters fail were skipped all along and are still parked.
    let id = hub.send("alpha", "beta", "result", Some("Y"), "{}");
    assert_eq!(other_reply.envelope()["id"], id.as_str());
    let id = hub.send("alpha", "beta", "task", None, "{}");
    assert_eq!(other_kind.envelope()["id"], id.as_str());
    assert_eq!(hub.drain("beta"), Vec::<String>::new());
}

#[test]
fn routing_is_oldest_first_among_unfiltered_waiters() {
    let hub = Hub::start();
    let mut waiters: Vec<Raw> = (0..3).map(|_| hub.park("gamma", AWAIT)).collect();
    for w in &mut waiters {
        let id = hub.send("alpha", "gamma", "task", None, "{}");
        assert_eq!(w.envelope()["id"], id.as_str());
    }
}

#[test]
fn filters_conjoin_and_an_await_takes_the_first_match_in_fifo_order() {
    let hub = Hub::start();
    let task1 = hub.send("alpha", "beta", "task", None, "1");
    let res_x = hub.send("alpha", "beta", "result", Some("X"), "2");
    let task_x = hub.send("alpha", "beta", "task", Some("X"), "3");
    let res_x2 = hub.send("alpha", "beta", "result", Some("X"), "4");
    let take = |line: &str| {
        hub.poll_envelope("beta", line)
            .map(|e| e["id"].as_str().unwrap().to_owned())
    };
    assert_eq!(
        take(&await_line(Some("X"), Some("result"), Some(0))),
        Some(res_x)
    );
    assert_eq!(take(&await_line(Some("Z"), None, Some(0))), None);
    assert_eq!(take(&await_line(Some("X"), None, Some(0))), Some(task_x));
    assert_eq!(
        take(&await_line(None, Some("result"), Some(0))),
        Some(res_x2)
    );
    assert_eq!(take(&await_line(None, Some("result"), Some(0))), None);
    assert_eq!(take(AWAIT_NOW), Some(task1));
    assert_eq!(take(AWAIT_NOW), None);
}

#[test]
fn parked_await_closed_loses_nothing() {
    let hub = Hub::start();
    let waiter = hub.park("beta", AWAIT);
    let waiter_conn = hub
        .wait_audit("the waiter's hello", |a| {
            a.iter().any(|v| v["event"] == "authenticated")
        })
        .into_iter()
        .find(|v| v["event"] == "authenticated")
        .unwrap()["conn"]
        .clone();
    drop(waiter);
    // Wait until the hub has noticed the EOF and dropped the waiter.
    hub.wait_service_log("the parked await to be dropped", |s| {
        s.contains("name=beta verb=await outcome=dropped")
    });
    let id = hub.send("alpha", "beta", "task", None, "{}");
    assert_eq!(
        hub.drain("beta"),
        vec![id.clone()],
        "the envelope was queued, not written into the dead socket"
    );
    let audit = hub.audit();
    let delivered: Vec<_> = audit
        .iter()
        .filter(|v| v["event"] == "delivered" && v["id"] == id.as_str())
        .collect();
    assert_eq!(delivered.len(), 1, "{audit:?}");
    assert_ne!(
        delivered[0]["conn"], waiter_conn,
        "nothing went to the closed waiter"
    );
}

/// The conn id of the most recent `authenticated` record for `name`, once there are `n`.
fn nth_login_conn(hub: &Hub, name: &str, n: usize) -> serde_json::Value {
    let audit = hub.wait_audit("the login to be audited", |a| {
        a.iter()
            .filter(|v| v["event"] == "authenticated" && v["name"] == name)
            .count()
            >= n
    });
    audit
        .iter()
        .filter(|v| v["event"] == "authenticated" && v["name"] == name)
        .nth(n - 1)
        .unwrap()["conn"]
        .clone()
}

/// Waits until the hub has dropped `n` parked awaits whose peers went away.
fn wait_dropped(hub: &Hub, n: usize) {
    hub.wait_service_log("the hub to drop the dead waiter", |s| {
        s.matches("verb=await outcome=dropped").count() >= n
    });
}

#[test]
fn parked_await_closed_just_before_a_send_is_queued_or_accounted_for() {
    // No wait for the hub to see the close: the FIN and the send race inside the kernel
    // (loopback packets are processed asynchronously under CPU contention). If the hub has
    // the FIN when it routes or by its pre-delivery peek, the envelope stays queued. If the
    // FIN is still in flight, the write into the dying socket succeeds and the envelope is
    // gone: the kernel-buffer window of SPEC §11 and §5.6 that only an acknowledged delivery
    // mode closes. Either way the audit log says where every envelope went.
    let hub = Hub::start();
    let mut logins = 0;
    let mut window_hits = 0;
    for _ in 0..20 {
        let waiter = hub.park("beta", AWAIT);
        logins += 1;
        let waiter_conn = nth_login_conn(&hub, "beta", logins);
        drop(waiter);
        let id = hub.send("alpha", "beta", "task", None, "{}");
        let drained = hub.drain("beta");
        logins += drained.len() + 1;
        if drained != [id.clone()] {
            assert!(drained.is_empty(), "{drained:?}");
            let audit = hub.wait_audit("the delivery record", |a| {
                a.iter()
                    .any(|v| v["event"] == "delivered" && v["id"] == id.as_str())
            });
            let rec = audit
                .iter()
                .find(|v| v["event"] == "delivered" && v["id"] == id.as_str())
                .unwrap();
            assert_eq!(
                rec["conn"], waiter_conn,
                "{id} neither queued nor delivered to the closed waiter"
            );
            window_hits += 1;
        }
    }
    eprintln!("deliveries into a socket closed in flight: {window_hits} of 20");
}

#[test]
fn a_dead_waiter_ahead_of_a_live_one_passes_the_envelope_on() {
    let hub = Hub::start();
    for i in 1..=10 {
        let dead = hub.park("beta", AWAIT);
        let mut live = hub.park("beta", AWAIT);
        drop(dead);
        wait_dropped(&hub, i);
        let id = hub.send("alpha", "beta", "task", None, "{}");
        assert_eq!(live.envelope()["id"], id.as_str());
        assert_eq!(hub.drain("beta"), Vec::<String>::new());
    }
}

#[test]
fn parked_await_killed_loses_nothing() {
    let hub = Hub::start();
    // The CLI's default (ack mode) and the plain 004 await.
    for (i, mode) in [&[][..], &["--no-ack"][..]].into_iter().enumerate() {
        let mut child = spawn(hub.cli_command("await", "beta", mode));
        // The CLI writes hello and await in one write: once its hello is audited, it is parked.
        // Each round logs beta in twice (this await, then the one that takes the envelope), so
        // this is beta's login number 2i+1, whenever the records of the last round land.
        hub.wait_audit("the CLI await to authenticate", |a| {
            a.iter()
                .filter(|v| v["event"] == "authenticated" && v["name"] == "beta")
                .count()
                > 2 * i
        });
        child.kill().unwrap(); // SIGKILL
        let status = child.wait().unwrap();
        assert!(!status.success());
        wait_dropped(&hub, i + 1);
        let id = hub.cli_send("alpha", "beta", "task", r#"{"after":"kill"}"#);
        let out = hub.cli("await", "beta", &["--timeout", "0"]);
        out.assert_code(0);
        let env: serde_json::Value = serde_json::from_str(out.stdout.trim_end()).unwrap();
        assert_eq!(env["id"], id.as_str(), "mode {mode:?}");
        assert!(
            read_all(child.stdout.take().unwrap()).is_empty(),
            "the killed await printed nothing"
        );
    }
}

#[test]
fn a_thousand_sends_then_a_thousand_awaits_arrive_in_fifo_order() {
    let hub = Hub::start();
    let alpha = hub.endpoint("alpha");
    let beta = hub.endpoint("beta");
    let mut sent = Vec::with_capacity(1000);
    for i in 0..1000 {
        let id = format!("fifo-{i:04}");
        let env = Envelope::new(
            id.clone(),
            "alpha".into(),
            "beta".into(),
            TS.into(),
            "task".into(),
            None,
            format!("{{\"i\":{i}}}"),
        )
        .unwrap();
        assert_eq!(client::send(&alpha, env).unwrap(), id);
        sent.push(id);
    }
    let mut got = Vec::with_capacity(1000);
    let poll = AwaitRequest {
        timeout_secs: Some(0),
        ..AwaitRequest::default()
    };
    for _ in 0..1000 {
        match client::await_envelope(&beta, poll.clone()).unwrap() {
            AwaitOutcome::Envelope(text) => {
                let v: serde_json::Value = serde_json::from_str(&text).unwrap();
                got.push(v["id"].as_str().unwrap().to_owned());
            }
            AwaitOutcome::Timeout => panic!("timed out after {} envelopes", got.len()),
        }
    }
    assert_eq!(got, sent);
    assert_eq!(
        client::await_envelope(&beta, poll).unwrap(),
        AwaitOutcome::Timeout
    );
}

#[test]
fn a_send_that_half_closes_still_gets_its_reply() {
    let hub = Hub::start();
    let mut s = hub.raw();
    s.write(&format!(
        "{}{}",
        hello_line("alpha", token_of("alpha")),
        send_line("half-1", "beta", "task", None, "{}")
    ));
    s.shutdown_write();
    s.expect_line(OK);
    s.expect_line(r#"{"accepted":{"id":"half-1"}}"#);
    s.expect_eof();
    assert_eq!(hub.drain("beta"), vec!["half-1".to_owned()]);
}

#[test]
fn an_await_that_half_closes_never_loses_the_envelope() {
    let hub = Hub::start();
    // Whether the hub sees the EOF before or after it hands the envelope out, the envelope
    // ends up in exactly one place: on this socket, or back in the queue.
    for _ in 0..20 {
        let id = hub.send("alpha", "beta", "task", None, "{}");
        let mut s = hub.raw();
        s.write(&format!(
            "{}{AWAIT_NOW}\n",
            hello_line("beta", token_of("beta"))
        ));
        s.shutdown_write();
        // A peer at EOF is gone as far as the hub cares: it may not even get the ok line.
        let mut lines = Vec::new();
        while let Ok(Some(line)) = s.try_line() {
            lines.push(line);
        }
        let queued = hub.drain("beta");
        match lines.iter().find(|l| l.starts_with(r#"{"envelope""#)) {
            Some(line) => {
                let v: serde_json::Value = serde_json::from_str(line).unwrap();
                assert_eq!(v["envelope"]["id"], id.as_str());
                assert!(queued.is_empty(), "delivered and still queued: {queued:?}");
            }
            None => assert_eq!(
                queued,
                vec![id],
                "not delivered ({lines:?}), so it must be queued"
            ),
        }
    }
    // A parked await that half-closes is dropped, not left to swallow the next envelope.
    let s = hub.park("beta", AWAIT);
    s.shutdown_write();
    hub.wait_service_log("the half-closed await to be dropped", |l| {
        l.contains("outcome=dropped")
    });
    let id = hub.send("alpha", "beta", "task", None, "{}");
    assert_eq!(hub.drain("beta"), vec![id]);
}

// ----- acknowledged delivery (our extension, SPEC §12.2): closes the window above -----

const AWAIT_ACK: &str = r#"{"await":{"ack":true}}"#;

#[test]
fn an_acked_delivery_is_exact_on_the_wire() {
    let hub = Hub::start();
    let id = hub.send("alpha", "beta", "task", None, r#"{"n":1}"#);
    let mut r = hub.park("beta", AWAIT_ACK);
    assert_eq!(r.envelope()["id"], id.as_str());
    r.write(&format!("{{\"ack\":{{\"id\":\"{id}\"}}}}\n"));
    r.expect_line(&format!(r#"{{"acked":{{"id":"{id}"}}}}"#));
    r.expect_eof();
    let audit = hub.wait_audit("the ack record", |a| {
        a.iter().any(|v| v["event"] == "acked")
    });
    let delivered = audit.iter().find(|v| v["event"] == "delivered").unwrap();
    assert_eq!(delivered["ack"], true);
    assert_eq!(
        hub.drain("beta"),
        Vec::<String>::new(),
        "acked means consumed"
    );

    // An ack outside an acknowledged delivery is refused.
    let mut s = hub.login("beta");
    s.write(&format!("{{\"ack\":{{\"id\":\"{id}\"}}}}\n"));
    assert!(s
        .error()
        .contains("an ack outside an acknowledged delivery"));
}

#[test]
fn an_ack_mode_reader_that_closes_without_acking_loses_nothing() {
    let hub = Hub::start();
    let id = hub.send("alpha", "beta", "task", None, "{}");
    let mut r = hub.park("beta", AWAIT_ACK);
    assert_eq!(r.envelope()["id"], id.as_str());
    drop(r); // read, never acked
    let back = poll_until("the unacked envelope to be queued again", || {
        hub.poll_envelope("beta", AWAIT_NOW)
    });
    assert_eq!(back["id"], id.as_str(), "the same envelope, same id");
    // A record that gates nothing is written at the end of its loop iteration, after that
    // iteration's socket writes: the redelivery can reach this client first.
    hub.wait_audit("the requeued record", |a| {
        a.iter().any(|v| v["event"] == "requeued")
    });
    let requeued = hub.audit_events("requeued");
    assert_eq!(requeued.len(), 1, "{requeued:?}");
    assert_eq!(requeued[0]["attempts"], 1);
}

#[test]
fn a_wrong_ack_returns_the_envelope() {
    let hub = Hub::start();
    let id = hub.send("alpha", "beta", "task", None, "{}");
    let mut r = hub.park("beta", AWAIT_ACK);
    assert_eq!(r.envelope()["id"], id.as_str());
    r.write("{\"ack\":{\"id\":\"some-other-id\"}}\n");
    let msg = r.error();
    assert!(
        msg.contains("does not match") && msg.contains("delivered again"),
        "{msg}"
    );
    assert_eq!(hub.drain("beta"), vec![id]);
}

#[test]
fn an_ack_mode_reader_that_never_acks_gets_it_again_after_the_ack_deadline() {
    let hub = Hub::with_limits(|l| l.ack_timeout_ms = 300);
    let id = hub.send("alpha", "beta", "task", None, "{}");
    let mut r = hub.park("beta", AWAIT_ACK);
    assert_eq!(r.envelope()["id"], id.as_str());
    let msg = r.error(); // bounded by the harness read deadline
    assert!(msg.contains("no ack within 300 ms"), "{msg}");
    assert_eq!(hub.drain("beta"), vec![id]);
}

#[test]
fn an_ack_mode_await_closed_just_before_a_send_never_loses_it() {
    // The race of `parked_await_closed_just_before_a_send_is_queued_or_accounted_for`, in ack
    // mode: a delivery written into the dying socket is never acked, so it comes back.
    let hub = Hub::start();
    for _ in 0..20 {
        let waiter = hub.park("beta", AWAIT_ACK);
        drop(waiter);
        let id = hub.send("alpha", "beta", "task", None, "{}");
        let back = poll_until("the envelope to be queued", || {
            hub.poll_envelope("beta", AWAIT_NOW)
        });
        assert_eq!(back["id"], id.as_str());
        assert_eq!(hub.drain("beta"), Vec::<String>::new());
    }
}

#[test]
fn the_cli_await_acks_by_default_and_no_ack_does_not() {
    let hub = Hub::start();
    let acked = hub.cli_send("alpha", "beta", "task", "1");
    let plain = hub.cli_send("alpha", "beta", "task", "2");
    let out = hub.cli("await", "beta", &["--timeout", "0"]);
    out.assert_code(0);
    assert!(out.stderr.is_empty(), "{}", out.stderr);
    assert!(out.stdout.contains(&acked));
    let out = hub.cli("await", "beta", &["--timeout", "0", "--no-ack"]);
    out.assert_code(0);
    assert!(out.stdout.contains(&plain));
    // The plain delivery's `delivered` record follows its bytes to the socket (PLAN.md §3),
    // so the client can print the envelope before the record is in the file: wait for both.
    let audit = hub.wait_audit("the ack record and both deliveries", |a| {
        a.iter().any(|v| v["event"] == "acked")
            && [&acked, &plain].iter().all(|id| {
                a.iter()
                    .any(|v| v["event"] == "delivered" && v["id"] == **id)
            })
    });
    let delivered = |id: &str| {
        audit
            .iter()
            .find(|v| v["event"] == "delivered" && v["id"] == id)
            .unwrap()["ack"]
            .clone()
    };
    assert_eq!(delivered(&acked), true);
    assert_eq!(delivered(&plain), false);
    let acks: Vec<_> = audit
        .iter()
        .filter(|v| v["event"] == "acked")
        .map(|v| v["id"].clone())
        .collect();
    assert_eq!(acks, vec![serde_json::json!(acked)]);
}
