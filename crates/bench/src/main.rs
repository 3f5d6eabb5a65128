//! `agent-hub-bench`: measures the release `agent-hub-server` from outside, the way agents use
//! it, and reports what the hub itself spends (docs/performance.md).
//!
//! Owns: a throwaway hub (temp dir with config, roster and tokens, the server process), the
//! client side of each benchmark spoken directly over `std::net` with the `agent_hub_proto::wire`
//! types, and the hub's own CPU time and RSS read from `/proc/PID`. Refuses: anything inside
//! the server (it is a black box here) and sleeping to synchronize (only short bounded polls of
//! `/proc` and of the child's exit).
//!
//! Every phase runs once per queue store (`--store memory|sqlite|both`): the in-memory store and
//! the SQLite store (WAL, `sync = "full"`: flushed to disk before `accepted`) side by side in one
//! run, the stores taking turns phase by phase so that a change in the machine's load hits both
//! alike. Before the phases the bench describes the temp dir's filesystem and times raw `fdatasync`
//! calls on it, since a durable send can be no quicker than the flush its commit waits for.
//!
//! Phases, each on a fresh hub (and a fresh database) so one phase's heap and queues never skew
//! the next:
//! 1. connection-per-op sends with C client threads, then the queue drained (a fresh hub per C);
//! 2. handoff latency: a parked await, then a send, timed until the awaiter has the envelope;
//! 3. ack-mode handoff: the same with `"ack":true`, timed until the hub's `acked` line;
//! 4. RSS per parked await;
//! 5. round trips/s of concurrent request → reply pairs;
//! 6. mail across hubs (SPEC §15): a second hub ("west") linked to the first ("east") by the
//!    relay with `forward = true`; handoff latency from a send on east to an await parked on
//!    west, then end-to-end throughput of sends on east drained by awaits on west;
//! 7. delegated work (issue 11) on `fake-acp-agent`: delegate to first `session/update` and to
//!    the outcome envelope, hub CPU per task, hub RSS per running task, and the handoff of
//!    phase 2 with many tasks running (`--delegate-only` runs only this phase); and the round
//!    trip of one permission request through the hub, request → envelope → answer → agent
//!    (`phase_approvals`, issue 37; `--approvals-only` runs only that part);
//! 8. scale (`--scale` runs only this, off by default; `phase_scale`, `scale_fixture`): how
//!    cost grows with queued envelopes, agents and remembered ids (issue 13).
//!
//! Then, in process and without a hub (`--relay-only` runs only this; `--no-relay` skips it), the
//! relay (issue 4; the section "relay" below): the LZ4 table of docs/performance.md "Relay" on
//! payloads built here, two `relay::Session`s over a real 127.0.0.1 TCP connection with and without
//! frames and lz4, and the bytes of full against delta heartbeats for a 50-agent directory.
//!
//! The code, one job per module: `options` (the command line and fixed parameters), `runner`
//! (the phases in order), `fixtures` and `hub_process` (the throwaway hub), `client` (the
//! wire, client side), `stats` and `disk` (what is measured and how), one `phase_*` module per
//! phase, `delegate_fixture`, `delegate_direct` and `delegate_report` (phase 7's files, its
//! no-hub floor and its figures), `relay_*`
//! (the in-process relay measurements) and `report` (text and JSON).
//!
//! `--peers` runs instead only the side-by-side comparison of issue 13 (the folder `peers/`):
//! workloads W1 to W4 on agent-hub and on Redis, beanstalkd and NATS where installed.

use crate::fixtures::{INTERRUPTED, SIGNAL_THREAD};
use crate::options::Opts;
use crate::runner::run;

mod base;
mod client;
mod delegate_direct;
mod delegate_fixture;
mod delegate_report;
mod disk;
mod fixtures;
mod hub_process;
mod options;
mod peers;
mod phase_approvals;
mod phase_delegate;
mod phase_forward;
mod phase_handoff;
mod phase_pairs;
mod phase_parked;
mod phase_scale;
mod phase_sends;
mod relay_codec;
mod relay_corpus;
mod relay_link;
mod relay_report;
mod report;
mod runner;
mod scale_fixture;
mod stats;

use clap::Parser;
use std::process::ExitCode;
use std::sync::atomic::Ordering;

fn main() -> ExitCode {
    let opts = Opts::parse();
    match run(&opts) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // A phase that failed because the signal thread killed the hub: let that thread
            // finish its cleanup and exit with 128+signal rather than report a bogus error.
            if INTERRUPTED.load(Ordering::SeqCst) {
                if let Some(h) = SIGNAL_THREAD.lock().ok().and_then(|mut h| h.take()) {
                    let _ = h.join();
                }
            }
            eprintln!("agent-hub-bench: {e}");
            ExitCode::from(1)
        }
    }
}
