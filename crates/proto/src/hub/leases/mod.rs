//! Leases (issue 39; lease design §A, docs/leases.md, SPEC §17): claims by an owner (a
//! roster name or a task identity) on a resource `(kind, value)` in a mode, until an expiry,
//! with FIFO waiters behind conflicts, warnings before expiry, loss envelopes, release when
//! the owner goes `gone` or its task ends, and the operator's break.
//!
//! A machine the `Hub` holds (`Hub::leases`), with its own tests: `table` (the leases and
//! the conflict rule), `waiters` (the FIFO and `ahead`), `clock` (warn points and expiries),
//! `audit` (its records). Its methods decide and queue `Effect`s, which the hub's glue
//! carries out (`hub::verbs::lease::stage_effects`): audit records, grants staged until their
//! commit (a grant is answered only once its `lease_granted` record is written, design
//! §A.2), and the hub's envelopes. Refuses IO, the connections (the glue parks and answers
//! them) and liveness (the glue says who is live and who went gone).
//!
//! Durability: none yet. The store's next schema is being changed for issue 38, so leases
//! live in memory and a restart drops them (the hub logs how many at its stop,
//! `Hub::stopped`); schema 7 (design §A.9) is the next step.

pub mod audit;
mod clock;
mod table;
mod waiters;

pub use audit::LeaseAudit;

use crate::hub::conn_map::ConnId;
use crate::kernel::ids::IdSource;
use crate::kernel::lease_match::{self, PATH_GLOB};
use crate::kernel::now::Now;
use crate::wire::lease::{
    self as wire, rfc3339_ms, sanitize_reason, HeldPath, LeaseBreak, LeaseCheck, LeaseCheckReply,
    LeaseClaim, LeaseClaimReply, LeaseExpiringBody, LeaseGrantedBody, LeaseList, LeaseListReply,
    LeaseLostBody, LeaseRecord, LeaseRenew, WaiterView, WaitingView,
};
use clock::{Clock, Due};
use std::collections::VecDeque;
use std::time::{Duration, Instant};
use table::{Lease, Table};
use waiters::Waiters;
pub(in crate::hub) use waiters::{Claim, Waiter, WaiterKind};

/// `[leases] auto_renew`: whether a live owner's lease is renewed at its warn point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AutoRenew {
    /// Renewed silently while its owner is live (a roster name `busy`, `idle` or `waiting`;
    /// a task not ended); otherwise its owner is warned.
    Live,
    /// Never: every owner is warned and must renew.
    Never,
}

/// `[leases] guard`: what the pre-tool guard does with an edit of a held path (part C).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Guard {
    Refuse,
    Warn,
}

/// The `[leases]` table as plain data (lease design §0 "Config"; loaded and bounded by
/// `agent_hub_host::config`). `Default` is the design's defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseConfig {
    pub default_ttl_secs: u64,
    pub min_ttl_secs: u64,
    pub max_ttl_secs: u64,
    pub warn_before_secs: u64,
    pub auto_renew: AutoRenew,
    /// Active leases plus waits of one owner.
    pub max_per_identity: usize,
    /// Hub-wide.
    pub max_leases: usize,
    pub max_waiters: usize,
    /// Waiters whose resource overlaps a claim's.
    pub max_waiters_per_resource: usize,
    pub max_value_bytes: usize,
    pub max_check_paths: usize,
    pub guard: Guard,
}

impl Default for LeaseConfig {
    fn default() -> LeaseConfig {
        LeaseConfig {
            default_ttl_secs: 300,
            min_ttl_secs: 1,
            max_ttl_secs: 604_800,
            warn_before_secs: 60,
            auto_renew: AutoRenew::Live,
            max_per_identity: 64,
            max_leases: 4096,
            max_waiters: 1024,
            max_waiters_per_resource: 32,
            max_value_bytes: lease_match::MAX_VALUE_BYTES,
            max_check_paths: 16,
            guard: Guard::Refuse,
        }
    }
}

/// Why an owner's leases end without its release (design §A.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::hub) enum Gone {
    /// A roster name entered `gone` (a hook's `session-end`, its process exited).
    Holder,
    /// A task reached its outcome.
    TaskEnded,
}

/// Why a parked claim stops waiting without a grant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::hub) enum WaitEnd {
    Timeout,
    Closed,
    Shutdown,
}

