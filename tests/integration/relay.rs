//! The relay with the real binaries (issue 4; docs/relay-protocol.md, v0 and
//! v1): two hubs on 127.0.0.2 and 127.0.0.3 linking, negotiating,
//! beating and surviving restarts; a dial leaving from the dialler's listen IP; a wrong key;
//! simultaneous dial; a v0 test double speaking
//! claudectl 0.64's lines in both directions; an impostor acceptor; `relay peers` and relay
//! startup errors (`relay keygen` and the setup it prints: relay_setup.rs).
//!
//! Owns: what an operator and a deployed v0 peer observe of the relay over real sockets — the
//! status file, the service log, the bytes on the wire. Refuses: the session's exact state
//! machine (the sans-IO tests in `crates/proto/src/relay/tests.rs` own it). Every wait is a poll of the
//! status file, the service log or a socket, bounded by `DEADLINE`; the v0 double's reads all
//! carry a timeout; servers are killed on drop.

use crate::harness::*;
use serde_json::{json, Map, Value};
use std::collections::HashSet;
use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::Command;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Heartbeat interval of every hub in this module: a peer is dead after 3 of them.
pub(crate) const HB_MS: u64 = 200;
pub(crate) const HB: Duration = Duration::from_millis(HB_MS);
/// The relay feature set this build knows, in the order the config lists them.
pub(crate) const ALL_FEATURES: [&str; 5] =
    ["unknown-ok", "mutual-auth", "frame-bin", "lz4", "hb-delta"];
/// The 12 msg_types claudectl 0.64 knows (docs/relay-protocol.md §9); anything else kills its
/// reader.
const V0_064_TYPES: [&str; 12] = [
    "challenge",
    "handshake",
    "handshake_ack",
    "heartbeat",
    "ack",
    "delegate_task",
    "task_status",
    "task_handoff",
    "task_interrupt",
    "knowledge_sync",
    "knowledge_request",
    "knowledge_snapshot",
];
/// v0's line cap, not counting the `\n`.
const V0_LINE_CAP: usize = 1_048_576;
/// The second hub's roster, so each side can tell the other's directory from its own.
const WEST_AGENTS: [(&str, &str); 2] = [
    ("omega", "tok-omega-SECRET-4e1a"),
    ("sigma", "tok-sigma-SECRET-90bd"),
];

// ----- keys and proofs (the double's own HMAC, independent of crates/proto/src/relay) -----

/// A deterministic 32-byte key as 64 lowercase hex: bytes `seed, seed+1, …`.
pub(crate) fn key_hex(seed: u8) -> String {
    (0..32u8)
        .map(|i| format!("{:02x}", seed.wrapping_add(i)))
        .collect()
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub(crate) fn unhex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
        .collect()
}

/// docs/relay-protocol.md §2.1: lowercase hex of HMAC-SHA256 keyed with the 32 raw key bytes, over
/// the ASCII text of the nonce hex.
pub(crate) fn proof(key_hex: &str, nonce_hex: &str) -> String {
    use hmac::{Hmac, Mac};
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(&unhex(key_hex)).unwrap();
    mac.update(nonce_hex.as_bytes());
    hex(&mac.finalize().into_bytes())
}

pub(crate) fn fresh_nonce() -> String {
    format!(
        "{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    )
}

pub(crate) fn is_hex64(s: &str) -> bool {
    s.len() == 64
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

pub(crate) fn unix_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

// ----- hub configs -----

pub(crate) struct PeerSpec {
    pub(crate) id: &'static str,
    pub(crate) address: Option<SocketAddr>,
    pub(crate) key: String,
    pub(crate) allow_claudectl: bool,
    pub(crate) forward: bool,
    /// `delegate = true`: the peer may delegate tasks here.
    pub(crate) delegate: bool,
}

pub(crate) struct RelaySpec {
    pub(crate) peer_id: &'static str,
    pub(crate) listen: String,
    pub(crate) features: Vec<&'static str>,
    pub(crate) backoff_ms: Vec<u64>,
    pub(crate) handshake_timeout_ms: u64,
    /// `HB_MS` unless a test needs a slower beat.
    pub(crate) heartbeat_ms: u64,
    pub(crate) peers: Vec<PeerSpec>,
    /// Appended to the config after `[relay]` (a `[tasks]` table).
    pub(crate) tail: String,
    /// `relay.tags` (what its heartbeats' `headroom` says; issue 38's `requires` matches them).
    pub(crate) tags: Vec<&'static str>,
}

impl RelaySpec {
    pub(crate) fn new(peer_id: &'static str, listen: &str) -> RelaySpec {
        RelaySpec {
            peer_id,
            listen: listen.into(),
            features: ALL_FEATURES.to_vec(),
            backoff_ms: vec![100, 200],
            handshake_timeout_ms: 2000,
            heartbeat_ms: HB_MS,
            peers: Vec::new(),
            tail: String::new(),
            tags: Vec::new(),
        }
    }

    pub(crate) fn peer(
        mut self,
        id: &'static str,
        address: Option<SocketAddr>,
        key: &str,
        allow_claudectl: bool,
    ) -> RelaySpec {
        self.peers.push(PeerSpec {
            id,
            address,
            key: key.into(),
            allow_claudectl,
            forward: false,
            delegate: false,
        });
        self
    }

    /// Every peer exchanges mail (`forward = true`), and `bus-forward` is advertised.
    pub(crate) fn forwarding(mut self) -> RelaySpec {
        self.features.push("bus-forward");
        for p in &mut self.peers {
            p.forward = true;
        }
        self
    }

    /// The `[relay]` table; key files are `keys/<peer>.key` next to the config.
    fn toml(&self) -> String {
        let list = |v: &[&str]| {
            v.iter()
                .map(|f| format!("{f:?}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut t = format!(
            "\n[relay]\npeer_id = {:?}\nlisten = {:?}\nheartbeat_interval_ms = {}\nhandshake_timeout_ms = {}\n\
             reconnect_backoff_ms = [{}]\nfeatures = [{}]\nstatus_path = \"relay-status.json\"\n",
            self.peer_id,
            self.listen,
            self.heartbeat_ms,
            self.handshake_timeout_ms,
            self.backoff_ms.iter().map(|w| w.to_string()).collect::<Vec<_>>().join(", "),
            list(&self.features),
        );
        if !self.tags.is_empty() {
            t.push_str(&format!("tags = [{}]\n", list(&self.tags)));
        }
        for p in &self.peers {
            t.push_str(&format!("\n[[relay.peers]]\nid = {:?}\n", p.id));
            if let Some(a) = p.address {
                t.push_str(&format!("address = \"{a}\"\n"));
            }
            t.push_str(&format!(
                "key_file = \"keys/{}.key\"\nallow_claudectl = {}\n",
                p.id, p.allow_claudectl
            ));
            if p.forward {
                t.push_str("forward = true\n");
            }
            if p.delegate {
                t.push_str("delegate = true\n");
            }
        }
        t.push_str(&self.tail);
        t
    }

    /// Writes the key files (mode 600) and sets the setup's whole config text.
    fn apply(&self, setup: &mut Setup) {
        let keys = setup.path("keys");
        if !keys.is_dir() {
            std::fs::create_dir(&keys).unwrap();
        }
        for p in &self.peers {
            write_file(
                &keys.join(format!("{}.key", p.id)),
                &format!("{}\n", p.key),
                0o600,
            );
        }
        setup.config_text = Some(format!("{}{}", setup.generated_config(), self.toml()));
    }
}

/// A running hub with a relay.
pub(crate) struct RelayHub {
    pub(crate) hub: Hub,
    pub(crate) spec: RelaySpec,
    pub(crate) relay_addr: SocketAddr,
}

pub(crate) fn west_setup() -> Setup {
    let setup = Setup::new();
    let mut roster = String::from("[agents]\n");
    for (name, token) in WEST_AGENTS {
        roster.push_str(&format!("{name} = \"{token}\"\n"));
    }
    setup.write_roster(&roster, 0o600);
    setup
}

impl RelayHub {
    pub(crate) fn start(mut setup: Setup, spec: RelaySpec) -> RelayHub {
        spec.apply(&mut setup);
        let hub = setup.start();
        let relay_addr = relay_addr_from_log(&hub);
        RelayHub {
            hub,
            spec,
            relay_addr,
        }
    }

    /// SIGTERM, asserting a clean exit.
    fn terminate(&mut self) {
        let status = self.hub.terminate();
        assert!(
            status.success(),
            "{} exited with {status}; stderr:\n{}",
            self.spec.peer_id,
            self.hub.stderr()
        );
    }

    /// Starts the stopped hub again with its client port and relay address pinned (a peer's
    /// config names the relay address).
    fn restart(&mut self) {
        self.hub.setup.port = self.hub.port;
        self.spec.listen = self.relay_addr.to_string();
        self.spec.apply(&mut self.hub.setup);
        self.hub.restart();
        assert_eq!(relay_addr_from_log(&self.hub), self.relay_addr);
    }

    fn status_path(&self) -> PathBuf {
        self.hub.setup.path("relay-status.json")
    }

    pub(crate) fn status(&self) -> Option<Value> {
        let text = std::fs::read_to_string(self.status_path()).ok()?;
        Some(
            serde_json::from_str(&text)
                .unwrap_or_else(|e| panic!("status file is not JSON ({e}): {text}")),
        )
    }

    /// The peer's row of the status file. Every configured peer is listed, but the file is
    /// written by its own thread (docs/operations.md), so a row may not be there yet right
    /// after startup: this waits until it is.
    pub(crate) fn peer(&self, id: &str) -> Option<Value> {
        Some(poll_until(
            &format!("{}: {id} listed in the status file", self.spec.peer_id),
            || self.peer_now(id),
        ))
    }

    /// The peer's row as the status file says now (None: not listed yet).
    pub(crate) fn peer_now(&self, id: &str) -> Option<Value> {
        let s = self.status()?;
        s["peers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["id"] == id)
            .cloned()
    }

    /// Polls the status file until the peer's row satisfies `pred`; returns the row.
    pub(crate) fn wait_peer(&self, id: &str, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        poll_until(&format!("{}: {id} {what}", self.spec.peer_id), || {
            self.peer_now(id).filter(|p| pred(p))
        })
    }

    pub(crate) fn wait_up(&self, id: &str) -> Value {
        self.wait_peer(id, "up", |p| p["state"] == "up")
    }

    pub(crate) fn log(&self) -> String {
        self.hub.service_log()
    }

    pub(crate) fn config_path(&self) -> PathBuf {
        self.hub.setup.config_path()
    }

    /// CPU seconds (user + system) the server has used so far.
    fn cpu_secs(&self) -> f64 {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.hub.pid())).unwrap();
        let after_comm = &stat[stat.rfind(')').unwrap() + 2..];
        let fields: Vec<&str> = after_comm.split_whitespace().collect();
        // utime and stime are fields 14 and 15 of stat; field 3 is after_comm's first.
        let ticks: f64 = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
        // SAFETY: sysconf only reads a system constant.
        ticks / unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64
    }
}

/// The relay address from the newest `relay started as ID, listening on ADDR` log line (the
/// server prints the same address on stdout before its ready line; the harness reads stdout
/// only for the ready line).
fn relay_addr_from_log(hub: &Hub) -> SocketAddr {
    let log = hub.service_log();
    let line = log
        .lines()
        .rev()
        .find(|l| l.contains("relay started as "))
        .unwrap_or_else(|| panic!("no relay start line in the service log:\n{log}"));
    line.rsplit("listening on ")
        .next()
        .unwrap()
        .trim()
        .parse()
        .unwrap_or_else(|e| panic!("{e}: {line}"))
}

/// A port on `ip` where nothing listens (bound, read, released): for a config that must
/// name a peer's relay address before that peer runs.
pub(crate) fn free_port_on(ip: &str) -> SocketAddr {
    TcpListener::bind((ip, 0)).unwrap().local_addr().unwrap()
}

pub(crate) fn names(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_str().unwrap().to_owned())
        .collect()
}

pub(crate) fn count(haystack: &str, needle: &str) -> usize {
    haystack.matches(needle).count()
}

/// The hub is still serving: its client port answers a hello.
fn assert_serving(h: &RelayHub, agent: &str, token: &str) {
    let mut r = h.hub.raw();
    r.write(&hello_line(agent, token));
    r.expect_line(OK);
}

/// ESTABLISHED TCP sockets (IPv4) with `addr` as their local or remote end: each
/// connection between two local processes appears twice (once per end).
fn established_with(addr: SocketAddr) -> Vec<String> {
    let want = proc_net_addr(addr);
    let text = std::fs::read_to_string("/proc/net/tcp").unwrap();
    text.lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let (local, remote, state) = (f[1], f[2], f[3]);
            (state == "01" && (local == want || remote == want))
                .then(|| format!("{local}-{remote}"))
        })
        .collect()
}

