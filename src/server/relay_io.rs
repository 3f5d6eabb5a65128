//! The relay's IO (SPEC §13): its listener, dialling with backoff, one socket per link, and
//! the peer table. Every protocol decision — challenge, handshake, negotiation, frames,
//! heartbeats, liveness — is in `relay::session`; this file only moves bytes and keeps books.
//!
//! Owns which connection is a peer's link (`relay::links` decides), redial timing and the
//! status file. Refuses: parsing relay messages.

use super::relay_status::{write_status, PeerStatus, RelayStatus};
use crate::config::{PeerConfig, RelayConfig};
use crate::relay::heartbeat::{AgentEntry, Directory};
use crate::relay::links::{Direction, Links, Verdict};
use crate::relay::session::{PeerAuth, Session, SessionConfig, SessionEvent, WallClock};
use crate::relay::Feature;
use mio::net::{TcpListener, TcpStream};
use mio::{Interest, Registry, Token};
use std::collections::{BTreeMap, HashMap};
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// Relay tokens live above this, apart from client connections.
pub const RELAY_TOKEN_BASE: usize = 1 << 40;
const RELAY_LISTENER: Token = Token(RELAY_TOKEN_BASE);
/// Bytes queued for one peer before the link is dropped as too slow to keep.
pub const MAX_PEER_BACKLOG_BYTES: usize = 16 * 1024 * 1024;
/// Failed handshakes from one address within `FAILURE_WINDOW` before it is refused for
/// `FAILURE_WINDOW` (what v0 acceptors do: relay-compat.md, "Authentication and handshake").
const MAX_FAILED_HANDSHAKES: u32 = 5;
const FAILURE_WINDOW: Duration = Duration::from_secs(60);
/// The status file is rewritten at most this often.
const STATUS_INTERVAL: Duration = Duration::from_secs(1);

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
    keys: HashMap<String, PeerAuth>,
    peers_cfg: Vec<PeerConfig>,
    listener: Option<TcpListener>,
    links: HashMap<Token, Link>,
    registry_links: Links,
    books: BTreeMap<String, PeerBook>,
    next_token: usize,
    directory: Directory,
    status_dirty: bool,
    next_status_write: Option<Instant>,
    /// Per source address: failed handshakes in the current window (count, window start),
    /// and until when it is refused.
    failures: HashMap<std::net::IpAddr, (u32, Instant, Option<Instant>)>,
    /// Service-log lines waiting for the loop to write them.
    pub logs: Vec<(&'static str, String)>,
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
        let random = std::fs::File::open("/dev/urandom")
            .map_err(|e| format!("cannot open /dev/urandom: {e}"))?;
        Ok(RelayIo {
            peers_cfg: cfg.peers.clone(),
            registry_links: Links::new(cfg.peer_id.clone()),
            cfg,
            session_cfg,
            keys,
            listener,
            links: HashMap::new(),
            books,
            next_token: RELAY_TOKEN_BASE + 1,
            directory: Directory::default(),
            status_dirty: true,
            next_status_write: Some(now),
            logs: Vec::new(),
            failures: HashMap::new(),
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

    fn accept(&mut self, registry: &Registry, now: Instant) {
        loop {
            let Some(listener) = &self.listener else {
                return;
            };
            match listener.accept() {
                Ok((mut stream, addr)) => {
                    if self.refused(addr.ip(), now) {
                        drop(stream);
                        continue;
                    }
                    let token = Token(self.next_token);
                    self.next_token += 1;
                    if registry
                        .register(&mut stream, token, Interest::READABLE)
                        .is_err()
                    {
                        continue;
                    }
                    let (nonce, seed) = self.entropy();
                    let session = Session::acceptor(
                        self.session_cfg(now),
                        self.keys.clone(),
                        nonce,
                        seed,
                        now,
                    );
                    self.logs
                        .push(("INFO", format!("relay: connection from {addr}")));
                    self.links.insert(
                        token,
                        Link {
                            stream,
                            session,
                            direction: Direction::Accepted,
                            peer: None,
                            addr,
                            connecting: false,
                            out: Vec::new(),
                            out_pos: 0,
                            writable_interest: false,
                            closed: false,
                        },
                    );
                    self.pump(registry, token, now);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    self.logs
                        .push(("WARN", format!("relay: accept failed: {e}")));
                    return;
                }
            }
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
        let mut stream = match TcpStream::connect(addr) {
            Ok(s) => s,
            Err(e) => {
                self.logs.push((
                    "WARN",
                    format!("relay: dialling {} at {addr} failed: {e}", peer.id),
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
        let session = Session::dialer(self.session_cfg(now), &peer.id, auth, nonce, seed, now);
        self.books.get_mut(&peer.id).expect("book").dialling = Some(token);
        self.links.insert(
            token,
            Link {
                stream,
                session,
                direction: Direction::Dialled,
                peer: Some(peer.id.clone()),
                addr,
                connecting: true,
                out: Vec::new(),
                out_pos: 0,
                writable_interest: true,
                closed: false,
            },
        );
    }

    fn schedule_redial(&mut self, peer: &str, now: Instant) {
        let Some(book) = self.books.get_mut(peer) else {
            return;
        };
        let waits = &self.cfg.reconnect_backoff_ms;
        let wait = waits[book.backoff_step.min(waits.len() - 1)];
        book.backoff_step += 1;
        book.next_dial = Some(now + Duration::from_millis(wait));
        book.dialling = None;
        book.status.state = "backoff".into();
        self.status_dirty = true;
    }

    fn read(&mut self, registry: &Registry, token: Token, now: Instant) {
        let mut buf = [0u8; 64 * 1024];
        loop {
            let Some(link) = self.links.get_mut(&token) else {
                return;
            };
            match link.stream.read(&mut buf) {
                Ok(0) => {
                    link.session.handle_eof();
                    self.pump(registry, token, now);
                    self.drop_link(registry, token, "peer closed the connection", now);
                    return;
                }
                Ok(n) => {
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
                SessionEvent::Message(msg) => {
                    // Forwarding and delegation are later extensions; until then a message is
                    // logged by type and dropped (never its payload: it may carry a prompt).
                    let peer = link.peer.clone().unwrap_or_default();
                    self.logs.push((
                        "INFO",
                        format!(
                            "relay: {peer} sent {}; not acted on by this hub",
                            msg.msg_type.as_str()
                        ),
                    ));
                }
                SessionEvent::UnknownType { msg_type } => {
                    let peer = link.peer.clone().unwrap_or_default();
                    self.logs.push((
                        "WARN",
                        format!("relay: {peer} sent unknown message type {msg_type:?}; dropped"),
                    ));
                }
                SessionEvent::Log(line) => self.logs.push(("INFO", format!("relay: {line}"))),
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

    /// Whether connections from `ip` are refused now (too many failed handshakes).
    fn refused(&mut self, ip: std::net::IpAddr, now: Instant) -> bool {
        match self.failures.get(&ip) {
            Some(&(_, _, Some(until))) if until > now => true,
            Some(&(_, _, Some(_))) => {
                self.failures.remove(&ip);
                false
            }
            _ => false,
        }
    }

    /// Counts a failed handshake from `ip`; the fifth within the window refuses it for a while.
    fn note_failure(&mut self, ip: std::net::IpAddr, now: Instant) {
        let entry = self.failures.entry(ip).or_insert((0, now, None));
        if now.duration_since(entry.1) > FAILURE_WINDOW {
            *entry = (0, now, None);
        }
        entry.0 += 1;
        if entry.0 >= MAX_FAILED_HANDSHAKES && entry.2.is_none() {
            entry.2 = Some(now + FAILURE_WINDOW);
            self.logs.push((
                "WARN",
                format!(
                    "relay: refusing connections from {ip} for {} s after {MAX_FAILED_HANDSHAKES} failed handshakes",
                    FAILURE_WINDOW.as_secs()
                ),
            ));
        }
        // Bounded: addresses whose window and refusal are over are forgotten.
        if self.failures.len() > 4096 {
            self.failures.retain(|_, (_, start, until)| {
                until.is_some_and(|u| u > now) || now.duration_since(*start) <= FAILURE_WINDOW
            });
        }
    }

    fn drop_link(&mut self, registry: &Registry, token: Token, reason: &str, now: Instant) {
        let Some(mut link) = self.links.remove(&token) else {
            return;
        };
        let _ = registry.deregister(&mut link.stream);
        let was_link = self.registry_links.closed(token.0 as u64);
        let Some(peer) = link.peer.clone() else {
            // An accepted connection that never finished its handshake: a denial (wrong key,
            // unknown peer, v0 refused), a malformed handshake or a missed deadline. The
            // session's reason is the only record of why a peer cannot link.
            if reason != "hub shutting down" {
                self.logs.push((
                    "WARN",
                    format!(
                        "relay: connection from {} closed before a link: {reason}",
                        link.addr
                    ),
                ));
                self.note_failure(link.addr.ip(), now);
            }
            return;
        };
        let dialled_by_us = self
            .peers_cfg
            .iter()
            .any(|p| p.id == peer && p.address.is_some());
        let book = self.books.entry(peer.clone()).or_default();
        if was_link {
            self.logs
                .push(("INFO", format!("relay: link with {peer} down: {reason}")));
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
        sessions.chain(dials).chain(status).min()
    }

    pub fn write_status_file(&mut self) {
        let status = RelayStatus {
            v: super::relay_status::STATUS_FORMAT_VERSION,
            updated: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            peer_id: self.cfg.peer_id.clone(),
            listen: self.local_addr().map(|a| a.to_string()),
            peers: self.books.values().map(|b| b.status.clone()).collect(),
        };
        if let Err(e) = write_status(&self.cfg.status_path, &status) {
            self.logs.push((
                "WARN",
                format!(
                    "relay: cannot write {}: {e}",
                    self.cfg.status_path.display()
                ),
            ));
        }
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
        self.write_status_file();
    }
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
