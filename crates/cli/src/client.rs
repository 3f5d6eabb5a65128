//! The synchronous client side of the wire (SPEC §9): one short-lived connection per verb,
//! hello and verb pipelined in one write, bounded waits everywhere.
//!
//! Owns connecting, the exchange of lines, and reading the token file. Refuses printing and
//! exit codes: `app` maps `ClientError` to those.

use agent_hub_proto::wire::{
    AwaitRequest, ClientLine, Envelope, EnvelopeStatus, Hello, HubLine, IdRequest, StatusRequest,
    TaskRequest, WaitFor, WhoRequest,
};
use std::fmt;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::time::Duration;

pub mod stdin;
pub mod task;
pub mod task_view;
pub mod top;
pub mod who_view;

/// How long to wait for the hub to accept the TCP connection.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long to wait for any reply that the hub gives without waiting itself (ok, accepted).
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(30);
/// Added to an await's own `--timeout` before the client gives up on a silent hub.
pub const AWAIT_MARGIN: Duration = Duration::from_secs(30);
/// Longest hub line the client reads (the hub's own cap can be at most 64 MiB).
pub const MAX_REPLY_BYTES: u64 = 64 * 1024 * 1024 + 64 * 1024;
/// Longest first line read from the port: a hub's client port answers the hello with `ok` or
/// an error line of a few hundred bytes (SPEC §4.1, §4.4), and whatever else answers there
/// (issue 35: a relay port, a web server) is told apart within this.
const FIRST_LINE_MAX_BYTES: u64 = 64 * 1024;
/// Waits before each resend of a send whose connection failed before `accepted` arrived
/// (SPEC §12.3). The resend carries the same id, so a hub that did accept answers `accepted`
/// again without a second copy.
pub const SEND_RETRY_BACKOFF: [Duration; 4] = [
    Duration::from_millis(100),
    Duration::from_millis(200),
    Duration::from_millis(400),
    Duration::from_millis(800),
];

/// Where and as whom to connect. `Debug` hides the token.
#[derive(Clone)]
pub struct Endpoint {
    pub name: String,
    pub token: String,
    pub port: u16,
}

impl fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Endpoint")
            .field("name", &self.name)
            .field("port", &self.port)
            .finish()
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
    /// The port answered, but not as a hub's client port (issue 35): what it likely is.
    NotAHub(String),
    /// The hub does not know a verb or key this request needs (an agent-hub from before it,
    /// SPEC §10.3): what is missing, and the hub's own words.
    Unsupported(String),
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientError::Token(m)
            | ClientError::Connect(m)
            | ClientError::Io(m)
            | ClientError::Hub(m)
            | ClientError::NotAHub(m)
            | ClientError::Unsupported(m) => f.write_str(m),
            ClientError::Protocol(m) => write!(f, "protocol error: {m}"),
        }
    }
}

impl std::error::Error for ClientError {}

/// A token file that cannot be used is the client's `Token` error, its text unchanged.
impl From<agent_hub_host::token_file::TokenFileError> for ClientError {
    fn from(e: agent_hub_host::token_file::TokenFileError) -> ClientError {
        ClientError::Token(e.to_string())
    }
}

/// What an await returned.
#[derive(Debug, PartialEq, Eq)]
pub enum AwaitOutcome {
    /// The envelope's JSON text exactly as the hub sent it.
    Envelope(String),
    /// The hub-side timeout passed; nothing was consumed.
    Timeout,
}

#[derive(Debug)]
struct Exchange {
    reader: BufReader<TcpStream>,
}

impl Exchange {
    /// Connects and writes hello and the verb in one write.
    fn open(ep: &Endpoint, verb: &ClientLine) -> Result<Exchange, ClientError> {
        Exchange::open_within(ep, verb, CONNECT_TIMEOUT, REPLY_TIMEOUT)
    }

    /// `open` with explicit bounds on the connect and on each write and read.
    fn open_within(
        ep: &Endpoint,
        verb: &ClientLine,
        connect: Duration,
        reply: Duration,
    ) -> Result<Exchange, ClientError> {
        Exchange::open_hello(ep, false, verb, connect, reply)
    }

