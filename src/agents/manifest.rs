//! Agent manifests (docs/agents.md "Manifests"): one TOML file describes one agent CLI — its
//! binaries, how it is observed, run, delivered to and installed into, and which of its native
//! tools are which canonical tool. See docs/agents.md for the format.
//!
//! Owns parsing and validating manifest text into a `Manifest`, and the built-in set
//! (`builtin/*.toml`, embedded at compile time). Refuses IO: reading a manifests folder is
//! `registry.rs`'s. Every tag (parser, format, hook, delivery mode, canonical tool) names code
//! in this crate from a closed enum; a manifest picks one and never supplies one. Every
//! string that could reach an argv or a path passes `argv.rs` first.

use super::argv::{self, ArgvError, Template};
use std::collections::BTreeMap;
use std::fmt;

/// The built-in manifests: (file name, TOML text); docs/agents.md "Built-in agents" says what
/// each row rests on.
pub const BUILTIN: [(&str, &str); 5] = [
    ("claude.toml", include_str!("builtin/claude.toml")),
    ("codex.toml", include_str!("builtin/codex.toml")),
    ("gemini.toml", include_str!("builtin/gemini.toml")),
    ("opencode.toml", include_str!("builtin/opencode.toml")),
    ("droid.toml", include_str!("builtin/droid.toml")),
];

/// The name of the MCP server entry and plugin that `install` writes into agent configs.
pub const SERVER_NAME: &str = "agent-hub";

/// Longest `display` name, in characters.
pub const MAX_DISPLAY_CHARS: usize = 64;
/// Longest trust line, in characters, and most lines.
pub const MAX_TRUST_CHARS: usize = 600;
pub const MAX_TRUST_LINES: usize = 8;

/// One agent, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Manifest {
    /// `[a-z0-9][a-z0-9_-]*`, at most 32 bytes; the key that overrides match on.
    pub name: String,
    pub display: String,
    /// Binary names: found on PATH for `agents`, matched against processes for `agents ps`.
    pub binaries: Vec<String>,
    pub observe: Observe,
    pub run: Run,
    pub deliver: DeliverMode,
    pub install: Install,
    /// Native tool name → canonical tool. A native tool not listed passes through unnormalised.
    pub tools: BTreeMap<String, CanonicalTool>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observe {
    pub sessions: Sessions,
    pub transcript: Transcript,
}

/// Where an agent's sessions are found (`observe.sessions`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sessions {
    /// `~/.claude/sessions/*.json` and `~/.claude/projects/<slug>/*.jsonl`.
    ClaudeSessionsJson,
    /// Files matching `observe.glob`.
    Glob(String),
    None,
}

/// Transcript parser tags (`observe.transcript`). No parser is wired into `agents ps` yet,
/// so every tag still yields status Unknown; the tag records which format the files are in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transcript {
    AnthropicJsonl,
    CodexJsonl,
    GeminiJsonl,
    None,
}

/// How to run delegated work (`[run]`, 000 §5.3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Run {
    /// ACP launch argv; empty when the agent has no ACP mode.
    pub acp: Vec<String>,
    /// Headless argv template with exactly one `{prompt}` element; empty when none.
    pub headless: Vec<String>,
    pub outcome: Outcome,
}

/// Headless output parser tags (`run.outcome`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    ExitCode,
    ClaudeJson,
    CodexJsonl,
    GeminiJson,
    OpencodeJsonl,
}

/// Delivery modes (`deliver.mode`, 000 §5.2), fastest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeliverMode {
    /// A Stop-style hook runs `agent-hub hook stop` at the end of each turn (Claude Code, Codex,
    /// Gemini's AfterAgent, Droid). `claude-stop-hook` is accepted as an alias (docs/agents.md
    /// "Manifests").
    StopHook,
    /// The agent's plugin system calls `agent-hub drain` (OpenCode).
    PluginEvent,
    /// Typed into the agent's terminal; opt-in fallback.
    Terminal,
    /// The agent calls the hub's tools when it looks.
    Pull,
}

/// Where `install` writes (`[install]`). Paths are `~/…` or absolute, already checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Install {
    /// The MCP server registration: file and format. None: nothing to register.
    pub mcp: Option<(String, McpFormat)>,
    pub hook: HookKind,
    /// The file the hook goes into (for `opencode-plugin`, the plugin file's destination).
    /// Some exactly when `hook` is not `None`.
    pub hook_config: Option<String>,
    /// Where skills would go; None: not installed for this agent.
    pub skills_dir: Option<String>,
    /// What the user must do by hand after installing (approve, trust, restart).
    pub trust: Vec<String>,
}

