//! Phase 7's part of the report (docs/performance.md "Delegation", "Approvals"): the
//! delegation figures of one store as JSON and as text lines under that store's table, the
//! verdict on the handoff under load (within 2× of idle, the question issue 11 asks), and the
//! approvals part's round trips (issue 37).
//!
//! Owns: presentation only; the figures are `phase_delegate`'s.

use crate::phase_approvals::ApprovalsResult;
use crate::phase_delegate::DelegateResult;
use crate::phase_handoff::HandoffResult;
use crate::stats::{round1, us, Run};
use serde_json::json;
use std::fmt::Write as _;

/// Issue 11's question: the handoff p50 with the parked tasks running, at most this multiple
/// of the same hub's idle p50.
pub(crate) const LOADED_HANDOFF_RATIO: f64 = 2.0;

/// Loaded p50 over idle p50, against each of the two idle runs (before and after the load).
pub(crate) fn load_ratios(d: &DelegateResult) -> (f64, f64) {
    let p50 = |h: &HandoffResult| h.run.latency.as_ref().map_or(f64::NAN, |l| l.p50_us);
    let loaded = p50(&d.loaded);
    (loaded / p50(&d.idle_before), loaded / p50(&d.idle_after))
}

/// Within the ratio against both idle runs; a NaN (no latency) is never within.
pub(crate) fn within_ratio(ratios: (f64, f64)) -> bool {
    ratios.0 <= LOADED_HANDOFF_RATIO && ratios.1 <= LOADED_HANDOFF_RATIO
}

impl DelegateResult {
    pub(crate) fn to_json(&self) -> serde_json::Value {
        let ratios = load_ratios(self);
        json!({
            "tasks": self.tasks,
            "warmup": self.warmup,
            "loadavg_start": self.load_start,
            "loadavg_end": self.load_end,
            "latency_to_delegated": self.to_delegated.to_json(),
            "latency_to_agent_start": self.to_agent_start.to_json(),
            "latency_to_agent_prompt": self.to_prompt.to_json(),
            "latency_to_first_update": self.to_first_update.to_json(),
            "latency_to_outcome": self.to_outcome.to_json(),
            "direct_runs": self.direct.runs,
            "direct_latency_to_first_update": self.direct.to_first_update.to_json(),
            "direct_latency_to_end_turn": self.direct.to_end_turn.to_json(),
            "tasks_wall_s": (self.run.wall.as_secs_f64() * 1000.0).round() / 1000.0,
            "hub_cpu_us_per_task": round1(self.run.cpu_us_per_op()),
            "hub_cpu_clock_us_per_task": self.run.hub_cpu.clock_us_per(self.run.ops).map(round1),
            "hub_loop_thread_cpu_us_per_task": round1(us(self.loop_thread_cpu) / self.run.ops as f64),
            "running": self.running,
            "rss_idle_bytes": self.rss_idle,
            "rss_running_bytes": self.rss_running,
            "rss_after_bytes": self.rss_after,
            "rss_bytes_per_running_task": self.rss_per_running_task().round(),
            "threads_idle": self.threads_idle,
            "threads_running": self.threads_running,
            "handoff_idle_before": self.idle_before.to_json(),
            "handoff_loaded": self.loaded.to_json(),
            "handoff_idle_after": self.idle_after.to_json(),
            "loaded_over_idle_before_p50": (ratios.0 * 100.0).round() / 100.0,
            "loaded_over_idle_after_p50": (ratios.1 * 100.0).round() / 100.0,
            "loaded_within_2x": within_ratio(ratios),
        })
    }

