//! Reading client sockets into the core (part of the IO shell, `event_loop/mod.rs`; PLAN.md
//! §1 step 2): each readable socket read until `WouldBlock` or its budget, split into lines
//! (`wire::LineBuffer`'s rules, the hello cap until the core has authenticated the connection,
//! then `limits.max_line_bytes`), each line handed to the core with `now`, an EOF reported.
//! Refuses: what a line means (the core's), and writing (`outputs`).

use super::Server;
use agent_hub_proto::hub::{ConnId, Hub};
use agent_hub_proto::kernel::now::Now;
use std::io::{self, Read};

/// Input read from one socket per readiness event before others get a turn.
const READ_BUDGET_BYTES: usize = 1024 * 1024;

impl Server {
    /// Reads what `id`'s socket holds into the core. With `short_drains`, a read that fills
    /// less than the buffer ends it without a further read that would only say WouldBlock:
    /// the caller knows a later byte or FIN will be reported as a new edge (the event had
    /// no close in it, or the socket is registered only after this read).
    pub(super) fn read(&mut self, id: ConnId, short_drains: bool, now: Now) {
        let max_line = self.limits.max_line_bytes;
        // A connection without its hello yet is held to the hello cap (SPEC §2.1): asked of
        // the core only for input longer than that, so a usual read costs no lookup.
        let hello_cap = agent_hub_proto::wire::HELLO_MAX_LINE_BYTES.min(max_line);
        let mut budget = READ_BUDGET_BYTES;
        loop {
            let conns = &mut self.conns;
            let Some(conn) = conns.map.get_mut(&id) else {
                return;
            };
            if conn.read_eof {
                return;
            }
            if budget == 0 {
                conns.read_again.insert(id);
                return;
            }
            match conn.stream.read(&mut conns.scratch) {
                Ok(0) => {
                    conn.read_eof = true;
                    if conn.shut_down || (conn.answered && !conn.has_output()) {
                        // Lingering after an error or an answer: the peer is done too.
                        self.close(id, true, "closed", now);
                    } else {
                        self.hub.handle_eof(id, now);
                        self.drain_outputs();
                    }
                    return;
                }
                Ok(n) => {
                    budget = budget.saturating_sub(n);
                    let drained = short_drains && n < conns.scratch.len();
                    if conn.discard_input {
                        if drained {
                            return;
                        }
                        continue;
                    }
                    if conn.input.pending_len() == 0 {
                        // Nothing held from an earlier read (the usual case: a whole line per
                        // read): the lines are taken from the read buffer itself, and only a
                        // partial tail is copied into the connection's own buffer.
                        self.take_lines(id, n, (hello_cap, max_line), now);
                        if drained {
                            return;
                        }
                        continue;
                    }
                    conn.input.push(&conns.scratch[..n]);
                    loop {
                        let conn = self
                            .conns
                            .map
                            .get_mut(&id)
                            .expect("conn exists while reading");
                        if conn.discard_input {
                            break;
                        }
                        let cap =
                            if conn.input.pending_len() > hello_cap && self.hub.awaits_hello(id) {
                                hello_cap
                            } else {
                                max_line
                            };
                        match conn.input.next_line(cap) {
                            Ok(Some(line)) => self.hub.handle_line(id, line, now),
                            Ok(None) => break,
                            Err(too_long) => {
                                conn.discard_input = true;
                                conn.input = agent_hub_proto::wire::LineBuffer::new();
                                self.hub.handle_bad_input(id, &too_long.to_string(), now);
                            }
                        }
                        self.drain_outputs();
                    }
                    if let Some(conn) = self.conns.map.get_mut(&id) {
                        conn.input.shrink();
                    }
                    if drained {
                        return;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    self.close(id, false, &format!("read failed: {e}"), now);
                    return;
                }
            }
        }
    }

    /// Hands the complete lines in `self.conns.scratch[..n]` to the core, as `LineBuffer` would
    /// (same limits, same error), without copying them; a partial last line is kept in the
    /// connection's buffer for the next read. Only called when that buffer holds nothing.
    /// `caps` are the hello cap and `limits.max_line_bytes`: a line (or a partial one) is held
    /// to the first while the connection waits for its hello, so a stranger never makes the
    /// hub keep more than the hello cap of its input (issue 29).
    fn take_lines(&mut self, id: ConnId, n: usize, caps: (usize, usize), now: Now) {
        let (hello_cap, max_line) = caps;
        let line_cap = |len: usize, hub: &Hub| {
            if len > hello_cap && hub.awaits_hello(id) {
                hello_cap
            } else {
                max_line
            }
        };
        let mut start = 0;
        loop {
            let Some(conn) = self.conns.map.get_mut(&id) else {
                return;
            };
            if conn.discard_input {
                return;
            }
            let pending = &self.conns.scratch[start..n];
            let too_long = match agent_hub_proto::wire::lines::find_newline(pending) {
                Some(k) => {
                    let cap = line_cap(k, &self.hub);
                    if k <= cap {
                        self.hub.handle_line(id, &pending[..k], now);
                        start += k + 1;
                        None
                    } else {
                        Some((k, cap))
                    }
                }
                None => {
                    let cap = line_cap(pending.len(), &self.hub);
                    if pending.len() > cap {
                        Some((pending.len(), cap))
                    } else {
                        if !pending.is_empty() {
                            conn.input.push(pending);
                        }
                        return;
                    }
                }
            };
            if let Some((len_bytes, cap)) = too_long {
                conn.discard_input = true;
                conn.input = agent_hub_proto::wire::LineBuffer::new();
                let e = agent_hub_proto::wire::LineTooLong {
                    max_line_bytes: cap,
                    len_bytes,
                };
                self.hub.handle_bad_input(id, &e.to_string(), now);
            }
            self.drain_outputs();
        }
    }
}
