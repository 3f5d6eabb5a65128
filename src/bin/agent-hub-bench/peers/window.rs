//! What every workload measures the same way: a server's CPU and write syscalls over a window
//! (`Usage`), and the timed window of the throughput workloads W1 and W4 (a warm-up, then the
//! measured seconds, counting only operations that started and ended inside them).

use super::servers::{snap, ProcSnap};
use crate::*;

/// A server's use over one measured window.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Usage {
    pub(crate) cpu: Cpu,
    pub(crate) syscw: Option<u64>,
}

impl Usage {
    pub(crate) fn between(a: ProcSnap, b: ProcSnap) -> Usage {
        Usage {
            cpu: b.cpu.saturating_sub(a.cpu),
            syscw: b.syscw.zip(a.syscw).map(|(b, a)| b.saturating_sub(a)),
        }
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
        std::thread::sleep(self.warm_end.saturating_duration_since(Instant::now()));
        let a = snap(pid)?;
        std::thread::sleep(self.end.saturating_duration_since(Instant::now()));
        let b = snap(pid)?;
        Ok(Usage::between(a, b))
    }

    pub(crate) fn secs(&self) -> f64 {
        (self.end - self.warm_end).as_secs_f64()
    }
}
