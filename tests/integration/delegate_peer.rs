//! Delegated work across hubs through the real binaries (issue 11, docs/delegation.md
//! "Across hubs"): two hubs on 127.0.0.2 and 127.0.0.3 over a v1 link, and the v0 double of
//! `relay.rs` playing claudectl 0.64's controller (a lasting link plus `relay delegate`
//! one-shots) and its worker. Every wait polls a socket, a reply or a log with a deadline.

use crate::delegate::{manifest, outcome, task_id, verb};
use crate::harness::*;
use crate::relay::*;
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Makes `work/` and the fake agents' manifests under `setup`, and returns its `[tasks]`
/// table.
fn tasks_tail(setup: &Setup) -> String {
    std::fs::create_dir_all(setup.path("work")).unwrap();
    std::fs::create_dir_all(setup.path("manifests")).unwrap();
    for (name, scenario) in [
        ("fake", &["end_turn", "2"][..]),
        ("fakehang", &["hang"][..]),
    ] {
        std::fs::write(
            setup.path(&format!("manifests/{name}.toml")),
            manifest(name, scenario),
        )
        .unwrap();
    }
    let root = std::fs::canonicalize(setup.path("work")).unwrap();
    format!(
        "\n[tasks]\ncwd_roots = [{:?}]\nmanifests_dir = {:?}\ncredentials_dir = {:?}\npeer_status_secs = 1\n",
        root.to_str().unwrap(),
        setup.path("manifests").to_str().unwrap(),
        setup.path("task-creds").to_str().unwrap(),
    )
}

fn work(h: &RelayHub) -> PathBuf {
    std::fs::canonicalize(h.hub.setup.path("work")).unwrap()
}

/// east (127.0.0.2, dials) delegates; west (127.0.0.3) runs, with `delegate = true` for east
/// when `trusted`.
fn pair(trusted: bool) -> (RelayHub, RelayHub) {
    let key = key_hex(0x61);
    let west_setup = Setup::new();
    let mut west_spec = RelaySpec::new("west", "127.0.0.3:0").peer("east", None, &key, false);
    west_spec.peers[0].delegate = trusted;
    west_spec.tail = tasks_tail(&west_setup);
    let west = RelayHub::start(west_setup, west_spec);
    let east_setup = Setup::new();
    let mut east_spec =
        RelaySpec::new("east", "127.0.0.2:0").peer("west", Some(west.relay_addr), &key, false);
    east_spec.tail = tasks_tail(&east_setup);
    let east = RelayHub::start(east_setup, east_spec);
    east.wait_up("west");
    west.wait_up("east");
    (east, west)
}

fn delegate_to(east: &RelayHub, peer: &str, agent: &str, cwd: &str) -> String {
    let reply = verb(
        &east.hub,
        "alpha",
        &json!({"delegate": {"agent": agent, "cwd": cwd, "prompt": "build it", "peer": peer}}),
    );
    task_id(&reply)
}

#[test]
fn a_task_runs_on_a_peer_hub_and_its_outcome_comes_back() {
    let (east, west) = pair(true);
    let cwd = work(&west);
    let task = delegate_to(&east, "west", "fake", cwd.to_str().unwrap());
    let body = outcome(&east.hub, "alpha", &task);
    assert_eq!(body["state"], "completed", "{body}");
    assert_eq!(body["peer"], "west");
    assert!(body["text"].as_str().unwrap().contains("chunk"), "{body}");
    // West ran it as a task of its own whose delegator is east's task.
    west.hub.wait_audit("west's task_ended", |a| {
        a.iter().any(|v| v["event"] == "task_ended")
    });
    let accepted = west.hub.audit_events("task_accepted");
    assert_eq!(accepted.len(), 1);
    assert_eq!(accepted[0]["delegator"], format!("task-from:east:{task}"));
    assert_eq!(accepted[0]["agent"], "fake");
    // Exactly one outcome for alpha, and the status says where it ran.
    assert!(east.hub.drain("alpha").is_empty());
    let s = verb(&east.hub, "alpha", &json!({"task_status": {"task": task}}));
    assert_eq!(s["task_status"]["state"], "completed");
    assert_eq!(s["task_status"]["peer"], "west");
    // The prompt crossed, and reached no log on either side.
    for h in [&east, &west] {
        assert!(!h.log().contains("build it"), "{}", h.log());
    }
}

