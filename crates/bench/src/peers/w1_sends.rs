//! W1: connection-per-op sends. C client threads, each op a new TCP connection, the target's
//! opening step, one enqueue acknowledged, and the close; messages pile up on a queue nobody
//! reads (NATS drops them: no subscriber). Server CPU µs and write syscalls per op.

use super::target::{Msg, PeerClient, Queue};
use super::window::{Usage, Window};
use crate::base::Res;
use crate::client::join_all;
use crate::stats::Latency;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub(crate) struct W1 {
    pub(crate) clients: usize,
    pub(crate) ops: usize,
    pub(crate) secs: f64,
    pub(crate) usage: Usage,
    pub(crate) latency: Latency,
}

impl W1 {
    pub(crate) fn ops_per_s(&self) -> f64 {
        self.ops as f64 / self.secs
    }
}

pub(crate) fn w1_sends(
    client: &Arc<dyn PeerClient>,
    pid: i32,
    clients: usize,
    secs: f64,
    body_bytes: usize,
) -> Res<W1> {
    let window = Window::starting_now(secs);
    let mut handles = Vec::with_capacity(clients);
    for t in 0..clients {
        let client = client.clone();
        handles.push(std::thread::spawn(move || -> Res<Vec<Duration>> {
            let mut lat = Vec::with_capacity(1 << 14);
            let mut seq = (t as u64) << 40;
            while !window.over() {
                let m = Msg::new(seq, body_bytes);
                seq += 1;
                let t0 = Instant::now();
                client.enqueue(Queue::Sink, &m)?;
                let t1 = Instant::now();
                if window.counts(t0, t1) {
                    lat.push(t1 - t0);
                }
            }
            Ok(lat)
        }));
    }
    let usage = window.measure(pid);
    let lat: Vec<Duration> = join_all(handles)?.into_iter().flatten().collect();
    Ok(W1 {
        clients,
        ops: lat.len(),
        secs: window.secs(),
        usage: usage?,
        latency: Latency::of(lat),
    })
}
