//! beanstalkd as a target: its reply lines parsed (every malformed one an error) and the
//! client of each step, with the commands `../shared/bench` uses: `use` + `put` to enqueue,
//! `watch` + `ignore default` + `reserve-with-timeout` as the blocking wait, `delete` after.

use super::conn::{crlf_line, crlf_payload, number, ConnError, Malformed, Parsed, PeerConn};
use super::target::{Delivered, Msg, PeerClient, Queue};
use crate::options::IO_TIMEOUT;
use std::net::SocketAddr;
use std::time::Duration;

/// beanstalkd's own command and reply lines are at most 224 bytes; a little room beyond.
const MAX_LINE: usize = 512;
/// beanstalkd's default job size limit (`-z`): a larger RESERVED is not a real reply.
const MAX_JOB: usize = 65_535;

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Reply {
    Inserted(u64),
    Using(String),
    Watching(u64),
    Reserved {
        id: u64,
        body: Vec<u8>,
    },
    Deleted,
    TimedOut,
    /// Any other reply word (`BURIED 3`, `NOT_FOUND`, `OUT_OF_MEMORY`, `BAD_FORMAT` …): a
    /// well-formed reply the bench never wants.
    Other(String),
}

/// One complete reply from the front of `buf`.
pub(crate) fn parse(buf: &[u8]) -> Parsed<Reply> {
    let Some((line, used)) = crlf_line(buf, MAX_LINE)? else {
        return Ok(None);
    };
    let mut words = line.split(|&b| b == b' ');
    let word = words.next().unwrap_or_default();
    let reply = match word {
        b"INSERTED" => Reply::Inserted(number(words.next(), "INSERTED's id")?),
        b"USING" => Reply::Using(tube(words.next())?),
        b"WATCHING" => Reply::Watching(number(words.next(), "WATCHING's count")?),
        b"DELETED" => Reply::Deleted,
        b"TIMED_OUT" => Reply::TimedOut,
        b"RESERVED" => {
            let id = number(words.next(), "RESERVED's id")?;
            let bytes: usize = number(words.next(), "RESERVED's length")?;
            if bytes > MAX_JOB {
                return Err(Malformed(format!("a job of {bytes} bytes")));
            }
            if words.next().is_some() {
                return Err(Malformed("RESERVED has too many fields".into()));
            }
            return Ok(crlf_payload(&buf[used..], bytes)?
                .map(|(body, more)| (Reply::Reserved { id, body }, used + more)));
        }
        w if !w.is_empty() && w.iter().all(|b| b.is_ascii_uppercase() || *b == b'_') => {
            // The whole line, fields and all: it is only ever shown in an error.
            let text = String::from_utf8_lossy(line).into_owned();
            return Ok(Some((Reply::Other(text), used)));
        }
        _ => {
            return Err(Malformed(format!(
                "not a beanstalkd reply: {:?}",
                String::from_utf8_lossy(line)
            )))
        }
    };
    if words.next().is_some() {
        return Err(Malformed(format!(
            "trailing fields in {:?}",
            String::from_utf8_lossy(line)
        )));
    }
    Ok(Some((reply, used)))
}

fn tube(field: Option<&[u8]>) -> Result<String, Malformed> {
    match field {
        Some(t) if !t.is_empty() => Ok(String::from_utf8_lossy(t).into_owned()),
        _ => Err(Malformed("USING without a tube".into())),
    }
}

/// `put` with priority 0, no delay, a 60 s time-to-run, and the body.
pub(crate) fn put_command(body: &[u8]) -> Vec<u8> {
    let mut out = format!("put 0 0 60 {}\r\n", body.len()).into_bytes();
    out.extend_from_slice(body);
    out.extend_from_slice(b"\r\n");
    out
}

pub(crate) struct BeanstalkClient {
    pub(crate) addr: SocketAddr,
    /// Tubes are `ahb.<run>.<queue>`.
    pub(crate) run: String,
}

impl BeanstalkClient {
    fn tube(&self, q: Queue) -> String {
        format!("ahb.{}.{}", self.run, q.label(false))
    }
}

fn refused(what: &str, r: Reply) -> ConnError {
    ConnError::Refused(format!("{what} answered {r:?}"))
}

impl PeerClient for BeanstalkClient {
    /// `use tube` → `USING`, then `put` → `INSERTED`.
    fn enqueue(&self, q: Queue, m: &Msg) -> Result<(), ConnError> {
        let mut c = PeerConn::connect(self.addr)?;
        c.write(format!("use {}\r\n", self.tube(q)).as_bytes())?;
        match c.next(parse)? {
            Reply::Using(_) => {}
            r => return Err(refused("use", r)),
        }
        c.write(&put_command(m.body.as_bytes()))?;
        match c.next(parse)? {
            Reply::Inserted(_) => Ok(()),
            r => Err(refused("put", r)),
        }
    }