    /// Connects, writes the hello (with `"warn":true` when `warn`, SPEC §4.1) and the verb
    /// line in one write, and reads `ok`. Whatever else the port says first is an error that
    /// names what the port likely is (`read_first`). Every line the client writes is
    /// `wire::ClientLine::encode`'s (one type per verb for both sides, PLAN.md §14).
    fn open_hello(
        ep: &Endpoint,
        warn: bool,
        verb: &ClientLine,
        connect: Duration,
        reply: Duration,
    ) -> Result<Exchange, ClientError> {
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, ep.port));
        let stream =
            TcpStream::connect_timeout(&addr, connect).map_err(|e| connect_err(addr, &e))?;
        let _ = stream.set_nodelay(true);
        stream.set_write_timeout(Some(reply)).map_err(io_err)?;
        stream.set_read_timeout(Some(reply)).map_err(io_err)?;
        let hello = ClientLine::Hello(Hello {
            warn: warn.then_some(true),
            ..Hello::new(ep.name.clone(), ep.token.clone())
        });
        let mut bytes = hello.encode();
        bytes.push_str(&verb.encode());
        (&stream).write_all(bytes.as_bytes()).map_err(io_err)?;
        let mut ex = Exchange {
            reader: BufReader::new(stream),
        };
        match ex.read_first(ep.port)? {
            HubLine::Ok => Ok(ex),
            other => Err(unexpected(other, "ok")),
        }
    }

    /// The port's first line. A hub's client port says `ok` or an error line (SPEC §4.1);
    /// anything else that is not a hub line, or part of a line left hanging, is
    /// `ClientError::NotAHub` naming what the port likely is (`not_a_hub`), not a parser's
    /// message about a line no hub sent.
    fn read_first(&mut self, port: u16) -> Result<HubLine, ClientError> {
        let mut buf = Vec::new();
        let read = (&mut self.reader)
            .take(FIRST_LINE_MAX_BYTES)
            .read_until(b'\n', &mut buf);
        let n = match read {
            Ok(n) => n,
            // Part of a line and then silence (a prompt waiting for input) or a reset: a hub
            // writes its first line whole, so this was something else.
            Err(_) if !buf.is_empty() => {
                return Err(ClientError::NotAHub(not_a_hub(&buf, port)));
            }
            Err(e) => return Err(read_err(e)),
        };
        if n == 0 {
            return Err(ClientError::Io(
                "the hub closed the connection without a reply".into(),
            ));
        }
        let whole = buf.last() == Some(&b'\n');
        if whole {
            buf.pop();
        }
        match HubLine::decode(&buf) {
            Ok(HubLine::Error { message }) if whole => Err(ClientError::Hub(message)),
            Ok(line) if whole => Ok(line),
            Ok(_) => Err(ClientError::Protocol("reply line cut short".into())),
            Err(_) => Err(ClientError::NotAHub(not_a_hub(&buf, port))),
        }
    }

    fn write_line(&mut self, line: &ClientLine) -> Result<(), ClientError> {
        self.reader
            .get_ref()
            .write_all(line.encode().as_bytes())
            .map_err(io_err)
    }

    fn set_read_timeout(&mut self, t: Option<Duration>) -> Result<(), ClientError> {
        self.reader.get_ref().set_read_timeout(t).map_err(io_err)
    }

    fn read_line(&mut self) -> Result<HubLine, ClientError> {
        let buf = self.read_raw()?;
        match HubLine::decode(&buf) {
            Ok(HubLine::Error { message }) => Err(ClientError::Hub(message)),
            Ok(line) => Ok(line),
            Err(e) => Err(ClientError::Protocol(e.to_string())),
        }
    }

    /// One line's bytes without its `\n`, bounded by `MAX_REPLY_BYTES`.
    fn read_raw(&mut self) -> Result<Vec<u8>, ClientError> {
        let mut buf = Vec::new();
        let n = (&mut self.reader)
            .take(MAX_REPLY_BYTES)
            .read_until(b'\n', &mut buf)
            .map_err(read_err)?;
        if n == 0 {
            return Err(ClientError::Io(
                "the hub closed the connection without a reply".into(),
            ));
        }
        if buf.pop() != Some(b'\n') {
            return Err(ClientError::Protocol("reply line cut short".into()));
        }
        Ok(buf)
    }
}

fn io_err(e: std::io::Error) -> ClientError {
    ClientError::Io(format!("connection to the hub failed: {e}"))
}

/// A read that failed: the client's own deadline (SPEC §9.6), or the socket.
fn read_err(e: std::io::Error) -> ClientError {
    if matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
    ) {
        ClientError::Io("the hub did not answer in time".into())
    } else {
        io_err(e)
    }
}

/// A connect that failed (SPEC §9.4). A refused one means nothing listens on the port, whose
/// likely causes are a hub that is not running or a port that is not its config's `port`
/// (issue 35); any other failure keeps the OS's words.
fn connect_err(addr: SocketAddr, e: &std::io::Error) -> ClientError {
    let port = addr.port();
    ClientError::Connect(if e.kind() == std::io::ErrorKind::ConnectionRefused {
        format!(
            "cannot connect to the hub at {addr}: nothing listens there (connection refused); is agent-hub-server running, and is {port} the `port` in its config?"
        )
    } else {
        format!("cannot connect to the hub at {addr}: {e}")
    })
}

/// What answered on 127.0.0.1:`port` instead of a hub's client port, from the first line it
/// sent (issue 35). A hub's relay listener speaks first, with its handshake (a relay message
/// line: docs/relay-protocol.md §2), so the port given is the relay's, not the hub's `port`.
/// The line itself is never quoted: whatever sits on a port may echo the hello, token and all.
fn not_a_hub(first: &[u8], port: u16) -> String {
    if agent_hub_proto::relay::RelayMessage::decode_line(first).is_ok() {
        return format!(
            "127.0.0.1:{port} is an agent-hub relay port (it opened with a relay handshake), not a hub's client port: --port takes the `port` of the hub's config, not the port of its [relay] listen"
        );
    }
    let what = if first.starts_with(b"HTTP/") {
        "as an HTTP server"
    } else if std::str::from_utf8(first).is_ok_and(|t| {
        serde_json::from_str::<serde::de::IgnoredAny>(t.trim_end_matches('\r')).is_ok()
    }) {
        "with JSON of another protocol"
    } else {
        "with something that is not JSON"
    };
    format!(
        "127.0.0.1:{port} is not an agent-hub client port: it answered {what} where a hub answers a hello with ok; is {port} the `port` in the hub's config?"
    )
}

fn unexpected(line: HubLine, wanted: &str) -> ClientError {
    ClientError::Protocol(format!("expected {wanted}, got {}", line.tag()))
}

/// What a send got back: the id the hub accepted and, from a hub asked for it (SPEC §5.1),
/// its warning that the recipient names nobody it knows, as the hub wrote it (other parties'
/// text: `agent_hub_proto::kernel::text` before it reaches a terminal).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sent {
    pub id: String,
    pub warning: Option<String>,
}

