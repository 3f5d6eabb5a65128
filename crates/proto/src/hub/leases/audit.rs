//! The lease audit records (lease design §A.8, SPEC §8.1): every grant, queueing, explicit
//! renewal, release, expiry, break, end of a wait and guarded check, as one record each.
//! Never a reason: a reason is the claimer's text, and the audit log holds no other party's
//! free text (SPEC §8.2).
//!
//! A leaf (the vocabulary `hub::event` carries as `AuditEvent::Lease`): it imports nothing of
//! the hub. Owns the records and their encoding; refuses deciding when one is written.

use crate::wire::to_json;
use std::fmt::Write as _;

/// One lease record. Field order is the encoding's order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseAudit {
    /// A lease granted: `via` is `claim`, `wait` (a parked claim), `notify` (a detached one);
    /// `waited_ms` 0 for a claim granted at once.
    Granted {
        lease: String,
        owner: String,
        kind: String,
        value: String,
        mode: &'static str,
        ttl_secs: u64,
        via: &'static str,
        waited_ms: u64,
    },
    /// A claim queued behind a conflict (`lease` the id it asked for, if any).
    Queued {
        lease: Option<String>,
        waiter: String,
        owner: String,
        kind: String,
        value: String,
        ahead: u64,
    },
    /// An explicit `lease_renew` (silent renewals of live owners are not written: one record
    /// per TTL per lease would flood the log, design §A.4).
    Renewed {
        lease: String,
        by: String,
        expires_at: String,
    },
    /// `why`: `released` (its holder), `holder_gone`, `task_ended`, `closed` (the claimer's
    /// connection closed before its grant was answered).
    Released {
        lease: String,
        owner: String,
        why: &'static str,
    },
    Expired {
        lease: String,
        owner: String,
    },
    Broken {
        lease: String,
        owner: String,
        by: String,
    },
    /// `why`: `timeout`, `closed`, `waiter_gone` (its owner went gone), `shutdown`.
    WaitEnded {
        waiter: String,
        owner: String,
        why: &'static str,
    },
    /// A `lease_check` answered `held` for `asker` by `holder`'s lease.
    Guarded {
        asker: String,
        lease: String,
        holder: String,
    },
}

impl LeaseAudit {
    /// The record's `event`.
    pub fn event(&self) -> &'static str {
        match self {
            LeaseAudit::Granted { .. } => "lease_granted",
            LeaseAudit::Queued { .. } => "lease_queued",
            LeaseAudit::Renewed { .. } => "lease_renewed",
            LeaseAudit::Released { .. } => "lease_released",
            LeaseAudit::Expired { .. } => "lease_expired",
            LeaseAudit::Broken { .. } => "lease_broken",
            LeaseAudit::WaitEnded { .. } => "lease_wait_ended",
            LeaseAudit::Guarded { .. } => "lease_guarded",
        }
    }

    /// The record's `event` value and fields, after `"event":` (as `TaskAudit`'s).
    pub fn encode_fields_into(&self, out: &mut String) {
        let _ = write!(out, "\"{}\"", self.event());
        let _ = match self {
            LeaseAudit::Granted {
                lease,
                owner,
                kind,
                value,
                mode,
                ttl_secs,
                via,
                waited_ms,
            } => write!(
                out,
                ",\"lease\":{},\"owner\":{},\"kind\":{},\"value\":{},\"mode\":\"{mode}\",\"ttl_secs\":{ttl_secs},\"via\":\"{via}\",\"waited_ms\":{waited_ms}",
                to_json(lease),
                to_json(owner),
                to_json(kind),
                to_json(value)
            ),
            LeaseAudit::Queued {
                lease,
                waiter,
                owner,
                kind,
                value,
                ahead,
            } => write!(
                out,
                ",\"lease\":{},\"waiter\":{},\"owner\":{},\"kind\":{},\"value\":{},\"ahead\":{ahead}",
                lease.as_deref().map_or_else(|| "null".to_owned(), to_json),
                to_json(waiter),
                to_json(owner),
                to_json(kind),
                to_json(value)
            ),
            LeaseAudit::Renewed {
                lease,
                by,
                expires_at,
            } => write!(
                out,
                ",\"lease\":{},\"by\":{},\"expires_at\":{}",
                to_json(lease),
                to_json(by),
                to_json(expires_at)
            ),
            LeaseAudit::Released { lease, owner, why } => write!(
                out,
                ",\"lease\":{},\"owner\":{},\"why\":\"{why}\"",
                to_json(lease),
                to_json(owner)
            ),
            LeaseAudit::Expired { lease, owner } => write!(
                out,
                ",\"lease\":{},\"owner\":{}",
                to_json(lease),
                to_json(owner)
            ),
            LeaseAudit::Broken { lease, owner, by } => write!(
                out,
                ",\"lease\":{},\"owner\":{},\"by\":{}",
                to_json(lease),
                to_json(owner),
                to_json(by)
            ),
            LeaseAudit::WaitEnded { waiter, owner, why } => write!(
                out,
                ",\"waiter\":{},\"owner\":{},\"why\":\"{why}\"",
                to_json(waiter),
                to_json(owner)
            ),
            LeaseAudit::Guarded {
                asker,
                lease,
                holder,
            } => write!(
                out,
                ",\"asker\":{},\"lease\":{},\"holder\":{}",
                to_json(asker),
                to_json(lease),
                to_json(holder)
            ),
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each record is one JSON object's fields with the escapes a value needs.
    #[test]
    fn records_encode_as_json_fields() {
        let nasty = "q\"b\\\n";
        for r in [
            LeaseAudit::Granted {
                lease: "lease-1".into(),
                owner: nasty.into(),
                kind: "path_glob".into(),
                value: nasty.into(),
                mode: "exclusive",
                ttl_secs: 300,
                via: "claim",
                waited_ms: 0,
            },
            LeaseAudit::Queued {
                lease: None,
                waiter: "wait-1".into(),
                owner: "bee".into(),
                kind: "db".into(),
                value: "main".into(),
                ahead: 2,
            },
            LeaseAudit::Renewed {
                lease: "l".into(),
                by: "bee".into(),
                expires_at: "2026-01-01T00:00:00.000Z".into(),
            },
            LeaseAudit::Released {
                lease: "l".into(),
                owner: "bee".into(),
                why: "holder_gone",
            },
            LeaseAudit::Expired {
                lease: "l".into(),
                owner: "bee".into(),
            },
            LeaseAudit::Broken {
                lease: "l".into(),
                owner: "bee".into(),
                by: "ops".into(),
            },
            LeaseAudit::WaitEnded {
                waiter: "w".into(),
                owner: "bee".into(),
                why: "timeout",
            },
            LeaseAudit::Guarded {
                asker: "a".into(),
                lease: "l".into(),
                holder: "bee".into(),
            },
        ] {
            let mut s = String::from("{\"event\":");
            r.encode_fields_into(&mut s);
            s.push('}');
            let v: serde_json::Value = serde_json::from_str(&s).expect("one JSON object");
            assert_eq!(v["event"], r.event(), "{s}");
        }
    }
}
