//! Attacks on the relay between real hubs (issue 9; docs/relay-protocol.md §2, §4.1 and the
//! threat model, §12): a man in the middle that reflects each hub's own challenge back at it,
//! one that strips the v1 marker or a feature from the handshake, and one that modifies,
//! drops, replays or reorders a single frame of a live link while mail is in flight. The
//! reflection links nothing and the stripping is refused; a tampered frame drops the link, and
//! the forward it carried is resent after the reconnect and arrives exactly once. As controls,
//! the same proxy relaying faithfully links the hubs, with `mutual-auth` and `frame-mac` agreed.
//!
//! Owns: the attacking TCP proxy (`Proxy`), and an independent implementation of the v1
//! proofs and frame-mac written from the docs (`V1Dialer`, also used by `relay.rs`'s transient
//! connection), so a hub is checked against the spec and not against its own code. Refuses:
//! the session's state machine (crates/proto/src/relay/tests/attack.rs attacks it in memory). Every wait is
//! a poll with `DEADLINE`; every socket read has a timeout; proxies and hubs stop on drop.

use crate::harness::*;
use crate::relay::{
    connect_from, count, fresh_nonce, hex, key_hex, names, unhex, unix_ms, west_setup, west_verb,
    RelayHub, RelaySpec, ALL_FEATURES,
};
use serde_json::{json, Value};
use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

// ----- v1 proofs and frame-mac, from docs/relay-protocol.md §2.2 and §4.1 -----

fn hmac_sha256(key: &[u8], data: &[u8]) -> [u8; 32] {
    use hmac::{Hmac, Mac};
    let mut m = Hmac::<sha2::Sha256>::new_from_slice(key).unwrap();
    m.update(data);
    m.finalize().into_bytes().into()
}

fn field(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
    out.extend_from_slice(bytes);
}

fn list(out: &mut Vec<u8>, v: &Value) {
    let names: Vec<&str> = v
        .as_array()
        .map(|a| a.iter().map(|x| x.as_str().unwrap()).collect())
        .unwrap_or_default();
    field(out, names.len().to_string().as_bytes());
    for n in names {
        field(out, n.as_bytes());
    }
}

/// The transcript for `label` (§2.2): from the challenge, the handshake and (for the
/// acceptor's proof and the frame keys) the ack, each a whole message as JSON.
pub(crate) fn transcript(label: &str, ch: &Value, hs: &Value, ack: Option<&Value>) -> Vec<u8> {
    let p = &hs["payload"];
    let s = |v: &Value| v.as_str().unwrap_or("").to_owned();
    let mut out = Vec::new();
    field(&mut out, label.as_bytes());
    field(&mut out, s(&hs["from_peer"]).as_bytes());
    field(&mut out, s(&ch["payload"]["peer"]).as_bytes());
    field(&mut out, s(&ch["payload"]["nonce"]).as_bytes());
    field(&mut out, s(&p["nonce"]).as_bytes());
    field(
        &mut out,
        p["proto"].as_u64().unwrap_or(0).to_string().as_bytes(),
    );
    list(&mut out, &p["features"]);
    field(&mut out, s(&p["version"]).as_bytes());
    field(&mut out, if p["transient"] == true { b"1" } else { b"0" });
    let port = p["listen_port"]
        .as_u64()
        .map(|x| x.to_string())
        .unwrap_or_default();
    field(&mut out, port.as_bytes());
    if let Some(a) = ack {
        let a = &a["payload"];
        field(
            &mut out,
            a["proto"].as_u64().unwrap_or(0).to_string().as_bytes(),
        );
        list(&mut out, &a["features"]);
        field(&mut out, s(&a["version"]).as_bytes());
    }
    out
}

pub(crate) fn proof(
    key_hex: &str,
    label: &str,
    ch: &Value,
    hs: &Value,
    ack: Option<&Value>,
) -> String {
    hex(&hmac_sha256(
        &unhex(key_hex),
        &transcript(label, ch, hs, ack),
    ))
}

