//! A task's usage and cost, counted honestly (issue 38 design §1; docs/delegation.md "Cost
//! and usage"): `Meter`, the per-task sub-machine the book holds for every task, and
//! `Budget`, the limits a delegator set (`delegate` `maxCostUsd`, `maxTokens`,
//! `allowUnmetered`) checked at the verb against what the agent reports and at run time on
//! every figure that arrives.
//!
//! The rules: tokens are summed over turns, each key only over the turns that reported it (a
//! key some turns lacked makes the sum `partial`); the cost of a run is the latest amount that
//! run reported (ACP's `usage_update.cost` is the session's total so far) and a task's cost
//! the sum over its runs (`CostAcrossRuns::Restarts`) or their maximum (`Continues`, for an
//! agent whose resumed session keeps counting); one currency, the first seen (another one is
//! dropped and makes the cost `partial`); the context window is the latest. Refuses to
//! estimate: with no figure, a figure is absent, never 0. Pure: no clock, no IO.

use super::check::DelegateRefusal;
use crate::acp::{ContextUsage, Cost, Reports, Sourced, TurnMeter, UsageSource};
use crate::wire::usage::{
    Amount, BudgetFigures, ContextFigures, CostFigures, Tokens, UsageFigures,
};
use crate::wire::DelegateRequest;
use serde::{Deserialize, Serialize};
use std::fmt;

/// `maxCostUsd` at most (design §6); it must be over 0.
pub const MAX_COST_USD: f64 = 1_000_000.0;
/// `maxTokens` at most; it must be at least 1.
pub const MAX_TOKENS: u64 = 1_000_000_000_000;

/// How one agent's cost runs on across its runs (a hub restart's resumed session is a new run,
/// design §1, §3): its manifest's `cost_across_runs`; today every agent `Restarts` (the e2e
/// capture pins whether Claude's resumed session does).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CostAcrossRuns {
    /// A new process counts from 0: the task's cost is the sum of each run's last amount.
    #[default]
    Restarts,
    /// A resumed session keeps its count: the task's cost is the largest run's last amount.
    Continues,
}

/// The task's figures so far. Serialised as the store's `meter` column (schema 6).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Meter {
    /// Turns whose figures were folded (`end_turn`).
    #[serde(default)]
    turns: u32,
    /// Per token key (`Tokens::keys` order): the sum over the turns that reported it.
    #[serde(default)]
    sums: [Option<u64>; 6],
    /// Per token key: how many turns reported it.
    #[serde(default)]
    reported: [u32; 6],
    #[serde(default)]
    token_source: Option<UsageSource>,
    /// Runs that ended: their amounts combined (`CostAcrossRuns`).
    #[serde(default)]
    closed_cost: Option<f64>,
    /// The run going on: its latest amount.
    #[serde(default)]
    run_cost: Option<f64>,
    #[serde(default)]
    currency: Option<String>,
    #[serde(default)]
    cost_source: Option<UsageSource>,
    /// A cost in another currency was dropped, or a run's figures were lost.
    #[serde(default)]
    cost_partial: bool,
    /// A run's token figures were lost (a restart cut it before its turn ended).
    #[serde(default)]
    tokens_lost: bool,
    #[serde(default)]
    context: Option<ContextFigures>,
}

/// A cost the meter did not take, for the service log: the agent changed currency.
#[derive(Debug, Clone, PartialEq)]
pub struct CurrencyDropped {
    pub kept: String,
    pub dropped: String,
}

impl fmt::Display for CurrencyDropped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "a cost in {} was dropped: the task counts in {} (its cost is marked partial)",
            self.dropped, self.kept
        )
    }
}

impl Meter {
    /// The run's figures so far, mid-turn (a `usage_update` in a progress snapshot): its
    /// latest cost and the context window.
    pub fn on_run_figures(
        &mut self,
        cost: Option<&Sourced<Cost>>,
        context: Option<ContextUsage>,
    ) -> Option<CurrencyDropped> {
        if let Some(c) = context {
            self.context = Some(ContextFigures {
                used: c.used,
                size: c.size,
            });
        }
        let c = cost?;
        match &self.currency {
            Some(kept) if *kept != c.value.currency => {
                self.cost_partial = true;
                return Some(CurrencyDropped {
                    kept: kept.clone(),
                    dropped: c.value.currency.clone(),
                });
            }
            Some(_) => {}
            None => self.currency = Some(c.value.currency.clone()),
        }
        self.run_cost = Some(c.value.amount);
        self.cost_source = Some(c.source);
        None
    }

