//! The report: the machine, one table per store and the targets, as text and as `--json`.

use crate::disk::{human_bytes, Disk};
use crate::options::{
    Opts, StoreKind, DRAIN_THREADS, TARGET_CLIENTS, TARGET_HANDOFF_RATIO, TARGET_THROUGHPUT_RATIO,
};
use crate::phase_approvals::ApprovalsResult;
use crate::phase_delegate::DelegateResult;
use crate::phase_forward::ForwardResult;
use crate::phase_handoff::HandoffResult;
use crate::phase_parked::ParkedResult;
use crate::relay_report::RelayReport;
use crate::stats::{round1, Run};
use serde_json::json;
use std::fmt::Write as _;
use std::path::PathBuf;

// ----- the report -----

#[derive(Default)]
pub(crate) struct Machine {
    pub(crate) nproc: usize,
    pub(crate) cpu_model: String,
    pub(crate) kernel: String,
}

impl Machine {
    pub(crate) fn read() -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu_model = cpuinfo
            .lines()
            .find_map(|l| {
                l.strip_prefix("model name")
                    .and_then(|r| r.split_once(':'))
                    .map(|(_, m)| m.trim().to_owned())
            })
            .unwrap_or_else(|| "unknown".into());
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|s| s.trim().to_owned())
            .unwrap_or_default();
        Machine {
            nproc: std::thread::available_parallelism().map_or(0, |n| n.get()),
            cpu_model,
            kernel,
        }
    }
}

/// One store's results.
pub(crate) struct StoreReport {
    pub(crate) kind: StoreKind,
    pub(crate) sends: Vec<Run>,
    pub(crate) drains: Vec<Run>,
    pub(crate) handoff: Option<HandoffResult>,
    pub(crate) ack_handoff: Option<HandoffResult>,
    pub(crate) parked: Option<ParkedResult>,
    pub(crate) pairs: Option<Run>,
    pub(crate) forward: Option<ForwardResult>,
    pub(crate) delegate: Option<DelegateResult>,
    pub(crate) approvals: Option<ApprovalsResult>,
}

impl StoreReport {
    pub(crate) fn new(kind: StoreKind) -> StoreReport {
        StoreReport {
            kind,
            sends: Vec::new(),
            drains: Vec::new(),
            handoff: None,
            ack_handoff: None,
            parked: None,
            pairs: None,
            forward: None,
            delegate: None,
            approvals: None,
        }
    }

    pub(crate) fn to_json(&self) -> serde_json::Value {
        let parked = self.parked.as_ref().map(|p| {
            json!({
                "count": p.count,
                "rss_before_bytes": p.rss_before,
                "rss_parked_bytes": p.rss_parked,
                "rss_after_close_bytes": p.rss_after_close,
                "rss_bytes_per_await": p.bytes_per_await().round(),
                "park_wall_s": (p.park_wall.as_secs_f64() * 1000.0).round() / 1000.0,
                "hub_cpu_us_per_park": round1(p.park_cpu.us_per(p.count)),
                "hub_cpu_us_per_close": round1(p.close_cpu.us_per(p.count)),
                "hub_cpu_clock_us_per_park": p.park_cpu.clock_us_per(p.count).map(round1),
                "hub_cpu_clock_us_per_close": p.close_cpu.clock_us_per(p.count).map(round1),
            })
        });
        json!({
            "sends": self.sends.iter().map(Run::to_json).collect::<Vec<_>>(),
            "drains": self.drains.iter().map(Run::to_json).collect::<Vec<_>>(),
            "handoff": self.handoff.as_ref().map(HandoffResult::to_json),
            "ack_handoff": self.ack_handoff.as_ref().map(HandoffResult::to_json),
            "parked": parked,
            "round_trips": self.pairs.as_ref().map(Run::to_json),
            "forward": self.forward.as_ref().map(|f| json!({
                "handoff": f.handoff.to_json(),
                "throughput": f.throughput.to_json(),
            })),
            "delegate": self.delegate.as_ref().map(DelegateResult::to_json),
            "approvals": self.approvals.as_ref().map(ApprovalsResult::to_json),
        })
    }
}

