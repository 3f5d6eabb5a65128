//! The relay's IO (SPEC §13): its listener, dialling with backoff, one socket per link, and
//! the peer table. Every protocol decision — challenge, handshake, negotiation, frames,
//! heartbeats, liveness — is in `relay::session`; this file only moves bytes and keeps books.
//!
//! Owns which connection is a peer's link (`relay::links` decides), redial timing, the
//! address a dial leaves from (`dial_source`, `connect_from`) and the status file; applies the
//! caps of docs/relay-protocol.md "Limits" that need a socket: admission at accept
//! (`relay_gate` keeps the books), a read budget per connection per loop iteration, and a rate
//! limit on every log line a peer or a stranger can trigger. Refuses: parsing relay messages.

use super::relay_gate::{
    dropped_summary, is_fd_exhaustion, throttled, Gate, SharedKeys, PEER_LOG_BURST,
    PEER_LOG_REFILL, STRANGER_LOG_BURST, STRANGER_LOG_REFILL,
};
use super::relay_status::{PeerStatus, RelayStatus, StatusWriter};
use crate::config::{PeerConfig, RelayConfig};
use crate::relay::heartbeat::{AgentEntry, Directory, DirectoryCaps};
use crate::relay::links::{Direction, Links, Verdict};
use crate::relay::message::{Ack, BusForward};
use crate::relay::session::{PeerAuth, SendError, Session, SessionConfig, SessionEvent, WallClock};
use crate::relay::throttle::Throttle;
use crate::relay::{Feature, MsgType, Payload};
use mio::net::{TcpListener, TcpStream};
use mio::{Interest, Registry, Token};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Relay tokens live above this, apart from client connections.
pub const RELAY_TOKEN_BASE: usize = 1 << 40;
const RELAY_LISTENER: Token = Token(RELAY_TOKEN_BASE);
/// Bytes queued for one peer before the link is dropped as too slow to keep.
pub const MAX_PEER_BACKLOG_BYTES: usize = 16 * 1024 * 1024;
/// The status file is rewritten at most this often.
const STATUS_INTERVAL: Duration = Duration::from_secs(1);
/// Bytes read from one relay connection per loop iteration before other sockets get a turn
/// (the client side's `READ_BUDGET_BYTES`, smaller: a frame may decompress fourfold).
pub const RELAY_READ_BUDGET_BYTES: usize = 256 * 1024;
/// How long the relay stops accepting after `accept` failed for want of descriptors: the
/// connection stays in the backlog, and the client listener keeps what descriptors there are.
const ACCEPT_PAUSE: Duration = Duration::from_millis(100);
struct Link {
    stream: TcpStream,
    session: Session,
    direction: Direction,
    /// The peer the link is for: known at dial time, learned from the handshake on accept.
    peer: Option<String>,
    /// The other end's address (for log lines about connections that never became a link).
    addr: SocketAddr,
    /// Still connecting (dialled, not yet writable).
    connecting: bool,
    out: Vec<u8>,
    out_pos: usize,
    writable_interest: bool,
    closed: bool,
    /// The registered link agreed `bus-forward`: the hub forwards mail over it.
    forwarding: bool,
    /// Our `bus_forward` messages on this link not yet acked: relay message id → the
    /// envelope's acceptance seq in the hub.
    forwards: HashMap<String, u64>,
    /// Accepted: the address the gate counts it against; None for our dials.
    admitted: Option<IpAddr>,
    /// Accepted and past its handshake (the gate no longer counts it unauthenticated).
    authenticated: bool,
    /// Log lines this connection's peer has triggered.
    log_throttle: Throttle,
}

impl Link {
    fn new(stream: TcpStream, session: Session, direction: Direction, addr: SocketAddr) -> Link {
        Link {
            stream,
            session,
            direction,
            peer: None,
            addr,
            connecting: false,
            out: Vec::new(),
            out_pos: 0,
            writable_interest: false,
            closed: false,
            forwarding: false,
            forwards: HashMap::new(),
            admitted: None,
            authenticated: false,
            log_throttle: Throttle::new(PEER_LOG_BURST, PEER_LOG_REFILL),
        }
    }
}

/// What the relay tells the hub core (SPEC §15), drained by the loop after each relay event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToHub {
    /// A link that agreed `bus-forward` is up.
    LinkUp { peer: String },
    /// That link is gone (replaced, dropped, shut down).
    LinkDown { peer: String, reason: String },
    /// The peer forwarded an envelope; ack it with `RelayIo::ack_forward(ack_id)`.
    Forwarded {
        peer: String,
        ack_id: String,
        envelope: String,
        hop: u32,
    },
    /// The peer acked our forward of the envelope of acceptance `seq`.
    ForwardAcked {
        peer: String,
        seq: u64,
        error: Option<String>,
    },
}

/// How `RelayIo::forward` went.
#[derive(Debug, PartialEq, Eq)]
pub enum Forwarded {
    Sent,
    /// No forwarding link with the peer right now; the hub hears `LinkDown` (or already has).
    NoLink,
    /// The link cannot carry this envelope (too large for a line or frame): it never will.
    Refused(String),
}

#[derive(Default)]
struct PeerBook {
    status: PeerStatus,
    /// The dial schedule: index into the backoff list and when to dial next.
    backoff_step: usize,
    next_dial: Option<Instant>,
    dialling: Option<Token>,
    last_heartbeat: Option<Instant>,
}

