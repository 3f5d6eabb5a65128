//! Approvals across hubs through the real binaries (issue 37 design §7; docs/delegation.md
//! "Across hubs"; docs/relay-protocol.md `task-approvals`): east (127.0.0.2) delegates to
//! west (127.0.0.3) over a hardened v1 link; the fake ACP agent west runs asks, west sends
//! the request to east, east mirrors it for its delegator, who answers with
//! `agent-hub task answer` on east, and west (the only clock) applies it. A timeout at west
//! reaches east's delegator as the expired envelope. A claudectl delegator (the v0 double of
//! `relay.rs`) has no route for a request: its task gets the fallback at once. A hostile
//! peer of west (a v1 dialer of our own, `relay_attack::V1Dialer`, holding its own key and
//! agreeing `task-approvals`) forges a `task_answer` for east's task: refused, logged, never
//! applied.
//!
//! Owns: what the two operators and the delegator observe over real sockets. Refuses: the
//! book's exact decisions and the clocks to the millisecond (`crates/proto/src/tasks/tests/
//! relayed.rs` simulates both halves on a virtual clock). Every wait is an await, a read with
//! a deadline or a poll of a log, the audit or the status file; never a sleep.

use crate::approvals::{await_request, events, refusal, task_cli};
use crate::delegate::{manifest, outcome, task_id, verb};
use crate::delegate_peer::{beat_until, first, linked};
use crate::harness::*;
use crate::relay::{key_hex, v0_dial_and_handshake, RelayHub, RelaySpec};
use crate::relay_attack::V1Dialer;
use serde_json::{json, Value};
use std::path::PathBuf;

/// Makes `work/` and the asking fake agent's manifest under `setup`; returns its `[tasks]`
/// table with `extra` appended.
fn tasks_tail(setup: &Setup, extra: &str) -> String {
    std::fs::create_dir_all(setup.path("work")).unwrap();
    std::fs::create_dir_all(setup.path("manifests")).unwrap();
    std::fs::write(
        setup.path("manifests/fakeask.toml"),
        manifest("fakeask", &["ask", "claude-current"]),
    )
    .unwrap();
    let root = std::fs::canonicalize(setup.path("work")).unwrap();
    format!(
        "\n[tasks]\ncwd_roots = [{:?}]\nmanifests_dir = {:?}\ncredentials_dir = {:?}\npeer_status_secs = 1\n{extra}\n",
        root.to_str().unwrap(),
        setup.path("manifests").to_str().unwrap(),
        setup.path("task-creds").to_str().unwrap(),
    )
}

fn work(h: &RelayHub) -> PathBuf {
    std::fs::canonicalize(h.hub.setup.path("work")).unwrap()
}

/// east (dials) delegates to west, which trusts it to; `west_tasks` is appended to west's
/// `[tasks]`; `mallory` (when given, with its key) is one more peer of west's, which never
/// dials and may not delegate. Both links agree `task-approvals`.
fn pair(west_tasks: &str, mallory: Option<&str>) -> (RelayHub, RelayHub) {
    let key = key_hex(0x71);
    let west_setup = Setup::new();
    let mut west_spec = RelaySpec::new("west", "127.0.0.3:0").peer("east", None, &key, false);
    west_spec.peers[0].delegate = true;
    if let Some(k) = mallory {
        west_spec = west_spec.peer("mallory", None, k, false);
    }
    west_spec.tail = tasks_tail(&west_setup, west_tasks);
    let west = RelayHub::start(west_setup, west_spec);
    let east_setup = Setup::new();
    let mut east_spec =
        RelaySpec::new("east", "127.0.0.2:0").peer("west", Some(west.relay_addr), &key, false);
    east_spec.tail = tasks_tail(&east_setup, "");
    let east = RelayHub::start(east_setup, east_spec);
    for (h, peer) in [(&east, "west"), (&west, "east")] {
        let p = h.wait_up(peer);
        let agreed: Vec<&str> = p["features"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f.as_str().unwrap())
            .collect();
        assert!(
            agreed.contains(&"task-approvals") && agreed.contains(&"frame-mac"),
            "{p}"
        );
    }
    (east, west)
}

/// alpha on east delegates the asking agent to west; east's task id.
fn delegate_ask(east: &RelayHub, west: &RelayHub) -> String {
    let reply = verb(
        &east.hub,
        "alpha",
        &json!({"delegate": {"agent": "fakeask", "cwd": work(west), "prompt": "do it", "peer": "west"}}),
    );
    task_id(&reply)
}

/// West's own id for the task east delegated as `task` (its `task_accepted` record).
fn west_task(west: &RelayHub, task: &str) -> String {
    let accepted = west.hub.wait_audit("west accepted the task", |a| {
        a.iter().any(|v| v["event"] == "task_accepted")
    });
    let rec = accepted
        .iter()
        .find(|v| v["event"] == "task_accepted")
        .unwrap();
    assert_eq!(rec["delegator"], format!("task-from:east:{task}"));
    rec["task"].as_str().unwrap().to_owned()
}

