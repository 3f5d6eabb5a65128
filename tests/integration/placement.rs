//! `delegate --peer auto` through the real binaries (issue 38 design §4, §11 "placement.rs";
//! docs/delegation.md "Placement"): hq (127.0.0.2) has no agent of its own and links to
//! roomy (127.0.0.3, room to spare, tagged `gpu`) and full (127.0.0.4, `tasks.max_concurrent
//! = 1` with a hanging task holding its one slot); gone is configured but never links. Our
//! hubs agree `headroom` and every beat carries the sender's room. Every wait polls a status
//! file, a reply or the audit with a deadline; nothing sleeps.

use crate::delegate::{manifest, outcome, task_id, verb};
use crate::harness::*;
use crate::relay::*;
use serde_json::{json, Value};
use std::path::PathBuf;

/// The `[tasks]` table of a hub, with the fake agents when `agents`, the given extra lines,
/// and floors off on the delegating hub (this test machine's load and memory are not what is
/// tested; the floors have their table tests).
fn tasks_tail(setup: &Setup, agents: bool, extra: &str) -> String {
    std::fs::create_dir_all(setup.path("work")).unwrap();
    std::fs::create_dir_all(setup.path("manifests")).unwrap();
    if agents {
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
    }
    let root = std::fs::canonicalize(setup.path("work")).unwrap();
    format!(
        "\n[tasks]\ncwd_roots = [{:?}]\nmanifests_dir = {:?}\ncredentials_dir = {:?}\npeer_status_secs = 1\n{extra}",
        root.to_str().unwrap(),
        setup.path("manifests").to_str().unwrap(),
        setup.path("task-creds").to_str().unwrap(),
    )
}

const FLOORS_OFF: &str =
    "\n[tasks.placement]\nmin_mem_free_mb = 0\nmin_disk_free_mb = 0\nmax_load_per_core = 0\n";

/// A beat a second: a peer is stale after 3 s without one, far more than a loaded machine
/// delays a beat, and the room a beat carries is at most a second old.
const BEAT_MS: u64 = 1000;

