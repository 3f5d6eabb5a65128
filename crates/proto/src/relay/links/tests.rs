//! The links table's rules (docs/relay-protocol.md §2.6) on a virtual clock: transients,
//! v1 replacement, simultaneous dial, and v0 second connections standing by until they prove
//! they last (claudectl 0.64's unmarked one-shots).

use super::*;
use crate::kernel::deadline::test_origin;

const HB: Duration = Duration::from_secs(30);

fn links(local: &str) -> Links {
    Links::new(local.into(), HB, STANDBY_GRACE)
}

fn at(t0: Instant, ms: u64) -> Instant {
    t0 + Duration::from_millis(ms)
}

#[test]
fn transient_is_never_the_link() {
    let t0 = test_origin();
    let mut l = links("a");
    assert_eq!(
        l.established("b", 1, Direction::Accepted, Opened::Transient, t0),
        Verdict::Transient
    );
    assert_eq!(l.link_of("b"), None);
    assert_eq!(
        l.established("b", 2, Direction::Accepted, Opened::Lasting, t0),
        Verdict::Register { replaces: None }
    );
    assert_eq!(
        l.established("b", 3, Direction::Accepted, Opened::Transient, t0),
        Verdict::Transient
    );
    assert_eq!(
        l.link_of("b"),
        Some(2),
        "a transient connection does not displace the link"
    );
    assert_eq!(l.closed(3, t0), (false, None));
    assert_eq!(l.link_of("b"), Some(2));
}

#[test]
fn newer_v1_same_direction_wins_at_once() {
    let t0 = test_origin();
    let mut l = links("a");
    l.established("b", 1, Direction::Accepted, Opened::Lasting, t0);
    assert_eq!(
        l.established("b", 2, Direction::Accepted, Opened::Lasting, t0),
        Verdict::Register { replaces: Some(1) }
    );
    assert_eq!(
        l.closed(1, t0),
        (false, None),
        "the replaced connection is no longer the link"
    );
    assert_eq!(l.link_of("b"), Some(2));
}

#[test]
fn simultaneous_dial_keeps_the_lower_openers_link_on_both_ends() {
    let t0 = test_origin();
    // "a" < "b": the connection a dialled survives, seen from either end.
    let mut at_a = links("a");
    let mut at_b = links("b");
    at_a.established("b", 1, Direction::Accepted, Opened::Lasting, t0); // b dialled a
    assert_eq!(
        at_a.established("b", 2, Direction::Dialled, Opened::Lasting, t0),
        Verdict::Register { replaces: Some(1) }
    );
    at_b.established("a", 7, Direction::Dialled, Opened::Lasting, t0); // b dialled a
    assert!(matches!(
        at_b.established("a", 8, Direction::Accepted, Opened::Lasting, t0),
        Verdict::Register { replaces: Some(7) }
    ));
    // And in the other order of arrival.
    let mut at_a = links("a");
    at_a.established("b", 2, Direction::Dialled, Opened::Lasting, t0);
    assert!(matches!(
        at_a.established("b", 1, Direction::Accepted, Opened::Lasting, t0),
        Verdict::Reject(_)
    ));
    assert_eq!(at_a.link_of("b"), Some(2));
}

#[test]
fn closing_the_link_frees_the_peer() {
    let t0 = test_origin();
    let mut l = links("a");
    l.established("b", 1, Direction::Dialled, Opened::Lasting, t0);
    assert_eq!(l.closed(1, t0), (true, None));
    assert_eq!(l.link_of("b"), None);
    assert_eq!(l.closed(1, t0), (false, None), "closing twice is nothing");
}