pub struct RelayIo {
    cfg: RelayConfig,
    session_cfg: SessionConfig,
    keys: Arc<HashMap<String, PeerAuth>>,
    peers_cfg: Vec<PeerConfig>,
    listener: Option<TcpListener>,
    links: HashMap<Token, Link>,
    registry_links: Links,
    books: BTreeMap<String, PeerBook>,
    next_token: usize,
    directory: Directory,
    status_dirty: bool,
    next_status_write: Option<Instant>,
    /// Admission of accepted connections: caps, failed handshakes, refusal tallies.
    gate: Gate,
    /// Lines about connections still in their handshake, from anyone.
    stranger_log: Throttle,
    /// Accepting stopped until then (descriptors ran out).
    accept_paused_until: Option<Instant>,
    /// Connections whose read budget ran out: read again next iteration.
    read_again: BTreeSet<Token>,
    /// The most of a peer's directory a session keeps.
    directory_caps: DirectoryCaps,
    /// Writes the status file off the loop (`relay_status::StatusWriter`).
    status_writer: StatusWriter,
    /// Service-log lines waiting for the loop to write them.
    pub logs: Vec<(&'static str, String)>,
    /// Events for the hub core, in order.
    pub inbox: Vec<ToHub>,
    random: std::fs::File,
}

/// Reads a peer key file: mode 600 or refused, 64 hex chars.
pub fn load_key(path: &std::path::Path) -> Result<[u8; 32], String> {
    super::startup::check_private(path, "relay key file")?;
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read relay key file {}: {e}", path.display()))?;
    crate::relay::auth::parse_key(&text)
        .map_err(|e| format!("relay key file {}: {e}", path.display()))
}

impl RelayIo {
    /// Loads keys and binds the listener. Errors name the file or address.
    pub fn new(cfg: RelayConfig, registry: &Registry, now: Instant) -> Result<RelayIo, String> {
        let mut keys = HashMap::new();
        for p in &cfg.peers {
            keys.insert(
                p.id.clone(),
                PeerAuth {
                    key: load_key(&p.key_file)?,
                    allow_v0: p.allow_v0,
                    forward: p.forward,
                },
            );
        }
        let features = cfg
            .features
            .iter()
            .filter_map(|f| Feature::parse(f))
            .collect();
        let session_cfg = SessionConfig {
            local_peer: cfg.peer_id.clone(),
            software_version: crate::VERSION.to_owned(),
            features,
            heartbeat_interval: Duration::from_millis(cfg.heartbeat_interval_ms),
            handshake_timeout: Duration::from_millis(cfg.handshake_timeout_ms),
            listen_port: cfg.listen.map(|a| a.port()),
            transient: false,
            wall_clock: wall_clock(now),
            // One book for every session this hub runs (each takes a clone of this config).
            nonces: crate::relay::nonces::NonceBook::new(),
        };
        let listener = match cfg.listen {
            None => None,
            Some(addr) => {
                let mut l = TcpListener::bind(addr)
                    .map_err(|e| format!("cannot bind the relay to {addr}: {e}"))?;
                registry
                    .register(&mut l, RELAY_LISTENER, Interest::READABLE)
                    .map_err(|e| e.to_string())?;
                Some(l)
            }
        };
        let mut books = BTreeMap::new();
        for p in &cfg.peers {
            let mut book = PeerBook::default();
            book.status.id = p.id.clone();
            book.status.state = if p.address.is_some() {
                "connecting"
            } else {
                "down"
            }
            .to_owned();
            book.next_dial = p.address.map(|_| now);
            books.insert(p.id.clone(), book);
        }
        let directory_caps = DirectoryCaps {
            max_agents: cfg.limits.max_peer_agents,
            max_bytes: cfg.limits.max_peer_directory_bytes,
        };
        let random = std::fs::File::open("/dev/urandom")
            .map_err(|e| format!("cannot open /dev/urandom: {e}"))?;
        let status_writer = StatusWriter::spawn(cfg.status_path.clone())
            .map_err(|e| format!("cannot start the relay status writer: {e}"))?;
        Ok(RelayIo {
            peers_cfg: cfg.peers.clone(),
            registry_links: Links::new(cfg.peer_id.clone()),
            gate: Gate::new(cfg.limits),
            stranger_log: Throttle::new(STRANGER_LOG_BURST, STRANGER_LOG_REFILL),
            accept_paused_until: None,
            read_again: BTreeSet::new(),
            directory_caps,
            cfg,
            session_cfg,
            keys: Arc::new(keys),
            listener,
            links: HashMap::new(),
            books,
            next_token: RELAY_TOKEN_BASE + 1,
            directory: Directory::default(),
            status_dirty: true,
            next_status_write: Some(now),
            status_writer,
            logs: Vec::new(),
            inbox: Vec::new(),
            random,
        })
    }

    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.listener.as_ref().and_then(|l| l.local_addr().ok())
    }

    pub fn owns(token: Token) -> bool {
        token.0 >= RELAY_TOKEN_BASE
    }

    /// A session config whose wall clock is anchored now (a suspended machine's monotonic
    /// clock stops while the wall clock runs, so each new session takes a fresh anchor).
    fn session_cfg(&self, now: Instant) -> SessionConfig {
        let mut cfg = self.session_cfg.clone();
        cfg.wall_clock = wall_clock(now);
        cfg
    }