fn worker(
    id: &'static str,
    listen: &str,
    key: &str,
    tags: &[&'static str],
    extra: &str,
) -> RelayHub {
    let setup = Setup::new();
    let mut spec = RelaySpec::new(id, listen).peer("hq", None, key, false);
    spec.peers[0].delegate = true;
    spec.features.push("agents");
    spec.heartbeat_ms = BEAT_MS;
    spec.tags = tags.to_vec();
    spec.tail = tasks_tail(&setup, true, extra);
    RelayHub::start(setup, spec)
}

struct Three {
    hq: RelayHub,
    roomy: RelayHub,
    full: RelayHub,
    /// The task holding full's one slot.
    hanging: String,
}

fn work(h: &RelayHub) -> PathBuf {
    std::fs::canonicalize(h.hub.setup.path("work")).unwrap()
}

/// The three hubs linked, full's slot taken, and hq holding a beat from each that says so.
fn three() -> Three {
    let (kr, kf, kg) = (key_hex(0x71), key_hex(0x72), key_hex(0x73));
    let full = worker("full", "127.0.0.4:0", &kf, &[], "max_concurrent = 1\n");
    // full's one slot, taken by a task that runs until cancelled.
    let cwd = work(&full);
    let hanging = task_id(&verb(
        &full.hub,
        "alpha",
        &json!({"delegate": {"agent": "fakehang", "cwd": cwd, "prompt": "wait"}}),
    ));
    poll_until("full's task running", || {
        let r = verb(
            &full.hub,
            "alpha",
            &json!({"task_status": {"task": hanging}}),
        );
        (r["task_status"]["state"] == "running").then_some(())
    });
    let roomy = worker("roomy", "127.0.0.3:0", &kr, &["gpu"], "");
    let hq_setup = Setup::new();
    let mut spec = RelaySpec::new("hq", "127.0.0.2:0")
        .peer("roomy", Some(roomy.relay_addr), &kr, false)
        .peer("full", Some(full.relay_addr), &kf, false)
        .peer("gone", None, &kg, false);
    spec.features.push("agents");
    spec.heartbeat_ms = BEAT_MS;
    spec.tail = tasks_tail(&hq_setup, false, FLOORS_OFF);
    let hq = RelayHub::start(hq_setup, spec);
    // Each peer's room as its latest beat put it: full at its cap, roomy with room.
    hq.wait_peer("full", "beats at its cap", |p| {
        p["state"] == "up" && p["headroom"]["running_tasks"] == 1 && p["headroom"]["max_tasks"] == 1
    });
    hq.wait_peer("roomy", "beats with room", |p| {
        p["state"] == "up"
            && p["headroom"]["max_tasks"].is_u64()
            && p["headroom"]["tags"] == json!(["gpu"])
    });
    Three {
        hq,
        roomy,
        full,
        hanging,
    }
}

fn auto(hq: &RelayHub, cwd: &str, requires: Option<Value>) -> Value {
    let mut d = json!({"agent": "fake", "cwd": cwd, "prompt": "build it", "peer": "auto"});
    if let Some(r) = requires {
        d["requires"] = r;
    }
    verb(&hq.hub, "alpha", &json!({ "delegate": d }))
}

#[test]
fn auto_picks_the_peer_with_room_skipping_a_full_one_and_an_unlinked_one() {
    let t = three();
    let cwd = work(&t.roomy);
    let reply = auto(&t.hq, cwd.to_str().unwrap(), None);
    let task = task_id(&reply);
    let d = &reply["delegated"];
    assert_eq!(d["state"], "queued", "{reply}");
    assert_eq!(d["peer"], "roomy", "{reply}");
    assert_eq!(d["placement"]["chose"], "roomy", "{reply}");
    let reason = d["placement"]["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("chose roomy: 4 of 4 task slots free, load "),
        "{reason}"
    );
    assert!(
        reason.ends_with(
            "; 1 eligible; skipped: local (no agent fake), full (at its cap 1/1), gone (no lasting link)"
        ),
        "{reason}"
    );
    // It runs there and comes back as any task on a peer does.
    let body = outcome(&t.hq.hub, "alpha", &task);
    assert_eq!(body["state"], "completed", "{body}");
    assert_eq!(body["peer"], "roomy");
    // The record says where and why; the audit has the choice (metadata only).
    let rec = verb(&t.hq.hub, "alpha", &json!({"task_status": {"task": task}}));
    assert_eq!(rec["task_status"]["placement"], reason, "{rec}");
    let audit = t.hq.hub.wait_audit("hq's task_placed", |a| {
        a.iter()
            .any(|r| r["event"] == "task_placed" && r["task"] == task)
    });
    let placed = audit
        .iter()
        .find(|r| r["event"] == "task_placed" && r["task"] == task)
        .unwrap();
    assert_eq!(placed["chose"], "roomy");
    assert_eq!(placed["eligible"], 1);
    assert_eq!(
        placed["skipped"],
        json!([
            {"place": "local", "why": "no agent fake"},
            {"place": "full", "why": "at its cap 1/1"},
            {"place": "gone", "why": "no lasting link"},
        ])
    );
    // full never saw it: its one task is still the hanging one.
    let list = verb(&t.full.hub, "alpha", &json!({"tasks": {}}));
    assert_eq!(
        list["tasks"]["tasks"].as_array().unwrap().len(),
        1,
        "{list}"
    );
    assert_eq!(list["tasks"]["tasks"][0]["task"], t.hanging.as_str());
}

#[test]
fn requires_filters_by_relay_tags_and_none_eligible_is_refused_naming_each_place() {
    let t = three();
    let cwd = work(&t.roomy);
    let cwd = cwd.to_str().unwrap();
    let reply = auto(&t.hq, cwd, Some(json!(["gpu"])));
    assert_eq!(reply["delegated"]["placement"]["chose"], "roomy", "{reply}");
    // No place has the tag: refused, each place and why, no task made.
    let reply = auto(&t.hq, cwd, Some(json!(["tpu"])));
    assert_eq!(
        reply["error"]["message"],
        "invalid delegate: no hub has room for fake (local: no agent fake; full: no tag tpu; gone: no lasting link; roomy: no tag tpu)",
        "{reply}"
    );
    // A peer named outright with requires, and a hostile tag list, are refused.
    let named = verb(
        &t.hq.hub,
        "alpha",
        &json!({"delegate": {"agent": "fake", "cwd": cwd, "prompt": "x", "peer": "roomy", "requires": ["gpu"]}}),
    );
    assert_eq!(
        named["error"]["message"],
        "invalid delegate: requires needs peer \"auto\""
    );
    let many: Vec<String> = (0..10_000).map(|i| format!("t{i}")).collect();
    let hostile = auto(&t.hq, cwd, Some(json!(many)));
    assert_eq!(
        hostile["error"]["message"],
        "invalid delegate: requires takes 1 to 8 tags, each 1-40 bytes of [A-Za-z0-9._-]"
    );
    let list = verb(&t.hq.hub, "alpha", &json!({"tasks": {}}));
    assert_eq!(
        list["tasks"]["tasks"].as_array().unwrap().len(),
        1,
        "{list}"
    );
    // The CLI: --peer auto --requires, the task id on stdout, where it went on stderr.
    let out = t.hq.hub.cli(
        "delegate",
        "alpha",
        &[
            "--agent",
            "fake",
            "--cwd",
            cwd,
            "--prompt",
            "again",
            "--peer",
            "auto",
            "--requires",
            "gpu",
        ],
    );
    assert_eq!(out.code, 0, "{out:?}");
    assert!(out.stdout.trim().starts_with("task-"), "{out:?}");
    assert!(out.stderr.contains("placement: chose roomy: "), "{out:?}");
}