impl WaitEnd {
    fn as_str(self) -> &'static str {
        match self {
            WaitEnd::Timeout => "timeout",
            WaitEnd::Closed => "closed",
            WaitEnd::Shutdown => "shutdown",
        }
    }
}

/// Where a grant goes once committed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::hub) enum GrantTo {
    /// The claim's connection: a `granted` reply (a claim granted at once, or a parked one).
    Conn(ConnId),
    /// A `lease_granted` envelope to the owner (a `notify` waiter).
    Envelope,
}

/// A lease granted and in the table, whose answer waits for the commit of its record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::hub) struct Grant {
    pub(in crate::hub) lease: String,
    pub(in crate::hub) owner: String,
    pub(in crate::hub) record: LeaseRecord,
    pub(in crate::hub) audit: LeaseAudit,
    pub(in crate::hub) to: GrantTo,
    pub(in crate::hub) waited_ms: u64,
    /// The waiter it came from: put back in its place if the commit fails.
    pub(in crate::hub) waiter: Option<Waiter>,
}

impl Grant {
    /// The claimer's `granted` reply.
    pub(in crate::hub) fn reply(&self) -> LeaseClaimReply {
        LeaseClaimReply {
            outcome: wire::GRANTED.to_owned(),
            lease: Some(self.record.clone()),
            waited_ms: Some(self.waited_ms),
            ..Default::default()
        }
    }
}

/// What the machine asks of the hub's glue, in order (`poll_effect`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::hub) enum Effect {
    /// A record that gates nothing.
    Audit(LeaseAudit),
    /// A grant to stage (`Grant`).
    Grant(Box<Grant>),
    /// A hub envelope for `to` (`lease_expiring`, `lease_lost`), correlated with `lease`.
    Envelope {
        to: String,
        kind: &'static str,
        lease: String,
        body: String,
    },
}

/// How a claim is answered (`Leases::claim`).
#[derive(Debug, PartialEq, Eq)]
pub(in crate::hub) enum Claimed {
    /// Granted: its `Effect::Grant` is queued, and its reply waits for that commit.
    Staged,
    /// Answered now: an idempotent re-claim (`granted`), `conflict`, or `queued` (notify).
    Reply(Box<LeaseClaimReply>),
    /// Parked on the connection as waiter `waiter` until `deadline` (None: until granted).
    Park {
        waiter: String,
        deadline: Option<Instant>,
    },
}

/// The lease machine (module doc).
#[derive(Debug, Default)]
pub(in crate::hub) struct Leases {
    config: LeaseConfig,
    table: Table,
    waiters: Waiters,
    clock: Clock,
    effects: VecDeque<Effect>,
}

/// `lease-` or `wait-` and 16 hex digits from the hub's id source.
fn mint(prefix: &str, ids: &mut dyn IdSource) -> String {
    let hex: String = ids
        .next_id()
        .chars()
        .filter(char::is_ascii_hexdigit)
        .take(16)
        .collect();
    format!("{prefix}{hex}")
}

fn ms_between(from: Instant, to: Instant) -> u64 {
    u64::try_from(to.saturating_duration_since(from).as_millis()).unwrap_or(u64::MAX)
}

impl Leases {
    pub(in crate::hub) fn new(config: LeaseConfig) -> Leases {
        Leases {
            config,
            ..Leases::default()
        }
    }

    /// Active leases and waiters now.
    pub(in crate::hub) fn counts(&self) -> (usize, usize) {
        (self.table.len(), self.waiters.len())
    }

    /// The next effect for the glue, oldest first.
    pub(in crate::hub) fn poll_effect(&mut self) -> Option<Effect> {
        self.effects.pop_front()
    }

    pub(in crate::hub) fn poll_timeout(&self) -> Option<Instant> {
        self.clock.poll_timeout()
    }

    fn refuse<T>(tag: &str, why: impl std::fmt::Display) -> Result<T, String> {
        Err(format!("invalid {tag}: {why}"))
    }

    fn check_ttl(&self, tag: &str, ttl: u64) -> Result<(), String> {
        let (min, max) = (self.config.min_ttl_secs, self.config.max_ttl_secs);
        if ttl < min || ttl > max {
            return Self::refuse(tag, format_args!("ttlSecs must be between {min} and {max}"));
        }
        Ok(())
    }

    // ----- claim (design §A.2) -----

