//! Writing a connection's queued output to its non-blocking socket: the one write-flush loop,
//! shared by client connections (`conn::Conn::flush`) and relay links (`relay_io::link`).
//!
//! Owns the loop over `write` until everything is written, the socket would block, or it
//! fails; retries on `Interrupted`; a write that accepts nothing is a failure, never a silent
//! stop (nothing is lost silently: docs/operations.md). Refuses: deciding what a blocked or
//! failed socket means (writable interest, dropping the connection), which is the caller's.

use std::io::{self, Write};

/// How a flush ended.
#[derive(Debug)]
pub enum Drain {
    /// Every queued byte is in the kernel.
    Drained,
    /// The socket is full; wait for writable.
    Blocked,
    /// The socket failed (a zero-length write counts as `WriteZero`).
    Failed(io::Error),
}

/// Writes `out[*pos..]` to `w` until all of it is written, the socket would block, or it
/// fails, advancing `*pos` past every byte the kernel accepted. `on_written(pos, n)` runs after
/// each accepted write with the new position and the bytes that write took, so a caller can
/// count bytes or notice the first byte of a delivery.
pub fn write_until_blocked(
    w: &mut impl Write,
    out: &[u8],
    pos: &mut usize,
    mut on_written: impl FnMut(usize, usize),
) -> Drain {
    while *pos < out.len() {
        match w.write(&out[*pos..]) {
            Ok(0) => return Drain::Failed(io::Error::from(io::ErrorKind::WriteZero)),
            Ok(n) => {
                *pos += n;
                on_written(*pos, n);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Drain::Blocked,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Drain::Failed(e),
        }
    }
    Drain::Drained
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A socket stand-in: each write takes the next scripted result (a byte count or an error),
    /// and would block once the script is spent.
    struct Scripted {
        results: Vec<io::Result<usize>>,
        got: Vec<u8>,
    }

    impl Write for Scripted {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            if self.results.is_empty() {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            match self.results.remove(0) {
                Ok(n) => {
                    let n = n.min(buf.len());
                    self.got.extend_from_slice(&buf[..n]);
                    Ok(n)
                }
                Err(e) => Err(e),
            }
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    fn scripted(results: Vec<io::Result<usize>>) -> Scripted {
        Scripted {
            results,
            got: Vec::new(),
        }
    }

    #[test]
    fn partial_writes_advance_and_report_each_write() {
        let mut w = scripted(vec![Ok(2), Err(io::ErrorKind::Interrupted.into()), Ok(10)]);
        let (mut pos, mut seen) = (0, Vec::new());
        let d = write_until_blocked(&mut w, b"hello", &mut pos, |p, n| seen.push((p, n)));
        assert!(matches!(d, Drain::Drained));
        assert_eq!((pos, w.got.as_slice()), (5, &b"hello"[..]));
        assert_eq!(seen, vec![(2, 2), (5, 3)]);
    }

    #[test]
    fn would_block_stops_with_the_position_kept() {
        let mut w = scripted(vec![Ok(3)]);
        let mut pos = 0;
        let d = write_until_blocked(&mut w, b"hello", &mut pos, |_, _| {});
        assert!(matches!(d, Drain::Blocked));
        assert_eq!(pos, 3);
        let mut w = scripted(vec![Ok(9)]);
        assert!(matches!(
            write_until_blocked(&mut w, b"hello", &mut pos, |_, _| {}),
            Drain::Drained
        ));
        assert_eq!(w.got, b"lo");
    }

    #[test]
    fn a_zero_write_and_an_error_are_failures() {
        let mut pos = 0;
        let mut w = scripted(vec![Ok(0)]);
        match write_until_blocked(&mut w, b"x", &mut pos, |_, _| {}) {
            Drain::Failed(e) => assert_eq!(e.kind(), io::ErrorKind::WriteZero),
            other => panic!("{other:?}"),
        }
        let mut w = scripted(vec![Err(io::ErrorKind::BrokenPipe.into())]);
        match write_until_blocked(&mut w, b"x", &mut pos, |_, _| {}) {
            Drain::Failed(e) => assert_eq!(e.kind(), io::ErrorKind::BrokenPipe),
            other => panic!("{other:?}"),
        }
        assert_eq!(pos, 0);
    }
}
