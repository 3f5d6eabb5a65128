//! Statistics: latency percentiles, CPU deltas, and one run's counts and rates.

use serde_json::json;
use std::time::Duration;

// ----- statistics -----

#[derive(Debug, Clone, Default)]
pub(crate) struct Latency {
    pub(crate) p50_us: f64,
    pub(crate) p99_us: f64,
    pub(crate) max_us: f64,
    pub(crate) mean_us: f64,
}

impl Latency {
    pub(crate) fn of(mut samples: Vec<Duration>) -> Latency {
        if samples.is_empty() {
            return Latency::default();
        }
        samples.sort_unstable();
        // Nearest rank.
        let pct = |p: f64| {
            let rank = ((p / 100.0) * samples.len() as f64).ceil() as usize;
            us(samples[rank.clamp(1, samples.len()) - 1])
        };
        let total: Duration = samples.iter().sum();
        Latency {
            p50_us: pct(50.0),
            p99_us: pct(99.0),
            max_us: us(*samples.last().expect("not empty")),
            mean_us: us(total) / samples.len() as f64,
        }
    }

    pub(crate) fn to_json(&self) -> serde_json::Value {
        json!({"p50_us": round1(self.p50_us), "p99_us": round1(self.p99_us), "max_us": round1(self.max_us), "mean_us": round1(self.mean_us)})
    }
}

pub(crate) fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

pub(crate) fn round1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

/// Hub CPU time (user + system) by two readings: `stat` from /proc/PID/stat (clock-tick
/// grain, 10 ms at 100 Hz), `clock` from the process CPU clock (nanosecond grain) when the
/// kernel lets us read it. `user` is the user-mode part of `stat` (field 14 alone), which
/// tells a server's own code from the kernel work its syscalls ask for.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Cpu {
    pub(crate) stat: Duration,
    pub(crate) user: Duration,
    pub(crate) clock: Option<Duration>,
}

impl Cpu {
    pub(crate) fn saturating_sub(self, earlier: Cpu) -> Cpu {
        Cpu {
            stat: self.stat.saturating_sub(earlier.stat),
            user: self.user.saturating_sub(earlier.user),
            clock: self
                .clock
                .zip(earlier.clock)
                .map(|(a, b)| a.saturating_sub(b)),
        }
    }
    pub(crate) fn us_per(&self, ops: usize) -> f64 {
        us(self.stat) / ops as f64
    }
    pub(crate) fn clock_us_per(&self, ops: usize) -> Option<f64> {
        self.clock.map(|c| us(c) / ops as f64)
    }
    /// User-mode and kernel µs per op, both from `stat` (tick grain: read over seconds).
    pub(crate) fn split_us_per(&self, ops: usize) -> Option<(f64, f64)> {
        (ops > 0).then(|| {
            let user = us(self.user) / ops as f64;
            (user, us(self.stat.saturating_sub(self.user)) / ops as f64)
        })
    }
}

/// A timed batch of operations and the hub CPU it cost.
#[derive(Debug, Clone, Default)]
pub(crate) struct Run {
    pub(crate) clients: usize,
    pub(crate) ops: usize,
    pub(crate) wall: Duration,
    pub(crate) hub_cpu: Cpu,
    /// Per-operation latency; None where operations are not timed one by one (the drain).
    pub(crate) latency: Option<Latency>,
    /// Flush requests the temp dir's block device completed meanwhile (/proc/diskstats; every
    /// process's, not only the hub's), when readable.
    pub(crate) flushes: Option<u64>,
}

impl Run {
    pub(crate) fn ops_per_sec(&self) -> f64 {
        self.ops as f64 / self.wall.as_secs_f64()
    }
    pub(crate) fn cpu_us_per_op(&self) -> f64 {
        self.hub_cpu.us_per(self.ops)
    }
    pub(crate) fn flushes_per_op(&self) -> Option<f64> {
        self.flushes.map(|f| f as f64 / self.ops as f64)
    }
    pub(crate) fn to_json(&self) -> serde_json::Value {
        json!({
            "clients": self.clients,
            "ops": self.ops,
            "wall_s": (self.wall.as_secs_f64() * 1000.0).round() / 1000.0,
            "ops_per_s": self.ops_per_sec().round(),
            "hub_cpu_s": (self.hub_cpu.stat.as_secs_f64() * 1000.0).round() / 1000.0,
            "hub_cpu_us_per_op": round1(self.cpu_us_per_op()),
            "hub_cpu_clock_us_per_op": self.hub_cpu.clock_us_per(self.ops).map(round1),
            "latency": self.latency.as_ref().map(Latency::to_json),
            "device_flushes": self.flushes,
            "device_flushes_per_op": self.flushes_per_op().map(|f| (f * 1000.0).round() / 1000.0),
        })
    }
}
