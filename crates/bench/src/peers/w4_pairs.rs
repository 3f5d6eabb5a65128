//! W4: request → reply round trips with P pairs, connection per op. Requester i enqueues a
//! request for responder i and waits for the reply on its own queue (the hub: an await with
//! `replyTo` = the request's id); responder i waits, consumes, and enqueues the reply. NATS
//! keeps the responder's subscription and gives each round trip its own inbox (`nats`).

use super::target::{rid_of, Msg, PeerClient};
use super::window::{Usage, Window};
use crate::base::Res;
use crate::client::join_all;
use crate::options::{CONNECT_TIMEOUT, IO_TIMEOUT};
use crate::stats::Latency;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

pub(crate) struct W4 {
    pub(crate) pairs: usize,
    pub(crate) round_trips: usize,
    pub(crate) secs: f64,
    pub(crate) usage: Usage,
    pub(crate) latency: Latency,
}

impl W4 {
    pub(crate) fn per_s(&self) -> f64 {
        self.round_trips as f64 / self.secs
    }
}

pub(crate) fn w4_pairs(
    client: &Arc<dyn PeerClient>,
    pid: i32,
    pairs: usize,
    secs: f64,
    body_bytes: usize,
) -> Res<W4> {
    let stop = Arc::new(AtomicBool::new(false));
    let (ready_tx, ready_rx) = mpsc::channel();
    let responders: Vec<_> = (0..pairs)
        .map(|i| {
            let (client, stop, ready) = (client.clone(), stop.clone(), ready_tx.clone());
            std::thread::spawn(move || client.respond(i, &stop, body_bytes, ready))
        })
        .collect();
    drop(ready_tx);
    // Every responder ready (or gone, which its requester then finds out) before a request.
    for _ in 0..pairs {
        if ready_rx.recv_timeout(CONNECT_TIMEOUT + IO_TIMEOUT).is_err() {
            break;
        }
    }
    let window = Window::starting_now(secs);
    let requesters: Vec<_> = (0..pairs)
        .map(|i| {
            let client = client.clone();
            std::thread::spawn(move || -> Res<Vec<Duration>> {
                let mut lat = Vec::new();
                let mut seq = 0;
                while !window.over() {
                    let m = Msg::new(seq, body_bytes);
                    seq += 1;
                    let t0 = Instant::now();
                    let reply = client.round_trip(i, &m)?;
                    let t1 = Instant::now();
                    if rid_of(&reply.body) != Some(m.id.as_str()) {
                        return Err(format!("requester {i} got the reply to another request"));
                    }
                    if window.counts(t0, t1) {
                        lat.push(t1 - t0);
                    }
                }
                Ok(lat)
            })
        })
        .collect();
    let usage = window.measure(pid);
    let lat = join_all(requesters);
    // Responders end within their wait's timeout once told to.
    stop.store(true, Ordering::SeqCst);
    let served = join_all(responders);
    let lat: Vec<Duration> = lat?.into_iter().flatten().collect();
    served?;
    Ok(W4 {
        pairs,
        round_trips: lat.len(),
        secs: window.secs(),
        usage: usage?,
        latency: Latency::of(lat),
    })
}
