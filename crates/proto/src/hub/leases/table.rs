//! The lease table (lease design §A.1): the active leases by id, with indices by owner and
//! by kind, and a short memory of leases that closed (so a late release or a re-claim of a
//! closed id is told what happened to it, not "no lease").
//!
//! Owns the leases and the one conflict rule over them: an exclusive claim conflicts only
//! with another owner's active exclusive lease of the same kind whose resource overlaps
//! (`kernel::lease_match::overlaps`, on the values made absolute by their `root`). A kind's
//! exclusive leases are few, so the scan is linear. Refuses time, ids and replies: the
//! machine (`hub::leases`) decides when a lease is made or ends.

use crate::kernel::fold_hash::FoldMap;
use crate::kernel::lease_match::{self, PATH_GLOB};
use crate::wire::lease::{rfc3339_ms, LeaseMode, LeaseRecord};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Instant;

/// How many closed leases are remembered (their id and final state).
const CLOSED_MEMORY: usize = 1024;

/// One active lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::hub) struct Lease {
    pub(in crate::hub) id: String,
    pub(in crate::hub) owner: String,
    pub(in crate::hub) kind: String,
    pub(in crate::hub) value: String,
    pub(in crate::hub) mode: LeaseMode,
    pub(in crate::hub) reason: String,
    pub(in crate::hub) root: Option<String>,
    pub(in crate::hub) acquired_ms: i64,
    pub(in crate::hub) expires_ms: i64,
    pub(in crate::hub) ttl_secs: u64,
    /// When it expires on the hub's clock, and when its owner is warned (`clock`).
    pub(in crate::hub) expires_at: Instant,
    pub(in crate::hub) warn_at: Instant,
    /// `lease_expiring` went out for this expiry.
    pub(in crate::hub) warned: bool,
}

impl Lease {
    /// The resource as compared: a relative `path_glob` value joined to its `root`.
    pub(in crate::hub) fn resource(&self) -> String {
        resource(&self.kind, &self.value, self.root.as_deref())
    }

    pub(in crate::hub) fn record(&self, state: &str) -> LeaseRecord {
        LeaseRecord {
            lease: self.id.clone(),
            owner: self.owner.clone(),
            kind: self.kind.clone(),
            value: self.value.clone(),
            mode: self.mode.as_str().to_owned(),
            reason: self.reason.clone(),
            root: self.root.clone(),
            acquired_at: rfc3339_ms(self.acquired_ms),
            expires_at: rfc3339_ms(self.expires_ms),
            ttl_secs: self.ttl_secs,
            state: state.to_owned(),
            fleet: None,
            waiters: None,
        }
    }
}

/// A value as compared: a relative `path_glob` value with a `root` is that root joined to
/// it (`src/**` under `/repo` is `/repo/src/**`); anything else is itself.
pub(in crate::hub) fn resource(kind: &str, value: &str, root: Option<&str>) -> String {
    match root {
        Some(r) if kind == PATH_GLOB && !value.starts_with('/') => {
            format!("{}/{value}", r.trim_end_matches('/'))
        }
        _ => value.to_owned(),
    }
}

/// The table (module doc).
#[derive(Debug, Default)]
pub(in crate::hub) struct Table {
    by_id: BTreeMap<String, Lease>,
    /// Lease ids per owner. Keyed by names clients choose: the keyed hash.
    by_owner: FoldMap<String, BTreeSet<String>>,
    /// Lease ids per kind.
    by_kind: BTreeMap<String, BTreeSet<String>>,
    /// Closed leases, oldest first: (id, owner, final state).
    closed: VecDeque<(String, String, &'static str)>,
}

impl Table {
    pub(in crate::hub) fn len(&self) -> usize {
        self.by_id.len()
    }

    pub(in crate::hub) fn get(&self, id: &str) -> Option<&Lease> {
        self.by_id.get(id)
    }

    pub(in crate::hub) fn get_mut(&mut self, id: &str) -> Option<&mut Lease> {
        self.by_id.get_mut(id)
    }

    /// Every active lease, by id.
    pub(in crate::hub) fn iter(&self) -> impl Iterator<Item = &Lease> {
        self.by_id.values()
    }

    /// The ids `owner` holds.
    pub(in crate::hub) fn ids_of(&self, owner: &str) -> Vec<String> {
        self.by_owner
            .get(owner)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }

    pub(in crate::hub) fn count_of(&self, owner: &str) -> usize {
        self.by_owner.get(owner).map_or(0, BTreeSet::len)
    }

    pub(in crate::hub) fn insert(&mut self, lease: Lease) {
        self.by_owner
            .entry(lease.owner.clone())
            .or_default()
            .insert(lease.id.clone());
        self.by_kind
            .entry(lease.kind.clone())
            .or_default()
            .insert(lease.id.clone());
        self.closed.retain(|(id, _, _)| *id != lease.id);
        self.by_id.insert(lease.id.clone(), lease);
    }