#[test]
fn a_peer_not_trusted_to_delegate_gets_a_refused_outcome_not_silence() {
    let (east, west) = pair(false);
    let cwd = work(&west);
    let task = delegate_to(&east, "west", "fake", cwd.to_str().unwrap());
    let body = outcome(&east.hub, "alpha", &task);
    // West answers as claudectl 0.92 does a task it cannot start: refused, never run.
    assert_eq!(body["state"], "refused", "{body}");
    assert_eq!(body["text"], "", "{body}");
    let reason = body["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("Could not start the task: ")
            && reason.contains("does not take delegated work from east"),
        "{body}"
    );
    assert!(
        west.hub.audit_events("task_accepted").is_empty(),
        "nothing ran on west"
    );
}

#[test]
fn cancel_reaches_the_peer_and_the_task_ends_cancelled_on_both_hubs() {
    let (east, west) = pair(true);
    let cwd = work(&west);
    let task = delegate_to(&east, "west", "fakehang", cwd.to_str().unwrap());
    west.hub.wait_audit("west started the task", |a| {
        a.iter().any(|v| v["event"] == "task_started")
    });
    let c = verb(&east.hub, "alpha", &json!({"cancel": {"task": task}}));
    assert_eq!(c["cancel"]["state"], "cancelling", "{c}");
    let body = outcome(&east.hub, "alpha", &task);
    assert_eq!(body["state"], "cancelled", "{body}");
    west.hub.wait_audit("west's task cancelled", |a| {
        a.iter()
            .any(|v| v["event"] == "task_ended" && v["state"] == "cancelled")
    });
}

#[test]
fn a_cwd_outside_the_peers_roots_is_refused_there() {
    let (east, _west) = pair(true);
    let task = delegate_to(&east, "west", "fake", "/etc");
    let body = outcome(&east.hub, "alpha", &task);
    assert_eq!(body["state"], "refused", "{body}");
    assert!(
        body["reason"]
            .as_str()
            .unwrap()
            .contains("cwd is under none of tasks.cwd_roots"),
        "{body}"
    );
}

// ----- claudectl 0.64, played by the v0 double -----

/// Beats on a v0 link every `HB` (so the hub keeps it) and reads every line, each one a
/// 0.64 reader must take, until `done` holds for what was read; returns those lines.
pub(crate) fn beat_until(
    c: &mut V0Conn,
    me: &str,
    what: &str,
    mut done: impl FnMut(&[V0Line]) -> bool,
) -> Vec<V0Line> {
    let until = Instant::now() + Duration::from_secs(30);
    let mut seen = Vec::new();
    loop {
        c.send(me, "heartbeat", json!({}));
        let next = Instant::now() + HB;
        loop {
            if done(&seen) {
                return seen;
            }
            match c.next(next) {
                Got::Timeout => break,
                Got::Eof => panic!("the hub closed the link while waiting for {what}"),
                Got::Line(l) => {
                    let m = parse_v0(&l).unwrap_or_else(|e| panic!("a 0.64 reader dies: {e}"));
                    if m.msg_type != "heartbeat" {
                        seen.push(m);
                    }
                }
            }
        }
        assert!(Instant::now() < until, "never got {what}");
    }
}

pub(crate) fn first<'a>(seen: &'a [V0Line], msg_type: &str) -> Option<&'a V0Line> {
    seen.iter().find(|m| m.msg_type == msg_type)
}

/// Beats until the hub's status file says the v0 peer is up.
pub(crate) fn linked(c: &mut V0Conn, me: &str, h: &RelayHub) {
    beat_until(c, me, "the link up", |_| {
        h.peer_now(me).is_some_and(|p| p["state"] == "up")
    });
}

/// One `relay delegate` one-shot: its own connection, one message, closed.
fn one_shot(addr: SocketAddr, me: &str, key: &str, hub_id: &str, msg_type: &str, payload: Value) {
    let (mut c, _ack) = v0_dial_and_handshake(addr, me, key, hub_id);
    c.send(me, msg_type, payload);
    c.stream.shutdown(std::net::Shutdown::Write).unwrap();
    while let Got::Line(_) = c.next(Instant::now() + DEADLINE) {}
}

