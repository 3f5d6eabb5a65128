//! The scale phase (`--scale`; issue 13, docs/performance.md "How cost grows with work"): how
//! the release hub's cost grows with the work it holds, each figure against its target.
//!
//! (a) restart with `--scale-restart` queued envelopes in the SQLite store: from spawning the
//!     server to its first answer (median of `--scale-restarts`);
//! (b) hub memory per queued envelope against its wire size, 128 B and 1 KiB bodies, both
//!     stores: RSS before and after `--scale-memory` envelopes sent, and after as many again,
//!     the target judged on the second (each further envelope's cost);
//! (c) hub CPU per send and per await with `--scale-queue` envelopes queued for one agent and
//!     with `--scale-agents` agents each holding one, against an empty hub (`--scale-ops` timed
//!     operations each, one client, connection per op);
//! (d) hub CPU per `status` (asked by the sender and by the recipient) and per `who` on the
//!     hub restarted in (a), whose ledger holds every one of its ids, against a small hub.
//!
//! The measured operations check what they get (the envelope asked for, the status state and
//! position), so a figure is never the cost of an error. Refuses: anything inside the server.

use crate::base::progress;
use crate::base::Res;
use crate::client::{await_bytes, expect_ok, join_all, open, parse_envelope, read_line};
use crate::fixtures::Agent;
use crate::hub_process::HubProcess;
use crate::options::{Opts, StoreKind, STOP_TIMEOUT};
use crate::scale_fixture;
use crate::scale_fixture::{fill_by_sends, scale_send, ScaleHub, BULK, SENDER};
use agent_hub_proto::wire::HubLine;
use serde_json::json;
use std::fmt::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

/// A cost is "flat" when it is at most this multiple of the empty hub's: a busy shared machine
/// moves single figures by tens of percent; a scan of 100,000 entries moves them by orders of
/// magnitude.
pub(crate) const FLAT_RATIO: f64 = 1.5;
/// Issue 13's targets.
pub(crate) const TARGET_RESTART_MS: f64 = 2_000.0;
pub(crate) const TARGET_MEMORY_RATIO: f64 = 1.5;
/// Body sizes of the memory figure.
pub(crate) const MEMORY_BODIES: [usize; 2] = [128, 1024];
/// Body size of every other figure.
const BODY: usize = 128;
/// How long a scale hub gets to exit on SIGTERM: one holding a million envelopes frees them
/// and closes its store first, slowly on a busy machine.
const SCALE_STOP_TIMEOUT: Duration = Duration::from_secs(300);
/// Sender threads that fill queues before a measurement.
const FILL_THREADS: usize = 4;

/// One line of the table: a figure, its target, what was measured and whether it meets it.
#[derive(Debug, Clone)]
pub(crate) struct ScaleRow {
    pub(crate) figure: String,
    pub(crate) target: String,
    pub(crate) measured: String,
    pub(crate) met: bool,
}

#[derive(Debug, Default)]
pub(crate) struct ScaleReport {
    pub(crate) rows: Vec<ScaleRow>,
}

impl ScaleReport {
    fn row(&mut self, figure: String, target: String, measured: String, met: bool) {
        progress(&format!(
            "  {figure}: {measured} (target {target}) {}",
            verdict(met)
        ));
        self.rows.push(ScaleRow {
            figure,
            target,
            measured,
            met,
        });
    }

    pub(crate) fn to_table(&self) -> String {
        let mut s = String::from("| figure | target | measured | verdict |\n|---|---|---|---|\n");
        for r in &self.rows {
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} |",
                r.figure,
                r.target,
                r.measured,
                verdict(r.met)
            );
        }
        s
    }

    pub(crate) fn to_json(&self) -> serde_json::Value {
        serde_json::Value::Array(
            self.rows
                .iter()
                .map(|r| json!({"figure": r.figure, "target": r.target, "measured": r.measured, "met": r.met}))
                .collect(),
        )
    }
}

fn verdict(met: bool) -> &'static str {
    if met {
        "met"
    } else {
        "MISSED"
    }
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs.get(xs.len() / 2).copied().unwrap_or(f64::NAN)
}

