//! The JSON a Stop / AfterAgent hook reads on stdin (docs/delivery.md "What it does", samples
//! in `protocol/hooks/`). Owns pulling out the few fields the hub's hook acts on — session id,
//! event name, `stop_hook_active` — from objects whose other fields differ per agent and
//! version. Pure: bytes in, `HookInput` out.
//!
//! Refuses to guess: a known field of the wrong type counts as absent. Unknown fields are
//! ignored, missing ones take their defaults, and empty input is an empty object (a hook run
//! by hand, or by an agent that sends nothing).

use serde_json::{Map, Value};
use std::fmt;

/// Which agent most likely wrote the input, from the fields only it sends. For logs only:
/// the hook behaves the same for all of them (docs/delivery.md "What it does").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HookAgent {
    ClaudeCode,
    Codex,
    Gemini,
    Unknown,
}

impl HookAgent {
    pub fn as_str(self) -> &'static str {
        match self {
            HookAgent::ClaudeCode => "claude",
            HookAgent::Codex => "codex",
            HookAgent::Gemini => "gemini",
            HookAgent::Unknown => "unknown",
        }
    }
}

/// The hook event the input names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HookEvent {
    /// Claude Code and Codex (and Droid, by its docs).
    Stop,
    /// Gemini CLI.
    AfterAgent,
    /// Any other event, e.g. `SubagentStop`: mail is for the main agent, not a subagent.
    Other(String),
    /// No event name: assumed to be a stop, since someone configured this as a stop hook.
    Missing,
}

/// What the hook acts on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookInput {
    pub session_id: Option<String>,
    pub event: HookEvent,
    /// True when the agent is already continuing because a stop hook blocked: blocking again
    /// is allowed only for new mail, and only up to the block cap.
    pub stop_hook_active: bool,
    pub agent: HookAgent,
}

impl HookInput {
    /// Whether this is an end-of-turn event the hook delivers on.
    pub fn is_stop(&self) -> bool {
        matches!(
            self.event,
            HookEvent::Stop | HookEvent::AfterAgent | HookEvent::Missing
        )
    }
}

/// Why the input could not be read at all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HookInputError {
    /// Not JSON; the parser's message.
    NotJson(String),
    /// JSON, but not an object.
    NotAnObject(&'static str),
}

impl fmt::Display for HookInputError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HookInputError::NotJson(e) => write!(f, "hook input is not JSON: {e}"),
            HookInputError::NotAnObject(t) => write!(f, "hook input is a JSON {t}, not an object"),
        }
    }
}

impl std::error::Error for HookInputError {}

/// Parses a hook's stdin. Field names are the snake_case ones Claude, Codex and Gemini send;
/// camelCase spellings are accepted too because Droid's docs disagree on casing.
pub fn parse_hook_input(bytes: &[u8]) -> Result<HookInput, HookInputError> {
    let empty = Map::new();
    let value: Value;
    let obj = if bytes.iter().all(u8::is_ascii_whitespace) {
        &empty
    } else {
        value =
            serde_json::from_slice(bytes).map_err(|e| HookInputError::NotJson(e.to_string()))?;
        match &value {
            Value::Object(m) => m,
            Value::Array(_) => return Err(HookInputError::NotAnObject("array")),
            Value::String(_) => return Err(HookInputError::NotAnObject("string")),
            Value::Number(_) => return Err(HookInputError::NotAnObject("number")),
            Value::Bool(_) => return Err(HookInputError::NotAnObject("boolean")),
            Value::Null => return Err(HookInputError::NotAnObject("null")),
        }
    };
    let session_id = string_field(obj, &["session_id", "sessionId"])
        .filter(|s| !s.is_empty())
        .map(str::to_owned);
    let event = match string_field(obj, &["hook_event_name", "hookEventName"]) {
        None => HookEvent::Missing,
        Some(name) if name.eq_ignore_ascii_case("Stop") => HookEvent::Stop,
        Some(name) if name.eq_ignore_ascii_case("AfterAgent") => HookEvent::AfterAgent,
        Some(name) => HookEvent::Other(name.to_owned()),
    };
    let stop_hook_active = obj
        .get("stop_hook_active")
        .or_else(|| obj.get("stopHookActive"))
        .map(truthy)
        .unwrap_or(false);
    let agent = infer_agent(obj, &event);
    Ok(HookInput {
        session_id,
        event,
        stop_hook_active,
        agent,
    })
}

fn string_field<'a>(obj: &'a Map<String, Value>, names: &[&str]) -> Option<&'a str> {
    names.iter().find_map(|n| obj.get(*n)?.as_str())
}

/// `true`, or the strings "true"/"1" that a shell-built input might carry. Anything else is
/// false: when unsure, the hook treats the stop as fresh, and the block cap still bounds loops
/// because a fresh stop only ever blocks once before the agent reports `stop_hook_active`.
fn truthy(v: &Value) -> bool {
    match v {
        Value::Bool(b) => *b,
        Value::String(s) => s.eq_ignore_ascii_case("true") || s == "1",
        Value::Number(n) => n.as_u64() == Some(1),
        _ => false,
    }
}

