//! Phase 5: round trips per second of concurrent request → reply pairs.

use crate::base::Res;
use crate::client::{
    await_bytes, expect_ok, join_all, now_ts, open, parse_envelope, read_line, send_bytes,
    send_once,
};
use crate::disk::{dev_flushes, flushes_since};
use crate::fixtures::Fixture;
use crate::hub_process::HubProcess;
use crate::stats::{Latency, Run};
use agent_hub_proto::wire::HubLine;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

// ----- phase 5: request/reply round trips -----

/// Pair i is requester-i and responder-i, each on its own thread. One round trip, timed by the
/// requester: (1) send a request to responder-i; (2) await with replyTo = the request's id
/// until (3) the responder, whose unfiltered await delivered the request, (4) has sent a result
/// with correlationId = that id, and the requester has read it. So one round trip is two sends
/// and two awaits: four connections, two envelopes, each audited. The requester stops after
/// `secs` and sends the responder a `stop` envelope.
pub(crate) fn phase_pairs(hub: &HubProcess, fx: &Fixture, pairs: usize, secs: f64) -> Res<Run> {
    let start = Arc::new(Barrier::new(2 * pairs + 1));
    let failed = Arc::new(AtomicBool::new(false));
    let mut requesters = Vec::new();
    let mut responders = Vec::new();
    for i in 0..pairs {
        let (addr, me, peer, go, failed) = (
            hub.addr,
            fx.requesters[i].clone(),
            fx.responders[i].name.clone(),
            start.clone(),
            failed.clone(),
        );
        requesters.push(std::thread::spawn(
            move || -> Res<(Vec<Duration>, Instant)> {
                let ts = now_ts();
                let (mut bytes, mut buf) = (Vec::with_capacity(1024), Vec::with_capacity(1024));
                let mut lat = Vec::new();
                go.wait();
                let deadline = Instant::now() + Duration::from_secs_f64(secs);
                let mut seq = 0;
                let result = (|| -> Res<()> {
                    while Instant::now() < deadline && !failed.load(Ordering::Relaxed) {
                        let id = send_bytes(&mut bytes, &me, &peer, "request", None, &ts, seq)?;
                        let t0 = Instant::now();
                        send_once(addr, &bytes, &id, &mut buf)?;
                        let mut conn =
                            open(addr, &await_bytes(&me, Some(id.clone()), None, false))?;
                        expect_ok(&mut conn, &mut buf)?;
                        match read_line(&mut conn, &mut buf)? {
                            HubLine::Envelope(text) => {
                                let got = parse_envelope(&text)?;
                                if got.correlation_id.as_deref() != Some(id.as_str())
                                    || got.kind != "result"
                                {
                                    return Err(format!(
                                        "requester got a reply to {:?}, wanted {id}",
                                        got.correlation_id
                                    ));
                                }
                            }
                            other => return Err(format!("requester: unexpected {other:?}")),
                        }
                        lat.push(t0.elapsed());
                        seq += 1;
                    }
                    Ok(())
                })();
                let finished = Instant::now();
                if result.is_err() {
                    failed.store(true, Ordering::Relaxed);
                }
                // Always release the responder, even after a failure, so no thread waits forever.
                let id = send_bytes(&mut bytes, &me, &peer, "stop", None, &ts, seq)?;
                send_once(addr, &bytes, &id, &mut buf)?;
                result.map(|()| (lat, finished))
            },
        ));
        let (addr, me, peer, go) = (
            hub.addr,
            fx.responders[i].clone(),
            fx.requesters[i].clone(),
            start.clone(),
        );
        responders.push(std::thread::spawn(move || -> Res<()> {
            let ts = now_ts();
            let park = await_bytes(&me, None, None, false);
            let (mut bytes, mut buf) = (Vec::with_capacity(1024), Vec::with_capacity(1024));
            go.wait();
            for seq in 0.. {
                let mut conn = open(addr, &park)?;
                expect_ok(&mut conn, &mut buf)?;
                let got = match read_line(&mut conn, &mut buf)? {
                    HubLine::Envelope(text) => parse_envelope(&text)?,
                    other => return Err(format!("responder: unexpected {other:?}")),
                };
                drop(conn);
                if got.kind == "stop" {
                    break;
                }
                let id = send_bytes(
                    &mut bytes,
                    &me,
                    &peer.name,
                    "result",
                    Some(got.id),
                    &ts,
                    seq,
                )?;
                send_once(addr, &bytes, &id, &mut buf)?;
            }
            Ok(())
        }));
    }
    let (cpu0, f0) = (hub.cpu()?, dev_flushes());
    start.wait();
    let t0 = Instant::now();
    let req = join_all(requesters);
    let resp = join_all(responders);
    let hub_cpu = hub.cpu()?.saturating_sub(cpu0);
    let flushes = flushes_since(f0);
    let req = req?;
    resp?;
    let end = req.iter().map(|(_, f)| *f).max().unwrap_or(t0);
    let lat: Vec<Duration> = req.into_iter().flat_map(|(l, _)| l).collect();
    let (ops, latency) = (lat.len(), Some(Latency::of(lat)));
    Ok(Run {
        clients: pairs,
        ops,
        wall: end.duration_since(t0),
        hub_cpu,
        latency,
        flushes,
    })
}
