//! The client connections the loop holds (part of the IO shell, `event_loop/mod.rs`): the
//! sockets by id, the ids handed out, the IO deadlines (write, and the wait for the client's
//! close after a shut-down write side), which connections have output to flush this iteration,
//! which to read again, and the one read buffer every socket is read into.
//!
//! Owns those books and keeps them consistent (a deadline is in the set exactly when its
//! connection holds it). Refuses: reading, writing and closing (`read`, `outputs`), which
//! also tell the core; one socket's bytes are `conn::Conn`'s.

use super::conn::Conn;
use agent_hub_proto::hub::{ConnId, ConnMap};
use std::collections::BTreeSet;
use std::time::Instant;

/// Client connection ids start here; the tokens below are the loop's own (`LISTENER`,
/// `SIGNALS`, `WAKE`).
const FIRST_CONN: u64 = 4;

pub(super) struct Connections {
    /// Boxed, as the core's (docs/performance.md, "W3: memory per parked await"), and keyed
    /// by the ids this server hands out, so the hub's cheap hasher serves (`hub::conn_map`).
    pub(super) map: ConnMap<Box<Conn>>,
    next_conn: ConnId,
    /// IO deadlines (write and linger), by connection.
    deadlines: BTreeSet<(Instant, ConnId)>,
    /// Connections with output to flush this iteration, in the order they got it, repeats
    /// allowed: `settle` sorts, dedups and drops the closed ones, so the flush order is the
    /// ascending one a `BTreeSet` gave, without a tree node allocated per iteration
    /// (docs/performance.md, "Design decisions").
    pub(super) dirty: Vec<ConnId>,
    /// `dirty`'s buffer while its ids are flushed, kept for its capacity.
    flushing: Vec<ConnId>,
    /// Connections whose read budget ran out: read again next iteration.
    pub(super) read_again: BTreeSet<ConnId>,
    /// The buffer every socket is read into (`read`).
    pub(super) scratch: Vec<u8>,
}

impl Connections {
    pub(super) fn new() -> Connections {
        Connections {
            map: ConnMap::default(),
            next_conn: FIRST_CONN,
            deadlines: BTreeSet::new(),
            dirty: Vec::new(),
            flushing: Vec::new(),
            read_again: BTreeSet::new(),
            scratch: vec![0u8; 64 * 1024],
        }
    }

    /// Takes in an accepted connection under a new id. A closed connection's id is never
    /// handed out again (`take_dirty` relies on it).
    pub(super) fn add(&mut self, conn: Box<Conn>) -> ConnId {
        let id = self.next_conn;
        self.next_conn += 1;
        self.map.insert(id, conn);
        id
    }

    /// Releases `id`'s books: its deadline, its pending read; the connection itself is the
    /// caller's to drop.
    pub(super) fn remove(&mut self, id: ConnId) -> Option<Box<Conn>> {
        self.set_io_deadline(id, None);
        let conn = self.map.remove(&id)?;
        self.read_again.remove(&id);
        Some(conn)
    }

    pub(super) fn set_io_deadline(&mut self, id: ConnId, at: Option<Instant>) {
        let Some(conn) = self.map.get_mut(&id) else {
            return;
        };
        if let Some(old) = conn.deadline.take() {
            self.deadlines.remove(&(old, id));
        }
        if let Some(at) = at {
            conn.deadline = Some(at);
            self.deadlines.insert((at, id));
        }
    }

    /// The earliest IO deadline, for the loop's poll timeout.
    pub(super) fn first_deadline(&self) -> Option<Instant> {
        self.deadlines.first().map(|&(t, _)| t)
    }

    /// The next connection whose IO deadline passed by `now`, with whether its write side was
    /// already shut down (the wait for the client's close ran out, not a write); its deadline
    /// is cleared. None when no deadline is due.
    pub(super) fn next_expired(&mut self, now: Instant) -> Option<(ConnId, bool)> {
        while let Some(&(at, id)) = self.deadlines.first() {
            if at > now {
                return None;
            }
            self.deadlines.remove(&(at, id));
            let Some(conn) = self.map.get_mut(&id) else {
                continue;
            };
            conn.deadline = None;
            return Some((id, conn.shut_down));
        }
        None
    }

    /// The connections to flush now, ascending and once each, or None when there are none;
    /// hand the batch back with `done_flushing`, which keeps its buffer.
    pub(super) fn take_dirty(&mut self) -> Option<Vec<ConnId>> {
        // A closed connection's id is never handed out again, so dropping the ids no longer
        // in `conns` leaves what a set with `remove` on close would hold.
        let map = &self.map;
        self.dirty.retain(|id| map.contains_key(id));
        if self.dirty.is_empty() {
            return None;
        }
        let mut batch = std::mem::replace(&mut self.dirty, std::mem::take(&mut self.flushing));
        batch.sort_unstable();
        batch.dedup();
        Some(batch)
    }

    pub(super) fn done_flushing(&mut self, mut batch: Vec<ConnId>) {
        batch.clear();
        self.flushing = batch;
    }
}
