//! `agent-hub-bench --peers` (issue 13): the same four workloads, side by side in one run, on
//! agent-hub (in-memory store, audit and service log on as shipped) and on each of Redis,
//! beanstalkd and NATS that is found on PATH (an absent one is skipped with a line saying so).
//! The commands on every target mirror `../shared/bench` (docs/performance.md, "Side by side
//! with the peers"), so its figures and these compare.
//!
//! Owns: the plan (which targets, which binaries), the repetitions (a fresh server of every
//! target per repetition, all started before and stopped after it; within it the workloads in
//! turn and the targets interleaved inside each, so drift in the machine's load hits all
//! alike), and the per-target record of figures and failures. A workload that fails on one
//! target is recorded and the run goes on; only a fault of the bench itself ends it.
//!
//! The code, one job per module: `conn` (a buffered connection and the framing helpers),
//! `target` (the vocabulary the workloads speak), one client per target (`hub`, `redis`,
//! `beanstalk`, `nats`), `servers` (the peer processes and `/proc` readings), `window` (CPU and
//! syscalls over a measured window), one module per workload (`w1_sends` … `w4_pairs`), `floor`
//! (the least CPU a connection of W1's shape costs on this machine, which bounds W4), and
//! `report` (medians, the markdown table and the JSON).

use crate::base::progress;
use crate::base::Res;
use crate::fixtures::{find_server, install_interrupt_cleanup, raise_nofile, Fixture, WorkDir};
use crate::hub_process::HubProcess;
use crate::options::{Opts, PeerTarget, StoreKind, MAX_PEER_WAITERS};
use crate::report::Machine;
use std::path::{Path, PathBuf};
use std::sync::Arc;

mod beanstalk;
mod conn;
mod floor;
mod hub;
mod nats;
mod redis;
mod report;
mod servers;
mod target;
mod w1_sends;
mod w2_handoff;
mod w3_parked;
mod w4_pairs;
mod window;

use servers::{find_on_path, version_of, PeerKind, PeerProcess};
use target::PeerClient;

/// Which binary runs a target of the plan.
enum Which {
    Hub,
    Peer(PeerKind),
}

/// A target that will run, and its figures over the repetitions.
pub(crate) struct TargetRuns {
    pub(crate) name: &'static str,
    which_peer: Option<PeerKind>,
    pub(crate) binary: PathBuf,
    pub(crate) version: Option<String>,
    /// W1 per client count, in the order of `--peer-clients`.
    pub(crate) w1: Vec<(usize, Vec<w1_sends::W1>)>,
    pub(crate) w2: Vec<w2_handoff::W2>,
    pub(crate) w3: Vec<w3_parked::W3>,
    pub(crate) w4: Vec<w4_pairs::W4>,
    pub(crate) failures: Vec<String>,
}

/// A target absent from PATH.
pub(crate) struct Skipped {
    pub(crate) name: &'static str,
    pub(crate) reason: String,
}

/// One repetition's server of one target.
enum Server {
    Hub(HubProcess),
    Peer(PeerProcess),
}

struct Live {
    index: usize,
    client: Arc<dyn PeerClient>,
    pid: i32,
    server: Server,
}

impl Live {
    /// The workload's error, with the server's death added when that is what happened.
    fn explain(&mut self, e: String) -> String {
        let crash = match &mut self.server {
            Server::Hub(h) => h.check_alive(),
            Server::Peer(p) => p.check_alive(),
        };
        match crash {
            Err(c) => format!("{e}; {c}"),
            Ok(()) => e,
        }
    }
}

pub(crate) fn validate_peers(opts: &Opts) -> Res<()> {
    if opts.reps == 0 {
        return Err("--reps must be at least 1".into());
    }
    if opts.targets.is_empty() {
        return Err("--targets needs at least one of hub, redis, beanstalkd, nats".into());
    }
    if opts.peer_clients.is_empty() || opts.peer_clients.contains(&0) {
        return Err("--peer-clients needs one or more counts, each at least 1".into());
    }
    if !(opts.peer_secs > 0.0 && opts.peer_secs.is_finite() && opts.peer_secs <= 3600.0) {
        return Err("--peer-secs must be a number of seconds above 0 and at most 3600".into());
    }
    if opts.peer_handoffs == 0 || opts.pairs == 0 {
        return Err("--peer-handoffs and --pairs must be at least 1".into());
    }
    if !(1..=MAX_PEER_WAITERS).contains(&opts.peer_waiters) {
        return Err(format!("--peer-waiters must be 1..={MAX_PEER_WAITERS}"));
    }
    // beanstalkd's default job size limit is 65,535 bytes.
    if !(1..=65_000).contains(&opts.body_bytes) {
        return Err("--body-bytes must be 1..=65000".into());
    }
    Ok(())
}

