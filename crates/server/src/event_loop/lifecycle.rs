//! The server's life after startup (SPEC §4.6; part of the IO shell, `event_loop/mod.rs`):
//! signals as the loop sees them (SIGTERM/SIGINT stop, SIGHUP reloads the roster and the agent
//! manifests), the stop's drain (no new connections, parked awaits closed, running tasks
//! cancelled and reaped, up to the write deadline), and the last commits, closes and records
//! before the process ends. Refuses: what a stop means for queues and tasks (the core's
//! `shutdown`), and the signal handlers themselves (`signal`).

use super::signal::Signals;
use super::{read_clock, Server};
use agent_hub_proto::hub::ConnId;
use agent_hub_proto::kernel::now::Now;
use std::path::PathBuf;
use std::time::Instant;

/// Signals, what SIGHUP reads again, and the stop.
pub(super) struct Lifecycle {
    /// None in tests that stop the server another way.
    signals: Option<Signals>,
    /// The roster file, read again on SIGHUP (`roster_reload`); None in tests that build a
    /// server from a parsed roster.
    pub(super) roster_path: Option<PathBuf>,
    pub(super) shutting_down: bool,
    /// When the stop's drain gives up on what is still open.
    pub(super) deadline: Option<Instant>,
}

impl Lifecycle {
    pub(super) fn new(signals: Option<Signals>) -> Lifecycle {
        Lifecycle {
            signals,
            roster_path: None,
            shutting_down: false,
            deadline: None,
        }
    }
}

impl Server {
    /// The signal pipe is readable: SIGHUP reloads the roster and the agent manifests,
    /// SIGTERM/SIGINT begin the stop.
    pub(super) fn take_signals(&mut self, now: Now) {
        let pending = self
            .lifecycle
            .signals
            .as_mut()
            .map(Signals::drain)
            .unwrap_or_default();
        if pending.reload {
            self.reload_roster(now);
            self.reload_manifests();
        }
        if pending.stop {
            self.begin_shutdown(now);
        }
    }

    /// Whether the loop ends now: the stop began and its drain is done or out of time.
    pub(super) fn drained(&self, mono: Instant) -> bool {
        // The drain waits for open connections, for running tasks' outcomes (the cancel
        // asked at shutdown) and for their runners to reap the agents, up to the deadline
        // (SPEC §4.6, docs/delegation.md). An outcome comes before the agent's shutdown
        // escalation; a hub that left then would orphan an agent that ignores stdin EOF
        // (codex-acp, seen by scripts/e2e-agents.sh), as its runner thread dies with us.
        let runners = self.tasks.running();
        self.lifecycle.shutting_down
            && ((self.conns.map.is_empty() && self.hub.active_tasks() == 0 && runners == 0)
                || self.lifecycle.deadline.is_some_and(|d| mono >= d))
    }

    /// After the loop: the last commits, closes and records (SPEC §4.6).
    pub(super) fn stop(&mut self) {
        // Whatever is staged is committed and flushed, and its replies written, before the
        // process ends; a flush that outlasts the write deadline (a hung disk) is given up on.
        let give_up =
            agent_hub_proto::kernel::deadline::after(Instant::now(), self.limits.write_timeout());
        self.commit_and_flush_all(give_up);
        // The drain deadline passed with connections still open: each is released as a failed
        // write releases it, so a delivery cut short is lost and bounced, one not started goes
        // back to its queue, and an unacked one is returned (SPEC §4.6, §5.3). Their records,
        // and the bounces, are committed like any other before the process ends.
        let now = read_clock();
        let left: Vec<ConnId> = self.conns.map.keys().copied().collect();
        for id in left {
            self.close(
                id,
                false,
                "the hub stopped before this connection finished",
                now,
            );
        }
        self.commit_and_flush_all(give_up);
        if self.hub.has_staged_sends() {
            // Bounces whose commit kept failing: their losses are audited, the notices are not.
            self.records.log(
                "ERROR",
                "stopping with bounces that could not be committed (the queue store or the audit log is failing); their senders are not told",
            );
        }
        // What the strangers' rate counted goes out before the `shutdown` record (SPEC §8.1).
        let now = read_clock();
        self.hub.flush_strangers(now);
        self.hub.stopped();
        self.drain_outputs();
        let _ = self.records.flush_audit(std::iter::empty());
        self.records.record_head_moved();
        if let Some(head) = self.records.chain_head() {
            // A copy of the head outside the audit log: `audit verify --anchor` checks it.
            self.records
                .log("INFO", &format!("audit chain head at stop: sha256 {head}"));
        }
        self.records.log("INFO", "hub stopped");
        self.records.flush_service();
    }

    /// Settles (commit point, socket writes) until nothing is staged, waiting for the store's
    /// flushes up to `give_up`.
    fn commit_and_flush_all(&mut self, give_up: Instant) {
        loop {
            let now = read_clock();
            self.settle(now);
            let Some((reports, stuck)) = self.commits.wait_all(give_up) else {
                break;
            };
            self.apply_flushes(reports, now);
            if stuck {
                self.records.log(
                    "ERROR",
                    &format!(
                        "the queue store's flush did not finish within {} ms; stopping without confirming {} replies",
                        self.limits.write_timeout_ms,
                        self.hub.held_replies()
                    ),
                );
                break;
            }
        }
    }

    fn begin_shutdown(&mut self, now: Now) {
        if self.lifecycle.shutting_down {
            return;
        }
        self.lifecycle.shutting_down = true;
        self.records.log(
            "INFO",
            "shutdown requested; no new connections; closing parked awaits",
        );
        self.accepting.close(self.poll.registry());
        self.lifecycle.deadline = Some(agent_hub_proto::kernel::deadline::after(
            now.mono,
            self.limits.write_timeout(),
        ));
        self.relay
            .close_all(&mut self.records, self.poll.registry(), now);
        self.hub.shutdown(now);
        self.log_refusals(now, true);
    }
}
