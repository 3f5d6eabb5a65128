//! The USAGE section of `agent-hub top` (issue 38 design §1 "Top"; docs/delegation.md "Cost
//! and usage"): the tokens and cost of the task records the hub's `tasks` answer shows the
//! viewer, summed per delegator and per agent, with the tasks that ran and reported nothing
//! counted as `unmetered N`.
//!
//! Owns `UsageSums` (the fold over records) and `Sum` (one group's figures). A figure nobody
//! reported stays absent (`None`, drawn `-`), never 0: a group whose tasks reported no tokens
//! has no token sum, not a sum of 0. A sum some of whose parts were partial, or that left out
//! a metered task which did not report that figure, is a lower bound and says so (`at_least`).
//! Refuses IO (`run` fetches the records) and drawing (`render`).
//!
//! What it can sum is what `tasks` shows the viewer (docs/delegation.md "Visibility"): its own
//! tasks, and an approver's view of other delegators' tasks while they wait on a request, as
//! far as the hub's history keeps them. A hostile hub's figures can overflow nothing (counts
//! saturate) and a negative or non-finite amount is no figure, as the hub itself reads one.
// The sans-IO line (clippy.toml): no sockets, files, processes, threads, clock or OS randomness.
#![deny(clippy::disallowed_methods, clippy::disallowed_types)]

use crate::client::task::TaskRecord;

/// The group a record without `delegator` (a hub before issue 38) is summed under.
pub const UNKNOWN_DELEGATOR: &str = "-";

/// One group's figures: a delegator's, an agent's, or everything the viewer sees.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Sum {
    /// Records in the group, whatever their state.
    pub tasks: u64,
    /// Total tokens (`totalTokens`, else input + output: `Tokens::total`) of the records that
    /// reported them; None when none did.
    pub tokens: Option<u64>,
    /// The token sum is a lower bound: a summed figure was `partial`, or a metered task
    /// reported no total.
    pub tokens_at_least: bool,
    /// Cost per currency, in the order first seen (one currency is the rule; the hub keeps
    /// one per task, but tasks may differ). Empty when no record reported a cost.
    pub cost: Vec<(String, f64)>,
    /// The cost is a lower bound: a summed cost was `partial`, or a metered task reported
    /// tokens but no cost.
    pub cost_at_least: bool,
    /// Tasks that started and reported neither tokens nor cost (so far). Shown only when
    /// over 0: the view never prints `unmetered 0`.
    pub unmetered: u64,
}

impl Sum {
    fn add(&mut self, r: &TaskRecord) {
        self.tasks = self.tasks.saturating_add(1);
        let tokens = r.usage.as_ref().and_then(|u| u.tokens.total());
        let cost = r
            .cost
            .as_ref()
            .filter(|c| c.amount.0.is_finite() && c.amount.0 >= 0.0 && !c.currency.is_empty());
        if tokens.is_none() && cost.is_none() {
            // A queued task has not had the chance to report: it is not unmetered (yet).
            if r.started_at.is_some() {
                self.unmetered = self.unmetered.saturating_add(1);
            }
            return;
        }
        match tokens {
            Some(n) => {
                self.tokens = Some(self.tokens.unwrap_or(0).saturating_add(n));
                self.tokens_at_least |= r.usage.as_ref().is_some_and(|u| u.partial);
            }
            None => self.tokens_at_least = true,
        }
        match cost {
            Some(c) => {
                match self.cost.iter_mut().find(|(cur, _)| *cur == c.currency) {
                    Some((_, amount)) => *amount += c.amount.0,
                    None => self.cost.push((c.currency.clone(), c.amount.0)),
                }
                self.cost_at_least |= c.partial;
            }
            None => self.cost_at_least = true,
        }
    }

    /// The TOKENS cell: the sum, `+` after a lower bound, `-` when nothing was reported.
    pub fn tokens_text(&self) -> String {
        match self.tokens {
            Some(n) if self.tokens_at_least => format!("{n}+"),
            Some(n) => n.to_string(),
            None => "-".to_owned(),
        }
    }

    /// The COST cell: `0.3000 USD` (four decimals, as the budget reasons print them), each
    /// currency joined by ` + `, `+` after a lower bound, `-` when nothing was reported.
    pub fn cost_text(&self) -> String {
        if self.cost.is_empty() {
            return "-".to_owned();
        }
        let parts: Vec<String> = self
            .cost
            .iter()
            .map(|(cur, amount)| format!("{amount:.4} {cur}"))
            .collect();
        let plus = if self.cost_at_least { "+" } else { "" };
        format!("{}{plus}", parts.join(" + "))
    }

