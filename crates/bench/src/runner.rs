//! The run: checks the options, then per store a fresh hub for each phase in turn, and hands
//! the figures to `report`; `with_hub` starts and stops the hub around one phase.

use crate::base::{progress, Res};
use crate::delegate_fixture::{check_task_client, find_fake_agent, DelegateFixture};
use crate::disk::Disk;
use crate::fixtures::{find_server, install_interrupt_cleanup, raise_nofile, Fixture, WorkDir};
use crate::hub_process::with_hub;
use crate::options::{Opts, MAX_DELEGATE_RUNNING};
use crate::peers;
use crate::phase_approvals::phase_approvals;
use crate::phase_delegate::phase_delegate;
use crate::phase_forward::phase_forward;
use crate::phase_handoff::phase_handoff;
use crate::phase_pairs::phase_pairs;
use crate::phase_parked::phase_parked;
use crate::phase_scale::phase_scale;
use crate::phase_sends::{phase_drain, phase_sends};
use crate::relay_report::relay_bench;
use crate::report::{Machine, Report, StoreReport};
use serde_json::json;
use std::path::Path;

pub(crate) fn run(opts: &Opts) -> Res<()> {
    validate(opts)?;
    if opts.peers {
        return peers::run_side_by_side(opts);
    }
    if opts.relay_only {
        let machine = Machine::read();
        let relay = relay_bench(opts)?;
        if opts.json {
            let v = json!({
                "machine": {"nproc": machine.nproc, "cpu_model": machine.cpu_model, "kernel": machine.kernel},
                "relay": relay.to_json(opts),
            });
            println!(
                "{}",
                serde_json::to_string_pretty(&v).map_err(|e| e.to_string())?
            );
        } else {
            println!(
                "agent-hub-bench --relay-only: {} CPUs ({}), kernel {}\n",
                machine.nproc, machine.cpu_model, machine.kernel
            );
            print!("{}", relay.to_table(opts));
        }
        return Ok(());
    }
    // Before any other thread exists, so that every thread inherits the blocked mask.
    install_interrupt_cleanup()?;
    let server = find_server(opts.server.as_deref())?;
    if opts.scale {
        return scale_run(opts, &server);
    }
    // Phase 7's binaries are looked for before any phase runs, so a missing one fails the run
    // at once instead of after the other phases' minutes.
    let fake = if opts.delegate_tasks > 0 || opts.approval_requests > 0 {
        check_task_client(&server)?;
        Some(find_fake_agent(opts.fake_agent.as_deref())?)
    } else {
        None
    };
    let nofile = raise_nofile()?;
    let needed =
        opts.parked as u64 + 4 * opts.clients.iter().copied().max().unwrap_or(1) as u64 + 256;
    if nofile < needed {
        return Err(format!(
            "RLIMIT_NOFILE hard limit is {nofile}, but --parked {} needs about {needed} descriptors in the bench and in the hub; lower --parked or raise the limit",
            opts.parked
        ));
    }
    let work = WorkDir::create(opts.work_dir.as_deref(), opts.keep_dir)?;
    let fixture = Fixture::write(&work.path, opts)?;
    let machine = Machine::read();
    progress("disk: the temp dir's filesystem and raw fdatasync latency");
    let disk = Disk::probe(&work.path, opts.fsync_probes)?;
    let mut report = Report {
        machine,
        server: server.clone(),
        disk,
        sqlite_sync: opts.sqlite_sync.clone(),
        ..Report::default()
    };
    report.stores = opts.stores().into_iter().map(StoreReport::new).collect();

    if !opts.delegation_only() {
        hub_phases(opts, &server, &work, &fixture, &mut report)?;
    }
    if let Some(fake) = &fake {
        let dfx = DelegateFixture::write(&work.path, opts, fake)?;
        for r in &mut report.stores {
            let k = r.kind;
            if opts.delegate_tasks > 0 && !opts.approvals_only {
                progress(&format!(
                    "phase 7 ({}): delegated tasks on the fake ACP agent",
                    k.name()
                ));
                let d = phase_delegate(&server, &fixture, &dfx, opts, k)?;
                if report.ticks_per_sec == 0 {
                    report.ticks_per_sec = d.ticks_per_sec;
                }
                r.delegate = Some(d);
            }
            if opts.approval_requests > 0 {
                progress(&format!(
                    "phase 7 ({}): {} permission requests answered through the hub",
                    k.name(),
                    opts.approval_requests
                ));
                r.approvals = Some(phase_approvals(&server, &fixture, &dfx, opts, k)?);
            }
        }
    }
    if opts.fsync_probes > 0 {
        // Again after the phases: a shared disk's flush latency moves with its other users.
        progress("disk: raw fdatasync latency again");
        report.disk_after = Some(Disk::probe(&work.path, opts.fsync_probes)?);
    }
    if !opts.no_relay && !opts.delegation_only() {
        report.relay = Some(relay_bench(opts)?);
    }
    if opts.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report.to_json(opts)).map_err(|e| e.to_string())?
        );
    } else {
        print!("{}", report.to_table(opts));
    }
    Ok(())
}

