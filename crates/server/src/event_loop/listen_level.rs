//! The listener watched level-triggered, so accepting can stop before the `accept4` that
//! only says EAGAIN (docs/performance.md, "Design decisions": the level-triggered listener).
//!
//! mio registers every source edge-triggered, which obliges the loop to accept until
//! EAGAIN: a connection left in the queue would raise no new edge. At one client per op that
//! last call is one syscall in thirteen, always failing. Level-triggered, a connection still
//! queued keeps the listener ready, so the loop may stop after as many accepts as it expects
//! (`AcceptBatch`) and the next `epoll_wait` reports the rest. Owns the listener's epoll mode
//! and the batch bound; refuses everything else about accepting (`accept.rs`).
//!
//! Any accept error (EMFILE, ENOBUFS, …) puts the listener back to edge-triggered for good:
//! a level-triggered listener whose accept keeps failing would wake every `epoll_wait` at
//! once and spin, where edge-triggered the loop's pause and drain rules already hold.

use mio::{Poll, Token};
use std::os::fd::{AsRawFd, RawFd};

/// Most connections one accept pass takes before it lets the other events of the iteration
/// have their turn; the rest wait one `epoll_wait`, which reports them at once.
pub const MAX_ACCEPT_BATCH: usize = 64;

/// Sets the listener's registration (already made by mio under `token`) to level-triggered.
/// True when it is; false (not Linux, or the call failed) leaves mio's edge-triggered
/// registration, and the loop accepts until EAGAIN as before.
pub fn make_level_triggered(poll: &Poll, listener: RawFd, token: Token) -> bool {
    set_mode(poll, listener, token, false)
}

/// Back to edge-triggered, as mio registered it.
pub fn make_edge_triggered(poll: &Poll, listener: RawFd, token: Token) {
    let _ = set_mode(poll, listener, token, true);
}

#[cfg(target_os = "linux")]
fn set_mode(poll: &Poll, listener: RawFd, token: Token, edge: bool) -> bool {
    // The flags and data mio itself uses for a readable source (its epoll selector stores the
    // token in `u64`), with or without EPOLLET.
    let mut events = (libc::EPOLLIN | libc::EPOLLRDHUP) as u32;
    if edge {
        events |= libc::EPOLLET as u32;
    }
    let mut ev = libc::epoll_event {
        events,
        u64: token.0 as u64,
    };
    // SAFETY: epoll_ctl on the poll's own epoll descriptor and a descriptor the listener owns
    // and that is registered there, with a pointer to a local, initialised epoll_event.
    let rc = unsafe { libc::epoll_ctl(poll.as_raw_fd(), libc::EPOLL_CTL_MOD, listener, &mut ev) };
    rc == 0
}

#[cfg(not(target_os = "linux"))]
fn set_mode(_poll: &Poll, _listener: RawFd, _token: Token, _edge: bool) -> bool {
    false
}

/// How many connections the next accept pass takes before it stops without the EAGAIN call:
/// as many as the last pass found before EAGAIN; doubled (up to `MAX_ACCEPT_BATCH`) when
/// passes in two iterations in a row stopped at the bound, which means connections queue
/// faster than one pass takes them. A pass that stops at its bound after the loop slept (one
/// client connecting at a time) keeps the bound: growing it there would only bring the EAGAIN
/// call back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AcceptBatch {
    bound: usize,
    /// The loop iteration of the last pass that stopped at its bound.
    last_filled: Option<u64>,
}

impl Default for AcceptBatch {
    fn default() -> Self {
        AcceptBatch {
            bound: 1,
            last_filled: None,
        }
    }
}

impl AcceptBatch {
    pub fn bound(&self) -> usize {
        self.bound
    }

    /// A pass accepted `taken` and then saw EAGAIN: the queue held that many.
    pub fn drained(&mut self, taken: usize) {
        self.bound = taken.clamp(1, MAX_ACCEPT_BATCH);
        self.last_filled = None;
    }

    /// The pass of loop iteration `iteration` stopped at its bound: more may be queued.
    pub fn filled(&mut self, iteration: u64) {
        if self.last_filled.is_some_and(|i| i + 1 == iteration) {
            self.bound = (self.bound * 2).min(MAX_ACCEPT_BATCH);
        }
        self.last_filled = Some(iteration);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::ErrorKind;

    #[test]
    fn batch_follows_what_the_queue_held() {
        let mut b = AcceptBatch::default();
        assert_eq!(b.bound(), 1);
        // One client at a time: every pass fills, with sleeps between: the bound stays.
        for i in [3, 7, 12, 20] {
            b.filled(i);
            assert_eq!(b.bound(), 1);
        }
        // A backlog: passes in consecutive iterations fill, the bound grows.
        b.filled(21);
        b.filled(22);
        assert_eq!(b.bound(), 4);
        b.drained(3);
        assert_eq!(b.bound(), 3);
        b.drained(0);
        assert_eq!(b.bound(), 1);
        for i in 100..120 {
            b.filled(i);
        }
        assert_eq!(b.bound(), MAX_ACCEPT_BATCH);
        b.drained(1000);
        assert_eq!(b.bound(), MAX_ACCEPT_BATCH);
    }

    /// The property the bounded pass relies on: a level-triggered listener with a connection
    /// still queued is reported again by the next poll, with no new connection arriving.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_queued_connection_is_reported_again() {
        let mut listener = mio::net::TcpListener::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = listener.local_addr().unwrap();
        let mut poll = Poll::new().unwrap();
        poll.registry()
            .register(&mut listener, Token(0), mio::Interest::READABLE)
            .unwrap();
        assert!(make_level_triggered(&poll, listener.as_raw_fd(), Token(0)));
        let _a = std::net::TcpStream::connect(addr).unwrap();
        let _b = std::net::TcpStream::connect(addr).unwrap();
        let mut events = mio::Events::with_capacity(8);
        let wait = Some(std::time::Duration::from_secs(5));
        poll.poll(&mut events, wait).unwrap();
        assert!(events.iter().any(|e| e.token() == Token(0)));
        listener.accept().unwrap(); // one of two: the other stays queued
        poll.poll(&mut events, wait).unwrap();
        assert!(events.iter().any(|e| e.token() == Token(0)));
        listener.accept().unwrap();
        assert_eq!(
            listener.accept().map(|_| ()).unwrap_err().kind(),
            ErrorKind::WouldBlock
        );
        // Nothing queued: no event (a short wait, not a sleep: it returns on any event).
        poll.poll(&mut events, Some(std::time::Duration::from_millis(50)))
            .unwrap();
        assert!(!events.iter().any(|e| e.token() == Token(0)));
    }
}
