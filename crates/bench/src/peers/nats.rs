//! NATS as a target: the server's protocol lines parsed (`INFO`, `MSG`, `PING`, `PONG`, `+OK`,
//! `-ERR`; every malformed one an error) and the client of each step, with what
//! `../shared/bench` does: `CONNECT` with an auth token as the opening step, `PUB` + `PING` →
//! `PONG` to enqueue, `SUB` + `PING` → `PONG` as the wait, and for W4 a request with its own
//! inbox per round trip against a responder that keeps its subscription (core NATS drops a
//! message published while nobody is subscribed).

use super::conn::{crlf_line, crlf_payload, number, ConnError, Malformed, Parsed, PeerConn};
use super::target::{rid_of, Delivered, Msg, PeerClient, Queue};
use crate::base::Res;
use crate::options::IO_TIMEOUT;
use serde_json::json;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::Duration;

/// `INFO` lines carry the server's JSON (a few hundred bytes; more with a cluster).
const MAX_LINE: usize = 16 * 1024;
/// nats-server's default `max_payload` (1 MiB).
const MAX_PAYLOAD: usize = 1 << 20;

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Op {
    Info,
    Ping,
    Pong,
    Ok,
    Err(String),
    Msg {
        subject: String,
        sid: String,
        reply: Option<String>,
        payload: Vec<u8>,
    },
}

/// One complete server operation from the front of `buf`.
pub(crate) fn parse(buf: &[u8]) -> Parsed<Op> {
    let Some((line, used)) = crlf_line(buf, MAX_LINE)? else {
        return Ok(None);
    };
    let text = std::str::from_utf8(line).map_err(|_| Malformed("a line not in UTF-8".into()))?;
    let (word, rest) = text.split_once([' ', '\t']).unwrap_or((text, ""));
    let op = match word.to_ascii_uppercase().as_str() {
        "MSG" => {
            let fields: Vec<&str> = rest.split_whitespace().collect();
            let (subject, sid, reply, len) = match fields.as_slice() {
                [s, i, n] => (*s, *i, None, *n),
                [s, i, r, n] => (*s, *i, Some((*r).to_owned()), *n),
                _ => return Err(Malformed(format!("MSG with {} fields", fields.len()))),
            };
            let len: usize = number(Some(len.as_bytes()), "MSG's length")?;
            if len > MAX_PAYLOAD {
                return Err(Malformed(format!("a message of {len} bytes")));
            }
            return Ok(crlf_payload(&buf[used..], len)?.map(|(payload, more)| {
                let msg = Op::Msg {
                    subject: subject.to_owned(),
                    sid: sid.to_owned(),
                    reply,
                    payload,
                };
                (msg, used + more)
            }));
        }
        "INFO" if rest.trim_start().starts_with('{') => Op::Info,
        "PING" if rest.is_empty() => Op::Ping,
        "PONG" if rest.is_empty() => Op::Pong,
        "+OK" if rest.is_empty() => Op::Ok,
        "-ERR" => Op::Err(rest.trim().trim_matches('\'').to_owned()),
        _ => return Err(Malformed(format!("not a NATS operation: {text:?}"))),
    };
    Ok(Some((op, used)))
}

pub(crate) struct NatsClient {
    pub(crate) addr: SocketAddr,
    pub(crate) token: String,
    /// Subjects are `ahb.<run>.<queue>`; inboxes `_INBOX.<run>.<pair>.<seq>`.
    pub(crate) run: String,
}

impl NatsClient {
    fn subject(&self, q: Queue) -> String {
        format!("ahb.{}.{}", self.run, q.label(true))
    }

    /// Connect, read `INFO`, write `CONNECT` (verbose off: no `+OK` per command).
    fn open(&self) -> Result<PeerConn, ConnError> {
        let mut c = PeerConn::connect(self.addr)?;
        match c.next(parse)? {
            Op::Info => {}
            other => return Err(ConnError::Refused(format!("expected INFO, got {other:?}"))),
        }
        let connect = json!({
            "verbose": false, "pedantic": false, "lang": "rust", "version": "0.1",
            "name": "agent-hub-bench", "protocol": 1, "echo": true, "auth_token": self.token,
        });
        c.write(format!("CONNECT {connect}\r\n").as_bytes())?;
        Ok(c)
    }
}