const DIALER_PROOF: &str = "agent-hub relay v1 dialer proof";
const ACCEPTOR_PROOF: &str = "agent-hub relay v1 acceptor proof";

/// One direction of frame-mac: the frame-bin frame with `len` grown by 16 and
/// HMAC-SHA256(key, seq u64 BE ‖ len ‖ flags ‖ payload)[..16] appended.
struct Sealer {
    key: [u8; 32],
    seq: u64,
}

impl Sealer {
    fn seal(&mut self, body: &[u8]) -> Vec<u8> {
        let mut f = ((1 + body.len() + 16) as u32).to_be_bytes().to_vec();
        f.push(0);
        f.extend_from_slice(body);
        let mut input = self.seq.to_be_bytes().to_vec();
        input.extend_from_slice(&f);
        f.extend_from_slice(&hmac_sha256(&self.key, &input)[..16]);
        self.seq += 1;
        f
    }

    /// The body of a whole frame-mac frame, or why not.
    fn open(&mut self, frame: &[u8]) -> Result<Vec<u8>, String> {
        let (head, tag) = frame.split_at(frame.len() - 16);
        let mut input = self.seq.to_be_bytes().to_vec();
        input.extend_from_slice(head);
        if hmac_sha256(&self.key, &input)[..16] != *tag {
            return Err(format!("frame {} has a bad tag", self.seq));
        }
        self.seq += 1;
        if head[4] != 0 {
            return Err("a compressed frame (this double sends only small ones)".into());
        }
        Ok(head[5..].to_vec())
    }
}

/// A socket read in units (lines, then frames), every read bounded by `DEADLINE`.
struct Reader {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Reader {
    fn new(stream: TcpStream) -> Reader {
        stream.set_read_timeout(Some(DEADLINE)).unwrap();
        Reader {
            stream,
            buf: Vec::new(),
        }
    }

    fn fill(&mut self) -> bool {
        let mut chunk = [0u8; 64 * 1024];
        match self.stream.read(&mut chunk) {
            Ok(0) => false,
            Ok(n) => {
                self.buf.extend_from_slice(&chunk[..n]);
                true
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => true,
            Err(_) => false,
        }
    }

    /// The next line without its `\n`; None on EOF, error or timeout.
    fn line(&mut self) -> Option<Vec<u8>> {
        loop {
            if let Some(i) = self.buf.iter().position(|&b| b == b'\n') {
                let l: Vec<u8> = self.buf.drain(..=i).collect();
                return Some(l[..l.len() - 1].to_vec());
            }
            if !self.fill() {
                return None;
            }
        }
    }

    /// The next whole frame (`len` u32 BE and `len` bytes); None on EOF, error or timeout.
    fn frame(&mut self) -> Option<Vec<u8>> {
        loop {
            if self.buf.len() >= 4 {
                let len = u32::from_be_bytes(self.buf[..4].try_into().unwrap()) as usize;
                if self.buf.len() >= 4 + len {
                    return Some(self.buf.drain(..4 + len).collect());
                }
            }
            if !self.fill() {
                return None;
            }
        }
    }
}

/// Our v1 dialer written from the docs: it answers a hub's v1 challenge with a transcript
/// proof, checks the hub's, and then speaks frame-mac frames.
pub(crate) struct V1Dialer {
    reader: Reader,
    tx: Sealer,
    rx: Sealer,
    me: String,
    counter: u64,
    /// The hub's ack, as received.
    pub(crate) ack: Value,
}

impl V1Dialer {
    /// Dials `addr` as `me`, expecting the hub `hub_id`, offering mutual-auth, frame-bin and
    /// frame-mac; `extra` keys are added to the handshake (`transient`, …).
    pub(crate) fn dial(
        addr: SocketAddr,
        me: &str,
        hub_id: &str,
        key: &str,
        extra: Value,
    ) -> V1Dialer {
        let stream = TcpStream::connect_timeout(&addr, DEADLINE).unwrap();
        stream.set_nodelay(true).unwrap();
        let mut reader = Reader::new(stream);
        let ch: Value = serde_json::from_slice(&reader.line().expect("a challenge")).unwrap();
        assert_eq!(ch["msg_type"], "challenge", "{ch}");
        assert_eq!(ch["payload"]["proto"], 1, "the v1 marker: {ch}");
        assert_eq!(ch["payload"]["peer"], hub_id, "the v1 marker: {ch}");
        let mut payload = json!({
            "features": ["unknown-ok", "mutual-auth", "frame-bin", "frame-mac"],
            "nonce": fresh_nonce(), "proto": 1, "version": "0.1.0",
        });
        for (k, v) in extra.as_object().unwrap() {
            payload[k] = v.clone();
        }
        let mut hs = json!({"id": format!("msg_{}_hs_{}", unix_ms(), fresh_nonce()), "msg_type": "handshake",
                            "from_peer": me, "timestamp": unix_ms(), "payload": payload});
        hs["payload"]["proof"] = json!(proof(key, DIALER_PROOF, &ch, &hs, None));
        reader
            .stream
            .write_all(format!("{hs}\n").as_bytes())
            .unwrap();
        let ack: Value = serde_json::from_slice(&reader.line().expect("an ack")).unwrap();
        assert_eq!(ack["payload"]["status"], "ok", "{ack}");
        assert_eq!(
            ack["payload"]["proof"].as_str(),
            Some(proof(key, ACCEPTOR_PROOF, &ch, &hs, Some(&ack)).as_str()),
            "the hub proves the transcript: {ack}"
        );
        let k = unhex(key);
        let d2a = hmac_sha256(
            &k,
            &transcript(
                "agent-hub relay v1 frame key dialer to acceptor",
                &ch,
                &hs,
                Some(&ack),
            ),
        );
        let a2d = hmac_sha256(
            &k,
            &transcript(
                "agent-hub relay v1 frame key acceptor to dialer",
                &ch,
                &hs,
                Some(&ack),
            ),
        );
        V1Dialer {
            reader,
            tx: Sealer { key: d2a, seq: 0 },
            rx: Sealer { key: a2d, seq: 0 },
            me: me.to_owned(),
            counter: 0,
            ack,
        }
    }

