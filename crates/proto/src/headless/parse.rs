//! Reading a headless agent's stdout back (docs/delegation.md "Headless tasks"), one reader
//! per `run.outcome` tag (docs/agents.md "Manifests"). The formats are the agents' own, as
//! recorded in the project's agent facts (claude `-p --output-format json`, `codex exec
//! --json`, `gemini -p --output-format json`, `opencode run --format json`).
//!
//! Owns: finding the final text, the stop reason, token usage and cost where a format carries
//! them, and an error the agent reported in its output. Tolerant: a line that is not JSON, an
//! event type or a field this build does not know, a number where a string was expected, all
//! are skipped (and counted), never fatal; the input is already capped by the runner, and
//! every string kept from it is capped here (the text at `max_text_bytes`, cut on a character
//! boundary; an error message as a sanitized excerpt). Refuses IO.

use crate::acp::sanitize::{floor_char_boundary, Secrets};
use crate::acp::{Cost, Reports, StopReason};
use crate::wire::usage::Tokens;
use serde_json::Value;

/// Which reader a headless agent's output gets: a manifest's `run.outcome` tag
/// (docs/agents.md "Manifests"; `agents::manifest::Outcome` is this type).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    ExitCode,
    ClaudeJson,
    CodexJsonl,
    GeminiJson,
    OpencodeJsonl,
}

impl Format {
    /// Every tag this build knows, for messages and docs.
    pub const TAGS: &'static [&'static str] = &[
        "exit-code",
        "claude-json",
        "codex-jsonl",
        "gemini-json",
        "opencode-jsonl",
    ];

    /// The format a `run.outcome` tag names; None for a tag this build does not know.
    pub fn from_tag(s: &str) -> Option<Format> {
        Some(match s {
            "exit-code" => Format::ExitCode,
            "claude-json" => Format::ClaudeJson,
            "codex-jsonl" => Format::CodexJsonl,
            "gemini-json" => Format::GeminiJson,
            "opencode-jsonl" => Format::OpencodeJsonl,
            _ => return None,
        })
    }

    /// What a headless run in this format reports (issue 38 design §1): what its reader
    /// below takes from the output, no more.
    pub fn reports(self) -> Reports {
        let (tokens, cost) = match self {
            Format::ExitCode => (false, false),
            Format::ClaudeJson | Format::OpencodeJsonl => (true, true),
            Format::CodexJsonl | Format::GeminiJson => (true, false),
        };
        Reports {
            tokens,
            cost,
            context: false,
        }
    }
}

/// What a format's reader found in the output.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Parsed {
    /// The format's result was there: Claude's/Gemini's result object, a Codex
    /// `turn.completed` or agent message, an OpenCode `step_finish` or text; always for
    /// `exit-code`. False: the output holds nothing this reader recognises.
    pub found: bool,
    /// The agent's final text, at most `max_text_bytes`.
    pub text: String,
    /// Text was cut to respect `max_text_bytes`.
    pub text_truncated: bool,
    /// The stop reason the output gave; None when the format has none.
    pub stop_reason: Option<StopReason>,
    pub usage: Option<Tokens>,
    pub cost: Option<Cost>,
    /// An error the agent reported in its output (a sanitized excerpt).
    pub error: Option<String>,
    /// Lines (or the whole output) that were not the JSON the format expects.
    pub malformed: u64,
}

/// Reads `stdout` (already capped by the runner) as `format`.
pub fn parse(format: Format, stdout: &[u8], max_text_bytes: usize, secrets: &Secrets) -> Parsed {
    let mut p = match format {
        Format::ExitCode => exit_code(stdout),
        Format::ClaudeJson => claude_json(stdout, secrets),
        Format::CodexJsonl => codex_jsonl(stdout, secrets),
        Format::GeminiJson => gemini_json(stdout, secrets),
        Format::OpencodeJsonl => opencode_jsonl(stdout, secrets),
    };
    let (text, cut) = cap(&p.text, max_text_bytes);
    if cut {
        p.text = text.to_owned();
        p.text_truncated = true;
    }
    p
}