    /// `lease_claim` from `owner` on `conn`: refused (the error text), granted (staged),
    /// answered at once, or parked.
    pub(in crate::hub) fn claim(
        &mut self,
        owner: &str,
        req: &LeaseClaim,
        conn: ConnId,
        now: Now,
        ids: &mut dyn IdSource,
    ) -> Result<Claimed, String> {
        const TAG: &str = "lease_claim";
        let max_value = self.config.max_value_bytes;
        if !lease_match::check_value(&req.value, max_value) {
            return Self::refuse(TAG, wire::value_rule(max_value));
        }
        let ttl_secs = req.ttl_secs.unwrap_or(self.config.default_ttl_secs);
        self.check_ttl(TAG, ttl_secs)?;
        if req.fleet == Some(true) {
            return Self::refuse(
                TAG,
                "fleet leases are not served by this hub yet; claim on this hub without fleet",
            );
        }
        // A re-claim of a lease id: idempotent for its owner while active (no new record).
        if let Some(id) = &req.lease {
            if let Some(l) = self.table.get(id) {
                if l.owner == owner {
                    return Ok(Claimed::Reply(Box::new(LeaseClaimReply {
                        outcome: wire::GRANTED.to_owned(),
                        lease: Some(l.record("active")),
                        waited_ms: Some(0),
                        ..Default::default()
                    })));
                }
                return Self::refuse(TAG, format_args!("lease {id} is already in use"));
            }
            if self.table.closed(id).is_some()
                || self
                    .waiters
                    .iter()
                    .any(|w| w.claim.lease.as_deref() == Some(id))
            {
                return Self::refuse(TAG, format_args!("lease {id} is already in use"));
            }
        }
        let held = self.table.count_of(owner) + self.waiters.count_of(owner);
        if held >= self.config.max_per_identity {
            return Self::refuse(
                TAG,
                format_args!("{owner} holds {held} leases and waits (leases.max_per_identity)"),
            );
        }
        let mode = req.mode();
        let root = req.root.clone();
        let resource = table::resource(&req.kind, &req.value, root.as_deref());
        let claim = Claim {
            owner: owner.to_owned(),
            kind: req.kind.clone(),
            value: req.value.clone(),
            mode,
            ttl_secs,
            reason: sanitize_reason(req.reason.as_deref().unwrap_or("")),
            root,
            lease: req.lease.clone(),
            resource,
        };
        let blocker = self
            .table
            .conflict(owner, &claim.kind, &claim.resource, mode)
            .map(|l| (l.owner.clone(), l.id.clone(), rfc3339_ms(l.expires_ms)));
        let ahead = if mode == wire::LeaseMode::Exclusive {
            self.waiters
                .ahead(owner, &claim.kind, &claim.resource, None)
        } else {
            0
        };
        if blocker.is_none() && ahead == 0 {
            if self.table.len() >= self.config.max_leases {
                let n = self.table.len();
                return Self::refuse(
                    TAG,
                    format_args!("the hub holds {n} leases (leases.max_leases)"),
                );
            }
            let grant = self.grant(claim, GrantTo::Conn(conn), None, "claim", 0, now, ids);
            self.effects.push_back(Effect::Grant(Box::new(grant)));
            return Ok(Claimed::Staged);
        }
        let (holder, holder_lease, expires_at) = match blocker {
            Some((h, l, e)) => (Some(h), Some(l), Some(e)),
            None => (None, None, None),
        };
        let conflict = LeaseClaimReply {
            outcome: wire::CONFLICT.to_owned(),
            holder,
            holder_lease,
            expires_at,
            ahead: Some(ahead),
            ..Default::default()
        };
        let wait_secs = req.timeout_secs;
        if !(req.waits() || req.notifies()) || wait_secs == Some(0) {
            return Ok(Claimed::Reply(Box::new(conflict)));
        }
        if self.waiters.len() >= self.config.max_waiters {
            let n = self.waiters.len();
            return Self::refuse(
                TAG,
                format_args!("the hub holds {n} waiters (leases.max_waiters)"),
            );
        }
        let queued = self.waiters.overlapping(&claim.kind, &claim.resource);
        if queued >= self.config.max_waiters_per_resource {
            return Self::refuse(
                TAG,
                format_args!(
                    "{queued} claims already wait for {}:{} (leases.max_waiters_per_resource)",
                    claim.kind, claim.value
                ),
            );
        }
        let seq = self.waiters.take_seq();
        let id = mint("wait-", ids);
        let detached = req.notifies();
        let deadline =
            wait_secs.map(|s| crate::kernel::deadline::after(now.mono, Duration::from_secs(s)));
        self.effects.push_back(Effect::Audit(LeaseAudit::Queued {
            lease: claim.lease.clone(),
            waiter: id.clone(),
            owner: owner.to_owned(),
            kind: claim.kind.clone(),
            value: claim.value.clone(),
            ahead,
        }));
        self.waiters.insert(Waiter {
            id: id.clone(),
            seq,
            claim,
            kind: if detached {
                WaiterKind::Detached
            } else {
                WaiterKind::Parked(conn)
            },
            since_ms: now.wall.timestamp_millis(),
            since: now.mono,
            deadline,
        });
        if detached {
            return Ok(Claimed::Reply(Box::new(LeaseClaimReply {
                outcome: wire::QUEUED.to_owned(),
                waiter: Some(id),
                ahead: Some(ahead),
                ..Default::default()
            })));
        }
        Ok(Claimed::Park {
            waiter: id,
            deadline,
        })
    }

