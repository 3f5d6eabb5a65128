//! `delegate` with `peer: "auto"` in the book (issue 38 design §4, §9): the rule fed by
//! `Rooms` (links, beats, this machine), the peer it picks written into the task, the reply's
//! `placement`, the audit's `task_placed`, and the refusals of `requires` and of no room.

use super::*;
use crate::relay::worker::Headroom;
use crate::tasks::placement::{Beat, Machine};

fn roomy(running: u32, max: u32) -> Headroom {
    Headroom {
        mem_free_mb: Some(8000),
        load_per_core: Some(0.1),
        disk_free_mb: Some(90_000),
        running_tasks: running,
        max_tasks: Some(max),
        tags: vec!["gpu".into()],
    }
}

fn auto(requires: Option<Vec<&str>>) -> DelegateRequest {
    DelegateRequest {
        agent: "codex".into(),
        cwd: "/srv/root/app".into(),
        prompt: "go".into(),
        peer: Some("auto".into()),
        requires: requires.map(|r| r.into_iter().map(str::to_owned).collect()),
        ..DelegateRequest::default()
    }
}

impl Rig {
    fn link_lab(&mut self, room: Option<Headroom>) {
        let now = self.clock.now();
        let terms = LinkTerms {
            agent_hub: true,
            ..LinkTerms::default()
        };
        self.book
            .handle_peer_link("lab", true, terms, now, &mut self.ids);
        self.book.peer_room(
            "lab",
            Beat {
                room,
                agents: Some(vec!["codex".into()]),
                at: now.mono,
            },
        );
    }

    fn machine(&mut self, mem: u64) {
        self.book.local_room(Machine {
            mem_free_mb: Some(mem),
            load_per_core: Some(0.5),
            disk_free_mb: Some(90_000),
        });
    }
}

fn placed_audit(actions: &[TaskAction]) -> Vec<String> {
    actions
        .iter()
        .filter_map(|a| match a {
            TaskAction::Commit(c) => Some(c.audit.iter()),
            _ => None,
        })
        .flatten()
        .filter(|a| a.event() == "task_placed")
        .map(|a| {
            let mut s = String::new();
            a.encode_fields_into(&mut s);
            s
        })
        .collect()
}

#[test]
fn auto_picks_the_peer_with_more_room_and_says_so() {
    let mut rig = Rig::new(config());
    rig.machine(100); // under the 512 MB floor: this hub is skipped
    rig.link_lab(Some(roomy(0, 4)));
    let id = rig.request(auto(None)).expect("placed");
    let acts = rig.actions();
    let reply = rig.book.delegated_reply(&id);
    assert_eq!(reply.peer.as_deref(), Some("lab"));
    let p = reply.placement.expect("placement");
    assert_eq!(p.chose, "lab");
    assert_eq!(
        p.reason,
        "chose lab: 4 of 4 task slots free, load 0.10 per core, 8000 MB free; 1 eligible; skipped: local (low memory 100 MB)"
    );
    let rec = rig.book.status(id.as_str(), "mneme", rig.clock.now());
    assert_eq!(rec.peer.as_deref(), Some("lab"));
    assert_eq!(rec.placement.as_deref(), Some(p.reason.as_str()));
    assert_eq!(
        placed_audit(&acts),
        [format!(
            "\"task_placed\",\"task\":\"{}\",\"chose\":\"lab\",\"eligible\":1,\"skipped\":[{{\"place\":\"local\",\"why\":\"low memory 100 MB\"}}]",
            id.as_str()
        )]
    );
}

#[test]
fn auto_runs_here_when_this_hub_has_more_room() {
    let mut rig = Rig::new(config());
    rig.machine(16_000);
    // lab: 1 of 4 free (2/8) against this hub's 2 of 2 (8/8).
    rig.link_lab(Some(roomy(3, 4)));
    let id = rig.request(auto(None)).expect("placed");
    let reply = rig.book.delegated_reply(&id);
    assert_eq!(reply.peer, None);
    assert_eq!(reply.placement.unwrap().chose, "local");
    assert_eq!(rig.state(&id), "queued");
    rig.start_ready();
    assert_eq!(started(&rig.actions()), [id]);
}

#[test]
fn requires_filters_by_tags_and_is_bounded() {
    let mut rig = Rig::new(config());
    rig.machine(16_000);
    rig.link_lab(Some(roomy(3, 4)));
    // Only lab has the tag, though this hub has more room.
    let id = rig.request(auto(Some(vec!["gpu"]))).expect("placed");
    assert_eq!(rig.book.delegated_reply(&id).peer.as_deref(), Some("lab"));
    let refused = |r: Result<TaskId, DelegateRefusal>| r.unwrap_err().to_string();
    let mut named = auto(Some(vec!["gpu"]));
    named.peer = Some("lab".into());
    assert_eq!(
        refused(rig.request(named)),
        "invalid delegate: requires needs peer \"auto\""
    );
    for bad in [
        vec![],
        vec!["bad tag"],
        vec!["a", "b", "c", "d", "e", "f", "g", "h", "i"],
    ] {
        assert_eq!(
            refused(rig.request(auto(Some(bad)))),
            "invalid delegate: requires takes 1 to 8 tags, each 1-40 bytes of [A-Za-z0-9._-]"
        );
    }
}

#[test]
fn no_room_anywhere_queues_here_or_refuses_naming_each_place() {
    let mut rig = Rig::new(config());
    rig.machine(16_000);
    rig.link_lab(Some(roomy(4, 4)));
    // Fill this hub's two slots.
    let a = rig.submit("one");
    let b = rig.submit("two");
    rig.start_ready();
    assert_eq!(started(&rig.actions()), [a, b]);
    let id = rig.request(auto(None)).expect("queued here");
    let p = rig.book.delegated_reply(&id).placement.unwrap();
    assert_eq!(p.chose, "local");
    assert_eq!(
        p.reason,
        "every place is full or stale; queued here; skipped: local (at its cap 2/2), lab (at its cap 4/4)"
    );
    assert_eq!(rig.state(&id), "queued");
    // An agent only peers could run: refused, each place named.
    let mut gem = auto(None);
    gem.agent = "gemini".into();
    assert_eq!(
        rig.request(gem).unwrap_err().to_string(),
        "invalid delegate: no hub has room for gemini (local: no agent gemini; lab: no agent gemini)"
    );
}

#[test]
fn a_stale_or_dropped_peer_is_not_chosen() {
    let mut rig = Rig::new(config());
    rig.machine(100);
    rig.link_lab(Some(roomy(0, 4)));
    // No beat for three intervals (the default 30 s): stale.
    rig.clock.advance_secs(90);
    let mut gem = auto(None);
    gem.agent = "gemini".into();
    assert_eq!(
        rig.request(gem.clone()).unwrap_err().to_string(),
        "invalid delegate: no hub has room for gemini (local: no agent gemini; lab: stale: no heartbeat for 90 s)"
    );
    let now = rig.clock.now();
    rig.book
        .handle_peer_link("lab", false, LinkTerms::default(), now, &mut rig.ids);
    assert_eq!(
        rig.request(gem).unwrap_err().to_string(),
        "invalid delegate: no hub has room for gemini (local: no agent gemini; lab: no lasting link)"
    );
}