/// Reads until `PONG`, answering the server's `PING`s; an `-ERR` (a refused token) fails.
fn until_pong(c: &mut PeerConn) -> Result<(), ConnError> {
    loop {
        match c.next(parse)? {
            Op::Pong => return Ok(()),
            Op::Ping => c.write(b"PONG\r\n")?,
            Op::Err(e) => return Err(ConnError::Refused(format!("-ERR {e}"))),
            Op::Ok | Op::Info => {}
            Op::Msg { subject, .. } => {
                return Err(ConnError::Refused(format!(
                    "a message on {subject} before PONG"
                )))
            }
        }
    }
}

/// Reads until a `MSG`, answering `PING`s: the payload and its reply subject.
fn until_msg(c: &mut PeerConn) -> Result<(Vec<u8>, Option<String>), ConnError> {
    loop {
        match c.next(parse)? {
            Op::Msg { payload, reply, .. } => return Ok((payload, reply)),
            Op::Ping => c.write(b"PONG\r\n")?,
            Op::Err(e) => return Err(ConnError::Refused(format!("-ERR {e}"))),
            Op::Ok | Op::Info | Op::Pong => {}
        }
    }
}

fn publish(subject: &str, reply: Option<&str>, body: &[u8]) -> Vec<u8> {
    let mut out = match reply {
        Some(r) => format!("PUB {subject} {r} {}\r\n", body.len()),
        None => format!("PUB {subject} {}\r\n", body.len()),
    }
    .into_bytes();
    out.extend_from_slice(body);
    out.extend_from_slice(b"\r\n");
    out
}

impl PeerClient for NatsClient {
    /// `PUB` + `PING`, acknowledged by `PONG` (the server has routed the message by then).
    fn enqueue(&self, q: Queue, m: &Msg) -> Result<(), ConnError> {
        let mut c = self.open()?;
        let mut bytes = publish(&self.subject(q), None, m.body.as_bytes());
        bytes.extend_from_slice(b"PING\r\n");
        c.write(&bytes)?;
        until_pong(&mut c)
    }

    /// `SUB` + `PING` → `PONG`: the subscription is registered. NATS has no wait timeout of
    /// its own; the socket's read timeout stands in for it.
    fn arm(
        &self,
        q: Queue,
        _reply_to: Option<&str>,
        wait_secs: Option<u64>,
    ) -> Result<PeerConn, ConnError> {
        let mut c = self.open()?;
        c.write(format!("SUB {} 1\r\nPING\r\n", self.subject(q)).as_bytes())?;
        until_pong(&mut c)?;
        c.set_read_timeout(Duration::from_secs(wait_secs.unwrap_or(86_400)) + IO_TIMEOUT)?;
        Ok(c)
    }

    fn receive(&self, c: &mut PeerConn) -> Result<Option<Delivered>, ConnError> {
        let (body, reply) = until_msg(c)?;
        Ok(Some(Delivered { body, tag: reply }))
    }

    /// A new connection per round trip: `SUB` its own inbox, `PUB` the request with that
    /// inbox as reply subject, read the reply.
    fn round_trip(&self, pair: usize, m: &Msg) -> Result<Delivered, ConnError> {
        let mut c = self.open()?;
        let inbox = format!("_INBOX.{}.{pair}.{}", self.run, m.id);
        let mut bytes = format!("SUB {inbox} 9\r\n").into_bytes();
        bytes.extend_from_slice(&publish(
            &self.subject(Queue::Request(pair)),
            Some(&inbox),
            m.body.as_bytes(),
        ));
        c.write(&bytes)?;
        c.set_read_timeout(Duration::from_secs(super::target::REPLY_WAIT_SECS))?;
        let (body, _) = until_msg(&mut c)?;
        Ok(Delivered { body, tag: None })
    }