// ----- two hubs -----

/// east (acceptor, 127.0.0.2) and west (dialler, 127.0.0.3), sharing `key`; west is
/// configured with `west_key` for east.
fn east_and_west(key: &str, west_key: &str) -> (RelayHub, RelayHub) {
    let east = RelayHub::start(
        Setup::new(),
        RelaySpec::new("east", "127.0.0.2:0").peer("west", None, key, false),
    );
    assert_eq!(east.relay_addr.ip().to_string(), "127.0.0.2");
    assert_ne!(east.relay_addr.port(), 0);
    let west = RelayHub::start(
        west_setup(),
        RelaySpec::new("west", "127.0.0.3:0").peer("east", Some(east.relay_addr), west_key, false),
    );
    assert_eq!(west.relay_addr.ip().to_string(), "127.0.0.3");
    (east, west)
}

#[test]
fn two_hubs_link_negotiate_and_exchange_heartbeats() {
    let key = key_hex(0x10);
    let (east, west) = east_and_west(&key, &key);
    let e = east.wait_up("west");
    let w = west.wait_up("east");
    assert_eq!(e["proto"], 1, "{e}");
    assert_eq!(w["proto"], 1, "{w}");
    assert_eq!(e["direction"], "accepted");
    assert_eq!(w["direction"], "dialled");
    let mut agreed = names(&e["features"]);
    agreed.sort();
    let mut all: Vec<String> = ALL_FEATURES.iter().map(|s| s.to_string()).collect();
    // frame-mac is implied by mutual-auth and frame-bin, liveness by a liveness_update_ms
    // that is not 0, task-approvals by frame-mac on an agent-hub link (docs/relay-protocol.md
    // §3).
    all.push("frame-mac".into());
    all.push("liveness".into());
    all.push("task-approvals".into());
    // headroom is offered by every agent-hub since issue 38 (design §4).
    all.push("headroom".into());
    all.sort();
    assert_eq!(agreed, all, "every feature both offer is agreed");
    assert_eq!(
        e["features"], w["features"],
        "both ends report the same agreed set"
    );
    assert_eq!(e["peer_version"], w["peer_version"]);
    assert!(!e["peer_version"].as_str().unwrap().is_empty());

    // Heartbeats: each side learns the other's directory, and last_heartbeat advances.
    let e = east.wait_peer("west", "west's agents listed", |p| {
        names(&p["agents"]) == ["omega", "sigma"]
    });
    let w = west.wait_peer("east", "east's agents listed", |p| {
        names(&p["agents"]) == ["alpha", "beta", "delta", "gamma"]
    });
    for (h, peer, first) in [(&east, "west", &e), (&west, "east", &w)] {
        let t0 = first["last_heartbeat"].as_str().unwrap().to_owned();
        let later = h.wait_peer(peer, "a newer heartbeat", |p| {
            p["last_heartbeat"]
                .as_str()
                .is_some_and(|t| t > t0.as_str())
        });
        assert_eq!(later["state"], "up");
        assert!(
            later["bytes_in"].as_u64().unwrap() > 0 && later["bytes_out"].as_u64().unwrap() > 0,
            "{later}"
        );
        assert_eq!(later["reconnects"], 0, "{later}");
    }
    let elog = east.log();
    let wlog = west.log();
    assert!(
        elog.contains("relay: link with west up (accepted, proto 1, features ["),
        "{elog}"
    );
    assert!(
        wlog.contains("relay: link with east up (dialled, proto 1, features ["),
        "{wlog}"
    );

    // The operator's listing.
    let mut cmd = Command::new(SERVER);
    cmd.args(["relay", "peers", "--config"])
        .arg(east.config_path());
    let out = run(cmd, None);
    out.assert_code(0);
    let row = out
        .stdout
        .lines()
        .find(|l| l.starts_with("west "))
        .unwrap_or_else(|| panic!("{}", out.stdout));
    let cols: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(
        &cols[..4],
        &["west", "up", "accepted", "1"],
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.starts_with("peer east listening on 127.0.0.2:"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("PEER") && out.stdout.contains("RECONNECTS"),
        "{}",
        out.stdout
    );

    // Idle between beats: the loop sleeps, it does not spin.
    assert_idle(&[&east, &west]);

    // The key is never written anywhere but its key file.
    for h in [&east, &west] {
        let status = std::fs::read_to_string(h.status_path()).unwrap();
        assert!(!status.contains(&key) && !h.log().contains(&key));
        assert_eq!(mode_of(&h.status_path()), 0o600);
    }
    assert!(!out.stdout.contains(&key));
}

/// Both hubs spend well under half a core over a few heartbeat intervals.
fn assert_idle(hubs: &[&RelayHub]) {
    let t0 = Instant::now();
    let before: Vec<f64> = hubs.iter().map(|h| h.cpu_secs()).collect();
    // The window is a measurement, not a wait for a state: the status file (rewritten at
    // most once a second) must show two newer heartbeats, so it spans about a second.
    let probe = hubs[0];
    let peer = probe.spec.peers[0].id;
    for _ in 0..2 {
        let hb = probe.peer(peer).unwrap()["last_heartbeat"].clone();
        probe.wait_peer(peer, "a later heartbeat (idle window)", |p| {
            p["last_heartbeat"] != hb
        });
    }
    let wall = t0.elapsed().as_secs_f64();
    for (h, b) in hubs.iter().zip(before) {
        let used = h.cpu_secs() - b;
        assert!(
            used < 0.5 * wall + 0.05,
            "{} used {used:.2} s of CPU in {wall:.2} s with nothing to do but beat (a busy loop?)",
            h.spec.peer_id
        );
    }
}

#[test]
fn a_link_survives_either_side_restarting() {
    let key = key_hex(0x20);
    let (mut east, mut west) = east_and_west(&key, &key);
    east.wait_up("west");
    west.wait_up("east");

    // The acceptor restarts: the dialler sees the link drop, backs off, and redials.
    east.terminate();
    let w = west.wait_peer("east", "down after east stopped", |p| {
        p["state"] != "up" && p["reconnects"] == 1
    });
    assert!(w["last_error"].as_str().is_some(), "{w}");
    west.hub.wait_service_log("west logs the link down", |l| {
        l.contains("relay: link with east down")
    });
    east.restart();
    east.wait_up("west");
    let w = west.wait_up("east");
    assert_eq!(w["reconnects"], 1, "{w}");
    assert_eq!(w["direction"], "dialled");
    west.wait_peer("east", "east's agents after its restart", |p| {
        names(&p["agents"]).len() == 4
    });

    // The dialler restarts: the acceptor sees the link drop, and the restarted dialler links.
    west.terminate();
    east.wait_peer("west", "down after west stopped", |p| p["state"] == "down");
    west.restart();
    let e = east.wait_up("west");
    assert_eq!(
        e["reconnects"], 0,
        "the acceptor never dials, so never reconnects: {e}"
    );
    west.wait_up("east");
    east.wait_peer("west", "west's agents after its restart", |p| {
        names(&p["agents"]) == ["omega", "sigma"]
    });
    let elog = east.log();
    // Up three times in east's log (kept across its restart): first, after east's restart,
    // after west's.
    assert_eq!(count(&elog, "relay: link with west up"), 3, "{elog}");
    assert_idle(&[&east, &west]);
}

#[test]
fn a_wrong_key_never_links_and_the_acceptor_says_denied() {
    let (east, west) = east_and_west(&key_hex(0x30), &key_hex(0x90));
    // The dialler retries with backoff; every try is denied.
    east.hub
        .wait_service_log("two denied handshakes", |l| count(l, "denied") >= 2);
    // The dialler says so too (its status's last error moves on once east refuses the address
    // outright, so read its log).
    west.hub
        .wait_service_log("the denial reported", |l| l.contains("denied"));
    let w = west.peer("east").unwrap();
    assert_ne!(w["state"], "up", "{w}");
    let elog = east.log();
    assert!(
        elog.contains("wrong proof from west"),
        "the acceptor says why:\n{elog}"
    );
    assert!(!elog.contains("link with west up"), "{elog}");
    assert!(!west.log().contains("link with east up"), "{}", west.log());
    assert_ne!(east.peer("west").unwrap()["state"], "up");
    // Neither crashed: both still serve clients.
    assert_serving(&east, "alpha", token_of("alpha"));
    assert_serving(&west, "omega", WEST_AGENTS[0].1);
    // After five failed handshakes from one address east refuses it for a minute, as v0
    // acceptors do (the dialler retries every 100-200 ms here, so it gets there). West dials
    // from its relay listen IP, so that is the address refused.
    east.hub
        .wait_service_log("the failing address refused", |l| {
            l.contains("refusing connections from 127.0.0.3 for 60 s after 5 failed handshakes")
        });
    let mut probe = connect_from(Ipv4Addr::new(127, 0, 0, 3), east.relay_addr);
    probe
        .set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    let mut buf = [0u8; 256];
    let n = std::io::Read::read(&mut probe, &mut buf).unwrap_or(0);
    assert_eq!(
        n,
        0,
        "a refused address gets no challenge: {:?}",
        String::from_utf8_lossy(&buf[..n])
    );
    // Another address still gets one.
    let mut other = std::net::TcpStream::connect(east.relay_addr).unwrap();
    other
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let n = other.read(&mut buf).unwrap_or(0);
    assert!(
        String::from_utf8_lossy(&buf[..n]).contains("\"challenge\""),
        "127.0.0.1 is not refused: {:?}",
        String::from_utf8_lossy(&buf[..n])
    );
}

/// A blocking TCP connection to `to` from `ip` (the kernel picks the port): std cannot bind
/// before connecting. The test's own, independent of the server's dialling code.
pub(crate) fn connect_from(ip: Ipv4Addr, to: SocketAddr) -> TcpStream {
    use std::os::fd::FromRawFd;
    let SocketAddr::V4(to) = to else {
        panic!("IPv4 only: {to}")
    };
    let sockaddr = |ip: Ipv4Addr, port: u16| {
        // SAFETY: sockaddr_in is plain data; all-zero bytes are valid.
        let mut a: libc::sockaddr_in = unsafe { std::mem::zeroed() };
        a.sin_family = libc::AF_INET as libc::sa_family_t;
        a.sin_port = port.to_be();
        a.sin_addr.s_addr = u32::from_ne_bytes(ip.octets());
        a
    };
    let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // SAFETY: a fresh socket, owned by the TcpStream from here on (closed on a panic too);
    // bind and connect read a valid sockaddr_in of `len` bytes during the call only.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0);
        assert!(fd >= 0, "socket: {}", std::io::Error::last_os_error());
        let stream = TcpStream::from_raw_fd(fd);
        let local = sockaddr(ip, 0);
        let r = libc::bind(fd, (&local as *const libc::sockaddr_in).cast(), len);
        assert_eq!(r, 0, "bind {ip}: {}", std::io::Error::last_os_error());
        let remote = sockaddr(*to.ip(), to.port());
        let r = libc::connect(fd, (&remote as *const libc::sockaddr_in).cast(), len);
        assert_eq!(r, 0, "connect {to}: {}", std::io::Error::last_os_error());
        stream
    }
}

