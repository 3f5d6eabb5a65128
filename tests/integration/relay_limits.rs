//! The relay's caps attacked over real sockets (issue 9; docs/relay-protocol.md, "Limits"):
//! two thousand silent connections from twenty source addresses, a peer that floods
//! heartbeats, unknown types and messages while local clients work, and the startup checks of
//! the caps and of the descriptor rule.
//!
//! Owns: what an operator observes — that local `send`/`await` keep working, that the hub
//! holds no more descriptors than its caps allow and does not spin, and that the service log
//! gets a bounded number of lines whatever the attacker sends. Refuses: the exact cap and
//! rate arithmetic (the sans-IO tests in `crates/server/src/event_loop/relay_gate.rs`, `crates/proto/src/relay/throttle.rs`
//! and `crates/proto/src/relay/tests/limits.rs` own it). Every wait is a poll with `DEADLINE`; the attacker
//! speaks relay v0, whose bytes never change, with its own HMAC.

use crate::harness::*;
use crate::relay::{
    connect_from, fresh_nonce, key_hex, proof, unix_ms, west_setup, RelayHub, RelaySpec,
};
use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// A hub with a relay listening on 127.0.0.2, knowing one peer, `legacy` (v0 allowed), with
/// `extra` lines added to its `[relay]` table (which has no `handshake_timeout_ms`).
fn relay_hub(setup: Setup, key: &str, extra: &str) -> (Hub, SocketAddr) {
    let mut setup = setup;
    std::fs::create_dir(setup.path("keys")).unwrap();
    write_file(&setup.path("keys/legacy.key"), &format!("{key}\n"), 0o600);
    setup.config_text = Some(format!(
        "{}\n[relay]\npeer_id = \"east\"\nlisten = \"127.0.0.2:0\"\nheartbeat_interval_ms = 1000\n\
         reconnect_backoff_ms = [100]\n\
         features = [\"unknown-ok\", \"mutual-auth\", \"frame-bin\", \"lz4\", \"hb-delta\"]\n\
         status_path = \"relay-status.json\"\n{extra}\n\
         [[relay.peers]]\nid = \"legacy\"\nkey_file = \"keys/legacy.key\"\nallow_claudectl = true\n",
        setup.generated_config()
    ));
    let hub = setup.start();
    let log = hub.service_log();
    let addr = log
        .lines()
        .find_map(|l| l.split("relay started as east, listening on ").nth(1))
        .unwrap_or_else(|| panic!("no relay start line:\n{log}"))
        .trim()
        .parse()
        .unwrap();
    (hub, addr)
}

/// CPU seconds (user + system) process `pid` has used.
fn cpu_secs(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..]
        .split_whitespace()
        .collect();
    // utime and stime are fields 14 and 15 of stat; field 3 is the first after the name.
    let ticks = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
    // SAFETY: sysconf only reads a system constant.
    ticks / unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64
}

fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count()
}

/// One `agent-hub send` and one `agent-hub await` through the real CLI.
fn send_and_await(hub: &Hub, body: &str) {
    let id = hub.cli_send("alpha", "beta", "task", body);
    let out = hub.cli("await", "beta", &["--timeout", "10"]);
    out.assert_code(0);
    assert!(out.stdout.contains(&id), "{}", out.stdout);
}

/// What the hub did with a fresh connection: Some(first bytes) if it spoke (a challenge),
/// None if it closed it without a byte. Bounded by `DEADLINE`.
fn first_words(s: &mut TcpStream) -> Option<Vec<u8>> {
    s.set_read_timeout(Some(DEADLINE)).unwrap();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return None,
            Ok(n) => return Some(buf[..n].to_vec()),
            Err(e) if e.kind() == ErrorKind::ConnectionReset => return None,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => panic!("the hub neither spoke nor closed within {DEADLINE:?}: {e}"),
        }
    }
}