    fn entropy(&mut self) -> ([u8; 32], u64) {
        let mut buf = [0u8; 40];
        // /dev/urandom does not fail short of a broken system; a zeroed nonce would only make
        // this one handshake guessable, and the failure is logged.
        if let Err(e) = self.random.read_exact(&mut buf) {
            self.logs
                .push(("ERROR", format!("relay: cannot read random bytes: {e}")));
        }
        let mut nonce = [0u8; 32];
        nonce.copy_from_slice(&buf[..32]);
        (
            nonce,
            u64::from_le_bytes(buf[32..].try_into().expect("8 bytes")),
        )
    }

    /// The hub's directory for outgoing heartbeats.
    pub fn set_directory(&mut self, agents: Vec<(String, u32, u32)>) {
        let mut d = Directory {
            version: crate::VERSION.to_owned(),
            agents: BTreeMap::new(),
        };
        for (name, parked, queued) in agents {
            d.agents.insert(name, AgentEntry { parked, queued });
        }
        if d != self.directory {
            self.directory = d.clone();
            for link in self.links.values_mut() {
                link.session.set_directory(d.clone());
            }
        }
    }

    pub fn handle_event(
        &mut self,
        registry: &Registry,
        token: Token,
        readable: bool,
        writable: bool,
        now: Instant,
    ) {
        if token == RELAY_LISTENER {
            self.accept(registry, now);
            return;
        }
        if writable {
            if let Some(link) = self.links.get_mut(&token) {
                if link.connecting {
                    match link.stream.take_error() {
                        Ok(None) if link.stream.peer_addr().is_ok() => link.connecting = false,
                        Ok(None) => {}
                        Ok(Some(e)) | Err(e) => {
                            self.drop_link(registry, token, &format!("connect failed: {e}"), now);
                            return;
                        }
                    }
                }
            }
            self.flush(registry, token, now);
        }
        if readable {
            self.read(registry, token, now);
        }
    }