/// `s` cut to at most `max` bytes on a character boundary, and whether anything was cut.
fn cap(s: &str, max: usize) -> (&str, bool) {
    let end = floor_char_boundary(s, max);
    (&s[..end], end < s.len())
}

fn u64_of(v: &Value, key: &str) -> Option<u64> {
    v.get(key).and_then(Value::as_u64)
}

fn str_of<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

fn any_usage(u: &Tokens) -> bool {
    *u != Tokens::default()
}

fn add(acc: &mut Option<u64>, v: Option<u64>) {
    if let Some(v) = v {
        *acc = Some(acc.unwrap_or(0).saturating_add(v));
    }
}

/// The lines of `out` that are JSON objects, and how many non-blank lines were not.
fn json_lines(out: &[u8]) -> (Vec<Value>, u64) {
    let mut values = Vec::new();
    let mut malformed = 0;
    for line in out.split(|&b| b == b'\n') {
        let line = line.trim_ascii();
        if line.is_empty() {
            continue;
        }
        match serde_json::from_slice::<Value>(line) {
            Ok(v) if v.is_object() => values.push(v),
            _ => malformed += 1,
        }
    }
    (values, malformed)
}

/// One JSON document: the whole output, or else the output from the first line that starts
/// with `{` or `[` (a CLI may print a banner first), or else the last line that is a JSON
/// object.
fn json_document(out: &[u8]) -> (Option<Value>, u64) {
    let trimmed = out.trim_ascii();
    if let Ok(v) = serde_json::from_slice::<Value>(trimmed) {
        return (Some(v), 0);
    }
    let mut at = 0;
    for line in out.split(|&b| b == b'\n') {
        let t = line.trim_ascii_start();
        if t.starts_with(b"{") || t.starts_with(b"[") {
            if let Ok(v) = serde_json::from_slice::<Value>(out[at..].trim_ascii()) {
                return (Some(v), 1);
            }
            break;
        }
        at += line.len() + 1;
    }
    let (lines, malformed) = json_lines(out);
    (lines.into_iter().last(), malformed.max(1))
}

/// `exit-code`: the exit status decides; the text is stdout as (lossy) UTF-8, trimmed.
fn exit_code(out: &[u8]) -> Parsed {
    Parsed {
        found: true,
        text: String::from_utf8_lossy(out.trim_ascii()).into_owned(),
        ..Parsed::default()
    }
}

/// `claude-json`: one `{"type":"result", "subtype", "is_error", "result", "stop_reason",
/// "usage", "total_cost_usd", …}` object (with `--verbose`, an array of messages whose last
/// `result` is the one).
fn claude_json(out: &[u8], secrets: &Secrets) -> Parsed {
    let (doc, malformed) = json_document(out);
    let mut p = Parsed {
        malformed,
        ..Parsed::default()
    };
    let result = match doc {
        Some(Value::Array(items)) => items
            .into_iter()
            .rev()
            .find(|v| str_of(v, "type") == Some("result")),
        Some(v) if str_of(&v, "type") == Some("result") => Some(v),
        _ => None,
    };
    let Some(r) = result else {
        return p;
    };
    p.found = true;
    p.text = str_of(&r, "result").unwrap_or_default().to_owned();
    let subtype = str_of(&r, "subtype").unwrap_or("success");
    let is_error = r.get("is_error").and_then(Value::as_bool).unwrap_or(false);
    p.stop_reason = Some(match str_of(&r, "stop_reason") {
        Some(s) => StopReason::parse(s, |x| secrets.token(x)),
        None => StopReason::EndTurn,
    });
    if subtype == "error_max_turns" {
        // The turn budget ran out: a completion, as ACP reports it (docs/delegation.md).
        p.stop_reason = Some(StopReason::MaxTurnRequests);
    } else if is_error || subtype.starts_with("error") {
        let what = if p.text.is_empty() { subtype } else { &p.text };
        p.error = Some(secrets.clean(what));
    }
    if let Some(u) = r.get("usage") {
        let usage = Tokens {
            input_tokens: u64_of(u, "input_tokens"),
            output_tokens: u64_of(u, "output_tokens"),
            cached_read_tokens: u64_of(u, "cache_read_input_tokens"),
            cached_write_tokens: u64_of(u, "cache_creation_input_tokens"),
            ..Tokens::default()
        };
        p.usage = any_usage(&usage).then_some(usage);
    }
    p.cost = r
        .get("total_cost_usd")
        .and_then(Value::as_f64)
        .filter(|c| c.is_finite() && *c >= 0.0)
        .map(|amount| Cost {
            amount,
            currency: "USD".into(),
        });
    p
}