    /// `watch`, `ignore default` and the reserve in one write, then both `WATCHING` replies:
    /// beanstalkd handles one connection's commands in order in one thread, and takes up the
    /// reserve in the same turn as it sends the reply before it, so once the second
    /// `WATCHING` is here nothing that comes later (a sender's connection) is seen first.
    fn arm(
        &self,
        q: Queue,
        _reply_to: Option<&str>,
        wait_secs: Option<u64>,
    ) -> Result<PeerConn, ConnError> {
        let mut c = PeerConn::connect(self.addr)?;
        let reserve = match wait_secs {
            Some(s) => format!("reserve-with-timeout {s}\r\n"),
            None => "reserve\r\n".to_owned(),
        };
        c.write(format!("watch {}\r\nignore default\r\n{reserve}", self.tube(q)).as_bytes())?;
        for what in ["watch", "ignore"] {
            match c.next(parse)? {
                Reply::Watching(_) => {}
                r => return Err(refused(what, r)),
            }
        }
        c.set_read_timeout(Duration::from_secs(wait_secs.unwrap_or(86_400)) + IO_TIMEOUT)?;
        Ok(c)
    }

    fn receive(&self, c: &mut PeerConn) -> Result<Option<Delivered>, ConnError> {
        match c.next(parse)? {
            Reply::Reserved { id, body } => Ok(Some(Delivered {
                body,
                tag: Some(id.to_string()),
            })),
            Reply::TimedOut => Ok(None),
            r => Err(refused("reserve", r)),
        }
    }

    /// A reserved job goes back to the tube when its connection closes: delete it.
    fn consume(&self, c: &mut PeerConn, d: &Delivered) -> Result<(), ConnError> {
        let id = d
            .tag
            .as_deref()
            .ok_or(ConnError::Refused("a reserved job without its id".into()))?;
        c.set_read_timeout(IO_TIMEOUT)?;
        c.write(format!("delete {id}\r\n").as_bytes())?;
        match c.next(parse)? {
            Reply::Deleted => Ok(()),
            r => Err(refused("delete", r)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_parse_with_the_bytes_they_use() {
        assert_eq!(
            parse(b"INSERTED 17\r\n"),
            Ok(Some((Reply::Inserted(17), 13)))
        );
        assert_eq!(
            parse(b"USING ahb.r.sink\r\n"),
            Ok(Some((Reply::Using("ahb.r.sink".into()), 18)))
        );
        assert_eq!(
            parse(b"WATCHING 2\r\nWATCHING 1\r\n"),
            Ok(Some((Reply::Watching(2), 12)))
        );
        assert_eq!(parse(b"DELETED\r\n"), Ok(Some((Reply::Deleted, 9))));
        assert_eq!(parse(b"TIMED_OUT\r\n"), Ok(Some((Reply::TimedOut, 11))));
        let reserved = b"RESERVED 5 4\r\na\r\nb\r\nINSERTED 1\r\n";
        assert_eq!(
            parse(reserved),
            Ok(Some((
                Reply::Reserved {
                    id: 5,
                    body: b"a\r\nb".to_vec()
                },
                20
            )))
        );
        assert_eq!(
            parse(b"NOT_FOUND\r\n"),
            Ok(Some((Reply::Other("NOT_FOUND".into()), 11)))
        );
        assert_eq!(
            parse(b"BURIED 3\r\n"),
            Ok(Some((Reply::Other("BURIED 3".into()), 10)))
        );
        assert_eq!(put_command(b"hi"), b"put 0 0 60 2\r\nhi\r\n".to_vec());
    }

    #[test]
    fn incomplete_replies_ask_for_more() {
        for part in [
            &b""[..],
            b"INSER",
            b"INSERTED 1\r",
            b"RESERVED 1 3\r\nab",
            b"RESERVED 1 3\r\nabc\r",
        ] {
            assert_eq!(parse(part), Ok(None), "{part:?}");
        }
    }

    #[test]
    fn malformed_replies_are_errors_not_panics() {
        for bad in [
            &b"\r\n"[..],
            b"INSERTED\r\n",
            b"INSERTED x\r\n",
            b"INSERTED 1 2\r\n",
            b"INSERTED -1\r\n",
            b"WATCHING many\r\n",
            b"USING\r\n",
            b"RESERVED 1\r\n",
            b"RESERVED a 3\r\nabc\r\n",
            b"RESERVED 1 3\r\nabcde",
            b"RESERVED 1 99999999\r\n",
            b"RESERVED 1 3 9\r\nabc\r\n",
            b"DELETED\n",
            b"hello there\r\n",
            b"\xff\xfe\r\n",
        ] {
            assert!(parse(bad).is_err(), "{bad:?} parsed");
        }
        assert!(parse(&[b'A'; MAX_LINE + 10]).is_err());
    }
}
