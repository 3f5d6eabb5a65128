//! The bodies of the envelopes the hub sends a delegator about its task (docs/delegation.md
//! "Envelopes"): `task_outcome` (exactly one per task) and `task_progress`. Keys in the
//! documented order (serde writes a struct's fields in declaration order), optional keys
//! absent rather than null.
//!
//! Owns the body shapes, the mapping of usage and cost, and the cap of the final text on a
//! char boundary. Refuses IO.

use crate::acp::{Cost, TokenUsage};
use crate::wire::{PlanSummary, TaskProgress};
use serde::Serialize;

pub const OUTCOME_KIND: &str = "task_outcome";
pub const PROGRESS_KIND: &str = "task_progress";

#[derive(Debug, Serialize)]
pub(super) struct OutcomeBody<'a> {
    pub task: &'a str,
    pub agent: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peer: Option<&'a str>,
    pub state: &'a str,
    #[serde(rename = "stopReason", skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<&'a str>,
    pub text: &'a str,
    pub truncated: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<&'a str>,
    #[serde(rename = "elapsedMs")]
    pub elapsed_ms: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<UsageBody>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost: Option<CostBody<'a>>,
}

/// The token counts the agent reported, each key only when it reported it.
#[derive(Debug, Serialize, PartialEq, Eq)]
pub(super) struct UsageBody {
    #[serde(rename = "inputTokens", skip_serializing_if = "Option::is_none")]
    input_tokens: Option<u64>,
    #[serde(rename = "outputTokens", skip_serializing_if = "Option::is_none")]
    output_tokens: Option<u64>,
    #[serde(rename = "totalTokens", skip_serializing_if = "Option::is_none")]
    total_tokens: Option<u64>,
    #[serde(rename = "cachedReadTokens", skip_serializing_if = "Option::is_none")]
    cached_read_tokens: Option<u64>,
    #[serde(rename = "cachedWriteTokens", skip_serializing_if = "Option::is_none")]
    cached_write_tokens: Option<u64>,
    #[serde(rename = "thoughtTokens", skip_serializing_if = "Option::is_none")]
    thought_tokens: Option<u64>,
}

impl UsageBody {
    /// Only a total, as a relay peer's `task_handoff` reports it.
    pub fn with_total(total: u64) -> UsageBody {
        UsageBody {
            input_tokens: None,
            output_tokens: None,
            total_tokens: Some(total),
            cached_read_tokens: None,
            cached_write_tokens: None,
            thought_tokens: None,
        }
    }

    /// The total, or input plus output when no total was reported.
    pub fn total(&self) -> u64 {
        self.total_tokens.unwrap_or_else(|| {
            self.input_tokens
                .unwrap_or(0)
                .saturating_add(self.output_tokens.unwrap_or(0))
        })
    }

    pub fn from(u: &TokenUsage) -> UsageBody {
        UsageBody {
            input_tokens: u.input_tokens,
            output_tokens: u.output_tokens,
            total_tokens: u.total_tokens,
            cached_read_tokens: u.cached_read_tokens,
            cached_write_tokens: u.cached_write_tokens,
            thought_tokens: u.thought_tokens,
        }
    }
}

#[derive(Debug, Serialize)]
pub(super) struct CostBody<'a> {
    amount: f64,
    currency: &'a str,
}

impl<'a> CostBody<'a> {
    /// None for an amount JSON cannot carry (NaN, infinite).
    pub fn from(c: &'a Cost) -> Option<CostBody<'a>> {
        c.amount.is_finite().then_some(CostBody {
            amount: c.amount,
            currency: &c.currency,
        })
    }
}

#[derive(Debug, Serialize)]
pub(super) struct ProgressBody<'a> {
    pub task: &'a str,
    pub agent: &'a str,
    pub state: &'a str,
    #[serde(rename = "elapsedMs")]
    pub elapsed_ms: u64,
    pub updates: u64,
    #[serde(rename = "toolCalls")]
    pub tool_calls: u64,
    #[serde(rename = "lastTool", skip_serializing_if = "Option::is_none")]
    pub last_tool: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub plan: Option<&'a PlanSummary>,
}

/// The body as JSON text.
pub(super) fn json<T: Serialize>(body: &T) -> String {
    // Invariant: the bodies are structs of strings, integers, booleans and finite floats
    // (`CostBody::from` drops the others); serde_json cannot fail on those.
    serde_json::to_string(body).expect("task bodies always serialise")
}

/// `text` cut to at most `max_bytes` on a char boundary, and whether anything was cut.
pub fn cap_text(text: &str, max_bytes: usize) -> (&str, bool) {
    if text.len() <= max_bytes {
        return (text, false);
    }
    let mut end = max_bytes;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    (&text[..end], true)
}

/// The record's small summary of an ACP progress snapshot.
pub fn summarise(p: &crate::acp::Progress) -> TaskProgress {
    let plan = (!p.plan.is_empty()).then(|| PlanSummary {
        total: p.plan.len() as u64,
        completed: p.plan.iter().filter(|e| e.status == "completed").count() as u64,
        current: p
            .plan
            .iter()
            .find(|e| e.status == "in_progress")
            .map(|e| e.content.clone()),
    });
    TaskProgress {
        updates: p.updates,
        tool_calls: p.tool_calls.total + p.tool_calls.untracked,
        last_tool: p.last_tool.clone(),
        plan,
    }
}