    /// Takes `id` out of the table, remembering it closed in `state` (None: forgotten, as a
    /// grant revoked before anyone heard of it).
    pub(in crate::hub) fn remove(
        &mut self,
        id: &str,
        state: Option<&'static str>,
    ) -> Option<Lease> {
        let lease = self.by_id.remove(id)?;
        if let Some(set) = self.by_owner.get_mut(&lease.owner) {
            set.remove(id);
            if set.is_empty() {
                self.by_owner.remove(&lease.owner);
            }
        }
        if let Some(set) = self.by_kind.get_mut(&lease.kind) {
            set.remove(id);
            if set.is_empty() {
                self.by_kind.remove(&lease.kind);
            }
        }
        if let Some(state) = state {
            if self.closed.len() == CLOSED_MEMORY {
                self.closed.pop_front();
            }
            self.closed
                .push_back((lease.id.clone(), lease.owner.clone(), state));
        }
        Some(lease)
    }

    /// How a lease no longer active ended, and whose it was, if it is remembered.
    pub(in crate::hub) fn closed(&self, id: &str) -> Option<(&str, &'static str)> {
        self.closed
            .iter()
            .rev()
            .find(|(i, _, _)| i == id)
            .map(|(_, owner, state)| (owner.as_str(), *state))
    }

    /// The lease that blocks an exclusive claim by `owner` on `resource` of `kind`: another
    /// owner's active exclusive lease whose resource overlaps. A claim that is not exclusive
    /// is never blocked (design §0).
    pub(in crate::hub) fn conflict(
        &self,
        owner: &str,
        kind: &str,
        resource: &str,
        mode: LeaseMode,
    ) -> Option<&Lease> {
        if mode != LeaseMode::Exclusive {
            return None;
        }
        self.by_kind
            .get(kind)?
            .iter()
            .filter_map(|id| self.by_id.get(id))
            .find(|l| {
                l.owner != owner
                    && l.mode == LeaseMode::Exclusive
                    && lease_match::overlaps(kind, &l.resource(), resource)
            })
    }

    /// The active exclusive leases of `kind`, for `lease_check`.
    pub(in crate::hub) fn exclusive_of(&self, kind: &str) -> impl Iterator<Item = &Lease> {
        self.by_kind
            .get(kind)
            .into_iter()
            .flatten()
            .filter_map(|id| self.by_id.get(id))
            .filter(|l| l.mode == LeaseMode::Exclusive)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(id: &str, owner: &str, value: &str, mode: LeaseMode) -> Lease {
        let at = crate::kernel::deadline::test_origin();
        Lease {
            id: id.into(),
            owner: owner.into(),
            kind: PATH_GLOB.into(),
            value: value.into(),
            mode,
            reason: String::new(),
            root: None,
            acquired_ms: 0,
            expires_ms: 0,
            ttl_secs: 1,
            expires_at: at,
            warn_at: at,
            warned: false,
        }
    }

    /// Conflict only between exclusives of different owners whose resources overlap.
    #[test]
    fn only_another_owners_exclusive_overlap_conflicts() {
        let mut t = Table::default();
        t.insert(lease("l1", "bee", "src/**", LeaseMode::Exclusive));
        t.insert(lease("l2", "bee", "docs/**", LeaseMode::Advisory));
        let x = LeaseMode::Exclusive;
        assert_eq!(
            t.conflict("ant", PATH_GLOB, "src/a.rs", x)
                .map(|l| l.id.as_str()),
            Some("l1")
        );
        assert!(
            t.conflict("bee", PATH_GLOB, "src/a.rs", x).is_none(),
            "own lease"
        );
        assert!(
            t.conflict("ant", PATH_GLOB, "docs/a.md", x).is_none(),
            "advisory"
        );
        assert!(
            t.conflict("ant", PATH_GLOB, "lib/a.rs", x).is_none(),
            "disjoint"
        );
        assert!(
            t.conflict("ant", "db", "src/a.rs", x).is_none(),
            "other kind"
        );
        let read = LeaseMode::SharedRead;
        assert!(
            t.conflict("ant", PATH_GLOB, "src/a.rs", read).is_none(),
            "not exclusive"
        );
        assert_eq!(t.count_of("bee"), 2);
        t.remove("l1", Some("released"));
        assert!(t.conflict("ant", PATH_GLOB, "src/a.rs", x).is_none());
        assert_eq!(t.closed("l1"), Some(("bee", "released")));
        assert_eq!(t.count_of("bee"), 1);
    }

    /// A relative value under a root is compared as the joined path.
    #[test]
    fn roots_make_relative_values_absolute() {
        assert_eq!(
            resource(PATH_GLOB, "src/**", Some("/repo/")),
            "/repo/src/**"
        );
        assert_eq!(resource(PATH_GLOB, "/abs/x", Some("/repo")), "/abs/x");
        assert_eq!(resource("db", "main", Some("/repo")), "main");
        let mut t = Table::default();
        let mut l = lease("l1", "bee", "src/**", LeaseMode::Exclusive);
        l.root = Some("/repo".into());
        t.insert(l);
        let x = LeaseMode::Exclusive;
        assert!(t.conflict("ant", PATH_GLOB, "/repo/src/a.rs", x).is_some());
        assert!(t.conflict("ant", PATH_GLOB, "/other/src/a.rs", x).is_none());
    }
}