/// MCP config formats `install` can edit (`install.mcp_format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum McpFormat {
    /// `mcpServers.NAME = {type:"stdio",command,args,env}` in JSON (`~/.claude.json`).
    ClaudeJson,
    /// `[mcp_servers.NAME] command, args` in TOML (`~/.codex/config.toml`).
    CodexToml,
    /// `mcpServers.NAME = {command,args}` in JSON (`~/.gemini/settings.json`).
    GeminiJson,
    /// `mcp.NAME = {type:"local",command:[argv]}` in JSON (`opencode.json`).
    OpencodeJson,
    /// `mcpServers.NAME = {type:"stdio",command,args}` in JSON (`~/.factory/mcp.json`).
    DroidJson,
}

/// Delivery hooks `install` can place (`install.hook`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HookKind {
    /// `hooks.Stop[{hooks:[{type:"command",command,timeout(s)}]}]` in a JSON settings file.
    ClaudeStop,
    /// The same shape in `~/.codex/hooks.json`.
    CodexStop,
    /// `hooks.AfterAgent[{hooks:[{type:"command",command,name,timeout(ms)}]}]`.
    GeminiAfterAgent,
    /// The same shape as Claude's, in `~/.factory/settings.json` (not verified).
    DroidStop,
    /// `integrations/opencode/agent-hub.js` copied to `hook_config`.
    OpencodePlugin,
    None,
}

impl HookKind {
    /// True for the hooks that run `agent-hub hook stop`.
    pub fn is_stop_style(self) -> bool {
        matches!(
            self,
            HookKind::ClaudeStop
                | HookKind::CodexStop
                | HookKind::GeminiAfterAgent
                | HookKind::DroidStop
        )
    }
}

/// The canonical tool vocabulary (000 §9): map a native tool only to a genuinely identical
/// operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum CanonicalTool {
    Read,
    Write,
    Edit,
    Shell,
    Grep,
    Glob,
    List,
    WebFetch,
    WebSearch,
    Todo,
    Subagent,
}

macro_rules! tags {
    ($ty:ident { $($tag:literal => $variant:expr),+ $(,)? }) => {
        impl $ty {
            /// Every tag this build knows, for messages and docs.
            pub const TAGS: &'static [&'static str] = &[$($tag),+];
            fn from_tag(s: &str) -> Option<$ty> {
                match s { $($tag => Some($variant),)+ _ => None }
            }
        }
    };
}

tags!(Transcript { "anthropic-jsonl" => Transcript::AnthropicJsonl, "codex-jsonl" => Transcript::CodexJsonl, "gemini-jsonl" => Transcript::GeminiJsonl, "none" => Transcript::None });
tags!(Outcome { "exit-code" => Outcome::ExitCode, "claude-json" => Outcome::ClaudeJson, "codex-jsonl" => Outcome::CodexJsonl, "gemini-json" => Outcome::GeminiJson, "opencode-jsonl" => Outcome::OpencodeJsonl });
tags!(DeliverMode { "stop-hook" => DeliverMode::StopHook, "claude-stop-hook" => DeliverMode::StopHook, "plugin-event" => DeliverMode::PluginEvent, "terminal" => DeliverMode::Terminal, "pull" => DeliverMode::Pull });
tags!(McpFormat { "claude-json" => McpFormat::ClaudeJson, "codex-toml" => McpFormat::CodexToml, "gemini-json" => McpFormat::GeminiJson, "opencode-json" => McpFormat::OpencodeJson, "droid-json" => McpFormat::DroidJson });
tags!(HookKind { "claude-stop" => HookKind::ClaudeStop, "codex-stop" => HookKind::CodexStop, "gemini-after-agent" => HookKind::GeminiAfterAgent, "droid-stop" => HookKind::DroidStop, "opencode-plugin" => HookKind::OpencodePlugin, "none" => HookKind::None });
tags!(CanonicalTool { "read" => CanonicalTool::Read, "write" => CanonicalTool::Write, "edit" => CanonicalTool::Edit, "shell" => CanonicalTool::Shell, "grep" => CanonicalTool::Grep, "glob" => CanonicalTool::Glob, "list" => CanonicalTool::List, "web-fetch" => CanonicalTool::WebFetch, "web-search" => CanonicalTool::WebSearch, "todo" => CanonicalTool::Todo, "subagent" => CanonicalTool::Subagent });

