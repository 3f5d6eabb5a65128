//! The vocabulary every workload speaks, whatever the target: a connection-per-op enqueue, a
//! wait known to be parked at the server, its delivery and consumption, and one request →
//! reply round trip. Each protocol module implements `PeerClient`; the workloads (`w1_sends`
//! … `w4_pairs`) never name a protocol.

use super::conn::{ConnError, PeerConn};
use crate::base::Res;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;

/// A logical queue. Each client maps it onto its own names (a hub agent, a Redis list, a
/// beanstalkd tube, a NATS subject), so every target moves the same messages between the
/// same parties.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Queue {
    /// W1's destination: nobody consumes it during the run.
    Sink,
    /// W2's one awaiter.
    Handoff,
    /// W3's parked waiters (one shared queue; NATS, which has no exactly-once fan-out on one
    /// subject, gives each waiter its own subject).
    Parked(usize),
    /// W4 pair i: requests to responder i …
    Request(usize),
    /// … and replies to requester i.
    Reply(usize),
}

impl Queue {
    /// A short name for this queue on the peers (`sink`, `req3` …).
    pub(crate) fn label(self, per_waiter: bool) -> String {
        match self {
            Queue::Sink => "sink".into(),
            Queue::Handoff => "handoff".into(),
            Queue::Parked(i) if per_waiter => format!("parked.{i}"),
            Queue::Parked(_) => "parked".into(),
            Queue::Request(i) => format!("req{i}"),
            Queue::Reply(i) => format!("rep{i}"),
        }
    }
}

/// One message: `id` is the request id (`rid` in the body); a reply carries the request's id
/// in `corr` (the hub's correlationId) and in its body.
pub(crate) struct Msg {
    pub(crate) id: String,
    pub(crate) corr: Option<String>,
    pub(crate) body: String,
}

impl Msg {
    pub(crate) fn new(seq: u64, body_bytes: usize) -> Msg {
        let id = uuid::Uuid::new_v4().to_string();
        let body = body_text(&id, seq, body_bytes);
        Msg {
            id,
            corr: None,
            body,
        }
    }

    /// The reply to a request whose id is `rid`.
    pub(crate) fn reply_to(rid: &str, body_bytes: usize) -> Msg {
        Msg {
            id: uuid::Uuid::new_v4().to_string(),
            corr: Some(rid.to_owned()),
            body: body_text(rid, 0, body_bytes),
        }
    }
}

/// The body every target carries: `{"rid":…,"seq":…,"pad":"…"}` padded to exactly `bytes`
/// (or as short as it can be when `bytes` is below that).
pub(crate) fn body_text(rid: &str, seq: u64, bytes: usize) -> String {
    let bare = format!("{{\"rid\":\"{rid}\",\"seq\":{seq},\"pad\":\"\"}}");
    let pad = bytes.saturating_sub(bare.len());
    format!(
        "{{\"rid\":\"{rid}\",\"seq\":{seq},\"pad\":\"{}\"}}",
        "x".repeat(pad)
    )
}

/// The `rid` a delivered body (or hub envelope line, which carries the body verbatim) names.
pub(crate) fn rid_of(bytes: &[u8]) -> Option<&str> {
    const KEY: &[u8] = b"\"rid\":\"";
    let at = bytes.windows(KEY.len()).position(|w| w == KEY)? + KEY.len();
    let rest = bytes.get(at..)?;
    let end = rest.iter().position(|&b| b == b'"')?;
    std::str::from_utf8(&rest[..end]).ok()
}

/// What a parked wait received: the body (the hub: the whole envelope line), and the
/// server's handle for it where it has one (a beanstalkd job id).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Delivered {
    pub(crate) body: Vec<u8>,
    pub(crate) tag: Option<String>,
}

/// How long a W4 responder's wait lasts before it looks at the stop flag again.
pub(crate) const RESPONDER_WAIT_SECS: u64 = 1;
/// How long a requester waits for its reply.
pub(crate) const REPLY_WAIT_SECS: u64 = 10;

