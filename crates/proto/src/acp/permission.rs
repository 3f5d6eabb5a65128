//! Answering `session/request_permission` by policy (docs/acp.md
//! "Permission requests"). Pure: the options in, the answer's `outcome` object out.
//!
//! Rules: `Reject` picks `reject_once`, else `reject_always`, else answers `cancelled`;
//! `Allow` picks `allow_once`, else `allow_always`, else falls back to `Reject`'s choice. The
//! `_once` kinds come first because they leave no standing rule behind in the agent. After a
//! cancel every request is answered `cancelled` (§1.7's rule). Options with unknown kinds or
//! without a string `optionId` are skipped, as the schema asks for invalid items.

use super::config::PermissionPolicy;
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
/// array). `cancelled` is true once a cancel was requested.
pub fn decide(policy: PermissionPolicy, options: &[Value], cancelled: bool) -> Decision {
    if cancelled {
        return Decision::Cancelled;
    }
    let find = |kind: &str| {
        options.iter().find_map(|o| {
            let k = o.get("kind").and_then(Value::as_str)?;
            let id = o.get("optionId").and_then(Value::as_str)?;
            (k == kind).then(|| id.to_owned())
        })
    };
    let select = |kinds: [&str; 2], allowed: bool| {
        kinds
            .iter()
            .find_map(|k| find(k))
            .map(|option_id| Decision::Selected { option_id, allowed })
    };
    let reject = || select(["reject_once", "reject_always"], false);
    let chosen = match policy {
        PermissionPolicy::Reject => reject(),
        PermissionPolicy::Allow => select(["allow_once", "allow_always"], true).or_else(reject),
    };
    chosen.unwrap_or(Decision::Cancelled)
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
    fn after_cancel_everything_is_cancelled() {
        for p in [PermissionPolicy::Allow, PermissionPolicy::Reject] {
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