/// `addr` as /proc/net/tcp writes it (`0300007F:1F90` for 127.0.0.3:8080).
fn proc_net_addr(addr: SocketAddr) -> String {
    let SocketAddr::V4(v4) = addr else {
        panic!("IPv4 only: {addr}")
    };
    format!(
        "{:08X}:{:04X}",
        u32::from_le_bytes(v4.ip().octets()),
        v4.port()
    )
}

#[test]
fn a_dial_leaves_from_the_diallers_relay_listen_ip() {
    let key = key_hex(0x31);
    let (east, west) = east_and_west(&key, &key);
    east.wait_up("west");
    west.wait_up("east");
    // The acceptor's service log names where the connection came from: west's listen IP
    // (127.0.0.3), not the 127.0.0.1 the kernel would pick for 127.0.0.2 on its own.
    let elog = east.log();
    let from: SocketAddr = elog
        .lines()
        .find_map(|l| l.split("relay: connection from ").nth(1))
        .unwrap_or_else(|| panic!("no accepted connection logged:\n{elog}"))
        .trim()
        .parse()
        .unwrap();
    assert_eq!(from.ip(), Ipv4Addr::new(127, 0, 0, 3), "{elog}");
    assert_ne!(
        from.port(),
        west.relay_addr.port(),
        "a fresh port, not the listener's"
    );
    // And the kernel agrees: the link's one connection joins east's relay address and that
    // address.
    let want = format!("{}-{}", proc_net_addr(east.relay_addr), proc_net_addr(from));
    assert!(
        established_with(east.relay_addr).contains(&want),
        "{want} not among {:?}",
        established_with(east.relay_addr)
    );
    for l in elog
        .lines()
        .filter(|l| l.contains("relay: connection from "))
    {
        assert!(l.contains("relay: connection from 127.0.0.3:"), "{l}");
    }
}

#[test]
fn hubs_that_dial_each_other_settle_on_one_link() {
    let key = key_hex(0x40);
    // west's relay address must be in east's config before west runs: reserve a port.
    let west_addr = free_port_on("127.0.0.3");
    let east = RelayHub::start(
        Setup::new(),
        RelaySpec::new("east", "127.0.0.2:0").peer("west", Some(west_addr), &key, false),
    );
    // east dials, finds nobody, and backs off.
    east.hub.wait_service_log("east's failed dial", |l| {
        l.contains("relay: dialling west failed")
    });
    let west = RelayHub::start(
        west_setup(),
        RelaySpec::new("west", &west_addr.to_string()).peer(
            "east",
            Some(east.relay_addr),
            &key,
            false,
        ),
    );
    assert_eq!(west.relay_addr, west_addr);
    let e = east.wait_up("west");
    let w = west.wait_up("east");
    assert_ne!(
        e["direction"], w["direction"],
        "both ends agree on who opened the link: {e} {w}"
    );
    let settled = |h: &RelayHub, peer: &str| {
        let p = h.wait_up(peer);
        (p["reconnects"].as_u64().unwrap(), p["direction"].clone())
    };
    let e0 = settled(&east, "west");
    let w0 = settled(&west, "east");
    let conns0 = settled_to_one_connection(east.relay_addr, west_addr);
    assert_idle(&[&east, &west]);
    // Several intervals later: the same single connection, no reconnects.
    let hb = west.peer("east").unwrap()["last_heartbeat"].clone();
    west.wait_peer("east", "a later heartbeat", |p| p["last_heartbeat"] != hb);
    assert_eq!(settled(&east, "west"), e0);
    assert_eq!(settled(&west, "east"), w0);
    assert_eq!(
        one_connection(east.relay_addr, west_addr),
        conns0,
        "the link flapped"
    );
}