/// Sends one envelope with the 004 hello (no warning asked); returns the id the hub accepted.
pub fn send(ep: &Endpoint, mut env: Envelope) -> Result<String, ClientError> {
    one_line_body(&mut env);
    send_once(ep, &env, &mut false).map(|s| s.id)
}

/// One attempt at a send. With `*warn` the hello asks for the `warning` (SPEC §4.1); a hub
/// that refuses the key in place of `ok` (a 004 hub, or one from before it, SPEC §10.3)
/// discarded the send unread (SPEC §4.2), so the same envelope (same id) goes again at once
/// with the 004 hello, and `*warn` is cleared for any resend.
fn send_once(ep: &Endpoint, env: &Envelope, warn: &mut bool) -> Result<Sent, ClientError> {
    let verb = ClientLine::Send(env.clone());
    let open = |warn: bool| Exchange::open_hello(ep, warn, &verb, CONNECT_TIMEOUT, REPLY_TIMEOUT);
    let mut ex = match open(*warn) {
        Err(ClientError::Hub(msg)) if *warn && refuses_warn(&msg) => {
            *warn = false;
            open(false)?
        }
        other => other?,
    };
    match ex.read_line()? {
        HubLine::Accepted { id, warning } => Ok(Sent { id, warning }),
        other => Err(unexpected(other, "accepted")),
    }
}

/// A hub that does not know the hello's `warn` key refuses the hello as malformed: a 004
/// hub names the key (serde's "unknown field `warn`, expected …"), one from before this
/// extension names the tag ("unknown field in `hello`, …"). Read in place of `ok`, so it is
/// about the hello: without the key the same hello is well formed.
fn refuses_warn(message: &str) -> bool {
    message.starts_with("malformed line:") && message.contains("unknown field")
}

/// A body may be pretty-printed JSON (`jq . task.json | agent-hub send --body -`), but the wire
/// is one line per message: a raw newline would cut the send line in two and the hub would
/// refuse it as malformed. JSON allows a raw newline only as whitespace between tokens
/// (inside strings it must be escaped), so turning each into a space keeps the body the same
/// JSON text in every other byte: key order, numbers and escapes are untouched.
fn one_line_body(env: &mut Envelope) {
    if env.body.get().contains('\n') {
        let text = env.body.get().replace('\n', " ");
        // Invariant: replacing inter-token whitespace with other whitespace keeps valid JSON.
        env.body = serde_json::value::RawValue::from_string(text)
            .expect("whitespace swap keeps the body valid JSON");
    }
}

/// `send_reporting`, for a caller that wants the id only.
pub fn send_with_retry(ep: &Endpoint, env: Envelope) -> Result<String, ClientError> {
    send_reporting(ep, env).map(|s| s.id)
}

/// Sends with the resend discipline of SPEC §12.3: a connection that fails before `accepted`
/// arrives is retried with the same envelope (same id) after each `SEND_RETRY_BACKOFF` step.
/// An error line from the hub is final. The hello asks for the recipient warning (SPEC §5.1),
/// falling back to the 004 hello against a hub that refuses it. When every attempt failed,
/// the last error says how many were made and over how long (issue 35: the retries are
/// otherwise a silent second and a half).
pub fn send_reporting(ep: &Endpoint, mut env: Envelope) -> Result<Sent, ClientError> {
    one_line_body(&mut env);
    let started = std::time::Instant::now();
    let mut warn = true;
    let mut backoff = SEND_RETRY_BACKOFF.iter();
    let mut attempts = 1usize;
    loop {
        match send_once(ep, &env, &mut warn) {
            Err(ClientError::Connect(_) | ClientError::Io(_)) if backoff.len() > 0 => {
                std::thread::sleep(*backoff.next().expect("checked non-empty"));
                attempts += 1;
            }
            Err(e) if attempts > 1 => return Err(retried(e, attempts, started.elapsed())),
            other => return other,
        }
    }
}

/// A connection failure after resends, with the resends told.
fn retried(e: ClientError, attempts: usize, spent: Duration) -> ClientError {
    let note = format!(
        " (tried {attempts} times over {:.1} s, each with the same envelope id)",
        spent.as_secs_f64()
    );
    match e {
        ClientError::Connect(m) => ClientError::Connect(m + &note),
        ClientError::Io(m) => ClientError::Io(m + &note),
        other => other,
    }
}

/// How an acknowledged await ended after the envelope was handed over.
#[derive(Debug, PartialEq, Eq)]
pub enum Acked {
    /// The hub confirmed the ack: the envelope will not be delivered again.
    Confirmed,
    /// The hub does not speak ack mode; a plain await delivered the envelope.
    Plain,
    /// The ack was not confirmed (the hub went away or refused it): the same envelope, with
    /// the same id, may be delivered again.
    Unconfirmed(String),
}

/// Acknowledged await (SPEC §12.2): `deliver` gets the envelope text and must have put it
/// where it belongs (written and flushed) before it returns Ok; only then is the ack sent. If
/// `deliver` fails the connection is dropped without an ack and the hub delivers the envelope
/// again. Against a hub that refuses the `ack` key, a plain await is made instead (the refused
/// attempt consumed nothing). An envelope of a kind only the hub writes that did not come
/// from the hub is passed over (`take_acked_genuine`); `await_acked_reporting` says so.
pub fn await_acked(
    ep: &Endpoint,
    req: AwaitRequest,
    deliver: impl FnOnce(&str) -> std::io::Result<()>,
) -> Result<Option<Acked>, ClientError> {
    await_acked_reporting(ep, req, deliver, |_| {})
}