/// The permission the worker's agent asks reaches east's delegator as the same envelope a
/// local task's would be, named by east's task id; the delegator answers with
/// `agent-hub task answer` on east; west applies it, the agent gets the option and runs the
/// command, and the outcome comes back. Each hub audits its half: west the open and the
/// answer (by east's delegator, through the peer), east its mirror.
#[test]
fn a_request_on_the_worker_is_answered_by_the_delegator_on_the_other_hub() {
    let (east, west) = pair("", None);
    let task = delegate_ask(&east, &west);
    let body = await_request(&east.hub, "alpha", &task);
    let request = body["request"].as_str().unwrap().to_owned();
    assert_eq!(body["state"], "open", "{body}");
    assert_eq!(body["type"], "permission");
    assert_eq!(body["agent"], "fakeask");
    assert_eq!(body["toolCall"]["id"], "toolu_fake_1");
    assert_eq!(body["toolCall"]["kind"], "execute");
    assert_eq!(body["toolCall"]["command"], "echo fake > proof.txt");
    assert_eq!(
        body["answer"],
        format!("agent-hub task answer --id {task} --request {request} --option OPTION")
    );
    let offered: Vec<&str> = body["options"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["optionId"].as_str().unwrap())
        .collect();
    assert_eq!(offered, ["allow-once", "allow-with-updates", "reject"]);
    // West opened the same request, under its own id for the task.
    let wtask = west_task(&west, &task);
    west.hub.wait_audit("west's request_opened", |a| {
        a.iter().any(|v| v["event"] == "request_opened")
    });
    let opened = west.hub.audit_events("request_opened");
    assert_eq!(opened.len(), 1, "{opened:?}");
    assert_eq!(opened[0]["task"], wtask.as_str());
    assert_eq!(opened[0]["request"], request.as_str());
    // An option the agent never offered is refused at east, before it crosses.
    let out = task_cli(
        &east.hub,
        "alpha",
        &["--id", &task, "--request", &request, "--option", "always"],
    );
    assert_ne!(out.code, 0, "{}", out.stdout);
    let out = task_cli(
        &east.hub,
        "alpha",
        &[
            "--id",
            &task,
            "--request",
            &request,
            "--option",
            "allow-once",
        ],
    );
    out.assert_code(0);
    assert_eq!(
        out.stdout.trim_end(),
        format!("answered {request} with allow-once")
    );
    let done = outcome(&east.hub, "alpha", &task);
    assert_eq!(done["state"], "completed", "{done}");
    assert_eq!(done["peer"], "west");
    assert_eq!(done["text"], "asked: allow-once; ran");
    let answered = west.hub.wait_audit("west's request_answered", |a| {
        a.iter().any(|v| v["event"] == "request_answered")
    });
    let answered = events(&answered, "request_answered", &wtask);
    assert_eq!(answered.len(), 1);
    assert_eq!(answered[0]["option"], "allow-once");
    // Once answered, the mirror is closed too: a second answer is late, in the verb's words.
    assert!(refusal(&verb(
        &east.hub,
        "alpha",
        &json!({"task_answer": {"task": task, "request": request, "option": "reject"}})
    ))
    .starts_with(&format!(
        "invalid task_answer: request {request} is not open"
    )),);
    // East logged the mirror, naming the peer and the request (the log is flushed on its own
    // beat, so this polls it).
    east.hub.wait_service_log("east's mirror logged", |l| {
        l.contains(&format!("request {request} of west mirrored for alpha"))
    });
}

/// West is the only clock: nobody answers within its `permission_timeout_secs`, so its agent
/// gets the reject fallback, and east's delegator gets the expired envelope with west's
/// reason; an answer after that is refused on east.
#[test]
fn a_timeout_at_the_worker_reaches_the_delegator_as_expired() {
    let (east, west) = pair("permission_timeout_secs = 1", None);
    let task = delegate_ask(&east, &west);
    let open = await_request(&east.hub, "alpha", &task);
    let request = open["request"].as_str().unwrap().to_owned();
    let expired = await_request(&east.hub, "alpha", &task);
    assert_eq!(
        expired,
        json!({"task": task, "request": request, "state": "expired", "fallback": "reject", "reason": "no answer within 1 s"})
    );
    let done = outcome(&east.hub, "alpha", &task);
    assert_eq!(done["state"], "completed", "{done}");
    assert_eq!(done["text"], "asked: reject; not run");
    assert_eq!(
        refusal(&verb(
            &east.hub,
            "alpha",
            &json!({"task_answer": {"task": task, "request": request, "option": "allow-once"}})
        )),
        format!("invalid task_answer: request {request} is not open (expired)")
    );
    let wtask = west_task(&west, &task);
    let audit = west.hub.audit();
    let rec = events(&audit, "request_expired", &wtask);
    assert_eq!(rec.len(), 1, "{audit:?}");
    assert_eq!(rec[0]["reason"], "no answer within 1 s");
    assert!(events(&audit, "request_answered", &wtask).is_empty());
}