/// The connections the two relay addresses settle to once the losing one of a double dial
/// is closed. Both ends report `up` as soon as the link that stays is agreed; the other
/// connection is closed by whichever hub runs next, which on a loaded machine can be a
/// while later, so this waits (bounded) for exactly one, then checks it as
/// `one_connection` does.
fn settled_to_one_connection(a: SocketAddr, b: SocketAddr) -> Vec<String> {
    crate::harness::poll_until("the two relay addresses down to one connection", || {
        let mut all: Vec<String> = established_with(a)
            .into_iter()
            .chain(established_with(b))
            .collect();
        all.sort();
        all.dedup();
        (all.len() == 2).then_some(())
    });
    one_connection(a, b)
}

/// Exactly one TCP connection touching the two relay addresses (seen from both ends).
fn one_connection(a: SocketAddr, b: SocketAddr) -> Vec<String> {
    let mut all: Vec<String> = established_with(a)
        .into_iter()
        .chain(established_with(b))
        .collect();
    all.sort();
    all.dedup();
    assert_eq!(all.len(), 2, "one connection, seen from both ends: {all:?}");
    all
}

#[test]
fn a_simultaneous_dial_keeps_the_link_the_lower_id_opened() {
    let key = key_hex(0x41);
    let west_addr = free_port_on("127.0.0.3");
    // east redials 1 ms after a failure, so a redial is due whenever it is resumed below.
    let mut spec = RelaySpec::new("east", "127.0.0.2:0").peer("west", Some(west_addr), &key, false);
    spec.backoff_ms = vec![1];
    let east = RelayHub::start(Setup::new(), spec);
    east.hub.wait_service_log("east's failed dial", |l| {
        l.contains("relay: dialling west failed")
    });
    // Frozen, east answers nothing, but its kernel still completes west's TCP connect.
    east.hub.signal(libc::SIGSTOP);
    let west = RelayHub::start(
        west_setup(),
        RelaySpec::new("west", &west_addr.to_string()).peer(
            "east",
            Some(east.relay_addr),
            &key,
            false,
        ),
    );
    poll_until("west's connection into the frozen east's backlog", || {
        (!established_with(east.relay_addr).is_empty()).then_some(())
    });
    // West frozen too, so the handshake on its connection cannot finish before east's own
    // dial lands: east, resumed, accepts west's connection and redials (its 1 ms backoff,
    // counted from a dial that may have been refused only now); that connect completes in
    // the frozen west's backlog.
    west.hub.signal(libc::SIGSTOP);
    east.hub.signal(libc::SIGCONT);
    poll_until("east's dial into the frozen west's backlog", || {
        (!established_with(west_addr).is_empty()).then_some(())
    });
    // Resumed, west finds two handshakes in flight at once, one opened by each side.
    west.hub.signal(libc::SIGCONT);
    // "east" < "west": the connection east opened survives, on both ends. Which handshake
    // finishes first is up to the scheduler, so a side may be `up` for a moment on the
    // connection that then loses ("replaced by a newer link"), and its status file (rewritten
    // at most once a second) may show that moment: wait for each side's final word. A
    // registry that kept the wrong connection never gets there and fails the wait.
    east.wait_peer("west", "up on the link east dialled", |p| {
        p["state"] == "up" && p["direction"] == "dialled"
    });
    west.wait_peer("east", "up on the link east dialled", |p| {
        p["state"] == "up" && p["direction"] == "accepted"
    });
    let logs = format!("{}{}", east.log(), west.log());
    assert!(
        logs.contains("replaced by a newer link (")
            || logs.contains("a link opened by the lower peer id already exists"),
        "both connections reached the link registry:\n{logs}"
    );
    let conns0 = settled_to_one_connection(east.relay_addr, west_addr);
    let e0 = east.wait_up("west")["reconnects"].clone();
    let w0 = west.wait_up("east")["reconnects"].clone();
    assert_idle(&[&east, &west]);
    let hb = east.peer("west").unwrap()["last_heartbeat"].clone();
    east.wait_peer("west", "a later heartbeat", |p| p["last_heartbeat"] != hb);
    assert_eq!(east.wait_up("west")["reconnects"], e0);
    assert_eq!(west.wait_up("east")["reconnects"], w0);
    assert_eq!(
        one_connection(east.relay_addr, west_addr),
        conns0,
        "the link flapped"
    );
}

#[test]
fn a_transient_connection_never_displaces_the_link() {
    let key = key_hex(0x42);
    let (east, west) = east_and_west(&key, &key);
    east.wait_up("west");
    west.wait_up("east");
    let before = established_with(east.relay_addr);
    // A one-shot v1 connection as west (the right key), transient. allow_claudectl is off for west,
    // so it must prove the transcript and speak frame-mac: the docs' own double does.
    let mut c = crate::relay_attack::V1Dialer::dial(
        east.relay_addr,
        "west",
        "east",
        &key,
        json!({"transient": true}),
    );
    let ack = c.ack.clone();
    assert_eq!(ack["payload"]["status"], "ok", "{ack}");
    assert_eq!(
        ack["payload"]["features"],
        json!(["unknown-ok", "mutual-auth", "frame-bin", "frame-mac"]),
        "{ack}"
    );
    c.send("knowledge_request", json!({"since_epoch": 0}));
    east.hub
        .wait_service_log("the transient connection served", |l| {
            l.contains("relay: west sent knowledge_request")
        });
    let log = east.log();
    assert!(log.contains("relay: link with west up (accepted, proto 1, features [unknown-ok,mutual-auth,frame-bin,frame-mac], peer version 0.1.0, transient)"), "{log}");
    assert!(
        !log.contains("link with west down") && !log.contains("replaced"),
        "{log}"
    );
    drop(c);
    // The lasting link is the same TCP connection, still up on both ends.
    let hb = east.peer("west").unwrap()["last_heartbeat"].clone();
    east.wait_peer("west", "a later heartbeat", |p| p["last_heartbeat"] != hb);
    assert_eq!(
        east.wait_up("west")["features"].as_array().unwrap().len(),
        ALL_FEATURES.len() + 4,
        "the configured features, frame-mac, liveness, task-approvals and headroom"
    );
    assert_eq!(west.wait_up("east")["reconnects"], 0);
    let after = established_with(east.relay_addr);
    assert!(
        before.iter().all(|c| after.contains(c)),
        "the link's connection survived: {before:?} {after:?}"
    );
    assert!(
        !east.log().contains("link with west down"),
        "{}",
        east.log()
    );
}

// ----- the v0 double -----

/// One v0 line the double received, checked field by field as a claudectl 0.64 reader would.
pub(crate) struct V0Line {
    pub(crate) msg_type: String,
    pub(crate) from_peer: String,
    pub(crate) id: String,
    pub(crate) payload: Map<String, Value>,
}

/// Checks one line (without its `\n`) as claudectl 0.64's reader would parse it; Err says
/// what would have killed that reader.
pub(crate) fn parse_v0(line: &[u8]) -> Result<V0Line, String> {
    if line.is_empty() {
        return Err("a blank line".into());
    }
    if line.len() > V0_LINE_CAP {
        return Err(format!("a line of {} bytes", line.len()));
    }
    if let Some(b) = line.iter().find(|&&b| b < 0x20 || b == 0x7f) {
        return Err(format!("a control/binary byte 0x{b:02x} in a line"));
    }
    let text = std::str::from_utf8(line).map_err(|e| format!("not UTF-8: {e}"))?;
    let v: Value = serde_json::from_str(text).map_err(|e| format!("not JSON ({e}): {text}"))?;
    let o = v
        .as_object()
        .ok_or_else(|| format!("not an object: {text}"))?;
    let id = o
        .get("id")
        .and_then(Value::as_str)
        .ok_or_else(|| format!("id not a string: {text}"))?;
    if id.is_empty() {
        return Err(format!("empty id: {text}"));
    }
    let t = o
        .get("msg_type")
        .and_then(Value::as_str)
        .ok_or_else(|| format!("msg_type not a string: {text}"))?;
    if !V0_064_TYPES.contains(&t) {
        return Err(format!("msg_type {t:?} unknown to claudectl 0.64: {text}"));
    }
    let from = o
        .get("from_peer")
        .and_then(Value::as_str)
        .ok_or_else(|| format!("from_peer not a string: {text}"))?;
    let ts = o
        .get("timestamp")
        .ok_or_else(|| format!("no timestamp: {text}"))?;
    let ts = ts
        .as_i64()
        .ok_or_else(|| format!("timestamp is not an integer: {text}"))?;
    if (ts - unix_ms()).abs() > 600_000 {
        return Err(format!(
            "timestamp {ts} is not unix milliseconds of now: {text}"
        ));
    }
    let payload = o
        .get("payload")
        .and_then(Value::as_object)
        .ok_or_else(|| format!("payload not an object: {text}"))?;
    Ok(V0Line {
        msg_type: t.into(),
        from_peer: from.into(),
        id: id.into(),
        payload: payload.clone(),
    })
}