#[test]
fn claudectls_relay_delegate_runs_here_and_is_answered_on_its_lasting_link() {
    let key = key_hex(0x62);
    let setup = Setup::new();
    let mut spec = RelaySpec::new("east", "127.0.0.2:0").peer("ctl", None, &key, true);
    spec.peers[0].delegate = true;
    spec.tail = tasks_tail(&setup);
    // A manifest named like claudectl's default agent, so a delegate_task without `agent`
    // runs the fake.
    std::fs::write(
        setup.path("manifests/claude.toml"),
        manifest("claude", &["end_turn", "2"]),
    )
    .unwrap();
    let east = RelayHub::start(setup, spec);
    let (mut lasting, _ack) = v0_dial_and_handshake(east.relay_addr, "ctl", &key, "east");
    linked(&mut lasting, "ctl", &east);
    let cwd = work(&east);
    let d = json!({
        "task_id": "c0ffee00-1111-4222-8333-444455556666",
        "prompt": "say hi",
        "cwd": cwd,
        "context": {"dependency_graph": {"blocks": [], "blocked_by": []}},
    });
    let sent_at = Instant::now();
    one_shot(east.relay_addr, "ctl", &key, "east", "delegate_task", d);
    let seen = beat_until(&mut lasting, "ctl", "the task_handoff", |s| {
        first(s, "task_handoff").is_some()
    });
    // Nothing about a claudectl peer's task goes out before 2 s (claudectl 0.92 writes the
    // task into its ledger only after its one-shot; docs/delegation.md): the fake agent is
    // done well within that, so its handoff is the first word, and no sooner. (A lower
    // bound only: the hold makes it certain whatever the machine's speed.)
    assert!(
        sent_at.elapsed() >= agent_hub_proto::tasks::CLAUDECTL_REPORT_DELAY,
        "the handoff came {:?} after the delegate_task",
        sent_at.elapsed()
    );
    let statuses: Vec<&V0Line> = seen
        .iter()
        .filter(|m| m.msg_type == "task_status")
        .collect();
    let handoff_at = seen
        .iter()
        .position(|m| m.msg_type == "task_handoff")
        .unwrap();
    assert!(
        seen[..handoff_at]
            .iter()
            .all(|m| m.msg_type == "task_status" || m.msg_type == "heartbeat"),
        "only statuses before the handoff: {:?}",
        seen.iter().map(|m| &m.msg_type).collect::<Vec<_>>()
    );
    for st in &statuses {
        assert_eq!(
            st.payload["task_id"],
            "c0ffee00-1111-4222-8333-444455556666"
        );
        assert_eq!(st.payload["state"], "running");
        assert!(st.payload["stats"]["files_modified"].is_array());
    }
    let handoff = &first(&seen, "task_handoff").unwrap().payload;
    assert_eq!(handoff["task_id"], "c0ffee00-1111-4222-8333-444455556666");
    assert_eq!(handoff["state"], "completed", "{handoff:?}");
    assert!(handoff["summary"].as_str().unwrap().contains("chunk"));
    assert!(handoff["artifacts"].is_array() && handoff.contains_key("git_ref"));
    assert!(handoff["total_tokens"].is_u64() && handoff["total_cost_usd"].is_number());
    // The link the one-shot came beside was never replaced.
    let p = east.wait_up("ctl");
    assert_eq!(p["reconnects"], 0, "{p}");
}

#[test]
fn claudectls_relay_interrupt_stops_the_task_with_its_own_words() {
    let key = key_hex(0x63);
    let setup = Setup::new();
    let mut spec = RelaySpec::new("east", "127.0.0.2:0").peer("ctl", None, &key, true);
    spec.peers[0].delegate = true;
    spec.tail = tasks_tail(&setup);
    let east = RelayHub::start(setup, spec);
    let (mut lasting, _ack) = v0_dial_and_handshake(east.relay_addr, "ctl", &key, "east");
    linked(&mut lasting, "ctl", &east);
    let cwd = work(&east);
    let d = json!({
        "task_id": "t-stop-1",
        "prompt": "wait forever",
        "cwd": cwd,
        "context": {"dependency_graph": {"blocks": [], "blocked_by": []}},
        "agent": "fakehang",
    });
    lasting.send("ctl", "delegate_task", d);
    beat_until(&mut lasting, "ctl", "the task started", |s| {
        first(s, "task_status").is_some() && east.hub.audit_events("task_started").len() == 1
    });
    let stop = json!({"task_id": "t-stop-1", "interrupt_type": "stop", "reason": "enough"});
    one_shot(east.relay_addr, "ctl", &key, "east", "task_interrupt", stop);
    let seen = beat_until(&mut lasting, "ctl", "the failed handoff", |s| {
        first(s, "task_handoff").is_some()
    });
    let handoff = &first(&seen, "task_handoff").unwrap().payload;
    assert_eq!(handoff["state"], "failed");
    assert_eq!(handoff["summary"], "Stopped by controller");
}

