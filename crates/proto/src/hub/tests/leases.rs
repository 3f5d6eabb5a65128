//! Simulation tests of leases (issue 39, lease design §A, SPEC §17) on the virtual clock:
//! conflict only between exclusives of different owners, prefix overlap, FIFO waiters with
//! `ahead`, `timeoutSecs`, a waiter's close, idempotent re-claims, the holder's release,
//! warnings, silent renewal of live owners only, expiry with `lease_lost`, release on `gone`
//! (hook and process exit) and not on `idle`, a task's leases ending in its outcome's batch,
//! a failed commit, the caps, the operator's break, `lease_check`, and the audit records.

use super::tasks::{outcome_completed, tasks_sim};
use super::*;
use crate::hub::leases::{AutoRenew, LeaseAudit, LeaseConfig};
use crate::wire::lease::{LeaseClaimReply, LeaseReply};

/// `sim`'s hub rebuilt with `operators` and `config` (the constructor's options).
fn configure(sim: &mut Sim, operators: &[&str], config: LeaseConfig) {
    let roster = Roster::parse(ROSTER).expect("test roster");
    let placeholder = Hub::new(
        roster,
        Limits::example(),
        Box::new(crate::kernel::ids::SeededIds::new(1)),
    );
    let hub = std::mem::replace(&mut sim.hub, placeholder);
    sim.hub = hub
        .with_operators(operators.iter().map(|s| s.to_string()).collect())
        .with_leases(config);
}

fn claim_line(value: &str, extra: Value) -> String {
    let mut payload = json!({"kind": "path_glob", "value": value});
    if let (Value::Object(p), Value::Object(e)) = (&mut payload, extra) {
        p.extend(e);
    }
    json!({ "lease_claim": payload }).to_string()
}

/// `name` sends `line` on a fresh connection; the commit point runs; its lines come back.
fn verb(sim: &mut Sim, name: &str, line: &str) -> (ConnId, Vec<HubLine>) {
    let c = sim.login(name);
    sim.line(c, line);
    sim.commit_ok();
    let d = sim.drain();
    sim.io_flush();
    (c, d.lines(c).to_vec())
}

fn claim_reply(lines: &[HubLine]) -> LeaseClaimReply {
    match lines {
        [HubLine::Lease(LeaseReply::Claim(r))] => (**r).clone(),
        other => panic!("expected a lease_claim reply, got {other:?}"),
    }
}

/// A claim answered `granted`; returns the lease id.
fn granted(sim: &mut Sim, name: &str, value: &str) -> String {
    let (_, lines) = verb(sim, name, &claim_line(value, json!({})));
    let r = claim_reply(&lines);
    assert_eq!(r.outcome, "granted", "{name} on {value}: {r:?}");
    r.lease.expect("a granted lease").lease
}

fn error(lines: &[HubLine]) -> String {
    match lines {
        [HubLine::Error { message }] => message.clone(),
        other => panic!("expected an error, got {other:?}"),
    }
}

fn release(sim: &mut Sim, name: &str, lease: &str) -> Vec<HubLine> {
    let line = json!({"lease_release": {"lease": lease}}).to_string();
    verb(sim, name, &line).1
}

/// `name` releases `lease`, committed, with nothing drained (the waiters' grants stay for
/// the caller's drain).
fn release_now(sim: &mut Sim, name: &str, lease: &str) {
    let c = sim.login(name);
    sim.line(c, &json!({"lease_release": {"lease": lease}}).to_string());
    sim.commit_ok();
}

fn lease_events(d: &Drained) -> Vec<&LeaseAudit> {
    d.audit
        .iter()
        .filter_map(|e| match e {
            AuditEvent::Lease(l) => Some(l),
            _ => None,
        })
        .collect()
}

/// A waiting claim of `name` on `value`: parked, nothing answered yet.
fn wait(sim: &mut Sim, name: &str, value: &str, timeout: Option<u64>) -> ConnId {
    let c = sim.login(name);
    let extra = match timeout {
        Some(t) => json!({"wait": true, "timeoutSecs": t}),
        None => json!({"wait": true}),
    };
    sim.line(c, &claim_line(value, extra));
    sim.commit_ok();
    let d = sim.drain();
    assert!(d.lines(c).is_empty(), "{name} waits: {:?}", d.lines(c));
    c
}

