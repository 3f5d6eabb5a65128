//! The relay's IO (SPEC §13): its listener, dialling with backoff, one socket per link, and
//! the peer table. Every protocol decision — challenge, handshake, negotiation, frames,
//! heartbeats, liveness — is in `relay::session`; this file only moves bytes and keeps books.
//!
//! Owns which connection is a peer's link (`relay::links` decides), redial timing, the
//! address a dial leaves from (`dial_source`, `connect_from`) and the status file; applies the
//! caps of docs/relay-protocol.md "Limits" that need a socket: admission at accept
//! (`relay_gate` keeps the books), a read budget per connection per loop iteration, and a rate
//! limit on every log line a peer or a stranger can trigger. Refuses: parsing relay messages.
//!
//! One job per file: `start` (key files, the listener, the session config, the helper
//! threads), `link` (a link's socket: read with a budget, flush, drop), `pump` (a session's
//! events carried out, and which connection is a peer's link), `dial` (dialling with backoff
//! from the listen address), `throttle` (admission at accept through `relay_gate`, the accept
//! pause when descriptors run out, the refusal summary), `prober` (the thread shape `cards`
//! and `headroom` share). This file holds the peer table and what the loop calls.

pub mod cards;
mod dial;
mod headroom;
mod link;
mod prober;
mod pump;
mod start;
mod throttle;

pub use start::{load_key, RelayStartError};

use super::relay_gate::Gate;
use agent_hub_host::config::{PeerConfig, RelayConfig};
use agent_hub_host::relay_status::{PeerStatus, RelayStatus, StatusWriter};
use agent_hub_proto::relay::heartbeat::{AgentEntry, Directory, DirectoryCaps};
use agent_hub_proto::relay::links::Links;
use agent_hub_proto::relay::message::{Ack, BusForward};
use agent_hub_proto::relay::session::{PeerAuth, SendError, SessionConfig, WallClock};
use agent_hub_proto::relay::throttle::Throttle;
use agent_hub_proto::relay::{MsgType, Payload};
use link::Link;
use mio::net::TcpListener;
use mio::{Registry, Token};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::Read;
use std::net::SocketAddr;
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

/// What the relay tells the hub core (SPEC §15), drained by the loop after each relay event.
#[derive(Debug, Clone, PartialEq)]
pub enum ToHub {
    /// The lasting link with a peer is up (any proto, any features) or gone; delegated work
    /// rides on it (docs/delegation.md "Across hubs"). `terms.agent_hub`: the peer speaks
    /// this project's v1, so it reads `delegate_task.agent` and acks our handoffs; false for
    /// every claudectl peer, v0 or its v1 (0.90+ acks no handoff either). `terms.approvals`:
    /// the link agreed `task-approvals`, so a delegated task's requests cross it.
    PeerLink {
        peer: String,
        up: bool,
        terms: agent_hub_proto::tasks::LinkTerms,
    },
    /// A task message from any authenticated connection of the peer (claudectl's one-shots
    /// carry `delegate_task` and `task_interrupt`; the `task-approvals` three come only on a
    /// link that agreed that feature, which the session checks).
    PeerTask {
        peer: String,
        msg_id: String,
        payload: Box<Payload>,
    },
    /// The lasting link's peer applied a heartbeat whose directory differs from the last one
    /// handed over: its whole directory (SPEC §14.1 "Remote names").
    PeerDirectory {
        peer: String,
        agents: BTreeMap<String, AgentEntry>,
    },
    /// A heartbeat of the lasting link with `peer`: its room (feature `headroom`, either
    /// dialect), its instant and the agents the peer offers, for placement (issue 38 design
    /// §4, `Hub::peer_room`).
    PeerRoom {
        peer: String,
        beat: agent_hub_proto::tasks::placement::Beat,
    },
    /// This machine was measured again (every `headroom::REFRESH`): the figures placement
    /// weighs this hub by (`Hub::local_room`).
    LocalRoom(agent_hub_proto::tasks::placement::Machine),
    /// The peer acked our final `task_handoff` of its task `task_id`.
    PeerTaskAcked { peer: String, task_id: String },
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
    /// The directory last handed to the hub (`ToHub::PeerDirectory`) over the current
    /// lasting link; None from a new link on, so its first beat is always handed over.
    directory_handed: Option<BTreeMap<String, AgentEntry>>,
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
    /// Lines about peers' second connections (one-shots), for all peers together: a peer
    /// with its key can open them as fast as it likes.
    second_conn_log: Throttle,
    /// Accepting stopped until then (descriptors ran out).
    accept_paused_until: Option<Instant>,
    /// Connections whose read budget ran out: read again next iteration.
    read_again: BTreeSet<Token>,
    /// Links with forwards or forward acks queued and not yet written (`flush_pending`).
    pending: BTreeSet<Token>,
    /// The most of a peer's directory a session keeps.
    directory_caps: DirectoryCaps,
    /// Writes the status file off the loop (`relay_status::StatusWriter`).
    status_writer: StatusWriter,
    /// Feature `agents`: the cards every link's heartbeats advertise, and the thread that
    /// computes them off the loop (None when the feature is not offered).
    agent_cards: Vec<agent_hub_proto::relay::message::AgentCard>,
    card_prober: Option<cards::CardProber>,
    /// Feature `headroom` (claudectl's, and our hubs' since issue 38): this machine's
    /// figures, measured off the loop, and the hub's own (tasks running,
    /// `tasks.max_concurrent`); what the links' beats carry and placement weighs.
    machine_prober: Option<headroom::MachineProber>,
    machine: headroom::Machine,
    task_room: (u32, Option<u32>),
    headroom: Option<agent_hub_proto::relay::worker::Headroom>,
    /// Service-log lines waiting for the loop to write them.
    pub logs: Vec<(&'static str, String)>,
    /// Events for the hub core, in order.
    pub inbox: Vec<ToHub>,
    random: std::fs::File,
}

impl RelayIo {
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.listener.as_ref().and_then(|l| l.local_addr().ok())
    }