/// Issue 3's two targets, when both stores ran.
pub(crate) struct Targets {
    /// The client count compared (16, or the largest measured when 16 was not).
    pub(crate) clients: usize,
    pub(crate) memory_ops_s: f64,
    pub(crate) sqlite_ops_s: f64,
    pub(crate) memory_p50_us: f64,
    pub(crate) sqlite_p50_us: f64,
}

impl Targets {
    pub(crate) fn throughput_ratio(&self) -> f64 {
        self.sqlite_ops_s / self.memory_ops_s
    }
    pub(crate) fn handoff_ratio(&self) -> f64 {
        self.sqlite_p50_us / self.memory_p50_us
    }
    pub(crate) fn throughput_met(&self) -> bool {
        self.clients == TARGET_CLIENTS && self.throughput_ratio() >= TARGET_THROUGHPUT_RATIO
    }
    pub(crate) fn handoff_met(&self) -> bool {
        self.handoff_ratio() <= TARGET_HANDOFF_RATIO
    }
}

pub(crate) fn verdict(met: bool) -> &'static str {
    if met {
        "MET"
    } else {
        "MISSED"
    }
}

#[derive(Default)]
pub(crate) struct Report {
    pub(crate) machine: Machine,
    pub(crate) server: PathBuf,
    pub(crate) ticks_per_sec: u64,
    pub(crate) disk: Disk,
    /// The fdatasync probe repeated after the phases.
    pub(crate) disk_after: Option<Disk>,
    pub(crate) stores: Vec<StoreReport>,
    pub(crate) relay: Option<RelayReport>,
    /// `store.sync` of the SQLite runs.
    pub(crate) sqlite_sync: String,
}

impl Report {
    pub(crate) fn store(&self, kind: StoreKind) -> Option<&StoreReport> {
        self.stores.iter().find(|s| s.kind == kind)
    }

    pub(crate) fn targets(&self, opts: &Opts) -> Option<Targets> {
        let (m, q) = (
            self.store(StoreKind::Memory)?,
            self.store(StoreKind::Sqlite)?,
        );
        let i = opts
            .clients
            .iter()
            .position(|&c| c == TARGET_CLIENTS)
            .or_else(|| {
                opts.clients
                    .iter()
                    .enumerate()
                    .max_by_key(|(_, &c)| c)
                    .map(|(i, _)| i)
            })?;
        let lat = |s: &StoreReport| {
            s.handoff
                .as_ref()
                .and_then(|h| h.run.latency.as_ref())
                .map(|l| l.p50_us)
        };
        Some(Targets {
            clients: opts.clients[i],
            memory_ops_s: m.sends.get(i)?.ops_per_sec(),
            sqlite_ops_s: q.sends.get(i)?.ops_per_sec(),
            memory_p50_us: lat(m)?,
            sqlite_p50_us: lat(q)?,
        })
    }

    pub(crate) fn to_json(&self, opts: &Opts) -> serde_json::Value {
        let stores: serde_json::Map<String, serde_json::Value> = self
            .stores
            .iter()
            .map(|s| (s.kind.name().to_owned(), s.to_json()))
            .collect();
        let targets = self.targets(opts).map(|t| {
            json!({
                "clients": t.clients,
                "memory_sends_per_s": t.memory_ops_s.round(),
                "sqlite_sends_per_s": t.sqlite_ops_s.round(),
                "throughput_ratio": (t.throughput_ratio() * 1000.0).round() / 1000.0,
                "throughput_target": TARGET_THROUGHPUT_RATIO,
                "throughput_met": t.throughput_met(),
                "memory_handoff_p50_us": round1(t.memory_p50_us),
                "sqlite_handoff_p50_us": round1(t.sqlite_p50_us),
                "handoff_ratio": (t.handoff_ratio() * 100.0).round() / 100.0,
                "handoff_target": TARGET_HANDOFF_RATIO,
                "handoff_met": t.handoff_met(),
            })
        });
        json!({
            "machine": {"nproc": self.machine.nproc, "cpu_model": self.machine.cpu_model, "kernel": self.machine.kernel},
            "server": self.server.display().to_string(),
            "audit_log": "on",
            "clock_ticks_per_s": self.ticks_per_sec,
            "disk": self.disk.to_json(),
            "disk_after": self.disk_after.as_ref().map(Disk::to_json),
            "options": {
                "store": format!("{:?}", opts.store).to_lowercase(),
                "clients": opts.clients, "sends": opts.sends, "sqlite_sends": opts.sqlite_sends,
                "handoffs": opts.handoffs, "sqlite_handoffs": opts.sqlite_handoffs,
                "parked": opts.parked, "pairs": opts.pairs, "pairs_secs": opts.pairs_secs,
                "fsync_probes": opts.fsync_probes,
                "delegate_tasks": opts.delegate_tasks, "delegate_running": opts.delegate_running,
                "approval_requests": opts.approval_requests,
            },
            "stores": stores,
            "issue3_targets": targets,
            "relay": self.relay.as_ref().map(|r| r.to_json(opts)),
        })
    }

