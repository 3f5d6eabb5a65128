//! agent-hub as a target: the same steps in its own protocol (`agent_hub_proto::wire`), with the
//! roster of the bench's fixture. Enqueue is `hello` → `ok`, then `send` → `accepted`, one
//! reply waited for at a time as `../shared/bench` does; the wait is `hello` + `await` in one
//! write, parked once `ok` is back (the hub handles both lines of one read before it
//! writes anything, see `phase_handoff`).

use super::conn::{ConnError, Malformed, Parsed, PeerConn};
use super::target::{Delivered, Msg, PeerClient, Queue};
use crate::client::{await_bytes, now_ts};
use crate::fixtures::{Agent, Fixture};
use crate::options::IO_TIMEOUT;
use agent_hub_proto::wire::{ClientLine, Envelope, HubLine};
use std::net::SocketAddr;
use std::time::Duration;

/// A hub line is at most `limits.max_line_bytes` (1 MiB by default); the bench's are small.
const MAX_LINE: usize = 1 << 20;

/// One hub line from the front of `buf`.
pub(crate) fn parse(buf: &[u8]) -> Parsed<HubLine> {
    match buf.iter().position(|&b| b == b'\n') {
        Some(i) => HubLine::decode(&buf[..i])
            .map(|line| Some((line, i + 1)))
            .map_err(|e| Malformed(format!("hub line: {e}"))),
        None if buf.len() > MAX_LINE => Err(Malformed("a hub line over 1 MiB".into())),
        None => Ok(None),
    }
}

pub(crate) struct HubClient {
    pub(crate) addr: SocketAddr,
    pub(crate) sender: Agent,
    pub(crate) sink: Agent,
    pub(crate) hand_tx: Agent,
    pub(crate) hand_rx: Agent,
    pub(crate) parker: Agent,
    pub(crate) requesters: Vec<Agent>,
    pub(crate) responders: Vec<Agent>,
    /// One timestamp for the run's envelopes (the hub checks its form, not its age).
    pub(crate) ts: String,
}

impl HubClient {
    pub(crate) fn new(addr: SocketAddr, fx: &Fixture) -> HubClient {
        HubClient {
            addr,
            sender: fx.sender.clone(),
            sink: fx.sink.clone(),
            hand_tx: fx.hand_tx.clone(),
            hand_rx: fx.hand_rx.clone(),
            parker: fx.parker.clone(),
            requesters: fx.requesters.clone(),
            responders: fx.responders.clone(),
            ts: now_ts(),
        }
    }

    /// Who sends to `q`, and who `q` is.
    fn parties(&self, q: Queue) -> Result<(&Agent, &Agent), ConnError> {
        let pair = |v: &'_ [Agent], i: usize| -> Result<usize, ConnError> {
            if i < v.len() {
                Ok(i)
            } else {
                Err(ConnError::Refused(format!(
                    "no pair {i} in the bench roster"
                )))
            }
        };
        Ok(match q {
            Queue::Sink => (&self.sender, &self.sink),
            Queue::Handoff => (&self.hand_tx, &self.hand_rx),
            Queue::Parked(_) => (&self.sender, &self.parker),
            Queue::Request(i) => {
                let i = pair(&self.requesters, i)?;
                (&self.requesters[i], &self.responders[i])
            }
            Queue::Reply(i) => {
                let i = pair(&self.responders, i)?;
                (&self.responders[i], &self.requesters[i])
            }
        })
    }
}

fn expect(c: &mut PeerConn, what: &str, want: impl Fn(&HubLine) -> bool) -> Result<(), ConnError> {
    match c.next(parse)? {
        line if want(&line) => Ok(()),
        line => Err(ConnError::Refused(format!("{what} answered {line:?}"))),
    }
}

impl PeerClient for HubClient {
    fn enqueue(&self, q: Queue, m: &Msg) -> Result<(), ConnError> {
        let (from, to) = self.parties(q)?;
        let env = Envelope::new(
            m.id.clone(),
            from.name.clone(),
            to.name.clone(),
            self.ts.clone(),
            "bench".into(),
            m.corr.clone(),
            m.body.clone(),
        )
        .map_err(|e| ConnError::Refused(format!("envelope: {e}")))?;
        let mut c = PeerConn::connect(self.addr)?;
        c.write(&from.hello)?;
        expect(&mut c, "hello", |l| matches!(l, HubLine::Ok))?;
        c.write(ClientLine::Send(env).encode().as_bytes())?;
        expect(
            &mut c,
            "send",
            |l| matches!(l, HubLine::Accepted { id, .. } if *id == m.id),
        )
    }

    fn arm(
        &self,
        q: Queue,
        reply_to: Option<&str>,
        wait_secs: Option<u64>,
    ) -> Result<PeerConn, ConnError> {
        let (_, me) = self.parties(q)?;
        let mut c = PeerConn::connect(self.addr)?;
        c.write(&await_bytes(
            me,
            reply_to.map(str::to_owned),
            wait_secs,
            false,
        ))?;
        expect(&mut c, "hello", |l| matches!(l, HubLine::Ok))?;
        c.set_read_timeout(Duration::from_secs(wait_secs.unwrap_or(86_400)) + IO_TIMEOUT)?;
        Ok(c)
    }

    fn receive(&self, c: &mut PeerConn) -> Result<Option<Delivered>, ConnError> {
        match c.next(parse)? {
            HubLine::Envelope(text) => Ok(Some(Delivered {
                body: text.into_bytes(),
                tag: None,
            })),
            HubLine::Timeout => Ok(None),
            other => Err(ConnError::Refused(format!("await answered {other:?}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hub_lines_parse_and_garbage_is_an_error() {
        assert_eq!(parse(b"{\"ok\":{}}\nrest"), Ok(Some((HubLine::Ok, 10))));
        assert_eq!(parse(b"{\"ok\":{}"), Ok(None));
        assert!(parse(b"{\"ok\":\n").is_err());
        assert!(parse(b"\xff\n").is_err());
        assert!(parse(&vec![b'{'; MAX_LINE + 1]).is_err());
    }
}
