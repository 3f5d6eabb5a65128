//! Turn reports from an agent's hooks (SPEC §14, docs/delivery.md "Liveness"): `agent-hub
//! hook turn-start|turn-end|session-end`, and the idle/busy report `hook stop` adds after its
//! decision. Finds the agent's process and sends `turn` to the hub.
//!
//! The agent's process is the nearest ancestor of the hook that a built-in manifest names
//! (`agents::procs::match_agent`, the matching `agents ps` uses), found by walking
//! `/proc/PID/stat` parents; `--pid` names it directly (a plugin running inside the agent
//! knows its own pid). When none is found the report goes without a pid: the hub then knows
//! the state but watches no process, rather than watch a guess (a shell that outlives the
//! agent would keep it looking alive). A hook must never hold up or fail its agent's turn:
//! the connection is bounded by `CONNECT_TIMEOUT` and `REPLY_TIMEOUT` here, and every
//! failure is only logged to the hook log.

use super::run::Identity;
use super::state::HookLog;
use crate::client::{self, Endpoint};
use agent_hub_proto::wire::TurnRequest;
use std::time::Duration;

/// How long a turn report waits for the hub to accept the connection: a local hub answers in
/// microseconds; a hub that is down refuses at once.
pub const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);
/// How long it waits for the hub's answer.
pub const REPLY_TIMEOUT: Duration = Duration::from_millis(1000);
/// Ancestors looked at before giving up on finding the agent.
const MAX_ANCESTORS: usize = 32;

/// Sends one turn report; logs, never fails. `pid` overrides the ancestor walk.
pub fn report(id: &Identity, state: &str, pid: Option<u32>, log: &HookLog) {
    let process = match pid {
        Some(p) => Some((p, start_of(p))),
        None => agent_ancestor(),
    };
    let token = match agent_hub_host::token_file::read(&id.token_file) {
        Ok(t) => t,
        Err(e) => return log.line(&format!("turn {state}: {e}")),
    };
    let ep = Endpoint {
        name: id.name.clone(),
        token,
        port: id.port,
    };
    let req = TurnRequest {
        state: state.to_owned(),
        pid: process.map(|(p, _)| u64::from(p)),
        start: process.and_then(|(_, s)| s),
    };
    if let Err(e) = client::turn(&ep, req, CONNECT_TIMEOUT, REPLY_TIMEOUT) {
        log.line(&format!("turn {state} as {:?}: {e}", id.name));
    }
}

/// The nearest ancestor of this process that a built-in manifest recognises as an agent CLI,
/// with its start time; None if there is none (or no /proc to walk).
pub fn agent_ancestor() -> Option<(u32, Option<u64>)> {
    #[cfg(target_os = "linux")]
    {
        use agent_hub_host::agents::procs;
        let (manifests, _) = agent_hub_host::agents::manifest::builtins();
        let refs: Vec<&agent_hub_host::agents::manifest::Manifest> = manifests.iter().collect();
        // SAFETY: getppid has no failure mode and no memory effects.
        let mut pid = unsafe { libc::getppid() } as u32;
        for _ in 0..MAX_ANCESTORS {
            if pid <= 1 {
                return None;
            }
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|t| procs::parse_stat(&t))?;
            let argv = std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|b| procs::parse_cmdline(&b))
                .unwrap_or_default();
            if procs::match_agent(&argv, &stat.comm, &refs).is_some() {
                return Some((pid, Some(stat.starttime_ticks)));
            }
            pid = stat.ppid;
        }
        None
    }
    #[cfg(not(target_os = "linux"))]
    {
        None
    }
}

/// How long a turn hook reads its stdin (the agent's event JSON, which it ignores) before it
/// goes on without the rest.
pub const STDIN_WAIT: Duration = Duration::from_millis(500);
/// Bytes of stdin a turn hook reads at most.
const MAX_STDIN_BYTES: usize = 1024 * 1024;

/// Reads and drops stdin until end of file, `MAX_STDIN_BYTES` or `STDIN_WAIT`: the agent's
/// write of the event then never meets a closed pipe, and a caller that never closes stdin
/// cannot hold the hook. A terminal is not read.
pub fn drain_stdin() {
    // SAFETY: isatty only inspects the descriptor.
    if unsafe { libc::isatty(0) } == 1 {
        return;
    }
    let deadline = std::time::Instant::now() + STDIN_WAIT;
    let mut buf = [0u8; 8192];
    let mut total = 0usize;
    while total < MAX_STDIN_BYTES {
        if !crate::client::stdin::readable_by(deadline) {
            return;
        }
        // SAFETY: reads into a local buffer of the given length.
        let k = unsafe { libc::read(0, buf.as_mut_ptr().cast(), buf.len()) };
        if k <= 0 {
            return;
        }
        total += k as usize;
    }
}

/// A process's start time (Linux: `/proc/PID/stat` field 22), None where it cannot be read.
fn start_of(pid: u32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    agent_hub_host::agents::procs::parse_stat(&text).map(|s| s.starttime_ticks)
}
