//! W2: handoff latency to an awaiter that sleeps. Per handoff the awaiter's wait is armed on a
//! new connection (and known parked at the server, see each client's `arm`), the connection
//! goes to a reader thread, and the bench polls `/proc/self/task/TID/stat` until that thread
//! is asleep in its read; then the clock starts, a sender connects and enqueues on its own new
//! connection, and the clock stops when the reader thread holds the whole message. So the
//! figure includes waking a sleeping reader, as a real `agent-hub await` process has (unlike
//! phase 2, whose awaiter and sender share one thread). Server CPU covers every step of every
//! timed handoff: arm, send, delivery and the consumer's delete (beanstalkd).

use super::conn::{ConnError, PeerConn};
use super::servers::snap;
use super::target::{rid_of, Delivered, Msg, PeerClient, Queue};
use super::window::Usage;
use crate::base::Res;
use crate::options::IO_TIMEOUT;
use crate::stats::Latency;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

/// How long a handoff's awaiter waits at most (the send comes at once).
const WAIT_SECS: u64 = 30;
/// Bound of the poll for the reader thread to fall asleep.
const ASLEEP_TIMEOUT: Duration = Duration::from_secs(5);

pub(crate) struct W2 {
    pub(crate) handoffs: usize,
    pub(crate) warmup: usize,
    pub(crate) latency: Latency,
    /// The sender's own time from connect to its acknowledgement.
    pub(crate) sender: Latency,
    pub(crate) usage: Usage,
}

type Received = (Instant, Result<Option<Delivered>, ConnError>, PeerConn);

/// The scheduler state of thread `tid` of this process (`S` while it sleeps in a read).
fn thread_state(tid: i32) -> Option<char> {
    let text = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).ok()?;
    text.rsplit_once(')')?.1.trim_start().chars().next()
}

pub(crate) fn w2_handoff(
    client: &Arc<dyn PeerClient>,
    pid: i32,
    handoffs: usize,
    body_bytes: usize,
) -> Res<W2> {
    let warmup = (handoffs / 10).clamp(1, 50);
    let (to_reader, reader_rx) = mpsc::channel::<PeerConn>();
    let (reader_tx, from_reader) = mpsc::channel::<Received>();
    let reading = Arc::new(AtomicBool::new(false));
    let (tid_tx, tid_rx) = mpsc::channel::<i32>();
    let reader = {
        let (client, reading) = (client.clone(), reading.clone());
        std::thread::spawn(move || {
            // SAFETY: gettid has no preconditions.
            let _ = tid_tx.send(unsafe { libc::syscall(libc::SYS_gettid) } as i32);
            for mut c in reader_rx {
                reading.store(true, Ordering::SeqCst);
                let got = client.receive(&mut c);
                let at = Instant::now();
                reading.store(false, Ordering::SeqCst);
                if reader_tx.send((at, got, c)).is_err() {
                    break;
                }
            }
        })
    };
    let tid = tid_rx
        .recv_timeout(ASLEEP_TIMEOUT)
        .map_err(|_| "the reader thread did not start")?;
    let result = (|| -> Res<W2> {
        let (mut lat, mut sender) = (Vec::with_capacity(handoffs), Vec::with_capacity(handoffs));
        let mut s0 = snap(pid)?;
        for i in 0..warmup + handoffs {
            if i == warmup {
                s0 = snap(pid)?;
            }
            let c = client.arm(Queue::Handoff, None, Some(WAIT_SECS))?;
            to_reader.send(c).map_err(|_| "the reader thread ended")?;
            // A bounded poll for a condition: the reader has taken the connection and sleeps.
            let until = Instant::now() + ASLEEP_TIMEOUT;
            while !(reading.load(Ordering::SeqCst) && thread_state(tid) == Some('S')) {
                if Instant::now() >= until {
                    return Err("the reader thread never fell asleep in its read".into());
                }
                std::thread::yield_now();
            }
            let m = Msg::new(i as u64, body_bytes);
            let t0 = Instant::now();
            client.enqueue(Queue::Handoff, &m)?;
            let acked = t0.elapsed();
            let (at, got, mut c) = from_reader
                .recv_timeout(Duration::from_secs(WAIT_SECS) + IO_TIMEOUT)
                .map_err(|_| "no delivery to the reader thread")?;
            let d = got?.ok_or("the awaiter timed out although a message was sent")?;
            if rid_of(&d.body) != Some(m.id.as_str()) {
                return Err(format!("handoff {i} delivered another message"));
            }
            client.consume(&mut c, &d)?;
            if i >= warmup {
                lat.push(at.saturating_duration_since(t0));
                sender.push(acked);
            }
        }
        let usage = Usage::between(s0, snap(pid)?);
        Ok(W2 {
            handoffs,
            warmup,
            latency: Latency::of(lat),
            sender: Latency::of(sender),
            usage,
        })
    })();
    drop(to_reader);
    let _ = reader.join();
    result
}