    /// A turn ended with these figures: its tokens are added, its cost is the run's latest.
    pub fn end_turn(&mut self, m: &TurnMeter) -> Option<CurrencyDropped> {
        self.turns = self.turns.saturating_add(1);
        if let Some(t) = &m.tokens {
            for (i, v) in t.value.keys().into_iter().enumerate() {
                if let Some(v) = v {
                    self.sums[i] = Some(self.sums[i].unwrap_or(0).saturating_add(v));
                    self.reported[i] = self.reported[i].saturating_add(1);
                }
            }
            self.token_source = Some(t.source);
        }
        self.on_run_figures(m.cost.as_ref(), m.context)
    }

    /// The run's process is gone; a next run (a resumed session) counts by `across`.
    pub fn end_run(&mut self, across: CostAcrossRuns) {
        let Some(run) = self.run_cost.take() else {
            return;
        };
        self.closed_cost = Some(match (self.closed_cost, across) {
            (None, _) => run,
            (Some(c), CostAcrossRuns::Restarts) => c + run,
            (Some(c), CostAcrossRuns::Continues) => c.max(run),
        });
    }

    /// A run was cut before its turn reported (a hub restart): what it used is unknown, so
    /// the sums are lower bounds from now on (design §8).
    pub fn lose_run(&mut self) {
        if self.token_source.is_some() {
            self.tokens_lost = true;
        }
        if self.cost_source.is_some() {
            self.cost_partial = true;
        }
    }

    /// The summed counts, or None when no turn reported any.
    pub fn tokens(&self) -> Option<Tokens> {
        Tokens::from_keys(self.sums).some()
    }

    /// The total a budget counts (design §1), or unknown.
    pub fn total_tokens(&self) -> Option<u64> {
        self.tokens().and_then(|t| t.total())
    }

    /// The task's cost so far and its currency.
    pub fn cost(&self) -> Option<(f64, &str)> {
        let amount = match (self.closed_cost, self.run_cost) {
            (None, None) => return None,
            (Some(c), None) | (None, Some(c)) => c,
            (Some(c), Some(r)) => c + r,
        };
        Some((amount, self.currency.as_deref()?))
    }

    /// The cost when it is in US dollars (what `maxCostUsd` and a relay handoff count).
    pub fn cost_usd(&self) -> Option<f64> {
        self.cost()
            .filter(|(_, cur)| cur.eq_ignore_ascii_case("USD"))
            .map(|(a, _)| a)
    }

    /// No figure at all: the task is unmetered (`top` counts it as such, never as 0).
    pub fn is_unmetered(&self) -> bool {
        self.tokens().is_none() && self.cost().is_none()
    }

    fn tokens_partial(&self) -> bool {
        self.tokens_lost
            || self
                .reported
                .iter()
                .any(|&n| n > 0 && n < self.turns_with_tokens())
    }

    /// Turns that reported any token key (a turn without a report counts against every key
    /// once the agent reports at all, design §1).
    fn turns_with_tokens(&self) -> u32 {
        if self.token_source.is_some() {
            self.turns
        } else {
            0
        }
    }

    /// The body's and the record's `usage`.
    pub fn usage(&self) -> Option<UsageFigures> {
        Some(UsageFigures {
            tokens: self.tokens()?,
            source: self.token_source?.as_str().to_owned(),
            partial: self.tokens_partial(),
        })
    }

    /// The body's and the record's `cost`.
    pub fn cost_figures(&self) -> Option<CostFigures> {
        let (amount, currency) = self.cost()?;
        Some(CostFigures {
            amount: Amount(amount),
            currency: currency.to_owned(),
            source: self.cost_source?.as_str().to_owned(),
            partial: self.cost_partial,
        })
    }

    /// The body's and the record's `context`.
    pub fn context(&self) -> Option<ContextFigures> {
        self.context
    }

    /// The store's `meter` column: None while there is nothing to keep.
    pub fn to_column(&self) -> Option<String> {
        (*self != Meter::default()).then(|| crate::wire::to_json(self))
    }

