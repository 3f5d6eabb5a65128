//! The lease verbs (lease design §A, SPEC §17), one file each: `claim`, `release`, `renew`,
//! `list`, `break_` and `check`, each a function over the machines it drives, called from the
//! dispatcher (`hub::session`). What they share is here: `LeaseWork`, the machines a lease
//! step drives, and `LeaseWork::stage`, which carries out the lease machine's effects: audit
//! records out at once, a grant staged until the commit of its `lease_granted` record (its
//! connection waits in `Phase::Staged`; `hub::settle` answers it), the hub's envelopes
//! (`lease_expiring`, `lease_lost`, a detached waiter's `lease_granted` with its record
//! riding along) staged like a bounce.
//!
//! Refuses `impl Hub` and IO, like every verb; refuses every rule about leases (the machine's,
//! `hub::leases`).

pub(in crate::hub) mod break_;
pub(in crate::hub) mod check;
pub(in crate::hub) mod claim;
pub(in crate::hub) mod list;
pub(in crate::hub) mod release;
pub(in crate::hub) mod renew;

use crate::hub::commit::{Commits, Rider, StagedTask, TaskThen};
use crate::hub::conns::{Conns, Phase};
use crate::hub::event::AuditEvent;
use crate::hub::leases::{Effect, GrantTo, Leases};
use crate::hub::outbox::Outbox;
use crate::hub::router::Router;
use crate::kernel::ids::IdSource;
use crate::kernel::names::HUB_NAME;
use crate::kernel::now::Now;
use crate::wire::lease::LEASE_GRANTED_KIND;
use crate::wire::Envelope;
use chrono::SecondsFormat;

/// What a lease step drives: the lease machine, the staging its grants and envelopes go to,
/// the router those envelopes are named by, and the ids they draw from.
pub(in crate::hub) struct LeaseWork<'a> {
    pub(in crate::hub) leases: &'a mut Leases,
    pub(in crate::hub) commit: &'a mut Commits,
    pub(in crate::hub) router: &'a mut Router,
    pub(in crate::hub) ids: &'a mut dyn IdSource,
}

impl LeaseWork<'_> {
    /// Carries out every effect the lease machine queued, in order (module doc).
    pub(in crate::hub) fn stage(&mut self, conns: &mut Conns, out: &mut Outbox, now: Now) {
        while let Some(effect) = self.leases.poll_effect() {
            match effect {
                Effect::Audit(a) => out.audit(AuditEvent::Lease(a)),
                Effect::Envelope {
                    to,
                    kind,
                    lease,
                    body,
                } => {
                    let env = hub_envelope(&to, kind, &lease, body, now, self.ids);
                    self.commit.stage_hub_envelope(self.router, &env, None);
                }
                Effect::Grant(g) => match g.to {
                    GrantTo::Conn(conn) => {
                        // The claimer hears of its grant once the record is written.
                        conns.set_deadline(conn, None);
                        if let Some(c) = conns.get_mut(&conn) {
                            c.phase = Phase::Staged;
                        }
                        self.commit.stage_step(StagedTask {
                            store: Vec::new(),
                            audit: vec![AuditEvent::Lease(g.audit.clone())],
                            then: TaskThen::Lease(g),
                        });
                    }
                    GrantTo::Envelope => {
                        let body = Leases::granted_body(&g);
                        let env = hub_envelope(
                            &g.owner,
                            LEASE_GRANTED_KIND,
                            &g.lease,
                            body,
                            now,
                            self.ids,
                        );
                        let rider = Rider {
                            store: Vec::new(),
                            audit: vec![AuditEvent::Lease(g.audit)],
                        };
                        self.commit
                            .stage_hub_envelope(self.router, &env, Some(Box::new(rider)));
                    }
                },
            }
        }
    }
}

/// An envelope from `hub` to a lease's owner, correlated with the lease (design §0
/// "Envelopes").
fn hub_envelope(
    to: &str,
    kind: &str,
    lease: &str,
    body: String,
    now: Now,
    ids: &mut dyn IdSource,
) -> Envelope {
    Envelope::new(
        ids.next_id(),
        HUB_NAME.to_owned(),
        to.to_owned(),
        now.wall.to_rfc3339_opts(SecondsFormat::Millis, true),
        kind.to_owned(),
        Some(lease.to_owned()),
        body,
    )
    // Invariant: the body is serde_json's own output of a lease body, one JSON value.
    .expect("a lease body is one JSON value")
}
