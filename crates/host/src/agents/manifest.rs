//! Agent manifests (docs/agents.md "Manifests"): one TOML file describes one agent CLI — its
//! binaries, how it is observed, run, delivered to and installed into, and which of its native
//! tools are which canonical tool. See docs/agents.md for the format.
//!
//! Owns parsing and validating manifest text into a `Manifest`, the defaults of the keys
//! agent-hub adds to the seed's sketch (000 §3; docs/agents.md "Defaults") — including
//! telling `install.mcp_format` from the config's file name, and which missing key `install`
//! must ask for — and the built-in set (`builtin/*.toml`, embedded at compile time). Refuses
//! IO: reading a manifests folder is `registry.rs`'s. Every tag (parser, format, hook,
//! delivery mode, canonical tool) names code in this crate from a closed enum; a manifest
//! picks one and never supplies one. Every string that could reach an argv or a path passes
//! `argv.rs` first.

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
    /// Where it was read from (a file path, or `builtin:<file>`): messages about a key the
    /// manifest must add name this file.
    pub source: String,
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
    /// Headless argv template: with `headless_prompt = argv`, exactly one `{prompt}`
    /// element; with `stdin`, none. Empty when the agent has no headless mode.
    pub headless: Vec<String>,
    pub outcome: Outcome,
    /// Where a headless run's prompt goes (`run.headless_prompt`, default `argv`).
    pub headless_prompt: PromptVia,
    /// The ACP session mode ids in which the agent asks the client before it acts, preferred
    /// first (`run.ask_modes`); None: the hub's default list (docs/acp.md "Session modes").
    pub ask_modes: Option<Vec<String>>,
    /// Extra argv elements that give a headless run the hub's MCP server and name its
    /// permission-prompt tool (`run.headless_mcp`, issue 37 design §6): `{mcp_config}` is the
    /// task's MCP config file the runner writes, `{server}` the hub's task-unique server name.
    /// None: the headless run gets no MCP server and asks nobody (as before issue 37).
    pub headless_mcp: Option<Vec<String>>,
    /// What the agent's ACP mode reports of its usage (`run.reports`, a list of `tokens`,
    /// `cost`, `context`; issue 38 design §1): a budget is checked against it. None: nothing
    /// (an agent's figures are not assumed). A headless run reports what its `run.outcome`
    /// parser reads, whatever this says (`Manifest::reports`).
    pub reports: Option<agent_hub_proto::acp::Reports>,
}

/// Where a headless run gets its prompt (`run.headless_prompt`): `argv` substitutes the
/// `{prompt}` element (every local user can read it in `/proc/<pid>/cmdline` while the agent
/// runs); `stdin` writes it to the agent's stdin and closes it, for CLIs that read their
/// prompt there (docs/delegation.md "Headless tasks").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PromptVia {
    #[default]
    Argv,
    Stdin,
}

impl PromptVia {
    /// The template rule that goes with it.
    pub fn template(self) -> argv::Template {
        match self {
            PromptVia::Argv => argv::Template::Headless,
            PromptVia::Stdin => argv::Template::HeadlessStdin,
        }
    }

    pub fn tag(self) -> &'static str {
        match self {
            PromptVia::Argv => "argv",
            PromptVia::Stdin => "stdin",
        }
    }
}

/// Headless output parser tags (`run.outcome`): the parser's own `Format`, which owns its
/// tags (PLAN.md §14: the parsing core does not import the manifests above it).
pub use agent_hub_proto::headless::parse::Format as Outcome;

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
    /// The MCP server registration. None: nothing to register (`mcp_config = ""`).
    pub mcp: Option<McpConfig>,
    /// `none` when the manifest has no `hook` key.
    pub hook: HookKind,
    /// The file the hook goes into (for `opencode-plugin`, the plugin file's destination).
    /// Some exactly when `hook` is not `None`.
    pub hook_config: Option<String>,
    /// Where skills would go; None: not installed for this agent.
    pub skills_dir: Option<String>,
    /// What the user must do by hand after installing (approve, trust, restart).
    pub trust: Vec<String>,
}

