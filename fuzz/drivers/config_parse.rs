//! Fuzz target `config_parse`: the server config (SPEC §7, `config::Config::parse`) from any
//! text, and then what the server does first with a config that parses: a hub core on its
//! `[limits]` (a connection, its hello and verb deadlines, an await's timeout, the ledger's
//! purge) and, with `[relay]`, a relay link on its heartbeat and handshake settings, run
//! through its deadlines. Whatever a config that loads says, none of that may panic (issue:
//! "no panic from configuration"), and a config that loads keeps its meaning when written
//! back as TOML.

use agent_hub_host::config::{Config, Limits, RelayConfig, StoreConfig, RELAY_FEATURES};
use agent_hub_proto::hub::{Hub, Output};
use agent_hub_proto::kernel::now::Now;
use agent_hub_proto::relay::session::{PeerAuth, Session, SessionConfig, SessionState, WallClock};
use agent_hub_proto::relay::Feature;
use agent_hub_proto::roster::Roster;
use agent_hub_proto::wire::HubLine;
use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

pub fn run(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let cfg = match Config::parse(text, Path::new("/etc/hub")) {
        Ok(c) => c,
        Err(e) => {
            let _ = e.to_string();
            return;
        }
    };
    let mut paths = vec![&cfg.audit_log_path, &cfg.service_log_path, &cfg.roster_path];
    if let StoreConfig::Sqlite { path, .. } = &cfg.store {
        paths.push(path);
    }
    if let Some(r) = &cfg.relay {
        paths.push(&r.status_path);
        paths.extend(r.peers.iter().map(|p| &p.key_file));
    }
    for p in paths {
        assert!(p.is_absolute(), "a relative path survived: {p:?}");
    }
    check_limits(&cfg.limits);
    limits_round_trip(&cfg.limits);
    run_hub(&cfg.limits);
    if let Some(r) = &cfg.relay {
        run_relay(r);
    }
}

fn check_limits(l: &Limits) {
    let positive = [
        l.max_line_bytes as u64,
        l.max_connections as u64,
        l.hello_timeout_ms,
        l.verb_timeout_ms,
        l.write_timeout_ms,
        l.queue_max_envelopes as u64,
        l.queue_max_bytes as u64,
        l.hub_max_bytes as u64,
        l.ack_timeout_ms,
        l.idempotency_window_secs,
        l.idempotency_max_ids as u64,
    ];
    assert!(
        positive.iter().all(|&v| v > 0),
        "a zero limit loaded: {l:?}"
    );
    assert!(
        l.max_line_bytes <= 64 * 1024 * 1024,
        "max_line_bytes {}",
        l.max_line_bytes
    );
}

/// `Limits::to_toml` in a minimal config parses to the same limits.
fn limits_round_trip(l: &Limits) {
    let text = format!(
        "port = 0\naudit_log_path = \"a\"\nservice_log_path = \"s\"\nroster_path = \"r\"\n[store]\nkind = \"memory\"\n{}",
        agent_hub_host::config::limits_to_toml(l)
    );
    match Config::parse(&text, Path::new("/")) {
        Ok(back) => assert_eq!(&back.limits, l, "limits change when written back"),
        Err(e) => panic!("limits that loaded do not load when written back: {e}\n{text}"),
    }
}

fn now_at(t: Instant) -> Now {
    Now {
        mono: t,
        wall: chrono::DateTime::from_timestamp(1_784_616_051, 0).expect("a fixed time"),
    }
}

/// A hub on these limits: one connection that never says hello, one that logs in and awaits
/// with the longest timeout the wire allows, one that logs in and sends no verb; every
/// deadline the limits set is reached. The silent one must have been refused by its hello
/// deadline.
fn run_hub(limits: &Limits) {
    let roster = Roster::parse("[agents]\na = \"token-a\"\nb = \"token-b\"\n").expect("valid");
    let t0 = Instant::now();
    let mut hub = Hub::new(
        roster,
        limits.clone(),
        Box::new(agent_hub_proto::kernel::ids::SeededIds::new(0)),
    );
    hub.start_purging(now_at(t0));
    hub.enable_forwarding("here", ["there".to_owned()], 1);
    hub.handle_connect(1, now_at(t0));
    hub.handle_connect(2, now_at(t0));
    hub.handle_line(
        2,
        br#"{"hello":{"name":"a","token":"token-a"}}"#,
        now_at(t0),
    );
    hub.handle_line(
        2,
        br#"{"await":{"timeoutSecs":18446744073709551615}}"#,
        now_at(t0),
    );
    hub.handle_connect(3, now_at(t0));
    hub.handle_line(
        3,
        br#"{"hello":{"name":"b","token":"token-b"}}"#,
        now_at(t0),
    );
    let mut at = [
        limits.hello_timeout(),
        limits.verb_timeout(),
        limits.ack_timeout(),
        limits.write_timeout(),
        Duration::from_secs(limits.idempotency_window_secs),
        Duration::from_secs(u64::from(u32::MAX)),
    ];
    at.sort();
    let mut silent_refused = false;
    for d in at {
        let Some(t) = t0.checked_add(d) else { continue };
        let now = now_at(t);
        hub.handle_timeout(now);
        while let Some(o) = hub.poll_output() {
            match o {
                Output::Write { conn: 1, line } => {
                    let l = HubLine::decode(line.trim_end().as_bytes()).expect("a hub line");
                    silent_refused |= matches!(l, HubLine::Error { .. });
                }
                Output::Close { conn, .. } | Output::Answered { conn } => {
                    hub.handle_closed(conn, true, "closed", now)
                }
                _ => {}
            }
        }
        if d >= limits.hello_timeout() {
            assert!(
                silent_refused,
                "no hello for {d:?} and the connection is still open"
            );
        }
        let _ = hub.poll_timeout();
    }
    let _ = hub.presence();
}