/// Fields seen only from one agent (the samples in `protocol/hooks/`).
fn infer_agent(obj: &Map<String, Value>, event: &HookEvent) -> HookAgent {
    if *event == HookEvent::AfterAgent || obj.contains_key("prompt_response") {
        HookAgent::Gemini
    } else if obj.contains_key("turn_id") {
        HookAgent::Codex
    } else if obj.contains_key("prompt_id")
        || obj.contains_key("effort")
        || obj.contains_key("background_tasks")
    {
        HookAgent::ClaudeCode
    } else {
        HookAgent::Unknown
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The recorded samples, as shipped in protocol/hooks/.
    const CLAUDE: &str = include_str!("../../../../protocol/hooks/claude.json");
    const CODEX: &str = include_str!("../../../../protocol/hooks/codex.json");
    const GEMINI: &str = include_str!("../../../../protocol/hooks/gemini.json");

    #[test]
    fn claude_stop_sample() {
        let h = parse_hook_input(CLAUDE.as_bytes()).unwrap();
        assert_eq!(h.event, HookEvent::Stop);
        assert_eq!(h.agent, HookAgent::ClaudeCode);
        assert!(!h.stop_hook_active);
        assert!(h.session_id.as_deref().unwrap().starts_with("2da0171f"));
        assert!(h.is_stop());
    }

    #[test]
    fn codex_stop_sample() {
        let h = parse_hook_input(CODEX.as_bytes()).unwrap();
        assert_eq!(h.event, HookEvent::Stop);
        assert_eq!(h.agent, HookAgent::Codex);
        assert!(!h.stop_hook_active);
        assert!(h.session_id.as_deref().unwrap().starts_with("01a228b5"));
    }

    #[test]
    fn gemini_after_agent_sample() {
        let h = parse_hook_input(GEMINI.as_bytes()).unwrap();
        assert_eq!(h.event, HookEvent::AfterAgent);
        assert_eq!(h.agent, HookAgent::Gemini);
        assert!(!h.stop_hook_active);
        assert!(h.is_stop());
    }

    #[test]
    fn samples_with_stop_hook_active_true() {
        for sample in [CLAUDE, CODEX, GEMINI] {
            let active = sample.replace("\"stop_hook_active\":false", "\"stop_hook_active\":true");
            assert_ne!(active, sample, "sample must carry stop_hook_active");
            assert!(
                parse_hook_input(active.as_bytes())
                    .unwrap()
                    .stop_hook_active
            );
        }
    }

    #[test]
    fn empty_input_is_an_empty_object() {
        for input in ["", "  \n", "{}"] {
            let h = parse_hook_input(input.as_bytes()).unwrap();
            assert_eq!(h.session_id, None);
            assert_eq!(h.event, HookEvent::Missing);
            assert!(!h.stop_hook_active);
            assert!(h.is_stop());
        }
    }

    #[test]
    fn unknown_fields_and_wrong_types_are_tolerated() {
        let h = parse_hook_input(
            br#"{"session_id":42,"hook_event_name":"Stop","stop_hook_active":"yes","new":{"x":[1]}}"#,
        )
        .unwrap();
        assert_eq!(h.session_id, None, "a number is not a session id");
        assert!(!h.stop_hook_active, "only true, \"true\" or 1 count");
        assert_eq!(h.agent, HookAgent::Unknown);
    }

    #[test]
    fn camel_case_spellings() {
        let h =
            parse_hook_input(br#"{"sessionId":"s1","hookEventName":"Stop","stopHookActive":true}"#)
                .unwrap();
        assert_eq!(h.session_id.as_deref(), Some("s1"));
        assert_eq!(h.event, HookEvent::Stop);
        assert!(h.stop_hook_active);
    }

    #[test]
    fn string_true_counts() {
        let h = parse_hook_input(br#"{"stop_hook_active":"true"}"#).unwrap();
        assert!(h.stop_hook_active);
    }

    #[test]
    fn other_events_are_not_stops() {
        let h = parse_hook_input(br#"{"hook_event_name":"SubagentStop"}"#).unwrap();
        assert_eq!(h.event, HookEvent::Other("SubagentStop".into()));
        assert!(!h.is_stop());
    }

    #[test]
    fn empty_session_id_is_none() {
        let h = parse_hook_input(br#"{"session_id":""}"#).unwrap();
        assert_eq!(h.session_id, None);
    }

    #[test]
    fn not_json_and_not_objects_are_errors() {
        assert!(matches!(
            parse_hook_input(b"{not json"),
            Err(HookInputError::NotJson(_))
        ));
        assert_eq!(
            parse_hook_input(b"[1,2]"),
            Err(HookInputError::NotAnObject("array"))
        );
        assert_eq!(
            parse_hook_input(b"null"),
            Err(HookInputError::NotAnObject("null"))
        );
    }
}