pub(crate) fn run_side_by_side(opts: &Opts) -> Res<()> {
    validate_peers(opts)?;
    // Before any other thread exists, so that every thread inherits the blocked mask.
    install_interrupt_cleanup()?;
    let nofile = raise_nofile()?;
    let needed = opts.peer_waiters as u64 + 256;
    if nofile < needed {
        return Err(format!(
            "RLIMIT_NOFILE hard limit is {nofile}, but --peer-waiters {} needs about {needed} descriptors in the bench and in each server; lower --peer-waiters or raise the limit",
            opts.peer_waiters
        ));
    }
    let (mut runs, skipped) = plan(opts)?;
    for s in &skipped {
        progress(&format!("peers: {} skipped: {}", s.name, s.reason));
    }
    let work = WorkDir::create(opts.work_dir.as_deref(), opts.keep_dir)?;
    // The hub's fixture, with room for W3's waiters and W4's pairs.
    let mut fixture_opts = opts.clone();
    fixture_opts.parked = opts.peer_waiters;
    let fixture = Fixture::write(&work.path, &fixture_opts)?;
    let machine = Machine::read();
    let mut floors = Vec::new();
    for rep in 0..opts.reps {
        repetition(opts, rep, &work.path, &fixture, &mut runs)?;
        // As many client threads as W4 has (a requester and a responder per pair).
        progress(&format!(
            "peers: rep {}/{}: loopback floor",
            rep + 1,
            opts.reps
        ));
        match floor::floor(opts.pairs * 2, opts.peer_secs, opts.body_bytes) {
            Ok(f) => floors.push(f),
            Err(e) => progress(&format!(
                "peers: rep {}: the loopback floor failed: {e}",
                rep + 1
            )),
        }
    }
    // A peer's failure is the peer's (recorded, the run goes on); the hub's fails the run,
    // after the report, since the hub is what the bench is for.
    let hub_failures = runs
        .iter()
        .filter(|t| t.which_peer.is_none())
        .map(|t| t.failures.len())
        .sum::<usize>();
    let report = report::PeerReport {
        machine,
        runs,
        skipped,
        floors,
    };
    if opts.json {
        let v = report.to_json(opts);
        println!(
            "{}",
            serde_json::to_string_pretty(&v).map_err(|e| e.to_string())?
        );
    } else {
        print!("{}", report.to_text(opts));
    }
    if hub_failures > 0 {
        return Err(format!(
            "agent-hub failed {hub_failures} time(s) in the run (listed in the report)"
        ));
    }
    Ok(())
}

/// The targets asked for, each found (the hub: `--server` or next to this binary) or skipped.
fn plan(opts: &Opts) -> Res<(Vec<TargetRuns>, Vec<Skipped>)> {
    let path = std::env::var_os("PATH");
    let (mut runs, mut skipped) = (Vec::new(), Vec::new());
    let mut seen = Vec::new();
    for &t in &opts.targets {
        if seen.contains(&t) {
            continue;
        }
        seen.push(t);
        let which = match t {
            PeerTarget::Hub => Which::Hub,
            PeerTarget::Redis => Which::Peer(PeerKind::Redis),
            PeerTarget::Beanstalkd => Which::Peer(PeerKind::Beanstalkd),
            PeerTarget::Nats => Which::Peer(PeerKind::Nats),
        };
        let (name, which_peer, binary, version) = match which {
            Which::Hub => {
                let server = find_server(opts.server.as_deref())?;
                (
                    "agent-hub",
                    None,
                    server,
                    Some(env!("CARGO_PKG_VERSION").to_owned()),
                )
            }
            Which::Peer(kind) => match find_on_path(kind.binary(), path.as_deref()) {
                Some(bin) => {
                    let version = version_of(kind, &bin);
                    (kind.name(), Some(kind), bin, version)
                }
                None => {
                    skipped.push(Skipped {
                        name: kind.name(),
                        reason: format!("{} not found on PATH", kind.binary()),
                    });
                    continue;
                }
            },
        };
        runs.push(TargetRuns {
            name,
            which_peer,
            binary,
            version,
            w1: opts.peer_clients.iter().map(|&c| (c, Vec::new())).collect(),
            w2: Vec::new(),
            w3: Vec::new(),
            w4: Vec::new(),
            failures: Vec::new(),
        });
    }
    Ok((runs, skipped))
}

/// A short random id: no two runs (or repetitions) share a peer queue name.
fn run_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..8].to_owned()
}