/// Envelopes queued for `name` from the hub, as (kind, body).
fn hub_mail(sim: &mut Sim, name: &str) -> Vec<(String, Value)> {
    let mut out = Vec::new();
    loop {
        let c = sim.login(name);
        sim.line(c, &await_text(None, None, Some(0)));
        sim.commit_ok();
        let d = sim.drain();
        sim.io_flush();
        match d.lines(c) {
            [HubLine::Envelope(text)] => {
                let v: Value = serde_json::from_str(text).expect("JSON");
                assert_eq!(v["from"], "hub");
                out.push((
                    v["kind"].as_str().unwrap_or("").to_owned(),
                    v["body"].clone(),
                ));
            }
            _ => return out,
        }
    }
}

#[test]
fn only_exclusives_of_different_owners_conflict_and_prefixes_overlap() {
    let mut sim = Sim::new();
    let held = granted(&mut sim, "mneme", "src/**");
    // Same owner, overlapping: allowed.
    granted(&mut sim, "mneme", "src/relay/peer.rs");
    // Another owner: a file under the glob conflicts, naming the holder and its lease.
    let (_, lines) = verb(
        &mut sim,
        "datastore",
        &claim_line("src/relay/peer.rs", json!({})),
    );
    let r = claim_reply(&lines);
    assert_eq!(r.outcome, "conflict");
    assert_eq!(r.holder.as_deref(), Some("mneme"));
    // Either of mneme's two leases holds it; the reply names one of them.
    assert!(r
        .holder_lease
        .as_deref()
        .is_some_and(|l| l.starts_with("lease-")));
    assert_eq!(r.expires_at.as_deref(), Some("2026-07-21T06:45:51.000Z"));
    assert_eq!(r.ahead, Some(0));
    let _ = held;
    // claudectl's string-prefix stem: `src` overlaps `src2/x`.
    let (_, lines) = verb(&mut sim, "datastore", &claim_line("src2/x", json!({})));
    assert_eq!(claim_reply(&lines).outcome, "conflict");
    // Disjoint, non-exclusive, or another kind: granted.
    granted(&mut sim, "datastore", "docs/**");
    for mode in ["shared_read", "shared_append", "advisory"] {
        let (_, lines) = verb(
            &mut sim,
            "datastore",
            &claim_line("src/a.rs", json!({"mode": mode})),
        );
        assert_eq!(claim_reply(&lines).outcome, "granted", "{mode}");
    }
    let db = json!({"lease_claim": {"kind": "db", "value": "src/**"}}).to_string();
    assert_eq!(
        claim_reply(&verb(&mut sim, "datastore", &db).1).outcome,
        "granted"
    );
    // An advisory lease blocks nobody.
    let (_, lines) = verb(
        &mut sim,
        "scribe",
        &claim_line("src/a.rs", json!({"kind": "db"})),
    );
    assert_eq!(claim_reply(&lines).outcome, "granted");
}