/// `await_acked`, telling `on_forged` about each envelope passed over (`forged_hub_kind`'s
/// text, already safe to print).
pub fn await_acked_reporting(
    ep: &Endpoint,
    req: AwaitRequest,
    deliver: impl FnOnce(&str) -> std::io::Result<()>,
    on_forged: impl FnMut(&str),
) -> Result<Option<Acked>, ClientError> {
    let wait = req
        .timeout_secs
        .map(|s| Duration::from_secs(s).saturating_add(AWAIT_MARGIN));
    match take_acked_genuine(ep, req, CONNECT_TIMEOUT, REPLY_TIMEOUT, wait, on_forged)? {
        None => Ok(None),
        Some(Taken::Plain(text)) => {
            deliver(&text).map_err(|e| {
                ClientError::Io(format!("the envelope could not be written out: {e}"))
            })?;
            Ok(Some(Acked::Plain))
        }
        Some(Taken::Held(held)) => {
            // Not acked if this fails: dropping `held` gives the envelope back to the hub.
            deliver(held.text()).map_err(|e| {
                ClientError::Io(format!(
                    "the envelope could not be written out ({e}); not acked, the hub will deliver it again"
                ))
            })?;
            Ok(Some(held.ack(REPLY_TIMEOUT)))
        }
    }
}

/// What an ack-mode await handed over.
#[derive(Debug)]
pub enum Taken {
    /// An ack-mode delivery, not yet acknowledged: the hub still counts it as its own.
    Held(HeldEnvelope),
    /// The hub does not speak ack mode; a plain await delivered this text and it is consumed.
    Plain(String),
}

/// An ack-mode delivery whose connection is kept open until the caller has put the envelope
/// where it belongs (SPEC §12.2). `ack` consumes it; dropping it unacked closes the
/// connection and the hub delivers the same envelope again. The ack must come within the
/// hub's `limits.ack_timeout_ms` of the delivery.
#[derive(Debug)]
pub struct HeldEnvelope {
    id: String,
    text: String,
    ex: Exchange,
}

impl HeldEnvelope {
    /// The envelope's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The envelope's JSON text exactly as the hub sent it.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// Acks and waits up to `patience` for `acked`.
    pub fn ack(mut self, patience: Duration) -> Acked {
        match self.write_ack() {
            Ok(()) => self.read_acked(patience),
            Err(e) => Acked::Unconfirmed(e.to_string()),
        }
    }

    /// Closes the connection without an ack: the hub returns the envelope to routing (its
    /// `attempts` goes up by one) and delivers it again.
    pub fn release(self) {}

    fn write_ack(&mut self) -> Result<(), ClientError> {
        self.ex.write_line(&ClientLine::Ack(IdRequest {
            id: self.id.clone(),
        }))
    }

    fn read_acked(&mut self, patience: Duration) -> Acked {
        let outcome = self
            .ex
            .set_read_timeout(Some(patience.max(Duration::from_millis(1))))
            .and_then(|()| self.ex.read_line());
        match outcome {
            Ok(HubLine::Acked { id }) if id == self.id => Acked::Confirmed,
            Ok(other) => {
                Acked::Unconfirmed(format!("the hub answered the ack with {}", other.tag()))
            }
            Err(e) => Acked::Unconfirmed(e.to_string()),
        }
    }
}

/// Acks several held envelopes at once: every ack line goes out first, then each `acked` is
/// read, so a batch costs one round trip (and, with the sqlite store, one group commit) rather
/// than one per envelope. `patience` bounds the reads of the whole batch. Results come in the
/// order given.
pub fn ack_all(held: Vec<HeldEnvelope>, patience: Duration) -> Vec<(String, Acked)> {
    let deadline = std::time::Instant::now() + patience;
    let written: Vec<(HeldEnvelope, Result<(), ClientError>)> = held
        .into_iter()
        .map(|mut h| {
            let r = h.write_ack();
            (h, r)
        })
        .collect();
    written
        .into_iter()
        .map(|(mut h, wrote)| {
            let outcome = match wrote {
                Ok(()) => {
                    h.read_acked(deadline.saturating_duration_since(std::time::Instant::now()))
                }
                Err(e) => Acked::Unconfirmed(e.to_string()),
            };
            (h.id.clone(), outcome)
        })
        .collect()
}

/// Ack-mode await that hands the delivery back unacknowledged (SPEC §12.2). `connect` bounds
/// the TCP connect, `reply` each write and the read of `ok`, and `wait` the read of the
/// await's answer (None: as long as the hub takes). A hub that refuses the `reader` key (one
/// from before receipts, SPEC §12.4) is asked again without it; against a hub that refuses
/// the `ack` key it makes one plain await instead, whose envelope is consumed on delivery
/// (SPEC §12.6).
pub fn take_acked(
    ep: &Endpoint,
    mut req: AwaitRequest,
    connect: Duration,
    reply: Duration,
    wait: Option<Duration>,
) -> Result<Option<Taken>, ClientError> {
    req.ack = Some(true);
    let text = loop {
        let mut ex = Exchange::open_within(ep, &ClientLine::Await(req.clone()), connect, reply)?;
        ex.set_read_timeout(wait)?;
        match ex.read_line() {
            Ok(HubLine::Envelope(text)) => break (text, ex),
            Ok(HubLine::Timeout) => return Ok(None),
            Ok(other) => return Err(unexpected(other, "envelope or timeout")),
            // A 004 hub names the first key it does not know, `ack` (sent before `reader`):
            // straight to the plain 004 await. A hub that knows `ack` but not `reader` says
            // only "unknown field": ask again without the reader.
            Err(ClientError::Hub(msg))
                if !msg.contains("unknown field `ack`") && refuses_reader(&msg, &req) =>
            {
                req.reader = None
            }
            Err(ClientError::Hub(msg)) if refuses_ack(&msg) => {
                req.ack = None;
                req.reader = None;
                let mut ex = Exchange::open_within(ep, &ClientLine::Await(req), connect, reply)?;
                ex.set_read_timeout(wait)?;
                return match ex.read_line()? {
                    HubLine::Envelope(text) => Ok(Some(Taken::Plain(text))),
                    HubLine::Timeout => Ok(None),
                    other => Err(unexpected(other, "envelope or timeout")),
                };
            }
            Err(e) => return Err(e),
        }
    };
    let (text, ex) = text;
    #[derive(serde::Deserialize)]
    struct IdOnly {
        id: String,
    }
    let id = serde_json::from_str::<IdOnly>(&text)
        .map_err(|e| ClientError::Protocol(e.to_string()))?
        .id;
    Ok(Some(Taken::Held(HeldEnvelope { id, text, ex })))
}