fn start(t: &TargetRuns, index: usize, opts: &Opts, dir: &Path, fx: &Fixture) -> Res<Live> {
    let run = run_id();
    match t.which_peer {
        None => {
            let hub =
                HubProcess::start_with(&t.binary, fx.config(StoreKind::Memory), &fx.stderr_path)?;
            let client: Arc<dyn PeerClient> = Arc::new(hub::HubClient::new(hub.addr, fx));
            Ok(Live {
                index,
                client,
                pid: hub.pid,
                server: Server::Hub(hub),
            })
        }
        Some(kind) => {
            // Room for every W3 waiter beside the other workloads' connections.
            let max_clients = (opts.peer_waiters + 1_000).max(10_000);
            let p = PeerProcess::start(kind, &t.binary, &dir.join(kind.name()), max_clients)?;
            let client: Arc<dyn PeerClient> = match kind {
                PeerKind::Redis => Arc::new(redis::RedisClient {
                    addr: p.addr,
                    password: p.secret.clone(),
                    run,
                }),
                PeerKind::Beanstalkd => Arc::new(beanstalk::BeanstalkClient { addr: p.addr, run }),
                PeerKind::Nats => Arc::new(nats::NatsClient {
                    addr: p.addr,
                    token: p.secret.clone(),
                    run,
                }),
            };
            Ok(Live {
                index,
                client,
                pid: p.pid,
                server: Server::Peer(p),
            })
        }
    }
}

/// One repetition: every target's server started, the workloads in turn with the targets
/// interleaved inside each, every server stopped (also when a workload fails: `Drop`).
fn repetition(
    opts: &Opts,
    rep: usize,
    work: &Path,
    fx: &Fixture,
    runs: &mut [TargetRuns],
) -> Res<()> {
    let n = rep + 1;
    let dir = work.join(format!("rep-{n}"));
    let mut live = Vec::new();
    for (i, t) in runs.iter_mut().enumerate() {
        match start(t, i, opts, &dir, fx) {
            Ok(l) => live.push(l),
            Err(e) => {
                progress(&format!("peers: rep {n}: {} did not start: {e}", t.name));
                t.failures.push(format!("rep {n}: start: {e}"));
            }
        }
    }
    let body = opts.body_bytes;
    for (k, &clients) in opts.peer_clients.iter().enumerate() {
        for l in &mut live {
            let t = &mut runs[l.index];
            progress(&format!(
                "peers: rep {n}/{}: W1 {} C={clients}",
                opts.reps, t.name
            ));
            match w1_sends::w1_sends(&l.client, l.pid, clients, opts.peer_secs, body) {
                Ok(r) => t.w1[k].1.push(r),
                Err(e) => record(t, l, n, &format!("W1 C={clients}"), e),
            }
        }
    }
    for l in &mut live {
        let t = &mut runs[l.index];
        progress(&format!(
            "peers: rep {n}/{}: W2 {} handoffs",
            opts.reps, t.name
        ));
        match w2_handoff::w2_handoff(&l.client, l.pid, opts.peer_handoffs, body) {
            Ok(r) => t.w2.push(r),
            Err(e) => record(t, l, n, "W2", e),
        }
    }
    for l in &mut live {
        let t = &mut runs[l.index];
        progress(&format!(
            "peers: rep {n}/{}: W3 {} parked waiters",
            opts.reps, t.name
        ));
        match w3_parked::w3_parked(&l.client, l.pid, opts.peer_waiters) {
            Ok(r) => t.w3.push(r),
            Err(e) => record(t, l, n, "W3", e),
        }
    }
    for l in &mut live {
        let t = &mut runs[l.index];
        progress(&format!(
            "peers: rep {n}/{}: W4 {} request/reply pairs",
            opts.reps, t.name
        ));
        match w4_pairs::w4_pairs(&l.client, l.pid, opts.pairs, opts.peer_secs, body) {
            Ok(r) => t.w4.push(r),
            Err(e) => record(t, l, n, "W4", e),
        }
    }
    for l in live {
        match l.server {
            Server::Hub(h) => {
                if let Err(e) = h.stop() {
                    runs[l.index].failures.push(format!("rep {n}: stop: {e}"));
                }
            }
            Server::Peer(mut p) => p.terminate(),
        }
    }
    Ok(())
}

fn record(t: &mut TargetRuns, l: &mut Live, rep: usize, what: &str, e: String) {
    let e = l.explain(e);
    progress(&format!(
        "peers: rep {rep}: {what} on {} failed: {e}",
        t.name
    ));
    t.failures.push(format!("rep {rep}: {what}: {e}"));
}
