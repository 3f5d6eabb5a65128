//! What an agent reports it used, read from ACP and tagged with where it came from (issue 38
//! design §1, docs/delegation.md "Cost and usage"): the token figures of a prompt result's
//! `usage` (per turn, as the adapters compute it), Gemini's `_meta.quota.token_count` when a
//! result has no `usage`, and `usage_update`'s context window and cost (the latest of a run:
//! ACP's cost is cumulative per session, and a run's process counts from its own start).
//!
//! Owns `ContextUsage` and `Cost` (the figures themselves), `UsageSource`, `Reports` (what an
//! agent is known to report) and `TurnMeter`,
//! the pure fold of one turn's figures. Refuses to estimate: a figure no source gave is
//! absent (never 0), an empty `usage:{}` is no usage, a cost that is not a finite,
//! non-negative amount with a currency code is dropped. Sums over turns and runs, currencies
//! and budgets are the task's (`tasks::meter`), not the session's. No IO.

use crate::wire::usage::Tokens;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::fmt;

/// The agent's context window use, from `usage_update` (`used` may be null, §1.12).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ContextUsage {
    pub used: Option<u64>,
    pub size: Option<u64>,
}

/// A cost as `usage_update.cost` reports it (ACP: the session's cumulative cost).
#[derive(Debug, Clone, PartialEq)]
pub struct Cost {
    pub amount: f64,
    pub currency: String,
}

/// Where a figure came from (design §1). Shown as `source` beside every figure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum UsageSource {
    /// The prompt result's `usage` or a `usage_update`.
    #[serde(rename = "acp")]
    Acp,
    /// Gemini's `_meta.quota.token_count` on a prompt result without `usage`.
    #[serde(rename = "acp-meta")]
    AcpMeta,
    /// A headless run's output, read by its `run.outcome` parser.
    #[serde(rename = "headless")]
    Headless,
    /// A relay peer's `task_handoff`.
    #[serde(rename = "peer")]
    Peer,
}

impl UsageSource {
    pub fn as_str(self) -> &'static str {
        match self {
            UsageSource::Acp => "acp",
            UsageSource::AcpMeta => "acp-meta",
            UsageSource::Headless => "headless",
            UsageSource::Peer => "peer",
        }
    }
}

/// The longest currency code kept (ISO 4217 codes are 3 letters; a little room for others).
pub const MAX_CURRENCY_BYTES: usize = 16;

/// A cost as an agent or peer reports it, or None: the amount must be a finite number ≥ 0
/// and the currency 1–16 ASCII letters or digits (anything else is not a figure we can add
/// or show; never stored as an excerpt of hostile text).
pub fn read_cost(amount: Option<f64>, currency: Option<&str>) -> Option<Cost> {
    let amount = amount.filter(|a| a.is_finite() && *a >= 0.0)?;
    let currency = currency.filter(|c| valid_currency(c))?;
    Some(Cost {
        amount,
        currency: currency.to_owned(),
    })
}

pub fn valid_currency(c: &str) -> bool {
    (1..=MAX_CURRENCY_BYTES).contains(&c.len()) && c.bytes().all(|b| b.is_ascii_alphanumeric())
}

/// One figure and the source that gave it.
#[derive(Debug, Clone, PartialEq)]
pub struct Sourced<T> {
    pub value: T,
    pub source: UsageSource,
}

/// The figures of one turn of one run, folded as they arrive (design §1): the turn's tokens
/// (its prompt result's `usage`, else Gemini's `_meta.quota`), the run's latest cost (an
/// ACP `usage_update.cost` is the session's total so far) and the latest context window.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TurnMeter {
    pub tokens: Option<Sourced<Tokens>>,
    pub cost: Option<Sourced<Cost>>,
    pub context: Option<ContextUsage>,
}

/// What one `usage_update` changed, for the caller's log of a dropped cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpdateFold {
    Folded,
    /// The update had a `cost` that is not a figure (`read_cost`); the rest was folded.
    CostDropped,
}

impl TurnMeter {
    /// A `usage_update` (ACP 1.x, stable): `used`/`size` as unsigned integers (Claude 0.23
    /// sends `used: null`, kept as unknown), `cost` when it is a figure. Each update replaces
    /// the last: the cost is the session's so far, never summed here.
    pub fn on_usage_update(&mut self, obj: &Map<String, Value>) -> UpdateFold {
        let n = |k: &str| obj.get(k).and_then(Value::as_u64);
        let context = ContextUsage {
            used: n("used"),
            size: n("size"),
        };
        if context != ContextUsage::default() {
            self.context = Some(context);
        }
        let Some(cost) = obj.get("cost").filter(|c| !c.is_null()) else {
            return UpdateFold::Folded;
        };
        let amount = cost.get("amount").and_then(Value::as_f64);
        let currency = cost.get("currency").and_then(Value::as_str);
        match read_cost(amount, currency) {
            Some(value) => {
                self.cost = Some(Sourced {
                    value,
                    source: UsageSource::Acp,
                });
                UpdateFold::Folded
            }
            None => UpdateFold::CostDropped,
        }
    }