/// Phases 1 to 6, each on a fresh hub per store.
fn hub_phases(
    opts: &Opts,
    server: &Path,
    work: &WorkDir,
    fixture: &Fixture,
    report: &mut Report,
) -> Res<()> {
    // Phases outer, stores inner (and in phase 1 client counts outer): the stores take turns,
    // so drift in the machine's load over the run hits both alike.
    for &c in &opts.clients {
        for r in &mut report.stores {
            let k = r.kind;
            progress(&format!(
                "phase 1 ({}): connection-per-op sends, C={c}",
                k.name()
            ));
            let n = opts.sends_for(k);
            let (send, drain, ticks) = with_hub(server, fixture, k, |hub| {
                let send = phase_sends(hub, fixture, c, n)?;
                let drain = phase_drain(hub, fixture, c, n)?;
                Ok((send, drain, hub.ticks_per_sec))
            })?;
            r.sends.push(send);
            r.drains.push(drain);
            report.ticks_per_sec = ticks;
        }
    }
    for ack in [false, true] {
        for r in &mut report.stores {
            let k = r.kind;
            let what = if ack {
                "phase 3 ({}): ack-mode handoff latency"
            } else {
                "phase 2 ({}): handoff latency"
            };
            progress(&what.replace("{}", k.name()));
            let h = with_hub(server, fixture, k, |hub| {
                phase_handoff(hub, fixture, opts.handoffs_for(k), ack)
            })?;
            if ack {
                r.ack_handoff = Some(h);
            } else {
                r.handoff = Some(h);
            }
        }
    }
    for r in &mut report.stores {
        let k = r.kind;
        progress(&format!("phase 4 ({}): RSS per parked await", k.name()));
        r.parked = Some(with_hub(server, fixture, k, |hub| {
            phase_parked(hub, fixture, opts.parked)
        })?);
    }
    for r in &mut report.stores {
        let k = r.kind;
        progress(&format!(
            "phase 5 ({}): request/reply round trips",
            k.name()
        ));
        r.pairs = Some(with_hub(server, fixture, k, |hub| {
            phase_pairs(hub, fixture, opts.pairs, opts.pairs_secs)
        })?);
    }
    if opts.forward_handoffs > 0 {
        for r in &mut report.stores {
            let k = r.kind;
            progress(&format!(
                "phase 6 ({}): mail across two linked hubs",
                k.name()
            ));
            r.forward = Some(phase_forward(server, &work.path, fixture, opts, k)?);
        }
    }
    Ok(())
}

pub(crate) fn validate(opts: &Opts) -> Res<()> {
    if opts.clients.is_empty() || opts.clients.contains(&0) {
        return Err("--clients needs one or more counts, each at least 1".into());
    }
    if opts.sends == 0 || opts.handoffs == 0 || opts.parked == 0 || opts.pairs == 0 {
        return Err("--sends, --handoffs, --parked and --pairs must be at least 1".into());
    }
    if opts.sqlite_sends == 0 || opts.sqlite_handoffs == 0 {
        return Err("--sqlite-sends and --sqlite-handoffs must be at least 1".into());
    }
    if opts.forward_handoffs > 0 && opts.forward_sends == 0 {
        return Err("--forward-sends must be at least 1 (use --forward-handoffs 0 to skip the forwarding phase)".into());
    }
    if !(opts.pairs_secs > 0.0 && opts.pairs_secs.is_finite()) {
        return Err("--pairs-secs must be a positive number of seconds".into());
    }
    if opts.delegate_only && opts.delegate_tasks == 0 {
        return Err("--delegate-only needs --delegate-tasks at least 1".into());
    }
    if opts.approvals_only && opts.approval_requests == 0 {
        return Err("--approvals-only needs --approval-requests at least 1".into());
    }
    if opts.delegate_tasks > 0 && !(1..=MAX_DELEGATE_RUNNING).contains(&opts.delegate_running) {
        return Err(format!(
            "--delegate-running must be 1..={MAX_DELEGATE_RUNNING} (tasks.max_concurrent is at most 256)"
        ));
    }
    if opts.scale
        && [
            opts.scale_restart,
            opts.scale_restarts,
            opts.scale_memory,
            opts.scale_queue,
            opts.scale_ops,
        ]
        .contains(&0)
    {
        return Err("--scale-restart, --scale-restarts, --scale-memory, --scale-queue and --scale-ops must be at least 1".into());
    }
    if opts.scale && opts.scale_ops > opts.scale_agents {
        return Err("--scale-ops must be at most --scale-agents (each op of the many-agents figure has an agent of its own)".into());
    }
    if opts.relay_chunks == 0 || opts.relay_messages == 0 {
        return Err("--relay-chunks and --relay-messages must be at least 1".into());
    }
    Ok(())
}

/// `--scale`: only the scale phase (issue 13), its table or JSON.
fn scale_run(opts: &Opts, server: &Path) -> Res<()> {
    raise_nofile()?;
    let work = WorkDir::create(opts.work_dir.as_deref(), opts.keep_dir)?;
    let machine = Machine::read();
    let report = phase_scale(opts, server, &work.path)?;
    if opts.json {
        let v = json!({
            "machine": {"nproc": machine.nproc, "cpu_model": machine.cpu_model, "kernel": machine.kernel},
            "scale": report.to_json(),
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&v).map_err(|e| e.to_string())?
        );
    } else {
        println!(
            "agent-hub-bench --scale: {} CPUs ({}), kernel {}\n",
            machine.nproc, machine.cpu_model, machine.kernel
        );
        print!("{}", report.to_table());
    }
    Ok(())
}
