//! claudectl 0.64's one-shots against the real hub (issue 11; docs/relay-protocol.md §2.6):
//! `relay delegate` / `relay interrupt` open a new connection as the same peer, send one
//! message and close, without marking themselves `transient`. The v0 double of `relay.rs`
//! plays both the peer's lasting link (beating every interval) and its one-shots.
//!
//! Owns: that one-shots in either direction never displace the lasting link (it keeps beating,
//! nobody redials, the service log has no link-down) while their messages are still served,
//! and that a lasting link whose socket died is still replaced by the peer's new connection.
//! Refuses: the exact timing of the rule (the links table's tests in `crates/proto/src/relay/links/tests.rs`,
//! on a virtual clock). Every wait polls the log, the status file or a socket.

use crate::harness::*;
use crate::relay::*;
use serde_json::{json, Value};
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The peer's lasting link, kept by a thread: it beats every `hb` and reads every line the hub
/// sends, counting the hub's heartbeats and noting anything a 0.64 reader could not take.
struct Lasting {
    hub_beats: Arc<AtomicUsize>,
    closed_by_hub: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<Vec<String>>>,
}

impl Lasting {
    fn keep(mut c: V0Conn, me: &'static str, hub_id: &'static str, hb: Duration) -> Lasting {
        let hub_beats = Arc::new(AtomicUsize::new(0));
        let closed_by_hub = Arc::new(AtomicBool::new(false));
        let stop = Arc::new(AtomicBool::new(false));
        let (beats, closed, stopping) = (hub_beats.clone(), closed_by_hub.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            let mut violations = Vec::new();
            while !stopping.load(Ordering::SeqCst) {
                c.send(me, "heartbeat", json!({}));
                let next = Instant::now() + hb;
                loop {
                    match c.next(next) {
                        Got::Timeout => break,
                        Got::Eof => {
                            closed.store(true, Ordering::SeqCst);
                            return violations;
                        }
                        Got::Line(l) => match parse_v0(&l) {
                            Err(e) => violations.push(e),
                            Ok(m) if m.msg_type == "heartbeat" && m.from_peer == hub_id => {
                                beats.fetch_add(1, Ordering::SeqCst);
                            }
                            // A hub without [tasks] answers a one-shot's delegate_task
                            // with a failed handoff on this link (docs/delegation.md).
                            Ok(m) if m.msg_type == "task_handoff" && m.from_peer == hub_id => {}
                            Ok(m) => violations.push(format!("unexpected {}", m.msg_type)),
                        },
                    }
                }
            }
            violations
        });
        Lasting {
            hub_beats,
            closed_by_hub,
            stop,
            thread: Some(thread),
        }
    }

    /// Waits for `n` more heartbeats from the hub on this link.
    fn wait_beats(&self, n: usize) {
        let from = self.hub_beats.load(Ordering::SeqCst);
        poll_until("more heartbeats on the lasting link", || {
            assert!(
                !self.closed_by_hub.load(Ordering::SeqCst),
                "the hub closed the lasting link"
            );
            (self.hub_beats.load(Ordering::SeqCst) >= from + n).then_some(())
        });
    }

    fn finish(mut self) -> Vec<String> {
        self.stop.store(true, Ordering::SeqCst);
        self.thread.take().unwrap().join().unwrap()
    }
}

/// A `delegate_task` in the shape claudectl 0.64 sends (docs/relay-protocol.md §8).
fn delegate(task: &str) -> Value {
    json!({
        "task_id": task,
        "prompt": "say hi",
        "cwd": null,
        "context": {"dependency_graph": {"blocks": [], "blocked_by": []}},
    })
}

/// One claudectl one-shot: a new connection, a v0 handshake as `me`, one message, closed.
fn one_shot(addr: SocketAddr, me: &str, key: &str, hub_id: &str, msg_type: &str, payload: Value) {
    let (mut c, ack) = v0_dial_and_handshake(addr, me, key, hub_id);
    assert_eq!(ack["payload"], json!({"status": "ok"}), "{ack}");
    c.send(me, msg_type, payload);
    // claudectl closes about 250 ms later. Here: our end first (so the hub's beats we did not
    // read cannot turn the close into a reset), then the hub's close when it sees ours.
    c.stream.shutdown(std::net::Shutdown::Write).unwrap();
    loop {
        match c.next(Instant::now() + DEADLINE) {
            Got::Eof => return,
            Got::Line(_) => {}
            Got::Timeout => panic!("the hub kept a one-shot open after it closed its end"),
        }
    }
}