    /// Puts `claim` into the table as a new lease and returns its grant (for the caller to
    /// queue as an effect).
    #[allow(clippy::too_many_arguments)]
    fn grant(
        &mut self,
        claim: Claim,
        to: GrantTo,
        waiter: Option<Waiter>,
        via: &'static str,
        waited_ms: u64,
        now: Now,
        ids: &mut dyn IdSource,
    ) -> Grant {
        let id = claim.lease.clone().unwrap_or_else(|| mint("lease-", ids));
        let (expires_at, warn_at) = self.deadlines(now.mono, claim.ttl_secs);
        let lease = Lease {
            id: id.clone(),
            owner: claim.owner.clone(),
            kind: claim.kind,
            value: claim.value,
            mode: claim.mode,
            reason: claim.reason,
            root: claim.root,
            acquired_ms: now.wall.timestamp_millis(),
            expires_ms: now.wall.timestamp_millis() + (claim.ttl_secs * 1000) as i64,
            ttl_secs: claim.ttl_secs,
            expires_at,
            warn_at,
            warned: false,
        };
        let audit = LeaseAudit::Granted {
            lease: id.clone(),
            owner: lease.owner.clone(),
            kind: lease.kind.clone(),
            value: lease.value.clone(),
            mode: lease.mode.as_str(),
            ttl_secs: lease.ttl_secs,
            via,
            waited_ms,
        };
        let record = lease.record("active");
        self.clock.schedule(&id, warn_at, expires_at);
        self.table.insert(lease);
        Grant {
            lease: id,
            owner: claim.owner,
            record,
            audit,
            to,
            waited_ms,
            waiter,
        }
    }

    /// A lease of `ttl_secs` from `now`: its expiry and its warn point (`expiresAt −
    /// min(warn_before, ttl/2)`, design §0 "Config").
    fn deadlines(&self, now: Instant, ttl_secs: u64) -> (Instant, Instant) {
        let ttl = Duration::from_secs(ttl_secs);
        let expires = crate::kernel::deadline::after(now, ttl);
        let lead = Duration::from_secs(self.config.warn_before_secs).min(ttl / 2);
        (expires, expires.checked_sub(lead).unwrap_or(now))
    }

    /// The commit holding `grant` failed: the lease is taken back as if never made, and its
    /// waiter (if any) goes back to its place in the queue (returned, so the glue re-parks its
    /// connection).
    pub(in crate::hub) fn revoke(&mut self, grant: Grant) -> Option<Waiter> {
        if let Some(l) = self.table.remove(&grant.lease, None) {
            self.clock.unschedule(&l.id, l.warn_at, l.expires_at);
        }
        let w = grant.waiter?;
        self.waiters.insert(w.clone());
        Some(w)
    }

    /// A grant staged for a connection that closed before its commit was written: taken back
    /// unwritten (nobody heard of it), its wait ended `closed` if it was a waiter, and what it
    /// held given on.
    pub(in crate::hub) fn forget_grant(&mut self, grant: Grant, now: Now, ids: &mut dyn IdSource) {
        if let Some(l) = self.table.remove(&grant.lease, None) {
            self.clock.unschedule(&l.id, l.warn_at, l.expires_at);
        }
        if let Some(w) = grant.waiter {
            self.effects.push_back(Effect::Audit(LeaseAudit::WaitEnded {
                waiter: w.id,
                owner: w.claim.owner,
                why: "closed",
            }));
        }
        self.free(now, ids);
    }

    // ----- freeing (design §A.3) -----

