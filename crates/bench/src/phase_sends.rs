//! Phase 1: connection-per-op sends with C client threads, then the queue drained.

use crate::base::Res;
use crate::client::{
    await_bytes, expect_ok, join_all, now_ts, open, read_line, send_bytes, send_once, split,
};
use crate::disk::{dev_flushes, flushes_since};
use crate::fixtures::{Agent, Fixture};
use crate::hub_process::{cpu_of, HubProcess};
use crate::options::DRAIN_THREADS;
use crate::stats::{Latency, Run};
use agent_hub_proto::wire::HubLine;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

// ----- phase 1: connection-per-op sends, then a drain -----

pub(crate) fn phase_sends(
    hub: &HubProcess,
    fx: &Fixture,
    clients: usize,
    total: usize,
) -> Res<Run> {
    send_run(&[hub], &fx.sender, &fx.sink.name, clients, total, None)
}

/// Work that runs alongside a send run and ends it (started at the senders' barrier).
pub(crate) type Drain = Box<dyn FnOnce(Arc<Barrier>) -> Res<()> + Send>;

/// `total` connection-per-op sends from `from` to `to` on `hubs[0]`, over `clients` threads.
/// With `until`, the clock runs until that also finishes (it is started with the senders):
/// the forwarding phase's drain on the peer hub. Hub CPU is the sum over `hubs`.
pub(crate) fn send_run(
    hubs: &[&HubProcess],
    from: &Agent,
    to: &str,
    clients: usize,
    total: usize,
    until: Option<Drain>,
) -> Res<Run> {
    let parties = clients + 1 + usize::from(until.is_some());
    let start = Arc::new(Barrier::new(parties));
    let waiter = until.map(|f| {
        let start = start.clone();
        std::thread::spawn(move || f(start))
    });
    let mut handles = Vec::new();
    for count in split(total, clients) {
        let (addr, from, to, start) = (hubs[0].addr, from.clone(), to.to_owned(), start.clone());
        handles.push(std::thread::spawn(move || -> Res<Vec<Duration>> {
            let ts = now_ts();
            let (mut bytes, mut buf) = (Vec::with_capacity(1024), Vec::with_capacity(1024));
            let mut lat = Vec::with_capacity(count);
            start.wait();
            for seq in 0..count {
                let id = send_bytes(&mut bytes, &from, &to, "bench", None, &ts, seq)?;
                let t0 = Instant::now();
                send_once(addr, &bytes, &id, &mut buf)?;
                lat.push(t0.elapsed());
            }
            Ok(lat)
        }));
    }
    let (cpu0, f0) = (cpu_of(hubs)?, dev_flushes());
    start.wait();
    let t0 = Instant::now();
    let lats = join_all(handles)?;
    if let Some(w) = waiter {
        w.join()
            .map_err(|_| "the drain thread panicked".to_owned())??;
    }
    let wall = t0.elapsed();
    let hub_cpu = cpu_of(hubs)?.saturating_sub(cpu0);
    let latency = Some(Latency::of(lats.into_iter().flatten().collect()));
    Ok(Run {
        clients,
        ops: total,
        wall,
        hub_cpu,
        latency,
        flushes: flushes_since(f0),
    })
}

/// Takes every queued envelope back with polling awaits (timeoutSecs 0) until each drain
/// thread sees a timeout, and checks that exactly `expected` came out: the queue is empty
/// again for the next run, and the hub neither lost nor duplicated a send.
pub(crate) fn phase_drain(
    hub: &HubProcess,
    fx: &Fixture,
    after_clients: usize,
    expected: usize,
) -> Res<Run> {
    let bytes: Arc<[u8]> = Arc::from(await_bytes(&fx.sink, None, Some(0), false));
    let start = Arc::new(Barrier::new(DRAIN_THREADS + 1));
    let mut handles = Vec::new();
    for _ in 0..DRAIN_THREADS {
        let (addr, bytes, start) = (hub.addr, bytes.clone(), start.clone());
        handles.push(std::thread::spawn(move || -> Res<usize> {
            let mut buf = Vec::with_capacity(1024);
            let mut got = 0;
            start.wait();
            loop {
                let mut conn = open(addr, &bytes)?;
                expect_ok(&mut conn, &mut buf)?;
                match read_line(&mut conn, &mut buf)? {
                    HubLine::Envelope(_) => got += 1,
                    HubLine::Timeout => return Ok(got),
                    other => return Err(format!("drain: unexpected {other:?}")),
                }
            }
        }));
    }
    let (cpu0, f0) = (hub.cpu()?, dev_flushes());
    start.wait();
    let t0 = Instant::now();
    let got: usize = join_all(handles)?.into_iter().sum();
    let wall = t0.elapsed();
    let hub_cpu = hub.cpu()?.saturating_sub(cpu0);
    let flushes = flushes_since(f0);
    if got != expected {
        return Err(format!(
            "drain after the C={after_clients} run took {got} envelopes, expected {expected}"
        ));
    }
    // Every drain thread's last await timed out: its cost is in the CPU, not in `ops`.
    Ok(Run {
        clients: DRAIN_THREADS,
        ops: got,
        wall,
        hub_cpu,
        latency: None,
        flushes,
    })
}