    /// `unmetered N`, or nothing when every task that ran reported a figure.
    pub fn unmetered_text(&self) -> String {
        if self.unmetered == 0 {
            String::new()
        } else {
            format!("unmetered {}", self.unmetered)
        }
    }
}

/// The records' figures: in all, per delegator and per agent (each list sorted by name).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct UsageSums {
    pub all: Sum,
    pub by_delegator: Vec<(String, Sum)>,
    pub by_agent: Vec<(String, Sum)>,
}

impl UsageSums {
    /// Sums `records` (a `tasks` answer). A record in state `unknown` (no such task) is
    /// skipped; an agent is named `agent@peer` when the task ran on a peer, as TASKS names it.
    pub fn of(records: &[TaskRecord]) -> UsageSums {
        let mut sums = UsageSums::default();
        for r in records {
            if r.state.as_deref() == Some("unknown") {
                continue;
            }
            sums.add(r);
        }
        sums.by_delegator.sort_by(|a, b| a.0.cmp(&b.0));
        sums.by_agent.sort_by(|a, b| a.0.cmp(&b.0));
        sums
    }

    fn add(&mut self, r: &TaskRecord) {
        self.all.add(r);
        let delegator = r
            .delegator
            .clone()
            .filter(|d| !d.is_empty())
            .unwrap_or_else(|| UNKNOWN_DELEGATOR.to_owned());
        group(&mut self.by_delegator, delegator).add(r);
        let agent = r.agent.clone().unwrap_or_else(|| "-".to_owned());
        let agent = match &r.peer {
            Some(p) => format!("{agent}@{p}"),
            None => agent,
        };
        group(&mut self.by_agent, agent).add(r);
    }
}

fn group(groups: &mut Vec<(String, Sum)>, name: String) -> &mut Sum {
    let i = match groups.iter().position(|(n, _)| *n == name) {
        Some(i) => i,
        None => {
            groups.push((name, Sum::default()));
            groups.len() - 1
        }
    };
    &mut groups[i].1
}

#[cfg(test)]
mod tests {
    use super::*;
    use agent_hub_proto::wire::usage::{Amount, CostFigures, Tokens, UsageFigures};

    fn record(delegator: Option<&str>, agent: &str, tokens: Option<Tokens>) -> TaskRecord {
        TaskRecord {
            task: format!("task-{agent}"),
            agent: Some(agent.into()),
            delegator: delegator.map(Into::into),
            state: Some("completed".into()),
            started_at: Some("2026-12-01T10:00:00.000Z".into()),
            usage: tokens.map(|tokens| UsageFigures {
                tokens,
                source: "acp".into(),
                partial: false,
            }),
            ..TaskRecord::default()
        }
    }

    fn total(n: u64) -> Option<Tokens> {
        Some(Tokens {
            total_tokens: Some(n),
            ..Tokens::default()
        })
    }

    fn cost(mut r: TaskRecord, amount: f64, currency: &str) -> TaskRecord {
        r.cost = Some(CostFigures {
            amount: Amount(amount),
            currency: currency.into(),
            source: "acp".into(),
            partial: false,
        });
        r
    }

