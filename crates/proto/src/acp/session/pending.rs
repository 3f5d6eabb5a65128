//! The requests a session holds open under `Ask` (issue 37 design §4, §4b; docs/acp.md
//! "Permission requests", "Questions"): each one's per-task `seq` (from 1), its kind (a
//! permission or a question: they share one numbering, one cap and the agent's one id
//! space), the agent's JSON-RPC id to answer, and the options it offered, until
//! `Session::answer`, a cancel or the session's end closes it. Part of `Session`, a sub-machine that owns this state (PLAN.md §14).
//!
//! Owns the numbering (one `seq` per request that reaches the owner, held or pre-approved,
//! never reused), the cap on requests held at once, and refusing to hold two requests under
//! one JSON-RPC id (an answer could not tell them apart). Refuses: writing anything (the
//! session answers), and any clock (a request's expiry is the task book's, design §4.2).

use crate::acp::request::{OptionKind, RequestKind};
use serde_json::{json, Value};

/// One held request.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Held {
    pub(super) seq: u32,
    /// How it is answered: a permission's `outcome`, or a question's `action`.
    pub(super) kind: RequestKind,
    /// The agent's id for the request, echoed in the answer.
    pub(super) rpc_id: Value,
    /// The options offered to a person: exact ids and kinds.
    pub(super) options: Vec<(String, OptionKind)>,
}

impl Held {
    /// The options as the agent sent them (their `kind` and `optionId`), for
    /// `permission::fallback`.
    pub(super) fn option_values(&self) -> Vec<Value> {
        self.options
            .iter()
            .map(|(id, k)| json!({"optionId": id, "kind": k.tag()}))
            .collect()
    }
}

/// Why a request cannot be held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum NotHeld {
    /// `max_open_requests` are held already.
    Full,
    /// A held request already uses this JSON-RPC id.
    IdInUse,
    /// Every `seq` was used (after 4 billion requests; `max_agent_requests` ends a session
    /// long before).
    Exhausted,
}

#[derive(Debug)]
pub(super) struct Pending {
    /// The last `seq` given out; 0 before the first.
    last_seq: u32,
    held: Vec<Held>,
    max: usize,
}

impl Pending {
    pub(super) fn new(max_open_requests: u32) -> Pending {
        Pending {
            last_seq: 0,
            held: Vec::new(),
            max: max_open_requests as usize,
        }
    }

    /// The next `seq`, for a request that reaches the owner.
    pub(super) fn next_seq(&mut self) -> Option<u32> {
        let seq = self.last_seq.checked_add(1)?;
        self.last_seq = seq;
        Some(seq)
    }

    /// Holds a request under the next `seq`, which it returns.
    pub(super) fn hold(
        &mut self,
        rpc_id: &Value,
        kind: RequestKind,
        options: Vec<(String, OptionKind)>,
    ) -> Result<u32, NotHeld> {
        if self.held.iter().any(|h| &h.rpc_id == rpc_id) {
            return Err(NotHeld::IdInUse);
        }
        if self.held.len() >= self.max {
            return Err(NotHeld::Full);
        }
        let seq = self.next_seq().ok_or(NotHeld::Exhausted)?;
        self.held.push(Held {
            seq,
            kind,
            rpc_id: rpc_id.clone(),
            options,
        });
        Ok(seq)
    }

    /// Closes the request `seq`, if it is held.
    pub(super) fn take(&mut self, seq: u32) -> Option<Held> {
        let at = self.held.iter().position(|h| h.seq == seq)?;
        Some(self.held.remove(at))
    }

    /// Closes every held request, oldest first.
    pub(super) fn take_all(&mut self) -> Vec<Held> {
        std::mem::take(&mut self.held)
    }

    pub(super) fn len(&self) -> usize {
        self.held.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PERMISSION: RequestKind = RequestKind::Permission;

    fn opts() -> Vec<(String, OptionKind)> {
        vec![("ok".into(), OptionKind::AllowOnce)]
    }

    #[test]
    fn seqs_count_from_one_and_are_never_reused() {
        let mut p = Pending::new(2);
        assert_eq!(p.hold(&json!(0), PERMISSION, opts()), Ok(1));
        assert_eq!(
            p.next_seq(),
            Some(2),
            "a pre-approved request takes a seq too"
        );
        assert_eq!(p.hold(&json!("x"), RequestKind::Question, opts()), Ok(3));
        assert_eq!(p.len(), 2);
        assert_eq!(p.take(1).map(|h| h.rpc_id), Some(json!(0)));
        assert_eq!(p.take(1), None, "closed once");
        assert_eq!(p.take(2), None, "never held");
        assert_eq!(
            p.hold(&json!(0), PERMISSION, opts()),
            Ok(4),
            "an id is free again once answered"
        );
        assert_eq!(
            p.take_all().iter().map(|h| h.seq).collect::<Vec<_>>(),
            [3, 4]
        );
        assert_eq!(p.len(), 0);
    }

    #[test]
    fn the_cap_and_a_reused_id_refuse_without_using_a_seq() {
        let mut p = Pending::new(1);
        assert_eq!(p.hold(&json!(7), PERMISSION, opts()), Ok(1));
        // Questions and permissions share the agent's id space (capture §6) and the cap.
        assert_eq!(
            p.hold(&json!(7), RequestKind::Question, opts()),
            Err(NotHeld::IdInUse)
        );
        assert_eq!(
            p.hold(&json!(8), RequestKind::Question, opts()),
            Err(NotHeld::Full)
        );
        // Ids are compared as JSON values: 7 and "7" are two ids.
        p.take(1);
        assert_eq!(p.hold(&json!("7"), PERMISSION, opts()), Ok(2));
        let mut end = Pending::new(4);
        end.last_seq = u32::MAX;
        assert_eq!(
            end.hold(&json!(1), PERMISSION, opts()),
            Err(NotHeld::Exhausted)
        );
        assert_eq!(end.next_seq(), None);
    }

    #[test]
    fn the_fallback_sees_the_options_as_offered() {
        let h = Held {
            seq: 1,
            kind: PERMISSION,
            rpc_id: json!(1),
            options: vec![
                ("y".into(), OptionKind::AllowOnce),
                ("n".into(), OptionKind::RejectOnce),
            ],
        };
        assert_eq!(
            h.option_values(),
            [
                json!({"optionId":"y","kind":"allow_once"}),
                json!({"optionId":"n","kind":"reject_once"})
            ]
        );
    }
}