    /// Walks the queue again (a grant's commit failed and its waiter is back in its place).
    pub(in crate::hub) fn regrant(&mut self, now: Now, ids: &mut dyn IdSource) {
        self.free(now, ids);
    }

    /// Walks the queue from the front and grants every waiter no longer blocked, in order;
    /// a waiter stays blocked while another owner's exclusive lease overlaps it or an
    /// earlier waiter of another owner wants an overlapping resource (granted first).
    fn free(&mut self, now: Now, ids: &mut dyn IdSource) {
        for seq in self.waiters.seqs() {
            let Some(w) = self.waiters.get(seq) else {
                continue;
            };
            let c = &w.claim;
            let blocked = self
                .table
                .conflict(&c.owner, &c.kind, &c.resource, c.mode)
                .is_some()
                || self
                    .waiters
                    .ahead(&c.owner, &c.kind, &c.resource, Some(seq))
                    > 0;
            if blocked || self.table.len() >= self.config.max_leases {
                continue;
            }
            let Some(w) = self.waiters.remove(seq) else {
                continue;
            };
            let (to, via) = match w.kind {
                WaiterKind::Parked(conn) => (GrantTo::Conn(conn), "wait"),
                WaiterKind::Detached => (GrantTo::Envelope, "notify"),
            };
            let waited_ms = ms_between(w.since, now.mono);
            let claim = w.claim.clone();
            let grant = self.grant(claim, to, Some(w), via, waited_ms, now, ids);
            self.effects.push_back(Effect::Grant(Box::new(grant)));
        }
    }

    /// Ends `id` as `state` with `audit`, then grants what it freed.
    fn end(
        &mut self,
        id: &str,
        state: &'static str,
        audit: LeaseAudit,
        now: Now,
        ids: &mut dyn IdSource,
    ) -> Option<Lease> {
        let l = self.table.remove(id, Some(state))?;
        self.clock.unschedule(&l.id, l.warn_at, l.expires_at);
        self.effects.push_back(Effect::Audit(audit));
        self.free(now, ids);
        Some(l)
    }

    /// The lease `id` for `asker` to act on, or the refusal of `tag` (design §A.6).
    fn owned(&self, tag: &str, id: &str, asker: &str) -> Result<&Lease, String> {
        match self.table.get(id) {
            Some(l) if l.owner == asker => Ok(l),
            Some(l) => Self::refuse(
                tag,
                format_args!("{id} is held by {}, not {asker}", l.owner),
            ),
            None => match self.table.closed(id) {
                Some((_, state)) => Self::refuse(tag, format_args!("{id} is not active ({state})")),
                None => Self::refuse(tag, format_args!("no lease {id}")),
            },
        }
    }

    /// `lease_release` by its holder.
    pub(in crate::hub) fn release(
        &mut self,
        asker: &str,
        id: &str,
        now: Now,
        ids: &mut dyn IdSource,
    ) -> Result<(), String> {
        self.owned("lease_release", id, asker)?;
        let audit = LeaseAudit::Released {
            lease: id.to_owned(),
            owner: asker.to_owned(),
            why: "released",
        };
        self.end(id, "released", audit, now, ids);
        Ok(())
    }

    /// A granted lease whose claimer's connection closed before its grant was answered: it
    /// is released (`closed`), since nobody knows it holds it.
    pub(in crate::hub) fn unclaimed(&mut self, id: &str, now: Now, ids: &mut dyn IdSource) {
        let Some(owner) = self.table.get(id).map(|l| l.owner.clone()) else {
            return;
        };
        let audit = LeaseAudit::Released {
            lease: id.to_owned(),
            owner,
            why: "closed",
        };
        self.end(id, "released", audit, now, ids);
    }

