//! Phase 7: delegated work (issue 11, docs/delegation.md) on the fake ACP agent, measured the
//! way a delegator sees it (docs/performance.md "Delegation").
//!
//! Owns the three measurements: (a) per task, one after another, the time from the
//! delegate's `connect()` to the agent's first `session/update` (the agent's own wall clock,
//! `--stamps`) and to the `task_outcome` envelope at a parked await, and the hub CPU per task;
//! (b) hub RSS with K tasks running against none; (c) the handoff latency of phase 2 with
//! those K tasks running, against the same hub idle before and after. Refuses: sleeping to
//! synchronize (bounded polls of `/proc` and of the stamps file only) and any claim about
//! the agent's own cost (the fake agent is a separate process; only the hub is measured).

use crate::base::Res;
use crate::client::{expect_ok, open, read_line, Conn};
use crate::delegate_direct::{direct_agent_runs, DirectResult};
use crate::delegate_fixture::{
    parse_stamps, wall_gap, wall_now_ns, DelegateFixture, DONE_AGENT, HANG_AGENT,
};
use crate::fixtures::{Agent, Fixture};
use crate::hub_process::with_hub_config;
use crate::hub_process::HubProcess;
use crate::options::{Opts, StoreKind, IO_TIMEOUT, POLL_STEP, SETTLE_TIMEOUT};
use crate::phase_handoff::{handoff_between, HandoffResult};
use crate::stats::{Latency, Run};
use agent_hub_proto::wire::{AwaitRequest, ClientLine, HubLine};
use agent_hub_proto::wire::{DelegateRequest, TaskRequest};
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

pub(crate) struct DelegateResult {
    pub(crate) tasks: usize,
    pub(crate) warmup: usize,
    /// Delegate `connect()` → the hub's `delegated` line read (the task committed).
    pub(crate) to_delegated: Latency,
    /// … → the agent process began (`main`): the hub's start of the task and the spawn.
    pub(crate) to_agent_start: Latency,
    /// … → `session/prompt` at the agent: the above plus `initialize` and `session/new`.
    pub(crate) to_prompt: Latency,
    /// … → the agent's first `session/update` written.
    pub(crate) to_first_update: Latency,
    /// … → the `task_outcome` envelope read by the delegator's parked await.
    pub(crate) to_outcome: Latency,
    /// The timed tasks: wall clock and hub CPU from the first delegate to the last task's
    /// runner gone (its threads ended).
    pub(crate) run: Run,
    /// Of that CPU, the event loop thread's (the rest is the runner threads', which have
    /// ended and so count in the process's total only), clock-tick grain.
    pub(crate) loop_thread_cpu: Duration,
    pub(crate) running: usize,
    pub(crate) rss_idle: u64,
    pub(crate) rss_running: u64,
    pub(crate) rss_after: u64,
    pub(crate) threads_idle: usize,
    pub(crate) threads_running: usize,
    pub(crate) idle_before: HandoffResult,
    pub(crate) loaded: HandoffResult,
    pub(crate) idle_after: HandoffResult,
    /// The machine's 1, 5 and 15 minute load averages (/proc/loadavg) as the phase began and
    /// ended: on a shared machine they say how much else was running.
    pub(crate) load_start: String,
    pub(crate) load_end: String,
    /// The floor: the same agent started and spoken to by the bench itself, no hub.
    pub(crate) direct: DirectResult,
    pub(crate) ticks_per_sec: u64,
}

impl DelegateResult {
    pub(crate) fn rss_per_running_task(&self) -> f64 {
        (self.rss_running as f64 - self.rss_idle as f64) / self.running as f64
    }
}

