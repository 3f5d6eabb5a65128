//! The side-by-side figures: the median over the repetitions of every figure of every target,
//! the markdown table of docs/performance.md (which target leads each row), and the JSON
//! (`--json`: one object, with the machine as in the bench's other reports, and each
//! repetition's figures beside the medians).

use super::floor::Floor;
use super::window::Usage;
use super::{Skipped, TargetRuns};
use crate::options::Opts;
use crate::report::Machine;
use crate::stats::round1;
use serde_json::json;
use std::fmt::Write as _;

pub(crate) struct PeerReport {
    pub(crate) machine: Machine,
    pub(crate) runs: Vec<TargetRuns>,
    pub(crate) skipped: Vec<Skipped>,
    /// The loopback floor, one per repetition (`floor`).
    pub(crate) floors: Vec<Floor>,
}

/// The median of the figures present (the mean of the middle two for an even count).
pub(crate) fn median(mut xs: Vec<f64>) -> Option<f64> {
    xs.retain(|x| x.is_finite());
    if xs.is_empty() {
        return None;
    }
    xs.sort_by(|a, b| a.total_cmp(b));
    let m = xs.len() / 2;
    Some(if xs.len() % 2 == 1 {
        xs[m]
    } else {
        (xs[m - 1] + xs[m]) / 2.0
    })
}

/// Which way a row is better.
#[derive(Clone, Copy)]
enum Better {
    Lower,
    Higher,
}

/// One row of the table: a figure per target (None: not measured) and a note beside it.
struct Row {
    label: String,
    better: Better,
    cells: Vec<(Option<f64>, Option<String>)>,
    unit_digits: usize,
}

fn median_of<T>(xs: &[T], f: impl Fn(&T) -> Option<f64>) -> Option<f64> {
    median(xs.iter().filter_map(f).collect())
}

/// A W1 cell's note: write syscalls per op, and the server's CPU split into its own code
/// (user) and the kernel's work for it, which tells where a gap between targets lies.
fn w1_note(writes: Option<f64>, split: Option<(f64, f64)>) -> Option<String> {
    let split = split.map(|(u, k)| format!("user {u:.1} + kernel {k:.1}"));
    match (writes.map(|x| format!("{x:.1} write syscalls/op")), split) {
        (Some(w), Some(s)) => Some(format!("{w}; {s}")),
        (w, s) => w.or(s),
    }
}

fn cpu_per(u: &Usage, ops: usize) -> Option<f64> {
    u.cpu_us_per(ops)
}

