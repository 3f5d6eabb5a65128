//! The `usage MODE` scenario of fake-acp-agent (issue 38 design §10 "Fake ACP agent"): a turn
//! that reports its usage the way one of the real agents does, so the hub's meter can be
//! tested end to end. TEST-ONLY.
//!
//! | MODE | what the turn sends |
//! |---|---|
//! | `cumulative` (default) | a `usage_update {used, size}`, then three with `cost` rising by 0.1 USD each (cumulative for the process, as ACP's cost is per session), a chunk, then `end_turn` with the prompt `usage` (per turn: input 100, output 20, total 120, cachedRead 50), as Claude's adapter 0.101 does |
//! | `per-turn` | no `usage_update`; only the prompt `usage` |
//! | `meta` | only `_meta.quota.token_count {input_tokens: 900, output_tokens: 40}` on the result, as Gemini 0.61 does |
//! | `none` | no figure at all, as codex-acp and OpenCode were seen to |
//! | `hold` | the three cost updates of `cumulative`, then seven more (up to 1.0 USD), then waits for `session/cancel` and answers `cancelled` (a budget's cancel; at EOF it just ends) |

use super::Agent;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicU64, Ordering};

/// The process's cost so far, in tenths of a cent (so it adds exactly).
static SPENT_MILLS: AtomicU64 = AtomicU64::new(0);

fn cost_update(agent: &Agent) {
    let mills = SPENT_MILLS.fetch_add(100, Ordering::SeqCst) + 100;
    agent.update(
        json!({"sessionUpdate":"usage_update","used":1200,"size":200000,
        "cost":{"amount": mills as f64 / 1000.0, "currency":"USD"}}),
    );
}

pub fn prompt(agent: &mut Agent, mode: Option<&str>, id: &Value) {
    let usage =
        json!({"inputTokens":100,"outputTokens":20,"totalTokens":120,"cachedReadTokens":50});
    match mode.unwrap_or("cumulative") {
        "per-turn" => {
            agent.chunk("per-turn usage");
            agent.respond(id, json!({"stopReason":"end_turn","usage":usage}));
        }
        "meta" => {
            agent.chunk("meta usage");
            agent.respond(
                id,
                json!({"stopReason":"end_turn","_meta":{"quota":{"token_count":{"input_tokens":900,"output_tokens":40},"model_usage":[]}}}),
            );
        }
        "none" => {
            agent.chunk("no usage");
            agent.respond(id, json!({"stopReason":"end_turn"}));
        }
        "hold" => {
            agent.update(json!({"sessionUpdate":"usage_update","used":1000,"size":200000}));
            for _ in 0..10 {
                cost_update(agent);
            }
            agent.chunk("spending");
            if agent.wait_for_cancel() {
                agent.respond(id, json!({"stopReason":"cancelled"}));
            }
        }
        _ => {
            agent.update(json!({"sessionUpdate":"usage_update","used":1000,"size":200000}));
            for _ in 0..3 {
                cost_update(agent);
            }
            agent.chunk("cumulative usage");
            agent.respond(id, json!({"stopReason":"end_turn","usage":usage}));
        }
    }
}
