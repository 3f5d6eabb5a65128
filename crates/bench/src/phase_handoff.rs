//! Phases 2 and 3: handoff latency from a send to a parked await, plain and in ack mode.

use crate::base::Res;
use crate::client::{
    await_bytes, expect_accepted, expect_ok, now_ts, open, parse_envelope, read_line, read_raw,
    send_bytes,
};
use crate::disk::{dev_flushes, flushes_since};
use crate::fixtures::{Agent, Fixture};
use crate::hub_process::{cpu_of, HubProcess};
use crate::stats::{Latency, Run};
use agent_hub_proto::wire::{ClientLine, HubLine, IdRequest};
use serde_json::json;
use std::io::Write;
use std::time::Instant;

// ----- phases 2 and 3: handoff latency, plain and in ack mode -----

/// Per handoff: the awaiter connects and writes hello + await in one write, and reads `ok`.
/// The hub reads both lines in one read and handles them before it flushes anything, so once
/// `ok` is back the await is parked. Then the clock starts, the sender connects and writes
/// hello + send, and the clock stops when the awaiter has read the whole envelope line. The
/// sender's ok/accepted are read after that. Hub CPU covers both connections of every handoff.
///
/// With `ack`, the await carries `"ack":true`; after reading the envelope the awaiter writes
/// `{"ack":{"id":…}}` and the clock stops when it has read `{"acked":{"id":…}}` (the time to
/// the envelope line is kept too).
pub(crate) fn phase_handoff(
    hub: &HubProcess,
    fx: &Fixture,
    handoffs: usize,
    ack: bool,
) -> Res<HandoffResult> {
    handoff_between(
        &[hub],
        &fx.hand_tx,
        &fx.hand_rx,
        &fx.hand_rx.name,
        handoffs,
        ack,
    )
}

/// The handoff loop of `phase_handoff`. `hubs[0]` takes the sends; the awaiter parks on the
/// last hub (the same one, or a peer linked by the relay, with `to` naming it `name@peer`).
/// Hub CPU is the sum over `hubs`.
pub(crate) fn handoff_between(
    hubs: &[&HubProcess],
    sender: &Agent,
    awaiter: &Agent,
    to: &str,
    handoffs: usize,
    ack: bool,
) -> Res<HandoffResult> {
    let (tx_hub, rx_hub) = (hubs[0], hubs[hubs.len() - 1]);
    let warmup = (handoffs / 10).clamp(1, 200);
    let ts = now_ts();
    let park = await_bytes(awaiter, None, None, ack);
    let (mut bytes, mut buf, mut rbuf) = (
        Vec::with_capacity(1024),
        Vec::with_capacity(1024),
        Vec::with_capacity(1024),
    );
    let mut lat = Vec::with_capacity(handoffs);
    let mut env_lat = Vec::with_capacity(handoffs);
    let (mut cpu0, mut f0) = (cpu_of(hubs)?, dev_flushes());
    let mut t_start = Instant::now();
    for i in 0..warmup + handoffs {
        if i == warmup {
            (cpu0, f0) = (cpu_of(hubs)?, dev_flushes());
            t_start = Instant::now();
        }
        let mut rx = open(rx_hub.addr, &park)?;
        expect_ok(&mut rx, &mut rbuf)?;
        let id = send_bytes(&mut bytes, sender, to, "bench", None, &ts, i)?;
        let t0 = Instant::now();
        let mut tx = open(tx_hub.addr, &bytes)?;
        read_raw(&mut rx, &mut rbuf)?;
        let to_envelope = t0.elapsed();
        match HubLine::decode(&rbuf) {
            Ok(HubLine::Envelope(text)) if parse_envelope(&text)?.id == id => {}
            other => return Err(format!("handoff: expected envelope {id}, got {other:?}")),
        }
        let elapsed = if ack {
            let line = ClientLine::Ack(IdRequest { id: id.clone() }).encode();
            rx.get_mut()
                .write_all(line.as_bytes())
                .map_err(|e| format!("write ack: {e}"))?;
            match read_line(&mut rx, &mut rbuf)? {
                HubLine::Acked { id: got } if got == id => {}
                other => return Err(format!("ack handoff: expected acked {id}, got {other:?}")),
            }
            t0.elapsed()
        } else {
            to_envelope
        };
        expect_ok(&mut tx, &mut buf)?;
        expect_accepted(&mut tx, &mut buf, &id)?;
        if i >= warmup {
            lat.push(elapsed);
            env_lat.push(to_envelope);
        }
    }
    let wall = t_start.elapsed();
    let hub_cpu = cpu_of(hubs)?.saturating_sub(cpu0);
    Ok(HandoffResult {
        run: Run {
            clients: 1,
            ops: handoffs,
            wall,
            hub_cpu,
            latency: Some(Latency::of(lat)),
            flushes: flushes_since(f0),
        },
        warmup,
        to_envelope: ack.then(|| Latency::of(env_lat)),
    })
}

pub(crate) struct HandoffResult {
    /// Latency: until the envelope line, or in ack mode until the `acked` line.
    pub(crate) run: Run,
    pub(crate) warmup: usize,
    /// Ack mode only: until the envelope line.
    pub(crate) to_envelope: Option<Latency>,
}

impl HandoffResult {
    pub(crate) fn to_json(&self) -> serde_json::Value {
        let mut v = self.run.to_json();
        v["warmup"] = json!(self.warmup);
        if let Some(l) = &self.to_envelope {
            v["latency_to_envelope"] = l.to_json();
        }
        v
    }
}