impl DeliverMode {
    pub fn tag(self) -> &'static str {
        match self {
            DeliverMode::StopHook => "stop-hook",
            DeliverMode::PluginEvent => "plugin-event",
            DeliverMode::Terminal => "terminal",
            DeliverMode::Pull => "pull",
        }
    }
}

impl CanonicalTool {
    pub fn tag(self) -> &'static str {
        match self {
            CanonicalTool::Read => "read",
            CanonicalTool::Write => "write",
            CanonicalTool::Edit => "edit",
            CanonicalTool::Shell => "shell",
            CanonicalTool::Grep => "grep",
            CanonicalTool::Glob => "glob",
            CanonicalTool::List => "list",
            CanonicalTool::WebFetch => "web-fetch",
            CanonicalTool::WebSearch => "web-search",
            CanonicalTool::Todo => "todo",
            CanonicalTool::Subagent => "subagent",
        }
    }
}

/// An invalid manifest: which file, which key, what is wrong. The manifest is skipped; the
/// caller reports this and carries on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManifestError {
    /// The file (or `builtin:<file>`).
    pub source: String,
    /// The dotted key, e.g. `run.headless[2]`; empty for the file as a whole.
    pub key: String,
    pub problem: String,
}

impl ManifestError {
    /// `key: problem`, without the file: what the fixtures' `.expected` files hold.
    pub fn detail(&self) -> String {
        if self.key.is_empty() {
            self.problem.clone()
        } else {
            format!("{}: {}", self.key, self.problem)
        }
    }
}

impl fmt::Display for ManifestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.source, self.detail())
    }
}

impl std::error::Error for ManifestError {}

/// A table being read: keys are taken out one by one, and whatever is left over at the end
/// is an unknown key.
struct Fields {
    prefix: String,
    table: toml::Table,
}

type Res<T> = Result<T, (String, String)>;

impl Fields {
    fn new(prefix: &str, table: toml::Table) -> Fields {
        Fields {
            prefix: prefix.to_owned(),
            table,
        }
    }

    fn key(&self, k: &str) -> String {
        if self.prefix.is_empty() {
            k.to_owned()
        } else {
            format!("{}.{k}", self.prefix)
        }
    }

    fn take(&mut self, k: &str) -> Option<toml::Value> {
        self.table.remove(k)
    }

    fn required(&mut self, k: &str) -> Res<toml::Value> {
        self.take(k)
            .ok_or_else(|| (self.key(k), "is required".to_owned()))
    }

    fn string(&mut self, k: &str) -> Res<String> {
        match self.required(k)? {
            toml::Value::String(s) => Ok(s),
            other => Err((
                self.key(k),
                format!("must be a string, not {}", other.type_str()),
            )),
        }
    }

    fn opt_string(&mut self, k: &str) -> Res<Option<String>> {
        match self.take(k) {
            None => Ok(None),
            Some(toml::Value::String(s)) => Ok(Some(s)),
            Some(other) => Err((
                self.key(k),
                format!("must be a string, not {}", other.type_str()),
            )),
        }
    }

    fn strings(&mut self, k: &str) -> Res<Vec<String>> {
        let v = self.required(k)?;
        self.strings_of(k, v)
    }

    fn strings_of(&self, k: &str, v: toml::Value) -> Res<Vec<String>> {
        let toml::Value::Array(items) = v else {
            return Err((
                self.key(k),
                format!("must be an array of strings, not {}", v.type_str()),
            ));
        };
        items
            .into_iter()
            .enumerate()
            .map(|(i, item)| match item {
                toml::Value::String(s) => Ok(s),
                other => Err((
                    format!("{}[{i}]", self.key(k)),
                    format!("must be a string, not {}", other.type_str()),
                )),
            })
            .collect()
    }

    fn table(&mut self, k: &str) -> Res<Fields> {
        match self.required(k)? {
            toml::Value::Table(t) => Ok(Fields::new(&self.key(k), t)),
            other => Err((
                self.key(k),
                format!("must be a table, not {}", other.type_str()),
            )),
        }
    }

    fn tag<T>(&mut self, k: &str, from: fn(&str) -> Option<T>, known: &[&str]) -> Res<T> {
        let s = self.string(k)?;
        from(&s).ok_or_else(|| {
            (
                self.key(k),
                format!(
                    "{s:?} is not a tag this build knows ({}); a manifest picks one, it cannot supply one",
                    known.join(", ")
                ),
            )
        })
    }