    /// The store's column read back; a value this build cannot read is an error the loader
    /// logs (the task then shows no figures rather than wrong ones).
    pub fn from_column(text: &str) -> Result<Meter, String> {
        serde_json::from_str(text).map_err(|e| format!("meter column unreadable: {e}"))
    }
}

/// Which limit a figure passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Limit {
    Cost,
    Tokens,
}

impl Limit {
    pub fn as_str(self) -> &'static str {
        match self {
            Limit::Cost => "cost",
            Limit::Tokens => "tokens",
        }
    }
}

/// A figure past its limit: the reason of the task's outcome and the audit record's fields.
#[derive(Debug, Clone, PartialEq)]
pub struct Passed {
    pub what: Limit,
    pub limit: String,
    pub value: String,
}

impl fmt::Display for Passed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.what {
            Limit::Cost => write!(
                f,
                "over budget: cost {} USD passed maxCostUsd {}",
                self.value, self.limit
            ),
            Limit::Tokens => write!(
                f,
                "over budget: {} tokens passed maxTokens {}",
                self.value, self.limit
            ),
        }
    }
}

/// A task's budget: what the delegator asked, which limits can be kept (the agent reports
/// what they need), and which one a figure passed. Serialised as the store's `budget`
/// column: `{maxCostUsd?, maxTokens?, allowUnmetered, keepSecs?, kept?, passed?}` (design §8,
/// with `kept` and `passed` so a restart still shows them).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Budget {
    #[serde(
        rename = "maxCostUsd",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub max_cost_usd: Option<f64>,
    #[serde(rename = "maxTokens", default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
    #[serde(rename = "allowUnmetered", default)]
    pub allow_unmetered: bool,
    /// Issue 38 §2 (follow-ups): how long the session may be kept; carried, not used here.
    #[serde(rename = "keepSecs", default, skip_serializing_if = "Option::is_none")]
    pub keep_secs: Option<u64>,
    /// False when a limit asked cannot be checked (the agent does not report its figure, or
    /// the task runs on a peer that reports only at the end) and `allowUnmetered` ran it.
    #[serde(default = "yes")]
    pub kept: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub passed: Option<Limit>,
}

fn yes() -> bool {
    true
}

impl Budget {
    /// `delegate`'s budget keys checked (design §1, §7): bounds, then what the agent
    /// reports (`reports`; None: the task goes to a relay peer, which reports only when the
    /// task ends). None when the delegation set no limit and `allowUnmetered` is unset.
    pub fn check(
        req: &DelegateRequest,
        reports: Option<Reports>,
    ) -> Result<Option<Budget>, DelegateRefusal> {
        let max_cost_usd = req.max_cost_usd.map(|a| a.0);
        if let Some(c) = max_cost_usd {
            if !(c.is_finite() && c > 0.0 && c <= MAX_COST_USD) {
                return Err(DelegateRefusal::MaxCostOutOfRange);
            }
        }
        if let Some(t) = req.max_tokens {
            if !(1..=MAX_TOKENS).contains(&t) {
                return Err(DelegateRefusal::MaxTokensOutOfRange);
            }
        }
        let allow_unmetered = req.allow_unmetered.unwrap_or(false);
        if max_cost_usd.is_none() && req.max_tokens.is_none() {
            return Ok(allow_unmetered.then(|| Budget {
                allow_unmetered,
                ..Budget::default()
            }));
        }
        let kept = match (&req.peer, reports) {
            (Some(peer), _) if !allow_unmetered => {
                return Err(DelegateRefusal::PeerCannotKeepBudget { peer: peer.clone() })
            }
            (Some(_), _) => false,
            (None, r) => {
                let r = r.unwrap_or(Reports::NONE);
                let missing = match (
                    max_cost_usd.is_some() && !r.cost,
                    req.max_tokens.is_some() && !r.tokens,
                ) {
                    (true, _) => Some(Limit::Cost),
                    (false, true) => Some(Limit::Tokens),
                    (false, false) => None,
                };
                match missing {
                    Some(what) if !allow_unmetered => {
                        return Err(DelegateRefusal::Unmetered {
                            agent: req.agent.clone(),
                            what: what.as_str(),
                            reports: r.to_string(),
                        })
                    }
                    Some(_) => false,
                    None => true,
                }
            }
        };
        Ok(Some(Budget {
            max_cost_usd,
            max_tokens: req.max_tokens,
            allow_unmetered,
            keep_secs: None,
            kept,
            passed: None,
        }))
    }