/// A dialer and an acceptor on these relay settings, linked, then run through their beats and
/// the liveness deadline.
fn run_relay(r: &RelayConfig) {
    for f in &r.features {
        assert!(
            RELAY_FEATURES.contains(&f.as_str()),
            "unknown feature {f:?} loaded"
        );
    }
    let t0 = Instant::now();
    let features: Vec<Feature> = r
        .features
        .iter()
        .filter_map(|f| Feature::parse(f))
        .collect();
    let cfg = |name: &str| {
        let mut c = SessionConfig::new(
            name,
            "0.1.0",
            WallClock {
                at: t0,
                unix_ms: 1_784_616_051_000,
            },
        );
        c.features = features.clone();
        c.heartbeat_interval = Duration::from_millis(r.heartbeat_interval_ms);
        c.handshake_timeout = Duration::from_millis(r.handshake_timeout_ms);
        c.listen_port = r.listen.map(|a| a.port());
        c
    };
    let auth = PeerAuth {
        key: [0x42; 32],
        allow_claudectl: true,
        forward: true,
    };
    let peer = r.peers.first().map_or("other", |p| p.id.as_str());
    let mut d = Session::dialer(cfg(&r.peer_id), peer, auth.clone(), [1; 32], 1, t0);
    let keys = HashMap::from([(r.peer_id.clone(), auth)]);
    let mut a = Session::acceptor(cfg(peer), keys, [2; 32], 2, t0);
    let mut now = t0;
    for _ in 0..12 {
        loop {
            let x: Vec<u8> = std::iter::from_fn(|| a.poll_transmit()).flatten().collect();
            let y: Vec<u8> = std::iter::from_fn(|| d.poll_transmit()).flatten().collect();
            if x.is_empty() && y.is_empty() {
                break;
            }
            d.handle_input(&x, now);
            a.handle_input(&y, now);
        }
        while a.poll_event().is_some() || d.poll_event().is_some() {}
        let next = [a.poll_timeout(), d.poll_timeout()]
            .into_iter()
            .flatten()
            .min();
        let Some(next) = next else { break };
        now = now.max(next);
        a.handle_timeout(now);
        d.handle_timeout(now);
    }
    if r.peers.first().is_some_and(|p| p.id != r.peer_id) {
        // Linked (or closed by a deadline) whatever the intervals.
        assert!(
            matches!(d.state(), SessionState::Established | SessionState::Closed),
            "{:?}",
            d.state()
        );
    }
}

/// The example config, its relay table uncommented, and the shapes the unit tests refuse.
pub fn seeds(root: &Path) -> Vec<(String, Vec<u8>)> {
    let path = root.join("config.example.toml");
    let example =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let relay: String = example
        .lines()
        .skip_while(|l| !l.starts_with("# [relay]"))
        .filter_map(|l| l.strip_prefix("# "))
        .filter(|l| !l.starts_with('#'))
        .map(|l| format!("{l}\n"))
        .collect();
    let with_relay = format!("{example}{relay}");
    let sqlite = example.replace(
        "kind = \"memory\"",
        "kind = \"sqlite\"\npath = \"q.db\"\nmax_bytes = 1073741824\nsync = \"full\"",
    );
    let huge = example
        .replace(
            "hello_timeout_ms = 10000",
            "hello_timeout_ms = 18446744073709551615",
        )
        .replace(
            "ack_timeout_ms = 30000",
            "ack_timeout_ms = 18446744073709551615",
        )
        .replace(
            "idempotency_window_secs = 86400",
            "idempotency_window_secs = 18446744073709551615",
        );
    let huge_relay = with_relay
        .replace(
            "heartbeat_interval_ms = 30000",
            "heartbeat_interval_ms = 18446744073709551615",
        )
        .replace(
            "handshake_timeout_ms = 10000",
            "handshake_timeout_ms = 18446744073709551615",
        );
    // The `[tasks]` table uncommented (with a root that exists everywhere), and its approval
    // keys (issue 37) at hostile values.
    let tasks: String = example
        .lines()
        .skip_while(|l| !l.starts_with("# [tasks]"))
        .take_while(|l| !l.is_empty())
        .filter_map(|l| l.strip_prefix("# "))
        .filter(|l| !l.starts_with('#'))
        .map(|l| format!("{l}\n"))
        .collect::<String>()
        .replace("/home/me/src", "/");
    let with_tasks = format!("{example}{tasks}");
    let hostile_tasks = with_tasks
        .replace(
            "permission_timeout_secs = 600",
            "permission_timeout_secs = 18446744073709551615",
        )
        .replace(
            "max_open_requests_per_task = 8",
            "max_open_requests_per_task = 4294967297",
        )
        .replace(
            "permission_fallback = \"reject\"",
            "permission_fallback = \"allow\"",
        )
        .replace(
            "approvers = []",
            "approvers = [\"hub\", \"task-1\", \"\\u001b]0;x\"]",
        );
    vec![
        ("example".to_owned(), example.clone().into_bytes()),
        ("example-tasks".to_owned(), with_tasks.into_bytes()),
        ("hostile-tasks".to_owned(), hostile_tasks.into_bytes()),
        ("example-relay".to_owned(), with_relay.into_bytes()),
        ("example-sqlite".to_owned(), sqlite.into_bytes()),
        ("huge-durations".to_owned(), huge.into_bytes()),
        ("huge-relay".to_owned(), huge_relay.into_bytes()),
        (
            "unknown-key".to_owned(),
            format!("colour = \"red\"\n{example}").into_bytes(),
        ),
        (
            "zero-limit".to_owned(),
            example
                .replace("max_connections = 1024", "max_connections = 0")
                .into_bytes(),
        ),
    ]
}