/// Why `text`, an envelope as a hub delivered it, is not what it claims: its kind is one only
/// the hub writes (`wire::envelope::HUB_KINDS`: a bounce, a task's outcome, progress or request, SPEC
/// §3.4) but its `from` is not `hub` (a bounce may also come back from a linked hub as
/// `hub@<peer>`, SPEC §15). None for every other envelope. A current hub refuses such a send
/// and such a forward, so this meets only an envelope an older hub accepted (kept in its
/// store across the upgrade) or a hub that does not keep the rule: `delegate --wait`, `await`
/// and the MCP `await` then never take it for the hub's word. The text names the kind, the
/// sender and the id, made safe for a terminal (`agent_hub_proto::kernel::text`).
pub fn forged_hub_kind(text: &str) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Head {
        id: String,
        from: String,
        kind: String,
    }
    let head: Head = serde_json::from_str(text).ok()?;
    let kind = agent_hub_proto::wire::envelope::hub_kind(&head.kind)?;
    let from_hub = head.from == agent_hub_proto::kernel::names::HUB_NAME
        || (kind == Envelope::BOUNCE_KIND
            && head
                .from
                .strip_prefix(agent_hub_proto::kernel::names::HUB_NAME)
                .is_some_and(|rest| rest.starts_with('@')));
    if from_hub {
        return None;
    }
    Some(format!(
        "an envelope of kind {kind:?}, which only the hub writes, came from {:?}, not from the hub (id {:?}); it was consumed and ignored, and the wait goes on",
        agent_hub_proto::kernel::text::for_terminal(&head.from),
        agent_hub_proto::kernel::text::for_terminal(&head.id),
    ))
}

/// `take_acked`, passing over each envelope `forged_hub_kind` names: it is acked (consumed:
/// left in the queue it would come back to this same await first, ahead of the real one, for
/// ever), `on_forged` is told, and the await is made again for what is left of its timeout
/// (hub-side and client-side), so a forged `task_outcome` can neither end a wait nor stop it
/// from seeing the hub's. Nothing that is anyone's real mail is lost: a current hub accepts
/// no such envelope, and one that an older hub did is mail of a kind no agent may write.
pub fn take_acked_genuine(
    ep: &Endpoint,
    mut req: AwaitRequest,
    connect: Duration,
    reply: Duration,
    wait: Option<Duration>,
    mut on_forged: impl FnMut(&str),
) -> Result<Option<Taken>, ClientError> {
    let start = std::time::Instant::now();
    let hub_secs = req.timeout_secs;
    loop {
        let spent = start.elapsed();
        let left = wait.map(|w| w.saturating_sub(spent).max(Duration::from_millis(1)));
        let taken = take_acked(ep, req.clone(), connect, reply, left)?;
        let text = match &taken {
            None => return Ok(None),
            Some(Taken::Held(h)) => h.text(),
            Some(Taken::Plain(t)) => t.as_str(),
        };
        let Some(why) = forged_hub_kind(text) else {
            return Ok(taken);
        };
        on_forged(&why);
        if let Some(Taken::Held(h)) = taken {
            // Not confirmed is no matter: it then comes back, and is passed over again.
            let _ = h.ack(reply);
        }
        if let Some(secs) = hub_secs {
            req.timeout_secs = Some(secs.saturating_sub(start.elapsed().as_secs()));
        }
    }
}

/// A hub from before receipts rejects the `reader` key of an await that carries one: the
/// await is made again without it (the reader then shows as `unknown`, or not at all).
fn refuses_reader(message: &str, req: &AwaitRequest) -> bool {
    req.reader.is_some() && message.contains("unknown field")
}

/// A 004 hub rejects the unknown `ack` key of the await line.
fn refuses_ack(message: &str) -> bool {
    message.contains("unknown field") && message.contains("ack")
}

/// Asks who is on the hub's roster, parked and queued, and which names nobody holds have mail
/// waiting (SPEC §14, "Mail nobody holds"). A hub from before `offRoster` refuses the key
/// (``unknown field in `who` ``) and is asked again without it; its answer then has no
/// `offRoster`. The answer is read tolerantly (`top::snapshot::ActivityView`), so a later
/// hub's keys never fail it; `text` is the payload as the hub sent it (for `--json`).
pub fn who(ep: &Endpoint) -> Result<task::Answer<top::snapshot::ActivityView>, ClientError> {
    let ask = |req: WhoRequest| {
        let mut ex = Exchange::open(ep, &ClientLine::Who(req))?;
        let reply = ex.read_raw()?;
        task::answer(&reply, "who")
    };
    let with_queues = WhoRequest {
        off_roster: Some(true),
    };
    match ask(with_queues) {
        Err(ClientError::Hub(m)) if m.contains("unknown field in `who`") => {
            ask(WhoRequest::default())
        }
        other => other,
    }
}