/// Both parts on fresh hubs of the store `kind`: the timed tasks on one, the parked tasks
/// and the handoffs on another (so the first part's heap does not hide the second's growth).
pub(crate) fn phase_delegate(
    server: &Path,
    fx: &Fixture,
    dfx: &DelegateFixture,
    opts: &Opts,
    kind: StoreKind,
) -> Res<DelegateResult> {
    let load_start = loadavg();
    let direct = direct_agent_runs(&dfx.fake, &dfx.cwd, opts.delegate_tasks)?;
    let config = dfx.config(kind);
    let timed = with_hub_config(server, fx, kind, config, |hub| {
        timed_tasks(hub, fx, dfx, opts.delegate_tasks)
    })?;
    let handoffs = opts.handoffs_for(kind);
    let parked = with_hub_config(server, fx, kind, config, |hub| {
        parked_tasks(hub, fx, dfx, opts.delegate_running, handoffs)
    })?;
    Ok(DelegateResult {
        tasks: opts.delegate_tasks,
        warmup: timed.warmup,
        to_delegated: timed.to_delegated,
        to_agent_start: timed.to_agent_start,
        to_prompt: timed.to_prompt,
        to_first_update: timed.to_first_update,
        to_outcome: timed.to_outcome,
        run: timed.run,
        loop_thread_cpu: timed.loop_thread_cpu,
        running: opts.delegate_running,
        rss_idle: parked.rss_idle,
        rss_running: parked.rss_running,
        rss_after: parked.rss_after,
        threads_idle: parked.threads_idle,
        threads_running: parked.threads_running,
        idle_before: parked.idle_before,
        loaded: parked.loaded,
        idle_after: parked.idle_after,
        load_start,
        load_end: loadavg(),
        direct,
        ticks_per_sec: timed.ticks_per_sec,
    })
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|t| t.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

struct Timed {
    warmup: usize,
    to_delegated: Latency,
    to_agent_start: Latency,
    to_prompt: Latency,
    to_first_update: Latency,
    to_outcome: Latency,
    run: Run,
    loop_thread_cpu: Duration,
    ticks_per_sec: u64,
}

/// Per task: an await for `task_outcome` is parked first (its `ok` read), then the clock
/// starts and the delegator connects and writes hello + delegate; the clock stops when the
/// parked await has read the outcome envelope. Then the bench waits (bounded poll of
/// `/proc/PID/status`) until the hub is back to its idle thread count, i.e. the runner has
/// reaped the agent, so no task overlaps the next and the CPU of the timed tasks is whole.
fn timed_tasks(hub: &HubProcess, fx: &Fixture, dfx: &DelegateFixture, tasks: usize) -> Res<Timed> {
    remove_if_present(&dfx.done_stamps)?;
    let warmup = (tasks / 10).clamp(1, 20);
    let threads_idle = hub_threads(hub)?;
    let park = outcome_await_bytes(&fx.delegator, None);
    let mut buf = Vec::with_capacity(1024);
    let mut rbuf = Vec::with_capacity(4096);
    let mut starts_ns = Vec::with_capacity(tasks);
    let (mut to_delegated, mut to_outcome) = (Vec::with_capacity(tasks), Vec::with_capacity(tasks));
    let mut cpu0 = hub.cpu()?;
    let mut loop0 = loop_thread_ticks(hub)?;
    let mut t_start = Instant::now();
    for i in 0..warmup + tasks {
        if i == warmup {
            cpu0 = hub.cpu()?;
            loop0 = loop_thread_ticks(hub)?;
            t_start = Instant::now();
        }
        let mut rx = open(hub.addr, &park)?;
        expect_ok(&mut rx, &mut rbuf)?;
        let bytes = delegate_bytes(&fx.delegator, DONE_AGENT, &dfx.cwd, &prompt_of(i))?;
        let w0 = wall_now_ns()?;
        let t0 = Instant::now();
        let mut tx = open(hub.addr, &bytes)?;
        expect_ok(&mut tx, &mut buf)?;
        let task = expect_delegated(&mut tx, &mut buf)?;
        let delegated = t0.elapsed();
        let outcome = read_outcome(&mut rx, &mut rbuf)?;
        let elapsed = t0.elapsed();
        check_outcome(&outcome, &task, "completed")?;
        if i >= warmup {
            starts_ns.push(w0);
            to_delegated.push(delegated);
            to_outcome.push(elapsed);
        }
        wait_threads(hub, threads_idle)?;
    }
    let wall = t_start.elapsed();
    let hub_cpu = hub.cpu()?.saturating_sub(cpu0);
    let loop_ticks = loop_thread_ticks(hub)?.saturating_sub(loop0);
    let loop_thread_cpu =
        Duration::from_nanos(loop_ticks * 1_000_000_000 / hub.ticks_per_sec.max(1));
    let stamps = parse_stamps(&read_stamps(&dfx.done_stamps)?)?;
    let (mut start, mut prompt, mut update) = (Vec::new(), Vec::new(), Vec::new());
    for (n, &w0) in starts_ns.iter().enumerate() {
        let p = prompt_of(warmup + n);
        let s = stamps
            .get(&p)
            .ok_or_else(|| format!("the fake agent left no stamp for {p:?}"))?;
        start.push(wall_gap(w0, s.start_ns)?);
        prompt.push(wall_gap(w0, s.prompt_ns)?);
        update.push(wall_gap(w0, s.update_ns)?);
    }
    Ok(Timed {
        warmup,
        to_delegated: Latency::of(to_delegated),
        to_agent_start: Latency::of(start),
        to_prompt: Latency::of(prompt),
        to_first_update: Latency::of(update),
        to_outcome: Latency::of(to_outcome),
        run: Run {
            clients: 1,
            ops: tasks,
            wall,
            hub_cpu,
            latency: None,
            flushes: None,
        },
        loop_thread_cpu,
        ticks_per_sec: hub.ticks_per_sec,
    })
}

struct Parked {
    rss_idle: u64,
    rss_running: u64,
    rss_after: u64,
    threads_idle: usize,
    threads_running: usize,
    idle_before: HandoffResult,
    loaded: HandoffResult,
    idle_after: HandoffResult,
}

/// The idle handoffs first (they also warm the hub up), then the idle RSS; `count` tasks on
/// the hanging agent, each delegated and then confirmed running with its first update folded
/// in (`task_status` polled: `running`, `progress.updates >= 1`); the running RSS; the loaded
/// handoffs; every task cancelled and its `cancelled` outcome awaited; the runners gone; the
/// idle handoffs again.
fn parked_tasks(
    hub: &HubProcess,
    fx: &Fixture,
    dfx: &DelegateFixture,
    count: usize,
    handoffs: usize,
) -> Res<Parked> {
    remove_if_present(&dfx.hang_stamps)?;
    let handoff = || {
        handoff_between(
            &[hub],
            &fx.hand_tx,
            &fx.hand_rx,
            &fx.hand_rx.name,
            handoffs,
            false,
        )
    };
    let idle_before = handoff()?;
    let threads_idle = hub_threads(hub)?;
    let rss_idle = hub.rss_bytes()?;
    let mut buf = Vec::with_capacity(4096);
    let mut tasks = Vec::with_capacity(count);
    for j in 0..count {
        let bytes = delegate_bytes(
            &fx.delegator,
            HANG_AGENT,
            &dfx.cwd,
            &format!("bench hang {j}"),
        )?;
        let mut tx = open(hub.addr, &bytes)?;
        expect_ok(&mut tx, &mut buf)?;
        tasks.push(expect_delegated(&mut tx, &mut buf)?);
    }
    let until = Instant::now() + SETTLE_TIMEOUT;
    for task in &tasks {
        loop {
            let line = ClientLine::TaskStatus(TaskRequest { task: task.clone() });
            let rec = match verb(hub.addr, &fx.delegator, &line, &mut buf)? {
                HubLine::TaskStatus(r) => r,
                other => return Err(format!("task_status: expected a record, got {other:?}")),
            };
            let updates = rec.progress.as_ref().map_or(0, |p| p.updates);
            if rec.state == "running" && updates >= 1 {
                break;
            }
            if !matches!(rec.state.as_str(), "queued" | "running") {
                return Err(format!(
                    "parked task {task} ended {} ({}) instead of running",
                    rec.state,
                    rec.reason.unwrap_or_default()
                ));
            }
            if Instant::now() >= until {
                return Err(format!(
                    "parked task {task} not running with an update after {SETTLE_TIMEOUT:?} (state {})",
                    rec.state
                ));
            }
            std::thread::sleep(POLL_STEP);
        }
    }
    let rss_running = hub.rss_bytes()?;
    let threads_running = hub_threads(hub)?;
    // Every parked agent had its prompt (the stamps file was empty before this part).
    let hang = parse_stamps(&read_stamps(&dfx.hang_stamps)?)?;
    if let Some(j) = (0..count).find(|j| !hang.contains_key(&format!("bench hang {j}"))) {
        return Err(format!("parked task {j}: the agent left no stamp"));
    }
    let loaded = handoff()?;
    for task in &tasks {
        let line = ClientLine::Cancel(TaskRequest { task: task.clone() });
        match verb(hub.addr, &fx.delegator, &line, &mut buf)? {
            HubLine::Cancel(r) if r.task == *task => {}
            other => return Err(format!("cancel {task}: got {other:?}")),
        }
    }
    let mut left: std::collections::HashSet<&String> = tasks.iter().collect();
    let park = outcome_await_bytes(&fx.delegator, Some(IO_TIMEOUT.as_secs()));
    while !left.is_empty() {
        let mut rx = open(hub.addr, &park)?;
        expect_ok(&mut rx, &mut buf)?;
        let outcome = read_outcome(&mut rx, &mut buf)?;
        let task = outcome.task.clone();
        if !left.remove(&task) {
            return Err(format!(
                "an outcome for {task}, not a parked task or seen twice"
            ));
        }
        check_outcome(&outcome, &task, "cancelled")?;
    }
    wait_threads(hub, threads_idle)?;
    let rss_after = hub.rss_bytes()?;
    let idle_after = handoff()?;
    Ok(Parked {
        rss_idle,
        rss_running,
        rss_after,
        threads_idle,
        threads_running,
        idle_before,
        loaded,
        idle_after,
    })
}

/// The prompt of timed task `i`: unique, so the stamps file says which task a line is.
fn prompt_of(i: usize) -> String {
    format!("bench task {i}")
}

pub(crate) fn delegate_bytes(from: &Agent, agent: &str, cwd: &Path, prompt: &str) -> Res<Vec<u8>> {
    let cwd = cwd
        .to_str()
        .ok_or_else(|| format!("{} is not UTF-8", cwd.display()))?;
    let line = ClientLine::Delegate(DelegateRequest {
        agent: agent.to_owned(),
        cwd: cwd.to_owned(),
        prompt: prompt.to_owned(),
        ..DelegateRequest::default()
    });
    let mut out = from.hello.to_vec();
    out.extend_from_slice(line.encode().as_bytes());
    Ok(out)
}

/// hello + `{"await":{"kind":"task_outcome"}}` (no `replyTo`: parked before the task id is
/// known, as a delegator waiting for whichever task ends first would be).
fn outcome_await_bytes(from: &Agent, timeout_secs: Option<u64>) -> Vec<u8> {
    let mut out = from.hello.to_vec();
    let req = AwaitRequest {
        reply_to: None,
        kind: Some("task_outcome".into()),
        timeout_secs,
        ack: None,
        reader: None,
    };
    out.extend_from_slice(ClientLine::Await(req).encode().as_bytes());
    out
}

/// One verb on its own connection (hello + line), its `ok` read; returns the answer.
fn verb(addr: SocketAddr, from: &Agent, line: &ClientLine, buf: &mut Vec<u8>) -> Res<HubLine> {
    let mut bytes = from.hello.to_vec();
    bytes.extend_from_slice(line.encode().as_bytes());
    let mut conn = open(addr, &bytes)?;
    expect_ok(&mut conn, buf)?;
    read_line(&mut conn, buf)
}

pub(crate) fn expect_delegated(conn: &mut Conn, buf: &mut Vec<u8>) -> Res<String> {
    match read_line(conn, buf)? {
        HubLine::Delegated(r) => Ok(r.task),
        other => Err(format!("delegate: expected delegated, got {other:?}")),
    }
}

/// The fields of a `task_outcome` envelope the bench checks.
struct OutcomeSeen {
    task: String,
    correlation_id: Option<String>,
    from: String,
    kind: String,
    state: String,
    reason: String,
}

fn read_outcome(conn: &mut Conn, buf: &mut Vec<u8>) -> Res<OutcomeSeen> {
    let text = match read_line(conn, buf)? {
        HubLine::Envelope(text) => text,
        other => {
            return Err(format!(
                "await task_outcome: expected an envelope, got {other:?}"
            ))
        }
    };
    let v: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("outcome envelope: {e}"))?;
    let s = |x: &serde_json::Value| x.as_str().unwrap_or_default().to_owned();
    Ok(OutcomeSeen {
        task: s(&v["body"]["task"]),
        correlation_id: v["correlationId"].as_str().map(str::to_owned),
        from: s(&v["from"]),
        kind: s(&v["kind"]),
        state: s(&v["body"]["state"]),
        reason: s(&v["body"]["reason"]),
    })
}

