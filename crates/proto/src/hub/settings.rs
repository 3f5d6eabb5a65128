//! The hub's settings: the roster in force (replaced on SIGHUP, `hub::roster_reload`), the
//! `[limits]` (`hub::limits`, docs/operations.md) and the config's `operators` (SPEC §14
//! "Visibility").
//!
//! Owns what the operator configured and the few rules read straight off it: who gets the
//! operator's view, and the router and ledger the limits size. Refuses state that changes
//! with traffic: every counter, queue and deadline belongs to a machine. A leaf beside the
//! roster and the limits.

use super::ledger::Ledger;
use super::limits::Limits;
use super::router::Router;
use crate::roster::Roster;

#[derive(Debug)]
pub(super) struct Settings {
    pub(super) roster: Roster,
    pub(super) limits: Limits,
    /// Roster names whose `who` and `activity` show everything (`verbs::who`, SPEC §14
    /// "Visibility"); anyone else sees its own filters, envelopes and tasks only.
    pub(super) operators: Vec<String>,
}

impl Settings {
    pub(super) fn new(roster: Roster, limits: Limits) -> Settings {
        Settings {
            roster,
            limits,
            operators: Vec::new(),
        }
    }

    /// Whether `asker` gets the operator's view of `who` and `activity`: it is named in the
    /// config's `operators` (SPEC §14 "Visibility").
    pub(super) fn sees_everything(&self, asker: &str) -> bool {
        self.operators.iter().any(|o| o == asker)
    }

    /// An empty router with the queue caps of `[limits]`.
    pub(super) fn new_router(&self) -> Router {
        let limits = &self.limits;
        Router::new(limits.queue_max_envelopes, limits.queue_max_bytes)
            .with_total_cap(limits.hub_max_bytes)
    }

    /// An empty ledger with the idempotency window and budgets of `[limits]`.
    pub(super) fn new_ledger(&self) -> Ledger {
        let limits = &self.limits;
        Ledger::new(limits.idempotency_window_secs, limits.idempotency_max_ids)
            .with_max_bytes(limits.idempotency_max_bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> Settings {
        let roster = Roster::parse("[agents]\nops = \"tok-ops\"\nbee = \"tok-bee\"\n")
            .expect("test roster is valid");
        Settings::new(roster, Limits::example())
    }

    #[test]
    fn only_a_named_operator_sees_everything() {
        let mut s = settings();
        assert!(!s.sees_everything("ops"), "nobody by default");
        s.operators = vec!["ops".into()];
        assert!(s.sees_everything("ops"));
        assert!(!s.sees_everything("bee"));
        assert!(!s.sees_everything("OPS"), "names are compared exactly");
    }

    #[test]
    fn the_router_and_ledger_take_their_bounds_from_the_limits() {
        let mut s = settings();
        s.limits.queue_max_envelopes = 1;
        let mut router = s.new_router();
        assert!(router.reserve("bee", 10).is_ok());
        assert!(router.reserve("bee", 10).is_err(), "one envelope per queue");
        assert!(s.new_ledger().is_empty());
    }
}