/// `codex-jsonl`: `thread.started`, `turn.started`, `item.started`/`item.completed` (items
/// `agent_message{text}`, `mcp_tool_call`, `error{message}`: a warning), `turn.completed
/// {usage}`, `turn.failed{error}`, a top-level `error{message}`. The text is the last agent
/// message of the turn (what `codex exec -o` writes).
fn codex_jsonl(out: &[u8], secrets: &Secrets) -> Parsed {
    let (events, malformed) = json_lines(out);
    let mut p = Parsed {
        malformed,
        ..Parsed::default()
    };
    let mut completed = false;
    let mut error: Option<String> = None;
    let mut text: Option<String> = None;
    let mut usage = Tokens::default();
    for ev in &events {
        match str_of(ev, "type") {
            Some("item.completed") => {
                let Some(item) = ev.get("item") else { continue };
                if str_of(item, "type") == Some("agent_message") {
                    if let Some(t) = str_of(item, "text") {
                        text = Some(t.to_owned());
                    }
                }
            }
            Some("turn.completed") => {
                completed = true;
                error = None;
                if let Some(u) = ev.get("usage") {
                    add(&mut usage.input_tokens, u64_of(u, "input_tokens"));
                    add(
                        &mut usage.cached_read_tokens,
                        u64_of(u, "cached_input_tokens"),
                    );
                    add(&mut usage.output_tokens, u64_of(u, "output_tokens"));
                    add(
                        &mut usage.thought_tokens,
                        u64_of(u, "reasoning_output_tokens"),
                    );
                }
            }
            Some("turn.failed") => {
                let msg = ev
                    .get("error")
                    .and_then(|e| str_of(e, "message"))
                    .unwrap_or("turn.failed");
                error = Some(secrets.clean(msg));
                completed = false;
            }
            Some("error") => {
                // Codex reports stream retries this way too; it is the failure only when no
                // turn completed after it.
                if let Some(msg) = str_of(ev, "message") {
                    error = Some(secrets.clean(msg));
                }
            }
            _ => {}
        }
    }
    p.found = completed || text.is_some();
    p.text = text.unwrap_or_default();
    if completed {
        p.stop_reason = Some(StopReason::EndTurn);
        p.error = None;
    } else {
        p.error = error;
    }
    p.usage = any_usage(&usage).then_some(usage);
    p
}

/// `gemini-json`: one `{"session_id", "response", "stats":{"models":{NAME:{"tokens":{…}}}},
/// "warnings"?}` object, or `{"error":{"type","message","code"}}`. Tokens are summed over
/// the models (Gemini routes between several).
fn gemini_json(out: &[u8], secrets: &Secrets) -> Parsed {
    let (doc, malformed) = json_document(out);
    let mut p = Parsed {
        malformed,
        ..Parsed::default()
    };
    let Some(doc) = doc.filter(Value::is_object) else {
        return p;
    };
    if let Some(e) = doc.get("error") {
        let msg = str_of(e, "message")
            .or_else(|| e.as_str())
            .unwrap_or("the agent reported an error");
        p.error = Some(secrets.clean(msg));
    }
    if let Some(r) = str_of(&doc, "response") {
        p.found = true;
        p.text = r.to_owned();
        p.stop_reason = Some(StopReason::EndTurn);
    }
    let mut usage = Tokens::default();
    if let Some(models) = doc
        .get("stats")
        .and_then(|s| s.get("models"))
        .and_then(Value::as_object)
    {
        for m in models.values() {
            let Some(t) = m.get("tokens") else { continue };
            add(&mut usage.input_tokens, u64_of(t, "prompt"));
            add(&mut usage.output_tokens, u64_of(t, "candidates"));
            add(&mut usage.total_tokens, u64_of(t, "total"));
            add(&mut usage.cached_read_tokens, u64_of(t, "cached"));
            add(&mut usage.thought_tokens, u64_of(t, "thoughts"));
        }
    }
    p.usage = any_usage(&usage).then_some(usage);
    p
}