/// A claudectl delegator (the v0 double) cannot carry a request: its task's agent gets the
/// reject fallback at once, audited with the reason `no relay route to the delegator`, the
/// handoff says what the agent did without it, and nothing of task-approvals is ever written
/// on the v0 link.
#[test]
fn a_claudectl_delegators_task_gets_the_fallback_at_once() {
    let key = key_hex(0x72);
    let setup = Setup::new();
    let mut spec = RelaySpec::new("east", "127.0.0.2:0").peer("ctl", None, &key, true);
    spec.peers[0].delegate = true;
    spec.tail = tasks_tail(&setup, "permission_timeout_secs = 600");
    let east = RelayHub::start(setup, spec);
    let (mut lasting, _ack) = v0_dial_and_handshake(east.relay_addr, "ctl", &key, "east");
    linked(&mut lasting, "ctl", &east);
    let d = json!({
        "task_id": "t-ask-1",
        "prompt": "do it",
        "cwd": work(&east),
        "context": {"dependency_graph": {"blocks": [], "blocked_by": []}},
        "agent": "fakeask",
    });
    lasting.send("ctl", "delegate_task", d);
    // The handoff comes long before the 600 s timeout: the fallback was at once.
    let seen = beat_until(&mut lasting, "ctl", "the task_handoff", |s| {
        first(s, "task_handoff").is_some()
    });
    let handoff = &first(&seen, "task_handoff").unwrap().payload;
    assert_eq!(handoff["task_id"], "t-ask-1");
    assert_eq!(handoff["state"], "completed", "{handoff:?}");
    assert_eq!(handoff["summary"], "asked: reject; not run", "{handoff:?}");
    assert!(
        seen.iter().all(|m| !m.msg_type.starts_with("task_request")),
        "{:?}",
        seen.iter().map(|m| &m.msg_type).collect::<Vec<_>>()
    );
    let audit = east.hub.audit();
    let expired: Vec<&Value> = audit
        .iter()
        .filter(|v| v["event"] == "request_expired")
        .collect();
    assert_eq!(expired.len(), 1, "{audit:?}");
    assert_eq!(expired[0]["reason"], "no relay route to the delegator");
    assert_eq!(expired[0]["fallback"], "reject");
    assert!(audit.iter().all(|v| v["event"] != "request_opened"));
}

/// A hostile peer of the worker (its own key, a hardened link, `task-approvals` agreed)
/// forges a `task_answer` allowing east's task's open request: west refuses it, logs it with
/// mallory's name, and never applies it; the delegator's real answer (reject) is the one the
/// agent gets.
#[test]
fn a_hostile_peers_forged_task_answer_is_refused_and_never_applied() {
    let mallory_key = key_hex(0x73);
    let (east, west) = pair("", Some(&mallory_key));
    let task = delegate_ask(&east, &west);
    let body = await_request(&east.hub, "alpha", &task);
    let request = body["request"].as_str().unwrap().to_owned();
    let wtask = west_task(&west, &task);
    let mut mallory = V1Dialer::dial(
        west.relay_addr,
        "mallory",
        "west",
        &mallory_key,
        json!({"features": ["unknown-ok", "mutual-auth", "frame-bin", "frame-mac", "task-approvals"]}),
    );
    let agreed = &mallory.ack["payload"]["features"];
    assert!(
        agreed
            .as_array()
            .unwrap()
            .contains(&json!("task-approvals")),
        "the forgery travels on a link that agreed the feature: {agreed}"
    );
    // East's id for the task, and west's own, each with the real request id.
    for t in [&task, &wtask] {
        mallory.send(
            "task_answer",
            json!({"task_id": t, "request": request, "option": "allow-once"}),
        );
    }
    west.hub
        .wait_service_log("west refusing mallory's forged answers", |l| {
            l.matches(
                "relay: mallory sent a task_answer for a task it did not delegate to this hub",
            )
            .count()
                >= 2
        });
    // Still open on both hubs: the forgery changed nothing.
    assert!(west.hub.audit_events("request_answered").is_empty());
    let s = verb(&east.hub, "alpha", &json!({"task_status": {"task": task}}));
    assert_eq!(
        s["task_status"]["requests"][0]["request"],
        request.as_str(),
        "{s}"
    );
    let out = task_cli(
        &east.hub,
        "alpha",
        &["--id", &task, "--request", &request, "--option", "reject"],
    );
    out.assert_code(0);
    let done = outcome(&east.hub, "alpha", &task);
    assert_eq!(done["state"], "completed", "{done}");
    assert_eq!(done["text"], "asked: reject; not run");
    let audit = west.hub.audit();
    let answered = events(&audit, "request_answered", &wtask);
    assert_eq!(answered.len(), 1, "{audit:?}");
    assert_eq!(answered[0]["option"], "reject");
}