impl PeerReport {
    fn rows(&self, opts: &Opts) -> Vec<Row> {
        let mut rows = Vec::new();
        for (k, &c) in opts.peer_clients.iter().enumerate() {
            let label = if k == 0 {
                format!(
                    "W1 connection-per-op send, server CPU µs/op, {c} client{}",
                    if c == 1 { "" } else { "s" }
                )
            } else {
                format!("W1 same, {c} clients")
            };
            rows.push(Row {
                label,
                better: Better::Lower,
                cells: self
                    .runs
                    .iter()
                    .map(|t| {
                        let w = &t.w1[k].1;
                        let cpu = median_of(w, |r| cpu_per(&r.usage, r.ops));
                        let writes = median_of(w, |r| r.usage.syscw_per(r.ops));
                        let user = median_of(w, |r| Some(r.usage.cpu.split_us_per(r.ops)?.0));
                        let kernel = median_of(w, |r| Some(r.usage.cpu.split_us_per(r.ops)?.1));
                        (cpu, w1_note(writes, user.zip(kernel)))
                    })
                    .collect(),
                unit_digits: 1,
            });
        }
        for (k, &c) in opts.peer_clients.iter().enumerate() {
            rows.push(Row {
                label: format!("W1 sends/s, {c} client{}", if c == 1 { "" } else { "s" }),
                better: Better::Higher,
                cells: self
                    .runs
                    .iter()
                    .map(|t| (median_of(&t.w1[k].1, |r| Some(r.ops_per_s())), None))
                    .collect(),
                unit_digits: 0,
            });
        }
        rows.push(Row {
            label: "W2 handoff p50 µs (send's connect → a parked await in another thread has it)"
                .into(),
            better: Better::Lower,
            cells: self
                .runs
                .iter()
                .map(|t| {
                    let cpu = median_of(&t.w2, |r| cpu_per(&r.usage, r.handoffs));
                    (
                        median_of(&t.w2, |r| Some(r.latency.p50_us)),
                        cpu.map(|c| format!("server CPU {c:.0} µs")),
                    )
                })
                .collect(),
            unit_digits: 0,
        });
        rows.push(Row {
            label: "W2 handoff p99 µs".into(),
            better: Better::Lower,
            cells: self
                .runs
                .iter()
                .map(|t| (median_of(&t.w2, |r| Some(r.latency.p99_us)), None))
                .collect(),
            unit_digits: 0,
        });
        rows.push(Row {
            label: format!(
                "W3 server memory per parked waiter, bytes ({} waiters)",
                opts.peer_waiters
            ),
            better: Better::Lower,
            cells: self
                .runs
                .iter()
                .map(|t| (median_of(&t.w3, |r| Some(r.bytes_per_waiter())), None))
                .collect(),
            unit_digits: 0,
        });
        rows.push(Row {
            label: format!(
                "W4 request→reply round trips/s, {} pairs, connection per op",
                opts.pairs
            ),
            better: Better::Higher,
            cells: self
                .runs
                .iter()
                .map(|t| {
                    let cpu = median_of(&t.w4, |r| cpu_per(&r.usage, r.round_trips));
                    let gen = median_of(&t.w4, |r| r.usage.generator_us_per(r.round_trips));
                    let busy = median_of(&t.w4, |r| r.usage.machine.and_then(|m| m.busy_share()));
                    // The generator's CPU and the machine's busy share say what bounds the
                    // figure (docs/performance.md "W4: what bounds it").
                    let mut note = cpu.map(|c| format!("server CPU {c:.0} µs"));
                    if let Some(g) = gen {
                        let n = note.get_or_insert_with(String::new);
                        n.push_str(&format!(", clients {g:.0} µs"));
                    }
                    if let Some(n) = note.as_mut() {
                        n.push_str(" per round trip");
                    }
                    if let Some(b) = busy {
                        let n = note.get_or_insert_with(String::new);
                        n.push_str(&format!("; machine {:.0} % busy", b * 100.0));
                    }
                    (median_of(&t.w4, |r| Some(r.per_s())), note)
                })
                .collect(),
            unit_digits: 0,
        });
        rows
    }

    /// The target(s) leading a row: the best figure, and every target level with it as the
    /// table shows it (None with fewer than two figures).
    fn leader(&self, row: &Row) -> Option<String> {
        let shown: Vec<(usize, f64)> = row
            .cells
            .iter()
            .enumerate()
            .filter_map(|(i, (v, _))| v.map(|v| (i, v)))
            .collect();
        if shown.len() < 2 {
            return None;
        }
        let key = |v: f64| thousands(v, row.unit_digits);
        let best = shown
            .iter()
            .map(|&(_, v)| v)
            .reduce(|a, b| match row.better {
                Better::Lower => a.min(b),
                Better::Higher => a.max(b),
            })?;
        let names: Vec<&str> = shown
            .iter()
            .filter(|&&(_, v)| key(v) == key(best))
            .map(|&(i, _)| self.runs[i].name)
            .collect();
        Some(names.join(", "))
    }

