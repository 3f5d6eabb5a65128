//! The bodies of the envelopes the hub sends a delegator about its task (docs/delegation.md
//! "Envelopes"): `task_outcome` (one per turn, issue 38) and `task_progress`. Keys in the
//! documented order (serde writes a struct's fields in declaration order), optional keys
//! absent rather than null.
//!
//! Owns the body shapes (the usage figures are `wire::usage`'s, from the task's meter), the cap of the final text on a char
//! boundary, and the bounds on what a relay peer's handoff adds to an outcome (`gitRef`,
//! `verifications`, docs/delegation.md "Across hubs"). Refuses IO.

use crate::relay::message::Verification;
use crate::wire::usage::{BudgetFigures, ContextFigures, CostFigures, UsageFigures};
use crate::wire::{PlanSummary, TaskProgress};
use serde::Serialize;

/// The kinds of the hub's task envelopes: the wire's, in its list of kinds only the hub
/// writes (`wire::envelope::HUB_KINDS`, SPEC §3.4), so no client can forge one.
pub const OUTCOME_KIND: &str = crate::wire::Envelope::TASK_OUTCOME_KIND;
pub const PROGRESS_KIND: &str = crate::wire::Envelope::TASK_PROGRESS_KIND;

/// A peer's `verifications` kept in one outcome at most: the first 15 and the last
/// (claudectl 0.92 stops at the first failing check, so the last one is the one that says
/// why); `verificationsOmitted` counts the rest.
pub const MAX_VERIFICATIONS: usize = 16;
/// The end of a verification's output kept (what claudectl 0.92 itself sends at most).
pub const VERIFICATION_OUTPUT_MAX_BYTES: usize = 4096;
/// The start of a verification's command kept.
pub const VERIFICATION_COMMAND_MAX_BYTES: usize = 1024;
/// A peer's `git_ref` longer than this (or empty, or with a control character, which git
/// refuses in a ref name) is left out rather than cut: a cut ref names another branch.
pub const GIT_REF_MAX_BYTES: usize = 1024;
/// A peer's words kept as a task's `reason` (claudectl 0.92's own summaries stop at 2048
/// bytes and an ellipsis).
pub const PEER_REASON_MAX_BYTES: usize = 2048;

#[derive(Debug, Serialize)]
pub(super) struct OutcomeBody<'a> {
    pub task: &'a str,
    pub agent: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peer: Option<&'a str>,
    /// Issue 38: the turn this outcome ends (from 1).
    pub turn: u32,
    pub state: &'a str,
    #[serde(rename = "stopReason", skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<&'a str>,
    pub text: &'a str,
    pub truncated: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<&'a str>,
    #[serde(rename = "elapsedMs")]
    pub elapsed_ms: u64,
    /// Issue 38 design §1, §5: the task's figures so far (`tasks::meter`), each only when
    /// reported, and its budget when it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<UsageFigures>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost: Option<CostFigures>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context: Option<ContextFigures>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub budget: Option<BudgetFigures>,
    /// Issue 38: `kept` (a follow-up may come until `keptUntil`) or `closed`.
    pub session: &'a str,
    #[serde(rename = "keptUntil", skip_serializing_if = "Option::is_none")]
    pub kept_until: Option<String>,
    /// A relay peer's report beyond the v0 keys, each part only when it sent one.
    #[serde(flatten)]
    pub report: Option<&'a PeerReport>,
}

/// What a relay peer's handoff adds to the outcome body, bounded (`PeerReport::from_handoff`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub(super) struct PeerReport {
    #[serde(rename = "gitRef", skip_serializing_if = "Option::is_none")]
    pub git_ref: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub verifications: Vec<VerificationBody>,
    #[serde(rename = "verificationsOmitted", skip_serializing_if = "is_zero")]
    pub verifications_omitted: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// One check a peer ran (`{"command","passed","output"}`), cut to the caps above.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(super) struct VerificationBody {
    pub command: String,
    pub passed: bool,
    pub output: String,
}

impl PeerReport {
    /// The bounded report of a peer's `git_ref` and `verifications`; None when it has
    /// neither.
    pub fn from_handoff(
        git_ref: Option<&str>,
        verifications: &[Verification],
    ) -> Option<PeerReport> {
        let git_ref = git_ref
            .filter(|r| !r.is_empty() && r.len() <= GIT_REF_MAX_BYTES)
            .filter(|r| !r.chars().any(char::is_control))
            .map(str::to_owned);
        let keep = |v: &Verification| VerificationBody {
            command: cap_text(&v.command, VERIFICATION_COMMAND_MAX_BYTES)
                .0
                .to_owned(),
            passed: v.passed,
            output: cap_tail(&v.output, VERIFICATION_OUTPUT_MAX_BYTES)
                .0
                .to_owned(),
        };
        let (kept, omitted): (Vec<VerificationBody>, usize) =
            if verifications.len() <= MAX_VERIFICATIONS {
                (verifications.iter().map(keep).collect(), 0)
            } else {
                let head = verifications[..MAX_VERIFICATIONS - 1].iter();
                let last = verifications.last().into_iter();
                (
                    head.chain(last).map(keep).collect(),
                    verifications.len() - MAX_VERIFICATIONS,
                )
            };
        let report = PeerReport {
            git_ref,
            verifications: kept,
            verifications_omitted: omitted,
        };
        (report != PeerReport::default()).then_some(report)
    }
}

/// A peer's words as a task's `reason`: control characters (a newline included) become
/// spaces, so the reason stays one line in `task status` and the audit log, cut to
/// `PEER_REASON_MAX_BYTES`.
pub(super) fn peer_reason(text: &str) -> String {
    let (text, _) = cap_text(text, PEER_REASON_MAX_BYTES);
    text.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

#[derive(Debug, Serialize)]
pub(super) struct ProgressBody<'a> {
    pub task: &'a str,
    pub agent: &'a str,
    /// Issue 38: the turn under way.
    pub turn: u32,
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
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<UsageFigures>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost: Option<CostFigures>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context: Option<ContextFigures>,
}

/// The body as JSON text.
pub(super) fn json<T: Serialize>(body: &T) -> String {
    // Invariant: the bodies are structs of strings, integers, booleans and finite floats
    // (`acp::usage::read_cost` keeps finite amounts only, and a budget's limit was checked
    // finite at the verb); serde_json cannot fail on those.
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

/// The last `max_bytes` of `text` at most, starting on a char boundary, and whether anything
/// was cut.
pub fn cap_tail(text: &str, max_bytes: usize) -> (&str, bool) {
    if text.len() <= max_bytes {
        return (text, false);
    }
    let mut start = text.len() - max_bytes;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    (&text[start..], true)
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
