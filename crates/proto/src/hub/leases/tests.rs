//! Unit tests of the lease machine alone (no hub): what a claim, a release and an expiry
//! queue as effects, in order, on a virtual clock.

use super::*;
use crate::kernel::ids::SeededIds;
use chrono::{DateTime, Utc};

fn now(ms: u64) -> Now {
    let wall = DateTime::parse_from_rfc3339("2026-07-21T06:40:51Z")
        .expect("fixed time")
        .with_timezone(&Utc);
    Now {
        mono: crate::kernel::deadline::test_origin() + Duration::from_millis(ms),
        wall: wall + chrono::Duration::milliseconds(ms as i64),
    }
}

fn claim(value: &str) -> LeaseClaim {
    LeaseClaim {
        kind: PATH_GLOB.into(),
        value: value.into(),
        ..Default::default()
    }
}

fn effects(l: &mut Leases) -> Vec<Effect> {
    std::iter::from_fn(|| l.poll_effect()).collect()
}

/// A grant is queued as an effect with its record and audit; a conflicting claim is answered
/// at once; the release queues its record before the waiter's grant.
#[test]
fn a_release_queues_its_record_before_the_grant_it_frees() {
    let (mut l, mut ids) = (Leases::new(LeaseConfig::default()), SeededIds::new(3));
    let t0 = now(0);
    let at = |ms: u64| Now {
        mono: t0.mono + Duration::from_millis(ms),
        wall: t0.wall + chrono::Duration::milliseconds(ms as i64),
    };
    assert_eq!(
        l.claim("bee", &claim("src/**"), 1, at(0), &mut ids),
        Ok(Claimed::Staged)
    );
    let e = effects(&mut l);
    let [Effect::Grant(g)] = e.as_slice() else {
        panic!("a grant: {e:?}")
    };
    assert!(
        g.lease.starts_with("lease-") && g.lease.len() == 22,
        "{}",
        g.lease
    );
    assert_eq!(g.to, GrantTo::Conn(1));
    let waiting = LeaseClaim {
        wait: Some(true),
        ..claim("src/a.rs")
    };
    let Ok(Claimed::Park {
        waiter,
        deadline: None,
    }) = l.claim("ant", &waiting, 2, at(1), &mut ids)
    else {
        panic!("parked")
    };
    assert!(matches!(
        effects(&mut l).as_slice(),
        [Effect::Audit(LeaseAudit::Queued { ahead: 0, .. })]
    ));
    let id = g.lease.clone();
    l.release("bee", &id, at(5), &mut ids).expect("released");
    let e = effects(&mut l);
    assert!(matches!(
        &e[0],
        Effect::Audit(LeaseAudit::Released {
            why: "released",
            ..
        })
    ));
    let Effect::Grant(next) = &e[1] else {
        panic!("{e:?}")
    };
    assert_eq!((next.to, next.waited_ms), (GrantTo::Conn(2), 4));
    assert_eq!(
        next.waiter.as_ref().map(|w| w.id.as_str()),
        Some(waiter.as_str())
    );
    // Revoked (its commit failed), the waiter is queued again and the lease gone.
    let next = match e.into_iter().nth(1) {
        Some(Effect::Grant(g)) => *g,
        _ => unreachable!(),
    };
    assert!(l.revoke(next).is_some());
    assert_eq!(l.counts(), (0, 1));
}

/// Expiry queues the record, then the loser's envelope, then the waiter's grant.
#[test]
fn expiry_tells_the_loser_before_granting() {
    let (mut l, mut ids) = (Leases::new(LeaseConfig::default()), SeededIds::new(3));
    let t0 = now(0);
    let at = |ms: u64| Now {
        mono: t0.mono + Duration::from_millis(ms),
        wall: t0.wall + chrono::Duration::milliseconds(ms as i64),
    };
    let short = LeaseClaim {
        ttl_secs: Some(10),
        ..claim("db-main")
    };
    l.claim("bee", &short, 1, at(0), &mut ids).expect("granted");
    effects(&mut l);
    let notify = LeaseClaim {
        notify: Some(true),
        ..claim("db-main")
    };
    l.claim("ant", &notify, 2, at(0), &mut ids).expect("queued");
    effects(&mut l);
    assert_eq!(l.poll_timeout(), Some(at(5_000).mono), "warn at ttl/2");
    l.handle_timeout(at(5_000), &|_| false, &mut ids);
    assert!(matches!(
        effects(&mut l).as_slice(),
        [Effect::Envelope {
            kind: "lease_expiring",
            ..
        }]
    ));
    l.handle_timeout(at(10_000), &|_| false, &mut ids);
    let e = effects(&mut l);
    assert!(matches!(&e[0], Effect::Audit(LeaseAudit::Expired { .. })));
    assert!(matches!(&e[1], Effect::Envelope { kind: "lease_lost", to, .. } if to == "bee"));
    assert!(matches!(&e[2], Effect::Grant(g) if g.to == GrantTo::Envelope && g.owner == "ant"));
}