/// Reports a turn state of this agent's process (SPEC §14) within the given bounds (a hook
/// uses short ones: it must never hold up its agent); returns the state `who` now shows.
pub fn turn(
    ep: &Endpoint,
    req: agent_hub_proto::wire::TurnRequest,
    connect: Duration,
    reply: Duration,
) -> Result<String, ClientError> {
    let mut ex = Exchange::open_within(ep, &ClientLine::Turn(req), connect, reply)?;
    match ex.read_line()? {
        HubLine::Turn(t) => Ok(t.state),
        other => Err(unexpected(other, "turn")),
    }
}

/// Asks where an envelope this agent sent or received is (SPEC §12.4).
pub fn status(ep: &Endpoint, id: &str) -> Result<EnvelopeStatus, ClientError> {
    let req = StatusRequest {
        id: id.to_owned(),
        ..StatusRequest::default()
    };
    let mut ex = Exchange::open(ep, &ClientLine::Status(req))?;
    match ex.read_line()? {
        HubLine::Status(st) => Ok(st),
        other => Err(unexpected(other, "status")),
    }
}

/// Asks the hub to answer once the envelope reaches `wait_for`, can no longer reach it, or
/// `timeout` passes (hub-side; None: as long as it takes). The reply's `wait` says which
/// (SPEC §12.4 "Waiting for a stage"). The client gives up `margin` after the hub should have
/// answered (`AWAIT_MARGIN` for the CLI).
pub fn status_wait(
    ep: &Endpoint,
    id: &str,
    wait_for: WaitFor,
    timeout: Option<Duration>,
    margin: Duration,
) -> Result<EnvelopeStatus, ClientError> {
    let req = StatusRequest {
        id: id.to_owned(),
        wait_for: Some(wait_for.as_str().to_owned()),
        timeout_ms: timeout.map(|t| t.as_millis().min(u128::from(u64::MAX)) as u64),
    };
    let mut ex = Exchange::open(ep, &ClientLine::Status(req))?;
    ex.set_read_timeout(timeout.map(|t| t.saturating_add(margin)))?;
    match ex.read_line()? {
        HubLine::Status(st) => Ok(st),
        other => Err(unexpected(other, "status")),
    }
}

/// Waits for one envelope. Without a timeout it waits as long as the hub does; with one, the
/// client gives up `AWAIT_MARGIN` after the hub should have answered. A hub that refuses the
/// `reader` key is asked again without it. An envelope `forged_hub_kind` names (consumed on
/// delivery, as every plain await's is) is passed over and the await made again for what is
/// left of its timeout; `await_envelope_reporting` says so.
pub fn await_envelope(ep: &Endpoint, req: AwaitRequest) -> Result<AwaitOutcome, ClientError> {
    await_envelope_reporting(ep, req, |_| {})
}

/// `await_envelope`, telling `on_forged` about each envelope passed over.
pub fn await_envelope_reporting(
    ep: &Endpoint,
    mut req: AwaitRequest,
    mut on_forged: impl FnMut(&str),
) -> Result<AwaitOutcome, ClientError> {
    let start = std::time::Instant::now();
    let hub_secs = req.timeout_secs;
    loop {
        let wait = req
            .timeout_secs
            .map(|s| Duration::from_secs(s).saturating_add(AWAIT_MARGIN));
        let mut ex = Exchange::open(ep, &ClientLine::Await(req.clone()))?;
        ex.set_read_timeout(wait)?;
        return match ex.read_line() {
            Ok(HubLine::Envelope(text)) => match forged_hub_kind(&text) {
                None => Ok(AwaitOutcome::Envelope(text)),
                Some(why) => {
                    on_forged(&why);
                    if let Some(secs) = hub_secs {
                        req.timeout_secs = Some(secs.saturating_sub(start.elapsed().as_secs()));
                    }
                    continue;
                }
            },
            Ok(HubLine::Timeout) => Ok(AwaitOutcome::Timeout),
            Ok(other) => Err(unexpected(other, "envelope or timeout")),
            Err(ClientError::Hub(msg)) if refuses_reader(&msg, &req) => {
                req.reader = None;
                continue;
            }
            Err(e) => Err(e),
        };
    }
}

/// One delegation verb (`client::task`): hello and the verb line, `ok`, then one reply line
/// read as `{"<tag>":…}`.
fn task_exchange<T: for<'de> serde::Deserialize<'de>>(
    ep: &Endpoint,
    verb: &ClientLine,
    tag: &str,
) -> Result<task::Answer<T>, ClientError> {
    let mut ex = Exchange::open(ep, verb)?;
    let line = ex.read_raw()?;
    task::answer(&line, tag)
}

/// Asks the hub to run a task (issue 11, docs/delegation.md). Not retried: a delegation has no
/// id of its own to make a resend harmless, so a failure after the line went out says the
/// task may exist.
pub fn delegate(
    ep: &Endpoint,
    req: task::DelegateRequest,
) -> Result<task::Answer<task::Delegated>, ClientError> {
    let bounded = req.permission.is_some() || req.allow.is_some();
    let placed = req.requires.is_some();
    task_exchange(ep, &ClientLine::Delegate(req), "delegated").map_err(|e| match e {
        ClientError::Io(m) => ClientError::Io(format!(
            "{m}; the hub may have accepted the task: `agent-hub task list` shows your tasks"
        )),
        // Issue 37's keys sent to a hub from before them: no task exists, and the hub could
        // not have run it under the bound asked for anyway.
        ClientError::Hub(m) if bounded && task::unknown_delegate_key(&m) => {
            ClientError::Unsupported(format!(
                "this hub does not take a task's permission or allow rules (an agent-hub from \
                 before approvals); no task was made: delegate without --permission and \
                 --allow to run under the hub's own policy ({m})"
            ))
        }
        // Issue 38's `requires` sent to a hub from before placement: no task was made.
        ClientError::Hub(m) if placed && task::unknown_delegate_key(&m) => {
            ClientError::Unsupported(format!(
                "this hub does not place work by tags (an agent-hub from before --peer auto); no task was made: delegate without --requires, naming the peer with --peer ({m})"
            ))
        }
        other => other,
    })
}