#[test]
fn v0_one_shots_never_displace_a_live_link() {
    let t0 = test_origin();
    let mut l = links("hub");
    assert_eq!(
        l.established("ctl", 1, Direction::Accepted, Opened::Unproven, t0),
        Verdict::Register { replaces: None },
        "with no link, a v0 connection is the link at once"
    );
    // Five one-shots over the next minutes, each closing 250 ms after its handshake, while
    // the link beats every 30 s.
    let mut now = t0;
    for i in 0..5u64 {
        now = at(t0, 30_000 * i + 10_000);
        l.heartbeat(1, at(t0, 30_000 * i));
        let shot = 100 + i;
        assert_eq!(
            l.established("ctl", shot, Direction::Accepted, Opened::Unproven, now),
            Verdict::Standby
        );
        assert!(l.is_standby(shot));
        assert_eq!(l.link_of("ctl"), Some(1), "the reply goes over the link");
        assert!(l.poll_timeout().is_some_and(|t| t > now));
        assert!(l.handle_timeout(at(now, 250)).is_empty());
        assert_eq!(l.closed(shot, at(now, 250)), (false, None));
        assert!(!l.is_standby(shot));
        assert_eq!(l.link_of("ctl"), Some(1));
        assert_eq!(l.poll_timeout(), None, "nothing left to time");
    }
    assert!(l.handle_timeout(at(now, 60_000)).is_empty());
    assert_eq!(l.link_of("ctl"), Some(1));
}

#[test]
fn a_one_shot_in_the_other_direction_never_displaces_our_dial() {
    // We dialled claudectl; its one-shot dials us. Its id is lower than ours, so by the
    // simultaneous-dial rule alone the one-shot would win.
    let t0 = test_origin();
    let mut l = links("zeta");
    l.established("alpha", 1, Direction::Dialled, Opened::Unproven, t0);
    assert_eq!(
        l.established(
            "alpha",
            2,
            Direction::Accepted,
            Opened::Unproven,
            at(t0, 1000)
        ),
        Verdict::Standby
    );
    assert_eq!(l.closed(2, at(t0, 1250)), (false, None));
    assert_eq!(l.link_of("alpha"), Some(1));
}

#[test]
fn a_v0_second_connection_that_lasts_replaces_the_link_after_the_grace() {
    let t0 = test_origin();
    let mut l = links("hub");
    l.established("ctl", 1, Direction::Accepted, Opened::Unproven, t0);
    l.heartbeat(1, at(t0, 1000));
    assert_eq!(
        l.established(
            "ctl",
            2,
            Direction::Accepted,
            Opened::Unproven,
            at(t0, 2000)
        ),
        Verdict::Standby
    );
    let due = l.poll_timeout().unwrap();
    assert_eq!(due, at(t0, 2000) + STANDBY_GRACE);
    assert!(l.handle_timeout(due - Duration::from_millis(1)).is_empty());
    assert_eq!(l.link_of("ctl"), Some(1));
    assert_eq!(
        l.handle_timeout(due),
        vec![Change::Promote {
            peer: "ctl".into(),
            conn: 2,
            replaces: Some(1)
        }]
    );
    assert_eq!(l.link_of("ctl"), Some(2));
    assert!(!l.is_standby(2));
    assert_eq!(l.closed(1, due), (false, None), "the old one is forgotten");
    assert_eq!(l.link_of("ctl"), Some(2));
}

#[test]
fn a_cross_direction_standby_that_loses_the_dial_rule_is_rejected_after_the_grace() {
    let t0 = test_origin();
    // "a" < "b": at a, the link a dialled wins over the one b opens.
    let mut l = links("a");
    l.established("b", 1, Direction::Dialled, Opened::Unproven, t0);
    assert_eq!(
        l.established("b", 2, Direction::Accepted, Opened::Unproven, t0),
        Verdict::Standby
    );
    let changes = l.handle_timeout(t0 + STANDBY_GRACE);
    assert!(
        matches!(&changes[..], [Change::Reject { conn: 2, .. }]),
        "{changes:?}"
    );
    assert_eq!(l.link_of("b"), Some(1));
    assert_eq!(l.poll_timeout(), None);
    assert_eq!(l.closed(2, t0 + STANDBY_GRACE), (false, None));
}

