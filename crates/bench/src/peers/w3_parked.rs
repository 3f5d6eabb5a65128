//! W3: memory per parked waiter. K blocking waits at once, each on its own connection and each
//! known parked (each client's `arm`), armed from four threads; the server's VmRSS before and
//! with all of them parked, over K. Then all are closed and the bench waits (a bounded poll of
//! `/proc/PID/fd`) until the server has let go of them before the next workload.

use super::servers::{fds_of, rss_of};
use super::target::{PeerClient, Queue};
use crate::base::Res;
use crate::client::join_all;
use crate::options::{POLL_STEP, SETTLE_TIMEOUT};
use std::sync::Arc;
use std::time::{Duration, Instant};

const ARM_THREADS: usize = 4;

pub(crate) struct W3 {
    pub(crate) waiters: usize,
    pub(crate) rss_before: u64,
    pub(crate) rss_parked: u64,
    pub(crate) arm_wall: Duration,
}

impl W3 {
    pub(crate) fn bytes_per_waiter(&self) -> f64 {
        (self.rss_parked as f64 - self.rss_before as f64) / self.waiters as f64
    }
}

pub(crate) fn w3_parked(client: &Arc<dyn PeerClient>, pid: i32, waiters: usize) -> Res<W3> {
    let fds_before = fds_of(pid)?;
    let rss_before = rss_of(pid)?;
    let t0 = Instant::now();
    let mut handles = Vec::new();
    for t in 0..ARM_THREADS.min(waiters) {
        let client = client.clone();
        handles.push(std::thread::spawn(move || {
            (t..waiters)
                .step_by(ARM_THREADS)
                .map(|i| {
                    client
                        .arm(Queue::Parked(i), None, None)
                        .map_err(String::from)
                })
                .collect::<Res<Vec<_>>>()
        }));
    }
    let conns: Vec<_> = join_all(handles)?.into_iter().flatten().collect();
    let arm_wall = t0.elapsed();
    let rss_parked = rss_of(pid)?;
    // Every waiter is known parked (its `arm`); the descriptor count is no check of that, as
    // the server may still be closing the previous workload's connections.
    drop(conns);
    let until = Instant::now() + SETTLE_TIMEOUT;
    while fds_of(pid)? > fds_before && Instant::now() < until {
        std::thread::sleep(POLL_STEP);
    }
    Ok(W3 {
        waiters,
        rss_before,
        rss_parked,
        arm_wall,
    })
}
