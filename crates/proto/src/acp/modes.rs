//! Session modes: which mode an agent's session runs in, and whether in that mode the agent
//! asks the client before it acts (docs/acp.md "Session modes").
//!
//! Why it matters: the operator's `permission` policy answers `session/request_permission`,
//! and an agent only sends that request in a mode where it asks. The Claude Code adapter
//! (`@agentclientprotocol/claude-agent-acp` 0.101) starts its sessions in `auto`, where
//! Claude's own classifier decides every tool call and the client is never asked; codex-acp
//! 2.x starts in `agent` ("Only ask for actions detected as potentially unsafe"). So before
//! the first prompt the session is put in a mode where the agent asks.
//!
//! Owns, pure: reading what `session/new` offers (ACP v1 "Session Config Options": a
//! `configOptions[]` entry of category `mode`, set with `session/set_config_option`, which the
//! spec says a client SHOULD prefer; else ACP v1 "Session Modes": `modes {currentModeId,
//! availableModes[]}`, set with `session/set_mode`), choosing the asking mode, building the
//! request that selects it, and reading the mode back from a result or a `current_mode_update`
//! / `config_option_update`. Refuses: guessing from a mode's name or description. Those are
//! words for people, and a rewording ("Auto-approves all tools" holds "approve") must not
//! flip what the hub lets an agent do unasked. Recognition is by exact id, from the agent's
//! manifest (`run.ask_modes`) or else `FALLBACK_ASK_MODES`.

use serde_json::{json, Value};

/// The asking mode ids used when the agent's manifest names none (`run.ask_modes` absent):
/// `default` (Claude Code's adapter, "Manual: Always ask before making changes"; Gemini CLI,
/// "Prompts for approval"), `manual` (the name Claude Code 2.1.200 gave `default`, accepted by
/// the adapter as an alias) and `ask` (the ACP spec's own example: "Request permission before
/// making any changes"). Preferred in this order.
pub const FALLBACK_ASK_MODES: &[&str] = &["default", "manual", "ask"];

/// Modes (or config values) read from one offer; the rest are ignored.
pub const MAX_MODES: usize = 64;
/// Longest mode id kept; a longer one is skipped (we echo ids back in our requests).
pub const MAX_MODE_ID_BYTES: usize = 128;

/// The ACP mechanism that carries the session's mode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Control {
    /// A `configOptions[]` entry (ACP "Session Config Options"), set with
    /// `session/set_config_option {sessionId, configId, value}`.
    ConfigOption { config_id: String },
    /// `modes` (ACP "Session Modes"), set with `session/set_mode {sessionId, modeId}`.
    Modes,
}

impl Control {
    /// The request that selects a mode.
    pub fn method(&self) -> &'static str {
        match self {
            Control::ConfigOption { .. } => "session/set_config_option",
            Control::Modes => "session/set_mode",
        }
    }

    /// The params of `method()` selecting `mode` in session `sid`.
    pub fn params(&self, sid: &str, mode: &str) -> Value {
        match self {
            Control::ConfigOption { config_id } => {
                json!({"sessionId": sid, "configId": config_id, "value": mode})
            }
            Control::Modes => json!({"sessionId": sid, "modeId": mode}),
        }
    }
}

/// What `session/new` offered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Offered {
    pub control: Control,
    pub current: String,
    /// The ids (or values) the agent offers, in its order, at most `MAX_MODES`.
    pub available: Vec<String>,
}

/// The modes part of a `session/new` result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Read {
    /// Neither `modes` nor a mode config option: the agent has no modes (behaves as before).
    None,
    Offered(Offered),
    /// The agent offers modes in a shape we cannot read (which mode is current is unknown).
    Unreadable(&'static str),
}

/// Reads the modes of a `session/new` (or `session/load`) result. A mode config option wins
/// over `modes` (ACP v1 "Session Config Options": "If an Agent provides `configOptions`,
/// Clients SHOULD use them instead of the `modes` field"); an unreadable one falls back to
/// `modes`.
pub fn read(result: &Value) -> Read {
    let from_config = result
        .get("configOptions")
        .and_then(Value::as_array)
        .and_then(|opts| mode_option(opts))
        .map(read_config_option);
    let from_modes = match result.get("modes") {
        None | Some(Value::Null) => None,
        Some(m) => Some(read_modes(m)),
    };
    match (from_config, from_modes) {
        (Some(Ok(o)), _) => Read::Offered(o),
        (_, Some(Ok(o))) => Read::Offered(o),
        (Some(Err(why)), _) | (None, Some(Err(why))) => Read::Unreadable(why),
        (None, None) => Read::None,
    }
}