    pub fn owns(token: Token) -> bool {
        token.0 >= RELAY_TOKEN_BASE
    }

    /// A session config whose wall clock is anchored now (a suspended machine's monotonic
    /// clock stops while the wall clock runs, so each new session takes a fresh anchor).
    pub(super) fn session_cfg(&self, now: Instant) -> SessionConfig {
        let mut cfg = self.session_cfg.clone();
        cfg.wall_clock = wall_clock(now);
        cfg
    }

    pub(super) fn entropy(&mut self) -> ([u8; 32], u64) {
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

    /// The hub's directory for outgoing heartbeats: its own roster names only (the hub's
    /// `local_directory`), never a peer's.
    pub fn set_directory(&mut self, agents: Vec<(String, AgentEntry)>) {
        let d = Directory {
            version: agent_hub_proto::VERSION.to_owned(),
            agents: agents.into_iter().collect(),
        };
        if d != self.directory {
            self.directory = d.clone();
            for link in self.links.values_mut() {
                link.session.set_directory(d.clone());
            }
        }
    }

    /// Has the prober compute the cards again now (the hub reloaded its manifests); they
    /// reach the links when its list arrives, as every list does.
    pub fn refresh_agent_cards(&self) {
        if let Some(p) = &self.card_prober {
            p.refresh();
        }
    }

    /// The installed agents every link advertises under feature `agents` (also fed by the
    /// prober thread; a caller with its own catalogue may set them directly).
    pub fn set_agent_cards(&mut self, cards: Vec<agent_hub_proto::relay::message::AgentCard>) {
        if cards != self.agent_cards {
            self.agent_cards = cards;
            for link in self.links.values_mut() {
                link.session.set_agent_cards(self.agent_cards.clone());
            }
        }
    }

    /// The hub's side of `headroom`: tasks running now and its ceiling (`tasks.max_concurrent`;
    /// None without `[tasks]`: then 0 of 0). Cheap when nothing changed.
    pub fn set_task_room(&mut self, running: usize, max: Option<usize>) {
        let clamp = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        let room = (clamp(running), Some(max.map_or(0, clamp)));
        if room != self.task_room {
            self.task_room = room;
            self.refresh_headroom();
        }
    }

    /// Recomputes the headroom from the latest figures and hands it to every link.
    fn refresh_headroom(&mut self) {
        if self.machine_prober.is_none() {
            return;
        }
        let h = self
            .machine
            .headroom(self.task_room.0, self.task_room.1, &self.cfg.tags);
        if self.headroom.as_ref() != Some(&h) {
            self.headroom = Some(h);
            for link in self.links.values_mut() {
                link.session.set_headroom(self.headroom.clone());
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

    /// Sends the envelope of acceptance `seq` (its canonical text) to `peer` as a
    /// `bus_forward`, hop 1.
    pub fn forward(
        &mut self,
        _registry: &Registry,
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
                // Written by `flush_pending`, once for every forward of this exchange.
                self.pending.insert(token);
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
        _registry: &Registry,
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
            self.pending.insert(token);
        }
    }

    /// Writes what `forward` and `ack_forward` queued since the last call: one pump (and so
    /// at most one write) per link for all the forwards and acks of one exchange with the
    /// hub, instead of one write per message (issue 13: a commit of N envelopes was N
    /// writes). The server calls it after handing over the core's outputs, before it reads
    /// the relay's inbox, so a link that closed meanwhile is reported in the same exchange.
    /// Nothing is acknowledged earlier than before: an ack is queued only after the commit
    /// that holds its envelope (SPEC §15), and only its write is deferred, within the same
    /// loop iteration.
    pub fn flush_pending(&mut self, registry: &Registry, now: Instant) {
        for token in std::mem::take(&mut self.pending) {
            self.pump(registry, token, now);
        }
    }

    /// Sends a task message to `peer` on its lasting link (never a one-shot standing by,
    /// docs/relay-protocol.md §2.6). False when there is no such link or it cannot take the
    /// message (closing); the hub then treats the link as down.
    pub fn send_task(
        &mut self,
        registry: &Registry,
        send: &agent_hub_proto::hub::PeerSend,
        now: Instant,
    ) -> bool {
        let Some(token) = self
            .registry_links
            .link_of(&send.peer)
            .map(|t| Token(t as usize))
            .filter(|t| self.links.get(t).is_some_and(|l| !l.closed))
        else {
            return false;
        };
        let link = self.links.get_mut(&token).expect("checked above");
        let msg_type = send.payload.msg_type();
        let msg = link
            .session
            .message(msg_type.clone(), send.payload.to_value(), now);
        let id = msg.id.clone();
        match link.session.send(msg) {
            Ok(()) => {
                if let Some(task_id) = &send.handoff {
                    link.handoffs.retain(|_, t| t != task_id);
                    link.handoffs.insert(id, task_id.clone());
                }
                self.pump(registry, token, now);
                true
            }
            Err(e @ (SendError::Closed | SendError::NotEstablished)) => {
                let _ = e;
                false
            }
            Err(e) => {
                // Never sendable on this link (a type the peer's release does not know, a
                // payload too large): said once per message, never its payload.
                self.logs.push((
                    "WARN",
                    format!(
                        "relay: {} to {} not sent: {e}",
                        msg_type.as_str(),
                        send.peer
                    ),
                ));
                true
            }
        }
    }

    /// The registered link with `peer`, if it agreed `bus-forward`.
    pub(super) fn forwarding_link(&self, peer: &str) -> Option<Token> {
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
        self.apply_link_changes(registry, now);
        if let Some(cards) = self.card_prober.as_ref().and_then(|p| p.latest()) {
            self.set_agent_cards(cards);
        }
        if let Some(m) = self.machine_prober.as_ref().and_then(|p| p.latest()) {
            self.machine = m;
            self.inbox.push(ToHub::LocalRoom(
                agent_hub_proto::tasks::placement::Machine {
                    mem_free_mb: m.mem_free_mb,
                    load_per_core: m.load_per_core,
                    disk_free_mb: m.disk_free_mb,
                },
            ));
            self.refresh_headroom();
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
            .chain(self.registry_links.poll_timeout())
            .min()
    }

    pub fn write_status_file(&mut self) {
        let status = RelayStatus {
            v: agent_hub_host::relay_status::STATUS_FORMAT_VERSION,
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
