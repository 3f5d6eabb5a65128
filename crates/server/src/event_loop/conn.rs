//! One client socket's buffers: the partial input line, the output bytes, and where in the
//! output a delivery line starts, so the loop knows when its first byte was accepted.
//!
//! Owns byte movement for one connection. Refuses protocol decisions: lines go to the core.

use agent_hub_proto::wire::LineBuffer;
use mio::net::TcpStream;
use std::io;
use std::time::Instant;

/// The state of the delivery line in `out`, if one is there.
#[derive(Debug, Clone, Copy)]
pub struct DeliveryMark {
    /// Offset of the delivery line's first byte in `out`.
    pub start: usize,
    /// Offset just past its last byte.
    pub end: usize,
    /// The first byte was accepted and reported to the core.
    pub committed: bool,
    /// Every byte of it was accepted: whatever follows it (an error line) cannot make it a
    /// partial write (SPEC §5.3).
    pub done: bool,
}

pub struct Conn {
    pub stream: TcpStream,
    pub input: LineBuffer,
    pub out: Vec<u8>,
    pub out_pos: usize,
    pub delivery: Option<DeliveryMark>,
    /// The core asked for a close once `out` is flushed.
    pub closing: bool,
    /// The core's exchange is over (`Output::Answered`): once `out` is flushed the socket
    /// waits for the client's close, and its lines still go to the core.
    pub answered: bool,
    /// Answered, flushed and reported to the core (`Hub::handle_flushed`): the core's answer
    /// linger runs, and its `Close` or the client's close ends the connection.
    pub waiting_for_close: bool,
    /// The core's `Close` said to linger (its last line was an error): wait for the peer's EOF
    /// before closing, so the kernel does not answer unread input with a reset that destroys
    /// the error line in flight.
    pub linger: bool,
    /// Input is discarded (after an error, or once the verb has been answered).
    pub discard_input: bool,
    pub read_eof: bool,
    /// The write side was shut down after the final flush.
    pub shut_down: bool,
    /// Write deadline while output is pending, then the deadline for the client's close once
    /// the write side is shut down.
    pub deadline: Option<Instant>,
    pub writable_interest: bool,
}

/// How a write attempt ended.
pub enum Flush {
    /// Everything buffered is in the kernel.
    Done,
    /// The socket is full; wait for writable.
    Blocked,
    /// The socket failed.
    Failed(io::Error),
}

impl Conn {
    pub fn new(stream: TcpStream) -> Conn {
        Conn {
            stream,
            input: LineBuffer::new(),
            out: Vec::new(),
            out_pos: 0,
            delivery: None,
            closing: false,
            answered: false,
            waiting_for_close: false,
            linger: false,
            discard_input: false,
            read_eof: false,
            shut_down: false,
            deadline: None,
            writable_interest: false,
        }
    }

    pub fn has_output(&self) -> bool {
        self.out_pos < self.out.len()
    }

    pub fn queue_line(&mut self, line: String) {
        self.append(line);
    }

    /// Appends `line` to the output. When nothing waits (the usual case: one reply per
    /// connection), the line's own buffer becomes the output, with no copy and no allocation
    /// (docs/performance.md, "Design decisions").
    fn append(&mut self, line: String) {
        if self.out.is_empty() {
            self.out = line.into_bytes();
            self.out_pos = 0;
        } else {
            self.out.extend_from_slice(line.as_bytes());
        }
    }

    pub fn queue_delivery(&mut self, line: String) {
        self.delivery = Some(DeliveryMark {
            start: self.out.len(),
            end: self.out.len() + line.len(),
            committed: false,
            done: false,
        });
        self.append(line);
    }

    /// True when a delivery is buffered and not one byte of it is written yet.
    pub fn delivery_unstarted(&self) -> bool {
        self.delivery
            .is_some_and(|d| !d.committed && self.out_pos <= d.start)
    }

    /// Whether the peer is gone, without consuming input: EOF or an error on a peek.
    pub fn peer_gone(&self) -> bool {
        if self.read_eof {
            return true;
        }
        let mut probe = [0u8; 1];
        match self.stream.peek(&mut probe) {
            Ok(0) => true,
            Ok(_) => false,
            Err(e)
                if e.kind() == io::ErrorKind::WouldBlock
                    || e.kind() == io::ErrorKind::Interrupted =>
            {
                false
            }
            Err(_) => true,
        }
    }

    /// Writes until done or blocked. `on_commit` runs once when the delivery's first byte
    /// is accepted.
    pub fn flush(&mut self, mut on_commit: impl FnMut()) -> Flush {
        use super::write_buf::{write_until_blocked, Drain};
        let delivery = &mut self.delivery;
        let drained =
            write_until_blocked(&mut self.stream, &self.out, &mut self.out_pos, |pos, _| {
                if let Some(d) = delivery {
                    if !d.committed && pos > d.start {
                        d.committed = true;
                        on_commit();
                    }
                    d.done |= pos >= d.end;
                }
            });
        match drained {
            Drain::Drained => {}
            Drain::Blocked => return Flush::Blocked,
            Drain::Failed(e) => return Flush::Failed(e),
        }
        self.out = Vec::new();
        self.out_pos = 0;
        Flush::Done
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The server's half of a parked await's memory (docs/performance.md, "W3: memory per
    /// parked await"): the boxed `Conn` itself, with both byte buffers empty (a parked
    /// connection's input is consumed and its output flushed).
    fn conn() -> (Conn, std::net::TcpStream) {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let client = std::net::TcpStream::connect(l.local_addr().expect("addr")).expect("connect");
        let (s, _) = l.accept().expect("accept");
        s.set_nonblocking(true).expect("nonblocking");
        (Conn::new(TcpStream::from_std(s)), client)
    }

    /// The usual reply (nothing else waiting) is not copied: its own buffer is the output.
    /// A second line is appended after it, and a delivery's mark counts from where it starts.
    #[test]
    fn a_line_into_empty_output_is_moved_not_copied() {
        let (mut c, _client) = conn();
        let line = String::from("{\"ok\":{}}\n");
        let at = line.as_ptr();
        c.queue_line(line);
        assert_eq!(c.out.as_ptr(), at);
        c.queue_delivery("{\"envelope\":{}}\n".to_owned());
        assert_eq!(c.out, b"{\"ok\":{}}\n{\"envelope\":{}}\n");
        let d = c.delivery.expect("marked");
        assert_eq!((d.start, d.end), (10, 26));
        assert!(matches!(c.flush(|| {}), Flush::Done));
        assert!(!c.has_output());
        let line = String::from("{\"envelope\":{}}\n");
        let at = line.as_ptr();
        c.queue_delivery(line);
        assert_eq!(c.out.as_ptr(), at);
        assert_eq!(c.delivery.map(|d| (d.start, d.end)), Some((0, 16)));
    }

    #[cfg(target_pointer_width = "64")]
    #[test]
    fn a_connection_costs_the_server_at_most_128_bytes_inline() {
        // The bound is the release build's (what ships). With debug assertions mio's
        // `IoSource` also keeps the id of its registry, 8 bytes more per socket.
        let bound = if cfg!(debug_assertions) { 136 } else { 128 };
        assert!(
            std::mem::size_of::<Conn>() <= bound,
            "event_loop::conn::Conn is {} bytes",
            std::mem::size_of::<Conn>()
        );
    }
}