    pub(crate) fn send(&mut self, msg_type: &str, payload: Value) {
        self.counter += 1;
        let msg = json!({"id": format!("msg_{}_{}_{}", unix_ms(), self.counter, &fresh_nonce()[..16]),
                         "msg_type": msg_type, "from_peer": self.me, "timestamp": unix_ms(), "payload": payload});
        let frame = self.tx.seal(msg.to_string().as_bytes());
        self.reader.stream.write_all(&frame).unwrap();
    }

    /// The next message from the hub, its frame-mac tag checked.
    pub(crate) fn next(&mut self) -> Value {
        let f = self.reader.frame().expect("a frame from the hub");
        let body = self
            .rx
            .open(&f)
            .unwrap_or_else(|e| panic!("the hub's frame: {e}"));
        serde_json::from_slice(&body).unwrap()
    }
}

// ----- the attacking proxy -----

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dir {
    /// From the dialling hub to the one it reaches.
    Up,
    Down,
}

/// Rewrites one handshake line: (direction, index of the line in that direction, message).
type LineHook = fn(Dir, usize, &mut Value);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Attack {
    Modify,
    Drop,
    Replay,
    Reorder,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Victim {
    /// The first `bus_forward` frame going up.
    Forward,
    /// The frame going down that acks that forward.
    ForwardAck,
}

struct Plan {
    /// Where each new connection is relayed, and the address it leaves from.
    to: SocketAddr,
    from_ip: Ipv4Addr,
    lines: Option<LineHook>,
    frame: Option<(Victim, Attack)>,
    /// The id of the first `bus_forward` seen going up.
    forward_id: Option<String>,
    /// What the proxy did, for the test to wait on.
    log: Vec<String>,
}

/// A man in the middle on its own loopback address: every connection it accepts is relayed to
/// `plan.to` (from `plan.from_ip`) with the plan's rewrites and at most one frame attack.
/// Knows the relay's framing, not its keys: lines until the handshake is done (1 up, 2 down),
/// then frames.
struct Proxy {
    addr: SocketAddr,
    plan: Arc<Mutex<Plan>>,
    stop: Arc<AtomicBool>,
    streams: Arc<Mutex<Vec<TcpStream>>>,
}

impl Proxy {
    fn start(ip: &str, to: SocketAddr, from_ip: Ipv4Addr) -> Proxy {
        let listener = TcpListener::bind((ip, 0)).unwrap();
        let addr = listener.local_addr().unwrap();
        let plan = Arc::new(Mutex::new(Plan {
            to,
            from_ip,
            lines: None,
            frame: None,
            forward_id: None,
            log: Vec::new(),
        }));
        let stop = Arc::new(AtomicBool::new(false));
        let streams = Arc::new(Mutex::new(Vec::new()));
        let (p, s, st) = (plan.clone(), stop.clone(), streams.clone());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                if s.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(client) = client else { continue };
                let (p, st) = (p.clone(), st.clone());
                // A connection's own thread: if its upstream connect fails, only it ends.
                std::thread::spawn(move || {
                    let (to, from_ip) = {
                        let g = p.lock().unwrap();
                        (g.to, g.from_ip)
                    };
                    let server = connect_from(from_ip, to);
                    for x in [&client, &server] {
                        x.set_nodelay(true).unwrap();
                        st.lock().unwrap().push(x.try_clone().unwrap());
                    }
                    p.lock().unwrap().log.push("connection".into());
                    let up = (client.try_clone().unwrap(), server.try_clone().unwrap());
                    let p2 = p.clone();
                    std::thread::spawn(move || pump(Dir::Up, up.0, up.1, p2));
                    pump(Dir::Down, server, client, p);
                });
            }
        });
        Proxy {
            addr,
            plan,
            stop,
            streams,
        }
    }

