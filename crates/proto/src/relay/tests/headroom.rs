//! Feature `headroom` between our own hubs (issue 38 design §4; docs/relay-protocol.md §5
//! "Headroom"): offered and agreed by every agent-hub whatever `relay.features` lists, every
//! beat of a link that agreed it carries the sender's latest room, and the receiver reads it
//! into the heartbeat event bounded, a malformed one as none, never closing the link.

use super::*;
use crate::relay::worker::Headroom;

fn rooms_seen(evs: &[SessionEvent]) -> Vec<Option<Headroom>> {
    evs.iter()
        .filter_map(|e| match e {
            SessionEvent::Heartbeat { room, .. } => Some(room.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn our_hubs_agree_headroom_and_every_beat_carries_the_latest_room() {
    // Neither configures it: it is not a `relay.features` word.
    let few = [Feature::UnknownOk, Feature::HbDelta];
    let mut net = Net::v1(&few, &few);
    let room = Headroom {
        mem_free_mb: Some(4096),
        load_per_core: Some(0.25),
        disk_free_mb: Some(70_000),
        running_tasks: 1,
        max_tasks: Some(4),
        tags: vec!["gpu".into()],
    };
    net.a.set_headroom(Some(room.clone()));
    net.pump();
    assert!(net.a.features().contains(&Feature::Headroom));
    assert_eq!(net.a.features(), net.d.features());
    net.run_until(net.now + INTERVAL * 3);
    let seen = rooms_seen(&net.ev_d);
    assert!(seen.len() >= 3, "{seen:?}");
    assert!(seen.iter().all(|r| r.as_ref() == Some(&room)), "{seen:?}");
    // A changed room goes with the next beat (a delta beat too).
    let fuller = Headroom {
        running_tasks: 4,
        ..room
    };
    net.a.set_headroom(Some(fuller.clone()));
    net.run_until(net.now + INTERVAL);
    assert_eq!(rooms_seen(&net.ev_d).last(), Some(&Some(fuller)));
    // The dialer has none set: its beats say none.
    assert!(rooms_seen(&net.ev_a).iter().all(Option::is_none));
}

#[test]
fn a_peers_room_is_bounded_and_a_malformed_one_is_none() {
    let (mut d, mut a, t0) = line_pair(&[Feature::UnknownOk]);
    assert!(a.features().contains(&Feature::Headroom));
    let _ = (drain(&mut d), events(&mut d));
    let now = t0 + INTERVAL;
    inject(
        &mut a,
        "heartbeat",
        "msg_1_1",
        json!({"headroom": {"load_per_core": -1.0, "running_tasks": 3, "max_tasks": 2,
                            "tags": ["ok", "bad tag", "x".repeat(41)]}}),
        now,
    );
    inject(
        &mut a,
        "heartbeat",
        "msg_1_2",
        json!({"headroom": "plenty"}),
        now + INTERVAL,
    );
    inject(
        &mut a,
        "heartbeat",
        "msg_1_3",
        json!({"headroom": {"running_tasks": -1}}),
        now + INTERVAL * 2,
    );
    let evs = events(&mut a);
    assert!(closed_reason(&evs).is_none(), "{evs:?}");
    let seen = rooms_seen(&evs);
    assert_eq!(seen.len(), 3, "{evs:?}");
    let first = seen[0].as_ref().expect("a room");
    assert_eq!(first.load_per_core, None);
    assert_eq!(first.tags, vec!["ok".to_owned()]);
    assert_eq!((first.running_tasks, first.max_tasks), (3, Some(2)));
    assert_eq!(seen[1], None);
    assert_eq!(seen[2], None);
}