    pub(crate) fn markdown(&self, opts: &Opts) -> String {
        let mut out = String::new();
        let _ = write!(
            out,
            "| workload (agent-hub-bench --peers, median of {}) |",
            opts.reps
        );
        for t in &self.runs {
            let _ = write!(out, " {} |", t.name);
        }
        out.push_str(" leads |\n|---|");
        for _ in &self.runs {
            out.push_str("---|");
        }
        out.push_str("---|\n");
        for row in self.rows(opts) {
            let _ = write!(out, "| {} |", row.label);
            for (v, note) in &row.cells {
                match (v, note) {
                    (Some(v), Some(n)) => {
                        let _ = write!(out, " {} ({n}) |", thousands(*v, row.unit_digits));
                    }
                    (Some(v), None) => {
                        let _ = write!(out, " {} |", thousands(*v, row.unit_digits));
                    }
                    (None, _) => out.push_str(" – |"),
                }
            }
            let lead = self.leader(&row).unwrap_or_else(|| "–".into());
            let _ = writeln!(out, " {lead} |");
        }
        if let Some(per) = self.floor_us() {
            let _ = write!(
                out,
                "\nLoopback floor (median of {}): a connection of W1's shape against a server in the bench that only answers lines costs {per:.1} µs of CPU, client, server and kernel together, on {} CPUs; at four such connections per W4 round trip (one verb per connection), no server exceeds {} round trips/s here.\n",
                self.floors.len(),
                self.machine.nproc,
                thousands(self.floor_bound(per), 0)
            );
        }
        out
    }

    /// The floor's CPU µs per connection, the median over the repetitions.
    fn floor_us(&self) -> Option<f64> {
        median(
            self.floors
                .iter()
                .filter_map(Floor::us_per_connection)
                .collect(),
        )
    }

    /// W4 round trips/s that the machine's CPUs allow at four floor connections each.
    fn floor_bound(&self, per: f64) -> f64 {
        self.machine.nproc as f64 * 1e6 / (4.0 * per)
    }

    pub(crate) fn to_text(&self, opts: &Opts) -> String {
        let m = &self.machine;
        let mut out = format!(
            "agent-hub-bench --peers: {} CPUs ({}), kernel {}; {} repetitions, {}-byte bodies, W1 and W4 windows of {} s, {} handoffs, {} waiters, {} pairs\n\n",
            m.nproc, m.cpu_model, m.kernel, opts.reps, opts.body_bytes, opts.peer_secs, opts.peer_handoffs, opts.peer_waiters, opts.pairs
        );
        for t in &self.runs {
            let _ = writeln!(
                out,
                "{}: {} ({})",
                t.name,
                t.binary.display(),
                t.version.as_deref().unwrap_or("version unknown")
            );
        }
        for s in &self.skipped {
            let _ = writeln!(out, "{}: skipped, {}", s.name, s.reason);
        }
        out.push('\n');
        out.push_str(&self.markdown(opts));
        for t in &self.runs {
            for f in &t.failures {
                let _ = writeln!(out, "\n{} failed: {f}", t.name);
            }
        }
        out
    }

    pub(crate) fn to_json(&self, opts: &Opts) -> serde_json::Value {
        let rows = self.rows(opts);
        let leads: Vec<serde_json::Value> = rows
            .iter()
            .map(|r| json!({"row": r.label, "leader": self.leader(r)}))
            .collect();
        let targets: Vec<serde_json::Value> =
            self.runs.iter().map(|t| target_json(t, opts)).collect();
        let skipped: Vec<serde_json::Value> = self
            .skipped
            .iter()
            .map(|s| json!({"name": s.name, "reason": s.reason}))
            .collect();
        json!({
            "machine": {"nproc": self.machine.nproc, "cpu_model": self.machine.cpu_model, "kernel": self.machine.kernel},
            "peers": {
                "reps": opts.reps,
                "body_bytes": opts.body_bytes,
                "w1_clients": opts.peer_clients,
                "window_s": opts.peer_secs,
                "handoffs": opts.peer_handoffs,
                "waiters": opts.peer_waiters,
                "pairs": opts.pairs,
                "targets": targets,
                "skipped": skipped,
                "leads": leads,
                "table_markdown": self.markdown(opts),
                "floor": {
                    "cpu_us_per_connection": self.floor_us().map(round1),
                    "w4_round_trips_per_s_bound": self.floor_us().map(|p| self.floor_bound(p).round()),
                    "runs": self.floors.iter().map(|f| json!({
                        "connections": f.connections,
                        "cpu_s": round3(f.cpu.clock.unwrap_or(f.cpu.stat).as_secs_f64()),
                        "cpu_us_per_connection": f.us_per_connection().map(round1),
                    })).collect::<Vec<_>>(),
                },
            }
        })
    }
}

