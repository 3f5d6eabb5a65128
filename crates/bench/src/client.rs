//! The wire, client side: connecting, sending and awaiting over `std::net` with the
//! `agent_hub_proto::wire` types, every read under a timeout.

use crate::base::Res;
use crate::fixtures::Agent;
use crate::options::{BODY_NOTE, CONNECT_TIMEOUT, IO_TIMEOUT};
use agent_hub_proto::wire::{AwaitRequest, ClientLine, Envelope, HubLine};
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};

// ----- the wire, client side -----

pub(crate) type Conn = BufReader<TcpStream>;

/// Connects and writes `bytes` (hello and verb) in one write, as the real client does.
pub(crate) fn open(addr: SocketAddr, bytes: &[u8]) -> Res<Conn> {
    let stream = TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT)
        .map_err(|e| format!("connect {addr}: {e}"))?;
    let _ = stream.set_nodelay(true);
    stream
        .set_read_timeout(Some(IO_TIMEOUT))
        .map_err(|e| e.to_string())?;
    stream
        .set_write_timeout(Some(IO_TIMEOUT))
        .map_err(|e| e.to_string())?;
    (&stream)
        .write_all(bytes)
        .map_err(|e| format!("write: {e}"))?;
    Ok(BufReader::with_capacity(1024, stream))
}

/// One raw hub line without its `\n`.
pub(crate) fn read_raw(conn: &mut Conn, buf: &mut Vec<u8>) -> Res<()> {
    buf.clear();
    let n = conn
        .read_until(b'\n', buf)
        .map_err(|e| format!("read: {e}"))?;
    if n == 0 || buf.pop() != Some(b'\n') {
        return Err("the hub closed the connection mid-line".into());
    }
    Ok(())
}

pub(crate) fn read_line(conn: &mut Conn, buf: &mut Vec<u8>) -> Res<HubLine> {
    read_raw(conn, buf)?;
    match HubLine::decode(buf) {
        Ok(HubLine::Error { message }) => Err(format!("hub error: {message}")),
        Ok(line) => Ok(line),
        Err(e) => Err(format!("bad hub line: {e}")),
    }
}

pub(crate) fn expect_ok(conn: &mut Conn, buf: &mut Vec<u8>) -> Res<()> {
    match read_line(conn, buf)? {
        HubLine::Ok => Ok(()),
        other => Err(format!("expected ok, got {other:?}")),
    }
}

pub(crate) fn expect_accepted(conn: &mut Conn, buf: &mut Vec<u8>, id: &str) -> Res<()> {
    match read_line(conn, buf)? {
        HubLine::Accepted { id: got, .. } if got == id => Ok(()),
        other => Err(format!("expected accepted {id}, got {other:?}")),
    }
}

/// Builds `hello` + `send` bytes for one envelope; returns its id.
pub(crate) fn send_bytes(
    out: &mut Vec<u8>,
    from: &Agent,
    to: &str,
    kind: &str,
    correlation_id: Option<String>,
    ts: &str,
    seq: usize,
) -> Res<String> {
    let id = uuid::Uuid::new_v4().to_string();
    let body = format!("{{\"task\":\"bench\",\"seq\":{seq},\"note\":\"{BODY_NOTE}\"}}");
    let env = Envelope::new(
        id.clone(),
        from.name.clone(),
        to.to_owned(),
        ts.to_owned(),
        kind.to_owned(),
        correlation_id,
        body,
    )
    .map_err(|e| format!("envelope: {e}"))?;
    out.clear();
    out.extend_from_slice(&from.hello);
    out.extend_from_slice(ClientLine::Send(env).encode().as_bytes());
    Ok(id)
}

/// `hello` + `await` bytes; `ack` asks for acknowledged delivery (absent otherwise, so a plain
/// await is the 004 line byte for byte).
pub(crate) fn await_bytes(
    agent: &Agent,
    reply_to: Option<String>,
    timeout_secs: Option<u64>,
    ack: bool,
) -> Vec<u8> {
    let mut out = agent.hello.to_vec();
    let req = AwaitRequest {
        reply_to,
        kind: None,
        timeout_secs,
        ack: ack.then_some(true),
        reader: None,
    };
    out.extend_from_slice(ClientLine::Await(req).encode().as_bytes());
    out
}

/// One complete send: connect, hello + send, ok, accepted, close.
pub(crate) fn send_once(addr: SocketAddr, bytes: &[u8], id: &str, buf: &mut Vec<u8>) -> Res<()> {
    let mut conn = open(addr, bytes)?;
    expect_ok(&mut conn, buf)?;
    expect_accepted(&mut conn, buf, id)
}

/// The fields of a delivered envelope the bench checks.
pub(crate) struct Got {
    pub(crate) id: String,
    pub(crate) kind: String,
    pub(crate) correlation_id: Option<String>,
}

pub(crate) fn parse_envelope(text: &str) -> Res<Got> {
    let v: serde_json::Value =
        serde_json::from_str(text).map_err(|e| format!("envelope text: {e}"))?;
    let s = |k: &str| v.get(k).and_then(|x| x.as_str()).map(str::to_owned);
    Ok(Got {
        id: s("id").ok_or("envelope without id")?,
        kind: s("kind").ok_or("envelope without kind")?,
        correlation_id: s("correlationId"),
    })
}

pub(crate) fn now_ts() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// Joins worker threads, turning a panic into an error.
pub(crate) fn join_all<T>(handles: Vec<std::thread::JoinHandle<Res<T>>>) -> Res<Vec<T>> {
    let mut out = Vec::with_capacity(handles.len());
    let mut first_err = None;
    for h in handles {
        match h.join() {
            Ok(Ok(v)) => out.push(v),
            Ok(Err(e)) => {
                first_err.get_or_insert(e);
            }
            Err(_) => {
                first_err.get_or_insert_with(|| "a worker thread panicked".to_owned());
            }
        }
    }
    match first_err {
        Some(e) => Err(e),
        None => Ok(out),
    }
}

/// Splits `total` into `parts` counts that differ by at most one.
pub(crate) fn split(total: usize, parts: usize) -> Vec<usize> {
    (0..parts)
        .map(|i| total / parts + usize::from(i < total % parts))
        .collect()
}