    /// Fails on the first key nobody took (sorted, so the message is stable).
    fn finish(self) -> Res<()> {
        match self.table.keys().next() {
            Some(k) => Err((self.key(k), "is not a manifest key".to_owned())),
            None => Ok(()),
        }
    }
}

fn argv_err(key: String, e: ArgvError) -> (String, String) {
    (key, e.to_string())
}

fn check_display(s: &str) -> Result<(), String> {
    if s.trim().is_empty() {
        return Err("is empty".into());
    }
    if s.chars().count() > MAX_DISPLAY_CHARS {
        return Err(format!("is longer than {MAX_DISPLAY_CHARS} characters"));
    }
    if let Some(c) = s.chars().find(|c| c.is_control()) {
        return Err(format!("holds the control character {c:?}"));
    }
    Ok(())
}

/// True for a valid manifest name: `[a-z0-9][a-z0-9_-]*`, at most 32 bytes.
pub fn valid_name(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_lowercase() || c.is_ascii_digit())
        && s.len() <= 32
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
}

fn valid_native_tool(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | ':'))
}

/// A path key: "" means none; anything else must pass `argv::check_path`.
fn opt_path(f: &mut Fields, k: &str) -> Res<Option<String>> {
    let s = f.string(k)?;
    if s.is_empty() {
        return Ok(None);
    }
    argv::check_path(&s).map_err(|e| argv_err(f.key(k), e))?;
    Ok(Some(s))
}

impl Manifest {
    /// Parses and validates one manifest. `source` names it in errors (a file path, or
    /// `builtin:<file>`).
    pub fn parse(source: &str, text: &str) -> Result<Manifest, ManifestError> {
        Manifest::parse_inner(text).map_err(|(key, problem)| ManifestError {
            source: source.to_owned(),
            key,
            problem,
        })
    }