    /// One connection for the whole run, subscribed once; each request's reply goes to the
    /// inbox it names.
    fn respond(
        &self,
        pair: usize,
        stop: &AtomicBool,
        body_bytes: usize,
        ready: mpsc::Sender<()>,
    ) -> Res<u64> {
        let mut c = self.arm(Queue::Request(pair), None, None)?;
        // Subscribed (the PONG of `arm`): only now is a request not dropped.
        let _ = ready.send(());
        c.set_read_timeout(Duration::from_millis(200))?;
        let mut sent = 0;
        while !stop.load(Ordering::Relaxed) {
            let (body, reply) = match until_msg(&mut c) {
                Ok(m) => m,
                Err(ConnError::Timeout) => continue,
                Err(e) => return Err(e.into()),
            };
            let reply = reply.ok_or("a request without a reply subject")?;
            let rid = rid_of(&body).ok_or("a request without a rid")?;
            let answer = Msg::reply_to(rid, body_bytes);
            c.write(&publish(&reply, None, answer.body.as_bytes()))?;
            sent += 1;
        }
        Ok(sent)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operations_parse_with_the_bytes_they_use() {
        assert_eq!(
            parse(b"INFO {\"server_id\":\"x\"}\r\n"),
            Ok(Some((Op::Info, 24)))
        );
        assert_eq!(parse(b"PING\r\nPONG\r\n"), Ok(Some((Op::Ping, 6))));
        assert_eq!(parse(b"PONG\r\n"), Ok(Some((Op::Pong, 6))));
        assert_eq!(parse(b"+OK\r\n"), Ok(Some((Op::Ok, 5))));
        assert_eq!(
            parse(b"-ERR 'Authorization Violation'\r\n"),
            Ok(Some((Op::Err("Authorization Violation".into()), 32)))
        );
        let msg = b"MSG ahb.r.req0 1 _INBOX.r.0.a 5\r\nhe\r\no\r\nPING\r\n";
        assert_eq!(
            parse(msg),
            Ok(Some((
                Op::Msg {
                    subject: "ahb.r.req0".into(),
                    sid: "1".into(),
                    reply: Some("_INBOX.r.0.a".into()),
                    payload: b"he\r\no".to_vec(),
                },
                40
            )))
        );
        assert_eq!(
            parse(b"msg s 9 0\r\n\r\n"),
            Ok(Some((
                Op::Msg {
                    subject: "s".into(),
                    sid: "9".into(),
                    reply: None,
                    payload: vec![],
                },
                13
            )))
        );
        assert_eq!(
            publish("a.b", Some("in"), b"xy"),
            b"PUB a.b in 2\r\nxy\r\n".to_vec()
        );
    }

    #[test]
    fn incomplete_operations_ask_for_more() {
        for part in [
            &b""[..],
            b"PIN",
            b"PONG\r",
            b"MSG s 1 3\r\nab",
            b"MSG s 1 3\r\nabc\r",
        ] {
            assert_eq!(parse(part), Ok(None), "{part:?}");
        }
    }

    #[test]
    fn malformed_operations_are_errors_not_panics() {
        for bad in [
            &b"\r\n"[..],
            b"PONG\n",
            b"HELLO\r\n",
            b"INFO\r\n",
            b"PING now\r\n",
            b"MSG\r\n",
            b"MSG s 1\r\n",
            b"MSG s 1 r x 3\r\n",
            b"MSG s 1 abc\r\n",
            b"MSG s 1 -3\r\n",
            b"MSG s 1 99999999\r\n",
            b"MSG s 1 3\r\nabcde",
            b"\xc3\x28\r\n",
        ] {
            assert!(parse(bad).is_err(), "{bad:?} parsed");
        }
        assert!(parse(&[b'I'; MAX_LINE + 10]).is_err());
    }
}
