//! Accepting connections (part of the IO shell, `crates/server/src/event_loop/mod.rs`): the
//! accept loop, the room a newcomer gets by closing the oldest connection still without an
//! identity (SPEC §4.6), the refusal at the connection limit or during shutdown, the read of
//! the hello right behind the accept, and the one-descriptor reserve that keeps a full
//! descriptor table from spinning the loop. Decides no protocol question: a refused connection
//! gets a best-effort error line and the core hears of every admitted one.
//!
//! `Accepting` owns the listener's state (the listener, its epoll mode and batch bound, the
//! reserve descriptor, the pause, the refusal tallies); the `Server` methods here admit a
//! connection into the loop's other parts.

use super::conn::Conn;
use super::listen_level::{self, AcceptBatch};
use super::relay_gate::is_fd_exhaustion;
use super::{nodelay, Server, LISTENER};
use agent_hub_proto::kernel::now::Now;
use mio::net::TcpListener;
use mio::{Interest, Poll, Registry, Token};
use std::fs::File;
use std::io::{self, Write};
use std::net::Shutdown;
use std::time::{Duration, Instant};

/// How long accepting pauses when even the reserve descriptor cannot be had.
const ACCEPT_PAUSE: Duration = Duration::from_millis(100);
/// Minimum gap between two service-log lines about refused connections.
const REFUSAL_LOG_INTERVAL: Duration = Duration::from_secs(5);

/// Tallies of refused connections, logged at most every `REFUSAL_LOG_INTERVAL`.
#[derive(Default)]
struct Refusals {
    at_limit: u64,
    no_fds: u64,
    /// Connections without an authenticated hello closed to make room for a newer one.
    evicted: u64,
    last_logged: Option<Instant>,
}

/// The client listener and what accepting from it keeps.
pub(super) struct Accepting {
    /// None once the stop began (`close`).
    listener: Option<TcpListener>,
    /// Held open so that at EMFILE one descriptor can be freed to accept-and-close.
    reserve_fd: Option<File>,
    pub(super) paused_until: Option<Instant>,
    refusals: Refusals,
    /// Accepted sockets get TCP_NODELAY from the listener (`nodelay`), not one by one.
    nodelay_inherited: bool,
    /// The listener is watched level-triggered (`listen_level`): an accept pass may stop at
    /// `accept_batch`'s bound instead of at EAGAIN.
    level_listener: bool,
    accept_batch: AcceptBatch,
    /// Loop iterations so far (for `accept_batch`).
    pub(super) iterations: u64,
}

impl Accepting {
    /// Registers the listener with `poll` (token `LISTENER`), level-triggered where it can.
    pub(super) fn new(listener: TcpListener, poll: &Poll) -> io::Result<Accepting> {
        let mut listener = listener;
        let nodelay_inherited = nodelay::inherit_from_listener(&listener);
        poll.registry()
            .register(&mut listener, LISTENER, Interest::READABLE)?;
        let level_listener = {
            use std::os::fd::AsRawFd;
            listen_level::make_level_triggered(poll, listener.as_raw_fd(), LISTENER)
        };
        Ok(Accepting {
            listener: Some(listener),
            reserve_fd: File::open("/dev/null").ok(),
            paused_until: None,
            refusals: Refusals::default(),
            nodelay_inherited,
            level_listener,
            accept_batch: AcceptBatch::default(),
            iterations: 0,
        })
    }

    /// No new connections from now on (the stop began).
    pub(super) fn close(&mut self, registry: &Registry) {
        if let Some(mut l) = self.listener.take() {
            let _ = registry.deregister(&mut l);
        }
    }

    /// After an accept error the listener goes back to edge-triggered for good, so a failure
    /// that repeats (the accept pause, a kernel out of buffers) cannot wake every
    /// `epoll_wait` at once and spin the loop (`listen_level`).
    fn edge_triggered_from_now(&mut self, poll: &Poll) {
        if !std::mem::replace(&mut self.level_listener, false) {
            return;
        }
        if let Some(listener) = &self.listener {
            use std::os::fd::AsRawFd;
            listen_level::make_edge_triggered(poll, listener.as_raw_fd(), LISTENER);
        }
    }

    /// EMFILE/ENFILE: free the reserve descriptor, accept one connection and close it, take the
    /// reserve back. If even that fails, stop accepting for a moment instead of spinning.
    fn refuse_without_fds(&mut self, now: Now) {
        self.refusals.no_fds += 1;
        self.reserve_fd = None;
        let accepted_one = match &self.listener {
            Some(listener) => listener
                .accept()
                .map(|(s, _)| s.shutdown(Shutdown::Both))
                .is_ok(),
            None => false,
        };
        self.reserve_fd = File::open("/dev/null").ok();
        // Come back next iteration rather than loop here; if even the reserve did not help,
        // wait a moment so a full descriptor table cannot spin the CPU.
        let pause = if accepted_one && self.reserve_fd.is_some() {
            Duration::ZERO
        } else {
            ACCEPT_PAUSE
        };
        self.paused_until = Some(now.mono + pause);
    }