fn assert_one_shots_left_the_link_alone(
    hub: &RelayHub,
    peer: &str,
    lasting: Lasting,
    shots: usize,
) {
    // The lasting link keeps beating after the last one-shot closed.
    lasting.wait_beats(3);
    let p = hub.wait_up(peer);
    assert_eq!(p["reconnects"], 0, "{p}");
    let log = hub.log();
    assert_eq!(
        count(&log, &format!("relay: link with {peer} up")),
        1,
        "{log}"
    );
    assert!(!log.contains(&format!("link with {peer} down")), "{log}");
    assert!(!log.contains("replaced"), "{log}");
    assert_eq!(
        count(&log, &format!("relay: second connection from {peer} (")),
        shots,
        "{log}"
    );
    let violations = lasting.finish();
    assert!(violations.is_empty(), "{violations:?}");
}

#[test]
fn claudectl_one_shots_never_displace_the_link_it_dialled() {
    let key = key_hex(0x90);
    let east = RelayHub::start(
        Setup::new(),
        RelaySpec::new("east", "127.0.0.2:0").peer("legacy", None, &key, true),
    );
    let (c, _ack) = v0_dial_and_handshake(east.relay_addr, "legacy", &key, "east");
    let lasting = Lasting::keep(c, "legacy", "east", HB);
    east.wait_up("legacy");
    lasting.wait_beats(1);
    let shots = [
        ("delegate_task", delegate("t-1")),
        (
            "task_interrupt",
            json!({"task_id": "t-1", "interrupt_type": "nudge", "reason": "status?"}),
        ),
        ("delegate_task", delegate("t-2")),
        (
            "task_interrupt",
            json!({"task_id": "t-2", "interrupt_type": "stop", "reason": "enough"}),
        ),
    ];
    for (i, (t, payload)) in shots.iter().enumerate() {
        one_shot(east.relay_addr, "legacy", &key, "east", t, payload.clone());
        east.hub.wait_service_log("the one-shot closed", |l| {
            count(
                l,
                "relay: second connection from legacy closed (peer closed the connection); the link stays up",
            ) == i + 1
        });
        // Its message was served as the peer's.
        let log = east.log();
        assert_eq!(
            count(&log, "relay: legacy sent delegate_task")
                + count(&log, "relay: legacy sent task_interrupt"),
            i + 1,
            "{log}"
        );
        lasting.wait_beats(1);
    }
    assert_one_shots_left_the_link_alone(&east, "legacy", lasting, shots.len());
}

#[test]
fn claudectl_one_shots_never_displace_the_link_we_dialled() {
    // Our hub dialled the peer; its one-shots dial us. "ctl" < "east", so by the
    // simultaneous-dial rule alone a one-shot would have won.
    let key = key_hex(0x91);
    let listener = TcpListener::bind("127.0.0.3:0").unwrap();
    let east = RelayHub::start(
        Setup::new(),
        RelaySpec::new("east", "127.0.0.2:0").peer(
            "ctl",
            Some(listener.local_addr().unwrap()),
            &key,
            true,
        ),
    );
    let (mut c, _hs) = v0_accept_and_challenge(&listener, &key, "east");
    c.send("ctl", "handshake_ack", json!({"status": "ok"}));
    let lasting = Lasting::keep(c, "ctl", "east", HB);
    assert_eq!(east.wait_up("ctl")["direction"], "dialled");
    for i in 0..3 {
        one_shot(
            east.relay_addr,
            "ctl",
            &key,
            "east",
            "delegate_task",
            delegate(&format!("t-{i}")),
        );
        east.hub.wait_service_log("the one-shot closed", |l| {
            count(l, "relay: second connection from ctl closed") == i + 1
        });
        lasting.wait_beats(1);
    }
    assert_eq!(count(&east.log(), "relay: ctl sent delegate_task"), 3);
    assert_eq!(east.wait_up("ctl")["direction"], "dialled");
    assert_one_shots_left_the_link_alone(&east, "ctl", lasting, 3);
}