/// The file `install` registers the hub's MCP server in, and how that file is laid out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpConfig {
    /// `~/…` or absolute, already checked.
    pub path: String,
    /// `install.mcp_format`, else `infer_mcp_format(path)`. None when neither says: the
    /// manifest still loads (listing and delegation never need it), and `install` asks for
    /// the key (`Manifest::ready_to_install`).
    pub format: Option<McpFormat>,
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
tags!(PromptVia { "argv" => PromptVia::Argv, "stdin" => PromptVia::Stdin });
tags!(DeliverMode { "stop-hook" => DeliverMode::StopHook, "claude-stop-hook" => DeliverMode::StopHook, "plugin-event" => DeliverMode::PluginEvent, "terminal" => DeliverMode::Terminal, "pull" => DeliverMode::Pull });
tags!(McpFormat { "claude-json" => McpFormat::ClaudeJson, "codex-toml" => McpFormat::CodexToml, "gemini-json" => McpFormat::GeminiJson, "opencode-json" => McpFormat::OpencodeJson, "droid-json" => McpFormat::DroidJson });
tags!(HookKind { "claude-stop" => HookKind::ClaudeStop, "codex-stop" => HookKind::CodexStop, "gemini-after-agent" => HookKind::GeminiAfterAgent, "droid-stop" => HookKind::DroidStop, "opencode-plugin" => HookKind::OpencodePlugin, "none" => HookKind::None });
tags!(CanonicalTool { "read" => CanonicalTool::Read, "write" => CanonicalTool::Write, "edit" => CanonicalTool::Edit, "shell" => CanonicalTool::Shell, "grep" => CanonicalTool::Grep, "glob" => CanonicalTool::Glob, "list" => CanonicalTool::List, "web-fetch" => CanonicalTool::WebFetch, "web-search" => CanonicalTool::WebSearch, "todo" => CanonicalTool::Todo, "subagent" => CanonicalTool::Subagent });

/// The config files whose MCP format their path tells without doubt: (folder, file name,
/// format), folder "" meaning any. Each is a file one agent owns and whose layout this build
/// writes; a name several agents share with different layouts (`settings.json`, `mcp.json`,
/// `config.toml`) counts only inside the folder that makes it one agent's. A unit test checks
/// that every built-in's `mcp_config` infers the format it names.
pub const MCP_FORMAT_BY_FILE: &[(&str, &str, McpFormat)] = &[
    ("", ".claude.json", McpFormat::ClaudeJson),
    // Claude Code's project-scope file: the same `mcpServers` entries as `~/.claude.json`.
    ("", ".mcp.json", McpFormat::ClaudeJson),
    (".codex", "config.toml", McpFormat::CodexToml),
    (".gemini", "settings.json", McpFormat::GeminiJson),
    ("", "opencode.json", McpFormat::OpencodeJson),
    ("", "opencode.jsonc", McpFormat::OpencodeJson),
    (".factory", "mcp.json", McpFormat::DroidJson),
];

/// The MCP format `path`'s last two components name (`MCP_FORMAT_BY_FILE`), if any. Only a
/// whole file name (and folder) counts, never an extension alone: a `.json` file could hold
/// any of four layouts, and the wrong one would register a server the agent never reads.
pub fn infer_mcp_format(path: &str) -> Option<McpFormat> {
    let mut parts = path.rsplit('/');
    let file = parts.next()?;
    let folder = parts.next().unwrap_or("");
    MCP_FORMAT_BY_FILE
        .iter()
        .find(|(f, name, _)| *name == file && (f.is_empty() || *f == folder))
        .map(|(_, _, format)| *format)
}

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
    /// The ACP `ToolKind` a call of this tool is (issue 37 design §6: a headless prompt's
    /// kind, which a pre-approval rule matches), as the Claude adapter classifies the same
    /// tools: reads `read`; writes and edits `edit`; the shell `execute`; grep, glob and
    /// listing `search`; the web `fetch`; the to-do list and sub-agents `think`.
    pub fn acp_kind(self) -> &'static str {
        match self {
            CanonicalTool::Read => "read",
            CanonicalTool::Write | CanonicalTool::Edit => "edit",
            CanonicalTool::Shell => "execute",
            CanonicalTool::Grep | CanonicalTool::Glob | CanonicalTool::List => "search",
            CanonicalTool::WebFetch | CanonicalTool::WebSearch => "fetch",
            CanonicalTool::Todo | CanonicalTool::Subagent => "think",
        }
    }

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