    /// Accepts until the backlog is empty. A connection past a cap is closed at once, unread
    /// and unlogged (the gate sums it into one line per interval), so a flood neither spins the
    /// loop nor fills the log; past the descriptor limit accepting pauses briefly instead.
    fn accept(&mut self, registry: &Registry, now: Instant) {
        if self.accept_paused_until.is_some() {
            return;
        }
        loop {
            let Some(listener) = &self.listener else {
                return;
            };
            match listener.accept() {
                Ok((mut stream, addr)) => {
                    if self.gate.admit(addr.ip(), now).is_err() {
                        drop(stream);
                        continue;
                    }
                    let token = Token(self.next_token);
                    self.next_token += 1;
                    if registry
                        .register(&mut stream, token, Interest::READABLE)
                        .is_err()
                    {
                        self.gate.closed(addr.ip(), false);
                        continue;
                    }
                    let (nonce, seed) = self.entropy();
                    let mut session = Session::acceptor(
                        self.session_cfg(now),
                        SharedKeys(Arc::clone(&self.keys)),
                        nonce,
                        seed,
                        now,
                    );
                    session.set_directory_caps(self.directory_caps);
                    throttled(
                        &mut self.logs,
                        &mut self.stranger_log,
                        "INFO",
                        format!("relay: connection from {addr}"),
                        now,
                    );
                    let mut link = Link::new(stream, session, Direction::Accepted, addr);
                    link.admitted = Some(addr.ip());
                    self.links.insert(token, link);
                    self.pump(registry, token, now);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if is_fd_exhaustion(&e) => {
                    self.gate.no_descriptors(now);
                    self.accept_paused_until = Some(now + ACCEPT_PAUSE);
                    break;
                }
                Err(e) => {
                    throttled(
                        &mut self.logs,
                        &mut self.stranger_log,
                        "WARN",
                        format!("relay: accept failed: {e}"),
                        now,
                    );
                    break;
                }
            }
        }
        self.log_refusals(now, false);
    }

    /// The gate's summed refusal line, when one is due.
    fn log_refusals(&mut self, now: Instant, force: bool) {
        if let Some(line) = self.gate.poll_log(now, force) {
            self.logs.push(("WARN", line));
        }
    }

    fn dial(&mut self, registry: &Registry, peer: &PeerConfig, now: Instant) {
        let Some(addr) = peer.address else { return };
        let token = Token(self.next_token);
        self.next_token += 1;
        let book = self
            .books
            .get_mut(&peer.id)
            .expect("every configured peer has a book");
        book.next_dial = None;
        book.status.state = "connecting".into();
        self.status_dirty = true;
        let source = dial_source(self.local_addr(), addr);
        let connected = match source {
            Some(ip) => connect_from(ip, addr),
            None => TcpStream::connect(addr),
        };
        let mut stream = match connected {
            Ok(s) => s,
            Err(e) => {
                let from = source.map(|ip| format!(" from {ip}")).unwrap_or_default();
                self.logs.push((
                    "WARN",
                    format!("relay: dialling {} at {addr}{from} failed: {e}", peer.id),
                ));
                self.schedule_redial(&peer.id.clone(), now);
                return;
            }
        };
        if registry
            .register(&mut stream, token, Interest::READABLE | Interest::WRITABLE)
            .is_err()
        {
            self.schedule_redial(&peer.id.clone(), now);
            return;
        }
        let (nonce, seed) = self.entropy();
        let auth = self.keys[&peer.id].clone();
        let mut session = Session::dialer(self.session_cfg(now), &peer.id, auth, nonce, seed, now);
        session.set_directory_caps(self.directory_caps);
        self.books.get_mut(&peer.id).expect("book").dialling = Some(token);
        let mut link = Link::new(stream, session, Direction::Dialled, addr);
        link.peer = Some(peer.id.clone());
        link.connecting = true;
        link.writable_interest = true;
        self.links.insert(token, link);
    }

    fn schedule_redial(&mut self, peer: &str, now: Instant) {
        let Some(book) = self.books.get_mut(peer) else {
            return;
        };
        let waits = &self.cfg.reconnect_backoff_ms;
        let wait = waits[book.backoff_step.min(waits.len() - 1)];
        book.backoff_step += 1;
        book.next_dial = Some(crate::deadline::after(now, Duration::from_millis(wait)));
        book.dialling = None;
        book.status.state = "backoff".into();
        self.status_dirty = true;
    }

    /// Reads until `WouldBlock` or `RELAY_READ_BUDGET_BYTES`; a connection whose budget ran
    /// out is read again next iteration (`read_pending`), after every other socket had its
    /// turn, so one fast peer cannot starve the others or the local clients.
    fn read(&mut self, registry: &Registry, token: Token, now: Instant) {
        let mut buf = [0u8; 64 * 1024];
        let mut budget = RELAY_READ_BUDGET_BYTES;
        loop {
            let Some(link) = self.links.get_mut(&token) else {
                return;
            };
            if budget == 0 {
                self.read_again.insert(token);
                return;
            }
            let want = buf.len().min(budget);
            match link.stream.read(&mut buf[..want]) {
                Ok(0) => {
                    link.session.handle_eof();
                    self.pump(registry, token, now);
                    self.drop_link(registry, token, "peer closed the connection", now);
                    return;
                }
                Ok(n) => {
                    budget -= n;
                    link.session.handle_input(&buf[..n], now);
                    if let Some(peer) = &link.peer {
                        if let Some(b) = self.books.get_mut(peer) {
                            b.status.bytes_in += n as u64;
                        }
                    }
                    self.pump(registry, token, now);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    self.drop_link(registry, token, &format!("read failed: {e}"), now);
                    return;
                }
            }
        }
    }

    /// Reads the connections whose read budget ran out in the last iteration.
    pub fn read_pending(&mut self, registry: &Registry, now: Instant) {
        for token in std::mem::take(&mut self.read_again) {
            self.read(registry, token, now);
        }
    }

    /// Whether a connection waits to be read again (the loop then polls without waiting).
    pub fn wants_read(&self) -> bool {
        !self.read_again.is_empty()
    }

    /// Drains a session's events and bytes after any input or timeout.
    fn pump(&mut self, registry: &Registry, token: Token, now: Instant) {
        loop {
            let Some(link) = self.links.get_mut(&token) else {
                return;
            };
            let Some(ev) = link.session.poll_event() else {
                break;
            };
            match ev {
                SessionEvent::Established {
                    peer,
                    proto,
                    features,
                    transient,
                    peer_version,
                } => {
                    let names: Vec<String> =
                        features.iter().map(|f| f.as_str().to_owned()).collect();
                    self.logs.push((
                        "INFO",
                        format!(
                            "relay: link with {peer} up ({}, proto {proto}, features [{}], peer version {peer_version}{})",
                            if link.direction == Direction::Dialled { "dialled" } else { "accepted" },
                            names.join(","),
                            if transient { ", transient" } else { "" }
                        ),
                    ));
                    link.peer = Some(peer.clone());
                    link.session.set_directory(self.directory.clone());
                    if link.admitted.is_some() && !link.authenticated {
                        link.authenticated = true;
                        self.gate.authenticated();
                    }
                    let direction = link.direction;
                    match self.registry_links.established(
                        &peer,
                        token.0 as u64,
                        direction,
                        transient,
                    ) {
                        Verdict::Register { replaces } => {
                            if let Some(old) = replaces {
                                // Logged here: the replaced connection is no longer the link, so
                                // closing it logs nothing.
                                self.logs.push((
                                    "INFO",
                                    format!(
                                        "relay: link with {peer} replaced by a newer link ({})",
                                        if direction == Direction::Dialled {
                                            "dialled"
                                        } else {
                                            "accepted"
                                        }
                                    ),
                                ));
                                self.drop_link(
                                    registry,
                                    Token(old as usize),
                                    "replaced by a newer link",
                                    now,
                                );
                            }
                            let book = self.books.entry(peer.clone()).or_default();
                            book.status.id = peer.clone();
                            book.status.state = "up".into();
                            book.status.direction = Some(
                                if direction == Direction::Dialled {
                                    "dialled"
                                } else {
                                    "accepted"
                                }
                                .into(),
                            );
                            book.status.proto = Some(proto);
                            book.status.features = names;
                            book.status.peer_version = Some(peer_version);
                            book.status.last_error = None;
                            book.backoff_step = 0;
                            book.dialling = None;
                            // A redial scheduled before the peer dialled us is moot now; left
                            // set, its instant would stay in the past and spin the loop.
                            book.next_dial = None;
                            book.last_heartbeat = Some(now);
                            self.status_dirty = true;
                            let link = self.links.get_mut(&token).expect("still open");
                            if link.session.features().contains(&Feature::BusForward) {
                                link.forwarding = true;
                                self.inbox.push(ToHub::LinkUp { peer: peer.clone() });
                            }
                        }
                        Verdict::Transient => {}
                        Verdict::Reject(why) => {
                            self.logs.push((
                                "INFO",
                                format!("relay: second link with {peer} closed: {why}"),
                            ));
                            self.drop_link(registry, token, &why, now);
                            return;
                        }
                    }
                }
                SessionEvent::Heartbeat { directory } => {
                    if let Some(peer) = link.peer.clone() {
                        if let Some(b) = self.books.get_mut(&peer) {
                            b.last_heartbeat = Some(now);
                            b.status.last_heartbeat = Some(
                                chrono::Utc::now()
                                    .to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
                            );
                            b.status.agents = directory.agents.keys().cloned().collect();
                            self.status_dirty = true;
                        }
                    }
                }
                SessionEvent::Message(msg) if link.forwarding => {
                    let peer = link.peer.clone().unwrap_or_default();
                    match msg.payload_typed() {
                        Ok(Payload::BusForward(BusForward { envelope, hop })) => {
                            self.inbox.push(ToHub::Forwarded {
                                peer,
                                ack_id: msg.id,
                                envelope,
                                hop,
                            });
                        }
                        Ok(Payload::Ack(Ack { ack_id, error, .. })) => {
                            match link.forwards.remove(&ack_id) {
                                Some(seq) => self.inbox.push(ToHub::ForwardAcked {
                                    peer,
                                    seq,
                                    error,
                                }),
                                None => throttled(
                                    &mut self.logs,
                                    &mut link.log_throttle,
                                    "INFO",
                                    format!("relay: {peer} acked {ack_id:?}, which is no forward of this link; ignored"),
                                    now,
                                ),
                            }
                        }
                        _ => throttled(
                            &mut self.logs,
                            &mut link.log_throttle,
                            "INFO",
                            format!(
                                "relay: {peer} sent {}; not acted on by this hub",
                                msg.msg_type.as_str()
                            ),
                            now,
                        ),
                    }
                }
                SessionEvent::Message(msg) => {
                    // Delegation is a later extension; until then a message is logged by type
                    // and dropped (never its payload: it may carry a prompt).
                    let peer = link.peer.clone().unwrap_or_default();
                    throttled(
                        &mut self.logs,
                        &mut link.log_throttle,
                        "INFO",
                        format!(
                            "relay: {peer} sent {}; not acted on by this hub",
                            msg.msg_type.as_str()
                        ),
                        now,
                    );
                }
                SessionEvent::UnknownType { msg_type } => {
                    let peer = link.peer.clone().unwrap_or_default();
                    throttled(
                        &mut self.logs,
                        &mut link.log_throttle,
                        "WARN",
                        format!("relay: {peer} sent unknown message type {msg_type:?}; dropped"),
                        now,
                    );
                }
                SessionEvent::Log(line) => throttled(
                    &mut self.logs,
                    &mut link.log_throttle,
                    "INFO",
                    format!("relay: {line}"),
                    now,
                ),
                SessionEvent::Closed { reason } => {
                    link.closed = true;
                    // Write what the session queued (a denial) before closing.
                    while let Some(bytes) = link.session.poll_transmit() {
                        link.out.extend_from_slice(&bytes);
                    }
                    self.flush(registry, token, now);
                    self.drop_link(registry, token, &reason, now);
                    return;
                }
            }
        }
        let Some(link) = self.links.get_mut(&token) else {
            return;
        };
        let mut queued = false;
        while let Some(bytes) = link.session.poll_transmit() {
            link.out.extend_from_slice(&bytes);
            queued = true;
        }
        if link.out.len() - link.out_pos > MAX_PEER_BACKLOG_BYTES {
            let msg =
                format!("more than {MAX_PEER_BACKLOG_BYTES} bytes waiting for the peer to read");
            self.drop_link(registry, token, &msg, now);
            return;
        }
        if queued {
            self.flush(registry, token, now);
        }
    }

    fn flush(&mut self, registry: &Registry, token: Token, now: Instant) {
        let Some(link) = self.links.get_mut(&token) else {
            return;
        };
        if link.connecting {
            return;
        }
        while link.out_pos < link.out.len() {
            match link.stream.write(&link.out[link.out_pos..]) {
                Ok(0) => break,
                Ok(n) => {
                    link.out_pos += n;
                    if let Some(b) = link.peer.as_ref().and_then(|p| self.books.get_mut(p)) {
                        b.status.bytes_out += n as u64;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if !link.writable_interest {
                        link.writable_interest = true;
                        let _ = registry.reregister(
                            &mut link.stream,
                            token,
                            Interest::READABLE | Interest::WRITABLE,
                        );
                    }
                    return;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    self.drop_link(registry, token, &format!("write failed: {e}"), now);
                    return;
                }
            }
        }
        link.out.clear();
        link.out_pos = 0;
        if link.writable_interest {
            link.writable_interest = false;
            let _ = registry.reregister(&mut link.stream, token, Interest::READABLE);
        }
    }

    fn drop_link(&mut self, registry: &Registry, token: Token, reason: &str, now: Instant) {
        let Some(mut link) = self.links.remove(&token) else {
            return;
        };
        let _ = registry.deregister(&mut link.stream);
        self.read_again.remove(&token);
        if let Some(ip) = link.admitted {
            self.gate.closed(ip, link.authenticated);
        }
        let held_back = link.log_throttle.held_back();
        if held_back > 0 {
            let who = link.peer.clone().unwrap_or_else(|| link.addr.to_string());
            self.logs.push((
                "INFO",
                format!("relay: {held_back} more log lines about {who} were held back by the log rate limit before the connection closed"),
            ));
        }
        let was_link = self.registry_links.closed(token.0 as u64);
        if link.forwarding {
            if let Some(peer) = &link.peer {
                self.inbox.push(ToHub::LinkDown {
                    peer: peer.clone(),
                    reason: reason.to_owned(),
                });
            }
        }
        let Some(peer) = link.peer.clone() else {
            // An accepted connection that never finished its handshake: a denial (wrong key,
            // unknown peer, v0 refused), a malformed handshake or a missed deadline. The
            // session's reason is the only record of why a peer cannot link.
            if reason != "hub shutting down" {
                throttled(
                    &mut self.logs,
                    &mut self.stranger_log,
                    "WARN",
                    format!(
                        "relay: connection from {} closed before a link: {reason}",
                        link.addr
                    ),
                    now,
                );
                if let Some(line) = self.gate.handshake_failed(link.addr.ip(), now) {
                    throttled(&mut self.logs, &mut self.stranger_log, "WARN", line, now);
                }
            }
            return;
        };
        let dialled_by_us = self
            .peers_cfg
            .iter()
            .any(|p| p.id == peer && p.address.is_some());
        let book = self.books.entry(peer.clone()).or_default();
        if was_link {
            let dropped = dropped_summary(link.session.stats());
            self.logs.push((
                "INFO",
                format!("relay: link with {peer} down: {reason}{dropped}"),
            ));
            book.status.state = "down".into();
            book.status.direction = None;
            book.status.reconnects += u64::from(dialled_by_us);
            book.status.last_error = Some(reason.to_owned());
            self.status_dirty = true;
        }
        let was_our_dial = book.dialling == Some(token);
        let linked = self.registry_links.link_of(&peer).is_some();
        if dialled_by_us && (was_link || was_our_dial) && !linked {
            if was_our_dial && !was_link {
                book.status.last_error = Some(reason.to_owned());
                self.logs
                    .push(("WARN", format!("relay: dialling {peer} failed: {reason}")));
            }
            self.schedule_redial(&peer, now);
        }
    }

    /// Sends the envelope of acceptance `seq` (its canonical text) to `peer` as a
    /// `bus_forward`, hop 1.
    pub fn forward(
        &mut self,
        registry: &Registry,
        peer: &str,
        seq: u64,
        envelope: &str,
        now: Instant,
    ) -> Forwarded {
        let Some(token) = self.forwarding_link(peer) else {
            return Forwarded::NoLink;
        };
        let link = self.links.get_mut(&token).expect("forwarding_link checked");
        let payload = Payload::BusForward(BusForward {
            envelope: envelope.to_owned(),
            hop: 1,
        })
        .to_value();
        let msg = link.session.message(MsgType::BusForward, payload, now);
        let id = msg.id.clone();
        match link.session.send(msg) {
            Ok(()) => {
                // A resend after an ack deadline replaces the earlier send's entry, so a peer
                // that never acks cannot grow the map (its late ack is then ignored; the
                // resend's ack settles the envelope).
                link.forwards.retain(|_, s| *s != seq);
                link.forwards.insert(id, seq);
                self.pump(registry, token, now);
                Forwarded::Sent
            }
            Err(e @ (SendError::TooLarge { .. } | SendError::Frame(_))) => {
                Forwarded::Refused(format!("the relay link cannot carry it: {e}"))
            }
            // Closed or not established: the session's Closed event drops the link, and the
            // hub hears LinkDown.
            Err(_) => Forwarded::NoLink,
        }
    }

    /// Acks the peer's `bus_forward` `ack_id`: queued here (`error` None) or refused for good.
    /// Without a forwarding link nothing is sent: the peer sends the envelope again.
    pub fn ack_forward(
        &mut self,
        registry: &Registry,
        peer: &str,
        ack_id: String,
        error: Option<String>,
        now: Instant,
    ) {
        let Some(token) = self.forwarding_link(peer) else {
            return;
        };
        let link = self.links.get_mut(&token).expect("forwarding_link checked");
        let payload = Payload::Ack(Ack {
            ack_id,
            resync: None,
            error,
        })
        .to_value();
        let msg = link.session.message(MsgType::Ack, payload, now);
        if link.session.send(msg).is_ok() {
            self.pump(registry, token, now);
        }
    }

    /// The registered link with `peer`, if it agreed `bus-forward`.
    fn forwarding_link(&self, peer: &str) -> Option<Token> {
        let token = Token(self.registry_links.link_of(peer)? as usize);
        self.links
            .get(&token)
            .is_some_and(|l| l.forwarding && !l.closed)
            .then_some(token)
    }

    /// Timers: sessions' deadlines (heartbeats, liveness, handshakes), redials, status file.
    pub fn handle_timeout(&mut self, registry: &Registry, now: Instant) {
        let due: Vec<Token> = self
            .links
            .iter()
            .filter(|(_, l)| l.session.poll_timeout().is_some_and(|t| t <= now))
            .map(|(t, _)| *t)
            .collect();
        for token in due {
            if let Some(link) = self.links.get_mut(&token) {
                link.session.handle_timeout(now);
            }
            self.pump(registry, token, now);
        }
        let dials: Vec<PeerConfig> = self
            .peers_cfg
            .iter()
            .filter(|p| {
                self.books
                    .get(&p.id)
                    .is_some_and(|b| b.next_dial.is_some_and(|t| t <= now))
                    && self.registry_links.link_of(&p.id).is_none()
            })
            .cloned()
            .collect();
        for p in dials {
            self.dial(registry, &p, now);
        }
        if self.accept_paused_until.is_some_and(|t| t <= now) {
            self.accept_paused_until = None;
            self.accept(registry, now);
        }
        self.log_refusals(now, false);
        if self.status_dirty && self.next_status_write.is_none_or_due(now) {
            self.write_status_file();
            self.next_status_write = Some(now + STATUS_INTERVAL);
        }
    }

    pub fn poll_timeout(&self) -> Option<Instant> {
        let sessions = self.links.values().filter_map(|l| l.session.poll_timeout());
        let dials = self
            .books
            .iter()
            .filter(|(peer, _)| self.registry_links.link_of(peer).is_none())
            .filter_map(|(_, b)| b.next_dial);
        let status = if self.status_dirty {
            self.next_status_write
        } else {
            None
        };
        sessions
            .chain(dials)
            .chain(status)
            .chain(self.accept_paused_until)
            .chain(self.gate.poll_timeout())
            .min()
    }

    pub fn write_status_file(&mut self) {
        let status = RelayStatus {
            v: super::relay_status::STATUS_FORMAT_VERSION,
            updated: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            peer_id: self.cfg.peer_id.clone(),
            listen: self.local_addr().map(|a| a.to_string()),
            peers: self.books.values().map(|b| b.status.clone()).collect(),
        };
        for e in self.status_writer.take_errors() {
            self.logs.push(("WARN", format!("relay: {e}")));
        }
        self.status_writer.submit(status);
        self.status_dirty = false;
    }

    /// Closes every link (shutdown).
    pub fn close_all(&mut self, registry: &Registry, now: Instant) {
        let tokens: Vec<Token> = self.links.keys().copied().collect();
        for t in tokens {
            self.drop_link(registry, t, "hub shutting down", now);
        }
        for b in self.books.values_mut() {
            b.next_dial = None;
        }
        self.log_refusals(now, true);
        let held_back = self.stranger_log.take_held_back();
        if held_back > 0 {
            self.logs.push((
                "INFO",
                format!("relay: {held_back} more log lines about connections that never became links were held back by the log rate limit"),
            ));
        }
        self.write_status_file();
    }
}

/// The address a dial to `peer` leaves from: the relay's listen IP, so the peer sees the
/// address it knows this hub by (the one it would dial back, and the one its failed-handshake
/// count is kept for) rather than whatever source the kernel's routing picks. None — the
/// kernel chooses, as for any outgoing connection — when there is no listener, when it listens
/// on every address (`0.0.0.0`, `::`: no one address is ours), when the families differ, and
/// when the listen IP is loopback but the peer is not (a loopback source cannot reach another
/// machine).
fn dial_source(listen: Option<SocketAddr>, peer: SocketAddr) -> Option<IpAddr> {
    let ip = listen?.ip();
    let usable = !ip.is_unspecified()
        && ip.is_ipv4() == peer.is_ipv4()
        && (peer.ip().is_loopback() || !ip.is_loopback());
    usable.then_some(ip)
}

/// The socket type for `connect_from`: non-blocking and close-on-exec from the start where the
/// platform lets `socket` say so (no window in which a forked child could inherit it).
#[cfg(any(target_os = "linux", target_os = "android"))]
const SOCKET_TYPE: libc::c_int = libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC;
#[cfg(not(any(target_os = "linux", target_os = "android")))]
const SOCKET_TYPE: libc::c_int = libc::SOCK_STREAM;

/// Starts a TCP connection to `peer` from `source` (port 0: the kernel picks one) without
/// blocking the loop. `mio::net::TcpStream::connect` cannot bind first and std's `connect`
/// blocks, so: `socket`, `bind`, then a non-blocking `connect`, which returns at once
/// (`EINPROGRESS`); the loop learns the outcome when the socket turns writable, exactly as for
/// a mio connect (`handle_event`: `take_error`, `peer_addr`). An error here is immediate (no
/// such local address, no route).
fn connect_from(source: IpAddr, peer: SocketAddr) -> io::Result<TcpStream> {
    let domain = if peer.is_ipv4() {
        libc::AF_INET
    } else {
        libc::AF_INET6
    };
    // SAFETY: `socket` takes no pointers; its result is checked before any use.
    let raw = unsafe { libc::socket(domain, SOCKET_TYPE, 0) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `raw` is a socket just created here that nothing else owns; from now on the
    // OwnedFd (then the stream) owns it and closes it on every path, errors included.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    {
        // SAFETY: `fcntl` on a descriptor we own, with an integer argument.
        if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFD, libc::FD_CLOEXEC) } != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    let stream = std::net::TcpStream::from(fd);
    // Already so on Linux (SOCK_NONBLOCK); elsewhere this is what makes `connect` return at once.
    stream.set_nonblocking(true)?;
    let (local, local_len) = sockaddr(SocketAddr::new(source, 0));
    // SAFETY: `local` is a sockaddr_storage holding a sockaddr of the socket's family, valid
    // for `local_len` bytes; `bind` only reads it, during the call.
    let bound = unsafe {
        libc::bind(
            stream.as_raw_fd(),
            (&local as *const libc::sockaddr_storage).cast(),
            local_len,
        )
    };
    if bound != 0 {
        return Err(io::Error::last_os_error());
    }
    let (remote, remote_len) = sockaddr(peer);
    // SAFETY: as for `bind`: a valid sockaddr of `remote_len` bytes, only read by `connect`.
    let started = unsafe {
        libc::connect(
            stream.as_raw_fd(),
            (&remote as *const libc::sockaddr_storage).cast(),
            remote_len,
        )
    };
    if started != 0 {
        let e = io::Error::last_os_error();
        // EINPROGRESS: the usual answer of a non-blocking connect. EINTR: a signal arrived, and
        // the connection goes on in the background (POSIX); both end in writability.
        if e.raw_os_error() != Some(libc::EINPROGRESS) && e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
    Ok(TcpStream::from_std(stream))
}

/// `addr` as a C socket address for `bind`/`connect`, with its length.
fn sockaddr(addr: SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: sockaddr_storage is plain old data; all-zero bytes are a valid (unspecified)
    // address, and every field not set below stays zero as the C API expects.
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match addr {
        SocketAddr::V4(a) => {
            // SAFETY: sockaddr_storage is at least as large as sockaddr_in and aligned for
            // every socket address type (that is its purpose); the borrow ends in this arm.
            let sin = unsafe {
                &mut *(&mut storage as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in>()
            };
            sin.sin_family = libc::AF_INET as libc::sa_family_t;
            sin.sin_port = a.port().to_be();
            // The octets are already in network order; keep their bytes as they are.
            sin.sin_addr.s_addr = u32::from_ne_bytes(a.ip().octets());
            std::mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(a) => {
            // SAFETY: as above, for sockaddr_in6.
            let sin6 = unsafe {
                &mut *(&mut storage as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in6>()
            };
            sin6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            sin6.sin6_port = a.port().to_be();
            sin6.sin6_flowinfo = a.flowinfo();
            sin6.sin6_addr.s6_addr = a.ip().octets();
            sin6.sin6_scope_id = a.scope_id();
            std::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (storage, len as libc::socklen_t)
}

fn wall_clock(now: Instant) -> WallClock {
    WallClock {
        at: now,
        unix_ms: chrono::Utc::now().timestamp_millis(),
    }
}

trait DueExt {
    fn is_none_or_due(&self, now: Instant) -> bool;
}

impl DueExt for Option<Instant> {
    fn is_none_or_due(&self, now: Instant) -> bool {
        self.map_or(true, |t| t <= now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn a_dial_leaves_from_the_listen_ip_when_that_can_work() {
        let peer = addr("127.0.0.2:7000");
        let ip = |s: &str| Some(s.parse::<IpAddr>().unwrap());
        assert_eq!(
            dial_source(Some(addr("127.0.0.3:0")), peer),
            ip("127.0.0.3")
        );
        assert_eq!(
            dial_source(Some(addr("127.0.0.3:9000")), peer),
            ip("127.0.0.3")
        );
        assert_eq!(
            dial_source(Some(addr("10.1.2.3:9000")), addr("10.9.9.9:7000")),
            ip("10.1.2.3")
        );
        // A non-loopback listen IP may reach a loopback peer (it is a local address too).
        assert_eq!(
            dial_source(Some(addr("10.1.2.3:9000")), peer),
            ip("10.1.2.3")
        );
        assert_eq!(
            dial_source(Some(addr("[fd00::1]:9000")), addr("[fd00::2]:7000")),
            ip("fd00::1")
        );
        // The kernel chooses: no listener, every address, another family, loopback to remote.
        assert_eq!(dial_source(None, peer), None);
        assert_eq!(dial_source(Some(addr("0.0.0.0:9000")), peer), None);
        assert_eq!(
            dial_source(Some(addr("[::]:9000")), addr("[::1]:7000")),
            None
        );
        assert_eq!(dial_source(Some(addr("[::1]:9000")), peer), None);
        assert_eq!(
            dial_source(Some(addr("127.0.0.3:9000")), addr("[::1]:7000")),
            None
        );
        assert_eq!(
            dial_source(Some(addr("127.0.0.3:9000")), addr("10.9.9.9:7000")),
            None
        );
    }

    /// Waits (bounded) until the non-blocking connect has an outcome, as the loop would on
    /// writability.
    fn outcome(s: &TcpStream) -> io::Result<SocketAddr> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(e) = s.take_error()? {
                return Err(e);
            }
            match s.peer_addr() {
                Ok(a) => return Ok(a),
                Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
                Err(e) => return Err(e),
            }
        }
    }

    #[test]
    fn connect_from_binds_the_source_and_never_blocks() {
        let listener = std::net::TcpListener::bind("127.0.0.2:0").unwrap();
        let to = listener.local_addr().unwrap();
        let t0 = Instant::now();
        let s = connect_from("127.0.0.3".parse().unwrap(), to).unwrap();
        let local = s.local_addr().unwrap();
        assert_eq!(local.ip().to_string(), "127.0.0.3");
        assert_ne!(local.port(), 0, "the kernel picked a port");
        assert_eq!(outcome(&s).unwrap(), to);
        let (_accepted, from) = listener.accept().unwrap();
        assert_eq!(from, local, "the acceptor sees the bound source");
        assert!(t0.elapsed() < Duration::from_secs(5));

        // A refused connection: reported later (writability), or at once; never a hang.
        let closed = {
            let l = std::net::TcpListener::bind("127.0.0.2:0").unwrap();
            l.local_addr().unwrap()
        };
        match connect_from("127.0.0.3".parse().unwrap(), closed) {
            Ok(s) => assert!(outcome(&s).is_err()),
            Err(e) => assert_eq!(e.kind(), io::ErrorKind::ConnectionRefused),
        }
        // A source address that is not this machine's: refused by bind, at once.
        let e = connect_from("192.0.2.1".parse().unwrap(), to).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EADDRNOTAVAIL), "{e}");
    }
}