fn check_outcome(o: &OutcomeSeen, task: &str, state: &str) -> Res<()> {
    if o.task != task || o.correlation_id.as_deref() != Some(task) {
        return Err(format!(
            "outcome for {} (correlationId {:?}), expected {task}",
            o.task, o.correlation_id
        ));
    }
    if o.from != "hub" || o.kind != "task_outcome" {
        return Err(format!("outcome from {:?} of kind {:?}", o.from, o.kind));
    }
    if o.state != state {
        return Err(format!(
            "task {task} ended {} ({}), expected {state}",
            o.state, o.reason
        ));
    }
    Ok(())
}

/// utime + stime of the hub's first thread (its event loop), in clock ticks.
fn loop_thread_ticks(hub: &HubProcess) -> Res<u64> {
    let text = std::fs::read_to_string(format!("/proc/{0}/task/{0}/stat", hub.pid))
        .map_err(|e| format!("hub thread stat: {e}"))?;
    stat_cpu_ticks(&text)
}

/// utime + stime (fields 14 and 15, proc(5)) of a `/proc/…/stat` line. The command name in
/// parentheses may hold spaces and parentheses, so fields are counted after its last `)`.
pub(crate) fn stat_cpu_ticks(stat: &str) -> Res<u64> {
    let rest = stat
        .rsplit_once(')')
        .map(|(_, r)| r)
        .ok_or("stat: no command field")?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |i: usize| -> Res<u64> {
        fields
            .get(i)
            .and_then(|f| f.parse().ok())
            .ok_or_else(|| format!("stat: field {} unreadable", i + 3))
    };
    Ok(field(11)? + field(12)?)
}