/// The record of a task this agent delegated (`unknown` for any other).
pub fn task_status(
    ep: &Endpoint,
    task_id: &str,
) -> Result<task::Answer<task::TaskRecord>, ClientError> {
    let req = TaskRequest {
        task: task_id.to_owned(),
    };
    task_exchange(ep, &ClientLine::TaskStatus(req), "task_status")
}

/// Every task this agent delegated that the hub still remembers, newest last.
pub fn tasks(ep: &Endpoint) -> Result<task::Answer<task::TaskList>, ClientError> {
    task_exchange(ep, &ClientLine::Tasks, "tasks")
}

/// Answers an open request of a task (issue 37; docs/delegation.md "Approvals"). Not
/// retried: a second answer to a request is refused as not open, so a failure after the line
/// went out says the answer may have been taken. The hub's refusals come back verbatim
/// (`ClientError::Hub`); a hub that does not know the verb is `ClientError::Unsupported`.
pub fn task_answer(
    ep: &Endpoint,
    req: task::TaskAnswerRequest,
) -> Result<task::Answer<task::TaskAnswered>, ClientError> {
    let task_id = req.task.clone();
    task_exchange(ep, &ClientLine::TaskAnswer(req), "task_answer").map_err(|e| match e {
        ClientError::Io(m) => ClientError::Io(format!(
            "{m}; the hub may have taken the answer: `agent-hub task status --id {}` shows \
             whether the request is still open",
            agent_hub_proto::kernel::text::for_terminal(&task_id)
        )),
        ClientError::Hub(m) if task::unknown_verb(&m) => ClientError::Unsupported(format!(
            "this hub does not take answers to a task's requests (task_answer; an agent-hub \
             from before approvals, whose tasks never wait for one): {m}"
        )),
        other => other,
    })
}

/// How long a permission prompt waits for the hub's decision at most: the longest
/// `tasks.permission_timeout_secs` (the hub answers by the request's expiry at the latest,
/// and at the task's end) and a margin. A hub that goes away ends the wait at once.
pub const PROMPT_WAIT_MAX: Duration =
    Duration::from_secs(agent_hub_proto::tasks::settings::MAX_PERMISSION_TIMEOUT_SECS + 300);

/// A headless task's permission prompt (issue 37 design §6), sent by its MCP server as the
/// task identity: the connection waits for the decision, the hub's one reply. Not retried:
/// a second ask about the same tool use is refused as a replay. The hub's refusals come
/// back verbatim (`ClientError::Hub`); a hub that does not know the verb is
/// `ClientError::Unsupported`.
pub fn task_permission(
    ep: &Endpoint,
    req: agent_hub_proto::wire::TaskPermissionRequest,
) -> Result<agent_hub_proto::wire::TaskPermissionReply, ClientError> {
    let line = ClientLine::TaskPermission(req);
    let exchange = Exchange::open(ep, &line).and_then(|mut ex| {
        ex.set_read_timeout(Some(PROMPT_WAIT_MAX))?;
        ex.read_line()
    });
    match exchange {
        Ok(HubLine::TaskPermission(reply)) => Ok(reply),
        Ok(other) => Err(unexpected(other, "task_permission")),
        Err(ClientError::Hub(m)) if task::unknown_verb(&m) => Err(ClientError::Unsupported(
            format!("this hub does not take permission prompts (task_permission; an agent-hub from before them): {m}"),
        )),
        Err(e) => Err(e),
    }
}

/// Sends a follow-up turn to a task's kept session (issue 38; docs/delegation.md
/// "Follow-ups"). Not retried: a second follow-up would be a second turn. The hub's refusals
/// come back verbatim; a hub that does not know the verb is `ClientError::Unsupported`.
pub fn task_prompt(
    ep: &Endpoint,
    req: task::TaskPromptRequest,
) -> Result<task::Answer<task::Prompted>, ClientError> {
    let task_id = req.task.clone();
    task_exchange(ep, &ClientLine::TaskPrompt(req), "task_prompt").map_err(|e| match e {
        ClientError::Io(m) => ClientError::Io(format!(
            "{m}; the hub may have taken the follow-up: `agent-hub task status --id {}` shows              the task's turns",
            agent_hub_proto::kernel::text::for_terminal(&task_id)
        )),
        ClientError::Hub(m) if task::unknown_verb(&m) => ClientError::Unsupported(format!(
            "this hub does not take follow-ups (task_prompt; an agent-hub from before them,              whose tasks end with their first turn): {m}"
        )),
        other => other,
    })
}

/// Ends a task's kept session now (issue 38); returns the task's final state.
pub fn task_close(
    ep: &Endpoint,
    task_id: &str,
) -> Result<task::Answer<task::Cancelled>, ClientError> {
    let req = TaskRequest {
        task: task_id.to_owned(),
    };
    task_exchange(ep, &ClientLine::TaskClose(req), "task_close").map_err(|e| match e {
        ClientError::Hub(m) if task::unknown_verb(&m) => ClientError::Unsupported(format!(
            "this hub does not keep sessions (task_close; an agent-hub from before follow-ups): {m}"
        )),
        other => other,
    })
}