/// `opencode-jsonl`: `step_start`, `tool_use`, `text{part.text}`, `step_finish{part.reason,
/// part.tokens, part.cost}`, `error{error}`, each with `sessionID`. The text is that of the
/// last step that produced any (a step's text parts joined, a part seen again replaced by
/// its id); tokens and cost are summed over the steps.
fn opencode_jsonl(out: &[u8], secrets: &Secrets) -> Parsed {
    let (events, malformed) = json_lines(out);
    let mut p = Parsed {
        malformed,
        ..Parsed::default()
    };
    let mut step: Vec<(Option<String>, String)> = Vec::new();
    let mut last_text: Option<String> = None;
    let mut reason: Option<String> = None;
    let mut finished = false;
    let mut usage = Tokens::default();
    let mut cost: Option<f64> = None;
    let join = |parts: &[(Option<String>, String)]| {
        parts
            .iter()
            .map(|(_, t)| t.as_str())
            .collect::<Vec<_>>()
            .join("")
    };
    for ev in &events {
        let part = ev.get("part");
        match str_of(ev, "type") {
            Some("step_start") => step.clear(),
            Some("text") => {
                let Some(part) = part else { continue };
                let Some(t) = str_of(part, "text") else {
                    continue;
                };
                let id = str_of(part, "id").map(str::to_owned);
                match step.iter_mut().find(|(i, _)| id.is_some() && *i == id) {
                    Some(slot) => slot.1 = t.to_owned(),
                    None => step.push((id, t.to_owned())),
                }
                last_text = Some(join(&step));
            }
            Some("step_finish") => {
                finished = true;
                let Some(part) = part else { continue };
                reason = str_of(part, "reason").map(str::to_owned);
                if let Some(t) = part.get("tokens") {
                    add(&mut usage.input_tokens, u64_of(t, "input"));
                    add(&mut usage.output_tokens, u64_of(t, "output"));
                    add(&mut usage.thought_tokens, u64_of(t, "reasoning"));
                    if let Some(c) = t.get("cache") {
                        add(&mut usage.cached_read_tokens, u64_of(c, "read"));
                        add(&mut usage.cached_write_tokens, u64_of(c, "write"));
                    }
                }
                if let Some(c) = part
                    .get("cost")
                    .and_then(Value::as_f64)
                    .filter(|c| c.is_finite() && *c >= 0.0)
                {
                    cost = Some(cost.unwrap_or(0.0) + c);
                }
            }
            Some("error") => {
                let e = ev.get("error").or(part);
                let msg = e
                    .and_then(|e| {
                        e.get("data")
                            .and_then(|d| str_of(d, "message"))
                            .or_else(|| str_of(e, "message"))
                            .or_else(|| str_of(e, "name"))
                    })
                    .unwrap_or("the agent reported an error");
                p.error = Some(secrets.clean(msg));
            }
            _ => {}
        }
    }
    p.found = finished || last_text.is_some();
    p.text = last_text.unwrap_or_default();
    if finished {
        p.stop_reason = Some(match reason.as_deref() {
            None | Some("stop") => StopReason::EndTurn,
            Some("length") => StopReason::MaxTokens,
            Some("content-filter") => StopReason::Refusal,
            Some(other) => StopReason::Other(secrets.token(other)),
        });
    }
    p.usage = any_usage(&usage).then_some(usage);
    p.cost = cost.map(|amount| Cost {
        amount,
        currency: "USD".into(),
    });
    p
}

#[cfg(test)]
mod tests;