    fn parse_inner(text: &str) -> Res<Manifest> {
        let table: toml::Table = text.parse().map_err(|e: toml::de::Error| {
            let at = e
                .span()
                .map(|s| {
                    format!(
                        " (line {})",
                        text[..s.start.min(text.len())].matches('\n').count() + 1
                    )
                })
                .unwrap_or_default();
            (
                String::new(),
                format!("not valid TOML{at}: {}", e.message()),
            )
        })?;
        let mut top = Fields::new("", table);

        let name = top.string("name")?;
        if !valid_name(&name) {
            return Err((
                "name".into(),
                format!("{name:?} must be 1-32 characters of a-z 0-9 - _, starting with a letter or digit"),
            ));
        }
        let display = top.string("display")?;
        check_display(&display).map_err(|p| ("display".to_owned(), p))?;
        let binaries = top.strings("binaries")?;
        if binaries.is_empty() {
            return Err(("binaries".into(), "needs at least one binary name".into()));
        }
        for (i, b) in binaries.iter().enumerate() {
            argv::check_binary_name(b).map_err(|e| argv_err(format!("binaries[{i}]"), e))?;
        }

        let mut obs = top.table("observe")?;
        let sessions_tag = obs.string("sessions")?;
        let glob = obs.opt_string("glob")?;
        let sessions = match (sessions_tag.as_str(), glob) {
            ("glob", Some(g)) => {
                argv::check_glob(&g).map_err(|e| argv_err(obs.key("glob"), e))?;
                Sessions::Glob(g)
            }
            ("glob", None) => {
                return Err((obs.key("glob"), "is required when sessions = \"glob\"".into()))
            }
            (_, Some(_)) => {
                return Err((obs.key("glob"), "is only allowed when sessions = \"glob\"".into()))
            }
            ("claude-sessions-json", None) => Sessions::ClaudeSessionsJson,
            ("none", None) => Sessions::None,
            (other, None) => {
                return Err((
                    obs.key("sessions"),
                    format!("{other:?} is not a tag this build knows (claude-sessions-json, glob, none); a manifest picks one, it cannot supply one"),
                ))
            }
        };
        let transcript = obs.tag("transcript", Transcript::from_tag, Transcript::TAGS)?;
        obs.finish()?;

        let mut run = top.table("run")?;
        let acp = run.strings("acp")?;
        argv::check_template(&acp, Template::Acp)
            .map_err(|(i, e)| template_err(&run, "acp", i, e))?;
        let headless = run.strings("headless")?;
        argv::check_template(&headless, Template::Headless)
            .map_err(|(i, e)| template_err(&run, "headless", i, e))?;
        let outcome = run.tag("outcome", Outcome::from_tag, Outcome::TAGS)?;
        run.finish()?;

        let mut del = top.table("deliver")?;
        let deliver = del.tag("mode", DeliverMode::from_tag, DeliverMode::TAGS)?;
        del.finish()?;

        let mut ins = top.table("install")?;
        let mcp_config = opt_path(&mut ins, "mcp_config")?;
        let mcp_format = if ins.table.contains_key("mcp_format") {
            Some(ins.tag("mcp_format", McpFormat::from_tag, McpFormat::TAGS)?)
        } else {
            None
        };
        let mcp = match (mcp_config, mcp_format) {
            (Some(p), Some(f)) => Some((p, f)),
            (None, None) => None,
            (Some(_), None) => {
                return Err((
                    ins.key("mcp_format"),
                    "is required when mcp_config is set".into(),
                ))
            }
            (None, Some(_)) => {
                return Err((
                    ins.key("mcp_format"),
                    "is only allowed when mcp_config is set".into(),
                ))
            }
        };
        let hook = ins.tag("hook", HookKind::from_tag, HookKind::TAGS)?;
        let hook_config = if ins.table.contains_key("hook_config") {
            opt_path(&mut ins, "hook_config")?
        } else {
            None
        };
        match (hook, &hook_config) {
            (HookKind::None, Some(_)) => {
                return Err((
                    ins.key("hook_config"),
                    "is only allowed when hook is not \"none\"".into(),
                ))
            }
            (HookKind::None, None) | (_, Some(_)) => {}
            (_, None) => {
                return Err((
                    ins.key("hook_config"),
                    "is required when hook is not \"none\"".into(),
                ))
            }
        }
        let skills_dir = opt_path(&mut ins, "skills_dir")?;
        let trust = match ins.take("trust") {
            None => Vec::new(),
            Some(v) => ins.strings_of("trust", v)?,
        };
        if trust.len() > MAX_TRUST_LINES {
            return Err((
                ins.key("trust"),
                format!("has more than {MAX_TRUST_LINES} lines"),
            ));
        }
        for (i, line) in trust.iter().enumerate() {
            let key = format!("{}[{i}]", ins.key("trust"));
            if line.chars().count() > MAX_TRUST_CHARS {
                return Err((key, format!("is longer than {MAX_TRUST_CHARS} characters")));
            }
            if let Some(c) = line.chars().find(|c| c.is_control()) {
                return Err((key, format!("holds the control character {c:?}")));
            }
        }
        ins.finish()?;
        // The delivery mode says how mail arrives; the hook is what makes it arrive. A mode
        // whose hook is missing would silently degrade to pull, so it is refused here.
        match deliver {
            DeliverMode::StopHook if !hook.is_stop_style() => {
                return Err((
                    "install.hook".into(),
                    "deliver.mode = \"stop-hook\" needs a stop-style hook (claude-stop, codex-stop, gemini-after-agent, droid-stop)".into(),
                ))
            }
            DeliverMode::PluginEvent if hook != HookKind::OpencodePlugin => {
                return Err((
                    "install.hook".into(),
                    "deliver.mode = \"plugin-event\" needs hook = \"opencode-plugin\"".into(),
                ))
            }
            _ => {}
        }

        let mut tools = BTreeMap::new();
        if let Some(v) = top.take("tools") {
            let toml::Value::Table(t) = v else {
                return Err((
                    "tools".into(),
                    format!("must be a table, not {}", v.type_str()),
                ));
            };
            for (native, canonical) in t {
                let key = format!("tools.{native}");
                if !valid_native_tool(&native) {
                    return Err((
                        key,
                        "a native tool name must be 1-64 characters of A-Z a-z 0-9 _ - . :".into(),
                    ));
                }
                let toml::Value::String(c) = canonical else {
                    return Err((
                        key,
                        format!("must be a string, not {}", canonical.type_str()),
                    ));
                };
                let tool = CanonicalTool::from_tag(&c).ok_or_else(|| {
                    (
                        key.clone(),
                        format!(
                            "{c:?} is not a canonical tool ({})",
                            CanonicalTool::TAGS.join(", ")
                        ),
                    )
                })?;
                tools.insert(native, tool);
            }
        }
        top.finish()?;

        Ok(Manifest {
            name,
            display,
            binaries,
            observe: Observe {
                sessions,
                transcript,
            },
            run: Run {
                acp,
                headless,
                outcome,
            },
            deliver,
            install: Install {
                mcp,
                hook,
                hook_config,
                skills_dir,
                trust,
            },
            tools,
        })
    }