/// The session's mode option among `configOptions`: the first `select` of category `mode`,
/// else the first whose id is `mode` (the spec: categories "MUST NOT be required for
/// correctness", so the id is the fallback).
fn mode_option(opts: &[Value]) -> Option<&Value> {
    let select = |o: &&Value| o.get("type").and_then(Value::as_str) == Some("select");
    opts.iter()
        .filter(select)
        .find(|o| o.get("category").and_then(Value::as_str) == Some("mode"))
        .or_else(|| {
            opts.iter()
                .filter(select)
                .find(|o| o.get("id").and_then(Value::as_str) == Some("mode"))
        })
}

fn read_config_option(o: &Value) -> Result<Offered, &'static str> {
    let config_id = o
        .get("id")
        .and_then(Value::as_str)
        .filter(|s| plain_id(s))
        .ok_or("the mode config option has no usable id")?;
    let current = o
        .get("currentValue")
        .and_then(Value::as_str)
        .filter(|s| plain_id(s))
        .ok_or("the mode config option has no usable currentValue")?;
    // Values may come flat or in groups (`{group, name, options: [...]}`).
    let mut available = Vec::new();
    for v in o
        .get("options")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        match v.get("options").and_then(Value::as_array) {
            Some(group) => available.extend(group.iter().filter_map(value_id)),
            None => available.extend(value_id(v)),
        }
    }
    available.truncate(MAX_MODES);
    Ok(Offered {
        control: Control::ConfigOption {
            config_id: config_id.to_owned(),
        },
        current: current.to_owned(),
        available,
    })
}

fn value_id(v: &Value) -> Option<String> {
    v.get("value")
        .and_then(Value::as_str)
        .filter(|s| plain_id(s))
        .map(str::to_owned)
}

fn read_modes(m: &Value) -> Result<Offered, &'static str> {
    let current = m
        .get("currentModeId")
        .and_then(Value::as_str)
        .filter(|s| plain_id(s))
        .ok_or("modes has no usable currentModeId")?;
    let list = m
        .get("availableModes")
        .and_then(Value::as_array)
        .ok_or("modes has no availableModes array")?;
    let available = list
        .iter()
        .filter_map(|e| e.get("id").and_then(Value::as_str))
        .filter(|s| plain_id(s))
        .take(MAX_MODES)
        .map(str::to_owned)
        .collect();
    Ok(Offered {
        control: Control::Modes,
        current: current.to_owned(),
        available,
    })
}

/// A mode id we can keep and echo: non-empty, bounded, no control characters.
fn plain_id(s: &str) -> bool {
    !s.is_empty() && s.len() <= MAX_MODE_ID_BYTES && !s.chars().any(char::is_control)
}

/// What to do with an offer, given the asking ids (preferred first).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// The current mode is an asking one: nothing to send.
    Keep,
    /// Select this asking mode before the prompt.
    Switch(String),
    /// No asking mode is offered and the current one does not ask.
    NoAskingMode,
}

pub fn plan(offered: &Offered, ask: &[String]) -> Plan {
    if asks(&offered.current, ask) {
        return Plan::Keep;
    }
    ask.iter()
        .find(|a| offered.available.iter().any(|m| m == *a))
        .map_or(Plan::NoAskingMode, |a| Plan::Switch(a.clone()))
}

/// True when `mode` is one of the asking ids (exact, case-sensitive: ACP ids are opaque).
pub fn asks(mode: &str, ask: &[String]) -> bool {
    ask.iter().any(|a| a == mode)
}

/// The mode a `session/set_config_option` result reports (the spec: it "MUST respond with the
/// complete list of all configuration options and their current values"); None when the
/// result does not say (a `session/set_mode` result is `{}`).
pub fn reported_by_result(control: &Control, result: &Value) -> Option<String> {
    let Control::ConfigOption { config_id } = control else {
        return None;
    };
    config_value(result.get("configOptions")?, config_id)
}

/// The mode a `session/update` reports: `current_mode_update` (`currentModeId`; the spec's
/// prose example says `modeId`, both are read) for either control, `config_option_update`
/// (`configOptions`, the complete state) for the option we control. None for any other update.
pub fn reported_by_update(control: &Control, update: &Value) -> Option<String> {
    match update.get("sessionUpdate").and_then(Value::as_str)? {
        "current_mode_update" => update
            .get("currentModeId")
            .or_else(|| update.get("modeId"))
            .and_then(Value::as_str)
            .filter(|s| plain_id(s))
            .map(str::to_owned),
        "config_option_update" => match control {
            Control::ConfigOption { config_id } => {
                config_value(update.get("configOptions")?, config_id)
            }
            Control::Modes => None,
        },
        _ => None,
    }
}

