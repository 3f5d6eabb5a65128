//! The relay's throttles at the listener (docs/relay-protocol.md "Limits"): admission of
//! accepted connections through `relay_gate` (per-address and global caps, failed-handshake
//! bans), the accept pause when descriptors run out, rate-limited log lines about strangers,
//! and the gate's summed refusal line. Refuses: what a connection says (`relay::session`).

use super::super::relay_gate::{is_fd_exhaustion, throttled, SharedKeys};
use super::link::Link;
use super::{RelayIo, ACCEPT_PAUSE};
use agent_hub_proto::relay::links::Direction;
use agent_hub_proto::relay::session::Session;
use mio::{Interest, Registry, Token};
use std::io::{self};
use std::sync::Arc;
use std::time::Instant;

impl RelayIo {
    /// Accepts until the backlog is empty. A connection past a cap is closed at once, unread
    /// and unlogged (the gate sums it into one line per interval), so a flood neither spins the
    /// loop nor fills the log; past the descriptor limit accepting pauses briefly instead.
    pub(super) fn accept(&mut self, registry: &Registry, now: Instant) {
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
    pub(super) fn log_refusals(&mut self, now: Instant, force: bool) {
        if let Some(line) = self.gate.poll_log(now, force) {
            self.logs.push(("WARN", line));
        }
    }
}
