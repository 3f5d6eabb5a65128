//! The answer linger (SPEC §4.3, §4.4; `limits.answer_linger_ms` in docs/operations.md): what
//! an answered connection does once its final line is in the kernel.
//!
//! Owns the decision the IO layer used to make: after `Output::Answered`, the IO layer
//! reports the flush (`Hub::handle_flushed`); for `answer_linger_ms` a line the client wrote
//! before it read the reply is still taken and answered `a line after the verb: …` (the
//! session's `handle_line` does that in `Phase::Replied`); when the linger is over, or at once
//! when it is 0, the core emits `Output::Close { linger: true }`, which the IO layer carries
//! out as after an error line: shut down its sending side, drain the peer's input until its
//! close or `limits.hello_timeout_ms`. The deadline is an ordinary core deadline
//! (`poll_timeout` / `handle_timeout`). Refuses IO, like the rest of the core.

use super::session::Phase;
use super::{ConnId, Hub, Now};

impl Hub {
    /// Every byte the connection was given up to and including its final line (after
    /// `Output::Answered`) is in the kernel. Starts the answer linger, or ends the exchange
    /// now when `limits.answer_linger_ms` is 0. Ignored for a connection that is not answered
    /// (an error close), whose peer has closed or whose linger already runs, and by a stopping
    /// hub, which closes answered connections without waiting (SPEC §4.6).
    pub fn handle_flushed(&mut self, conn: ConnId, now: Now) {
        let Some(c) = self.conns.get(&conn) else {
            return;
        };
        if !answered(&c.phase) || c.eof || c.deadline.is_some() || self.shutting_down {
            return;
        }
        let linger = self.settings.limits.answer_linger();
        if linger.is_zero() {
            return self.answer_linger_over(conn);
        }
        self.set_deadline(conn, Some(crate::kernel::deadline::after(now.mono, linger)));
    }

    /// The linger deadline of an answered connection passed (from `handle_timeout`, which
    /// sends a deadline here only for a connection in an answered phase). No error line: the
    /// client had its answer; the close drains what it still sends so a reset cannot destroy
    /// that answer in flight (SPEC §4.4).
    pub(super) fn answer_linger_over(&mut self, conn: ConnId) {
        self.set_deadline(conn, None);
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        // A plain delivery keeps its phase: its outcome is decided when the socket is
        // released (`handle_closed`), as `end_exchange` says.
        if matches!(c.phase, Phase::Replied) {
            c.phase = Phase::Done;
        }
        self.push_close(conn, true);
    }
}

/// The phases `end_exchange` leaves a connection in after `Output::Answered`.
pub(super) fn answered(phase: &Phase) -> bool {
    matches!(phase, Phase::Replied | Phase::Delivering { ack: false, .. })
}