    /// `lease_renew` by its holder: `expiresAt = now + (ttlSecs or the lease's)`, audited.
    pub(in crate::hub) fn renew(
        &mut self,
        asker: &str,
        req: &LeaseRenew,
        now: Now,
    ) -> Result<LeaseRecord, String> {
        const TAG: &str = "lease_renew";
        self.owned(TAG, &req.lease, asker)?;
        if let Some(ttl) = req.ttl_secs {
            self.check_ttl(TAG, ttl)?;
        }
        let ttl_secs = req
            .ttl_secs
            .or_else(|| self.table.get(&req.lease).map(|l| l.ttl_secs))
            .unwrap_or(self.config.default_ttl_secs);
        let (expires_at, warn_at) = self.deadlines(now.mono, ttl_secs);
        let Some(l) = self.table.get_mut(&req.lease) else {
            return Self::refuse(TAG, format_args!("no lease {}", req.lease));
        };
        self.clock.unschedule(&l.id, l.warn_at, l.expires_at);
        l.ttl_secs = ttl_secs;
        l.expires_at = expires_at;
        l.warn_at = warn_at;
        l.expires_ms = now.wall.timestamp_millis() + (ttl_secs * 1000) as i64;
        l.warned = false;
        self.clock.schedule(&l.id, warn_at, expires_at);
        let record = l.record("active");
        self.effects.push_back(Effect::Audit(LeaseAudit::Renewed {
            lease: req.lease.clone(),
            by: asker.to_owned(),
            expires_at: record.expires_at.clone(),
        }));
        Ok(record)
    }

    /// `lease_break` by an operator (`operator` true; the caller checks SPEC §14's list):
    /// the lease ends `broken`, its owner gets `lease_lost`, its waiters their chance.
    pub(in crate::hub) fn break_lease(
        &mut self,
        asker: &str,
        operator: bool,
        req: &LeaseBreak,
        now: Now,
        ids: &mut dyn IdSource,
    ) -> Result<(), String> {
        const TAG: &str = "lease_break";
        if !operator {
            return Self::refuse(TAG, "only an operator may break a lease");
        }
        let Some(l) = self.table.get(&req.lease) else {
            return match self.table.closed(&req.lease) {
                Some((_, state)) => {
                    Self::refuse(TAG, format_args!("{} is not active ({state})", req.lease))
                }
                None => Self::refuse(TAG, format_args!("no lease {}", req.lease)),
            };
        };
        let owner = l.owner.clone();
        let audit = LeaseAudit::Broken {
            lease: req.lease.clone(),
            owner: owner.clone(),
            by: asker.to_owned(),
        };
        if let Some(l) = self.end(&req.lease, "broken", audit, now, ids) {
            let body = LeaseLostBody {
                lease: l.id.clone(),
                kind: l.kind.clone(),
                value: l.value.clone(),
                why: "broken".to_owned(),
                by: Some(asker.to_owned()),
                reason: Some(sanitize_reason(&req.reason)),
            };
            self.envelope(
                &owner,
                wire::LEASE_LOST_KIND,
                &l.id,
                crate::wire::to_json(&body),
            );
        }
        Ok(())
    }

    fn envelope(&mut self, to: &str, kind: &'static str, lease: &str, body: String) {
        // Queued ahead of the grants `end` may have queued: the loser hears first.
        let at = self
            .effects
            .iter()
            .position(|e| matches!(e, Effect::Grant(_)))
            .unwrap_or(self.effects.len());
        self.effects.insert(
            at,
            Effect::Envelope {
                to: to.to_owned(),
                kind,
                lease: lease.to_owned(),
                body,
            },
        );
    }

    /// `owner` went `gone` (a roster name) or its task ended (design §A.5): its leases are
    /// released (no envelope: nobody reads it), its detached waits dropped, and what that
    /// frees is granted.
    pub(in crate::hub) fn owner_gone(
        &mut self,
        owner: &str,
        why: Gone,
        now: Now,
        ids: &mut dyn IdSource,
    ) {
        let why_text = match why {
            Gone::Holder => "holder_gone",
            Gone::TaskEnded => "task_ended",
        };
        for seq in self.waiters.detached_of(owner) {
            if let Some(w) = self.waiters.remove(seq) {
                self.effects.push_back(Effect::Audit(LeaseAudit::WaitEnded {
                    waiter: w.id,
                    owner: owner.to_owned(),
                    why: "waiter_gone",
                }));
            }
        }
        for id in self.table.ids_of(owner) {
            let audit = LeaseAudit::Released {
                lease: id.clone(),
                owner: owner.to_owned(),
                why: why_text,
            };
            self.end(&id, "released", audit, now, ids);
        }
        self.free(now, ids);
    }

    /// Whether `owner` holds a lease or waits (for the glue, to skip work for others).
    pub(in crate::hub) fn involves(&self, owner: &str) -> bool {
        self.table.count_of(owner) > 0 || self.waiters.count_of(owner) > 0
    }

