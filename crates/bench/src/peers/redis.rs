//! Redis as a target: the RESP codec (commands out, replies in, every malformed reply an error)
//! and the client of each step, with the commands `../shared/bench` uses so the figures compare:
//! `AUTH` as the opening step, `LPUSH` to enqueue, `BRPOP` as the blocking wait.

use super::conn::{crlf_line, crlf_payload, number, ConnError, Malformed, Parsed, PeerConn};
use super::target::{Delivered, Msg, PeerClient, Queue};
use crate::options::IO_TIMEOUT;
use std::net::SocketAddr;
use std::time::Duration;

/// Longest reply line accepted (a simple string, an error, a length header).
const MAX_LINE: usize = 4096;
/// Largest bulk string or array accepted: far above anything the bench sends.
const MAX_BULK: usize = 1 << 20;
const MAX_ITEMS: usize = 1024;
/// Arrays inside arrays: the bench's replies nest once at most.
const MAX_DEPTH: usize = 4;

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Resp {
    Simple(String),
    Error(String),
    Int(i64),
    /// None: the null bulk string (`$-1`, or RESP3's `_`).
    Bulk(Option<Vec<u8>>),
    /// None: the null array (`*-1`), BRPOP's timeout.
    Array(Option<Vec<Resp>>),
}