    fn set(&self, f: impl FnOnce(&mut Plan)) {
        f(&mut self.plan.lock().unwrap());
    }

    fn log(&self) -> Vec<String> {
        self.plan.lock().unwrap().log.clone()
    }

    fn wait_log(&self, what: &str, pred: impl Fn(&[String]) -> bool) {
        poll_until(&format!("proxy: {what}"), || {
            pred(&self.log()).then_some(())
        });
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(self.addr);
        for s in self.streams.lock().unwrap().iter() {
            let _ = s.shutdown(Shutdown::Both);
        }
    }
}

/// Relays one direction of one connection, unit by unit.
fn pump(dir: Dir, src: TcpStream, mut dst: TcpStream, plan: Arc<Mutex<Plan>>) {
    let handshake_lines = if dir == Dir::Up { 1 } else { 2 };
    let mut r = Reader::new(src.try_clone().unwrap());
    // A frame-mac link's heartbeats come every interval; a read timeout here is a dead link.
    let mut held: Option<Vec<u8>> = None;
    let end = |a: &TcpStream, b: &TcpStream| {
        let _ = a.shutdown(Shutdown::Both);
        let _ = b.shutdown(Shutdown::Both);
    };
    for i in 0..handshake_lines {
        let Some(l) = r.line() else {
            return end(&src, &dst);
        };
        let hook = plan.lock().unwrap().lines;
        let out = match (hook, serde_json::from_slice::<Value>(&l)) {
            (Some(h), Ok(mut v)) => {
                h(dir, i, &mut v);
                format!("{v}\n").into_bytes()
            }
            _ => [l, b"\n".to_vec()].concat(),
        };
        if dst.write_all(&out).is_err() {
            return end(&src, &dst);
        }
    }
    loop {
        // Past the handshake: frames (a link that is not frame-bin is not attacked here).
        let Some(f) = r.frame() else {
            return end(&src, &dst);
        };
        let mut out: Vec<Vec<u8>> = vec![f.clone()];
        {
            let mut g = plan.lock().unwrap();
            if dir == Dir::Up
                && g.forward_id.is_none()
                && contains(&f, b"\"msg_type\":\"bus_forward\"")
            {
                let body: Value =
                    serde_json::from_slice(&f[5..f.len() - 16]).unwrap_or(Value::Null);
                g.forward_id = body["id"].as_str().map(str::to_owned);
            }
            let hit = match g.frame {
                Some((Victim::Forward, _)) => {
                    dir == Dir::Up && contains(&f, b"\"msg_type\":\"bus_forward\"")
                }
                Some((Victim::ForwardAck, _)) => {
                    dir == Dir::Down
                        && g.forward_id.as_ref().is_some_and(|id| {
                            contains(&f, format!("\"ack_id\":\"{id}\"").as_bytes())
                        })
                }
                None => false,
            };
            if let Some(h) = held.take() {
                // Reordered: this frame first, then the one held back.
                out.push(h);
                g.log.push("reordered".into());
            }
            if hit {
                let (_, attack) = g.frame.take().unwrap();
                g.log.push(format!("{attack:?} {dir:?}"));
                out = match attack {
                    Attack::Modify => {
                        let mut m = f.clone();
                        m[5 + 20] ^= 0x01;
                        vec![m]
                    }
                    Attack::Drop => vec![],
                    Attack::Replay => vec![f.clone(), f.clone()],
                    Attack::Reorder => {
                        held = Some(f.clone());
                        vec![]
                    }
                };
            }
        }
        for o in out {
            if dst.write_all(&o).is_err() {
                return end(&src, &dst);
            }
        }
    }
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

// ----- the tests -----

/// Every feature this build agrees between two of our hubs: the configured list plus
/// `frame-mac`, which mutual-auth and frame-bin imply.
fn full_set() -> Vec<String> {
    let mut v: Vec<String> = ALL_FEATURES.iter().map(|s| s.to_string()).collect();
    v.push("frame-mac".into());
    v.push("liveness".into());
    // Offered with frame-mac, agreed on the hardened link only (docs/relay-protocol.md §3).
    v.push("task-approvals".into());
    // Every agent-hub offers headroom since issue 38 (design §4), configured or not.
    v.push("headroom".into());
    v.sort();
    v
}

fn sorted(v: &Value) -> Vec<String> {
    let mut n = names(v);
    n.sort();
    n
}

#[test]
fn two_of_our_hubs_agree_mutual_auth_and_frame_mac_and_say_so() {
    let key = key_hex(0xc0);
    let east = RelayHub::start(
        Setup::new(),
        RelaySpec::new("east", "127.0.0.2:0").peer("west", None, &key, false),
    );
    let west = RelayHub::start(
        west_setup(),
        RelaySpec::new("west", "127.0.0.3:0").peer("east", Some(east.relay_addr), &key, false),
    );
    for (h, peer) in [(&east, "west"), (&west, "east")] {
        let p = h.wait_up(peer);
        assert_eq!(sorted(&p["features"]), full_set(), "{p}");
    }
    let out = {
        let mut cmd = std::process::Command::new(SERVER);
        cmd.args(["relay", "peers", "--config"])
            .arg(east.config_path());
        run(cmd, None)
    };
    out.assert_code(0);
    let row = out.stdout.lines().find(|l| l.starts_with("west ")).unwrap();
    assert!(
        row.contains("mutual-auth") && row.contains("frame-mac"),
        "{}",
        out.stdout
    );
    assert!(
        east.log().contains("relay: link with west up (accepted, proto 1, features [unknown-ok,mutual-auth,frame-bin,lz4,hb-delta,frame-mac,liveness,headroom,task-approvals]"),
        "{}",
        east.log()
    );
}

/// Line hook: the reflecting proxy makes each hub's own challenge and handshake look like its
/// peer's (east's dial expects "west"; east's listener must think "west" is dialling).
fn reflect_ids(dir: Dir, i: usize, v: &mut Value) {
    let swap = |s: &str| {
        match s {
            "east" => "west",
            "west" => "east",
            other => other,
        }
        .to_owned()
    };
    match (dir, i) {
        (Dir::Down, 0) => {
            let p = swap(v["payload"]["peer"].as_str().unwrap_or(""));
            v["payload"]["peer"] = json!(p);
        }
        (Dir::Up, 0) | (Dir::Down, 1) => {
            let f = swap(v["from_peer"].as_str().unwrap_or(""));
            v["from_peer"] = json!(f);
        }
        _ => {}
    }
}

#[test]
fn a_man_in_the_middle_reflecting_each_hubs_challenge_back_links_nothing() {
    let key = key_hex(0xc1);
    // Each hub dials the other at an address the attacker owns; its proxy relays the dial to
    // the dialling hub's own listener (reflection), rewriting the ids each side checks.
    let east_listen = crate::relay::free_port_on("127.0.0.2");
    let west_listen = crate::relay::free_port_on("127.0.0.3");
    let to_west = Proxy::start("127.0.0.4", east_listen, Ipv4Addr::new(127, 0, 0, 6));
    let to_east = Proxy::start("127.0.0.5", west_listen, Ipv4Addr::new(127, 0, 0, 6));
    for p in [&to_west, &to_east] {
        p.set(|g| g.lines = Some(reflect_ids));
    }
    let east = RelayHub::start(
        Setup::new(),
        RelaySpec::new("east", &east_listen.to_string()).peer(
            "west",
            Some(to_west.addr),
            &key,
            false,
        ),
    );
    let west = RelayHub::start(
        west_setup(),
        RelaySpec::new("west", &west_listen.to_string()).peer(
            "east",
            Some(to_east.addr),
            &key,
            false,
        ),
    );
    // Each refuses its own challenge, twice (a redial too), having signed nothing.
    for (h, peer) in [(&east, "west"), (&west, "east")] {
        h.hub.wait_service_log("reflections refused", |l| {
            count(l, &format!("dialling {peer} failed: refused the challenge answering our dial to {peer}: its nonce is one this hub issued itself")) >= 2
        });
        let log = h.log();
        assert!(!log.contains("link with"), "{log}");
        assert_ne!(h.peer(peer).unwrap()["state"], "up");
        assert_eq!(h.peer(peer).unwrap()["last_heartbeat"], Value::Null);
    }
    // Control: the same proxies relaying honestly to the real peer link the hubs, with every
    // protection agreed (so the failure above was the defence, not a broken proxy).
    to_west.set(|g| {
        g.lines = None;
        g.to = west_listen;
        g.from_ip = Ipv4Addr::new(127, 0, 0, 7);
    });
    to_east.set(|g| {
        g.lines = None;
        g.to = east_listen;
        g.from_ip = Ipv4Addr::new(127, 0, 0, 7);
    });
    let e = east.wait_up("west");
    assert_eq!(sorted(&e["features"]), full_set(), "{e}");
    west.wait_up("east");
}

fn strip_marker(dir: Dir, i: usize, v: &mut Value) {
    if (dir, i) == (Dir::Down, 0) {
        let n = v["payload"]["nonce"].clone();
        v["payload"] = json!({ "nonce": n });
    }
}

fn strip_frame_mac_offer(dir: Dir, i: usize, v: &mut Value) {
    if (dir, i) == (Dir::Up, 0) {
        if let Some(a) = v["payload"]["features"].as_array_mut() {
            a.retain(|f| f != "frame-mac");
        }
    }
}

fn strip_frame_mac_agreed(dir: Dir, i: usize, v: &mut Value) {
    if (dir, i) == (Dir::Down, 1) {
        if let Some(a) = v["payload"]["features"].as_array_mut() {
            a.retain(|f| f != "frame-mac");
        }
    }
}

#[test]
fn a_man_in_the_middle_cannot_strip_the_marker_or_a_feature() {
    let key = key_hex(0xc2);
    let cases: [(&str, LineHook, &str, &str); 3] = [
        ("marker stripped", strip_marker, "east", "has no v1 marker"),
        (
            "frame-mac stripped from the offer",
            strip_frame_mac_offer,
            "west",
            "wrong proof from east",
        ),
        (
            "frame-mac stripped from the ack",
            strip_frame_mac_agreed,
            "east",
            "failed mutual authentication",
        ),
    ];
    for (case, hook, who, why) in cases {
        let west = RelayHub::start(
            west_setup(),
            RelaySpec::new("west", "127.0.0.3:0").peer("east", None, &key, false),
        );
        let proxy = Proxy::start("127.0.0.4", west.relay_addr, Ipv4Addr::new(127, 0, 0, 6));
        proxy.set(|g| g.lines = Some(hook));
        let east = RelayHub::start(
            Setup::new(),
            RelaySpec::new("east", "127.0.0.2:0").peer("west", Some(proxy.addr), &key, false),
        );
        let h = if who == "east" { &east } else { &west };
        h.hub.wait_service_log(case, |l| count(l, why) >= 2);
        // The dialer never links. An acceptor that has sent its ack holds the link until the
        // dialer hangs up, and hears nothing on it: the dialer sends nothing after refusing,
        // and anything the attacker injects fails the acceptor's frame-mac check.
        assert!(!east.log().contains("link with"), "{case}: {}", east.log());
        assert_ne!(east.peer("west").unwrap()["state"], "up", "{case}");
        assert!(!west.log().contains("east sent"), "{case}: {}", west.log());
        west.wait_peer("east", &format!("{case}: not up"), |p| p["state"] != "up");
    }
}

/// east (dials through the proxy, forwarding) and west (accepts, forwarding), linked.
fn forwarding_through_proxy(key: &str) -> (RelayHub, RelayHub, Proxy) {
    let west = RelayHub::start(
        west_setup(),
        RelaySpec::new("west", "127.0.0.3:0")
            .peer("east", None, key, false)
            .forwarding(),
    );
    let proxy = Proxy::start("127.0.0.4", west.relay_addr, Ipv4Addr::new(127, 0, 0, 6));
    let east = RelayHub::start(
        Setup::new().with_sqlite_store(64 << 20),
        RelaySpec::new("east", "127.0.0.2:0")
            .peer("west", Some(proxy.addr), key, false)
            .forwarding(),
    );
    let e = east.wait_up("west");
    let agreed = names(&e["features"]);
    assert!(
        agreed.contains(&"frame-mac".to_owned()) && agreed.contains(&"bus-forward".to_owned()),
        "{e}"
    );
    west.wait_up("east");
    (east, west, proxy)
}

/// One frame of a live link is attacked while it carries a forward (or its ack): the
/// receiver's frame-mac check drops the link, east redials, and the envelope reaches omega
/// exactly once.
fn attack_a_forward_in_flight(victim: Victim, attack: Attack, seed: u8) {
    let case = format!("{attack:?} of the {victim:?}");
    let (east, west, proxy) = forwarding_through_proxy(&key_hex(seed));
    proxy.set(|g| g.frame = Some((victim, attack)));
    let id = east
        .hub
        .send("alpha", "omega@west", "task", None, r#"{"n":1}"#);
    proxy.wait_log(&case, |l| {
        l.iter().any(|x| x.starts_with(&format!("{attack:?}")))
    });
    // The receiver of the attacked frame says why it dropped the link.
    let receiver = if victim == Victim::Forward {
        &west
    } else {
        &east
    };
    receiver.hub.wait_service_log(&format!("{case}: the frame-mac refusal"), |l| {
        l.contains("failed its frame-mac check: the stream was modified in flight, or a frame was dropped, replayed, reordered or injected")
    });
    // The link comes back (east dialled, so east redials) and the forward is resent.
    east.wait_peer("west", &format!("{case}: up again"), |p| {
        p["state"] == "up" && p["reconnects"].as_u64().unwrap_or(0) >= 1
    });
    let audit = east
        .hub
        .wait_audit(&format!("{case}: the forward acked"), |a| {
            a.iter()
                .any(|e| e["event"] == "forward_acked" && e["id"] == json!(id))
        });
    let acked = audit
        .iter()
        .find(|e| e["event"] == "forward_acked" && e["id"] == json!(id))
        .unwrap();
    // It went back to the queue when the link dropped (`attempts` counts such returns) and
    // was sent again on the new link.
    assert!(
        acked["attempts"].as_u64().unwrap() >= 1 && acked["error"].is_null(),
        "{case}: acked after a resend: {acked}"
    );
    assert!(
        audit
            .iter()
            .any(|e| e["event"] == "forward_requeued" && e["id"] == json!(id)),
        "{case}: requeued when the link dropped"
    );
    // Exactly once at omega.
    let got = west_verb(&west, "omega", &await_line(None, None, Some(10)));
    assert_eq!(got["envelope"]["id"], json!(id), "{case}: {got}");
    assert_eq!(
        west_verb(&west, "omega", AWAIT_NOW),
        json!({"timeout": {}}),
        "{case}: and never twice"
    );
    let audit = west.hub.wait_audit(&format!("{case}: received"), |a| {
        a.iter()
            .any(|e| e["event"] == "received" && e["envelope"]["id"] == json!(id))
    });
    let received = audit
        .iter()
        .filter(|e| e["event"] == "received" && e["envelope"]["id"] == json!(id))
        .count();
    assert_eq!(
        received, 1,
        "{case}: received once, the resend answered as a duplicate"
    );
    assert!(east.log().contains("relay: link with west down"), "{case}");
}

#[test]
fn a_modified_forward_frame_drops_the_link_and_the_forward_arrives_once() {
    attack_a_forward_in_flight(Victim::Forward, Attack::Modify, 0xd0);
}

#[test]
fn a_dropped_forward_frame_drops_the_link_and_the_forward_arrives_once() {
    attack_a_forward_in_flight(Victim::Forward, Attack::Drop, 0xd1);
}

#[test]
fn a_replayed_forward_frame_drops_the_link_and_the_forward_arrives_once() {
    attack_a_forward_in_flight(Victim::Forward, Attack::Replay, 0xd2);
}

#[test]
fn a_reordered_forward_frame_drops_the_link_and_the_forward_arrives_once() {
    attack_a_forward_in_flight(Victim::Forward, Attack::Reorder, 0xd3);
}

#[test]
fn a_dropped_forward_ack_drops_the_link_and_the_resend_is_a_duplicate() {
    attack_a_forward_in_flight(Victim::ForwardAck, Attack::Drop, 0xd4);
}

#[test]
fn the_docs_v1_double_links_with_a_hub_and_its_frames_check() {
    let key = key_hex(0xc3);
    let east = RelayHub::start(
        Setup::new(),
        RelaySpec::new("east", "127.0.0.2:0").peer("west", None, &key, false),
    );
    let started = Instant::now();
    let mut d = V1Dialer::dial(east.relay_addr, "west", "east", &key, json!({}));
    assert_eq!(
        sorted(&d.ack["payload"]["features"]),
        ["frame-bin", "frame-mac", "mutual-auth", "unknown-ok"]
    );
    // The hub's first heartbeat arrives as a frame-mac frame whose tag checks; ours is read.
    let beat = d.next();
    assert_eq!(beat["msg_type"], "heartbeat", "{beat}");
    d.send("heartbeat", json!({}));
    d.send("knowledge_request", json!({"since_epoch": 0}));
    east.hub.wait_service_log("the double's message read", |l| {
        l.contains("relay: west sent knowledge_request")
    });
    assert!(started.elapsed() < DEADLINE);
    // A frame with a bad tag from the double drops the link at once.
    let mut forged = d.tx.seal(br#"{"id":"x","msg_type":"knowledge_request","from_peer":"west","timestamp":1,"payload":{"since_epoch":1}}"#);
    let n = forged.len();
    forged[n - 1] ^= 1;
    d.reader.stream.write_all(&forged).unwrap();
    east.hub.wait_service_log("the forged frame refused", |l| {
        l.contains("relay: link with west down: protocol error from west: frame 2 failed its frame-mac check")
    });
    assert_eq!(count(&east.log(), "west sent knowledge_request"), 1);
}