fn config_value(opts: &Value, config_id: &str) -> Option<String> {
    opts.as_array()?
        .iter()
        .find(|o| o.get("id").and_then(Value::as_str) == Some(config_id))?
        .get("currentValue")
        .and_then(Value::as_str)
        .filter(|s| plain_id(s))
        .map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    fn fallback() -> Vec<String> {
        ids(FALLBACK_ASK_MODES)
    }

    /// `session/new` of `@agentclientprotocol/claude-agent-acp` 0.101.0, recorded here
    /// (models and the non-mode config options cut).
    fn claude_0101() -> Value {
        json!({"sessionId":"8201ef6f","modes":{"currentModeId":"auto","availableModes":[
            {"id":"default","name":"Manual","description":"Always ask before making changes"},
            {"id":"acceptEdits","name":"Accept edits","description":"Automatically accept all file edits"},
            {"id":"plan","name":"Plan","description":"Create a plan before making changes"},
            {"id":"auto","name":"Auto","description":"Claude handles permission decisions"},
            {"id":"bypassPermissions","name":"Bypass permissions","description":"Accepts all permissions"}]},
          "configOptions":[{"id":"mode","name":"Mode","description":"Session permission mode","category":"mode","type":"select","currentValue":"auto","options":[
            {"value":"default","name":"Manual","description":"Always ask before making changes"},
            {"value":"acceptEdits","name":"Accept edits"},{"value":"plan","name":"Plan"},
            {"value":"auto","name":"Auto"},{"value":"bypassPermissions","name":"Bypass permissions"}]},
            {"id":"model","name":"Model","category":"model","type":"select","currentValue":"default","options":[{"value":"default","name":"Default (recommended)"}]}]})
    }

    #[test]
    fn a_mode_config_option_is_preferred_to_modes() {
        let Read::Offered(o) = read(&claude_0101()) else {
            panic!()
        };
        assert_eq!(
            o.control,
            Control::ConfigOption {
                config_id: "mode".into()
            }
        );
        assert_eq!(o.current, "auto");
        assert_eq!(
            o.available,
            [
                "default",
                "acceptEdits",
                "plan",
                "auto",
                "bypassPermissions"
            ]
        );
        assert_eq!(plan(&o, &fallback()), Plan::Switch("default".into()));
        assert_eq!(o.control.method(), "session/set_config_option");
        assert_eq!(
            o.control.params("s1", "default"),
            json!({"sessionId":"s1","configId":"mode","value":"default"})
        );
    }

    #[test]
    fn modes_alone_gemini_0_61() {
        // Gemini CLI 0.61.0 `--acp`, recorded here: modes only, already asking.
        let r = json!({"sessionId":"g","modes":{"availableModes":[
            {"id":"default","name":"Default","description":"Prompts for approval"},
            {"id":"autoEdit","name":"Auto Edit","description":"Auto-approves edit tools"},
            {"id":"yolo","name":"YOLO","description":"Auto-approves all tools"},
            {"id":"plan","name":"Plan","description":"Read-only mode"}],"currentModeId":"default"}});
        let Read::Offered(o) = read(&r) else { panic!() };
        assert_eq!(o.control, Control::Modes);
        assert_eq!(plan(&o, &fallback()), Plan::Keep);
        assert_eq!(
            o.control.params("s", "default"),
            json!({"sessionId":"s","modeId":"default"})
        );
    }

    #[test]
    fn codex_acp_2_6_starts_in_agent_and_asks_in_read_only() {
        let r = json!({"sessionId":"c","modes":{"currentModeId":"agent","availableModes":[
            {"id":"read-only"},{"id":"workspace-write"},{"id":"agent"},{"id":"agent-full-access"}]},
            "configOptions":[{"id":"mode","category":"mode","type":"select","currentValue":"agent","options":[
            {"value":"read-only","name":"Read-only"},{"value":"workspace-write","name":"Workspace access"},
            {"value":"agent","name":"Auto review"},{"value":"agent-full-access","name":"Full access"}]}]});
        let Read::Offered(o) = read(&r) else { panic!() };
        // Not one of the fallback ids: without the manifest's list, no asking mode is known.
        assert_eq!(plan(&o, &fallback()), Plan::NoAskingMode);
        assert_eq!(
            plan(&o, &ids(&["read-only"])),
            Plan::Switch("read-only".into())
        );
    }

    #[test]
    fn opencode_offers_a_mode_option_without_modes() {
        // OpenCode 1.18.33 `opencode acp`, recorded here: its modes are agents.
        let r = json!({"sessionId":"o","configOptions":[
            {"id":"model","name":"Model","category":"model","type":"select","currentValue":"m","options":[{"value":"m","name":"m"}]},
            {"id":"mode","name":"Session Mode","category":"mode","type":"select","currentValue":"build","options":[
              {"value":"build","name":"build","description":"The default agent. Executes tools based on configured permissions."},
              {"value":"plan","name":"plan","description":"Plan mode. Disallows all edit tools."}]}]});
        let Read::Offered(o) = read(&r) else { panic!() };
        assert_eq!(o.current, "build");
        assert_eq!(plan(&o, &fallback()), Plan::NoAskingMode);
        assert_eq!(plan(&o, &ids(&["build"])), Plan::Keep);
    }

    #[test]
    fn preference_order_is_the_ask_lists() {
        let o = Offered {
            control: Control::Modes,
            current: "yolo".into(),
            available: ids(&["ask", "manual", "yolo"]),
        };
        assert_eq!(plan(&o, &fallback()), Plan::Switch("manual".into()));
        assert_eq!(plan(&o, &ids(&[])), Plan::NoAskingMode);
        // Exact ids: a differently cased id is another mode.
        assert!(!asks("Default", &fallback()));
    }

    #[test]
    fn no_modes_and_unreadable_modes() {
        assert_eq!(read(&json!({"sessionId":"x"})), Read::None);
        assert_eq!(read(&json!({"sessionId":"x","modes":null})), Read::None);
        // A config list without a mode option is not modes.
        assert_eq!(
            read(
                &json!({"configOptions":[{"id":"model","type":"select","currentValue":"a","options":[]}]})
            ),
            Read::None
        );
        for bad in [
            json!({"modes": 3}),
            json!({"modes": {"availableModes": []}}),
            json!({"modes": {"currentModeId": 7, "availableModes": []}}),
            json!({"modes": {"currentModeId": "a"}}),
            json!({"modes": {"currentModeId": "x".repeat(MAX_MODE_ID_BYTES + 1), "availableModes": []}}),
            json!({"modes": {"currentModeId": "a\nb", "availableModes": []}}),
            json!({"configOptions":[{"id":"mode","type":"select","currentValue":true}]}),
        ] {
            assert!(matches!(read(&bad), Read::Unreadable(_)), "{bad}");
        }
        // An unreadable config option falls back to readable modes.
        let r = json!({"configOptions":[{"id":"mode","type":"select","currentValue":null}],
                       "modes":{"currentModeId":"default","availableModes":[{"id":"default"}]}});
        assert!(matches!(
            read(&r),
            Read::Offered(Offered {
                control: Control::Modes,
                ..
            })
        ));
    }

    #[test]
    fn hostile_offers_are_bounded() {
        let many: Vec<Value> = (0..1000)
            .map(|i| json!({"id": format!("m{i}")}))
            .chain([
                json!({"id": "y".repeat(10_000)}),
                json!({"id": 5}),
                json!("x"),
            ])
            .collect();
        let r = json!({"modes":{"currentModeId":"m1","availableModes":many}});
        let Read::Offered(o) = read(&r) else { panic!() };
        assert_eq!(o.available.len(), MAX_MODES);
        assert!(o.available.iter().all(|m| m.len() <= MAX_MODE_ID_BYTES));
        // Grouped config values are read too.
        let g = json!({"configOptions":[{"id":"m","category":"mode","type":"select","currentValue":"a",
            "options":[{"group":"g1","name":"G","options":[{"value":"a"},{"value":"ask"}]},{"value":"z"}]}]});
        let Read::Offered(o) = read(&g) else { panic!() };
        assert_eq!(o.available, ["a", "ask", "z"]);
        assert_eq!(plan(&o, &fallback()), Plan::Switch("ask".into()));
    }

    #[test]
    fn reported_modes() {
        let cfg = Control::ConfigOption {
            config_id: "mode".into(),
        };
        let upd = json!({"sessionUpdate":"current_mode_update","currentModeId":"default"});
        assert_eq!(reported_by_update(&cfg, &upd).as_deref(), Some("default"));
        assert_eq!(
            reported_by_update(&Control::Modes, &upd).as_deref(),
            Some("default")
        );
        let spec_prose = json!({"sessionUpdate":"current_mode_update","modeId":"code"});
        assert_eq!(
            reported_by_update(&Control::Modes, &spec_prose).as_deref(),
            Some("code")
        );
        let co = json!({"sessionUpdate":"config_option_update","configOptions":[
            {"id":"model","currentValue":"x"},{"id":"mode","currentValue":"acceptEdits"}]});
        assert_eq!(
            reported_by_update(&cfg, &co).as_deref(),
            Some("acceptEdits")
        );
        assert_eq!(reported_by_update(&Control::Modes, &co), None);
        assert_eq!(
            reported_by_update(&cfg, &json!({"sessionUpdate":"plan"})),
            None
        );
        let result = json!({"configOptions":[{"id":"mode","currentValue":"default"}]});
        assert_eq!(
            reported_by_result(&cfg, &result).as_deref(),
            Some("default")
        );
        assert_eq!(reported_by_result(&cfg, &json!({})), None);
        assert_eq!(reported_by_result(&Control::Modes, &result), None);
    }
}