/// Why a manifest's `display` name is refused (the problem text after the key).
#[derive(Debug, Clone, PartialEq, Eq)]
enum DisplayError {
    Empty,
    /// More than `MAX_DISPLAY_CHARS` characters.
    TooLong,
    Control(char),
}

impl fmt::Display for DisplayError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DisplayError::Empty => f.write_str("is empty"),
            DisplayError::TooLong => write!(f, "is longer than {MAX_DISPLAY_CHARS} characters"),
            DisplayError::Control(c) => write!(f, "holds the control character {c:?}"),
        }
    }
}

impl std::error::Error for DisplayError {}

fn check_display(s: &str) -> Result<(), DisplayError> {
    if s.trim().is_empty() {
        return Err(DisplayError::Empty);
    }
    if s.chars().count() > MAX_DISPLAY_CHARS {
        return Err(DisplayError::TooLong);
    }
    if let Some(c) = s.chars().find(|c| c.is_control()) {
        return Err(DisplayError::Control(c));
    }
    Ok(())
}

/// True for a valid manifest name (`names::valid_manifest_name`).
pub use agent_hub_proto::kernel::names::valid_manifest_name as valid_name;

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
        Manifest::parse_inner(source, text).map_err(|(key, problem)| ManifestError {
            source: source.to_owned(),
            key,
            problem,
        })
    }

    fn parse_inner(source: &str, text: &str) -> Res<Manifest> {
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
        check_display(&display).map_err(|p| ("display".to_owned(), p.to_string()))?;
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
        let headless_prompt = if run.table.contains_key("headless_prompt") {
            run.tag("headless_prompt", PromptVia::from_tag, PromptVia::TAGS)?
        } else {
            PromptVia::Argv
        };
        let headless = run.strings("headless")?;
        argv::check_template(&headless, headless_prompt.template())
            .map_err(|(i, e)| template_err(&run, "headless", i, e))?;
        let outcome = run.tag("outcome", Outcome::from_tag, Outcome::TAGS)?;
        // Ours, not the seed's (000 §3): absent, the hub's default list applies.
        let ask_modes = match run.take("ask_modes") {
            None => None,
            Some(v) => {
                let modes = run.strings_of("ask_modes", v)?;
                agent_hub_proto::acp::config::check_ask_modes(&modes)
                    .map_err(|why| (run.key("ask_modes"), why.to_string()))?;
                Some(modes)
            }
        };
        // Ours (issue 37): absent, a headless run gets no MCP server, as before.
        let headless_mcp = match run.take("headless_mcp") {
            None => None,
            Some(v) => {
                let t = run.strings_of("headless_mcp", v)?;
                if headless.is_empty() {
                    return Err((
                        run.key("headless_mcp"),
                        "needs run.headless, the argv it is added to".into(),
                    ));
                }
                argv::check_mcp_template(&t)
                    .map_err(|(i, e)| template_err(&run, "headless_mcp", i, e))?;
                Some(t)
            }
        };
        // Ours (issue 38): absent, the ACP mode is taken to report nothing.
        let reports = match run.take("reports") {
            None => None,
            Some(v) => {
                let words = run.strings_of("reports", v)?;
                let r = agent_hub_proto::acp::Reports::from_words(words.iter().map(String::as_str))
                    .map_err(|w| {
                        (
                            run.key("reports"),
                            format!(
                                "{w:?} is not one of {}",
                                agent_hub_proto::acp::Reports::WORDS.join(", ")
                            ),
                        )
                    })?;
                Some(r)
            }
        };
        run.finish()?;

        let mut del = top.table("deliver")?;
        let deliver = del.tag("mode", DeliverMode::from_tag, DeliverMode::TAGS)?;
        del.finish()?;

        let mut ins = top.table("install")?;
        let mcp_config = opt_path(&mut ins, "mcp_config")?;
        // `mcp_format`, `hook`, `hook_config` and `trust` are ours, not the seed's (000 §3): a
        // manifest written to the seed's format has none of them, and must load. Each has a
        // default (docs/agents.md "Defaults"); a key `install` cannot do without is asked for
        // by `ready_to_install`, never here.
        let mcp_format = if ins.table.contains_key("mcp_format") {
            Some(ins.tag("mcp_format", McpFormat::from_tag, McpFormat::TAGS)?)
        } else {
            None
        };
        let mcp = match (mcp_config, mcp_format) {
            (Some(path), format) => Some(McpConfig {
                format: format.or_else(|| infer_mcp_format(&path)),
                path,
            }),
            (None, None) => None,
            (None, Some(_)) => {
                return Err((
                    ins.key("mcp_format"),
                    "is only allowed when mcp_config is set".into(),
                ))
            }
        };
        let hook_given = ins.table.contains_key("hook");
        let hook = if hook_given {
            ins.tag("hook", HookKind::from_tag, HookKind::TAGS)?
        } else {
            HookKind::None
        };
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
        // The delivery mode says how mail arrives; the hook is what makes it arrive. A manifest
        // that names both and they disagree says two contradictory things, so it is refused.
        // One that names the mode only (the seed's format has no `hook` key) loads: listing
        // and delegation do not need the hook, and `install`, which would place it, asks for
        // it (`ready_to_install`) rather than silently degrading delivery to pull.
        if hook_given {
            if let Some(problem) = hook_mismatch(deliver, hook) {
                return Err(("install.hook".into(), problem.into()));
            }
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
            source: source.to_owned(),
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
                headless_prompt,
                ask_modes,
                headless_mcp,
                reports,
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

    /// What a task run in `mode` reports (issue 38 design §1): the ACP mode's `run.reports`
    /// (none when absent), a headless run's `run.outcome` format's, nothing when it cannot run.
    pub fn reports(&self, mode: super::runnable::Delegate) -> agent_hub_proto::acp::Reports {
        use super::runnable::Delegate;
        match mode {
            Delegate::Acp => self.run.reports.unwrap_or_default(),
            Delegate::Headless => self.run.outcome.reports(),
            Delegate::No => agent_hub_proto::acp::Reports::NONE,
        }
    }

    /// Ok when `agent-hub install` has every key it needs; else the first key the manifest
    /// must add, as an error naming its file. Loading never asks for these (a manifest in the
    /// seed's format lacks them): only install, which writes what they choose.
    pub fn ready_to_install(&self) -> Result<(), ManifestError> {
        match self.mcp_format_missing() {
            Some(e) => Err(e),
            None => match hook_mismatch(self.deliver, self.install.hook) {
                // `hook` absent (a `hook` given that disagrees was refused by `parse`).
                Some(problem) => Err(self.error(
                    "install.hook",
                    format!(
                        "{problem}, which install would place: add hook and hook_config, or set deliver.mode = \"pull\""
                    ),
                )),
                None => Ok(()),
            },
        }
    }

    /// The error asking for `install.mcp_format`, when `mcp_config` is set and its format is
    /// neither given nor told by the file name. `uninstall` needs it too, to find the entry.
    pub fn mcp_format_missing(&self) -> Option<ManifestError> {
        let mcp = self.install.mcp.as_ref()?;
        if mcp.format.is_some() {
            return None;
        }
        Some(self.error(
            "install.mcp_format",
            format!(
                "is needed to edit {}: its format cannot be told from the file name; add mcp_format = one of {} (docs/agents.md \"Defaults\")",
                mcp.path,
                McpFormat::TAGS.join(", ")
            ),
        ))
    }

    fn error(&self, key: &str, problem: String) -> ManifestError {
        ManifestError {
            source: self.source.clone(),
            key: key.to_owned(),
            problem,
        }
    }

    /// The canonical tool a native tool is, if the manifest maps it.
    pub fn canonical_tool(&self, native: &str) -> Option<CanonicalTool> {
        self.tools.get(native).copied()
    }
}

/// Why `hook` cannot carry `mode`'s delivery, if it cannot: a mode without its hook would
/// silently degrade to pull.
fn hook_mismatch(mode: DeliverMode, hook: HookKind) -> Option<&'static str> {
    match mode {
        DeliverMode::StopHook if !hook.is_stop_style() => Some(
            "deliver.mode = \"stop-hook\" needs a stop-style hook (claude-stop, codex-stop, gemini-after-agent, droid-stop)",
        ),
        DeliverMode::PluginEvent if hook != HookKind::OpencodePlugin => {
            Some("deliver.mode = \"plugin-event\" needs hook = \"opencode-plugin\"")
        }
        _ => None,
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
mod tests;
