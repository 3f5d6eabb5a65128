//! The core's ids come from the source the caller passes in (`kernel::ids`, SPEC §5.3): a
//! simulation run, bounce ids included, is reproducible from its seed.

use super::*;

/// A delivery cut short after its first byte, so the hub bounces it; the bounce's id.
fn bounce_id(seed: u64) -> String {
    let mut sim = Sim::new();
    sim.hub.ids = Box::new(crate::kernel::ids::SeededIds::new(seed));
    sim.sent("mneme", "datastore", "task", None);
    let r = sim.park("datastore");
    sim.drain();
    sim.committed(r);
    sim.closed(r, false);
    sim.commit_ok();
    sim.drain();
    let back = sim.park("mneme");
    let d = sim.drain();
    assert_eq!(d.envelope(back)["kind"], "bounce");
    d.delivered_id(back)
}

#[test]
fn bounce_ids_come_from_the_seeded_source() {
    assert_eq!(bounce_id(1), bounce_id(1), "one seed, one run");
    assert_ne!(bounce_id(1), bounce_id(2));
    let mut ids = crate::kernel::ids::SeededIds::new(1);
    assert_eq!(
        bounce_id(1),
        crate::kernel::ids::IdSource::next_id(&mut ids)
    );
}