pub(crate) enum Got {
    Line(Vec<u8>),
    Eof,
    Timeout,
}

/// The double's socket: lines split by hand so every raw byte is seen, every read bounded.
pub(crate) struct V0Conn {
    pub(crate) stream: TcpStream,
    buf: Vec<u8>,
    counter: u64,
    /// Ids received, to check they never repeat.
    seen_ids: HashSet<String>,
}

impl V0Conn {
    pub(crate) fn connect(addr: SocketAddr) -> V0Conn {
        let stream = TcpStream::connect_timeout(&addr, DEADLINE)
            .unwrap_or_else(|e| panic!("connect {addr}: {e}"));
        V0Conn::new(stream)
    }

    fn new(stream: TcpStream) -> V0Conn {
        stream.set_nodelay(true).unwrap();
        stream.set_write_timeout(Some(DEADLINE)).unwrap();
        V0Conn {
            stream,
            buf: Vec::new(),
            counter: 0,
            seen_ids: HashSet::new(),
        }
    }

    /// The next line (without `\n`), EOF, or nothing by `until`.
    pub(crate) fn next(&mut self, until: Instant) -> Got {
        loop {
            if let Some(i) = self.buf.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=i).collect();
                return Got::Line(line[..line.len() - 1].to_vec());
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Got::Timeout;
            }
            self.stream
                .set_read_timeout(Some(left.max(Duration::from_millis(1))))
                .unwrap();
            let mut chunk = [0u8; 64 * 1024];
            match self.stream.read(&mut chunk) {
                Ok(0) => return Got::Eof,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    return Got::Timeout
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if e.kind() == ErrorKind::ConnectionReset => return Got::Eof,
                Err(e) => panic!("v0 double read: {e}"),
            }
        }
    }

    /// The next line, parsed as v0; panics on EOF, timeout or anything 0.64 could not read.
    pub(crate) fn expect_line(&mut self, what: &str) -> Value {
        match self.next(Instant::now() + DEADLINE) {
            Got::Line(l) => {
                let parsed = parse_v0(&l).unwrap_or_else(|e| panic!("{what}: {e}"));
                assert!(
                    self.seen_ids.insert(parsed.id.clone()),
                    "{what}: id {} repeats",
                    parsed.id
                );
                serde_json::from_slice(&l).unwrap()
            }
            Got::Eof => panic!("{what}: the hub closed the connection"),
            Got::Timeout => panic!("{what}: nothing within {DEADLINE:?}"),
        }
    }

    /// Asserts the hub closes without sending one more byte.
    fn expect_silent_close(&mut self, what: &str) {
        match self.next(Instant::now() + DEADLINE) {
            Got::Eof if self.buf.is_empty() => {}
            Got::Eof => panic!(
                "{what}: the hub sent {:?} before closing",
                String::from_utf8_lossy(&self.buf)
            ),
            Got::Line(l) => panic!("{what}: the hub sent {:?}", String::from_utf8_lossy(&l)),
            Got::Timeout => panic!("{what}: the hub neither closed nor spoke within {DEADLINE:?}"),
        }
    }

    /// Writes one v0 envelope line, as claudectl 0.64 forms it.
    pub(crate) fn send(&mut self, from: &str, msg_type: &str, payload: Value) {
        self.counter += 1;
        let now = unix_ms();
        let line = json!({
            "id": format!("msg_{now}_{}", self.counter),
            "msg_type": msg_type,
            "from_peer": from,
            "timestamp": now,
            "payload": payload,
        });
        self.write_raw(&format!("{line}\n"));
    }

    fn write_raw(&mut self, text: &str) {
        self.stream
            .write_all(text.as_bytes())
            .unwrap_or_else(|e| panic!("v0 double write: {e}"));
    }
}

/// What the double saw while linked.
#[derive(Debug, Default)]
struct V0Report {
    /// Everything that would have killed a 0.64 reader (or broken v0's rules).
    violations: Vec<String>,
    hub_beats: usize,
    /// The longest silence between the hub's heartbeats (from the link's start).
    max_beat_gap: Duration,
    /// Set if the hub closed the link while the double meant to stay.
    closed_by_hub: bool,
    beats_sent: usize,
}

/// The linked phase: the double beats every `HB` with `{}` and integer ms timestamps for
/// `intervals` intervals, checking every line the hub sends.
/// `beat` is the double's heartbeat payload (0.64 sends `{}`, later v0 releases the full
/// form); `extras` go out once, after the first beat.
fn v0_linked(
    conn: &mut V0Conn,
    me: &str,
    hub_id: &str,
    intervals: u32,
    beat: Value,
    extras: &[(&str, Value)],
) -> V0Report {
    let mut r = V0Report::default();
    let start = Instant::now();
    let mut last_beat = start;
    for i in 0..intervals {
        let mut beat = beat.clone();
        if let Some(ts) = beat.get_mut("timestamp") {
            *ts = json!(unix_ms());
        }
        conn.send(me, "heartbeat", beat);
        r.beats_sent += 1;
        if i == 0 {
            for (t, payload) in extras {
                conn.send(me, t, payload.clone());
            }
        }
        let next = start + HB * (i + 1);
        loop {
            match conn.next(next) {
                Got::Timeout => break,
                Got::Eof => {
                    r.closed_by_hub = true;
                    return r;
                }
                Got::Line(l) => match parse_v0(&l) {
                    Err(e) => r.violations.push(e),
                    Ok(m) => {
                        if !conn.seen_ids.insert(m.id.clone()) {
                            r.violations.push(format!("id {} repeated", m.id));
                        }
                        if m.from_peer != hub_id {
                            r.violations.push(format!("from_peer {:?}", m.from_peer));
                        }
                        if m.msg_type != "heartbeat" {
                            // Nothing else was asked of the hub on this link.
                            r.violations.push(format!(
                                "unexpected {}: {}",
                                m.msg_type,
                                String::from_utf8_lossy(&l)
                            ));
                            continue;
                        }
                        let extra: Vec<&String> = m
                            .payload
                            .keys()
                            .filter(|k| {
                                !["worker_id", "timestamp", "sessions"].contains(&k.as_str())
                            })
                            .collect();
                        if !extra.is_empty() {
                            r.violations
                                .push(format!("v1 heartbeat keys {extra:?} sent to a v0 peer"));
                        }
                        if m.payload.get("timestamp").is_some_and(|t| !t.is_i64()) {
                            r.violations
                                .push("heartbeat payload timestamp not an integer".into());
                        }
                        r.hub_beats += 1;
                        r.max_beat_gap = r.max_beat_gap.max(last_beat.elapsed());
                        last_beat = Instant::now();
                    }
                },
            }
        }
    }
    r.max_beat_gap = r.max_beat_gap.max(last_beat.elapsed());
    r
}

/// Intervals the double stays linked: at least 5, with room for the status file's 1 s cadence.
const V0_INTERVALS: u32 = 8;

fn assert_v0_report(r: &V0Report) {
    assert!(
        r.violations.is_empty(),
        "the hub sent what a v0 peer cannot read: {:#?}",
        r.violations
    );
    assert!(!r.closed_by_hub, "the hub closed the v0 link: {r:?}");
    assert!(
        r.hub_beats >= 5,
        "the hub beat {} times in {V0_INTERVALS} intervals: {r:?}",
        r.hub_beats
    );
    assert!(
        r.max_beat_gap < HB * 3,
        "a v0 peer declares the hub dead after 3 silent intervals: {r:?}"
    );
}

/// The double as a dialler: reads the challenge, answers a v0 handshake.
pub(crate) fn v0_dial_and_handshake(
    addr: SocketAddr,
    me: &str,
    key: &str,
    hub_id: &str,
) -> (V0Conn, Value) {
    let mut c = V0Conn::connect(addr);
    let challenge = c.expect_line("challenge");
    assert_eq!(challenge["msg_type"], "challenge", "{challenge}");
    assert_eq!(challenge["from_peer"], "", "{challenge}");
    let nonce = challenge["payload"]["nonce"].as_str().unwrap().to_owned();
    assert!(is_hex64(&nonce), "{challenge}");
    c.send(
        me,
        "handshake",
        json!({"proof": proof(key, &nonce), "version": "0.64.0"}),
    );
    let ack = c.expect_line("handshake_ack");
    assert_eq!(ack["msg_type"], "handshake_ack", "{ack}");
    assert_eq!(ack["from_peer"], hub_id, "{ack}");
    (c, ack)
}

/// The double as an acceptor: waits (bounded) for the hub's connection.
pub(crate) fn v0_accept(listener: &TcpListener) -> V0Conn {
    listener.set_nonblocking(true).unwrap();
    let (stream, _) = poll_until("the hub to dial the double", || listener.accept().ok());
    stream.set_nonblocking(false).unwrap();
    V0Conn::new(stream)
}

