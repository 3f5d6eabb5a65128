//! The synchronous client side of the wire (SPEC §9): one short-lived connection per verb,
//! hello and verb pipelined in one write, bounded waits everywhere.
//!
//! Owns connecting, the exchange of lines, and reading the token file. Refuses printing and
//! exit codes: `bin/agent-hub.rs` maps `ClientError` to those.

use crate::wire::{AwaitRequest, ClientLine, Envelope, Hello, HubLine};
use std::fmt;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

/// How long to wait for the hub to accept the TCP connection.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long to wait for any reply that the hub gives without waiting itself (ok, accepted).
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(30);
/// Added to an await's own `--timeout` before the client gives up on a silent hub.
pub const AWAIT_MARGIN: Duration = Duration::from_secs(30);
/// Longest hub line the client reads (the hub's own cap can be at most 64 MiB).
pub const MAX_REPLY_BYTES: u64 = 64 * 1024 * 1024 + 64 * 1024;

/// Where and as whom to connect. `Debug` hides the token.
#[derive(Clone)]
pub struct Endpoint {
    pub name: String,
    pub token: String,
    pub port: u16,
}

impl fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Endpoint").field("name", &self.name).field("port", &self.port).finish()
    }
}

/// Every way a verb can fail. All mean exit 1: nothing was queued or consumed, as far as the
/// client can tell (a timed-out read after a send is the one ambiguous case, and says so).
#[derive(Debug)]
pub enum ClientError {
    /// The token file is missing, unreadable, too open or empty.
    Token(String),
    /// The hub could not be reached.
    Connect(String),
    /// The connection failed or stalled mid-exchange.
    Io(String),
    /// The hub answered with an error line; its text verbatim.
    Hub(String),
    /// The hub sent something that is not a valid line at this point.
    Protocol(String),
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientError::Token(m) | ClientError::Connect(m) | ClientError::Io(m) | ClientError::Hub(m) => f.write_str(m),
            ClientError::Protocol(m) => write!(f, "protocol error: {m}"),
        }
    }
}

impl std::error::Error for ClientError {}

/// What an await returned.
#[derive(Debug, PartialEq, Eq)]
pub enum AwaitOutcome {
    /// The envelope's JSON text exactly as the hub sent it.
    Envelope(String),
    /// The hub-side timeout passed; nothing was consumed.
    Timeout,
}

/// Reads a token file: refuses one readable by group or others, trims trailing whitespace.
pub fn read_token_file(path: &Path) -> Result<String, ClientError> {
    let meta = std::fs::metadata(path).map_err(|e| ClientError::Token(format!("cannot read token file {}: {e}", path.display())))?;
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(ClientError::Token(format!(
            "token file {} has mode {mode:03o}, readable by group or others; fix it with: chmod 600 {}",
            path.display(),
            path.display()
        )));
    }
    let text = std::fs::read_to_string(path).map_err(|e| ClientError::Token(format!("cannot read token file {}: {e}", path.display())))?;
    let token = text.trim_end().to_owned();
    if token.trim().is_empty() {
        return Err(ClientError::Token(format!("token file {} is empty", path.display())));
    }
    Ok(token)
}

struct Exchange {
    reader: BufReader<TcpStream>,
}

impl Exchange {
    /// Connects and writes hello and the verb in one write.
    fn open(ep: &Endpoint, verb: &ClientLine) -> Result<Exchange, ClientError> {
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, ep.port));
        let stream = TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT)
            .map_err(|e| ClientError::Connect(format!("cannot connect to the hub at {addr}: {e}")))?;
        let _ = stream.set_nodelay(true);
        stream.set_write_timeout(Some(REPLY_TIMEOUT)).map_err(io_err)?;
        stream.set_read_timeout(Some(REPLY_TIMEOUT)).map_err(io_err)?;
        let hello = ClientLine::Hello(Hello { name: ep.name.clone(), token: ep.token.clone() });
        let mut bytes = hello.encode();
        bytes.push_str(&verb.encode());
        (&stream).write_all(bytes.as_bytes()).map_err(io_err)?;
        let mut ex = Exchange { reader: BufReader::new(stream) };
        match ex.read_line()? {
            HubLine::Ok => Ok(ex),
            other => Err(unexpected(other, "ok")),
        }
    }

    fn set_read_timeout(&mut self, t: Option<Duration>) -> Result<(), ClientError> {
        self.reader.get_ref().set_read_timeout(t).map_err(io_err)
    }

    fn read_line(&mut self) -> Result<HubLine, ClientError> {
        let mut buf = Vec::new();
        let n = (&mut self.reader).take(MAX_REPLY_BYTES).read_until(b'\n', &mut buf).map_err(|e| {
            if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) {
                ClientError::Io("the hub did not answer in time".into())
            } else {
                io_err(e)
            }
        })?;
        if n == 0 {
            return Err(ClientError::Io("the hub closed the connection without a reply".into()));
        }
        if buf.pop() != Some(b'\n') {
            return Err(ClientError::Protocol("reply line cut short".into()));
        }
        match HubLine::decode(&buf) {
            Ok(HubLine::Error { message }) => Err(ClientError::Hub(message)),
            Ok(line) => Ok(line),
            Err(e) => Err(ClientError::Protocol(e.to_string())),
        }
    }
}

fn io_err(e: std::io::Error) -> ClientError {
    ClientError::Io(format!("connection to the hub failed: {e}"))
}

fn unexpected(line: HubLine, wanted: &str) -> ClientError {
    let tag = match line {
        HubLine::Ok => "ok",
        HubLine::Error { .. } => "error",
        HubLine::Accepted { .. } => "accepted",
        HubLine::Envelope(_) => "envelope",
        HubLine::Timeout => "timeout",
    };
    ClientError::Protocol(format!("expected {wanted}, got {tag}"))
}

/// Sends one envelope; returns the id the hub accepted.
pub fn send(ep: &Endpoint, env: Envelope) -> Result<String, ClientError> {
    let mut ex = Exchange::open(ep, &ClientLine::Send(env))?;
    match ex.read_line()? {
        HubLine::Accepted { id } => Ok(id),
        other => Err(unexpected(other, "accepted")),
    }
}

/// Waits for one envelope. Without a timeout it waits as long as the hub does; with one, the
/// client gives up `AWAIT_MARGIN` after the hub should have answered.
pub fn await_envelope(ep: &Endpoint, req: AwaitRequest) -> Result<AwaitOutcome, ClientError> {
    let wait = req.timeout_secs.map(|s| Duration::from_secs(s).saturating_add(AWAIT_MARGIN));
    let mut ex = Exchange::open(ep, &ClientLine::Await(req))?;
    ex.set_read_timeout(wait)?;
    match ex.read_line()? {
        HubLine::Envelope(text) => Ok(AwaitOutcome::Envelope(text)),
        HubLine::Timeout => Ok(AwaitOutcome::Timeout),
        other => Err(unexpected(other, "envelope or timeout")),
    }
}