pub(crate) trait PeerClient: Send + Sync {
    /// Connection per op: connect, the opening step, one enqueue acknowledged, close.
    fn enqueue(&self, q: Queue, m: &Msg) -> Result<(), ConnError>;

    /// A new connection with a blocking wait on `q` that the server has registered when this
    /// returns (each client says how it knows). `reply_to` filters by correlation (the hub);
    /// `wait_secs` None waits without end.
    fn arm(
        &self,
        q: Queue,
        reply_to: Option<&str>,
        wait_secs: Option<u64>,
    ) -> Result<PeerConn, ConnError>;

    /// Blocks for the delivery on an armed connection; None when the wait timed out.
    fn receive(&self, c: &mut PeerConn) -> Result<Option<Delivered>, ConnError>;

    /// What a consumer does after a delivery (beanstalkd deletes the reserved job).
    fn consume(&self, _c: &mut PeerConn, _d: &Delivered) -> Result<(), ConnError> {
        Ok(())
    }

    /// One W4 round trip of pair `pair`, connection per op: the request enqueued, then a wait
    /// for the reply on the requester's own queue. Returns the reply.
    fn round_trip(&self, pair: usize, m: &Msg) -> Result<Delivered, ConnError> {
        self.enqueue(Queue::Request(pair), m)?;
        let mut c = self.arm(Queue::Reply(pair), Some(&m.id), Some(REPLY_WAIT_SECS))?;
        let d = self.receive(&mut c)?.ok_or(ConnError::Timeout)?;
        self.consume(&mut c, &d)?;
        Ok(d)
    }

    /// W4 responder of pair `pair` until `stop`: wait for a request (connection per op),
    /// consume it, enqueue the reply. Returns the replies sent. `ready` is told once a request
    /// enqueued from now on will reach it (at once here: the queue holds it meanwhile).
    fn respond(
        &self,
        pair: usize,
        stop: &AtomicBool,
        body_bytes: usize,
        ready: mpsc::Sender<()>,
    ) -> Res<u64> {
        let _ = ready.send(());
        let mut sent = 0;
        while !stop.load(Ordering::Relaxed) {
            let mut c = self.arm(Queue::Request(pair), None, Some(RESPONDER_WAIT_SECS))?;
            let Some(d) = self.receive(&mut c)? else {
                continue;
            };
            self.consume(&mut c, &d)?;
            drop(c);
            let rid = rid_of(&d.body).ok_or("a request without a rid")?.to_owned();
            self.enqueue(Queue::Reply(pair), &Msg::reply_to(&rid, body_bytes))?;
            sent += 1;
        }
        Ok(sent)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_have_the_asked_size_and_name_their_rid() {
        let m = Msg::new(7, 128);
        assert_eq!(m.body.len(), 128);
        assert_eq!(rid_of(m.body.as_bytes()), Some(m.id.as_str()));
        let v: serde_json::Value = serde_json::from_str(&m.body).unwrap();
        assert_eq!(v["seq"], 7);
        // Below the bare size the body is as short as it can be, never truncated.
        let short = body_text("r", 1, 4);
        assert_eq!(short, "{\"rid\":\"r\",\"seq\":1,\"pad\":\"\"}");
        let reply = Msg::reply_to(&m.id, 200);
        assert_eq!(reply.body.len(), 200);
        assert_eq!(reply.corr.as_deref(), Some(m.id.as_str()));
        assert_eq!(rid_of(reply.body.as_bytes()), Some(m.id.as_str()));
    }

    #[test]
    fn rid_of_needs_a_closed_string() {
        assert_eq!(rid_of(b"{\"rid\":\"abc"), None);
        assert_eq!(rid_of(b"{\"id\":\"abc\"}"), None);
        assert_eq!(rid_of(b"x\"rid\":\"\""), Some(""));
    }
}