#[test]
fn a_v0_link_whose_socket_died_is_replaced_by_the_peers_new_connection() {
    // A slower beat, so the test can tell "missed a beat" (1.5 intervals) from "dead by
    // liveness" (3 intervals) without racing a 200 ms clock.
    let key = key_hex(0x92);
    let mut spec = RelaySpec::new("east", "127.0.0.2:0").peer("legacy", None, &key, true);
    spec.heartbeat_ms = 2000;
    let east = RelayHub::start(Setup::new(), spec);
    // The first link beats once, then its peer "dies": the socket stays open, nothing more
    // comes from it (a half-open connection: the machine rebooted, the NAT forgot it).
    let (mut dead, _ack) = v0_dial_and_handshake(east.relay_addr, "legacy", &key, "east");
    dead.send("legacy", "heartbeat", json!({}));
    east.hub.wait_service_log("the first link up", |l| {
        l.contains("relay: link with legacy up")
    });
    // The hub beats at once and then every 2 s: its third beat comes 4 s after our only one,
    // past 1.5 intervals (3 s) and before liveness gives up (6 s).
    for n in 0..3 {
        let beat = dead.expect_line(&format!("the hub's beat {n} on the first link"));
        assert_eq!(beat["msg_type"], "heartbeat", "{beat}");
    }
    // The peer is back with a new lasting connection: the link missed a beat, so the new one
    // is the link at once, and the dead socket is closed.
    let (fresh, _ack) = v0_dial_and_handshake(east.relay_addr, "legacy", &key, "east");
    let lasting = Lasting::keep(fresh, "legacy", "east", Duration::from_millis(2000));
    east.hub
        .wait_service_log("the new link replaced the dead one", |l| {
            l.contains("relay: link with legacy replaced by a newer link (accepted)")
        });
    loop {
        match dead.next(Instant::now() + DEADLINE) {
            Got::Eof => break,
            Got::Line(_) => {}
            Got::Timeout => panic!("the dead link was never closed"),
        }
    }
    lasting.wait_beats(2);
    let log = east.log();
    assert_eq!(count(&log, "relay: link with legacy up"), 2, "{log}");
    assert!(!log.contains("link with legacy down"), "{log}");
    assert!(!log.contains("second connection from legacy ("), "{log}");
    assert!(lasting.finish().is_empty());
}

#[test]
fn a_half_open_link_hands_over_to_the_standing_by_connection_when_it_dies() {
    // The new connection comes while the dead link has not missed a beat yet: it stands by,
    // and takes over the moment liveness drops the dead one (or after the grace, whichever
    // comes first); either way the peer ends up linked on it without redialling.
    let key = key_hex(0x93);
    let east = RelayHub::start(
        Setup::new(),
        RelaySpec::new("east", "127.0.0.2:0").peer("legacy", None, &key, true),
    );
    let (mut dead, _ack) = v0_dial_and_handshake(east.relay_addr, "legacy", &key, "east");
    dead.send("legacy", "heartbeat", json!({}));
    east.hub.wait_service_log("the first link up", |l| {
        l.contains("relay: link with legacy up")
    });
    let (fresh, _ack) = v0_dial_and_handshake(east.relay_addr, "legacy", &key, "east");
    let lasting = Lasting::keep(fresh, "legacy", "east", HB);
    east.hub.wait_service_log("the standby took over", |l| {
        l.contains("relay: link with legacy moved to its second connection (accepted)")
            || l.contains("relay: link with legacy replaced by")
    });
    loop {
        match dead.next(Instant::now() + DEADLINE) {
            Got::Eof => break,
            Got::Line(_) => {}
            Got::Timeout => panic!("the dead link was never closed"),
        }
    }
    lasting.wait_beats(3);
    let p = east.wait_up("legacy");
    assert_eq!(p["reconnects"], 0, "{p}");
    assert!(lasting.finish().is_empty());
}