    /// The first limit the meter's figures pass now (a figure over its limit), once: a
    /// budget already passed says nothing more. A cost in another currency than USD passes
    /// nothing (it cannot be compared; the task's record shows it).
    pub fn check_figures(&mut self, meter: &Meter) -> Option<Passed> {
        if self.passed.is_some() {
            return None;
        }
        let cost = self
            .max_cost_usd
            .zip(meter.cost_usd())
            .filter(|(limit, value)| value > limit)
            .map(|(limit, value)| Passed {
                what: Limit::Cost,
                limit: limit.to_string(),
                value: value.to_string(),
            });
        let passed = cost.or_else(|| {
            self.max_tokens
                .zip(meter.total_tokens())
                .filter(|(limit, value)| value > limit)
                .map(|(limit, value)| Passed {
                    what: Limit::Tokens,
                    limit: limit.to_string(),
                    value: value.to_string(),
                })
        })?;
        self.passed = Some(passed.what);
        Some(passed)
    }

    /// The body's and the record's `budget`; None when the delegation set no limit.
    pub fn figures(&self) -> Option<BudgetFigures> {
        if self.max_cost_usd.is_none() && self.max_tokens.is_none() {
            return None;
        }
        Some(BudgetFigures {
            max_cost_usd: self.max_cost_usd.map(Amount),
            max_tokens: self.max_tokens,
            passed: self.passed.map(|p| p.as_str().to_owned()),
            kept: self.kept,
        })
    }

    /// The store's `budget` column.
    pub fn to_column(&self) -> String {
        crate::wire::to_json(self)
    }

    pub fn from_column(text: &str) -> Result<Budget, String> {
        serde_json::from_str(text).map_err(|e| format!("budget column unreadable: {e}"))
    }
}

/// A task's meter and budget together, as the book holds them (one field of its task): every
/// figure that arrives is folded, then checked against the budget.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Metered {
    pub meter: Meter,
    pub budget: Option<Budget>,
}

/// What one fold found: a limit passed (the book cancels, audits, tells), a cost dropped (the
/// book logs it).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Folded {
    pub passed: Option<Passed>,
    pub dropped: Option<CurrencyDropped>,
}

impl Metered {
    pub fn new(budget: Option<Budget>) -> Metered {
        Metered {
            meter: Meter::default(),
            budget,
        }
    }

    /// A progress snapshot of an ACP run: its latest `usage_update` (cost, context).
    pub fn on_progress(&mut self, p: &crate::acp::Progress) -> Folded {
        let cost = p.cost.as_ref().map(|c| Sourced {
            value: c.clone(),
            source: UsageSource::Acp,
        });
        let dropped = self.meter.on_run_figures(cost.as_ref(), p.context);
        self.checked(dropped)
    }

    /// A turn's (or a headless run's, or a peer's handoff's) figures at its end.
    pub fn end_turn(&mut self, m: &TurnMeter) -> Folded {
        let dropped = self.meter.end_turn(m);
        self.checked(dropped)
    }

    fn checked(&mut self, dropped: Option<CurrencyDropped>) -> Folded {
        let passed = match &mut self.budget {
            Some(b) => b.check_figures(&self.meter),
            None => None,
        };
        Folded { passed, dropped }
    }