/// The double as an acceptor: waits (bounded) for the hub's connection, sends the challenge,
/// checks the hub's handshake proof; returns the connection, the nonce and the handshake.
pub(crate) fn v0_accept_and_challenge(
    listener: &TcpListener,
    key: &str,
    hub_id: &str,
) -> (V0Conn, Value) {
    let mut c = v0_accept(listener);
    let nonce = fresh_nonce();
    c.send("", "challenge", json!({ "nonce": nonce }));
    let hs = c.expect_line("the hub's handshake");
    assert_eq!(hs["msg_type"], "handshake", "{hs}");
    assert_eq!(hs["from_peer"], hub_id, "{hs}");
    let p = &hs["payload"];
    assert!(p["version"].is_string(), "{hs}");
    assert_eq!(
        p["proof"].as_str(),
        Some(proof(key, &nonce).as_str()),
        "the hub's proof over our nonce: {hs}"
    );
    (c, hs)
}

#[test]
fn the_v0_doubles_proof_matches_the_compat_test_vector() {
    let key = hex(&(0u8..32).collect::<Vec<_>>());
    assert_eq!(
        proof(&key, &"ab".repeat(32)),
        "583630234f7e60ecfa2a6ae2e98ee37876e3ff6344457723cb4b42fcf77f7fc0"
    );
}

/// A hub accepting `legacy` (a v0 relay) and nothing else.
fn hub_with_legacy_peer(address: Option<SocketAddr>, key: &str, allow_claudectl: bool) -> RelayHub {
    RelayHub::start(
        Setup::new(),
        RelaySpec::new("east", "127.0.0.2:0").peer("legacy", address, key, allow_claudectl),
    )
}

#[test]
fn a_v0_dialler_stays_linked_and_hears_only_v0() {
    let key = key_hex(0x50);
    let east = hub_with_legacy_peer(None, &key, true);
    let (mut c, ack) = v0_dial_and_handshake(east.relay_addr, "legacy", &key, "east");
    assert_eq!(
        ack["payload"],
        json!({"status": "ok"}),
        "v0 bytes exactly: {ack}"
    );
    // A line ending in \r\n and keys 0.64 does not know, in the envelope and the payload:
    // tolerated, as v0 peers tolerate them.
    let now = unix_ms();
    c.write_raw(&format!(
        "{{\"id\":\"msg_{now}_crlf\",\"msg_type\":\"heartbeat\",\"from_peer\":\"legacy\",\
         \"timestamp\":{now},\"payload\":{{\"mood\":\"fine\"}},\"trace\":\"x\"}}\r\n"
    ));
    let (tx, rx) = mpsc::channel();
    let double = std::thread::spawn(move || {
        // Besides beats: a type the hub parses but does not act on, one that came after 0.64,
        // and one nobody knows, each twice (the unknown one is logged once, never fatal).
        let extras = [
            ("knowledge_request", json!({"since_epoch": 0})),
            ("knowledge_request", json!({"since_epoch": 1})),
            (
                "session_received",
                json!({"session_id": "s1", "path": "/p", "cwd": "/c", "resume": null}),
            ),
            ("telepathy", json!({"thought": 1})),
            ("telepathy", json!({"thought": 2})),
        ];
        let r = v0_linked(&mut c, "legacy", "east", V0_INTERVALS, json!({}), &extras);
        let _ = tx.send(());
        (r, c)
    });
    let p = east.wait_up("legacy");
    assert_eq!(p["proto"], 0, "{p}");
    assert_eq!(p["features"], json!([]), "{p}");
    assert_eq!(p["peer_version"], "0.64.0", "{p}");
    assert_eq!(
        p["agents"],
        json!([]),
        "a v0 peer's beat carries no directory: {p}"
    );
    rx.recv_timeout(DEADLINE).expect("the double finishes");
    // The double's socket stays open until the checks are done.
    let (report, _conn) = double.join().unwrap();
    assert_v0_report(&report);
    assert_eq!(
        east.peer("legacy").unwrap()["state"],
        "up",
        "still linked after the double's run"
    );
    let log = east.log();
    assert!(
        log.contains(
            "relay: link with legacy up (accepted, proto 0, features [], peer version 0.64.0)"
        ),
        "{log}"
    );
    assert!(!log.contains("link with legacy down"), "{log}");
    assert_eq!(
        count(&log, "relay: legacy sent knowledge_request; not acted on"),
        2,
        "{log}"
    );
    assert_eq!(
        count(&log, "relay: legacy sent session_received; not acted on"),
        1,
        "{log}"
    );
    assert_eq!(
        count(&log, "unknown message type \"telepathy\""),
        1,
        "logged once per type: {log}"
    );
}

#[test]
fn a_v0_acceptor_stays_linked_and_hears_only_v0() {
    let key = key_hex(0x60);
    let listener = TcpListener::bind("127.0.0.3:0").unwrap();
    let east = hub_with_legacy_peer(Some(listener.local_addr().unwrap()), &key, true);
    let (mut c, hs) = v0_accept_and_challenge(&listener, &key, "east");
    // An unmarked challenge (a claudectl acceptor) gets a handshake in claudectl's dialect:
    // the proof over its nonce (checked by the double), with `proto` 1 and our offer in that
    // dialect beside it, which 0.64 ignores; no nonce, no hardened feature offered.
    assert_eq!(hs["payload"]["proto"], 1, "{hs}");
    assert!(hs["payload"].get("nonce").is_none(), "{hs}");
    let offered = hs["payload"]["features"].as_array().unwrap();
    assert!(
        offered.contains(&json!("frame-bin")) && offered.contains(&json!("headroom")),
        "{hs}"
    );
    assert!(
        !offered.contains(&json!("mutual-auth")) && !offered.contains(&json!("frame-mac")),
        "{hs}"
    );
    // Where to dial back is the port the relay bound (its config says 127.0.0.2:0).
    assert_eq!(
        hs["payload"]["listen_port"],
        json!(east.relay_addr.port()),
        "{hs}"
    );
    c.send("legacy", "handshake_ack", json!({"status": "ok"}));
    let (tx, rx) = mpsc::channel();
    let double = std::thread::spawn(move || {
        // The full heartbeat later v0 releases send every beat.
        let beat = json!({"worker_id": "legacy", "timestamp": unix_ms(), "sessions": []});
        let r = v0_linked(&mut c, "legacy", "east", V0_INTERVALS, beat, &[]);
        let _ = tx.send(());
        (r, c)
    });
    let p = east.wait_up("legacy");
    assert_eq!(p["proto"], 0, "{p}");
    assert_eq!(p["features"], json!([]), "{p}");
    assert_eq!(p["direction"], "dialled", "{p}");
    rx.recv_timeout(DEADLINE).expect("the double finishes");
    let (report, conn) = double.join().unwrap();
    assert_v0_report(&report);
    let p = east.peer("legacy").unwrap();
    assert_eq!(p["state"], "up", "{p}");
    assert_eq!(p["reconnects"], 0, "{p}");
    assert!(
        east.log()
            .contains("relay: link with legacy up (dialled, proto 0, features []"),
        "{}",
        east.log()
    );

    // The v0 relay goes away; we dialled, so we redial (with backoff) and link again.
    drop(conn);
    let (mut again, _hs) = v0_accept_and_challenge(&listener, &key, "east");
    again.send("legacy", "handshake_ack", json!({"status": "ok"}));
    again.send("legacy", "heartbeat", json!({}));
    let p = east.wait_peer("legacy", "up again after a redial", |p| {
        p["state"] == "up" && p["reconnects"] == 1
    });
    assert_eq!(p["proto"], 0, "{p}");
    let beat = again.expect_line("a heartbeat on the new link");
    assert_eq!(beat["msg_type"], "heartbeat", "{beat}");
}

#[test]
fn a_peer_that_stops_beating_is_dropped_after_three_intervals() {
    let key = key_hex(0x61);
    let east = hub_with_legacy_peer(None, &key, true);
    let (mut c, _ack) = v0_dial_and_handshake(east.relay_addr, "legacy", &key, "east");
    c.send("legacy", "heartbeat", json!({}));
    // The log, not the status file: the link lives about 3 intervals, the file is rewritten
    // at most once a second.
    east.hub
        .wait_service_log("the link up", |l| l.contains("relay: link with legacy up"));
    // Other traffic does not count as liveness: only a heartbeat does.
    let silent_from = Instant::now();
    let closed = loop {
        c.send("legacy", "knowledge_request", json!({"since_epoch": 0}));
        match c.next(Instant::now() + HB / 2) {
            Got::Eof => break silent_from.elapsed(),
            Got::Line(l) => assert!(parse_v0(&l).is_ok(), "{}", String::from_utf8_lossy(&l)),
            Got::Timeout => {}
        }
        assert!(
            silent_from.elapsed() < DEADLINE,
            "the hub kept a silent peer for {DEADLINE:?}"
        );
    };
    assert!(
        closed >= HB * 2,
        "closed after {closed:?}, before 3 intervals of {HB:?}"
    );
    east.hub.wait_service_log("the liveness reason", |l| {
        l.contains("no heartbeat from legacy for 3 intervals")
    });
    east.wait_peer("legacy", "down", |p| p["state"] == "down");
}