/// Runs the whole phase in `work`.
pub(crate) fn phase_scale(opts: &Opts, server: &Path, work: &Path) -> Res<ScaleReport> {
    let mut report = ScaleReport::default();
    let mut n = 0;
    let mut label = |what: &str| {
        n += 1;
        format!("scale-{n}-{what}")
    };

    // (a) and (d): a store of `scale_restart` queued envelopes, restarted.
    progress(&format!(
        "scale (a): restart with {} queued envelopes in SQLite",
        opts.scale_restart
    ));
    let big = ScaleHub::write(work, &label("restart"), opts, StoreKind::Sqlite, 0)?;
    let fill = Instant::now();
    big.fill_store(opts.scale_restart, BODY)?;
    progress(&format!(
        "  store written in {:.1} s",
        fill.elapsed().as_secs_f64()
    ));
    let (mut times, mut cpus, mut stops) = (Vec::new(), Vec::new(), Vec::new());
    let mut rss = 0;
    for _ in 0..opts.scale_restarts.max(1) {
        let t0 = Instant::now();
        let hub = big.start(server)?;
        // Builds before commit a245879 bound the listener before restoring the store, so a
        // TCP connect alone would stop their clock early: the clock stops at the hub's
        // answer to a hello and a `status` of the last envelope, which the loop gives only
        // once everything is restored, whichever build runs.
        let mut bytes = big.agent(SENDER)?.hello.to_vec();
        let last = opts.scale_restart - 1;
        let id = scale_fixture::fixture_id(last);
        bytes.extend_from_slice(format!("{{\"status\":{{\"id\":\"{id}\"}}}}\n").as_bytes());
        let mut conn = open(hub.addr, &bytes)?;
        // The answer waits for the whole restore: as long as the ready line may take.
        conn.get_ref()
            .set_read_timeout(Some(Duration::from_secs(600)))
            .map_err(|e| e.to_string())?;
        let mut buf = Vec::new();
        expect_ok(&mut conn, &mut buf)?;
        let answer = read_line(&mut conn, &mut buf)?;
        times.push(t0.elapsed().as_secs_f64() * 1000.0);
        // Everything the hub has spent since exec is its startup: on a machine whose other
        // users take the cores, the CPU time tells what the restart itself costs.
        let cpu = hub.cpu()?;
        cpus.push(cpu.clock.unwrap_or(cpu.stat).as_secs_f64() * 1000.0);
        match answer {
            HubLine::Status(st) if st.state == "queued" => {}
            other => return Err(format!("after the restart, status of {id}: {other:?}")),
        }
        rss = hub.rss_bytes()?;
        // SIGTERM → exit: the orderly stop of a hub holding every envelope (SPEC §7.4).
        let t1 = Instant::now();
        hub.stop_within(SCALE_STOP_TIMEOUT)?;
        stops.push(t1.elapsed().as_secs_f64() * 1000.0);
    }
    let restart_ms = median(times.clone());
    let stop_ms = median(stops);
    let cpu_ms = median(cpus);
    report.row(
        format!(
            "(a) restart, exec → first answer, {} queued (SQLite)",
            opts.scale_restart
        ),
        format!("≤ {TARGET_RESTART_MS:.0} ms"),
        format!(
            "{restart_ms:.0} ms (runs {}; hub CPU {cpu_ms:.0} ms; RSS after load {:.0} MiB)",
            times
                .iter()
                .map(|t| format!("{t:.0}"))
                .collect::<Vec<_>>()
                .join(", "),
            rss as f64 / (1 << 20) as f64
        ),
        restart_ms <= TARGET_RESTART_MS,
    );
    report.row(
        format!(
            "(a) stop, SIGTERM → exit, {} queued (SQLite)",
            opts.scale_restart
        ),
        format!(
            "≤ {:.0} ms (the bench's usual stop timeout)",
            STOP_TIMEOUT.as_secs_f64() * 1000.0
        ),
        format!("{stop_ms:.0} ms"),
        stop_ms <= STOP_TIMEOUT.as_secs_f64() * 1000.0,
    );
    if opts.scale_restart_only {
        return Ok(report);
    }

    // (d) status and who on the big hub, against a small one.
    progress("scale (d): status and who with a large ledger");
    let small = ScaleHub::write(work, &label("small-ledger"), opts, StoreKind::Sqlite, 0)?;
    small.fill_store(1_000, BODY)?;
    let small_costs = status_who_costs(&small, server, opts, 1_000)?;
    let big_costs = status_who_costs(&big, server, opts, opts.scale_restart)?;
    for (what, s, b) in [
        ("status asked by the sender", small_costs.0, big_costs.0),
        ("status asked by the recipient", small_costs.1, big_costs.1),
        ("who", small_costs.2, big_costs.2),
    ] {
        report.row(
            format!(
                "(d) hub CPU per {what}, {} ids vs 1,000",
                opts.scale_restart
            ),
            format!("flat (≤ {FLAT_RATIO}× the small ledger's)"),
            format!("{b:.1} µs vs {s:.1} µs ({:.2}×)", b / s),
            b <= s * FLAT_RATIO,
        );
    }

    // (b) memory per queued envelope.
    for kind in [StoreKind::Memory, StoreKind::Sqlite] {
        for body in MEMORY_BODIES {
            progress(&format!(
                "scale (b): memory per queued envelope, {} store, {body} B bodies",
                kind.name()
            ));
            let fx = ScaleHub::write(work, &label("memory"), opts, kind, 0)?;
            let hub = fx.start(server)?;
            let sender = fx.agent(SENDER)?;
            // A warm-up, so the hub's buffers are in the baseline.
            fill_by_sends(hub.addr, sender, BULK, 500, body, FILL_THREADS)?;
            let before = hub.rss_bytes()?;
            let n = opts.scale_memory;
            let wire = fill_by_sends(hub.addr, sender, BULK, n, body, FILL_THREADS)?;
            let mid = hub.rss_bytes()?;
            // The same again on top: what each further envelope costs, without what the hub
            // pays once whatever it holds. SQLite's page cache is such a cost: it fills up to
            // its bound (2 MiB, SQLite's default `cache_size`) within the first fill, so the
            // average from empty counts it against those envelopes alone (42 B each at
            // 50,000; docs/performance.md "Memory per envelope"). Both
            // windows hold one doubling of the queue and of the ledger's table when `n` is
            // the default.
            fill_by_sends(hub.addr, sender, BULK, n, body, FILL_THREADS)?;
            let after = hub.rss_bytes()?;
            hub.stop_within(SCALE_STOP_TIMEOUT)?;
            let per = |from: u64, to: u64| to.saturating_sub(from) as f64 / n as f64;
            let (first, next) = (per(before, mid), per(mid, after));
            let ratio = next / wire as f64;
            report.row(
                format!(
                    "(b) hub memory per queued envelope, {body} B body ({wire} B on the wire), {}",
                    kind.name()
                ),
                format!("≤ {TARGET_MEMORY_RATIO}× wire size, per further envelope"),
                format!(
                    "{next:.0} B ({ratio:.2}×) per envelope from {n} to {}; {first:.0} B ({:.2}×) \
                     from empty to {n}; RSS +{:.1} MiB for {}",
                    2 * n,
                    first / wire as f64,
                    after.saturating_sub(before) as f64 / (1 << 20) as f64,
                    2 * n
                ),
                ratio <= TARGET_MEMORY_RATIO,
            );
        }
    }

    // (c) send and await with a long queue and with many agents.
    progress("scale (c): send and await, empty hub");
    let base = FlatCosts::measure(work, &label("flat-empty"), opts, server, Shape::Empty)?;
    progress(&format!(
        "scale (c): send and await, {} queued for one agent",
        opts.scale_queue
    ));
    let queue = FlatCosts::measure(work, &label("flat-queue"), opts, server, Shape::LongQueue)?;
    progress(&format!(
        "scale (c): send and await, {} agents",
        opts.scale_agents
    ));
    let agents = FlatCosts::measure(work, &label("flat-agents"), opts, server, Shape::ManyAgents)?;
    let shapes = [
        (format!("{} queued for one agent", opts.scale_queue), &queue),
        (format!("{} agents", opts.scale_agents), &agents),
    ];
    for (shape, c) in shapes {
        for (what, b, m) in [
            ("send", base.send, c.send),
            (
                "await, filter matching the tail",
                base.await_tail,
                c.await_tail,
            ),
            ("await, no filter (the head)", base.await_head, c.await_head),
        ] {
            report.row(
                format!("(c) hub CPU per {what}, {shape}"),
                format!("flat (≤ {FLAT_RATIO}× the empty hub's)"),
                format!("{m:.1} µs vs {b:.1} µs ({:.2}×)", m / b),
                m <= b * FLAT_RATIO,
            );
        }
    }
    Ok(report)
}