    /// The budget's figures for a body or record.
    pub fn budget_figures(&self) -> Option<BudgetFigures> {
        self.budget.as_ref().and_then(Budget::figures)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens(keys: [Option<u64>; 6], source: UsageSource) -> TurnMeter {
        TurnMeter {
            tokens: Tokens::from_keys(keys)
                .some()
                .map(|value| Sourced { value, source }),
            ..TurnMeter::default()
        }
    }

    fn usd(amount: f64) -> Sourced<Cost> {
        cost(amount, "USD")
    }

    fn cost(amount: f64, currency: &str) -> Sourced<Cost> {
        Sourced {
            value: Cost {
                amount,
                currency: currency.into(),
            },
            source: UsageSource::Acp,
        }
    }

    #[test]
    fn no_figure_is_absent_never_zero() {
        let mut m = Meter::default();
        m.end_turn(&TurnMeter::default());
        assert!(m.is_unmetered());
        assert_eq!(
            (m.usage(), m.cost_figures(), m.context()),
            (None, None, None)
        );
        assert_eq!(m.total_tokens(), None);
        assert_eq!(m.to_column(), Some(r#"{"turns":1,"sums":[null,null,null,null,null,null],"reported":[0,0,0,0,0,0],"token_source":null,"closed_cost":null,"run_cost":null,"currency":null,"cost_source":null,"cost_partial":false,"tokens_lost":false,"context":null}"#.to_owned()));
        assert_eq!(Meter::default().to_column(), None);
    }

    #[test]
    fn tokens_sum_over_turns_and_a_key_some_turns_lacked_is_partial() {
        let mut m = Meter::default();
        m.end_turn(&tokens(
            [Some(10), Some(5), Some(15), None, None, None],
            UsageSource::Acp,
        ));
        let u = m.usage().unwrap();
        assert_eq!((u.tokens.total_tokens, u.partial), (Some(15), false));
        m.end_turn(&tokens(
            [Some(20), Some(4), Some(24), Some(7), None, None],
            UsageSource::Acp,
        ));
        let u = m.usage().unwrap();
        assert_eq!(u.tokens.input_tokens, Some(30));
        assert_eq!(u.tokens.cached_read_tokens, Some(7));
        assert!(u.partial, "cachedReadTokens came in one turn of two");
        assert_eq!(u.source, "acp");
        assert_eq!(m.total_tokens(), Some(39));
    }

    #[test]
    fn the_cost_is_the_last_of_each_run_summed_over_runs() {
        let mut m = Meter::default();
        for a in [0.1, 0.25, 0.3] {
            assert_eq!(m.on_run_figures(Some(&usd(a)), None), None);
        }
        assert_eq!(
            m.cost(),
            Some((0.3, "USD")),
            "cumulative in a run: never summed"
        );
        m.end_turn(&TurnMeter {
            cost: Some(usd(0.4)),
            ..TurnMeter::default()
        });
        m.end_run(CostAcrossRuns::Restarts);
        m.on_run_figures(Some(&usd(0.05)), None);
        assert_eq!(
            m.cost_usd(),
            Some(0.45),
            "a new run counts from its own start"
        );
        let mut c = m.clone();
        c.end_run(CostAcrossRuns::Continues);
        assert_eq!(c.cost_usd(), Some(0.4), "a run that continues: the largest");
        let f = m.cost_figures().unwrap();
        assert_eq!((f.currency.as_str(), f.partial), ("USD", false));
    }

    #[test]
    fn a_second_currency_is_dropped_and_marks_the_cost_partial() {
        let mut m = Meter::default();
        m.on_run_figures(Some(&usd(0.2)), None);
        let d = m.on_run_figures(Some(&cost(9.0, "EUR")), None).unwrap();
        assert_eq!(
            d.to_string(),
            "a cost in EUR was dropped: the task counts in USD (its cost is marked partial)"
        );
        let f = m.cost_figures().unwrap();
        assert_eq!((f.amount.0, f.partial), (0.2, true));
    }

    #[test]
    fn a_cut_run_makes_the_sums_lower_bounds() {
        let mut m = Meter::default();
        m.end_turn(&tokens(
            [Some(1), Some(1), None, None, None, None],
            UsageSource::Headless,
        ));
        m.lose_run();
        assert!(m.usage().unwrap().partial);
        let back = Meter::from_column(&m.to_column().unwrap()).unwrap();
        assert_eq!(back, m, "the column round-trips");
        assert!(Meter::from_column("[1,2]").is_err());
    }

    fn req(cost: Option<f64>, tokens: Option<u64>, unmetered: bool) -> DelegateRequest {
        DelegateRequest {
            agent: "gemini".into(),
            cwd: "/w".into(),
            prompt: "p".into(),
            max_cost_usd: cost.map(Amount),
            max_tokens: tokens,
            allow_unmetered: unmetered.then_some(true),
            ..DelegateRequest::default()
        }
    }

    #[test]
    fn the_verb_refuses_a_limit_the_agent_cannot_keep_unless_allowed() {
        let tokens_only = Some(Reports {
            tokens: true,
            ..Reports::NONE
        });
        let e = Budget::check(&req(Some(0.5), None, false), tokens_only).unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid delegate: agent gemini does not report its cost (run.reports: tokens), so maxCostUsd cannot be kept; set allowUnmetered to run it without that limit"
        );
        let b = Budget::check(&req(Some(0.5), None, true), tokens_only)
            .unwrap()
            .unwrap();
        assert!(!b.kept);
        assert_eq!(
            crate::wire::to_json(&b.figures().unwrap()),
            r#"{"maxCostUsd":0.5,"kept":false}"#
        );
        let b = Budget::check(&req(None, Some(100), false), tokens_only)
            .unwrap()
            .unwrap();
        assert!(b.kept);
        let e = Budget::check(&req(None, Some(100), false), Some(Reports::NONE)).unwrap_err();
        assert!(e.to_string().contains("(run.reports: -)"), "{e}");
        assert_eq!(Budget::check(&req(None, None, false), None).unwrap(), None);
    }

    #[test]
    fn a_budget_passes_mid_turn_on_a_usage_update() {
        let budget = Budget::check(&req(Some(0.5), None, false), Some(Reports::ALL)).unwrap();
        let mut m = Metered::new(budget);
        let mut p = crate::acp::Progress {
            cost: Some(usd(0.3).value),
            ..crate::acp::Progress::default()
        };
        assert_eq!(m.on_progress(&p), Folded::default());
        p.cost = Some(usd(0.61).value);
        let f = m.on_progress(&p);
        assert_eq!(f.passed.unwrap().what, Limit::Cost);
        assert_eq!(m.on_progress(&p), Folded::default(), "said once");
        let f = m.end_turn(&TurnMeter::default());
        assert_eq!(f.passed, None);
        assert_eq!(m.meter.cost_usd(), Some(0.61), "the run's figure stays");
    }

    #[test]
    fn budget_bounds_and_peers() {
        for c in [0.0, -1.0, 1_000_000.5] {
            assert_eq!(
                Budget::check(&req(Some(c), None, false), Some(Reports::ALL)),
                Err(DelegateRefusal::MaxCostOutOfRange)
            );
        }
        for t in [0, MAX_TOKENS + 1] {
            assert_eq!(
                Budget::check(&req(None, Some(t), false), Some(Reports::ALL)),
                Err(DelegateRefusal::MaxTokensOutOfRange)
            );
        }
        let mut r = req(Some(1.0), None, false);
        r.peer = Some("b".into());
        assert_eq!(
            Budget::check(&r, None).unwrap_err().to_string(),
            "invalid delegate: peer b cannot keep a budget (it reports usage only when the task ends)"
        );
        r.allow_unmetered = Some(true);
        assert!(!Budget::check(&r, None).unwrap().unwrap().kept);
    }

    #[test]
    fn a_figure_past_its_limit_is_said_once() {
        let mut b = Budget::check(&req(Some(0.5), Some(100_000), false), Some(Reports::ALL))
            .unwrap()
            .unwrap();
        let mut m = Meter::default();
        m.on_run_figures(Some(&usd(0.5)), None);
        assert_eq!(b.check_figures(&m), None, "at the limit is not past it");
        m.on_run_figures(Some(&usd(0.5213)), None);
        let p = b.check_figures(&m).unwrap();
        assert_eq!(
            p.to_string(),
            "over budget: cost 0.5213 USD passed maxCostUsd 0.5"
        );
        assert_eq!(b.check_figures(&m), None, "once");
        assert_eq!(b.figures().unwrap().passed.as_deref(), Some("cost"));

        let mut b = Budget::check(&req(None, Some(100_000), false), Some(Reports::ALL))
            .unwrap()
            .unwrap();
        let mut m = Meter::default();
        m.end_turn(&tokens(
            [Some(100_000), Some(20_345), None, None, None, None],
            UsageSource::Acp,
        ));
        assert_eq!(
            b.check_figures(&m).unwrap().to_string(),
            "over budget: 120345 tokens passed maxTokens 100000"
        );
        let mut eur = Budget::check(&req(Some(0.5), None, false), Some(Reports::ALL))
            .unwrap()
            .unwrap();
        let mut m = Meter::default();
        m.on_run_figures(Some(&cost(5.0, "EUR")), None);
        assert_eq!(
            eur.check_figures(&m),
            None,
            "another currency cannot be compared"
        );
        let back = Budget::from_column(&b.to_column()).unwrap();
        assert_eq!(back, b);
    }
}