    /// The summed line about refused connections, when one is due (or `force`d).
    fn refusal_line(&mut self, now: Now, force: bool) -> Option<String> {
        let r = &mut self.refusals;
        if r.at_limit == 0 && r.no_fds == 0 && r.evicted == 0 {
            return None;
        }
        if !force
            && r.last_logged
                .is_some_and(|t| now.mono.duration_since(t) < REFUSAL_LOG_INTERVAL)
        {
            return None;
        }
        let line = format!(
            "refused connections: {} at the connection limit, {} for want of file descriptors; {} connections without a hello closed to make room",
            r.at_limit, r.no_fds, r.evicted
        );
        r.at_limit = 0;
        r.no_fds = 0;
        r.evicted = 0;
        r.last_logged = Some(now.mono);
        Some(line)
    }
}

impl Server {
    pub(super) fn accept(&mut self, now: Now) {
        if self.accepting.paused_until.is_some() {
            return;
        }
        // Level-triggered, a pass may stop at its bound: a connection still queued keeps the
        // listener ready for the next `epoll_wait` (`listen_level`). Edge-triggered it must
        // drain to EAGAIN.
        let bound = if self.accepting.level_listener {
            self.accepting.accept_batch.bound()
        } else {
            usize::MAX
        };
        let mut taken = 0;
        loop {
            let a = &mut self.accepting;
            if taken == bound {
                a.accept_batch.filled(a.iterations);
                break;
            }
            let Some(listener) = &a.listener else {
                return;
            };
            match listener.accept() {
                Ok((stream, _addr)) => {
                    taken += 1;
                    self.admit(stream, now);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    a.accept_batch.drained(taken);
                    break;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if is_fd_exhaustion(&e) => {
                    a.edge_triggered_from_now(&self.poll);
                    a.refuse_without_fds(now);
                    break;
                }
                Err(e) => {
                    a.edge_triggered_from_now(&self.poll);
                    self.records.log("ERROR", &format!("accept failed: {e}"));
                    break;
                }
            }
        }
        self.log_refusals(now, false);
    }

    /// The accept pause (`Accepting::refuse_without_fds`) is over: accept again.
    pub(super) fn accept_after_pause(&mut self, now: Now) {
        if self.accepting.paused_until.is_some_and(|t| now.mono >= t) {
            self.accepting.paused_until = None;
            self.accept(now);
        }
    }

    fn admit(&mut self, mut stream: mio::net::TcpStream, now: Now) {
        let refusal = if self.lifecycle.shutting_down {
            Some("hub is shutting down".to_owned())
        } else {
            self.make_room(now)
        };
        if let Some(msg) = refusal {
            // Refused at once: a best-effort error line, then close. Never parked, never read.
            let line = agent_hub_proto::wire::HubLine::Error { message: msg }.encode();
            let _ = stream.write(line.as_bytes());
            let _ = stream.shutdown(Shutdown::Both);
            self.accepting.refusals.at_limit += 1;
            return;
        }
        if !self.accepting.nodelay_inherited {
            let _ = stream.set_nodelay(true);
        }
        let id = self.conns.add(Box::new(Conn::new(stream)));
        self.hub.handle_connect(id, now);
        self.drain_outputs();
        // A client writes its hello right behind its connect, so it is usually here already:
        // read it now rather than after one more trip through epoll. Registering after the
        // read means the registration itself reports anything that arrives in between
        // (epoll checks readiness when a socket is added), so a short read is safe to stop at
        // (docs/performance.md, issue 13).
        self.read(id, true, now);
        let Some(conn) = self.conns.map.get_mut(&id) else {
            return; // the first read found the client gone, and the core has been told
        };
        if let Err(e) =
            self.poll
                .registry()
                .register(&mut conn.stream, Token(id as usize), Interest::READABLE)
        {
            self.records
                .log("ERROR", &format!("cannot register connection: {e}"));
            self.close(id, false, "the hub could not watch this connection", now);
        }
    }

    /// Room for one more connection (SPEC §4.6). At `limits.max_connections`, or with
    /// `limits.max_unauthenticated` connections still without an identity, the oldest of
    /// those is closed to make it: a stranger has had the longest to send its hello, and a
    /// newcomer (an agent's, most likely, whose hello is usually read right behind this
    /// accept) gets its turn, so connections that never authenticate cannot keep agents out.
    /// The error for the newcomer when there is no room: every connection is an authenticated
    /// one.
    fn make_room(&mut self, now: Now) -> Option<String> {
        let max = self.limits.max_connections;
        let max_unauth = self.limits.max_unauthenticated();
        let full = self.conns.map.len() >= max;
        if !full && self.hub.unauthenticated() < max_unauth {
            return None;
        }
        let Some(oldest) = self.hub.oldest_unauthenticated() else {
            return Some(format!(
                "hub is at its connection limit ({max}); try again later"
            ));
        };
        let msg = if full {
            format!("hub is at its connection limit ({max}); try again later")
        } else {
            format!(
                "hub is at its limit of {max_unauth} connections without an authenticated hello; try again later"
            )
        };
        if let Some(c) = self.conns.map.get_mut(&oldest) {
            // Best effort, and only on a connection with nothing else queued: one closing
            // after its own error line keeps that line.
            if !c.has_output() && !c.closing {
                let line = agent_hub_proto::wire::HubLine::Error { message: msg }.encode();
                let _ = c.stream.write(line.as_bytes());
            }
            let _ = c.stream.shutdown(Shutdown::Both);
        }
        self.accepting.refusals.evicted += 1;
        self.close(
            oldest,
            false,
            "closed without a hello to make room for a newer connection",
            now,
        );
        None
    }

    pub(super) fn log_refusals(&mut self, now: Now, force: bool) {
        if let Some(line) = self.accepting.refusal_line(now, force) {
            self.records.log("WARN", &line);
        }
    }
}