fn usage_json(u: &Usage, ops: usize) -> serde_json::Value {
    json!({
        "server_cpu_s": round3(u.cpu.stat.as_secs_f64()),
        "server_cpu_clock_s": u.cpu.clock.map(|c| round3(c.as_secs_f64())),
        "server_cpu_us_per_op": u.cpu_us_per(ops).map(round1),
        "server_user_us_per_op": u.cpu.split_us_per(ops).map(|s| round1(s.0)),
        "server_kernel_us_per_op": u.cpu.split_us_per(ops).map(|s| round1(s.1)),
        "write_syscalls_per_op": u.syscw_per(ops).map(|x| (x * 100.0).round() / 100.0),
        "generator_cpu_us_per_op": u.generator_us_per(ops).map(round1),
        "machine_busy_share": u.machine.and_then(|m| m.busy_share()).map(|x| (x * 1000.0).round() / 1000.0),
    })
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

fn opt1(x: Option<f64>) -> Option<f64> {
    x.map(round1)
}

fn target_json(t: &TargetRuns, _opts: &Opts) -> serde_json::Value {
    let w1: Vec<serde_json::Value> = t
        .w1
        .iter()
        .map(|(c, runs)| {
            json!({
                "clients": c,
                "median": {
                    "ops_per_s": opt1(median_of(runs, |r| Some(r.ops_per_s()))),
                    "server_cpu_us_per_op": opt1(median_of(runs, |r| r.usage.cpu_us_per(r.ops))),
                    "server_user_us_per_op": opt1(median_of(runs, |r| Some(r.usage.cpu.split_us_per(r.ops)?.0))),
                    "server_kernel_us_per_op": opt1(median_of(runs, |r| Some(r.usage.cpu.split_us_per(r.ops)?.1))),
                    "write_syscalls_per_op": median_of(runs, |r| r.usage.syscw_per(r.ops)).map(|x| (x * 100.0).round() / 100.0),
                    "latency_p50_us": opt1(median_of(runs, |r| Some(r.latency.p50_us))),
                },
                "runs": runs.iter().map(|r| {
                    let mut v = usage_json(&r.usage, r.ops);
                    v["clients"] = json!(r.clients);
                    v["ops"] = json!(r.ops);
                    v["window_s"] = json!(round3(r.secs));
                    v["ops_per_s"] = json!(r.ops_per_s().round());
                    v["latency"] = r.latency.to_json();
                    v
                }).collect::<Vec<_>>(),
            })
        })
        .collect();
    json!({
        "name": t.name,
        "binary": t.binary.display().to_string(),
        "version": t.version,
        "w1_sends": w1,
        "w2_handoff": {
            "median": {
                "p50_us": opt1(median_of(&t.w2, |r| Some(r.latency.p50_us))),
                "p99_us": opt1(median_of(&t.w2, |r| Some(r.latency.p99_us))),
                "server_cpu_us_per_handoff": opt1(median_of(&t.w2, |r| r.usage.cpu_us_per(r.handoffs))),
                "write_syscalls_per_handoff": median_of(&t.w2, |r| r.usage.syscw_per(r.handoffs)).map(|x| (x * 100.0).round() / 100.0),
            },
            "runs": t.w2.iter().map(|r| {
                let mut v = usage_json(&r.usage, r.handoffs);
                v["handoffs"] = json!(r.handoffs);
                v["warmup"] = json!(r.warmup);
                v["latency"] = r.latency.to_json();
                v["sender_latency"] = r.sender.to_json();
                v
            }).collect::<Vec<_>>(),
        },
        "w3_parked": {
            "median": {"bytes_per_waiter": median_of(&t.w3, |r| Some(r.bytes_per_waiter())).map(f64::round)},
            "runs": t.w3.iter().map(|r| json!({
                "waiters": r.waiters,
                "rss_before": r.rss_before,
                "rss_parked": r.rss_parked,
                "bytes_per_waiter": r.bytes_per_waiter().round(),
                "arm_wall_s": round3(r.arm_wall.as_secs_f64()),
            })).collect::<Vec<_>>(),
        },
        "w4_pairs": {
            "median": {
                "round_trips_per_s": opt1(median_of(&t.w4, |r| Some(r.per_s()))),
                "server_cpu_us_per_round_trip": opt1(median_of(&t.w4, |r| r.usage.cpu_us_per(r.round_trips))),
                "generator_cpu_us_per_round_trip": opt1(median_of(&t.w4, |r| r.usage.generator_us_per(r.round_trips))),
                "machine_busy_share": median_of(&t.w4, |r| r.usage.machine.and_then(|m| m.busy_share())).map(|x| (x * 1000.0).round() / 1000.0),
                "latency_p50_us": opt1(median_of(&t.w4, |r| Some(r.latency.p50_us))),
            },
            "runs": t.w4.iter().map(|r| {
                let mut v = usage_json(&r.usage, r.round_trips);
                v["pairs"] = json!(r.pairs);
                v["round_trips"] = json!(r.round_trips);
                v["window_s"] = json!(round3(r.secs));
                v["round_trips_per_s"] = json!(r.per_s().round());
                v["latency"] = r.latency.to_json();
                v
            }).collect::<Vec<_>>(),
        },
        "failures": t.failures,
    })
}

/// `12345.6` → `12,346` (0 digits) or `12,345.6` (1 digit).
pub(crate) fn thousands(x: f64, digits: usize) -> String {
    let text = format!("{:.*}", digits, x.abs());
    let (int, frac) = text
        .split_once('.')
        .map_or((text.as_str(), None), |(i, f)| (i, Some(f)));
    let mut grouped = String::new();
    for (i, ch) in int.chars().enumerate() {
        if i > 0 && (int.len() - i) % 3 == 0 {
            grouped.push(',');
        }
        grouped.push(ch);
    }
    let sign = if x < 0.0 && text.chars().any(|c| c.is_ascii_digit() && c != '0') {
        "-"
    } else {
        ""
    };
    match frac {
        Some(f) => format!("{sign}{grouped}.{f}"),
        None => format!("{sign}{grouped}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_and_grouping() {
        assert_eq!(median(vec![]), None);
        assert_eq!(median(vec![3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(vec![f64::NAN, 5.0]), Some(5.0));
        assert_eq!(thousands(4780.4, 0), "4,780");
        assert_eq!(thousands(57.84, 1), "57.8");
        assert_eq!(thousands(1234567.0, 0), "1,234,567");
        assert_eq!(thousands(-1234.0, 0), "-1,234");
        assert_eq!(thousands(999.96, 1), "1,000.0");
    }

    #[test]
    fn a_w1_note_names_what_was_measured() {
        assert_eq!(
            w1_note(Some(2.04), Some((17.26, 91.74))).as_deref(),
            Some("2.0 write syscalls/op; user 17.3 + kernel 91.7")
        );
        assert_eq!(
            w1_note(None, Some((1.0, 2.0))).as_deref(),
            Some("user 1.0 + kernel 2.0")
        );
        assert_eq!(
            w1_note(Some(0.3), None).as_deref(),
            Some("0.3 write syscalls/op")
        );
        assert_eq!(w1_note(None, None), None);
    }
}
