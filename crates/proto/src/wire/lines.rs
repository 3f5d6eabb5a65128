//! Splitting a byte stream into `\n`-terminated lines under a length cap: the one line
//! splitter, used by client connections (`event_loop::conn`), the ACP session and the relay
//! session (whose frames, once agreed, are read from the same buffer through `pending` and
//! `consume`).
//!
//! "Incomplete" is not an error: `next_line` yields a line, nothing yet, or `LineTooLong` as
//! soon as the buffered bytes without a newline pass the cap, before any more is buffered.

/// The index of the first `\n` in `b`. Eight bytes at a time, as `wire::fast`'s string scan:
/// the lines of a connection-per-op client (a hello, a send with its body) are a few hundred
/// bytes each and every one is searched once, so the byte-at-a-time search was a visible
/// share of a W1 op's instructions (docs/performance.md, issue 13). The lowest marked byte is
/// the first newline: a borrow only runs upwards from a true hit.
pub fn find_newline(b: &[u8]) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let mut i = 0;
    let mut words = b.chunks_exact(8);
    for chunk in &mut words {
        let Ok(bytes) = <[u8; 8]>::try_from(chunk) else {
            break;
        };
        let x = u64::from_le_bytes(bytes) ^ (ONES * u64::from(b'\n'));
        let hit = x.wrapping_sub(ONES) & !x & HIGH;
        if hit != 0 {
            return Some(i + (hit.trailing_zeros() / 8) as usize);
        }
        i += 8;
    }
    words
        .remainder()
        .iter()
        .position(|&c| c == b'\n')
        .map(|k| i + k)
}

/// The line cap while a connection waits for its hello (SPEC §2.1, §4.1; issue 29): the
/// smaller of this and `limits.max_line_bytes`. A hello is
/// `{"hello":{"name":"…","token":"…"}}`, and the roster bounds its two strings
/// (`roster::MAX_NAME_BYTES`, `roster::MAX_TOKEN_BYTES`: 1,280 bytes together), so every
/// hello a roster agent can send fits even with every byte written as a six-byte `\u00XX`
/// escape (7,712 bytes; 7,725 with the optional `"warn":false`, SPEC §4.1); a real one (a
/// 64-character name, a 32-byte hex token) is under 150.
/// Without it a stranger could make the hub buffer `max_line_bytes` (1 MiB in the example)
/// per connection before it had said who it is.
pub const HELLO_MAX_LINE_BYTES: usize = 8 * 1024;

/// The cap was passed; the connection must be refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LineTooLong {
    pub max_line_bytes: usize,
    /// The bytes the refused line held when it was refused, not counting its `\n`: the whole
    /// line when its newline was found, else the partial line buffered so far.
    pub len_bytes: usize,
}

impl std::fmt::Display for LineTooLong {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "line exceeds the limit of {} bytes", self.max_line_bytes)
    }
}

/// Accumulates bytes across reads. Holds at most `max_line_bytes + 1` bytes of a partial line,
/// and holds no allocation at all between lines.
#[derive(Debug, Default)]
pub struct LineBuffer {
    buf: Vec<u8>,
    /// Bytes of `buf` already handed out as lines.
    consumed: usize,
    /// Bytes after `consumed` already searched for a newline, so a long partial line is
    /// scanned once in total rather than once per read.
    scanned: usize,
}

impl LineBuffer {
    pub fn new() -> LineBuffer {
        LineBuffer::default()
    }

    /// Appends freshly read bytes. Call `next_line` until it returns `Ok(None)` after each push.
    pub fn push(&mut self, bytes: &[u8]) {
        self.compact();
        self.buf.extend_from_slice(bytes);
    }

    /// The next complete line without its `\n`, `Ok(None)` when more bytes are needed, or
    /// `LineTooLong` when the cap (not counting the `\n`) is passed.
    pub fn next_line(&mut self, max_line_bytes: usize) -> Result<Option<&[u8]>, LineTooLong> {
        let pending = &self.buf[self.consumed..];
        let from = self.scanned.min(pending.len());
        let found = find_newline(&pending[from..]).map(|i| from + i);
        self.scanned = match found {
            Some(_) => 0,
            None => pending.len(),
        };
        match found {
            Some(n) if n <= max_line_bytes => {
                let start = self.consumed;
                self.consumed += n + 1;
                Ok(Some(&self.buf[start..start + n]))
            }
            Some(n) => Err(LineTooLong {
                max_line_bytes,
                len_bytes: n,
            }),
            None if pending.len() > max_line_bytes => Err(LineTooLong {
                max_line_bytes,
                len_bytes: pending.len(),
            }),
            None => Ok(None),
        }
    }

