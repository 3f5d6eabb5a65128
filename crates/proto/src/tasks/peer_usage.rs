//! Usage across a relay handoff, both ways (issue 38 design §7 "Usage read back";
//! docs/delegation.md "Cost and usage"). The worker writes a task's figures into
//! `task_handoff`: claudectl's required `total_tokens`/`total_cost_usd` (0 when unknown, as
//! claudectl itself writes them) and our `usage` object `{reported, tokens?, cost?}`, which
//! claudectl ignores. The delegating hub reads a handoff with `usage.reported` exactly (a
//! reported 0 is 0) and any other (claudectl, an older agent-hub) by the totals rule, where 0
//! reads as absent: claudectl's zeros mean "unknown" as often as "nothing".
//!
//! Owns the two mappings. Refuses estimates, and anything in a peer's `usage` that is not a
//! count or a cost figure (`Tokens::read`, `read_cost`). No IO.

use super::meter::Meter;
use crate::acp::usage::read_cost;
use crate::acp::{Cost, Sourced, TurnMeter, UsageSource};
use crate::relay::message::TaskHandoff;
use crate::wire::usage::Tokens;
use serde_json::{json, Map, Value};

/// What our handoff carries of a task's figures: `(total_tokens, total_cost_usd, usage)`.
pub(super) fn to_handoff(meter: &Meter) -> (u64, f64, Value) {
    let tokens = meter.tokens();
    let cost = meter.cost();
    let mut usage = Map::new();
    usage.insert(
        "reported".to_owned(),
        Value::Bool(tokens.is_some() || cost.is_some()),
    );
    if let Some(t) = tokens {
        if let Ok(v) = serde_json::to_value(t) {
            usage.insert("tokens".to_owned(), v);
        }
    }
    if let Some((amount, currency)) = cost {
        usage.insert(
            "cost".to_owned(),
            json!({"amount": amount, "currency": currency}),
        );
    }
    (
        meter.total_tokens().unwrap_or(0),
        meter.cost_usd().unwrap_or(0.0),
        Value::Object(usage),
    )
}

/// The figures a peer's handoff gives, tagged `peer`.
pub(super) fn from_handoff(h: &TaskHandoff) -> TurnMeter {
    let source = UsageSource::Peer;
    let ours = h
        .usage
        .as_ref()
        .filter(|u| u.get("reported").and_then(Value::as_bool) == Some(true));
    if let Some(u) = ours {
        let cost = u.get("cost");
        return TurnMeter {
            tokens: u
                .get("tokens")
                .and_then(Tokens::read)
                .map(|value| Sourced { value, source }),
            cost: read_cost(
                cost.and_then(|c| c.get("amount")).and_then(Value::as_f64),
                cost.and_then(|c| c.get("currency")).and_then(Value::as_str),
            )
            .map(|value| Sourced { value, source }),
            context: None,
        };
    }
    let tokens = (h.total_tokens > 0).then_some(Tokens {
        total_tokens: Some(h.total_tokens),
        ..Tokens::default()
    });
    let cost = (h.total_cost_usd.is_finite() && h.total_cost_usd > 0.0).then(|| Cost {
        amount: h.total_cost_usd,
        currency: "USD".to_owned(),
    });
    TurnMeter {
        tokens: tokens.map(|value| Sourced { value, source }),
        cost: cost.map(|value| Sourced { value, source }),
        context: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn handoff(tokens: u64, cost: f64, usage: Option<Value>) -> TaskHandoff {
        TaskHandoff {
            task_id: "t".into(),
            state: "completed".into(),
            summary: "done".into(),
            artifacts: Vec::new(),
            git_ref: None,
            total_cost_usd: cost,
            total_tokens: tokens,
            model: None,
            usage,
            refused: false,
            verifications: Vec::new(),
        }
    }

    #[test]
    fn claudectl_zeros_stay_absent() {
        let m = from_handoff(&handoff(
            0,
            0.0,
            Some(json!({"input_tokens": 0, "output_tokens": 0})),
        ));
        assert!(m.is_empty(), "{m:?}");
        let m = from_handoff(&handoff(
            18000,
            0.42,
            Some(json!({"input_tokens": 15000, "output_tokens": 3000})),
        ));
        let t = m.tokens.unwrap();
        assert_eq!(
            (t.value.total_tokens, t.source),
            (Some(18000), UsageSource::Peer)
        );
        assert_eq!(
            t.value.input_tokens, None,
            "the totals rule: only the total"
        );
        assert_eq!(m.cost.unwrap().value.amount, 0.42);
        let m = from_handoff(&handoff(5, f64::NAN, None));
        assert_eq!(m.cost, None);
    }

    #[test]
    fn ours_is_read_exactly_zero_included() {
        let m = from_handoff(&handoff(
            0,
            0.0,
            Some(
                json!({"reported": true, "tokens": {"inputTokens": 0, "outputTokens": 12},
                "cost": {"amount": 0.0, "currency": "USD"}}),
            ),
        ));
        let t = m.tokens.unwrap().value;
        assert_eq!((t.input_tokens, t.output_tokens), (Some(0), Some(12)));
        assert_eq!(m.cost.unwrap().value.amount, 0.0, "a reported 0 is 0");
        let m = from_handoff(&handoff(
            0,
            0.0,
            Some(
                json!({"reported": true, "cost": {"amount": -1, "currency": "USD"},
                "tokens": {"inputTokens": "lots"}}),
            ),
        ));
        assert!(m.is_empty(), "hostile figures are no figures");
        let m = from_handoff(&handoff(7, 0.0, Some(json!({"reported": false}))));
        assert_eq!(m.tokens.unwrap().value.total_tokens, Some(7), "totals rule");
    }

    #[test]
    fn both_ways_agree() {
        let mut meter = Meter::default();
        meter.end_turn(&TurnMeter {
            tokens: Some(Sourced {
                value: Tokens {
                    input_tokens: Some(100),
                    output_tokens: Some(0),
                    ..Tokens::default()
                },
                source: UsageSource::Acp,
            }),
            cost: Some(Sourced {
                value: Cost {
                    amount: 0.25,
                    currency: "USD".into(),
                },
                source: UsageSource::Acp,
            }),
            context: None,
        });
        let (total, usd, usage) = to_handoff(&meter);
        assert_eq!((total, usd), (100, 0.25));
        assert_eq!(
            usage,
            json!({"reported": true, "tokens": {"inputTokens": 100, "outputTokens": 0},
                "cost": {"amount": 0.25, "currency": "USD"}})
        );
        let back = from_handoff(&handoff(total, usd, Some(usage)));
        assert_eq!(back.tokens.unwrap().value.output_tokens, Some(0));
        let (total, usd, usage) = to_handoff(&Meter::default());
        assert_eq!((total, usd, usage), (0, 0.0, json!({"reported": false})));
    }
}