    /// A `session/prompt` result: its `usage` (unstable in ACP, read when present), else
    /// `_meta.quota.token_count {input_tokens, output_tokens}` (Gemini 0.61, its only
    /// figures). Neither, or only empty ones: the turn's tokens stay absent.
    pub fn on_prompt_result(&mut self, result: &Value) {
        if let Some(t) = result.get("usage").and_then(Tokens::read) {
            self.tokens = Some(Sourced {
                value: t,
                source: UsageSource::Acp,
            });
            return;
        }
        if result.get("usage").is_some_and(Value::is_object) {
            // An empty `usage:{}` is the agent saying nothing, not "see _meta".
            return;
        }
        let count = result
            .get("_meta")
            .and_then(|m| m.get("quota"))
            .and_then(|q| q.get("token_count"));
        let Some(count) = count else {
            return;
        };
        let n = |k: &str| count.get(k).and_then(Value::as_u64);
        let t = Tokens {
            input_tokens: n("input_tokens"),
            output_tokens: n("output_tokens"),
            ..Tokens::default()
        };
        if let Some(t) = t.some() {
            self.tokens = Some(Sourced {
                value: t,
                source: UsageSource::AcpMeta,
            });
        }
    }

    /// The figures of a headless run (its parser's), all tagged `headless`.
    pub fn headless(tokens: Option<Tokens>, cost: Option<Cost>) -> TurnMeter {
        let source = UsageSource::Headless;
        TurnMeter {
            tokens: tokens
                .and_then(Tokens::some)
                .map(|value| Sourced { value, source }),
            cost: cost
                .and_then(|c| read_cost(Some(c.amount), Some(&c.currency)))
                .map(|value| Sourced { value, source }),
            context: None,
        }
    }

    /// True when no figure came.
    pub fn is_empty(&self) -> bool {
        *self == TurnMeter::default()
    }
}

/// What an agent is known to report (manifest `[run] reports`, design §1): the verb checks a
/// budget against it; `agent-hub agents` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Reports {
    pub tokens: bool,
    pub cost: bool,
    pub context: bool,
}

impl Reports {
    pub const NONE: Reports = Reports {
        tokens: false,
        cost: false,
        context: false,
    };
    pub const ALL: Reports = Reports {
        tokens: true,
        cost: true,
        context: true,
    };

    /// The manifest's words, in order `tokens`, `cost`, `context`.
    pub const WORDS: [&'static str; 3] = ["tokens", "cost", "context"];

    /// From the manifest's list; an unknown word is the caller's error (`Err(word)`).
    pub fn from_words<'a>(words: impl IntoIterator<Item = &'a str>) -> Result<Reports, String> {
        let mut r = Reports::NONE;
        for w in words {
            match w {
                "tokens" => r.tokens = true,
                "cost" => r.cost = true,
                "context" => r.context = true,
                other => return Err(other.to_owned()),
            }
        }
        Ok(r)
    }

    pub fn is_none(&self) -> bool {
        *self == Reports::NONE
    }
}

