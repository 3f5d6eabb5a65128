//! The `remember` scenario (issue 38 design §2; docs/acp.md "The fake agent"): a session that
//! takes one turn after another and remembers them, so a test sees that a follow-up reached
//! the same session. Each prompt is answered with one chunk `turn N; earlier: A | B` (the
//! earlier prompts of this process, in order) and `end_turn`; a prompt holding `HANG` waits
//! for `session/cancel` and ends `cancelled` (what an interrupt cancels). The agent advertises
//! `sessionCapabilities.close` and answers `session/close` with `{}`.

use super::Agent;
use serde_json::{json, Value};

/// The turns this process has seen.
#[derive(Debug, Default)]
pub(crate) struct Memory {
    prompts: Vec<String>,
}

/// One `session/prompt` of `remember`.
pub(crate) fn prompt(agent: &mut Agent, memory: &mut Memory, id: &Value) {
    let text = agent.prompt_text.clone();
    let turn = memory.prompts.len() + 1;
    let earlier = if memory.prompts.is_empty() {
        "-".to_owned()
    } else {
        memory.prompts.join(" | ")
    };
    memory.prompts.push(text.clone());
    agent.chunk(&format!("turn {turn}; earlier: {earlier}"));
    if text.contains("HANG") {
        if agent.wait_for_cancel() {
            agent.respond(id, json!({"stopReason":"cancelled"}));
        }
        return;
    }
    agent.respond(id, json!({"stopReason":"end_turn"}));
}