/// Asks the hub to cancel a task this agent delegated; returns the state after the request.
pub fn cancel(ep: &Endpoint, task_id: &str) -> Result<task::Answer<task::Cancelled>, ClientError> {
    let req = TaskRequest {
        task: task_id.to_owned(),
    };
    task_exchange(ep, &ClientLine::Cancel(req), "cancel")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 35: what answers on a wrong port is named from its first line, and the line is
    /// never repeated (an echo server sends back the hello, token and all).
    #[test]
    fn a_first_line_from_something_else_names_what_answered() {
        let challenge = r#"{"id":"1764583200000-0001-ab12","msg_type":"challenge","from_peer":"","timestamp":1764583200000,"payload":{"nonce":"0f0e0d0c0b0a09080706050403020100","peer":"east","proto":1}}"#;
        let relay = not_a_hub(challenge.as_bytes(), 46111);
        assert!(
            relay.starts_with("127.0.0.1:46111 is an agent-hub relay port (it opened with a relay handshake), not a hub's client port"),
            "{relay}"
        );
        let cases: [(&[u8], &str); 5] = [
            (b"HTTP/1.1 400 Bad Request\r", "as an HTTP server"),
            (
                br#"{"hello":{"name":"alpha","token":"tok-Secret-1"}}"#,
                "with JSON of another protocol",
            ),
            (b"SSH-2.0-OpenSSH_9.6\r", "with something that is not JSON"),
            (
                b"\xff\xfe\x00tok-Secret-1",
                "with something that is not JSON",
            ),
            (b"{\"ok\":{}", "with something that is not JSON"),
        ];
        for (line, what) in cases {
            let text = not_a_hub(line, 8080);
            assert_eq!(
                text,
                format!("127.0.0.1:8080 is not an agent-hub client port: it answered {what} where a hub answers a hello with ok; is 8080 the `port` in the hub's config?")
            );
            assert!(!text.contains("Secret"), "{text}");
        }
    }

    /// A 004 hub's and an earlier hub's refusals of the hello's `warn` key are told apart
    /// from every other error in place of `ok` (SPEC §10.3).
    #[test]
    fn only_a_refused_hello_key_makes_the_send_go_again_without_warn() {
        assert!(refuses_warn(
            "malformed line: unknown field `warn`, expected `name` or `token`"
        ));
        assert!(refuses_warn(
            "malformed line: unknown field in `hello`, expected `name` or `token`"
        ));
        for other in [
            "authentication failed: unknown name or wrong token",
            "too many connections for this agent (limit 4); try again later",
            "hub is shutting down",
            "malformed line: missing field `token`",
        ] {
            assert!(!refuses_warn(other), "{other}");
        }
    }

    #[test]
    fn a_refused_connect_says_nothing_listens_and_what_to_check() {
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, 4610));
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        assert_eq!(
            connect_err(addr, &refused).to_string(),
            "cannot connect to the hub at 127.0.0.1:4610: nothing listens there (connection refused); is agent-hub-server running, and is 4610 the `port` in its config?"
        );
        let other = std::io::Error::from(std::io::ErrorKind::TimedOut);
        assert_eq!(
            connect_err(addr, &other).to_string(),
            format!("cannot connect to the hub at 127.0.0.1:4610: {other}")
        );
        let after = retried(connect_err(addr, &refused), 5, Duration::from_millis(1520));
        assert!(
            after
                .to_string()
                .ends_with("config? (tried 5 times over 1.5 s, each with the same envelope id)"),
            "{after}"
        );
        assert!(matches!(
            retried(ClientError::Hub("x".into()), 2, Duration::ZERO),
            ClientError::Hub(m) if m == "x"
        ));
    }

    fn env(from: &str, kind: &str) -> String {
        serde_json::json!({"id": "e-1", "from": from, "to": "alpha", "ts": "2026-07-21T06:40:51Z",
            "kind": kind, "correlationId": "task-0123456789abcdef0123456789abcdef", "body": {}})
        .to_string()
    }

    /// Issue 29: only the hub writes a task's outcome and progress and a bounce (which may
    /// come back from a linked hub as `hub@<peer>`); anything else of those kinds is named,
    /// with its sender made safe for a terminal, and every other envelope passes.
    #[test]
    fn only_the_hubs_own_kinds_from_someone_else_are_forged() {
        for kind in ["task_outcome", "task_progress", "task_request", "bounce"] {
            assert_eq!(forged_hub_kind(&env("hub", kind)), None, "{kind}");
            let why = forged_hub_kind(&env("mallory", kind)).expect(kind);
            assert!(why.contains(kind) && why.contains("\"mallory\""), "{why}");
            assert!(forged_hub_kind(&env("task-0123456789abcdef0123456789abcdef", kind)).is_some());
        }
        assert_eq!(
            forged_hub_kind(&env("hub@east", "bounce")),
            None,
            "a peer hub's bounce"
        );
        assert!(forged_hub_kind(&env("hub@east", "task_outcome")).is_some());
        assert!(forged_hub_kind(&env("hubert", "bounce")).is_some());
        assert_eq!(forged_hub_kind(&env("mallory", "result")), None);
        assert_eq!(forged_hub_kind("not json"), None);
        let why = forged_hub_kind(&env("m\u{1b}]52;c;eA==\u{7}", "task_outcome")).unwrap();
        assert!(!agent_hub_proto::kernel::text::has_unsafe(&why), "{why:?}");
    }
}
