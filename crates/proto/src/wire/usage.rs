//! The usage figures a task's envelopes and records carry (issue 38 design §1, §5;
//! docs/delegation.md "Cost and usage"), one shape for the hub that writes them and the client
//! that reads them: `usage` (token counts with their `source`), `cost`, `context` and
//! `budget`. Keys present only when known: a figure nobody reported is absent, never 0.
//!
//! Owns the shapes and `Amount`, a money figure JSON can carry. Refuses folding (the task's
//! `tasks::meter`), reading an agent's words (`acp::usage`) and IO. Read tolerantly: no
//! `deny_unknown_fields`, so a later hub's key does not break this client (SPEC §12.4).

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// An amount of money, or a budget of one, as JSON carries it. JSON has no NaN or infinity,
/// and the hub makes none (`acp::usage::read_cost` keeps finite amounts only), so equality is
/// total and `Eq` holds.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Default, Deserialize, Serialize)]
#[serde(transparent)]
pub struct Amount(pub f64);

impl Eq for Amount {}

/// Token counts as an agent reports them, each key only when it reported it (the ACP
/// adapters' camelCase keys, which the bodies use too).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Tokens {
    #[serde(
        rename = "inputTokens",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub input_tokens: Option<u64>,
    #[serde(
        rename = "outputTokens",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub output_tokens: Option<u64>,
    #[serde(
        rename = "totalTokens",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub total_tokens: Option<u64>,
    #[serde(
        rename = "cachedReadTokens",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub cached_read_tokens: Option<u64>,
    #[serde(
        rename = "cachedWriteTokens",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub cached_write_tokens: Option<u64>,
    #[serde(
        rename = "thoughtTokens",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub thought_tokens: Option<u64>,
}

impl Tokens {
    /// An object of the keys above (ACP's `usage`, a peer's handoff); None when it is not an
    /// object or names no count: `usage:{}` is no usage, not six zeros.
    pub fn read(u: &Value) -> Option<Tokens> {
        let n = |k: &str| u.get(k).and_then(Value::as_u64);
        Tokens {
            input_tokens: n("inputTokens"),
            output_tokens: n("outputTokens"),
            total_tokens: n("totalTokens"),
            cached_read_tokens: n("cachedReadTokens"),
            cached_write_tokens: n("cachedWriteTokens"),
            thought_tokens: n("thoughtTokens"),
        }
        .some()
    }

    /// Self when any key was reported, else None (design §1: all-None is absent).
    pub fn some(self) -> Option<Tokens> {
        (self != Tokens::default()).then_some(self)
    }

    /// The total a budget counts (design §1): `totalTokens`, else input plus output when
    /// both were reported, else unknown (never input + 0).
    pub fn total(&self) -> Option<u64> {
        self.total_tokens.or_else(|| {
            self.input_tokens
                .zip(self.output_tokens)
                .map(|(i, o)| i.saturating_add(o))
        })
    }

    /// The six keys, in their documented order.
    pub fn keys(&self) -> [Option<u64>; 6] {
        [
            self.input_tokens,
            self.output_tokens,
            self.total_tokens,
            self.cached_read_tokens,
            self.cached_write_tokens,
            self.thought_tokens,
        ]
    }

    /// Built from the six keys in the order of `keys`.
    pub fn from_keys(k: [Option<u64>; 6]) -> Tokens {
        Tokens {
            input_tokens: k[0],
            output_tokens: k[1],
            total_tokens: k[2],
            cached_read_tokens: k[3],
            cached_write_tokens: k[4],
            thought_tokens: k[5],
        }
    }
}

fn is_false(b: &bool) -> bool {
    !*b
}

fn is_true(b: &bool) -> bool {
    *b
}

fn yes() -> bool {
    true
}

/// `"usage":{"inputTokens",…,"source":"acp","partial"?:true}`: a task's (or a turn's) token
/// counts. `partial`: some turns or runs did not report a key that others did, or a figure
/// was lost (design §1), so a sum is a lower bound.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct UsageFigures {
    #[serde(flatten)]
    pub tokens: Tokens,
    pub source: String,
    #[serde(default, skip_serializing_if = "is_false")]
    pub partial: bool,
}

/// `"cost":{"amount","currency","source","partial"?:true}`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct CostFigures {
    pub amount: Amount,
    pub currency: String,
    pub source: String,
    #[serde(default, skip_serializing_if = "is_false")]
    pub partial: bool,
}

/// `"context":{"used"?,"size"?}`: the agent's context window as it last said.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ContextFigures {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub used: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
}

/// `"budget":{"maxCostUsd"?,"maxTokens"?,"passed"?:"cost"|"tokens","kept"?:false}`: what
/// the delegator asked (`delegate` `maxCostUsd`/`maxTokens`), whether a figure passed it,
/// and `kept: false` when the agent does not report what a limit needs and the delegator
/// ran it anyway (`allowUnmetered`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct BudgetFigures {
    #[serde(
        rename = "maxCostUsd",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub max_cost_usd: Option<Amount>,
    #[serde(rename = "maxTokens", default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub passed: Option<String>,
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub kept: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn figures_show_only_what_was_reported() {
        let u = UsageFigures {
            tokens: Tokens {
                input_tokens: Some(10),
                output_tokens: Some(0),
                ..Tokens::default()
            },
            source: "acp".into(),
            partial: false,
        };
        assert_eq!(
            serde_json::to_string(&u).unwrap(),
            r#"{"inputTokens":10,"outputTokens":0,"source":"acp"}"#,
            "a reported 0 is shown; an unreported key is not"
        );
        let back: UsageFigures =
            serde_json::from_value(json!({"totalTokens":5,"source":"peer","partial":true,
                "laterKey":1}))
            .unwrap();
        assert_eq!((back.tokens.total_tokens, back.partial), (Some(5), true));
        let b = BudgetFigures {
            max_cost_usd: Some(Amount(0.5)),
            passed: Some("cost".into()),
            kept: true,
            ..BudgetFigures::default()
        };
        assert_eq!(
            serde_json::to_string(&b).unwrap(),
            r#"{"maxCostUsd":0.5,"passed":"cost"}"#
        );
        let b: BudgetFigures = serde_json::from_str(r#"{"maxTokens":9,"kept":false}"#).unwrap();
        assert!(!b.kept);
    }

    #[test]
    fn tokens_read_absent_when_empty() {
        assert_eq!(Tokens::read(&json!({})), None);
        assert_eq!(Tokens::read(&json!("x")), None);
        assert_eq!(
            Tokens::read(&json!({"outputTokens":3})).unwrap().total(),
            None
        );
    }
}