/// Three waiters queue in order with `ahead` 0, 1, 2; a release grants the first only (the
/// others conflict with its new lease), each release the next, within the same step.
#[test]
fn waiters_are_granted_in_fifo_order_with_ahead() {
    let mut sim = Sim::new();
    let held = granted(&mut sim, "mneme", "src/**");
    let w1 = wait(&mut sim, "datastore", "src/a.rs", None);
    let w2 = wait(&mut sim, "scribe", "src/**", None);
    let w3 = wait(&mut sim, "datastore", "src/b.rs", None);
    // A conflicting claim without wait is told how many wait ahead of it.
    // scribe's own wait does not count; datastore's two overlapping ones do.
    let (_, lines) = verb(&mut sim, "scribe", &claim_line("src/**", json!({})));
    let r = claim_reply(&lines);
    assert_eq!((r.outcome.as_str(), r.ahead), ("conflict", Some(2)));
    // The list shows the queue with each one's ahead.
    let (_, lines) = verb(&mut sim, "scribe", r#"{"lease_list":{}}"#);
    let [HubLine::Lease(LeaseReply::List(list))] = lines.as_slice() else {
        panic!("{lines:?}")
    };
    let aheads: Vec<(String, u64)> = list
        .waiting
        .iter()
        .map(|w| (w.owner.clone(), w.ahead))
        .collect();
    assert_eq!(
        aheads,
        [
            ("datastore".into(), 0),
            ("scribe".into(), 1),
            ("datastore".into(), 1)
        ]
    );
    assert_eq!(list.leases[0].waiters.as_ref().map(Vec::len), Some(3));
    // The holder releases: only the first is granted, after its commit.
    sim.advance(12);
    let c = sim.login("mneme");
    sim.line(c, &json!({"lease_release": {"lease": held}}).to_string());
    let before = sim.drain();
    assert!(before.lines(w1).is_empty(), "no grant before its commit");
    sim.commit_ok();
    let d = sim.drain();
    let r1 = claim_reply(d.lines(w1));
    assert_eq!(r1.outcome, "granted");
    assert_eq!(r1.waited_ms, Some(12));
    assert!(d.lines(w2).is_empty() && d.lines(w3).is_empty());
    let l1 = r1.lease.expect("lease").lease;
    let events: Vec<&str> = lease_events(&before)
        .iter()
        .chain(lease_events(&d).iter())
        .map(|e| e.event())
        .collect();
    assert_eq!(events, ["lease_released", "lease_granted"]);
    sim.io_flush();
    // datastore's second claim waits behind scribe's `src/**` (another owner, earlier).
    release_now(&mut sim, "datastore", &l1);
    let d = sim.drain();
    let r2 = claim_reply(d.lines(w2));
    assert_eq!(r2.outcome, "granted");
    assert!(d.lines(w3).is_empty());
    sim.io_flush();
    release_now(&mut sim, "scribe", &r2.lease.expect("lease").lease);
    assert_eq!(claim_reply(sim.drain().lines(w3)).outcome, "granted");
}

#[test]
fn a_waiting_claims_timeout_grants_nothing_and_its_close_lets_the_next_in() {
    let mut sim = Sim::new();
    let held = granted(&mut sim, "mneme", "src/**");
    let timed = wait(&mut sim, "datastore", "src/a.rs", Some(5));
    let closer = wait(&mut sim, "scribe", "src/a.rs", None);
    let next = wait(&mut sim, "datastore", "src/z.rs", None);
    // timeoutSecs 0 never waits.
    let (_, lines) = verb(
        &mut sim,
        "scribe",
        &claim_line("src/a.rs", json!({"wait": true, "timeoutSecs": 0})),
    );
    assert_eq!(claim_reply(&lines).outcome, "conflict");
    sim.advance(5_000);
    let d = sim.drain();
    let r = claim_reply(d.lines(timed));
    assert_eq!(r.outcome, "timeout", "not the bare timeout line");
    assert_eq!(r.holder.as_deref(), Some("mneme"));
    assert_eq!(r.holder_lease.as_deref(), Some(held.as_str()));
    assert!(r.lease.is_none());
    assert_eq!(
        lease_events(&d),
        [&LeaseAudit::WaitEnded {
            waiter: match lease_events(&d)[0] {
                LeaseAudit::WaitEnded { waiter, .. } => waiter.clone(),
                other => panic!("{other:?}"),
            },
            owner: "datastore".into(),
            why: "timeout",
        }]
    );
    sim.io_flush();
    // The scribe's client closes: it leaves the queue; the release then grants the next.
    sim.eof(closer);
    sim.io_flush();
    release_now(&mut sim, "mneme", &held);
    let d = sim.drain();
    assert_eq!(claim_reply(d.lines(next)).outcome, "granted");
    assert_eq!(sim.hub.lease_counts(), (1, 0));
}

#[test]
fn a_reclaim_is_idempotent_for_its_owner_and_refused_to_others() {
    let mut sim = Sim::new();
    let line = claim_line("src/**", json!({"lease": "lease-mine"}));
    let (_, first) = verb(&mut sim, "mneme", &line);
    assert_eq!(
        claim_reply(&first).lease.expect("lease").lease,
        "lease-mine"
    );
    let (c, again) = verb(&mut sim, "mneme", &line);
    let r = claim_reply(&again);
    assert_eq!((r.outcome.as_str(), r.waited_ms), ("granted", Some(0)));
    let _ = c;
    assert_eq!(sim.hub.lease_counts(), (1, 0));
    let (_, other) = verb(&mut sim, "datastore", &line);
    assert_eq!(
        error(&other),
        "invalid lease_claim: lease lease-mine is already in use"
    );
    // Released, the id stays spent.
    release(&mut sim, "mneme", "lease-mine");
    let (_, later) = verb(&mut sim, "mneme", &line);
    assert_eq!(
        error(&later),
        "invalid lease_claim: lease lease-mine is already in use"
    );
}

/// Only the holder releases or renews; the refusals name the lease and its holder, a closed
/// lease its end; the operator alone breaks, and the holder hears of it.
#[test]
fn another_owners_release_renew_and_break_are_refused() {
    let mut sim = Sim::new();
    configure(&mut sim, &["scribe"], LeaseConfig::default());
    let held = granted(&mut sim, "mneme", "src/**");
    assert_eq!(
        error(&release(&mut sim, "datastore", &held)),
        format!("invalid lease_release: {held} is held by mneme, not datastore")
    );
    let renew = json!({"lease_renew": {"lease": held}}).to_string();
    assert_eq!(
        error(&verb(&mut sim, "datastore", &renew).1),
        format!("invalid lease_renew: {held} is held by mneme, not datastore")
    );
    assert_eq!(
        error(&release(&mut sim, "datastore", "lease-nope")),
        "invalid lease_release: no lease lease-nope"
    );
    let brk = json!({"lease_break": {"lease": held, "reason": "mneme hung"}}).to_string();
    assert_eq!(
        error(&verb(&mut sim, "datastore", &brk).1),
        "invalid lease_break: only an operator may break a lease"
    );
    let (_, lines) = verb(&mut sim, "scribe", &brk);
    assert!(matches!(
        lines.as_slice(),
        [HubLine::Lease(LeaseReply::Break(o))] if o.outcome == "broken"
    ));
    assert_eq!(
        error(&release(&mut sim, "mneme", &held)),
        format!("invalid lease_release: {held} is not active (broken)")
    );
    let mail = hub_mail(&mut sim, "mneme");
    assert_eq!(mail.len(), 1, "{mail:?}");
    assert_eq!(mail[0].0, "lease_lost");
    assert_eq!(mail[0].1["why"], "broken");
    assert_eq!(mail[0].1["by"], "scribe");
    assert_eq!(mail[0].1["reason"], "mneme hung");
}

/// An owner nobody knows to be live is warned once, at `expiresAt − min(warn, ttl/2)`, then
/// loses the lease at `expiresAt` with `lease_lost` and an audit record; a live owner's lease
/// renews silently at its warn point; an explicit renew moves the expiry, audited.
#[test]
fn warnings_silent_renewal_for_live_owners_and_expiry() {
    let mut sim = Sim::new();
    let config = LeaseConfig {
        warn_before_secs: 60,
        ..LeaseConfig::default()
    };
    configure(&mut sim, &[], config);
    let ttl = json!({"ttlSecs": 100});
    let (_, lines) = verb(&mut sim, "mneme", &claim_line("src/**", ttl.clone()));
    let unknown = claim_reply(&lines).lease.expect("lease").lease;
    // datastore is live: its hook said busy.
    let (_, busy) = verb(&mut sim, "datastore", r#"{"turn":{"state":"busy"}}"#);
    assert!(matches!(busy.as_slice(), [HubLine::Turn(_)]));
    let (_, lines) = verb(&mut sim, "datastore", &claim_line("docs/**", ttl));
    let live = claim_reply(&lines).lease.expect("lease").lease;
    // ttl/2 = 50 s < 60 s: the warn point is at 50 s.
    sim.advance(49_999);
    sim.commit_ok();
    assert!(hub_mail(&mut sim, "mneme").is_empty());
    sim.advance(1);
    sim.commit_ok();
    let mail = hub_mail(&mut sim, "mneme");
    assert_eq!(mail.len(), 1);
    assert_eq!(mail[0].0, "lease_expiring");
    assert_eq!(mail[0].1["lease"], unknown.as_str());
    assert_eq!(mail[0].1["expiresAt"], "2026-07-21T06:42:31.000Z");
    assert_eq!(
        mail[0].1["renew"],
        format!("agent-hub lease renew --lease {unknown}")
    );
    assert!(
        hub_mail(&mut sim, "datastore").is_empty(),
        "renewed, not warned"
    );
    sim.advance(50_000);
    sim.commit_ok();
    let d = sim.drain();
    assert!(lease_events(&d).contains(&&LeaseAudit::Expired {
        lease: unknown.clone(),
        owner: "mneme".into()
    }));
    let mail = hub_mail(&mut sim, "mneme");
    assert_eq!(mail.len(), 1);
    assert_eq!(
        (mail[0].0.as_str(), &mail[0].1["why"]),
        ("lease_lost", &json!("expired"))
    );
    // The live owner's lease is still active: renewed at 50 s and again at 100 s.
    let (_, lines) = verb(&mut sim, "scribe", r#"{"lease_list":{}}"#);
    let [HubLine::Lease(LeaseReply::List(list))] = lines.as_slice() else {
        panic!("{lines:?}")
    };
    assert_eq!(list.leases.len(), 1);
    assert_eq!(list.leases[0].lease, live);
    assert_eq!(list.leases[0].expires_at, "2026-07-21T06:44:11.000Z");
    // An explicit renew, audited; `auto_renew = never` warns a live owner too.
    let renew = json!({"lease_renew": {"lease": live, "ttlSecs": 10}}).to_string();
    let c = sim.login("datastore");
    sim.line(c, &renew);
    let d = sim.drain();
    let [HubLine::Lease(LeaseReply::Renew(r))] = d.lines(c) else {
        panic!("{:?}", d.lines(c))
    };
    assert_eq!(r.lease.ttl_secs, 10);
    assert!(
        matches!(lease_events(&d).as_slice(), [LeaseAudit::Renewed { by, .. }] if by == "datastore")
    );
    let mut never = Sim::new();
    let config = LeaseConfig {
        auto_renew: AutoRenew::Never,
        ..LeaseConfig::default()
    };
    configure(&mut never, &[], config);
    verb(&mut never, "datastore", r#"{"turn":{"state":"busy"}}"#);
    verb(
        &mut never,
        "datastore",
        &claim_line("x", json!({"ttlSecs": 10})),
    );
    never.advance(5_000);
    never.commit_ok();
    assert_eq!(hub_mail(&mut never, "datastore")[0].0, "lease_expiring");
}

/// A holder going `gone` (its hook's session end, or its watched process exiting) releases
/// its leases and grants its waiters; `idle` does not.
#[test]
fn a_holder_going_gone_releases_and_idle_does_not() {
    let mut sim = Sim::new();
    verb(
        &mut sim,
        "mneme",
        r#"{"turn":{"state":"busy","pid":4242,"start":7}}"#,
    );
    let held = granted(&mut sim, "mneme", "src/**");
    let w = wait(&mut sim, "datastore", "src/a.rs", None);
    verb(&mut sim, "mneme", r#"{"turn":{"state":"idle"}}"#);
    assert!(sim.drain().lines(w).is_empty(), "idle holds on");
    assert_eq!(sim.hub.lease_counts(), (1, 1));
    // The process exits: the loop's check reports it.
    sim.advance(crate::hub::liveness::PROCESS_CHECK_INTERVAL.as_millis() as u64);
    let asked: Vec<_> = sim.drain().process_checks.into_iter().flatten().collect();
    let now = sim.now();
    for (name, p) in asked {
        sim.hub.handle_process_exited(&name, p, now);
    }
    sim.hub.handle_processes_checked(now);
    sim.commit_ok();
    let d = sim.drain();
    assert_eq!(claim_reply(d.lines(w)).outcome, "granted");
    assert!(lease_events(&d).contains(&&LeaseAudit::Released {
        lease: held,
        owner: "mneme".into(),
        why: "holder_gone",
    }));
    // A hook's session end does the same, once.
    sim.io_flush();
    let scribes = granted(&mut sim, "scribe", "lib/**");
    verb(&mut sim, "scribe", r#"{"turn":{"state":"gone"}}"#);
    let (_, lines) = verb(&mut sim, "mneme", &claim_line("lib/x", json!({})));
    assert_eq!(claim_reply(&lines).outcome, "granted");
    assert_eq!(
        error(&release(&mut sim, "scribe", &scribes)),
        format!("invalid lease_release: {scribes} is not active (released)")
    );
}

/// A task identity's leases end in the batch of its outcome (design §A.5).
#[test]
fn a_tasks_leases_end_with_its_outcome_in_the_same_batch() {
    let mut sim = tasks_sim();
    let c = sim.login("mneme");
    sim.line(
        c,
        &json!({"delegate": {"agent": "fake", "cwd": "/w/repo", "prompt": "p"}}).to_string(),
    );
    sim.commit_ok();
    sim.commit_ok();
    let d = sim.drain();
    let spec = d.task_starts.first().expect("started");
    let (task, token) = (spec.task.as_str().to_owned(), spec.token.clone());
    sim.io_flush();
    let t = sim.open();
    sim.line(t, &hello_text(&task, &token));
    sim.line(t, &claim_line("src/**", json!({})));
    sim.commit_ok();
    let d = sim.drain();
    let lease = match d.lines(t) {
        [HubLine::Ok, HubLine::Lease(LeaseReply::Claim(r))] => {
            r.lease.clone().expect("granted").lease
        }
        other => panic!("{other:?}"),
    };
    sim.io_flush();
    let w = wait(&mut sim, "datastore", "src/a.rs", None);
    let now = sim.now();
    sim.hub
        .handle_task_event(&task, crate::tasks::TaskEvent::Started { pid: 9 }, now);
    sim.commit_ok();
    sim.drain();
    let now = sim.now();
    sim.hub.handle_task_event(&task, outcome_completed(), now);
    sim.hold_batches = true;
    sim.commit_ok();
    assert_eq!(sim.batches.len(), 1, "one batch");
    let batch = sim.batches[0].clone();
    let has = |f: &dyn Fn(&AuditEvent) -> bool| batch.audit.iter().any(f);
    assert!(has(&|e| matches!(
        e,
        AuditEvent::Task(crate::tasks::TaskAudit::Ended { .. })
    )));
    let released = AuditEvent::Lease(LeaseAudit::Released {
        lease,
        owner: task.clone(),
        why: "task_ended",
    });
    // The release rides out with the batch (an output written with it) and the waiter's
    // grant is in the batch itself.
    let d = sim.drain();
    assert!(d.audit.contains(&released), "{:?}", d.audit);
    assert!(has(&|e| matches!(
        e,
        AuditEvent::Lease(LeaseAudit::Granted { via: "wait", .. })
    )));
    sim.release_batches();
    assert_eq!(claim_reply(sim.drain().lines(w)).outcome, "granted");
}

/// A failed commit refuses a grant made at once and puts a granted waiter back in its place,
/// still waiting; the next good commit grants it.
#[test]
fn a_failed_commit_refuses_the_grant_and_requeues_the_waiter_in_place() {
    let mut sim = Sim::new();
    let c = sim.login("mneme");
    sim.line(c, &claim_line("src/**", json!({})));
    sim.commit_err();
    let d = sim.drain();
    assert!(error(d.lines(c)).starts_with("lease_claim not accepted: "));
    assert_eq!(sim.hub.lease_counts(), (0, 0));
    sim.io_flush();
    let held = granted(&mut sim, "mneme", "src/**");
    let w1 = wait(&mut sim, "datastore", "src/a.rs", None);
    let w2 = wait(&mut sim, "scribe", "src/a.rs", None);
    let r = sim.login("mneme");
    sim.line(r, &json!({"lease_release": {"lease": held}}).to_string());
    sim.commit_err();
    let d = sim.drain();
    assert!(d.lines(w1).is_empty() && d.lines(w2).is_empty());
    // Back in its place at the head, and granted again for the next batch: a resource
    // that is free never leaves its first waiter waiting.
    assert_eq!(sim.hub.lease_counts(), (1, 1));
    sim.commit_ok();
    let d = sim.drain();
    assert_eq!(claim_reply(d.lines(w1)).outcome, "granted");
    assert!(d.lines(w2).is_empty());
}

/// The caps of `[leases]`, each refused with its SPEC text naming the key.
#[test]
fn caps_refuse_floods_and_oversize_values() {
    let mut sim = Sim::new();
    let config = LeaseConfig {
        max_per_identity: 2,
        max_waiters_per_resource: 1,
        max_value_bytes: 8,
        min_ttl_secs: 5,
        max_ttl_secs: 50,
        max_check_paths: 2,
        ..LeaseConfig::default()
    };
    configure(&mut sim, &[], config);
    let ttl = json!({"ttlSecs": 5});
    for v in ["a", "b"] {
        let (_, lines) = verb(&mut sim, "mneme", &claim_line(v, ttl.clone()));
        assert_eq!(claim_reply(&lines).outcome, "granted");
    }
    assert_eq!(
        error(&verb(&mut sim, "mneme", &claim_line("c", ttl)).1),
        "invalid lease_claim: mneme holds 2 leases and waits (leases.max_per_identity)"
    );
    assert_eq!(
        error(
            &verb(
                &mut sim,
                "datastore",
                &claim_line("123456789", json!({"ttlSecs": 5}))
            )
            .1
        ),
        "invalid lease_claim: value must be 1-8 printable characters"
    );
    assert_eq!(
        error(
            &verb(
                &mut sim,
                "datastore",
                &claim_line("x", json!({"ttlSecs": 51}))
            )
            .1
        ),
        "invalid lease_claim: ttlSecs must be between 5 and 50"
    );
    let c = sim.login("datastore");
    sim.line(c, &claim_line("a", json!({"wait": true, "ttlSecs": 5})));
    sim.commit_ok();
    assert!(sim.drain().lines(c).is_empty(), "waits");
    assert_eq!(
        error(&verb(&mut sim, "scribe", &claim_line("a", json!({"wait": true, "ttlSecs": 5}))).1),
        "invalid lease_claim: 1 claims already wait for path_glob:a (leases.max_waiters_per_resource)"
    );
    let check = json!({"lease_check": {"paths": ["a", "b", "c"]}}).to_string();
    assert_eq!(
        error(&verb(&mut sim, "datastore", &check).1),
        "invalid lease_check: at most 2 paths"
    );
}

/// `lease_check` answers held for another owner's exclusive lease, free for the asker's own,
/// and audits the held verdict only.
#[test]
fn lease_check_tells_held_from_free() {
    let mut sim = Sim::new();
    let (_, lines) = verb(
        &mut sim,
        "mneme",
        &claim_line("src/**", json!({"root": "/repo"})),
    );
    let lease = claim_reply(&lines).lease.expect("granted").lease;
    let check =
        |paths: Value| json!({"lease_check": {"paths": paths, "root": "/repo"}}).to_string();
    let (_, lines) = verb(
        &mut sim,
        "datastore",
        &check(json!(["/repo/src/a.rs", "README.md"])),
    );
    let [HubLine::Lease(LeaseReply::Check(r))] = lines.as_slice() else {
        panic!("{lines:?}")
    };
    assert_eq!(r.verdict, "held");
    assert_eq!(r.held.len(), 1);
    assert_eq!(
        (
            r.held[0].path.as_str(),
            r.held[0].holder.as_str(),
            r.held[0].lease.as_str()
        ),
        ("/repo/src/a.rs", "mneme", lease.as_str())
    );
    let c = sim.login("mneme");
    sim.line(c, &check(json!(["src/a.rs"])));
    let d = sim.drain();
    assert!(matches!(
        d.lines(c),
        [HubLine::Lease(LeaseReply::Check(r))] if r.verdict == "free"
    ));
    assert!(lease_events(&d).is_empty(), "a free verdict writes nothing");
}

/// A notify claim is answered `queued` at once and granted later by a `lease_granted`
/// envelope; a shutdown answers a parked claim and grants nothing.
#[test]
fn notify_waiters_get_an_envelope_and_shutdown_answers_parked_claims() {
    let mut sim = Sim::new();
    let held = granted(&mut sim, "mneme", "src/**");
    let (_, lines) = verb(
        &mut sim,
        "datastore",
        &claim_line("src/a.rs", json!({"notify": true})),
    );
    let r = claim_reply(&lines);
    assert_eq!((r.outcome.as_str(), r.ahead), ("queued", Some(0)));
    let waiter = r.waiter.expect("a waiter id");
    assert!(waiter.starts_with("wait-"));
    let parked = wait(&mut sim, "scribe", "src/a.rs", None);
    release(&mut sim, "mneme", &held);
    let mail = hub_mail(&mut sim, "datastore");
    assert_eq!(mail.len(), 1);
    assert_eq!(mail[0].0, "lease_granted");
    assert_eq!(mail[0].1["lease"]["owner"], "datastore");
    let now = sim.now();
    sim.hub.shutdown(now);
    let d = sim.drain();
    assert_eq!(
        error(d.lines(parked)),
        "hub is shutting down; nothing was granted"
    );
    sim.hub.stopped();
    let d = sim.drain();
    assert!(d
        .logs
        .iter()
        .any(|l| l.starts_with("leases: 1 leases and 0 waiting claims dropped at stop")));
}
