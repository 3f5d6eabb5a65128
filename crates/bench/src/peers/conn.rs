//! One client connection to any target of `--peers`: a TCP stream with a read buffer that
//! hands complete replies to a protocol's pure parser (`redis`, `beanstalk`, `nats`, `hub`),
//! every read and write under a timeout, and a typed error that tells a timeout from a close.

use crate::options::{CONNECT_TIMEOUT, IO_TIMEOUT};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// The most bytes buffered while waiting for one complete reply: a server that sends more
/// without finishing a reply is broken or hostile, and the bench gives up on it.
pub(crate) const MAX_BUFFERED: usize = 1 << 20;

/// A reply that no protocol allows: the parsers' error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Malformed(pub(crate) String);

impl std::fmt::Display for Malformed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "malformed reply: {}", self.0)
    }
}

/// What a parser does with the bytes buffered so far: a complete item and the bytes it took,
/// `None` when more bytes are needed, or an error.
pub(crate) type Parsed<T> = Result<Option<(T, usize)>, Malformed>;

#[derive(Debug)]
pub(crate) enum ConnError {
    /// The read timeout passed with no complete reply (a waiting read may do this on purpose).
    Timeout,
    Closed,
    Io(String),
    Malformed(Malformed),
    /// A reply the protocol allows but the workload did not ask for (`-ERR`, `NOT_FOUND` …).
    Refused(String),
}

impl std::fmt::Display for ConnError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConnError::Timeout => write!(f, "timed out waiting for the server"),
            ConnError::Closed => write!(f, "the server closed the connection"),
            ConnError::Io(e) => write!(f, "{e}"),
            ConnError::Malformed(m) => write!(f, "{m}"),
            ConnError::Refused(r) => write!(f, "unexpected reply: {r}"),
        }
    }
}

impl From<ConnError> for String {
    fn from(e: ConnError) -> String {
        e.to_string()
    }
}

impl From<Malformed> for ConnError {
    fn from(m: Malformed) -> ConnError {
        ConnError::Malformed(m)
    }
}

fn io_error(e: std::io::Error) -> ConnError {
    match e.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => ConnError::Timeout,
        _ => ConnError::Io(e.to_string()),
    }
}

pub(crate) struct PeerConn {
    stream: TcpStream,
    buf: Vec<u8>,
    /// Bytes of `buf` before this were handed out already.
    start: usize,
}

impl PeerConn {
    pub(crate) fn connect(addr: SocketAddr) -> Result<PeerConn, ConnError> {
        let stream = TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT)
            .map_err(|e| ConnError::Io(format!("connect {addr}: {e}")))?;
        let _ = stream.set_nodelay(true);
        stream
            .set_read_timeout(Some(IO_TIMEOUT))
            .map_err(io_error)?;
        stream
            .set_write_timeout(Some(IO_TIMEOUT))
            .map_err(io_error)?;
        Ok(PeerConn {
            stream,
            buf: Vec::with_capacity(512),
            start: 0,
        })
    }

    pub(crate) fn write(&mut self, bytes: &[u8]) -> Result<(), ConnError> {
        (&self.stream).write_all(bytes).map_err(io_error)
    }

    /// How long a read may wait (a parked wait longer than `IO_TIMEOUT`, a responder shorter).
    pub(crate) fn set_read_timeout(&self, d: Duration) -> Result<(), ConnError> {
        self.stream.set_read_timeout(Some(d)).map_err(io_error)
    }

    /// Reads until `parse` has a complete item; what follows it stays buffered for the next.
    pub(crate) fn next<T>(&mut self, parse: impl Fn(&[u8]) -> Parsed<T>) -> Result<T, ConnError> {
        loop {
            if let Some((item, used)) = parse(&self.buf[self.start..])? {
                self.start += used;
                if self.start == self.buf.len() {
                    self.buf.clear();
                    self.start = 0;
                }
                return Ok(item);
            }
            if self.buf.len() - self.start >= MAX_BUFFERED {
                return Err(ConnError::Malformed(Malformed(format!(
                    "more than {MAX_BUFFERED} bytes without a complete reply"
                ))));
            }
            if self.start > 0 {
                self.buf.drain(..self.start);
                self.start = 0;
            }
            let mut chunk = [0u8; 4096];
            let n = loop {
                match (&self.stream).read(&mut chunk) {
                    Ok(n) => break n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(io_error(e)),
                }
            };
            if n == 0 {
                return Err(ConnError::Closed);
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }
}

/// One line ending in `\r\n` (the peers' framing): the line without it, and the bytes used.
/// A bare `\n`, or a line longer than `max` without its end, is malformed.
pub(crate) fn crlf_line(buf: &[u8], max: usize) -> Parsed<&[u8]> {
    match buf.iter().position(|&b| b == b'\n') {
        Some(i) if i > 0 && buf[i - 1] == b'\r' => {
            if i - 1 > max {
                return Err(Malformed(format!("a line of {} bytes", i - 1)));
            }
            Ok(Some((&buf[..i - 1], i + 1)))
        }
        Some(_) => Err(Malformed("a line ends in \\n without \\r".into())),
        None if buf.len() > max + 1 => Err(Malformed(format!(
            "more than {max} bytes without a line end"
        ))),
        None => Ok(None),
    }
}

/// `count` payload bytes after a header, then `\r\n`: the payload and the bytes used, counting
/// from the start of the payload.
pub(crate) fn crlf_payload(buf: &[u8], count: usize) -> Parsed<Vec<u8>> {
    if buf.len() < count + 2 {
        return Ok(None);
    }
    if &buf[count..count + 2] != b"\r\n" {
        return Err(Malformed(format!(
            "a payload of {count} bytes is not followed by \\r\\n"
        )));
    }
    Ok(Some((buf[..count].to_vec(), count + 2)))
}

/// A decimal field of a reply line.
pub(crate) fn number<T: std::str::FromStr>(
    field: Option<&[u8]>,
    what: &str,
) -> Result<T, Malformed> {
    field
        .and_then(|f| std::str::from_utf8(f).ok())
        .and_then(|f| f.parse().ok())
        .ok_or_else(|| Malformed(format!("{what} is not a number")))
}