    fn named<'a>(groups: &'a [(String, Sum)], name: &str) -> &'a Sum {
        &groups.iter().find(|(n, _)| n == name).expect(name).1
    }

    /// Per delegator and per agent; a task that ran and reported nothing is unmetered, and
    /// its absence never turns into a 0 in anyone's sum.
    #[test]
    fn sums_per_delegator_and_agent_count_the_unmetered_and_keep_absent_absent() {
        let records = [
            cost(record(Some("alpha"), "claude", total(120)), 0.3, "USD"),
            cost(record(Some("alpha"), "claude", total(80)), 0.2, "USD"),
            record(Some("alpha"), "codex", None),
            record(Some("beta"), "codex", None),
            record(Some("beta"), "gemini", total(40)),
        ];
        let s = UsageSums::of(&records);
        assert_eq!(s.all.tasks, 5);
        assert_eq!(s.all.tokens, Some(240));
        assert_eq!(s.all.unmetered, 2);
        // gemini reported tokens and no cost: the cost in all is a lower bound.
        assert_eq!(s.all.cost_text(), "0.5000 USD+");
        let names: Vec<&str> = s.by_delegator.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["alpha", "beta"]);
        let alpha = named(&s.by_delegator, "alpha");
        assert_eq!(
            (alpha.tasks, alpha.tokens_text(), alpha.cost_text()),
            (3, "200".to_owned(), "0.5000 USD".to_owned())
        );
        assert_eq!(alpha.unmetered_text(), "unmetered 1");
        let codex = named(&s.by_agent, "codex");
        // Nothing reported: no figure at all, never a 0.
        assert_eq!((codex.tokens, codex.cost.is_empty()), (None, true));
        assert_eq!(
            (codex.tokens_text(), codex.cost_text()),
            ("-".into(), "-".into())
        );
        assert_eq!(codex.unmetered_text(), "unmetered 2");
        let gemini = named(&s.by_agent, "gemini");
        assert_eq!(
            (gemini.tokens_text(), gemini.cost_text()),
            ("40".into(), "-".into())
        );
        assert_eq!(gemini.unmetered_text(), "", "never `unmetered 0`");
    }

    /// A queued task has not run: neither metered nor unmetered. An `unknown` record is no
    /// task. A record from a hub before issue 38 (no delegator) is summed under `-`; a task on
    /// a peer is named as TASKS names it.
    #[test]
    fn queued_unknown_older_hub_and_peer_records() {
        let mut queued = record(Some("alpha"), "claude", None);
        queued.state = Some("queued".into());
        queued.started_at = None;
        let mut unknown = record(None, "claude", total(5));
        unknown.state = Some("unknown".into());
        let old = record(None, "claude", None);
        let mut remote = record(Some("alpha"), "claude", total(7));
        remote.peer = Some("lab".into());
        let s = UsageSums::of(&[queued, unknown, old, remote]);
        assert_eq!((s.all.tasks, s.all.unmetered), (3, 1));
        assert_eq!(s.all.tokens, Some(7));
        assert_eq!(named(&s.by_delegator, UNKNOWN_DELEGATOR).unmetered, 1);
        assert_eq!(named(&s.by_delegator, "alpha").unmetered, 0);
        assert_eq!(named(&s.by_agent, "claude@lab").tokens, Some(7));
    }

    /// Lower bounds: a partial figure, a metered task without a token total (input only),
    /// two currencies side by side rather than added.
    #[test]
    fn partial_figures_and_mixed_currencies_are_lower_bounds_not_guesses() {
        let mut partial = cost(record(Some("a"), "x", total(10)), 1.0, "USD");
        if let Some(u) = partial.usage.as_mut() {
            u.partial = true;
        }
        let input_only = cost(
            record(
                Some("a"),
                "x",
                Some(Tokens {
                    input_tokens: Some(99),
                    ..Tokens::default()
                }),
            ),
            2.0,
            "EUR",
        );
        let s = UsageSums::of(&[partial.clone(), input_only]);
        assert_eq!(s.all.tokens_text(), "10+");
        assert_eq!(s.all.cost_text(), "1.0000 USD + 2.0000 EUR");
        let mut partial_cost = partial;
        if let Some(c) = partial_cost.cost.as_mut() {
            c.partial = true;
        }
        assert_eq!(
            UsageSums::of(&[partial_cost]).all.cost_text(),
            "1.0000 USD+"
        );
    }

    /// What a hostile hub could send: counts at the top of u64 saturate, a negative amount
    /// and an empty currency are no figure; nothing panics.
    #[test]
    fn a_hostile_hubs_figures_saturate_or_read_as_absent() {
        let big = record(Some("a"), "x", total(u64::MAX));
        let s = UsageSums::of(&[big.clone(), big]);
        assert_eq!(s.all.tokens, Some(u64::MAX));
        let negative = cost(record(Some("a"), "x", None), -5.0, "USD");
        let nameless = cost(record(Some("a"), "x", None), 5.0, "");
        let s = UsageSums::of(&[negative, nameless]);
        assert_eq!((s.all.cost_text(), s.all.unmetered), ("-".into(), 2));
        // And the same from JSON, as the client reads a record (lenient: a figure of another
        // shape is absent, never a failed refresh).
        let line = r#"{"tasks":[{"task":"t","delegator":"a","state":"completed","startedAt":"x","usage":{"totalTokens":"many","source":"acp"},"cost":"free"}]}"#;
        let list: crate::client::task::TaskList = serde_json::from_str(line).unwrap();
        let s = UsageSums::of(&list.tasks);
        assert_eq!((s.all.tokens, s.all.unmetered), (None, 1));
    }
}