    /// Bytes buffered that are not yet part of a returned line.
    pub fn pending_len(&self) -> usize {
        self.buf.len() - self.consumed
    }

    /// The bytes buffered that are not yet consumed, for a reader that takes something other
    /// than a line from the stream (the relay's binary frames).
    pub fn pending(&self) -> &[u8] {
        &self.buf[self.consumed..]
    }

    /// Marks the first `n` pending bytes consumed (at most all of them). The newline search
    /// starts again at the new first pending byte.
    pub fn consume(&mut self, n: usize) {
        self.consumed += n.min(self.pending_len());
        self.scanned = 0;
    }

    /// Drops consumed bytes; frees the allocation when nothing is pending, so an idle
    /// connection costs no buffer memory.
    fn compact(&mut self) {
        if self.consumed == 0 {
            return;
        }
        if self.consumed == self.buf.len() {
            self.buf = Vec::new();
        } else {
            self.buf.drain(..self.consumed);
        }
        self.consumed = 0;
    }

    /// Releases memory once the caller has taken every line it wants.
    pub fn shrink(&mut self) {
        self.compact();
        if self.buf.is_empty() {
            self.buf = Vec::new();
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn find_newline_agrees_with_a_plain_search() {
        // Every length to three words, a newline at every place (or none), with neighbours
        // that a word-at-a-time test could confuse with it (0x0a ± 1, 0x8a, 0x00, 0xff).
        for len in 0..26 {
            for fill in [b'a', 0x0b, 0x09, 0x8a, 0x00, 0xff, 0x01] {
                let base = vec![fill; len];
                assert_eq!(find_newline(&base), None, "{base:?}");
                for at in 0..len {
                    for second in [None, Some(len - 1)] {
                        let mut b = base.clone();
                        b[at] = b'\n';
                        if let Some(k) = second {
                            b[k] = b'\n';
                        }
                        let want = b.iter().position(|&c| c == b'\n');
                        assert_eq!(find_newline(&b), want, "{b:?}");
                    }
                }
            }
        }
    }

    use super::*;

    #[test]
    fn splits_lines_across_pushes() {
        let mut b = LineBuffer::new();
        b.push(b"ab");
        assert_eq!(b.next_line(10).unwrap(), None);
        b.push(b"c\nde\n");
        assert_eq!(b.next_line(10).unwrap(), Some(&b"abc"[..]));
        assert_eq!(b.next_line(10).unwrap(), Some(&b"de"[..]));
        assert_eq!(b.next_line(10).unwrap(), None);
        b.shrink();
        assert_eq!(b.pending_len(), 0);
    }

    #[test]
    fn cap_excludes_newline() {
        let mut b = LineBuffer::new();
        b.push(b"12345\n");
        assert_eq!(b.next_line(5).unwrap(), Some(&b"12345"[..]));
        b.push(b"123456\n");
        assert_eq!(
            b.next_line(5),
            Err(LineTooLong {
                max_line_bytes: 5,
                len_bytes: 6
            })
        );
    }

    #[test]
    fn a_long_partial_line_is_scanned_once() {
        let mut b = LineBuffer::new();
        b.push(&[b'x'; 1000]);
        assert_eq!(b.next_line(5000).unwrap(), None);
        assert_eq!(b.scanned, 1000);
        b.push(b"yy\nzz");
        assert_eq!(b.next_line(5000).unwrap().map(<[u8]>::len), Some(1002));
        assert_eq!(b.next_line(5000).unwrap(), None);
        b.push(b"\n");
        assert_eq!(b.next_line(5000).unwrap(), Some(&b"zz"[..]));
    }

    #[test]
    fn refuses_as_soon_as_partial_line_passes_cap() {
        let mut b = LineBuffer::new();
        b.push(b"12345");
        assert_eq!(b.next_line(5).unwrap(), None);
        b.push(b"6");
        assert_eq!(
            b.next_line(5),
            Err(LineTooLong {
                max_line_bytes: 5,
                len_bytes: 6
            })
        );
    }

    #[test]
    fn frames_can_be_read_from_the_same_buffer() {
        let mut b = LineBuffer::new();
        b.push(b"hello\n\x00\x03abcrest");
        assert_eq!(b.next_line(10).unwrap(), Some(&b"hello"[..]));
        assert_eq!(b.pending(), b"\x00\x03abcrest");
        b.consume(5);
        assert_eq!(b.pending(), b"rest");
        b.consume(100);
        assert_eq!(b.pending_len(), 0);
        b.shrink();
        assert_eq!(b.pending(), b"");
    }
}
