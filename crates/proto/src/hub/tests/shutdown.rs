//! Simulation tests of a clean shutdown (SPEC §4.6): parked awaits are closed without
//! consuming anything.

use super::*;

// ===== shutdown =====

#[test]
fn shutdown_closes_parked_awaits_without_consuming() {
    let mut sim = Sim::new();
    let queued = sim.sent("mneme", "datastore", "task", None);
    let parked = sim.await_("datastore", None, Some("result"), None);
    let greeting = sim.open();
    let now = sim.now();
    sim.hub.shutdown(now);
    sim.hub.stopped();
    let d = sim.drain();
    assert_eq!(
        d.error(parked),
        "hub is shutting down; nothing was consumed"
    );
    assert_eq!(d.error(greeting), "hub is shutting down");
    assert!(d.closed(parked) && d.closed(greeting));
    assert_eq!(d.audit.last(), Some(&AuditEvent::Shutdown { queued: 1 }));
    assert_eq!(sim.queued_ids("datastore"), [queued]);
    assert_eq!(sim.parked("datastore"), 0);
    let late = sim.open();
    assert_eq!(sim.drain().error(late), "hub is shutting down");
}
