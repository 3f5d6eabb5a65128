//! `choose` and `Rooms` as tables (issue 38 design §11 D): each skip reason at its edge, each
//! floor with unknown figures, the ranking's ties, local first, and none eligible queued here
//! or refused. A virtual clock: instants are offsets from `test_origin`.

use super::*;

/// One origin for the whole file, so instants built in different calls compare.
fn t0() -> Instant {
    static ORIGIN: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    *ORIGIN.get_or_init(crate::kernel::deadline::test_origin)
}

const IV: Duration = Duration::from_secs(30);

fn stale() -> Duration {
    IV * LIVENESS_INTERVALS
}

fn room(running: u32, max: Option<u32>) -> Headroom {
    Headroom {
        mem_free_mb: Some(8192),
        load_per_core: Some(0.2),
        disk_free_mb: Some(50_000),
        running_tasks: running,
        max_tasks: max,
        tags: Vec::new(),
    }
}

fn peer(name: &str, room: Option<Headroom>) -> Place {
    Place {
        name: name.into(),
        kind: PlaceKind::AgentHub,
        has_agent: true,
        tags: room.as_ref().map(|r| r.tags.clone()).unwrap_or_default(),
        room,
        last_beat: Some(t0()),
        linked: true,
        delegable: true,
    }
}

fn local(room: Headroom) -> Place {
    Place {
        name: LOCAL.into(),
        kind: PlaceKind::Local,
        has_agent: true,
        tags: Vec::new(),
        room: Some(room),
        last_beat: None,
        linked: true,
        delegable: true,
    }
}

fn run(local: Option<&Place>, peers: &[Place], now: Instant) -> Placement {
    choose("fake", &[], local, peers, &Floors::default(), stale(), now)
}

fn why_skipped(p: &Placement, name: &str) -> String {
    p.skipped()
        .iter()
        .find(|s| s.place == name)
        .map(|s| s.why.clone())
        .unwrap_or_else(|| panic!("{name} not skipped in {p:?}"))
}

#[test]
fn stale_exactly_at_three_intervals() {
    let p = peer("b", Some(room(0, Some(4))));
    // One millisecond short of three intervals: fresh.
    let fresh = run(
        None,
        std::slice::from_ref(&p),
        t0() + stale() - Duration::from_millis(1),
    );
    assert_eq!(fresh.chose(), Some("b"));
    // Exactly three intervals: stale, with the seconds said.
    let at = run(None, std::slice::from_ref(&p), t0() + stale());
    assert_eq!(why_skipped(&at, "b"), "stale: no heartbeat for 90 s");
    // A linked peer that never beat is stale too.
    let mut never = p;
    never.last_beat = None;
    let r = run(None, &[never], t0());
    assert_eq!(why_skipped(&r, "b"), "stale: no heartbeat yet");
}

#[test]
fn at_cap_and_a_ceiling_of_zero() {
    let r = run(None, &[peer("b", Some(room(4, Some(4))))], t0());
    assert_eq!(why_skipped(&r, "b"), "at its cap 4/4");
    let r = run(None, &[peer("b", Some(room(5, Some(4))))], t0());
    assert_eq!(why_skipped(&r, "b"), "at its cap 5/4");
    let r = run(None, &[peer("b", Some(room(0, Some(0))))], t0());
    assert_eq!(why_skipped(&r, "b"), "at its cap 0/0");
    // No ceiling: never at a cap.
    let r = run(None, &[peer("b", Some(room(100, None)))], t0());
    assert_eq!(r.chose(), Some("b"));
}

#[test]
fn no_headroom_no_agent_no_link_not_delegable() {
    let r = run(None, &[peer("b", None)], t0());
    assert_eq!(why_skipped(&r, "b"), "no headroom reported");
    let mut p = peer("b", Some(room(0, Some(1))));
    p.has_agent = false;
    let r = run(None, &[p], t0());
    assert_eq!(why_skipped(&r, "b"), "no agent fake");
    let mut p = peer("b", Some(room(0, Some(1))));
    p.linked = false;
    let r = run(None, &[p], t0());
    assert_eq!(why_skipped(&r, "b"), "no lasting link");
    let mut p = peer("b", Some(room(0, Some(1))));
    p.delegable = false;
    let r = run(None, &[p], t0());
    assert_eq!(why_skipped(&r, "b"), "not a peer this hub delegates to");
}