    /// Lines appended under the store's table (the handoff rows in its columns).
    pub(crate) fn to_table(&self, t: &mut String, row: &dyn Fn(&mut String, &str, &Run)) {
        let _ = writeln!(
            t,
            "delegation: {} tasks on the fake ACP agent, one after another ({} warm-up), {:.2} s; hub CPU {:.0} µs per task ({}; event loop thread {:.0} µs)",
            self.tasks,
            self.warmup,
            self.run.wall.as_secs_f64(),
            self.run.cpu_us_per_op(),
            self.run
                .hub_cpu
                .clock_us_per(self.run.ops)
                .map_or("clock: -".to_owned(), |c| format!("clock: {c:.0} µs")),
            us(self.loop_thread_cpu) / self.run.ops as f64,
        );
        for (label, l) in [
            ("delegate -> delegated reply", &self.to_delegated),
            ("delegate -> agent process started", &self.to_agent_start),
            ("delegate -> session/prompt at the agent", &self.to_prompt),
            (
                "delegate -> agent's first session/update",
                &self.to_first_update,
            ),
            ("delegate -> task_outcome at the awaiter", &self.to_outcome),
            (
                "no hub: spawn -> first session/update",
                &self.direct.to_first_update,
            ),
            ("no hub: spawn -> end_turn answer", &self.direct.to_end_turn),
        ] {
            let _ = writeln!(
                t,
                "  {label:<42} p50 {:>8.0} µs   p99 {:>8.0} µs   max {:>8.0} µs",
                l.p50_us, l.p99_us, l.max_us
            );
        }
        let _ = writeln!(
            t,
            "  {} tasks running: hub VmRSS {:.1} MiB -> {:.1} MiB ({:.1} MiB after they ended), {:.0} bytes per running task; hub threads {} -> {}",
            self.running,
            self.rss_idle as f64 / 1048576.0,
            self.rss_running as f64 / 1048576.0,
            self.rss_after as f64 / 1048576.0,
            self.rss_per_running_task(),
            self.threads_idle,
            self.threads_running,
        );
        row(
            t,
            "  handoff, idle (before the tasks)",
            &self.idle_before.run,
        );
        row(
            t,
            &format!("  handoff, {} tasks running", self.running),
            &self.loaded.run,
        );
        row(t, "  handoff, idle (after the tasks)", &self.idle_after.run);
        let ratios = load_ratios(self);
        let _ = writeln!(
            t,
            "  machine load average (1, 5, 15 min): {} as the phase began, {} as it ended",
            self.load_start, self.load_end
        );
        let _ = writeln!(
            t,
            "  loaded handoff p50 / idle p50: {:.2}x (before), {:.2}x (after): {} {LOADED_HANDOFF_RATIO:.0}x",
            ratios.0,
            ratios.1,
            if within_ratio(ratios) {
                "within"
            } else {
                "NOT within"
            }
        );
    }
}

impl ApprovalsResult {
    pub(crate) fn to_json(&self) -> serde_json::Value {
        json!({
            "requests": self.requests,
            "warmup": self.warmup,
            "latency_to_answered": self.to_answered.to_json(),
            "latency_round_trip": self.round_trip.to_json(),
            "wall_s": (self.run.wall.as_secs_f64() * 1000.0).round() / 1000.0,
            "hub_cpu_us_per_request": round1(self.run.cpu_us_per_op()),
            "hub_cpu_clock_us_per_request": self.run.hub_cpu.clock_us_per(self.run.ops).map(round1),
        })
    }

    /// Lines appended under the store's table.
    pub(crate) fn to_table(&self, t: &mut String) {
        let _ = writeln!(
            t,
            "approvals: {} permission requests answered one after another ({} warm-up), {:.2} s; hub CPU {:.0} µs per request",
            self.requests,
            self.warmup,
            self.run.wall.as_secs_f64(),
            self.run.cpu_us_per_op(),
        );
        for (label, l) in [
            ("task_answer -> answered reply", &self.to_answered),
            ("task_answer -> agent's next request", &self.round_trip),
        ] {
            let _ = writeln!(
                t,
                "  {label:<42} p50 {:>8.0} µs   p99 {:>8.0} µs   max {:>8.0} µs",
                l.p50_us, l.p99_us, l.max_us
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn within_two_x_needs_both_idle_runs_and_a_number() {
        assert!(within_ratio((1.0, 2.0)));
        assert!(!within_ratio((2.01, 1.0)));
        assert!(!within_ratio((1.0, 2.5)));
        assert!(!within_ratio((f64::NAN, 1.0)));
    }
}