#[test]
fn with_allow_claudectl_off_a_v0_peer_is_refused_both_ways() {
    let key = key_hex(0x70);
    // As a dialler: denied, then closed.
    let east = hub_with_legacy_peer(None, &key, false);
    let (mut c, ack) = v0_dial_and_handshake(east.relay_addr, "legacy", &key, "east");
    assert_eq!(ack["payload"], json!({"status": "denied"}), "{ack}");
    c.expect_silent_close("after the denial");
    east.hub.wait_service_log("the denial's reason", |l| {
        l.contains("allow_claudectl is off")
    });
    // The status file is written by its own thread: wait for it to list the peer.
    let row = east.wait_peer("legacy", "listed", |_| true);
    assert_ne!(row["state"], "up");

    // As a dialler: the hub reads a v0 challenge (no v1 marker) and leaves without signing
    // it: no v0 proof is ever made for a peer whose allow_claudectl is off.
    let listener = TcpListener::bind("127.0.0.3:0").unwrap();
    let dialler = hub_with_legacy_peer(Some(listener.local_addr().unwrap()), &key, false);
    let mut c = v0_accept(&listener);
    c.send("", "challenge", json!({ "nonce": fresh_nonce() }));
    c.expect_silent_close("after a v0 challenge with allow_claudectl off");
    let p = dialler.wait_peer("legacy", "the refusal reported", |p| {
        p["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("no v1 marker") && e.contains("nothing signed"))
    });
    assert_ne!(p["state"], "up", "{p}");
    assert!(
        !dialler.log().contains("link with legacy up"),
        "{}",
        dialler.log()
    );
}

#[test]
fn an_impostor_acceptor_gets_only_the_handshake_and_never_a_link() {
    let key = key_hex(0x80);
    let wrong = key_hex(0xa0);
    let listener = TcpListener::bind("127.0.0.3:0").unwrap();
    let east = hub_with_legacy_peer(Some(listener.local_addr().unwrap()), &key, false);
    // One try per redial. First a v0 challenge: nothing signed at all. Then v1 challenges
    // (the marker naming "legacy"), answered with a wrong acceptor proof, an older build's
    // v0-style proof of the hub's nonce (with the right key), a downgrade to v0, and a v1 ack
    // that leaves mutual-auth and frame-mac out. Each time the impostor pipelines a heartbeat.
    let cases = [
        ("v0 challenge", "no v1 marker"),
        ("wrong proof", "failed mutual authentication"),
        ("v0-style proof", "failed mutual authentication"),
        ("v0 downgrade", "a downgrade attempt"),
        ("no mutual-auth", "did not agree to mutual-auth, frame-mac"),
    ];
    for (case, why) in cases {
        let mut c = v0_accept(&listener);
        let nonce = fresh_nonce();
        if case == "v0 challenge" {
            c.send("", "challenge", json!({ "nonce": nonce }));
            c.expect_silent_close(case);
            east.hub.wait_service_log(why, |l| l.contains(why));
            continue;
        }
        let ch = json!({"payload": {"nonce": nonce, "peer": "legacy", "proto": 1}});
        c.send("", "challenge", ch["payload"].clone());
        let hs = c.expect_line("the hub's v1 handshake");
        let p = &hs["payload"];
        assert_eq!(p["proto"], 1, "{hs}");
        assert_ne!(
            p["proof"].as_str(),
            Some(proof(&key, &nonce).as_str()),
            "never a v0 proof: {hs}"
        );
        let offered = names(&p["features"]);
        assert!(offered.contains(&"mutual-auth".to_owned()), "{hs}");
        let hub_nonce = p["nonce"]
            .as_str()
            .expect("a nonce under mutual-auth")
            .to_owned();
        assert!(is_hex64(&hub_nonce), "{hs}");
        let mut ack = match case {
            "wrong proof" | "v0-style proof" => json!({"payload": {
                "status": "ok", "proto": 1, "features": offered, "version": "9.9.9",
            }}),
            "v0 downgrade" => json!({"payload": {"status": "ok"}}),
            _ => {
                let without: Vec<&String> = offered
                    .iter()
                    .filter(|f| *f != "mutual-auth" && *f != "frame-mac")
                    .collect();
                json!({"payload": {"status": "ok", "proto": 1, "features": without, "version": "9.9.9"}})
            }
        };
        if case == "wrong proof" {
            let label = "agent-hub relay v1 acceptor proof";
            ack["payload"]["proof"] = json!(crate::relay_attack::proof(
                &wrong,
                label,
                &ch,
                &hs,
                Some(&ack)
            ));
        }
        if case == "v0-style proof" {
            ack["payload"]["proof"] = json!(proof(&key, &hub_nonce));
        }
        c.send("legacy", "handshake_ack", ack["payload"].clone());
        c.send("legacy", "heartbeat", json!({}));
        c.expect_silent_close(case);
        east.hub.wait_service_log(why, |l| l.contains(why));
        let p = east.peer("legacy");
        assert!(
            p.as_ref().map_or(true, |p| p["state"] != "up"),
            "{case}: {p:?}"
        );
    }
    let log = east.log();
    assert!(!log.contains("link with legacy up"), "{log}");
    assert!(
        !log.contains("legacy sent"),
        "nothing the impostor sent was read as a message: {log}"
    );
    let p = east.wait_peer("legacy", "the last failure reported", |p| {
        p["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("mutual-auth"))
    });
    assert_ne!(p["state"], "up", "{p}");
    assert_eq!(p["last_heartbeat"], Value::Null, "{p}");
}

#[test]
fn a_silent_peer_cannot_hold_a_connection_past_the_handshake_deadline() {
    let key = key_hex(0x62);
    let listener = TcpListener::bind("127.0.0.3:0").unwrap();
    let mut spec = RelaySpec::new("east", "127.0.0.2:0").peer(
        "legacy",
        Some(listener.local_addr().unwrap()),
        &key,
        true,
    );
    spec.handshake_timeout_ms = 300;
    let east = RelayHub::start(Setup::new(), spec);
    // As the acceptor east dials: accept, never challenge. east waits for the challenge,
    // saying nothing, until its deadline; then it redials.
    listener.set_nonblocking(true).unwrap();
    let (first, _) = poll_until("east's dial", || listener.accept().ok());
    first.set_nonblocking(false).unwrap();
    let mut first = V0Conn::new(first);
    first.expect_silent_close("a dialler waiting for the challenge");
    east.hub.wait_service_log("the dial's deadline", |l| {
        l.contains("relay: dialling legacy failed: handshake not finished within 300 ms")
    });
    let (_second, _) = poll_until("east's redial", || listener.accept().ok());
    // As a dialler to east: connect, read the challenge, never answer.
    let mut c = V0Conn::connect(east.relay_addr);
    let challenge = c.expect_line("challenge");
    assert_eq!(challenge["msg_type"], "challenge");
    c.expect_silent_close("an acceptor waiting for the handshake");
    east.hub
        .wait_service_log("the accepted connection's deadline", |l| {
            l.contains("closed before a link: handshake not finished within 300 ms")
        });
}

#[test]
fn the_relay_address_is_printed_before_the_ready_line() {
    let mut setup = Setup::new();
    RelaySpec::new("east", "127.0.0.2:0")
        .peer("west", None, &key_hex(0x12), false)
        .apply(&mut setup);
    let text = setup.config_text.clone().unwrap();
    write_file(&setup.config_path(), &text, 0o600);
    let mut cmd = Command::new(SERVER);
    cmd.arg("--config").arg(setup.config_path());
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut child = Kill(spawn(cmd));
    let stdout = child.0.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let first = rx.recv_timeout(DEADLINE).expect("a first stdout line");
    let second = rx.recv_timeout(DEADLINE).expect("a second stdout line");
    let addr: SocketAddr = first
        .strip_prefix("agent-hub-server: relay listening on ")
        .unwrap_or_else(|| panic!("{first}"))
        .parse()
        .unwrap();
    assert_eq!(addr.ip().to_string(), "127.0.0.2");
    assert_ne!(addr.port(), 0);
    assert!(
        second.starts_with("agent-hub-server: listening on 127.0.0.1:")
            && second.ends_with("; hub ready"),
        "{second}"
    );
    // The address printed is the one listening: it challenges.
    let mut c = V0Conn::connect(addr);
    assert_eq!(c.expect_line("challenge")["msg_type"], "challenge");
    drop(child);
}

// ----- relay startup (keygen: relay_setup.rs) -----

#[test]
fn relay_config_errors_are_fatal_at_their_stage() {
    let key = key_hex(0x11);
    // A key file readable by others.
    let mut setup = Setup::new();
    RelaySpec::new("east", "127.0.0.2:0")
        .peer("west", None, &key, false)
        .apply(&mut setup);
    let key_file = setup.path("keys/west.key");
    std::fs::set_permissions(
        &key_file,
        std::os::unix::fs::PermissionsExt::from_mode(0o644),
    )
    .unwrap();
    let out = setup.fails_at("relay", &format!("chmod 600 {}", key_file.display()));
    assert!(!out.stderr.contains(&key));
    // A key file that is not a key.
    write_file(&key_file, "not-a-key\n", 0o600);
    setup.fails_at("relay", "64 hex characters");

    type Tweak = fn(&mut RelaySpec);
    let cases: [(Tweak, &str); 4] = [
        (
            |s| s.features.push("telepathy"),
            "unknown feature \"telepathy\"",
        ),
        (|s| s.peer_id = "bad id!", "relay.peer_id"),
        (|s| s.peers[0].id = "bad peer", "relay.peers id"),
        (|s| s.listen = "somewhere".into(), "relay.listen"),
    ];
    for (tweak, needle) in cases {
        let mut setup = Setup::new();
        let mut spec = RelaySpec::new("east", "127.0.0.2:0").peer("west", None, &key, false);
        tweak(&mut spec);
        spec.apply(&mut setup);
        setup.fails_at("config", needle);
    }
}

// ----- mail across hubs (SPEC §15) -----

/// A raw connection to `h` authenticated as one of west's agents.
pub(crate) fn west_login(h: &RelayHub, name: &str) -> Raw {
    let token = WEST_AGENTS.iter().find(|(n, _)| *n == name).unwrap().1;
    let mut r = h.hub.raw();
    r.write(&hello_line(name, token));
    r.expect_line(OK);
    r
}

/// One verb line from a west agent; the reply, parsed.
pub(crate) fn west_verb(h: &RelayHub, name: &str, line: &str) -> Value {
    let mut r = west_login(h, name);
    if line.ends_with('\n') {
        r.write(line);
    } else {
        r.write(&format!("{line}\n"));
    }
    r.json()
}

/// east (alpha…delta, dials) and west (omega, sigma, accepts), forwarding to each other.
fn forwarding_pair(west_setup_: Setup) -> (RelayHub, RelayHub) {
    let key = key_hex(0x51);
    let west = RelayHub::start(
        west_setup_,
        RelaySpec::new("west", "127.0.0.3:0")
            .peer("east", None, &key, false)
            .forwarding(),
    );
    let east = RelayHub::start(
        Setup::new(),
        RelaySpec::new("east", "127.0.0.2:0")
            .peer("west", Some(west.relay_addr), &key, false)
            .forwarding(),
    );
    let e = east.wait_up("west");
    assert!(
        names(&e["features"]).contains(&"bus-forward".to_owned()),
        "{e}"
    );
    west.wait_up("east");
    (east, west)
}

#[test]
fn mail_crosses_to_a_peer_hub_and_the_reply_comes_back() {
    let (east, west) = forwarding_pair(west_setup());
    let body = r#"{"z":[1.50,2],"a":"\u00e9"}"#;
    let id = east
        .hub
        .cli_send("alpha", "omega@west", "review.request", body);
    // omega, on the other hub, receives it with from naming the sender's hub.
    let got = west_verb(&west, "omega", &await_line(None, None, Some(10)));
    let env = &got["envelope"];
    assert_eq!(env["id"], json!(id), "{got}");
    assert_eq!(env["from"], "alpha@east");
    assert_eq!(env["to"], "omega");
    assert_eq!(env["kind"], "review.request");
    // `received` is written after the commit that hands the envelope over (it gates
    // nothing), so it may reach the file just after omega has the envelope: poll for it.
    west.hub.wait_audit("the received record", |a| {
        a.iter().any(|v| v["event"] == "received")
    });
    let received = west.hub.audit_events("received");
    assert_eq!(received.len(), 1);
    assert_eq!(received[0]["peer"], "east");
    // The raw line keeps the body's bytes.
    let line = std::fs::read_to_string(west.hub.audit_path()).unwrap();
    assert!(
        line.contains(body),
        "the body crossed byte for byte:\n{line}"
    );

    // The reply goes back by the address it came from.
    let reply_id = uuid::Uuid::new_v4().to_string();
    let accepted = west_verb(
        &west,
        "omega",
        &send_line(
            &reply_id,
            "alpha@east",
            "review.done",
            Some(&id),
            r#"{"ok":true}"#,
        ),
    );
    assert_eq!(accepted, json!({"accepted": {"id": reply_id}}));
    let out = east
        .hub
        .cli("await", "alpha", &["--reply-to", &id, "--timeout", "10"]);
    out.assert_code(0);
    let back: Value = serde_json::from_str(out.stdout.trim_end()).unwrap();
    assert_eq!(back["from"], "omega@west");
    assert_eq!(back["to"], "alpha");
    assert_eq!(back["id"], json!(reply_id));

    // Each side knows where its sender's envelope went.
    let st = east.hub.cli("status", "alpha", &["--id", &id]);
    st.assert_code(0);
    assert!(st.stdout.contains("\"forwarded\""), "{}", st.stdout);
    let fwd = east.hub.audit_events("forward_acked");
    assert_eq!(fwd.len(), 1);
    assert_eq!(fwd[0]["error"], Value::Null);
    for h in [&east, &west] {
        let log = h.log();
        assert!(!log.contains(body) && !log.contains("SECRET"), "{log}");
    }
}

#[test]
fn mail_for_a_down_peer_waits_survives_a_restart_and_arrives_once_in_order() {
    let key = key_hex(0x52);
    let west_addr = free_port_on("127.0.0.3");
    let mut east = RelayHub::start(
        Setup::new().with_sqlite_store(64 << 20),
        RelaySpec::new("east", "127.0.0.2:0")
            .peer("west", Some(west_addr), &key, false)
            .forwarding(),
    );
    let ids: Vec<String> = (0..5)
        .map(|i| {
            east.hub.send(
                "alpha",
                "omega@west",
                "task",
                None,
                &format!("{{\"n\":{i}}}"),
            )
        })
        .collect();
    let st = east.hub.cli("status", "alpha", &["--id", &ids[2]]);
    assert!(
        st.stdout.contains("\"queued\"") && st.stdout.contains("\"position\":3"),
        "{}",
        st.stdout
    );
    // A crash of east loses none of them.
    east.hub.kill();
    east.restart();
    let west = RelayHub::start(
        west_setup(),
        RelaySpec::new("west", &west_addr.to_string())
            .peer("east", None, &key, false)
            .forwarding(),
    );
    east.wait_up("west");
    let mut got = Vec::new();
    while got.len() < ids.len() {
        let r = west_verb(&west, "omega", &await_line(None, None, Some(10)));
        got.push(
            r["envelope"]["id"]
                .as_str()
                .unwrap_or_else(|| panic!("{r}"))
                .to_owned(),
        );
    }
    assert_eq!(got, ids, "every one, in order");
    assert_eq!(
        west_verb(&west, "omega", AWAIT_NOW),
        json!({"timeout": {}}),
        "and none twice"
    );
    east.hub.wait_audit("five forward acks", |a| {
        a.iter().filter(|e| e["event"] == "forward_acked").count() == 5
    });
    let st = east.hub.cli("status", "alpha", &["--id", &ids[4]]);
    assert!(st.stdout.contains("\"forwarded\""), "{}", st.stdout);
}

#[test]
fn a_forward_the_peer_refuses_is_bounced_to_its_sender() {
    let (east, _west) = forwarding_pair(west_setup());
    let id = east.hub.send("alpha", "nobody@west", "task", None, "{}");
    let out = east
        .hub
        .cli("await", "alpha", &["--kind", "bounce", "--timeout", "10"]);
    out.assert_code(0);
    let bounce: Value = serde_json::from_str(out.stdout.trim_end()).unwrap();
    assert_eq!(bounce["from"], "hub");
    assert_eq!(bounce["correlationId"], json!(id));
    let reason = bounce["body"]["reason"].as_str().unwrap();
    assert!(
        reason.contains("refused by west") && reason.contains("no agent named \"nobody\" on west"),
        "{reason}"
    );
}

#[test]
fn without_forward_on_both_ends_mail_stays_queued_here() {
    let key = key_hex(0x53);
    // west forwards, east does not: the feature is not agreed.
    let west = RelayHub::start(
        west_setup(),
        RelaySpec::new("west", "127.0.0.3:0")
            .peer("east", None, &key, false)
            .forwarding(),
    );
    let east = RelayHub::start(
        Setup::new(),
        RelaySpec::new("east", "127.0.0.2:0").peer("west", Some(west.relay_addr), &key, false),
    );
    let e = east.wait_up("west");
    assert!(
        !names(&e["features"]).contains(&"bus-forward".to_owned()),
        "{e}"
    );
    let w = west.wait_up("east");
    assert!(
        !names(&w["features"]).contains(&"bus-forward".to_owned()),
        "{w}"
    );
    // On east, omega@west is just a name (SPEC §5): queued, never sent.
    let id = east.hub.send("alpha", "omega@west", "task", None, "{}");
    let reply = west_verb(&west, "omega", &await_line(None, None, Some(1)));
    assert_eq!(reply, json!({"timeout": {}}));
    let st = east.hub.cli("status", "alpha", &["--id", &id]);
    assert!(st.stdout.contains("\"queued\""), "{}", st.stdout);
    // west wanted forwarding and says why it has none; east never asked for it.
    west.hub.wait_service_log("the missing forward named", |l| {
        l.contains("relay: link with east up without bus-forward")
    });
    assert!(
        !east.log().contains("without bus-forward"),
        "{}",
        east.log()
    );
}