/// `tokens,cost` as `agent-hub agents` shows it; `-` for nothing.
impl fmt::Display for Reports {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let words: Vec<&str> = Reports::WORDS
            .iter()
            .zip([self.tokens, self.cost, self.context])
            .filter(|(_, on)| *on)
            .map(|(w, _)| *w)
            .collect();
        if words.is_empty() {
            f.write_str("-")
        } else {
            f.write_str(&words.join(","))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn update(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap()
    }

    #[test]
    fn claude_023_used_null_with_a_cost_keeps_the_size_and_the_cost() {
        let mut m = TurnMeter::default();
        let r = m.on_usage_update(&update(json!({"sessionUpdate":"usage_update","used":null,
            "size":200000,"cost":{"amount":0.0123,"currency":"USD"}})));
        assert_eq!(r, UpdateFold::Folded);
        assert_eq!(
            m.context,
            Some(ContextUsage {
                used: None,
                size: Some(200000)
            })
        );
        let c = m.cost.unwrap();
        assert_eq!((c.value.amount, c.value.currency.as_str()), (0.0123, "USD"));
        assert_eq!(c.source, UsageSource::Acp);
        assert_eq!(m.tokens, None, "a usage_update gives no token counts");
    }

    #[test]
    fn claude_0101_cost_rises_within_a_turn_and_the_latest_wins() {
        let mut m = TurnMeter::default();
        m.on_usage_update(&update(json!({"used":1200,"size":200000})));
        assert_eq!(m.cost, None, "no cost before the first result");
        for a in [0.00042, 0.00056] {
            m.on_usage_update(&update(
                json!({"used":1500,"size":200000,"cost":{"amount":a,"currency":"USD"}}),
            ));
        }
        assert_eq!(
            m.cost.unwrap().value.amount,
            0.00056,
            "cumulative: never summed"
        );
        assert_eq!(m.context.unwrap().used, Some(1500));
    }

    #[test]
    fn hostile_costs_are_dropped_not_kept() {
        for cost in [
            json!({"amount":-1.0,"currency":"USD"}),
            json!({"amount":"1","currency":"USD"}),
            json!({"amount":1.0}),
            json!({"amount":1.0,"currency":""}),
            json!({"amount":1.0,"currency":"US D"}),
            json!({"amount":1.0,"currency":"X".repeat(17)}),
        ] {
            let mut m = TurnMeter::default();
            let r = m.on_usage_update(&update(json!({"size":10,"cost":cost})));
            assert_eq!(r, UpdateFold::CostDropped, "{cost}");
            assert_eq!(m.cost, None);
            assert_eq!(m.context.unwrap().size, Some(10), "the rest is folded");
        }
        let mut m = TurnMeter::default();
        assert_eq!(
            m.on_usage_update(&update(json!({"used":"many","size":-3,"cost":null}))),
            UpdateFold::Folded
        );
        assert_eq!(m, TurnMeter::default(), "nothing readable: nothing kept");
    }

    #[test]
    fn prompt_usage_is_read_per_turn_and_an_empty_one_is_absent() {
        let mut m = TurnMeter::default();
        m.on_prompt_result(&json!({"stopReason":"end_turn","usage":{"inputTokens":10,
            "outputTokens":5,"totalTokens":15,"cachedReadTokens":3}}));
        let t = m.tokens.clone().unwrap();
        assert_eq!(t.source, UsageSource::Acp);
        assert_eq!(t.value.total(), Some(15));
        assert_eq!(t.value.cached_read_tokens, Some(3));
        assert_eq!(t.value.thought_tokens, None, "unreported stays absent");

        let mut m = TurnMeter::default();
        m.on_prompt_result(&json!({"stopReason":"end_turn","usage":{}}));
        assert_eq!(m.tokens, None, "usage:{{}} is no usage");
        m.on_prompt_result(&json!({"stopReason":"end_turn","usage":{"inputTokens":-1}}));
        assert_eq!(m.tokens, None);
    }

    #[test]
    fn gemini_meta_quota_is_read_only_without_usage() {
        let meta = json!({"quota":{"token_count":{"input_tokens":900,"output_tokens":40},
            "model_usage":[]}});
        let mut m = TurnMeter::default();
        m.on_prompt_result(&json!({"stopReason":"end_turn","_meta":meta}));
        let t = m.tokens.clone().unwrap();
        assert_eq!(t.source, UsageSource::AcpMeta);
        assert_eq!(
            (t.value.input_tokens, t.value.output_tokens),
            (Some(900), Some(40))
        );
        assert_eq!(t.value.total(), Some(940), "input plus output when both");

        let mut m = TurnMeter::default();
        m.on_prompt_result(&json!({"stopReason":"end_turn","usage":{"totalTokens":7},
            "_meta":meta}));
        assert_eq!(m.tokens.unwrap().source, UsageSource::Acp, "usage wins");

        let mut m = TurnMeter::default();
        m.on_prompt_result(&json!({"stopReason":"end_turn","usage":{},"_meta":meta}));
        assert_eq!(m.tokens, None, "an empty usage is not a reason to guess");
    }

    #[test]
    fn a_total_needs_a_total_or_both_halves() {
        let only_in = Tokens {
            input_tokens: Some(5),
            ..Tokens::default()
        };
        assert_eq!(only_in.total(), None, "unknown, never 5 + 0");
        assert_eq!(Tokens::default().some(), None);
    }

    #[test]
    fn headless_figures_are_tagged_and_cleaned() {
        let m = TurnMeter::headless(
            Some(Tokens {
                output_tokens: Some(2),
                ..Tokens::default()
            }),
            Some(Cost {
                amount: f64::NAN,
                currency: "USD".into(),
            }),
        );
        assert_eq!(m.tokens.unwrap().source, UsageSource::Headless);
        assert_eq!(m.cost, None, "a NaN is not a figure");
        assert!(TurnMeter::headless(Some(Tokens::default()), None).is_empty());
    }

    #[test]
    fn reports_read_and_show() {
        let r = Reports::from_words(["cost", "tokens"]).unwrap();
        assert_eq!(r.to_string(), "tokens,cost");
        assert_eq!(Reports::NONE.to_string(), "-");
        assert_eq!(Reports::from_words(["money"]), Err("money".into()));
    }
}
