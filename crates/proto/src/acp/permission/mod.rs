//! Answering `session/request_permission` (docs/acp.md "Permission requests"). Pure: the
//! options in, the answer's `outcome` object out.
//!
//! Rules: `Reject` picks `reject_once`, else `reject_always`, else answers `cancelled`;
//! `Allow` picks `allow_once`, else `allow_always`, else falls back to `Reject`'s choice. The
//! `_once` kinds come first because they leave no standing rule behind in the agent. After a
//! cancel every request is answered `cancelled` (§1.7's rule). Options with unknown kinds or
//! without a string `optionId` are skipped, as the schema asks for invalid items. `Ask` holds
//! the request (`acp::session`); what a held request gets when nobody answers is
//! `fallback`.
//!
//! Beside the policy (issue 37): `own_tool` recognises a request for a tool of the hub's own
//! MCP server, allowed under every policy; `rules` are the delegator's pre-approval rules,
//! matched lexically under `Ask`. Refuses: reading a `title` to decide anything (a model
//! writes it, ../notes capture §9).

mod own_tool;
mod rules;

pub use own_tool::{hub_server_name, own_tool, ToolNames, HUB_TOOL_NAMES};
pub use rules::{
    lexical_under, AllowRule, AllowRuleError, PathFacts, RequestFacts, ToolKind, MAX_ALLOW_RULES,
    MAX_UNDER_BYTES,
};

use super::config::{PermissionFallback, PermissionPolicy};
use serde_json::{json, Value};

/// What we answered, for counting and logging.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// We selected this option (its id, and whether it was an allow kind).
    Selected {
        option_id: String,
        allowed: bool,
    },
    Cancelled,
}

impl Decision {
    /// The `result` object of our answer.
    pub fn result(&self) -> Value {
        match self {
            Decision::Selected { option_id, .. } => {
                json!({"outcome": {"outcome": "selected", "optionId": option_id}})
            }
            Decision::Cancelled => json!({"outcome": {"outcome": "cancelled"}}),
        }
    }
}

/// Chooses an answer for `options` (the request's `params.options`, already known to be an
/// array). `cancelled` is true once a cancel was requested. `Ask` is decided here only for a
/// request that is not held (the session holds the rest): as `Reject`, the fallback's default.
pub fn decide(policy: PermissionPolicy, options: &[Value], cancelled: bool) -> Decision {
    if cancelled {
        return Decision::Cancelled;
    }
    let chosen = match policy {
        PermissionPolicy::Reject | PermissionPolicy::Ask => reject_choice(options),
        PermissionPolicy::Allow => allow_choice(options).or_else(|| reject_choice(options)),
    };
    chosen.unwrap_or(Decision::Cancelled)
}

/// The agent's `allow_once`, else `allow_always`; None when it offers neither.
pub fn allow_choice(options: &[Value]) -> Option<Decision> {
    select(options, ["allow_once", "allow_always"], true)
}

/// The agent's `reject_once`, else `reject_always`; None when it offers neither.
pub fn reject_choice(options: &[Value]) -> Option<Decision> {
    select(options, ["reject_once", "reject_always"], false)
}

/// What a request gets when it cannot be held or nobody answered it (design §4.5): never an
/// allow.
pub fn fallback(fallback: PermissionFallback, options: &[Value]) -> Decision {
    match fallback {
        PermissionFallback::Reject => reject_choice(options).unwrap_or(Decision::Cancelled),
        PermissionFallback::Cancel => Decision::Cancelled,
    }
}