    /// The canonical tool a native tool is, if the manifest maps it.
    pub fn canonical_tool(&self, native: &str) -> Option<CanonicalTool> {
        self.tools.get(native).copied()
    }
}

fn template_err(f: &Fields, k: &str, index: Option<usize>, e: ArgvError) -> (String, String) {
    let key = match index {
        Some(i) => format!("{}[{i}]", f.key(k)),
        None => f.key(k),
    };
    (key, e.to_string())
}

/// The built-in manifests, parsed. A built-in that fails to parse is a bug (a unit test
/// parses them all); it is reported like any other invalid manifest, never a panic.
pub fn builtins() -> (Vec<Manifest>, Vec<ManifestError>) {
    let mut ok = Vec::new();
    let mut bad = Vec::new();
    for (file, text) in BUILTIN {
        match Manifest::parse(&format!("builtin:{file}"), text) {
            Ok(m) => ok.push(m),
            Err(e) => bad.push(e),
        }
    }
    (ok, bad)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_builtin_parses_and_is_named_after_its_file() {
        let (ok, bad) = builtins();
        assert!(bad.is_empty(), "{bad:?}");
        let names: Vec<&str> = ok.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(names, ["claude", "codex", "gemini", "opencode", "droid"]);
        for (m, (file, _)) in ok.iter().zip(BUILTIN) {
            assert_eq!(format!("{}.toml", m.name), file);
        }
    }

    #[test]
    fn builtins_match_the_facts_file() {
        let (ok, _) = builtins();
        let get = |n: &str| ok.iter().find(|m| m.name == n).unwrap().clone();
        let claude = get("claude");
        assert_eq!(
            claude.install.mcp,
            Some(("~/.claude.json".into(), McpFormat::ClaudeJson))
        );
        assert_eq!(claude.install.hook, HookKind::ClaudeStop);
        assert_eq!(
            claude.install.hook_config.as_deref(),
            Some("~/.claude/settings.json")
        );
        assert_eq!(claude.deliver, DeliverMode::StopHook);
        let codex = get("codex");
        assert_eq!(
            codex.install.mcp,
            Some(("~/.codex/config.toml".into(), McpFormat::CodexToml))
        );
        assert_eq!(
            codex.install.hook_config.as_deref(),
            Some("~/.codex/hooks.json")
        );
        let gemini = get("gemini");
        assert_eq!(gemini.install.hook, HookKind::GeminiAfterAgent);
        assert_eq!(gemini.run.acp, ["gemini", "--acp"]);
        let opencode = get("opencode");
        assert_eq!(
            opencode.install.mcp,
            Some((
                "~/.config/opencode/opencode.json".into(),
                McpFormat::OpencodeJson
            ))
        );
        assert_eq!(opencode.deliver, DeliverMode::PluginEvent);
        assert_eq!(opencode.run.acp, ["opencode", "acp"]);
        let droid = get("droid");
        assert_eq!(
            droid.install.mcp,
            Some(("~/.factory/mcp.json".into(), McpFormat::DroidJson))
        );
        assert_eq!(claude.canonical_tool("Bash"), Some(CanonicalTool::Shell));
        assert_eq!(claude.canonical_tool("MultiEdit"), None);
    }

    #[test]
    fn errors_name_the_key() {
        let text = include_str!("builtin/claude.toml")
            .replace("\"claude\", \"-p\"", "\"claude\", \"-p;id\"");
        let e = Manifest::parse("x.toml", &text).unwrap_err();
        assert_eq!(e.key, "run.headless[1]");
        assert!(e.problem.contains("';'"), "{e}");
        assert!(e.to_string().starts_with("x.toml: run.headless[1]: "));
    }

    #[test]
    fn the_seed_delivery_name_is_accepted() {
        let text = include_str!("builtin/claude.toml")
            .replace("mode = \"stop-hook\"", "mode = \"claude-stop-hook\"");
        assert_eq!(
            Manifest::parse("x", &text).unwrap().deliver,
            DeliverMode::StopHook
        );
    }

    #[test]
    fn names() {
        for ok in ["claude", "my-agent", "a1", "9x", "a_b"] {
            assert!(valid_name(ok), "{ok}");
        }
        for bad in ["", "Claude", "-x", "_x", "a b", "a.b", &"a".repeat(33)] {
            assert!(!valid_name(bad), "{bad}");
        }
    }
}