#[test]
fn tags_required() {
    let mut gpu = room(0, Some(2));
    gpu.tags = vec!["gpu".into(), "linux".into()];
    let peers = [peer("a", Some(room(0, Some(2)))), peer("g", Some(gpu))];
    let need = |tags: &[&str]| {
        let t: Vec<String> = tags.iter().map(|s| s.to_string()).collect();
        choose("fake", &t, None, &peers, &Floors::default(), stale(), t0())
    };
    let r = need(&["gpu"]);
    assert_eq!(r.chose(), Some("g"));
    assert_eq!(why_skipped(&r, "a"), "no tag gpu");
    // Every tag must be there; the first missing one is named.
    let r = need(&["linux", "cuda"]);
    assert_eq!(why_skipped(&r, "g"), "no tag cuda");
    assert_eq!(why_skipped(&r, "a"), "no tag linux");
}

#[test]
fn each_floor_with_known_and_unknown_figures() {
    let f = Floors::default();
    let with = |edit: &dyn Fn(&mut Headroom)| {
        let mut h = room(0, Some(2));
        edit(&mut h);
        let r = choose("fake", &[], None, &[peer("b", Some(h))], &f, stale(), t0());
        r.skipped().first().map(|s| s.why.clone())
    };
    // At each floor exactly: passes.
    assert_eq!(with(&|h| h.mem_free_mb = Some(512)), None);
    assert_eq!(with(&|h| h.disk_free_mb = Some(1024)), None);
    assert_eq!(with(&|h| h.load_per_core = Some(2.0)), None);
    // Just past it: skipped with the figure.
    assert_eq!(
        with(&|h| h.mem_free_mb = Some(511)).as_deref(),
        Some("low memory 511 MB")
    );
    assert_eq!(
        with(&|h| h.disk_free_mb = Some(1023)).as_deref(),
        Some("low disk 1023 MB")
    );
    assert_eq!(
        with(&|h| h.load_per_core = Some(2.01)).as_deref(),
        Some("load 2.01 per core")
    );
    // Unknown fails a floor that is on.
    assert_eq!(
        with(&|h| h.mem_free_mb = None).as_deref(),
        Some("low memory: not reported")
    );
    assert_eq!(
        with(&|h| h.disk_free_mb = None).as_deref(),
        Some("low disk: not reported")
    );
    assert_eq!(
        with(&|h| h.load_per_core = None).as_deref(),
        Some("load: not reported")
    );
    // Floors off (0): unknown figures pass.
    let off = Floors {
        min_mem_free_mb: 0,
        min_disk_free_mb: 0,
        max_load_per_core: 0.0,
    };
    let bare = Headroom {
        running_tasks: 0,
        max_tasks: Some(1),
        ..Headroom::default()
    };
    let r = choose(
        "fake",
        &[],
        None,
        &[peer("b", Some(bare))],
        &off,
        stale(),
        t0(),
    );
    assert_eq!(r.chose(), Some("b"));
}

#[test]
fn ranking_by_slots_then_load_then_memory_then_local_then_name() {
    // Slots: 3 of 4 free (6/8) beats 1 of 2 (4/8) even with a worse load.
    let mut busy_cpu = room(1, Some(4));
    busy_cpu.load_per_core = Some(1.5);
    let r = run(
        None,
        &[
            peer("half", Some(room(1, Some(2)))),
            peer("roomy", Some(busy_cpu)),
        ],
        t0(),
    );
    assert_eq!(r.chose(), Some("roomy"));
    // Same eighths (7 of 8 free and no ceiling differ: 7/8 vs 8/8).
    let r = run(
        None,
        &[
            peer("a", Some(room(1, Some(8)))),
            peer("b", Some(room(9, None))),
        ],
        t0(),
    );
    assert_eq!(r.chose(), Some("b"));
    // Same slots: load in steps of 0.1 (0.21 and 0.29 tie; 0.30 loses).
    let mut l21 = room(0, Some(2));
    l21.load_per_core = Some(0.21);
    l21.mem_free_mb = Some(1000);
    let mut l29 = room(0, Some(2));
    l29.load_per_core = Some(0.29);
    l29.mem_free_mb = Some(2000);
    let mut l30 = room(0, Some(2));
    l30.load_per_core = Some(0.30);
    l30.mem_free_mb = Some(99_000);
    let r = run(
        None,
        &[
            peer("a", Some(l21)),
            peer("b", Some(l29)),
            peer("c", Some(l30)),
        ],
        t0(),
    );
    // a and b tie on load; b has more memory.
    assert_eq!(r.chose(), Some("b"));
    // All equal: local before peers, then the name.
    let same = room(0, Some(2));
    let r = run(
        Some(&local(same.clone())),
        &[peer("a", Some(same.clone()))],
        t0(),
    );
    assert_eq!(r.chose(), Some(LOCAL));
    let r = run(
        None,
        &[peer("z", Some(same.clone())), peer("a", Some(same))],
        t0(),
    );
    assert_eq!(r.chose(), Some("a"));
}

