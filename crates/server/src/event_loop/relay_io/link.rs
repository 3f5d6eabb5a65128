//! A relay link's socket IO (docs/relay-protocol.md "Limits"): the `Link` book of one
//! connection, reading with a per-iteration budget, flushing the output queue, and dropping a
//! link with its log lines. Refuses: protocol decisions (`relay::session`), which connection
//! is a peer's link (`relay::links`), and what a session's events mean (`pump`).

use super::super::relay_gate::{dropped_summary, throttled, PEER_LOG_BURST, PEER_LOG_REFILL};
use super::super::write_buf::{write_until_blocked, Drain};
use super::{RelayIo, ToHub, RELAY_READ_BUDGET_BYTES};
use agent_hub_proto::relay::links::{Change, Direction};
use agent_hub_proto::relay::session::Session;
use agent_hub_proto::relay::throttle::Throttle;
use mio::net::TcpStream;
use mio::{Interest, Registry, Token};
use std::collections::HashMap;
use std::io::{self, Read};
use std::net::{IpAddr, SocketAddr};
use std::time::Instant;

pub(super) struct Link {
    pub(super) stream: TcpStream,
    pub(super) session: Session,
    pub(super) direction: Direction,
    /// The peer the link is for: known at dial time, learned from the handshake on accept.
    pub(super) peer: Option<String>,
    /// The other end's address (for log lines about connections that never became a link).
    pub(super) addr: SocketAddr,
    /// Still connecting (dialled, not yet writable).
    pub(super) connecting: bool,
    pub(super) out: Vec<u8>,
    pub(super) out_pos: usize,
    pub(super) writable_interest: bool,
    pub(super) closed: bool,
    /// The registered link agreed `bus-forward`: the hub forwards mail over it.
    pub(super) forwarding: bool,
    /// Our `bus_forward` messages on this link not yet acked: relay message id → the
    /// envelope's acceptance seq in the hub.
    pub(super) forwards: HashMap<String, u64>,
    /// Our final `task_handoff`s on this link not yet acked: relay message id → the peer's
    /// task id (docs/delegation.md "Across hubs"; only v1 peers ack them).
    pub(super) handoffs: HashMap<String, String>,
    /// Accepted: the address the gate counts it against; None for our dials.
    pub(super) admitted: Option<IpAddr>,
    /// Accepted and past its handshake (the gate no longer counts it unauthenticated).
    pub(super) authenticated: bool,
    /// Log lines this connection's peer has triggered.
    pub(super) log_throttle: Throttle,
}

impl Link {
    pub(super) fn new(
        stream: TcpStream,
        session: Session,
        direction: Direction,
        addr: SocketAddr,
    ) -> Link {
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
            handoffs: HashMap::new(),
            admitted: None,
            authenticated: false,
            log_throttle: Throttle::new(PEER_LOG_BURST, PEER_LOG_REFILL),
        }
    }
}

impl RelayIo {
    /// Reads until `WouldBlock` or `RELAY_READ_BUDGET_BYTES`; a connection whose budget ran
    /// out is read again next iteration (`read_pending`), after every other socket had its
    /// turn, so one fast peer cannot starve the others or the local clients.
    pub(super) fn read(&mut self, registry: &Registry, token: Token, now: Instant) {
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

    pub(super) fn flush(&mut self, registry: &Registry, token: Token, now: Instant) {
        let Some(link) = self.links.get_mut(&token) else {
            return;
        };
        if link.connecting {
            return;
        }
        let book = link.peer.as_ref().and_then(|p| self.books.get_mut(p));
        let mut book = book;
        let counted = |_, n: usize| {
            if let Some(b) = book.as_mut() {
                b.status.bytes_out += n as u64;
            }
        };
        match write_until_blocked(&mut link.stream, &link.out, &mut link.out_pos, counted) {
            Drain::Drained => {}
            Drain::Blocked => {
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
            Drain::Failed(e) => {
                self.drop_link(registry, token, &format!("write failed: {e}"), now);
                return;
            }
        }
        link.out.clear();
        link.out_pos = 0;
        if link.writable_interest {
            link.writable_interest = false;
            let _ = registry.reregister(&mut link.stream, token, Interest::READABLE);
        }
    }

    pub(super) fn drop_link(
        &mut self,
        registry: &Registry,
        token: Token,
        reason: &str,
        now: Instant,
    ) {
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
        let was_standby = self.registry_links.is_standby(token.0 as u64);
        let (was_link, promoted) = self.registry_links.closed(token.0 as u64, now);
        if was_standby && reason != "hub shutting down" {
            let peer = link.peer.clone().unwrap_or_default();
            throttled(
                &mut self.logs,
                &mut self.second_conn_log,
                "INFO",
                format!(
                    "relay: second connection from {peer} closed ({reason}); the link stays up"
                ),
                now,
            );
        }
        if link.forwarding {
            if let Some(peer) = &link.peer {
                self.inbox.push(ToHub::LinkDown {
                    peer: peer.clone(),
                    reason: reason.to_owned(),
                });
            }
        }
        if let Some(Change::Promote { peer, conn, .. }) = promoted {
            // The link's second connection takes over at once (§2.6): the peer stays linked.
            let dropped = dropped_summary(link.session.stats());
            let next = Token(conn as usize);
            let how = self
                .links
                .get(&next)
                .map_or("", |l| direction_name(l.direction));
            self.logs.push((
                "INFO",
                format!("relay: link with {peer} moved to its second connection ({how}): the first closed: {reason}{dropped}"),
            ));
            self.make_link(&peer, next, now);
            return;
        }
        if was_link {
            if let Some(peer) = &link.peer {
                self.inbox.push(ToHub::PeerLink {
                    peer: peer.clone(),
                    up: false,
                    terms: agent_hub_proto::tasks::LinkTerms::default(),
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
                // Only a handshake that presented a proof and was denied counts toward the
                // address's lockout; a bare connect-and-close, a malformed handshake or a
                // missed deadline does not, or a stranger sharing (or spoofing) a peer's
                // address could lock that peer out (docs/relay-protocol.md §2.4, issue 29).
                // Such connections are still bounded by the caps on strangers.
                if super::super::relay_gate::is_failed_proof(reason) {
                    if let Some(line) = self.gate.handshake_failed(link.addr.ip(), now) {
                        throttled(&mut self.logs, &mut self.stranger_log, "WARN", line, now);
                    }
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
}

pub(super) fn direction_name(d: Direction) -> &'static str {
    match d {
        Direction::Dialled => "dialled",
        Direction::Accepted => "accepted",
    }
}