#[test]
fn our_delegate_to_a_claudectl_worker_comes_back_as_the_outcome() {
    let key = key_hex(0x64);
    let setup = Setup::new();
    let mut spec = RelaySpec::new("east", "127.0.0.2:0").peer("ctl", None, &key, true);
    spec.tail = tasks_tail(&setup);
    let east = RelayHub::start(setup, spec);
    let (mut worker, _ack) = v0_dial_and_handshake(east.relay_addr, "ctl", &key, "east");
    linked(&mut worker, "ctl", &east);
    let task = delegate_to(&east, "ctl", "claude", "/home/ctl/repo");
    let seen = beat_until(&mut worker, "ctl", "the delegate_task", |s| {
        first(s, "delegate_task").is_some()
    });
    let d = &first(&seen, "delegate_task").unwrap().payload;
    assert_eq!(d["task_id"], task.as_str());
    assert_eq!(d["prompt"], "build it");
    assert_eq!(d["cwd"], "/home/ctl/repo");
    assert!(
        !d.contains_key("agent"),
        "a 0.64 reader gets no agent field: {d:?}"
    );
    assert_eq!(
        d["context"]["dependency_graph"],
        json!({"blocks": [], "blocked_by": []})
    );
    worker.send(
        "ctl",
        "task_status",
        json!({"task_id": task, "state": "running", "stats": {"tokens_used": 5, "cost_usd": 0.0, "context_pct": 1.0, "files_modified": [], "elapsed_secs": 1}}),
    );
    worker.send(
        "ctl",
        "task_handoff",
        json!({"task_id": task, "state": "completed", "summary": "done over there", "artifacts": [], "git_ref": null, "total_cost_usd": 0.5, "total_tokens": 900}),
    );
    let body = outcome(&east.hub, "alpha", &task);
    assert_eq!(body["state"], "completed", "{body}");
    assert_eq!(body["text"], "done over there");
    assert_eq!(body["peer"], "ctl");
    assert_eq!(body["usage"]["totalTokens"], 900);
}

/// A real claudectl 0.64 worker's failed handoff has no `git_ref` key (its
/// `build_failure_message`; seen by scripts/claudectl-interop.sh): it still settles the task,
/// here `failed` with claudectl's own reason, instead of being dropped as off-catalogue.
#[test]
fn a_claudectl_failed_handoff_without_git_ref_settles_the_task() {
    let key = key_hex(0x65);
    let setup = Setup::new();
    let mut spec = RelaySpec::new("east", "127.0.0.2:0").peer("ctl", None, &key, true);
    spec.tail = tasks_tail(&setup);
    let east = RelayHub::start(setup, spec);
    let (mut worker, _ack) = v0_dial_and_handshake(east.relay_addr, "ctl", &key, "east");
    linked(&mut worker, "ctl", &east);
    let task = delegate_to(&east, "ctl", "claude", "/home/ctl/repo");
    beat_until(&mut worker, "ctl", "the delegate_task", |s| {
        first(s, "delegate_task").is_some()
    });
    worker.send(
        "ctl",
        "task_status",
        json!({"task_id": task, "state": "running", "stats": {"tokens_used": 0, "cost_usd": 0.0, "context_pct": 0, "files_modified": [], "elapsed_secs": 0}}),
    );
    worker.send(
        "ctl",
        "task_handoff",
        json!({"task_id": task, "state": "failed", "summary": "Task exited with non-zero status", "artifacts": [], "total_cost_usd": 0.0, "total_tokens": 0}),
    );
    let body = outcome(&east.hub, "alpha", &task);
    assert_eq!(body["state"], "failed", "{body}");
    assert_eq!(body["peer"], "ctl");
    assert!(
        body.to_string()
            .contains("Task exited with non-zero status"),
        "{body}"
    );
    assert!(
        !east
            .hub
            .service_log()
            .contains("does not match the catalogue"),
        "{}",
        east.hub.service_log()
    );
}

// ----- claudectl 0.92 (relay-compat-0.92.md §5), played by the same double -----

