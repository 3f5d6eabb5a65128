//! What every workload measures the same way: a server's CPU and write syscalls over a window
//! (`Usage`), and the timed window of the throughput workloads W1 and W4 (a warm-up, then the
//! measured seconds, counting only operations that started and ended inside them). Over that
//! window it also reads the load generator's own CPU (this process: every client thread) and
//! the whole machine's busy time, which say whether a throughput figure is bound by the
//! server or by the CPU the clients and the kernel need (docs/performance.md "W4: what bounds
//! it").

use super::servers::{snap, ProcSnap};
use crate::base::Res;
use crate::hub_process::cpu_of_pid;
use crate::stats::Cpu;
use std::time::{Duration, Instant};

/// A server's use over one measured window.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Usage {
    pub(crate) cpu: Cpu,
    pub(crate) syscw: Option<u64>,
    /// The generator's (this process's) CPU over the window, when measured.
    pub(crate) generator: Option<Cpu>,
    /// The machine's busy and total CPU time over the window (`/proc/stat`), when measured.
    pub(crate) machine: Option<MachineCpu>,
}

/// Busy and total time summed over every CPU, from the `cpu` line of `/proc/stat`.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct MachineCpu {
    pub(crate) busy: Duration,
    pub(crate) total: Duration,
}

impl MachineCpu {
    pub(crate) fn now() -> Option<MachineCpu> {
        MachineCpu::parse(&std::fs::read_to_string("/proc/stat").ok()?)
    }

    /// The first line, `cpu user nice system idle iowait irq softirq steal …` in ticks; idle
    /// and iowait are not busy (proc(5)). Guest time is already inside user.
    pub(crate) fn parse(stat: &str) -> Option<MachineCpu> {
        let line = stat.lines().next()?.strip_prefix("cpu ")?;
        let f: Vec<u64> = line
            .split_whitespace()
            .take(8)
            .map(|v| v.parse().ok())
            .collect::<Option<_>>()?;
        if f.len() < 5 {
            return None;
        }
        // SAFETY: sysconf has no preconditions.
        let hz = match unsafe { libc::sysconf(libc::_SC_CLK_TCK) } {
            t if t > 0 => t as u64,
            _ => 100,
        };
        let ticks = |t: u64| Duration::from_nanos(t.saturating_mul(1_000_000_000) / hz);
        let total: u64 = f.iter().sum();
        let idle = f[3] + f[4];
        Some(MachineCpu {
            busy: ticks(total - idle),
            total: ticks(total),
        })
    }

    fn since(self, earlier: MachineCpu) -> MachineCpu {
        MachineCpu {
            busy: self.busy.saturating_sub(earlier.busy),
            total: self.total.saturating_sub(earlier.total),
        }
    }

    /// The busy share of the window, 0 to 1.
    pub(crate) fn busy_share(&self) -> Option<f64> {
        (!self.total.is_zero()).then(|| self.busy.as_secs_f64() / self.total.as_secs_f64())
    }
}

impl Usage {
    pub(crate) fn between(a: ProcSnap, b: ProcSnap) -> Usage {
        Usage {
            cpu: b.cpu.saturating_sub(a.cpu),
            syscw: b.syscw.zip(a.syscw).map(|(b, a)| b.saturating_sub(a)),
            generator: None,
            machine: None,
        }
    }

    /// The generator's CPU µs per operation, when measured.
    pub(crate) fn generator_us_per(&self, ops: usize) -> Option<f64> {
        let g = self.generator?;
        (ops > 0).then(|| g.clock_us_per(ops).unwrap_or_else(|| g.us_per(ops)))
    }

    /// Server CPU µs per operation: the nanosecond process clock where the kernel lets us read
    /// it, else `/proc/PID/stat` ticks (10 ms grain, fine over seconds).
    pub(crate) fn cpu_us_per(&self, ops: usize) -> Option<f64> {
        if ops == 0 {
            return None;
        }
        Some(
            self.cpu
                .clock_us_per(ops)
                .unwrap_or_else(|| self.cpu.us_per(ops)),
        )
    }

    pub(crate) fn syscw_per(&self, ops: usize) -> Option<f64> {
        if ops == 0 {
            return None;
        }
        self.syscw.map(|w| w as f64 / ops as f64)
    }
}

/// The measured window of a throughput workload.
#[derive(Clone, Copy)]
pub(crate) struct Window {
    pub(crate) warm_end: Instant,
    pub(crate) end: Instant,
}

impl Window {
    /// Starts now: a warm-up of a fifth of `secs` (at most one second), then `secs`.
    pub(crate) fn starting_now(secs: f64) -> Window {
        let warm = Duration::from_secs_f64((secs / 5.0).min(1.0));
        let warm_end = Instant::now() + warm;
        Window {
            warm_end,
            end: warm_end + Duration::from_secs_f64(secs),
        }
    }

    /// Whether an operation from `t0` to `t1` counts.
    pub(crate) fn counts(&self, t0: Instant, t1: Instant) -> bool {
        t0 >= self.warm_end && t1 <= self.end
    }

    pub(crate) fn over(&self) -> bool {
        Instant::now() >= self.end
    }

    /// Waits out the warm-up and the window and reads the server at both edges. Sleeping here
    /// waits for a clock time, not for another thread.
    pub(crate) fn measure(&self, pid: i32) -> Res<Usage> {
        let me = std::process::id() as i32;
        std::thread::sleep(self.warm_end.saturating_duration_since(Instant::now()));
        let (a, ga, ma) = (snap(pid)?, cpu_of_pid(me).ok(), MachineCpu::now());
        std::thread::sleep(self.end.saturating_duration_since(Instant::now()));
        let (b, gb, mb) = (snap(pid)?, cpu_of_pid(me).ok(), MachineCpu::now());
        let mut u = Usage::between(a, b);
        u.generator = gb.zip(ga).map(|(b, a)| b.saturating_sub(a));
        u.machine = mb.zip(ma).map(|(b, a)| b.since(a));
        Ok(u)
    }

    pub(crate) fn secs(&self) -> f64 {
        (self.end - self.warm_end).as_secs_f64()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_stat_busy_leaves_out_idle_and_iowait() {
        // user nice system idle iowait irq softirq steal guest guest_nice
        let text = "cpu  100 0 50 800 50 0 0 0 7 0\ncpu0 50 0 25 400 25 0 0 0 0 0\n";
        let m = MachineCpu::parse(text).expect("parses");
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
        assert_eq!(m.total, Duration::from_nanos(1000 * 1_000_000_000 / hz));
        assert_eq!(m.busy, Duration::from_nanos(150 * 1_000_000_000 / hz));
        assert_eq!(m.busy_share(), Some(0.15));
        assert!(MachineCpu::parse("intr 1 2 3\n").is_none());
        assert!(MachineCpu::parse("cpu  1 2 x\n").is_none());
    }
}