#[test]
fn a_dead_link_hands_over_to_its_standby_at_once() {
    // Half-open: the old socket is dead but not yet closed; the peer came back. When the old
    // one closes (liveness, EOF), the standby becomes the link without waiting for the grace.
    let t0 = test_origin();
    let mut l = links("hub");
    l.established("ctl", 1, Direction::Accepted, Opened::Unproven, t0);
    l.heartbeat(1, at(t0, 20_000));
    l.established(
        "ctl",
        2,
        Direction::Accepted,
        Opened::Unproven,
        at(t0, 30_000),
    );
    l.established(
        "ctl",
        3,
        Direction::Accepted,
        Opened::Unproven,
        at(t0, 31_000),
    );
    assert_eq!(
        l.closed(1, at(t0, 32_000)),
        (
            true,
            Some(Change::Promote {
                peer: "ctl".into(),
                conn: 2,
                replaces: None
            })
        ),
        "the oldest standby: it has lasted longest"
    );
    assert_eq!(l.link_of("ctl"), Some(2));
    assert!(l.is_standby(3));
    // The remaining standby still has to prove itself against the new link.
    assert_eq!(l.closed(3, at(t0, 32_100)), (false, None));
    assert_eq!(l.link_of("ctl"), Some(2));
}

#[test]
fn a_link_that_missed_a_heartbeat_is_replaced_at_once() {
    let t0 = test_origin();
    let mut l = links("hub");
    l.established("ctl", 1, Direction::Accepted, Opened::Unproven, t0);
    l.heartbeat(1, at(t0, 30_000));
    // 1.5 intervals after the last beat: still live (exactly at the bound).
    assert_eq!(
        l.established(
            "ctl",
            2,
            Direction::Accepted,
            Opened::Unproven,
            at(t0, 75_000)
        ),
        Verdict::Standby
    );
    // Past it: the link missed a beat, so it is presumed dead and the newcomer takes over.
    assert_eq!(
        l.established(
            "ctl",
            3,
            Direction::Accepted,
            Opened::Unproven,
            at(t0, 75_001)
        ),
        Verdict::Register { replaces: Some(1) }
    );
    assert_eq!(l.link_of("ctl"), Some(3));
    // The standby from before now stands by for the new link.
    assert!(l.is_standby(2));
}

#[test]
fn a_link_fresh_without_beats_counts_from_when_it_came_up() {
    let t0 = test_origin();
    let mut l = links("hub");
    l.established(
        "ctl",
        1,
        Direction::Accepted,
        Opened::Unproven,
        at(t0, 100_000),
    );
    // An old beat (from before it was the link) changes nothing.
    l.heartbeat(1, t0);
    assert_eq!(
        l.established(
            "ctl",
            2,
            Direction::Accepted,
            Opened::Unproven,
            at(t0, 140_000)
        ),
        Verdict::Standby
    );
}

#[test]
fn heartbeats_of_a_standby_do_not_keep_the_link_alive() {
    let t0 = test_origin();
    let mut l = links("hub");
    l.established("ctl", 1, Direction::Accepted, Opened::Unproven, t0);
    l.established(
        "ctl",
        2,
        Direction::Accepted,
        Opened::Unproven,
        at(t0, 1000),
    );
    l.heartbeat(2, at(t0, 40_000));
    assert_eq!(
        l.established(
            "ctl",
            3,
            Direction::Accepted,
            Opened::Unproven,
            at(t0, 46_000)
        ),
        Verdict::Register { replaces: Some(1) }
    );
}

#[test]
fn peers_are_independent() {
    let t0 = test_origin();
    let mut l = links("hub");
    l.established("x", 1, Direction::Accepted, Opened::Unproven, t0);
    l.established("y", 2, Direction::Accepted, Opened::Unproven, t0);
    assert_eq!(
        l.established("x", 3, Direction::Accepted, Opened::Unproven, t0),
        Verdict::Standby
    );
    assert_eq!(l.closed(2, t0), (true, None));
    assert_eq!(l.link_of("x"), Some(1));
    assert_eq!(l.link_of("y"), None);
    assert!(l.is_standby(3));
}