/// One command as a RESP array of bulk strings.
pub(crate) fn encode(args: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// One complete reply from the front of `buf`.
pub(crate) fn parse(buf: &[u8]) -> Parsed<Resp> {
    parse_at(buf, 0)
}

fn parse_at(buf: &[u8], depth: usize) -> Parsed<Resp> {
    let Some((line, used)) = crlf_line(buf, MAX_LINE)? else {
        return Ok(None);
    };
    let (&kind, rest) = line
        .split_first()
        .ok_or_else(|| Malformed("an empty RESP line".into()))?;
    let text = || String::from_utf8_lossy(rest).into_owned();
    let length = |what: &str, max: usize| -> Result<Option<usize>, Malformed> {
        let n: i64 = number(Some(rest), what)?;
        match n {
            -1 => Ok(None),
            n if n < -1 => Err(Malformed(format!("{what} {n}"))),
            n if n as u64 > max as u64 => Err(Malformed(format!("{what} {n} is over {max}"))),
            n => Ok(Some(n as usize)),
        }
    };
    match kind {
        b'+' => Ok(Some((Resp::Simple(text()), used))),
        b'-' => Ok(Some((Resp::Error(text()), used))),
        b':' => Ok(Some((
            Resp::Int(number(Some(rest), "an integer reply")?),
            used,
        ))),
        b'_' if rest.is_empty() => Ok(Some((Resp::Bulk(None), used))),
        b'$' => match length("a bulk length", MAX_BULK)? {
            None => Ok(Some((Resp::Bulk(None), used))),
            Some(n) => Ok(crlf_payload(&buf[used..], n)?
                .map(|(bytes, more)| (Resp::Bulk(Some(bytes)), used + more))),
        },
        b'*' => {
            let Some(n) = length("an array length", MAX_ITEMS)? else {
                return Ok(Some((Resp::Array(None), used)));
            };
            if depth >= MAX_DEPTH {
                return Err(Malformed("arrays nested too deep".into()));
            }
            let mut items = Vec::with_capacity(n);
            let mut at = used;
            for _ in 0..n {
                match parse_at(&buf[at..], depth + 1)? {
                    Some((item, more)) => {
                        items.push(item);
                        at += more;
                    }
                    None => return Ok(None),
                }
            }
            Ok(Some((Resp::Array(Some(items)), at)))
        }
        other => Err(Malformed(format!(
            "unknown RESP type byte {:?}",
            other as char
        ))),
    }
}

/// The value a `BRPOP` answered: Some(value), None on its timeout, else an error.
pub(crate) fn brpop_value(reply: Resp) -> Result<Option<Vec<u8>>, ConnError> {
    match reply {
        Resp::Array(Some(mut items)) if items.len() == 2 => match items.pop() {
            Some(Resp::Bulk(Some(value))) => Ok(Some(value)),
            other => Err(ConnError::Refused(format!("BRPOP value {other:?}"))),
        },
        Resp::Array(None) | Resp::Bulk(None) => Ok(None),
        Resp::Error(e) => Err(ConnError::Refused(format!("BRPOP: -{e}"))),
        other => Err(ConnError::Refused(format!("BRPOP answered {other:?}"))),
    }
}

pub(crate) struct RedisClient {
    pub(crate) addr: SocketAddr,
    pub(crate) password: String,
    /// Keys are `ahb:<run>:<queue>`, so no two runs share a list.
    pub(crate) run: String,
}

impl RedisClient {
    fn key(&self, q: Queue) -> String {
        format!("ahb:{}:{}", self.run, q.label(false))
    }

    fn auth(&self) -> Vec<u8> {
        encode(&[b"AUTH", self.password.as_bytes()])
    }
}

fn expect_ok(reply: Resp, what: &str) -> Result<(), ConnError> {
    match reply {
        Resp::Simple(s) if s == "OK" => Ok(()),
        other => Err(ConnError::Refused(format!("{what} answered {other:?}"))),
    }
}

impl PeerClient for RedisClient {
    /// `AUTH` → `+OK`, then `LPUSH key body` → `:n`, each step waiting for its reply.
    fn enqueue(&self, q: Queue, m: &Msg) -> Result<(), ConnError> {
        let mut c = PeerConn::connect(self.addr)?;
        c.write(&self.auth())?;
        expect_ok(c.next(parse)?, "AUTH")?;
        c.write(&encode(&[
            b"LPUSH",
            self.key(q).as_bytes(),
            m.body.as_bytes(),
        ]))?;
        match c.next(parse)? {
            Resp::Int(_) => Ok(()),
            other => Err(ConnError::Refused(format!("LPUSH answered {other:?}"))),
        }
    }

    /// `AUTH` and `BRPOP key timeout` in one write, then `+OK`: Redis runs every command of
    /// one read before it writes any reply, so by the `+OK` the BRPOP is blocked.
    fn arm(
        &self,
        q: Queue,
        _reply_to: Option<&str>,
        wait_secs: Option<u64>,
    ) -> Result<PeerConn, ConnError> {
        let mut c = PeerConn::connect(self.addr)?;
        let secs = wait_secs.unwrap_or(0).to_string();
        let mut bytes = self.auth();
        bytes.extend_from_slice(&encode(&[
            b"BRPOP",
            self.key(q).as_bytes(),
            secs.as_bytes(),
        ]));
        c.write(&bytes)?;
        expect_ok(c.next(parse)?, "AUTH")?;
        c.set_read_timeout(Duration::from_secs(wait_secs.unwrap_or(86_400)) + IO_TIMEOUT)?;
        Ok(c)
    }

    fn receive(&self, c: &mut PeerConn) -> Result<Option<Delivered>, ConnError> {
        Ok(brpop_value(c.next(parse)?)?.map(|body| Delivered { body, tag: None }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_are_arrays_of_bulk_strings() {
        assert_eq!(
            encode(&[b"LPUSH", b"ahb:r:sink", b"{\"a\":1}"]),
            b"*3\r\n$5\r\nLPUSH\r\n$10\r\nahb:r:sink\r\n$7\r\n{\"a\":1}\r\n".to_vec()
        );
        assert_eq!(
            encode(&[b"AUTH", b""]),
            b"*2\r\n$4\r\nAUTH\r\n$0\r\n\r\n".to_vec()
        );
    }

    #[test]
    fn replies_parse_with_the_bytes_they_use() {
        assert_eq!(parse(b"+OK\r\n"), Ok(Some((Resp::Simple("OK".into()), 5))));
        assert_eq!(
            parse(b"-WRONGPASS invalid\r\n+OK\r\n"),
            Ok(Some((Resp::Error("WRONGPASS invalid".into()), 20)))
        );
        assert_eq!(parse(b":42\r\n"), Ok(Some((Resp::Int(42), 5))));
        assert_eq!(parse(b":-3\r\n"), Ok(Some((Resp::Int(-3), 5))));
        assert_eq!(parse(b"$-1\r\n"), Ok(Some((Resp::Bulk(None), 5))));
        assert_eq!(parse(b"_\r\n"), Ok(Some((Resp::Bulk(None), 3))));
        assert_eq!(parse(b"*-1\r\n"), Ok(Some((Resp::Array(None), 5))));
        let brpop = b"*2\r\n$4\r\nq:ab\r\n$3\r\nv\r\n\r\n";
        let (reply, used) = parse(brpop).unwrap().unwrap();
        assert_eq!(used, brpop.len());
        assert_eq!(brpop_value(reply).unwrap(), Some(b"v\r\n".to_vec()));
        assert_eq!(brpop_value(Resp::Array(None)).unwrap(), None);
    }

    #[test]
    fn incomplete_replies_ask_for_more() {
        for part in [
            &b""[..],
            b"+O",
            b"+OK\r",
            b"$5\r\nab",
            b"$5\r\nabcde",
            b"$5\r\nabcde\r",
            b"*2\r\n$1\r\na\r\n",
            b"*2\r\n$1\r\na\r\n$1",
        ] {
            assert_eq!(parse(part), Ok(None), "{part:?}");
        }
    }

    #[test]
    fn malformed_replies_are_errors_not_panics() {
        for bad in [
            &b"\r\n"[..],
            b"+OK\n",
            b"?what\r\n",
            b":twelve\r\n",
            b"$abc\r\n",
            b"$-2\r\n",
            b"$3\r\nabcXY",
            b"$99999999999\r\n",
            b"*-5\r\n",
            b"*99999999\r\n",
            b"*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n:1\r\n",
            b"*1\r\n!\r\n",
        ] {
            assert!(parse(bad).is_err(), "{bad:?} parsed");
        }
        let long = [b"+".as_slice(), &[b'a'; MAX_LINE + 10]].concat();
        assert!(parse(&long).is_err());
    }

    #[test]
    fn unexpected_brpop_replies_are_refusals() {
        for reply in [
            Resp::Error("NOAUTH".into()),
            Resp::Int(1),
            Resp::Array(Some(vec![Resp::Int(1), Resp::Int(2)])),
            Resp::Array(Some(vec![Resp::Bulk(Some(b"k".to_vec()))])),
        ] {
            assert!(brpop_value(reply).is_err());
        }
    }
}