    /// Waiter `waiter` (a claim parked on its connection) stops waiting (`why`); what its
    /// place blocked is granted. Returns the `timeout` reply (the resource's holder now,
    /// nothing granted), None when no such claim waits.
    pub(in crate::hub) fn end_wait(
        &mut self,
        waiter: &str,
        why: WaitEnd,
        now: Now,
        ids: &mut dyn IdSource,
    ) -> Option<LeaseClaimReply> {
        let seq = self.waiters.seq_of(waiter)?;
        let w = self.waiters.remove(seq)?;
        self.effects.push_back(Effect::Audit(LeaseAudit::WaitEnded {
            waiter: w.id.clone(),
            owner: w.claim.owner.clone(),
            why: why.as_str(),
        }));
        let c = &w.claim;
        let blocker = self
            .table
            .conflict(&c.owner, &c.kind, &c.resource, c.mode)
            .map(|l| (l.owner.clone(), l.id.clone(), rfc3339_ms(l.expires_ms)));
        let ahead = self
            .waiters
            .ahead(&c.owner, &c.kind, &c.resource, Some(seq));
        if why != WaitEnd::Shutdown {
            self.free(now, ids);
        }
        let (holder, holder_lease, expires_at) = match blocker {
            Some((h, l, e)) => (Some(h), Some(l), Some(e)),
            None => (None, None, None),
        };
        Some(LeaseClaimReply {
            outcome: wire::TIMEOUT.to_owned(),
            holder,
            holder_lease,
            expires_at,
            ahead: Some(ahead),
            ..Default::default()
        })
    }

    // ----- time (design §A.4) -----

    /// Every warn point and expiry due at `now`: a live owner's lease renewed silently
    /// (`auto_renew = "live"`), else `lease_expiring` once; an expired lease ends with
    /// `lease_lost` and its waiters' grants. `live` says whether an owner is live.
    pub(in crate::hub) fn handle_timeout(
        &mut self,
        now: Now,
        live: &dyn Fn(&str) -> bool,
        ids: &mut dyn IdSource,
    ) {
        while let Some((id, due)) = self.clock.pop_due(now.mono) {
            match due {
                Due::Warn => self.warn_point(&id, now, live),
                Due::Expire => {
                    let Some(owner) = self.table.get(&id).map(|l| l.owner.clone()) else {
                        continue;
                    };
                    let audit = LeaseAudit::Expired {
                        lease: id.clone(),
                        owner: owner.clone(),
                    };
                    if let Some(l) = self.end(&id, "expired", audit, now, ids) {
                        let body = LeaseLostBody {
                            lease: l.id.clone(),
                            kind: l.kind.clone(),
                            value: l.value.clone(),
                            why: "expired".to_owned(),
                            by: None,
                            reason: None,
                        };
                        self.envelope(
                            &owner,
                            wire::LEASE_LOST_KIND,
                            &l.id,
                            crate::wire::to_json(&body),
                        );
                    }
                }
            }
        }
    }

    fn warn_point(&mut self, id: &str, now: Now, live: &dyn Fn(&str) -> bool) {
        let renew = self.config.auto_renew == AutoRenew::Live;
        let Some(l) = self.table.get(id) else {
            return;
        };
        if renew && live(&l.owner) {
            let ttl_secs = l.ttl_secs;
            let (expires_at, warn_at) = self.deadlines(now.mono, ttl_secs);
            let Some(l) = self.table.get_mut(id) else {
                return;
            };
            // The warn point is already out of the clock; the old expiry is not.
            self.clock.unschedule(&l.id, l.warn_at, l.expires_at);
            l.expires_at = expires_at;
            l.warn_at = warn_at;
            l.expires_ms = now.wall.timestamp_millis() + (ttl_secs * 1000) as i64;
            self.clock.schedule(&l.id, warn_at, expires_at);
            return;
        }
        if l.warned {
            return;
        }
        let body = LeaseExpiringBody {
            lease: l.id.clone(),
            kind: l.kind.clone(),
            value: l.value.clone(),
            expires_at: rfc3339_ms(l.expires_ms),
            renew: format!("agent-hub lease renew --lease {}", l.id),
        };
        let owner = l.owner.clone();
        if let Some(l) = self.table.get_mut(id) {
            l.warned = true;
        }
        self.envelope(
            &owner,
            wire::LEASE_EXPIRING_KIND,
            id,
            crate::wire::to_json(&body),
        );
    }

    // ----- queries (design §A.7, `lease_list`) -----