/// Our task on a claudectl 0.92 worker: a task it cannot start comes back at once as a
/// `refused` handoff (no status first, `model` null) and settles the task `refused`; a
/// worktree run's `git_ref` and `verifications` reach the outcome. 0.92 links are proto 1 but
/// ack nothing, so the server reports them as not agent-hub links; this double is a v0 link.
#[test]
fn a_claudectl_092_refusal_and_worktree_report_reach_the_outcome() {
    let key = key_hex(0x66);
    let setup = Setup::new();
    let mut spec = RelaySpec::new("east", "127.0.0.2:0").peer("ctl", None, &key, true);
    spec.tail = tasks_tail(&setup);
    let east = RelayHub::start(setup, spec);
    let (mut worker, _ack) = v0_dial_and_handshake(east.relay_addr, "ctl", &key, "east");
    linked(&mut worker, "ctl", &east);
    let refused = delegate_to(&east, "ctl", "claude", "/home/ctl/nope");
    beat_until(&mut worker, "ctl", "the delegate_task", |s| {
        first(s, "delegate_task").is_some()
    });
    worker.send(
        "ctl",
        "task_handoff",
        json!({"task_id": refused, "state": "failed", "summary": "Could not start the task: working directory does not exist on this host: /home/ctl/nope", "artifacts": [], "total_cost_usd": 0.0, "total_tokens": 0, "model": null, "usage": {}, "refused": true}),
    );
    let body = outcome(&east.hub, "alpha", &refused);
    assert_eq!(body["state"], "refused", "{body}");
    assert_eq!(body["peer"], "ctl");
    assert_eq!(
        body["reason"],
        "Could not start the task: working directory does not exist on this host: /home/ctl/nope"
    );
    let done = delegate_to(&east, "ctl", "claude", "/home/ctl/repo");
    beat_until(&mut worker, "ctl", "the second delegate_task", |s| {
        s.iter()
            .any(|m| m.msg_type == "delegate_task" && m.payload["task_id"] == done.as_str())
    });
    worker.send(
        "ctl",
        "task_handoff",
        json!({"task_id": done, "state": "completed", "summary": "Fixed it.", "artifacts": [], "total_cost_usd": 0.1, "total_tokens": 300, "model": "claude-sonnet-4-5", "usage": {"input_tokens": 200, "output_tokens": 100}, "git_ref": "claudectl/delegated-x", "verifications": [{"command": "cargo test", "passed": true, "output": "ok"}]}),
    );
    let body = outcome(&east.hub, "alpha", &done);
    assert_eq!(body["state"], "completed", "{body}");
    assert_eq!(body["text"], "Fixed it.");
    assert_eq!(body["gitRef"], "claudectl/delegated-x");
    assert_eq!(
        body["verifications"],
        json!([{"command": "cargo test", "passed": true, "output": "ok"}])
    );
}

/// A claudectl 0.92 delegator's task this hub cannot start (a cwd outside the roots) is
/// answered on its lasting link with one `refused` handoff and no `task_status` first.
#[test]
fn a_task_this_hub_cannot_start_is_answered_refused_with_no_status_first() {
    let key = key_hex(0x67);
    let setup = Setup::new();
    let mut spec = RelaySpec::new("east", "127.0.0.2:0").peer("ctl", None, &key, true);
    spec.peers[0].delegate = true;
    spec.tail = tasks_tail(&setup);
    let east = RelayHub::start(setup, spec);
    let (mut lasting, _ack) = v0_dial_and_handshake(east.relay_addr, "ctl", &key, "east");
    linked(&mut lasting, "ctl", &east);
    let d = json!({
        "task_id": "task_1795000000000_0",
        "prompt": "say hi",
        "cwd": "/etc",
        "context": {"relevant_files": {"a.txt": "x"}, "dependency_graph": {"blocks": [], "blocked_by": []}},
    });
    one_shot(east.relay_addr, "ctl", &key, "east", "delegate_task", d);
    let seen = beat_until(&mut lasting, "ctl", "the task_handoff", |s| {
        first(s, "task_handoff").is_some()
    });
    let types: Vec<&str> = seen.iter().map(|m| m.msg_type.as_str()).collect();
    assert_eq!(types[0], "task_handoff", "no task_status first: {types:?}");
    let h = &seen[0].payload;
    assert_eq!(h["task_id"], "task_1795000000000_0");
    assert_eq!(h["state"], "failed");
    assert_eq!(h["refused"], true);
    assert!(
        h["summary"]
            .as_str()
            .unwrap()
            .starts_with("Could not start the task: "),
        "{h:?}"
    );
    assert_eq!(h["artifacts"], json!([]));
    assert!(h.contains_key("git_ref") && h["git_ref"].is_null());
    assert_eq!(h["total_tokens"], 0);
    assert!(east.hub.audit_events("task_accepted").is_empty());
}
