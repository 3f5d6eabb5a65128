//! Phase 4: RSS per parked await.

use crate::base::Res;
use crate::client::{await_bytes, expect_ok, open};
use crate::fixtures::Fixture;
use crate::hub_process::HubProcess;
use crate::options::{POLL_STEP, SETTLE_TIMEOUT};
use crate::stats::Cpu;
use std::io::Read;
use std::time::{Duration, Instant};

// ----- phase 4: RSS per parked await -----

pub(crate) struct ParkedResult {
    pub(crate) count: usize,
    pub(crate) rss_before: u64,
    pub(crate) rss_parked: u64,
    pub(crate) rss_after_close: u64,
    pub(crate) park_cpu: Cpu,
    pub(crate) park_wall: Duration,
    pub(crate) close_cpu: Cpu,
}

impl ParkedResult {
    pub(crate) fn bytes_per_await(&self) -> f64 {
        (self.rss_parked as f64 - self.rss_before as f64) / self.count as f64
    }
}

/// Parks `count` awaits (no timeout, each on its own connection, `ok` read so each is parked),
/// reads VmRSS, then closes them all and waits (bounded poll of /proc/PID/fd) until the hub has
/// dropped them.
pub(crate) fn phase_parked(hub: &HubProcess, fx: &Fixture, count: usize) -> Res<ParkedResult> {
    let park = await_bytes(&fx.parker, None, None, false);
    let mut buf = Vec::with_capacity(64);
    let fds_before = hub.open_fds()?;
    let rss_before = hub.rss_bytes()?;
    let cpu0 = hub.cpu()?;
    let t0 = Instant::now();
    let mut conns = Vec::with_capacity(count);
    for _ in 0..count {
        let mut conn = open(hub.addr, &park)?;
        expect_ok(&mut conn, &mut buf)?;
        conns.push(conn);
    }
    let park_wall = t0.elapsed();
    let cpu1 = hub.cpu()?;
    let rss_parked = hub.rss_bytes()?;
    let fds_parked = hub.open_fds()?;
    if fds_parked < fds_before + count {
        return Err(format!(
            "hub holds {fds_parked} descriptors with {count} awaits parked (was {fds_before})"
        ));
    }
    // A parked await has nothing to say: any byte here would be a protocol error.
    for conn in &mut conns {
        conn.get_ref()
            .set_nonblocking(true)
            .map_err(|e| e.to_string())?;
        let mut probe = [0u8; 1];
        match conn.get_mut().read(&mut probe) {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            other => return Err(format!("a parked await got {other:?} instead of waiting")),
        }
    }
    drop(conns);
    let until = Instant::now() + SETTLE_TIMEOUT;
    while hub.open_fds()? > fds_before {
        if Instant::now() >= until {
            return Err(format!(
                "the hub still holds {} descriptors {SETTLE_TIMEOUT:?} after the close",
                hub.open_fds()?
            ));
        }
        std::thread::sleep(POLL_STEP);
    }
    let close_cpu = hub.cpu()?.saturating_sub(cpu1);
    Ok(ParkedResult {
        count,
        rss_before,
        rss_parked,
        rss_after_close: hub.rss_bytes()?,
        park_cpu: cpu1.saturating_sub(cpu0),
        park_wall,
        close_cpu,
    })
}