fn select(options: &[Value], kinds: [&str; 2], allowed: bool) -> Option<Decision> {
    let find = |kind: &str| {
        options.iter().find_map(|o| {
            let k = o.get("kind").and_then(Value::as_str)?;
            let id = o.get("optionId").and_then(Value::as_str)?;
            (k == kind).then(|| id.to_owned())
        })
    };
    kinds
        .iter()
        .find_map(|k| find(k))
        .map(|option_id| Decision::Selected { option_id, allowed })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(v: Value) -> Vec<Value> {
        v.as_array().unwrap().clone()
    }

    /// The options the Claude adapter offered (A.2).
    fn claude() -> Vec<Value> {
        opts(json!([
            {"kind":"allow_always","name":"Always Allow","optionId":"allow_always"},
            {"kind":"allow_once","name":"Allow","optionId":"allow"},
            {"kind":"reject_once","name":"Reject","optionId":"reject"}
        ]))
    }

    fn sel(id: &str, allowed: bool) -> Decision {
        Decision::Selected {
            option_id: id.into(),
            allowed,
        }
    }

    #[test]
    fn reject_policy() {
        assert_eq!(
            decide(PermissionPolicy::Reject, &claude(), false),
            sel("reject", false)
        );
        let always = opts(json!([
            {"kind":"allow_once","optionId":"a"},
            {"kind":"reject_always","optionId":"never"}
        ]));
        assert_eq!(
            decide(PermissionPolicy::Reject, &always, false),
            sel("never", false)
        );
        let allow_only = opts(json!([{"kind":"allow_once","optionId":"a"}]));
        assert_eq!(
            decide(PermissionPolicy::Reject, &allow_only, false),
            Decision::Cancelled
        );
        assert_eq!(
            decide(PermissionPolicy::Reject, &[], false),
            Decision::Cancelled
        );
    }

    #[test]
    fn allow_policy_prefers_once() {
        assert_eq!(
            decide(PermissionPolicy::Allow, &claude(), false),
            sel("allow", true)
        );
        let always_only = opts(json!([
            {"kind":"reject_once","optionId":"r"},
            {"kind":"allow_always","optionId":"aa"}
        ]));
        assert_eq!(
            decide(PermissionPolicy::Allow, &always_only, false),
            sel("aa", true)
        );
        let reject_only = opts(json!([{"kind":"reject_once","optionId":"r"}]));
        assert_eq!(
            decide(PermissionPolicy::Allow, &reject_only, false),
            sel("r", false)
        );
    }

    #[test]
    fn ask_decided_here_is_reject_and_the_fallback_never_allows() {
        assert_eq!(
            decide(PermissionPolicy::Ask, &claude(), false),
            sel("reject", false)
        );
        assert_eq!(
            fallback(PermissionFallback::Reject, &claude()),
            sel("reject", false)
        );
        assert_eq!(
            fallback(PermissionFallback::Cancel, &claude()),
            Decision::Cancelled
        );
        let allow_only = opts(json!([{"kind":"allow_once","optionId":"a"}]));
        for f in [PermissionFallback::Reject, PermissionFallback::Cancel] {
            assert_eq!(fallback(f, &allow_only), Decision::Cancelled);
        }
        assert_eq!(allow_choice(&claude()), Some(sel("allow", true)));
    }

    #[test]
    fn after_cancel_everything_is_cancelled() {
        for p in [
            PermissionPolicy::Allow,
            PermissionPolicy::Ask,
            PermissionPolicy::Reject,
        ] {
            assert_eq!(decide(p, &claude(), true), Decision::Cancelled);
        }
    }

    #[test]
    fn invalid_options_are_skipped() {
        let junk = opts(json!([
            {"kind":"allow_once"},
            {"kind":"allow_once","optionId":7},
            {"kind":"allow_sometimes","optionId":"x"},
            "allow_once",
            null,
            {"kind":"allow_once","optionId":"ok"}
        ]));
        assert_eq!(
            decide(PermissionPolicy::Allow, &junk, false),
            sel("ok", true)
        );
        assert_eq!(
            decide(PermissionPolicy::Reject, &junk, false),
            Decision::Cancelled
        );
    }

    #[test]
    fn answers_have_the_schema_shape() {
        assert_eq!(
            sel("allow", true).result(),
            json!({"outcome":{"outcome":"selected","optionId":"allow"}})
        );
        assert_eq!(
            Decision::Cancelled.result(),
            json!({"outcome":{"outcome":"cancelled"}})
        );
    }
}