#[test]
fn the_reason_names_the_choice_its_figures_and_the_skipped() {
    let mut b = room(1, Some(4));
    b.mem_free_mb = Some(12034);
    let mut gpu_less = room(0, Some(4));
    gpu_less.tags = vec!["cpu".into()];
    let mut g = b.clone();
    g.tags = vec!["gpu".into()];
    let mut ctl = peer("ctl", Some(gpu_less));
    ctl.kind = PlaceKind::Claudectl;
    let mut with_gpu_local = local(room(0, Some(1)));
    with_gpu_local.tags = vec!["gpu".into()];
    with_gpu_local.room = Some(Headroom {
        running_tasks: 1,
        max_tasks: Some(1),
        ..g.clone()
    });
    let r = choose(
        "fake",
        &["gpu".to_owned()],
        Some(&with_gpu_local),
        &[peer("b", Some(g)), ctl],
        &Floors::default(),
        stale(),
        t0(),
    );
    match r {
        Placement::Chosen {
            place,
            local,
            eligible,
            skipped,
            reason,
        } => {
            assert_eq!(place, "b");
            assert!(!local);
            assert_eq!(eligible, 1);
            assert_eq!(skipped.len(), 2);
            assert_eq!(
                reason,
                "chose b: 3 of 4 task slots free, load 0.20 per core, 12034 MB free; 1 eligible; skipped: local (at its cap 1/1), ctl (no tag gpu)"
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn none_eligible_queues_here_when_local_has_the_agent() {
    let full = local(room(2, Some(2)));
    let r = run(Some(&full), &[peer("b", None)], t0());
    assert_eq!(
        r,
        Placement::QueuedHere {
            skipped: vec![
                Skip {
                    place: "local".into(),
                    why: "at its cap 2/2".into()
                },
                Skip {
                    place: "b".into(),
                    why: "no headroom reported".into()
                },
            ],
            reason: "every place is full or stale; queued here; skipped: local (at its cap 2/2), b (no headroom reported)".into(),
        }
    );
    assert_eq!(r.chose(), Some(LOCAL));
}

#[test]
fn none_eligible_without_the_agent_here_is_refused_naming_each_place() {
    let mut here = local(room(0, Some(2)));
    here.has_agent = false;
    let mut ctl = peer("ctl", Some(room(0, Some(2))));
    ctl.kind = PlaceKind::Claudectl;
    ctl.tags = vec!["cpu".into()];
    ctl.last_beat = Some(t0() + Duration::from_secs(90));
    let peers = [peer("b", Some(room(0, Some(2)))), ctl];
    let r = choose(
        "fake",
        &["gpu".to_owned()],
        Some(&here),
        &peers,
        &Floors::default(),
        stale(),
        t0() + Duration::from_secs(95),
    );
    match &r {
        Placement::NoRoom { refusal, .. } => assert_eq!(
            refusal,
            "invalid delegate: no hub has room for fake (local: no agent fake; b: stale: no heartbeat for 95 s; ctl: no tag gpu)"
        ),
        other => panic!("{other:?}"),
    }
    assert_eq!(r.chose(), None);
}

#[test]
fn a_refusal_names_at_most_eight_places() {
    let mut here = local(room(0, Some(2)));
    here.has_agent = false;
    let peers: Vec<Place> = (0..12)
        .map(|i| {
            let mut p = peer(&format!("p{i:02}"), None);
            p.linked = false;
            p
        })
        .collect();
    let r = run(Some(&here), &peers, t0());
    let Placement::NoRoom { refusal, skipped } = r else {
        panic!("not refused")
    };
    assert_eq!(skipped.len(), 13);
    assert!(refusal.ends_with("p06: no lasting link; …)"), "{refusal}");
}

#[test]
fn rooms_keep_linked_peers_only_and_read_as_places() {
    let mut rooms = Rooms::default();
    rooms.set_relay(Duration::from_secs(1), vec!["gpu".into()]);
    assert_eq!(rooms.stale_after(), Duration::from_secs(3));
    // A beat before the link: dropped.
    rooms.beat(
        "b",
        Beat {
            room: Some(room(0, Some(2))),
            agents: Some(vec!["fake".into()]),
            at: t0(),
        },
    );
    let delegable: BTreeSet<String> = ["b".to_owned(), "ctl".to_owned()].into();
    let places = rooms.peer_places("fake", &delegable);
    assert_eq!(places.len(), 2);
    assert!(places.iter().all(|p| !p.linked));
    rooms.link("b", true, true);
    rooms.link("ctl", true, false);
    rooms.beat(
        "b",
        Beat {
            room: Some(room(0, Some(2))),
            agents: Some(vec!["fake".into()]),
            at: t0(),
        },
    );
    rooms.beat(
        "ctl",
        Beat {
            room: Some(room(0, Some(2))),
            agents: Some(vec!["fake".into(), "claude".into()]),
            at: t0(),
        },
    );
    // A later beat with no agents keeps the last list; its room replaces the last.
    rooms.beat(
        "b",
        Beat {
            room: None,
            agents: None,
            at: t0() + Duration::from_secs(1),
        },
    );
    let places = rooms.peer_places("fake", &delegable);
    let b = &places[0];
    assert_eq!(
        (b.name.as_str(), b.kind, b.has_agent),
        ("b", PlaceKind::AgentHub, true)
    );
    assert_eq!(b.room, None);
    assert_eq!(b.last_beat, Some(t0() + Duration::from_secs(1)));
    // claudectl runs claude only, whatever tools it lists.
    let ctl = &places[1];
    assert_eq!((ctl.kind, ctl.has_agent), (PlaceKind::Claudectl, false));
    assert!(rooms.peer_places("claude", &delegable)[1].has_agent);
    // Down forgets.
    rooms.link("b", false, true);
    assert!(!rooms.peer_places("fake", &delegable)[0].linked);
    // This hub: its running vs max, its machine, its tags.
    rooms.set_machine(Machine {
        mem_free_mb: Some(100),
        load_per_core: None,
        disk_free_mb: Some(5),
    });
    let l = rooms.local_place(true, 1, 3);
    assert_eq!(l.tags, vec!["gpu".to_owned()]);
    let r = l.room.unwrap();
    assert_eq!(
        (r.running_tasks, r.max_tasks, r.mem_free_mb),
        (1, Some(3), Some(100))
    );
}

#[test]
fn a_hostile_peers_figures_are_bounded() {
    let mut rooms = Rooms::default();
    rooms.link("b", true, true);
    let mut h = room(0, Some(2));
    h.load_per_core = Some(f64::NAN);
    h.tags = vec!["ok".into(), "bad tag!".into(), "x".repeat(41)];
    rooms.beat(
        "b",
        Beat {
            room: Some(h),
            agents: Some((0..1000).map(|i| format!("a{i}")).collect()),
            at: t0(),
        },
    );
    let delegable: BTreeSet<String> = ["b".to_owned()].into();
    let p = &rooms.peer_places("a1", &delegable)[0];
    let r = p.room.as_ref().unwrap();
    assert_eq!(r.load_per_core, None);
    assert_eq!(p.tags, vec!["ok".to_owned()]);
    // A huge load ranks without overflow.
    let mut huge = room(0, None);
    huge.load_per_core = Some(f64::MAX);
    let off = Floors {
        max_load_per_core: 0.0,
        ..Floors::default()
    };
    let r = choose(
        "fake",
        &[],
        None,
        &[peer("b", Some(huge))],
        &off,
        stale(),
        t0(),
    );
    assert_eq!(r.chose(), Some("b"));
}