/// `Threads:` of `/proc/PID/status`: each running task holds five hub threads
/// (crates/server/src/runner/mod.rs), so the count falls back to idle once every runner has ended.
fn hub_threads(hub: &HubProcess) -> Res<usize> {
    let text = std::fs::read_to_string(format!("/proc/{}/status", hub.pid))
        .map_err(|e| format!("hub status: {e}"))?;
    parse_threads(&text)
}

pub(crate) fn parse_threads(status: &str) -> Res<usize> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| "hub status: no Threads line".to_owned())
}

fn wait_threads(hub: &HubProcess, idle: usize) -> Res<()> {
    let until = Instant::now() + SETTLE_TIMEOUT;
    loop {
        let n = hub_threads(hub)?;
        if n <= idle {
            return Ok(());
        }
        if Instant::now() >= until {
            return Err(format!(
                "the hub still has {n} threads {SETTLE_TIMEOUT:?} after its tasks ended (idle: {idle})"
            ));
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

fn remove_if_present(path: &Path) -> Res<()> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(format!("cannot remove {}: {e}", path.display())),
    }
}

fn read_stamps(path: &Path) -> Res<String> {
    std::fs::read_to_string(path).map_err(|e| {
        format!(
            "the fake agent's stamps {}: {e} (is the fake agent a build with --stamps?)",
            path.display()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_come_from_the_status_line() {
        let status = "Name:\tagent-hub-serv\nState:\tS (sleeping)\nThreads:\t7\nSigQ:\t0/31\n";
        assert_eq!(parse_threads(status).unwrap(), 7);
        assert!(parse_threads("Name:\tx\n").is_err());
        assert!(parse_threads("Threads:\tmany\n").is_err());
    }

    #[test]
    fn stat_cpu_is_utime_plus_stime_counted_after_the_last_parenthesis() {
        // pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt
        // utime stime cutime cstime …: a comm with ") 9 9" in it must not shift the fields.
        let stat = "4242 (odd) 9 9 name) S 1 4242 4242 0 -1 4194560 100 0 0 0 37 5 700 800 20 0";
        assert_eq!(stat_cpu_ticks(stat).unwrap(), 42);
        assert!(stat_cpu_ticks("4242 (x) S 1 2").is_err());
        assert!(stat_cpu_ticks("no parenthesis").is_err());
    }
}