/// Hub CPU µs per op for one client doing `ops` connection-per-op requests built by `line`,
/// each answer checked by `check`.
fn cpu_per_op(
    hub: &HubProcess,
    agent: &Agent,
    ops: usize,
    mut line: impl FnMut(usize) -> String,
    mut check: impl FnMut(usize, HubLine) -> Res<()>,
) -> Res<f64> {
    let mut buf = Vec::new();
    let before = hub.cpu()?;
    for i in 0..ops {
        let mut bytes = agent.hello.to_vec();
        bytes.extend_from_slice(line(i).as_bytes());
        let mut conn = open(hub.addr, &bytes)?;
        expect_ok(&mut conn, &mut buf)?;
        let got = read_line(&mut conn, &mut buf)?;
        check(i, got)?;
    }
    let cpu = hub.cpu()?.saturating_sub(before);
    Ok(cpu.clock_us_per(ops).unwrap_or_else(|| cpu.us_per(ops)))
}

/// Hub CPU per status (by the sender, by the recipient) and per who on `fx`'s store of `n`.
fn status_who_costs(fx: &ScaleHub, server: &Path, opts: &Opts, n: usize) -> Res<(f64, f64, f64)> {
    let hub = fx.start(server)?;
    let ops = opts.scale_ops;
    let last = n - 1;
    let status = |i: usize| {
        // Spread over the whole ledger; the last one's position is checked.
        let seq = if i == 0 { last } else { (i * 7919) % n };
        format!(
            "{{\"status\":{{\"id\":\"{}\"}}}}\n",
            scale_fixture::fixture_id(seq)
        )
    };
    let check = |i: usize, got: HubLine| match got {
        HubLine::Status(st) if st.state == "queued" => {
            if i == 0 && st.position != Some(n as u64) {
                return Err(format!(
                    "status of the last envelope: position {:?}, not {n}",
                    st.position
                ));
            }
            Ok(())
        }
        other => Err(format!("expected a queued status, got {other:?}")),
    };
    let by_sender = cpu_per_op(&hub, fx.agent(SENDER)?, ops, status, check)?;
    let by_recipient = cpu_per_op(&hub, fx.agent(BULK)?, ops, status, check)?;
    let who = cpu_per_op(
        &hub,
        fx.agent(SENDER)?,
        ops,
        |_| "{\"who\":{}}\n".to_owned(),
        |_, got| match got {
            HubLine::Who(p)
                if p.agents
                    .iter()
                    .any(|a| a.name == BULK && a.queued == n as u64) =>
            {
                Ok(())
            }
            other => Err(format!(
                "expected who with {BULK}'s {n} queued, got {other:?}"
            )),
        },
    )?;
    hub.stop_within(SCALE_STOP_TIMEOUT)?;
    Ok((by_sender, by_recipient, who))
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Shape {
    Empty,
    LongQueue,
    ManyAgents,
}

/// Hub CPU µs per send, per await whose filter matches the newest envelope, and per
/// unfiltered await.
struct FlatCosts {
    send: f64,
    await_tail: f64,
    await_head: f64,
}

impl FlatCosts {
    fn measure(
        work: &Path,
        label: &str,
        opts: &Opts,
        server: &Path,
        shape: Shape,
    ) -> Res<FlatCosts> {
        let extra = if shape == Shape::ManyAgents {
            opts.scale_agents
        } else {
            0
        };
        let fx = ScaleHub::write(work, label, opts, StoreKind::Memory, extra)?;
        let hub = fx.start(server)?;
        let sender = fx.agent(SENDER)?.clone();
        let ops = opts.scale_ops;
        // The queued envelopes the awaits at the head take, plus the shape's load.
        fill_by_sends(hub.addr, &sender, BULK, ops, BODY, FILL_THREADS)?;
        match shape {
            Shape::Empty => {}
            Shape::LongQueue => {
                fill_by_sends(
                    hub.addr,
                    &sender,
                    BULK,
                    opts.scale_queue,
                    BODY,
                    FILL_THREADS,
                )?;
            }
            Shape::ManyAgents => {
                let names: Vec<String> = (0..opts.scale_agents).map(|i| format!("a{i}")).collect();
                let handles: Vec<_> = names
                    .chunks(names.len().div_ceil(FILL_THREADS).max(1))
                    .map(|chunk| {
                        let (chunk, sender, addr) = (chunk.to_vec(), sender.clone(), hub.addr);
                        std::thread::spawn(move || -> Res<()> {
                            for name in chunk {
                                fill_by_sends(addr, &sender, &name, 1, BODY, 1)?;
                            }
                            Ok(())
                        })
                    })
                    .collect();
                join_all(handles)?;
            }
        }
        // Sends with correlation ids, to BULK (behind its queue) or spread over the agents.
        let target = |i: usize| match shape {
            Shape::ManyAgents => format!("a{}", (i * 7919) % opts.scale_agents),
            _ => BULK.to_owned(),
        };
        // Built before the clock starts: only the hub's side is timed.
        let mut sends = Vec::with_capacity(ops);
        let mut out = Vec::new();
        for i in 0..ops {
            let corr = Some(format!("corr-{i}"));
            let (id, _) = scale_send(&sender, &target(i), "result", corr, BODY, i, &mut out)?;
            // `cpu_per_op` adds the hello itself.
            let line = String::from_utf8_lossy(&out[sender.hello.len()..]).into_owned();
            sends.push((id, line));
        }
        let send = cpu_per_op(
            &hub,
            &sender,
            ops,
            |i| sends[i].1.clone(),
            |i, got| match got {
                HubLine::Accepted { id, .. } if id == sends[i].0 => Ok(()),
                other => Err(format!("expected accepted, got {other:?}")),
            },
        )?;
        // Each await names the newest envelope of its agent's queue: the tail.
        let waiter = |i: usize| fx.agent(&target(i)).cloned();
        let await_with = |filter: Option<usize>| -> Res<f64> {
            let before = hub.cpu()?;
            let mut buf = Vec::new();
            for i in (0..ops).rev() {
                let agent = waiter(i)?;
                let reply_to = filter.map(|_| format!("corr-{i}"));
                let bytes = await_bytes(&agent, reply_to.clone(), Some(0), false);
                let mut conn = open(hub.addr, &bytes)?;
                expect_ok(&mut conn, &mut buf)?;
                match read_line(&mut conn, &mut buf)? {
                    HubLine::Envelope(text) => {
                        let got = parse_envelope(&text)?;
                        if reply_to.is_some() && got.correlation_id != reply_to {
                            return Err(format!("await {reply_to:?} got {:?}", got.correlation_id));
                        }
                    }
                    other => return Err(format!("expected an envelope, got {other:?}")),
                }
            }
            let cpu = hub.cpu()?.saturating_sub(before);
            Ok(cpu.clock_us_per(ops).unwrap_or_else(|| cpu.us_per(ops)))
        };
        let await_tail = await_with(Some(0))?;
        // The head: BULK's oldest, or each agent's one queued envelope.
        let await_head = await_with(None)?;
        hub.stop_within(SCALE_STOP_TIMEOUT)?;
        Ok(FlatCosts {
            send,
            await_tail,
            await_head,
        })
    }
}