    /// `lease_list`: every active lease (every name sees every lease: coordination data,
    /// design §A.6) matching the filters, each with its waiters, and the waiting claims.
    pub(in crate::hub) fn list(&self, req: &LeaseList) -> LeaseListReply {
        let keep = |owner: &str, kind: &str| {
            req.owner.as_deref().map_or(true, |o| o == owner)
                && req.kind.as_deref().map_or(true, |k| k == kind)
        };
        let waiter_ahead = |w: &Waiter| {
            self.waiters.ahead(
                &w.claim.owner,
                &w.claim.kind,
                &w.claim.resource,
                Some(w.seq),
            )
        };
        let leases = self
            .table
            .iter()
            .filter(|l| keep(&l.owner, &l.kind) && req.lease.as_deref().map_or(true, |i| i == l.id))
            .map(|l| {
                let mut r = l.record("active");
                let behind: Vec<WaiterView> = self
                    .waiters
                    .iter()
                    .filter(|w| {
                        w.claim.kind == l.kind
                            && w.claim.owner != l.owner
                            && lease_match::overlaps(&l.kind, &l.resource(), &w.claim.resource)
                    })
                    .map(|w| WaiterView {
                        waiter: w.id.clone(),
                        owner: w.claim.owner.clone(),
                        since: rfc3339_ms(w.since_ms),
                        ahead: waiter_ahead(w),
                    })
                    .collect();
                r.waiters = (!behind.is_empty()).then_some(behind);
                r
            })
            .collect();
        let waiting = self
            .waiters
            .iter()
            .filter(|w| keep(&w.claim.owner, &w.claim.kind) && req.lease.is_none())
            .map(|w| WaitingView {
                waiter: w.id.clone(),
                owner: w.claim.owner.clone(),
                kind: w.claim.kind.clone(),
                value: w.claim.value.clone(),
                since: rfc3339_ms(w.since_ms),
                ahead: waiter_ahead(w),
                detached: w.kind == WaiterKind::Detached,
            })
            .collect();
        LeaseListReply { leases, waiting }
    }

    /// `lease_check` (design §A.7): for each path, the active exclusive leases of `kind`
    /// held by neither `asker` nor `self_task` (a live task identity the caller vouched for)
    /// that match it. A path is made absolute against `root`; a lease whose value is
    /// relative without a root is compared with the path made relative to `root`.
    pub(in crate::hub) fn check(
        &mut self,
        asker: &str,
        req: &LeaseCheck,
        self_task: Option<&str>,
    ) -> Result<LeaseCheckReply, String> {
        let max = self.config.max_check_paths;
        if req.paths.len() > max {
            return Self::refuse("lease_check", format_args!("at most {max} paths"));
        }
        let kind = req.kind();
        let root = req.root.as_deref();
        let mut held = Vec::new();
        for path in &req.paths {
            let abs = table::resource(kind, path, root);
            let rel = match (root, abs.strip_prefix(root.unwrap_or("\0"))) {
                (Some(_), Some(rest)) => rest.trim_start_matches('/').to_owned(),
                _ => path.clone(),
            };
            for l in self.table.exclusive_of(kind) {
                if l.owner == asker || self_task == Some(l.owner.as_str()) {
                    continue;
                }
                let hit = if l.value.starts_with('/') || l.root.is_some() || kind != PATH_GLOB {
                    lease_match::overlaps(kind, &l.resource(), &abs)
                } else {
                    lease_match::overlaps(kind, &l.value, &rel)
                };
                if hit {
                    held.push(HeldPath {
                        path: path.clone(),
                        lease: l.id.clone(),
                        holder: l.owner.clone(),
                        mode: l.mode.as_str().to_owned(),
                        expires_at: rfc3339_ms(l.expires_ms),
                    });
                }
            }
        }
        for h in &held {
            self.effects.push_back(Effect::Audit(LeaseAudit::Guarded {
                asker: asker.to_owned(),
                lease: h.lease.clone(),
                holder: h.holder.clone(),
            }));
        }
        let verdict = if held.is_empty() { "free" } else { "held" };
        Ok(LeaseCheckReply {
            verdict: verdict.to_owned(),
            held,
        })
    }

    /// The `lease_granted` envelope's body for a detached waiter's grant.
    pub(in crate::hub) fn granted_body(grant: &Grant) -> String {
        crate::wire::to_json(&LeaseGrantedBody {
            lease: grant.record.clone(),
            waited_ms: grant.waited_ms,
        })
    }
}

#[cfg(test)]
mod tests;