/// The counts of `relay: refused N connections` lines in the service log.
fn refusal_lines(log: &str) -> Vec<u64> {
    log.lines()
        .filter_map(|l| l.split("relay: refused ").nth(1))
        .map(|rest| rest.split(' ').next().unwrap().parse().unwrap())
        .collect()
}

#[test]
fn two_thousand_silent_relay_connections_leave_local_clients_working() {
    const CONNECTIONS: usize = 2000;
    const UNAUTHENTICATED: usize = 16;
    // The deadline outlasts the test: no admitted connection frees its slot during the flood.
    let (hub, relay) = relay_hub(
        Setup::new(),
        &key_hex(0x40),
        &format!(
            "handshake_timeout_ms = 60000\nmax_connections = 32\n\
             max_unauthenticated = {UNAUTHENTICATED}\nmax_connections_per_address = 4"
        ),
    );
    let pid = hub.pid();
    send_and_await(&hub, r#"{"before":true}"#);
    let fds_before = open_fds(pid);
    let (cpu_start, wall_start) = (cpu_secs(pid), Instant::now());

    // Five from one address (the fifth is past the per-address cap), then round robin over
    // twenty more: everything past the sixteenth is past the unauthenticated cap. In chunks,
    // each read back before the next, so the flood never overruns the listen backlog (a
    // dropped SYN would only be retried, a second later).
    let source = |i: usize| match i {
        0..=4 => Ipv4Addr::new(127, 0, 0, 9),
        _ => Ipv4Addr::new(127, 0, 0, 10 + (i % 20) as u8),
    };
    let mut held = Vec::new();
    let mut refused = 0;
    for chunk in (0..CONNECTIONS).collect::<Vec<_>>().chunks(100) {
        let mut conns: Vec<TcpStream> = chunk
            .iter()
            .map(|&i| connect_from(source(i), relay))
            .collect();
        for mut c in conns.drain(..) {
            match first_words(&mut c) {
                None => refused += 1,
                Some(said) => {
                    let text = String::from_utf8_lossy(&said);
                    assert!(text.contains("\"challenge\""), "{text}");
                    // Silent from here on: it holds its slot until the handshake deadline.
                    held.push(c);
                }
            }
        }
        let fds = open_fds(pid);
        assert!(
            fds <= fds_before + UNAUTHENTICATED + 2,
            "{fds} descriptors open during the flood, {fds_before} before"
        );
    }
    assert_eq!(held.len(), UNAUTHENTICATED);
    assert_eq!(refused, CONNECTIONS - UNAUTHENTICATED);
    // With the attack in place, local clients still send and await.
    for i in 0..10 {
        send_and_await(&hub, &format!("{{\"during\":{i}}}"));
    }
    // Thousands of accepts and a dozen sessions: the hub did not spin.
    let (cpu, wall) = (cpu_secs(pid) - cpu_start, wall_start.elapsed());
    assert!(
        cpu < (wall.as_secs_f64() / 2.0).max(0.5),
        "the hub used {cpu} s of CPU in {wall:?} while refusing connections"
    );

    // Every refusal is counted, in a handful of summed lines; no line per connection.
    let log = hub.wait_service_log("every refusal to be summed", |l| {
        refusal_lines(l).iter().sum::<u64>() == refused as u64
    });
    assert!(refusal_lines(&log).len() <= 4, "{log}");
    assert!(
        log.contains("at max_unauthenticated (16)")
            && log.contains("1 at max_connections_per_address (4)"),
        "{log}"
    );
    let relay_lines = log.lines().filter(|l| l.contains(" relay: ")).count();
    assert!(
        relay_lines < 40,
        "{relay_lines} relay lines for {CONNECTIONS} connections:\n{log}"
    );
    // The held connections free their slots when they go: a new one is admitted.
    drop(held);
    poll_until("a slot to be free again", || {
        let mut c = connect_from(Ipv4Addr::new(127, 0, 0, 30), relay);
        first_words(&mut c).map(|_| ())
    });
    send_and_await(&hub, r#"{"after":true}"#);
}

/// A v0 peer `legacy` linked by hand: challenge read, proof sent, `ok` read.
fn link_as_legacy(relay: SocketAddr, key: &str) -> TcpStream {
    let mut s = TcpStream::connect_timeout(&relay, DEADLINE).unwrap();
    s.set_read_timeout(Some(DEADLINE)).unwrap();
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    let mut read_line = |s: &mut TcpStream| -> serde_json::Value {
        line.clear();
        loop {
            s.read_exact(&mut byte).expect("a line from the hub");
            if byte[0] == b'\n' {
                return serde_json::from_slice(&line).unwrap();
            }
            line.push(byte[0]);
        }
    };
    let challenge = read_line(&mut s);
    assert_eq!(challenge["msg_type"], "challenge", "{challenge}");
    let nonce = challenge["payload"]["nonce"].as_str().unwrap();
    let ms = unix_ms();
    let hs = serde_json::json!({
        "id": format!("msg_{ms}_0"), "msg_type": "handshake", "from_peer": "legacy",
        "timestamp": ms, "payload": {"proof": proof(key, nonce), "version": "0.64.0"},
    });
    s.write_all(format!("{hs}\n").as_bytes()).unwrap();
    let ack = read_line(&mut s);
    assert_eq!(ack["payload"], serde_json::json!({"status": "ok"}), "{ack}");
    s
}

/// What the flooding peer sent.
#[derive(Debug, Default, Clone, Copy)]
struct Flood {
    beats: u64,
    unknown: u64,
    known: u64,
}

/// Writes batches of heartbeats, messages of invented types and a known type the hub does not
/// act on, as fast as the socket takes them, until `stop`.
fn flood(mut s: TcpStream, stop: Arc<AtomicBool>) -> (TcpStream, Flood) {
    let mut sent = Flood::default();
    let mut n = 0u64;
    let line = |n: u64, t: &str, payload: &str| {
        let ms = unix_ms();
        format!(
            "{{\"id\":\"msg_{ms}_{n}\",\"msg_type\":\"{t}\",\"from_peer\":\"legacy\",\"timestamp\":{ms},\"payload\":{payload}}}\n"
        )
    };
    while !stop.load(Ordering::Relaxed) || sent.beats == 0 {
        let mut batch = String::new();
        for _ in 0..500 {
            n += 1;
            batch.push_str(&line(n, "heartbeat", "{}"));
            sent.beats += 1;
        }
        for _ in 0..100 {
            n += 1;
            batch.push_str(&line(n, &format!("invented_type_{n}"), "{}"));
            sent.unknown += 1;
            n += 1;
            batch.push_str(&line(n, "knowledge_request", "{\"since_epoch\":1}"));
            sent.known += 1;
        }
        s.write_all(batch.as_bytes())
            .expect("the hub keeps the link");
    }
    (s, sent)
}

/// `… (dropped from it: N heartbeats over the rate, M messages of unknown types …)` → (N, M).
fn dropped_counts(line: &str) -> (u64, u64) {
    let part = line
        .split("dropped from it: ")
        .nth(1)
        .unwrap_or_else(|| panic!("{line}"));
    let count = |what: &str| -> u64 {
        part.split(", ")
            .find(|p| p.contains(what))
            .and_then(|p| p.split(' ').next())
            .map_or(0, |n| n.trim_end_matches(')').parse().unwrap())
    };
    (count("heartbeats over the rate"), count("unknown types"))
}

#[test]
fn a_peer_flooding_heartbeats_and_unknown_types_is_throttled_and_logged_boundedly() {
    let key = key_hex(0x52);
    let (hub, relay) = relay_hub(Setup::new(), &key, "handshake_timeout_ms = 3000");
    let conn = link_as_legacy(relay, &key);
    hub.wait_service_log("the link up", |l| l.contains("relay: link with legacy up"));
    let started = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let flooder = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || flood(conn, stop))
    };
    // While the peer floods, local clients are served.
    for i in 0..5 {
        send_and_await(&hub, &format!("{{\"during\":{i}}}"));
    }
    stop.store(true, Ordering::Relaxed);
    let (conn, sent) = flooder.join().unwrap();
    assert!(sent.beats >= 1000, "{sent:?}");
    // The peer's heartbeats kept it alive through the flood.
    let log = hub.service_log();
    assert!(!log.contains("link with legacy down"), "{log}");
    // Closing ends the link; its last line counts what was dropped. Bytes are read in order,
    // so every message sent was handled before the close.
    conn.shutdown(std::net::Shutdown::Write).unwrap();
    let log = hub.wait_service_log("the link down", |l| {
        l.contains("relay: link with legacy down")
    });
    let down = log
        .lines()
        .find(|l| l.contains("link with legacy down"))
        .unwrap();
    // Everything the hub did with the flood happened within this.
    let elapsed = started.elapsed();
    let (over_rate, unknown) = dropped_counts(down);
    assert_eq!(unknown, sent.unknown, "{down}");
    // At most one heartbeat per half interval (500 ms) was applied; the rest were dropped.
    let applied_at_most = 2 * elapsed.as_secs() + 3;
    assert!(
        over_rate + applied_at_most >= sent.beats && over_rate < sent.beats,
        "{over_rate} of {} beats dropped in {elapsed:?}: {down}",
        sent.beats
    );
    // However much it sent, the peer got a bounded number of lines in the service log.
    let about_legacy: Vec<&str> = log.lines().filter(|l| l.contains("legacy")).collect();
    let allowed = 20 + (elapsed.as_secs() / 6) as usize + 8;
    assert!(
        about_legacy.len() <= allowed,
        "{} lines about legacy for {} messages:\n{}",
        about_legacy.len(),
        sent.beats + sent.unknown + sent.known,
        about_legacy.join("\n")
    );
    assert_eq!(
        log.matches("heartbeats from legacy come faster than one per 500 ms")
            .count(),
        1,
        "{log}"
    );
    assert!(
        log.lines()
            .filter(|l| l.contains("sent unknown message type"))
            .count()
            <= 20,
        "{log}"
    );
    assert!(
        log.contains("more log lines about legacy were held back"),
        "{log}"
    );
    send_and_await(&hub, r#"{"after":true}"#);
}

#[test]
fn relay_caps_and_the_descriptor_rule_are_checked_at_startup() {
    let key = key_hex(0x61);
    let with = |setup: Setup, extra: &str| {
        let mut setup = setup;
        std::fs::create_dir(setup.path("keys")).unwrap();
        write_file(&setup.path("keys/legacy.key"), &format!("{key}\n"), 0o600);
        setup.config_text = Some(format!(
            "{}\n[relay]\npeer_id = \"east\"\nlisten = \"127.0.0.2:0\"\nheartbeat_interval_ms = 1000\n\
             handshake_timeout_ms = 3000\nreconnect_backoff_ms = [100]\nfeatures = []\n\
             status_path = \"relay-status.json\"\n{extra}\n\
             [[relay.peers]]\nid = \"legacy\"\nkey_file = \"keys/legacy.key\"\nallow_claudectl = true\n",
            setup.generated_config()
        ));
        setup
    };
    let cases = [
        (
            "max_peer_agents = 5000",
            "relay.max_peer_agents is 5000; it must be from 1 to 4096",
        ),
        (
            "max_unauthenticated = 100",
            "relay.max_unauthenticated is 100; it must be from 1 to 64",
        ),
        ("max_connections = 0", "relay.max_connections is 0"),
    ];
    for (extra, want) in cases {
        with(Setup::new(), extra).fails_at("config", want);
    }
    // 1024 client connections + 64 relay connections do not fit in 600 descriptors.
    let mut setup = with(Setup::new(), "");
    setup.nofile_limit = Some(600);
    setup.fails_at("relay", "over this process's limit of 600");
    // With the client cap lowered they do, and the hub serves.
    let mut setup = with(Setup::new().with_limits(|l| l.max_connections = 400), "");
    setup.nofile_limit = Some(600);
    let hub = setup.start();
    send_and_await(&hub, "{}");
}

/// Presents a handshake for `west` with a proof made with no key, from `from`; returns the
/// acceptor's answer line.
fn wrong_proof(from: Ipv4Addr, to: SocketAddr) -> String {
    use std::io::BufRead;
    let mut s = connect_from(from, to);
    s.set_read_timeout(Some(DEADLINE)).unwrap();
    let mut r = std::io::BufReader::new(s.try_clone().unwrap());
    let mut challenge = String::new();
    r.read_line(&mut challenge).unwrap();
    assert!(challenge.contains("\"challenge\""), "{challenge:?}");
    let hs = serde_json::json!({
        "id": format!("msg_{}_hs_{}", unix_ms(), fresh_nonce()),
        "msg_type": "handshake",
        "from_peer": "west",
        "timestamp": unix_ms(),
        "payload": {
            "proof": "0".repeat(64), "proto": 1, "nonce": fresh_nonce(),
            "features": ["unknown-ok", "mutual-auth", "frame-bin", "frame-mac"], "version": "0.1.0",
        },
    });
    s.write_all(format!("{hs}\n").as_bytes()).unwrap();
    let mut ack = String::new();
    r.read_line(&mut ack).unwrap();
    ack
}

/// Issue 29: five connect-and-close from a peer's address locked that peer out of the relay
/// for 60 s, repeatably, so anyone who could open a connection from (or spoof) that address
/// could keep the link down. Only handshakes that present a proof and are denied count now
/// (docs/relay-protocol.md §2.4): twenty bare connections from the peer's own address leave
/// it free to link at once, and five wrong proofs from an address still lock that one out.
#[test]
fn bare_connections_do_not_lock_a_peer_out_but_wrong_proofs_do() {
    let key = key_hex(0x44);
    let east = RelayHub::start(
        Setup::new(),
        RelaySpec::new("east", "127.0.0.2:0").peer("west", None, &key, false),
    );
    let pid = east.hub.pid();
    let fds_before = open_fds(pid);
    // West dials from its listen address, 127.0.0.3: a stranger there opens 20 connections,
    // each taken (it gets a challenge) and closed without a handshake, one after the other
    // (the per-address cap, 8, bounds how many it may hold at once).
    let peer_ip = Ipv4Addr::new(127, 0, 0, 3);
    for i in 0..20 {
        let mut s = connect_from(peer_ip, east.relay_addr);
        let words = first_words(&mut s)
            .unwrap_or_else(|| panic!("connection {i} was refused without a challenge"));
        assert!(
            String::from_utf8_lossy(&words).contains("\"challenge\""),
            "{i}"
        );
        drop(s);
        poll_until("east to release the stranger's connection", || {
            (open_fds(pid) <= fds_before).then_some(())
        });
    }
    assert!(
        !east.log().contains("refusing connections from 127.0.0.3"),
        "{}",
        east.log()
    );
    // The real peer links from that address at once (before, it waited out 60 s).
    let west = RelayHub::start(
        west_setup(),
        RelaySpec::new("west", "127.0.0.3:0").peer("east", Some(east.relay_addr), &key, false),
    );
    east.wait_up("west");
    west.wait_up("east");

    // Five wrong proofs from another address lock that address out, as before.
    let prober = Ipv4Addr::new(127, 0, 0, 5);
    for i in 0..5 {
        let ack = wrong_proof(prober, east.relay_addr);
        assert!(ack.contains("denied"), "attempt {i}: {ack}");
    }
    // The fifth denial refuses the address as east closes that connection, a moment after
    // its answer went out: a probe is closed without a challenge (its service-log line goes
    // through the strangers' log rate, which the twenty closes above have spent).
    poll_until("the prober's address refused", || {
        let mut probe = connect_from(prober, east.relay_addr);
        first_words(&mut probe).is_none().then_some(())
    });
    // The peer's link stands.
    assert_eq!(east.peer("west").unwrap()["state"], "up");
}