    pub(crate) fn to_table(&self, opts: &Opts) -> String {
        let mut t = String::new();
        let m = &self.machine;
        let _ = writeln!(
            t,
            "agent-hub-bench: {} CPUs ({}), kernel {}",
            m.nproc, m.cpu_model, m.kernel
        );
        let _ = writeln!(
            t,
            "hub: {} (fresh per phase and per send-phase C, audit log on)\nhub µs/op: utime+stime from /proc/PID/stat ({} ticks/s); (clock): the hub's CPU clock, ns grain",
            self.server.display(),
            self.ticks_per_sec
        );
        let d = &self.disk;
        let _ = writeln!(
            t,
            "disk: {} on {} ({}, {}, device {}), {} of {} free; write cache: {}; rotational: {}",
            d.dir.display(),
            d.mount_point,
            d.fs_type,
            d.source,
            d.device,
            human_bytes(d.avail_bytes),
            human_bytes(d.size_bytes),
            d.write_cache.as_deref().unwrap_or("unknown"),
            d.rotational
                .map_or("unknown", |r| if r { "yes" } else { "no" }),
        );
        for (when, d) in [("before", Some(d)), ("after", self.disk_after.as_ref())] {
            let Some(d) = d else { continue };
            for (label, l) in [
                ("append 4 KiB", &d.append_sync),
                ("overwrite 4 KiB", &d.overwrite_sync),
            ] {
                if let Some(l) = l {
                    let _ = writeln!(
                        t,
                        "  {when} the phases: {label} + fdatasync ({} times): p50 {:.0} µs, p99 {:.0} µs, mean {:.0} µs, max {:.0} µs",
                        d.probes, l.p50_us, l.p99_us, l.mean_us, l.max_us
                    );
                }
            }
        }
        let _ = writeln!(t, "  fsync: {}", d.verdict());
        let header = |t: &mut String| {
            let _ = writeln!(
                t,
                "{:<42} {:>7} {:>7} {:>7} {:>8} {:>10} {:>9} {:>8} {:>8} {:>8}",
                "benchmark",
                "clients",
                "ops",
                "wall s",
                "ops/s",
                "hub µs/op",
                "(clock)",
                "p50 µs",
                "p99 µs",
                "flush/op"
            );
        };
        let row = |t: &mut String, label: &str, r: &Run| {
            let clock = r
                .hub_cpu
                .clock_us_per(r.ops)
                .map_or("-".to_owned(), |c| format!("{c:.1}"));
            let (p50, p99) = match &r.latency {
                Some(l) => (format!("{:.0}", l.p50_us), format!("{:.0}", l.p99_us)),
                None => ("-".to_owned(), "-".to_owned()),
            };
            let flush = r
                .flushes_per_op()
                .map_or("-".to_owned(), |f| format!("{f:.3}"));
            let _ = writeln!(
                t,
                "{:<42} {:>7} {:>7} {:>7.2} {:>8.0} {:>10.1} {:>9} {:>8} {:>8} {:>8}",
                label,
                r.clients,
                r.ops,
                r.wall.as_secs_f64(),
                r.ops_per_sec(),
                r.cpu_us_per_op(),
                clock,
                p50,
                p99,
                flush
            );
        };
        for s in &self.stores {
            let _ = writeln!(t);
            let what = match s.kind {
                StoreKind::Memory => "store: memory (queues in the process only)",
                StoreKind::Sqlite => "store: sqlite",
            };
            if s.kind == StoreKind::Sqlite {
                let how = if self.sqlite_sync == "full" {
                    "sync=full: accepted once committed and flushed to disk by the flush thread"
                } else {
                    "sync=normal: accepted once committed, never flushed by the hub"
                };
                let _ = writeln!(t, "{what} (WAL; {how})");
            } else {
                let _ = writeln!(t, "{what}");
            }
            header(&mut t);
            for (r, d) in s.sends.iter().zip(&s.drains) {
                row(&mut t, "send, connection per op", r);
                row(
                    &mut t,
                    &format!("  then drain: await timeoutSecs 0 (C={})", d.clients),
                    d,
                );
            }
            if let Some(h) = &s.handoff {
                row(&mut t, "handoff: parked await, then send", &h.run);
            }
            if let Some(h) = &s.ack_handoff {
                row(&mut t, "ack handoff: send start -> acked", &h.run);
                if let Some(l) = &h.to_envelope {
                    let _ = writeln!(
                        t,
                        "{:<42} {:>7} {:>7} {:>7} {:>8} {:>10} {:>9} {:>8.0} {:>8.0}",
                        "  of which send start -> envelope",
                        "",
                        "",
                        "",
                        "",
                        "",
                        "",
                        l.p50_us,
                        l.p99_us
                    );
                }
            }
            if let Some(r) = &s.pairs {
                row(&mut t, "round trip: send + await, twice", r);
            }
            if let Some(f) = &s.forward {
                row(&mut t, "across hubs: handoff east -> west", &f.handoff.run);
                row(
                    &mut t,
                    "across hubs: sends on east, drained west",
                    &f.throughput,
                );
            }
            if let Some(d) = &s.delegate {
                d.to_table(&mut t, &row);
            }
            if let Some(a) = &s.approvals {
                a.to_table(&mut t);
            }
            if let Some(p) = &s.parked {
                let _ = writeln!(
                    t,
                    "parked awaits: {} (hub VmRSS {:.1} MiB -> {:.1} MiB, {:.1} MiB after closing them)",
                    p.count,
                    p.rss_before as f64 / 1048576.0,
                    p.rss_parked as f64 / 1048576.0,
                    p.rss_after_close as f64 / 1048576.0
                );
                let _ = writeln!(
                    t,
                    "  RSS per parked await: {:.0} bytes; hub CPU {:.1} µs per park, {:.1} µs per close; parked in {:.2} s",
                    p.bytes_per_await(),
                    p.park_cpu.us_per(p.count),
                    p.close_cpu.us_per(p.count),
                    p.park_wall.as_secs_f64()
                );
            }
        }
        if let (Some(mem), Some(sql), false) = (
            self.store(StoreKind::Memory),
            self.store(StoreKind::Sqlite),
            opts.delegation_only(),
        ) {
            let _ = writeln!(t);
            let _ = writeln!(t, "sqlite against memory");
            for (a, b) in mem.sends.iter().zip(&sql.sends) {
                let _ = writeln!(
                    t,
                    "  send C={:<3} sends/s {:>6.0} vs {:>6.0} ({:.3}x); hub µs/send {:.1} vs {:.1}; p50 {:.0} vs {:.0} µs",
                    a.clients,
                    b.ops_per_sec(),
                    a.ops_per_sec(),
                    b.ops_per_sec() / a.ops_per_sec(),
                    b.cpu_us_per_op(),
                    a.cpu_us_per_op(),
                    b.latency.as_ref().map_or(0.0, |l| l.p50_us),
                    a.latency.as_ref().map_or(0.0, |l| l.p50_us),
                );
            }
            let p50 = |h: &Option<HandoffResult>| {
                h.as_ref()
                    .and_then(|h| h.run.latency.as_ref())
                    .map(|l| (l.p50_us, l.p99_us))
            };
            for (label, a, b) in [
                ("handoff", &mem.handoff, &sql.handoff),
                ("ack handoff (to acked)", &mem.ack_handoff, &sql.ack_handoff),
            ] {
                if let (Some((a50, a99)), Some((b50, b99))) = (p50(a), p50(b)) {
                    let _ = writeln!(
                        t,
                        "  {label}: p50 {b50:.0} vs {a50:.0} µs ({:.1}x), p99 {b99:.0} vs {a99:.0} µs",
                        b50 / a50
                    );
                }
            }
            if let Some(tg) = self.targets(opts) {
                let _ = writeln!(t, "issue 3 targets");
                let note = if tg.clients == TARGET_CLIENTS {
                    String::new()
                } else {
                    format!(" (C={TARGET_CLIENTS} not measured: compared C={}; run with --clients including 16)", tg.clients)
                };
                let _ = writeln!(
                    t,
                    "  durable send throughput >= {:.0} % of in-memory at C={TARGET_CLIENTS}: {:.0} vs {:.0} sends/s = {:.1} %: {}{note}",
                    TARGET_THROUGHPUT_RATIO * 100.0,
                    tg.sqlite_ops_s,
                    tg.memory_ops_s,
                    tg.throughput_ratio() * 100.0,
                    verdict(tg.throughput_met())
                );
                let _ = writeln!(
                    t,
                    "  durable handoff p50 <= {TARGET_HANDOFF_RATIO:.0}x in-memory: {:.0} vs {:.0} µs = {:.1}x: {}",
                    tg.sqlite_p50_us,
                    tg.memory_p50_us,
                    tg.handoff_ratio(),
                    verdict(tg.handoff_met())
                );
            }
        }
        let _ = writeln!(t);
        if !opts.delegation_only() {
            let _ = writeln!(
            t,
            "send: connect, hello+send in one write, read ok and accepted, close ({} sends per client count in memory, {} with sqlite).",
            opts.sends, opts.sqlite_sends
        );
            let _ = writeln!(
            t,
            "flush/op: flush requests the temp dir's block device completed per op (/proc/diskstats; any process's)."
        );
            let _ = writeln!(t, "handoff latency: sender's connect() until the parked awaiter has read the envelope line;");
            let _ = writeln!(
                t,
                "  its hub CPU covers the awaiter's and the sender's connection."
            );
            let _ = writeln!(
            t,
            "ack handoff: the same with \"ack\":true; the awaiter then writes {{\"ack\":{{\"id\":…}}}} and the clock stops at its acked line."
        );
            let _ = writeln!(
            t,
            "round trip: request send, responder's await gets it, result send, requester's await (replyTo) gets it;"
        );
            let _ = writeln!(
                t,
                "  4 connections and 2 envelopes, over {} s; ops/s = round trips/s over all pairs.",
                opts.pairs_secs
            );
            let _ = writeln!(
            t,
            "across hubs: a second hub linked by the relay on 127.0.0.1 (forward = true, same store);"
        );
            let _ = writeln!(
            t,
            "  handoff: await parked on west, send on east to name@west, timed to the envelope;"
        );
            let _ = writeln!(
            t,
            "  sends: 4 threads send on east while {DRAIN_THREADS} await on west; wall until west has all; hub µs/op sums both hubs."
        );
        }
        if opts.approval_requests > 0 {
            let _ = writeln!(
                t,
                "approvals: task_answer connect() until its answered line, and until the agent's next request at an await parked before it."
            );
        }
        if opts.delegate_tasks > 0 && !opts.approvals_only {
            let _ = writeln!(
                t,
                "delegation: delegate connect() until the agent's own stamp (fake-acp-agent --stamps, wall clock) or the"
            );
            let _ = writeln!(
                t,
                "  outcome at an await parked before it; each task's runner is gone before the next; handoffs as above."
            );
        }
        if let Some(r) = &self.relay {
            let _ = writeln!(t);
            t.push_str(&r.to_table(opts));
        }
        t
    }
}
