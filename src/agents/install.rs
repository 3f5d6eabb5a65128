//! `agent-hub install` / `uninstall`: register the hub's MCP server in an agent's user-scope
//! config, place its delivery hook or plugin and (for agents with `install.skills_dir`) the
//! shipped skills; and take exactly those out again.
//!
//! Two halves. `plan` is pure: given a manifest, what to do and a way to read files, it returns
//! each file's text before and after, and what it did in words; it never writes. `apply`
//! does the IO: it re-reads every file (refusing if one changed meanwhile), keeps a backup
//! `<file>.agent-hub.bak` of each existing file an install changes, and writes atomically
//! (temporary file, fsync, rename; through a symlink to its target; the old mode kept).
//!
//! What is "ours": the MCP entry named `agent-hub`, a hook whose command runs
//! `…/agent-hub hook stop`, the plugin file named in the manifest, and a skill file
//! `<skills_dir>/<skill>/SKILL.md` whose last line is our stamp and still matches the text
//! above it. Uninstall removes only those, then any object or array that removal left empty,
//! then a file left holding nothing but `{}` (or nothing at all), then a skill's folder left
//! empty. A skill file edited after install (or one we did not write) is never overwritten or
//! removed: it is left as it is and the notes say so. Refuses to forge trust: what the user
//! must approve by hand is printed from the manifest's `install.trust`, never written into the
//! agent's config.

use super::argv;
use super::jsonedit::{self, Seg, J};
use super::manifest::{HookKind, Manifest, McpFormat, SERVER_NAME};
use super::tomledit;
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Path, PathBuf};

/// Seconds a Stop hook may run (Claude Code, Codex, Droid count seconds).
pub const HOOK_TIMEOUT_SECS: i64 = 30;
/// The same for Gemini, which counts milliseconds.
pub const HOOK_TIMEOUT_MS: i64 = 30_000;
/// Suffix of the backup kept beside each file an install changes.
pub const BACKUP_SUFFIX: &str = ".agent-hub.bak";
/// Where the OpenCode plugin source is looked for, under an integrations folder.
pub const OPENCODE_PLUGIN_SOURCE: &str = "opencode/agent-hub.js";
/// The file name of a skill inside its folder (Claude Code: `~/.claude/skills/<name>/SKILL.md`).
pub const SKILL_FILE: &str = "SKILL.md";
/// The line of a skill source that install replaces with the installing identity.
pub const SKILL_IDENTITY_MARKER: &str = "<!-- agent-hub install: identity -->";
const STAMP_PREFIX: &str = "<!-- agent-hub install: sha256 ";
const STAMP_SUFFIX: &str = "; an edited copy is left alone by install and uninstall -->";

/// A skill shipped in the repository's `skills/<name>/SKILL.md`, compiled in so an installed
/// binary places it without a checkout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Skill {
    /// The folder name, equal to the `name` in the front matter.
    pub name: &'static str,
    pub source: &'static str,
}

/// The skills `install` places into an agent's `install.skills_dir`.
pub const SKILLS: [Skill; 2] = [
    Skill {
        name: "agent-hub-orchestrator",
        source: include_str!("../../skills/agent-hub-orchestrator/SKILL.md"),
    },
    Skill {
        name: "agent-hub-resident",
        source: include_str!("../../skills/agent-hub-resident/SKILL.md"),
    },
];

/// Who the installed MCP server and hook authenticate as, and with what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HubIdentity {
    /// The `agent-hub` binary agents run: an absolute path.
    pub command: String,
    pub name: String,
    /// Absolute.
    pub token_file: String,
    pub port: u16,
}

impl HubIdentity {
    /// Checks what cannot be repaired later: an absolute command and token path, and a name
    /// the hub could have on its roster and that reads the same inside a hook command line.
    pub fn validate(&self) -> Result<(), String> {
        if !self.command.starts_with('/') {
            return Err(format!(
                "the hub command {:?} must be an absolute path",
                self.command
            ));
        }
        if !self.token_file.starts_with('/') {
            return Err(format!(
                "--token-file {:?} must be an absolute path",
                self.token_file
            ));
        }
        argv::check_arg(&self.name).map_err(|e| format!("--as {:?} {e}", self.name))?;
        if self.name.starts_with('-') {
            return Err(format!("--as {:?} must not start with '-'", self.name));
        }
        if self.name.eq_ignore_ascii_case("hub") {
            return Err("--as hub: the name \"hub\" is reserved for the hub itself".into());
        }
        if self.port == 0 {
            return Err("--port must be the hub's port, not 0".into());
        }
        Ok(())
    }

    /// The MCP server's arguments: `mcp --as NAME --token-file F --port P`.
    pub fn mcp_args(&self) -> Vec<String> {
        vec![
            "mcp".into(),
            "--as".into(),
            self.name.clone(),
            "--token-file".into(),
            self.token_file.clone(),
            "--port".into(),
            self.port.to_string(),
        ]
    }

    /// The Stop hook's command line, which the agent runs through its shell.
    pub fn hook_command(&self) -> String {
        format!(
            "{} hook stop --as {} --token-file {} --port {}",
            argv::shell_word(&self.command),
            argv::shell_word(&self.name),
            argv::shell_word(&self.token_file),
            self.port
        )
    }
}

/// What to do.
#[derive(Debug, Clone)]
pub enum Action {
    Install {
        id: HubIdentity,
        /// The OpenCode plugin's source text, when it was found.
        plugin_source: Option<String>,
        /// Place the skills (for agents with `install.skills_dir`); false for `--no-skills`,
        /// which leaves any skill files alone.
        skills: bool,
    },
    Uninstall,
}

impl Action {
    fn is_install(&self) -> bool {
        matches!(self, Action::Install { .. })
    }
}

/// One file's change. `None` on either side: the file does not exist (before) or is removed
/// (after).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileChange {
    pub path: PathBuf,
    /// `~/…` when under home, for messages.
    pub shown: String,
    pub before: Option<String>,
    pub after: Option<String>,
    /// When the file is removed, also remove its folder if that is left empty (a skill's own
    /// folder).
    pub remove_empty_dir: bool,
}

/// What `plan` decided for one agent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AgentPlan {
    pub agent: String,
    /// Files that change, in the order first touched.
    pub changes: Vec<FileChange>,
    /// One line per entry: what was (or would be) done.
    pub notes: Vec<String>,
    /// Set when the agent cannot be done; then `changes` is empty and nothing is written.
    pub error: Option<String>,
}

/// Expands a manifest path (`~/…` or absolute, already checked) against `home`.
pub fn expand(path: &str, home: &Path) -> PathBuf {
    match path.strip_prefix("~/") {
        Some(rest) => home.join(rest),
        None => PathBuf::from(path),
    }
}

/// `~/…` for a path under `home`, else the path.
pub fn shown(path: &Path, home: &Path) -> String {
    match path.strip_prefix(home) {
        Ok(rest) => format!("~/{}", rest.display()),
        Err(_) => path.display().to_string(),
    }
}

/// Files as the plan sees them: read once each, then the plan's own edits.
struct Work<'r> {
    home: PathBuf,
    read: &'r dyn Fn(&Path) -> io::Result<Option<String>>,
    /// path → (original, current)
    files: BTreeMap<PathBuf, (Option<String>, Option<String>)>,
    order: Vec<PathBuf>,
    /// Files whose folder goes too when the file is removed and the folder is left empty.
    prune: BTreeSet<PathBuf>,
}

impl Work<'_> {
    fn get(&mut self, path: &Path) -> Result<Option<String>, String> {
        if let Some((_, cur)) = self.files.get(path) {
            return Ok(cur.clone());
        }
        let text = (self.read)(path)
            .map_err(|e| format!("{}: cannot read: {e}", shown(path, &self.home)))?;
        self.files
            .insert(path.to_owned(), (text.clone(), text.clone()));
        self.order.push(path.to_owned());
        Ok(text)
    }

    fn put(&mut self, path: &Path, text: Option<String>) {
        if let Some(slot) = self.files.get_mut(path) {
            slot.1 = text;
        }
    }

    fn changes(self) -> Vec<FileChange> {
        let home = self.home;
        let mut files = self.files;
        self.order
            .into_iter()
            .filter_map(|p| {
                let (before, after) = files.remove(&p)?;
                (before != after).then(|| FileChange {
                    shown: shown(&p, &home),
                    remove_empty_dir: self.prune.contains(&p),
                    path: p,
                    before,
                    after,
                })
            })
            .collect()
    }
}

/// Plans `action` for one agent. `read` returns a file's text, `Ok(None)` when it does not
/// exist.
pub fn plan(
    m: &Manifest,
    action: &Action,
    home: &Path,
    read: &dyn Fn(&Path) -> io::Result<Option<String>>,
) -> AgentPlan {
    let mut work = Work {
        home: home.to_owned(),
        read,
        files: BTreeMap::new(),
        order: Vec::new(),
        prune: BTreeSet::new(),
    };
    let mut notes = Vec::new();
    let result = plan_mcp(m, action, &mut work, &mut notes)
        .and_then(|()| plan_hook(m, action, &mut work, &mut notes))
        .and_then(|()| plan_skills(m, action, &mut work, &mut notes));
    match result {
        Ok(()) => AgentPlan {
            agent: m.name.clone(),
            changes: work.changes(),
            notes,
            error: None,
        },
        Err(e) => AgentPlan {
            agent: m.name.clone(),
            changes: Vec::new(),
            notes,
            error: Some(e),
        },
    }
}

/// The MCP server entry for `format`, as JSON.
fn mcp_entry(format: McpFormat, id: &HubIdentity) -> J {
    let args = J::Arr(id.mcp_args().into_iter().map(J::Str).collect());
    match format {
        McpFormat::ClaudeJson => J::obj(vec![
            ("type", J::str("stdio")),
            ("command", J::str(&id.command)),
            ("args", args),
            ("env", J::Obj(Vec::new())),
        ]),
        McpFormat::GeminiJson => J::obj(vec![("command", J::str(&id.command)), ("args", args)]),
        McpFormat::DroidJson => J::obj(vec![
            ("type", J::str("stdio")),
            ("command", J::str(&id.command)),
            ("args", args),
        ]),
        McpFormat::OpencodeJson => {
            let mut argv = vec![J::str(&id.command)];
            argv.extend(id.mcp_args().into_iter().map(J::Str));
            J::obj(vec![("type", J::str("local")), ("command", J::Arr(argv))])
        }
        // Not JSON; handled by `plan_mcp` directly.
        McpFormat::CodexToml => J::Obj(Vec::new()),
    }
}

fn mcp_parent(format: McpFormat) -> &'static str {
    match format {
        McpFormat::OpencodeJson => "mcp",
        McpFormat::CodexToml => "mcp_servers",
        _ => "mcpServers",
    }
}

/// A JSON file left as nothing but `{}` after an uninstall goes away (see the module doc).
fn json_leftover(text: String) -> Option<String> {
    (text.trim() != "{}").then_some(text)
}

fn plan_mcp(
    m: &Manifest,
    action: &Action,
    work: &mut Work,
    notes: &mut Vec<String>,
) -> Result<(), String> {
    let Some((path, format)) = &m.install.mcp else {
        return Ok(());
    };
    let path = expand(path, &work.home);
    let show = shown(&path, &work.home);
    let parent = mcp_parent(*format);
    let what = format!("MCP server {SERVER_NAME:?} ({parent}.{SERVER_NAME})");
    let text = work.get(&path)?;
    let fail = |e: String| format!("{show}: {e}");
    if *format == McpFormat::CodexToml {
        let key = [parent, SERVER_NAME];
        let cur = text.clone().unwrap_or_default();
        match action {
            Action::Install { id, .. } => {
                let args = toml::Value::Array(
                    id.mcp_args().into_iter().map(toml::Value::String).collect(),
                );
                let entries = [
                    ("command", toml::Value::String(id.command.clone())),
                    ("args", args),
                ];
                let existed = tomledit::get(&cur, &key)
                    .map_err(|e| fail(e.to_string()))?
                    .is_some();
                let new =
                    tomledit::set_table(&cur, &key, &entries).map_err(|e| fail(e.to_string()))?;
                notes.push(status_note(&show, &what, existed, new != cur));
                work.put(&path, Some(new));
            }
            Action::Uninstall => {
                match tomledit::remove_table(&cur, &key).map_err(|e| fail(e.to_string()))? {
                    None => notes.push(format!("{show}: {what} not present")),
                    Some(new) => {
                        notes.push(format!("{show}: {what} removed"));
                        let new = if new.trim().is_empty() {
                            None
                        } else {
                            Some(new)
                        };
                        work.put(&path, new);
                    }
                }
            }
        }
        return Ok(());
    }
    let key = [Seg::Key(parent), Seg::Key(SERVER_NAME)];
    let cur = text.unwrap_or_default();
    match action {
        Action::Install { id, .. } => {
            let entry = mcp_entry(*format, id);
            let existing = jsonedit::get(&cur, &key).map_err(|e| fail(e.to_string()))?;
            if existing.as_ref() == Some(&entry.to_value()) {
                notes.push(format!("{show}: {what} already present"));
                return Ok(());
            }
            let new = jsonedit::set(&cur, &[parent, SERVER_NAME], &entry)
                .map_err(|e| fail(e.to_string()))?;
            notes.push(status_note(&show, &what, existing.is_some(), true));
            work.put(&path, Some(new));
        }
        Action::Uninstall => match jsonedit::remove(&cur, &key).map_err(|e| fail(e.to_string()))? {
            None => notes.push(format!("{show}: {what} not present")),
            Some(mut new) => {
                if jsonedit::is_empty_container(&new, &key[..1]).map_err(|e| fail(e.to_string()))? {
                    if let Some(pruned) =
                        jsonedit::remove(&new, &key[..1]).map_err(|e| fail(e.to_string()))?
                    {
                        new = pruned;
                    }
                }
                notes.push(format!("{show}: {what} removed"));
                work.put(&path, json_leftover(new));
            }
        },
    }
    Ok(())
}

fn status_note(show: &str, what: &str, existed: bool, changed: bool) -> String {
    match (existed, changed) {
        (_, false) => format!("{show}: {what} already present"),
        (true, true) => format!("{show}: {what} updated"),
        (false, true) => format!("{show}: {what} added"),
    }
}

/// True for a hook command that runs `<…/agent-hub> hook stop …`: ours, whatever its
/// identity or port. Understands the single quotes `shell_word` writes.
pub fn is_our_hook_command(cmd: &str) -> bool {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut quoted = false;
    let mut chars = cmd.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                quoted = !quoted;
                in_word = true;
            }
            c if c.is_whitespace() && !quoted => {
                if in_word {
                    words.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            '\\' if !quoted => {
                if let Some(n) = chars.next() {
                    cur.push(n);
                    in_word = true;
                }
            }
            c => {
                cur.push(c);
                in_word = true;
            }
        }
        if words.len() >= 3 {
            break;
        }
    }
    if in_word && words.len() < 3 {
        words.push(cur);
    }
    words.len() >= 3
        && Path::new(&words[0])
            .file_name()
            .is_some_and(|n| n == "agent-hub")
        && words[1] == "hook"
        && words[2] == "stop"
}

/// The hook event and the hook object for a stop-style kind.
fn hook_shape(kind: HookKind, id: &HubIdentity) -> (&'static str, J) {
    let hook = match kind {
        HookKind::GeminiAfterAgent => J::obj(vec![
            ("type", J::str("command")),
            ("name", J::str(SERVER_NAME)),
            ("command", J::str(id.hook_command())),
            ("timeout", J::Num(HOOK_TIMEOUT_MS)),
        ]),
        _ => J::obj(vec![
            ("type", J::str("command")),
            ("command", J::str(id.hook_command())),
            ("timeout", J::Num(HOOK_TIMEOUT_SECS)),
        ]),
    };
    (event_of(kind), J::obj(vec![("hooks", J::Arr(vec![hook]))]))
}

fn event_of(kind: HookKind) -> &'static str {
    if kind == HookKind::GeminiAfterAgent {
        "AfterAgent"
    } else {
        "Stop"
    }
}

/// Removes every hook of ours under `hooks.<event>`: a group holding only ours goes whole,
/// else just our hooks leave it. Returns the new text and how many were removed.
fn remove_our_hooks(text: &str, event: &str) -> Result<(String, usize), String> {
    let groups = match jsonedit::get(text, &[Seg::Key("hooks"), Seg::Key(event)])
        .map_err(|e| e.to_string())?
    {
        None => return Ok((text.to_owned(), 0)),
        Some(serde_json::Value::Array(g)) => g,
        Some(_) => return Err(format!("hooks.{event} is not an array")),
    };
    let mut text = text.to_owned();
    let mut removed = 0;
    for (gi, group) in groups.iter().enumerate().rev() {
        let hooks = group
            .get("hooks")
            .and_then(|h| h.as_array())
            .cloned()
            .unwrap_or_default();
        let ours: Vec<usize> = hooks
            .iter()
            .enumerate()
            .filter(|(_, h)| {
                h.get("command")
                    .and_then(|c| c.as_str())
                    .is_some_and(is_our_hook_command)
            })
            .map(|(i, _)| i)
            .collect();
        if ours.is_empty() {
            continue;
        }
        removed += ours.len();
        let edit = if ours.len() == hooks.len() {
            jsonedit::remove(&text, &[Seg::Key("hooks"), Seg::Key(event), Seg::Index(gi)])
        } else {
            let mut t = Ok(Some(text.clone()));
            for &hi in ours.iter().rev() {
                t = match t {
                    Ok(Some(cur)) => jsonedit::remove(
                        &cur,
                        &[
                            Seg::Key("hooks"),
                            Seg::Key(event),
                            Seg::Index(gi),
                            Seg::Key("hooks"),
                            Seg::Index(hi),
                        ],
                    ),
                    other => other,
                };
            }
            t
        };
        text = edit.map_err(|e| e.to_string())?.unwrap_or(text);
    }
    Ok((text, removed))
}

fn plan_hook(
    m: &Manifest,
    action: &Action,
    work: &mut Work,
    notes: &mut Vec<String>,
) -> Result<(), String> {
    let (kind, Some(config)) = (m.install.hook, &m.install.hook_config) else {
        return Ok(());
    };
    let path = expand(config, &work.home);
    let show = shown(&path, &work.home);
    if kind == HookKind::OpencodePlugin {
        let cur = work.get(&path)?;
        match action {
            Action::Install {
                id, plugin_source, ..
            } => match plugin_source {
                None => notes.push(format!(
                    "{show}: plugin not installed: integrations/{OPENCODE_PLUGIN_SOURCE} was not found (pass --integrations-dir); delivery stays pull-only"
                )),
                Some(src) => {
                    let rendered = render_plugin(src, id);
                    if cur.as_deref() == Some(rendered.as_str()) {
                        notes.push(format!("{show}: plugin already present"));
                    } else {
                        notes.push(status_note(&show, "plugin", cur.is_some(), true));
                        work.put(&path, Some(rendered));
                    }
                }
            },
            Action::Uninstall => {
                if cur.is_some() {
                    notes.push(format!("{show}: plugin removed"));
                    work.put(&path, None);
                } else {
                    notes.push(format!("{show}: plugin not present"));
                }
            }
        }
        return Ok(());
    }
    if !kind.is_stop_style() {
        return Ok(());
    }
    let event = event_of(kind);
    let what = format!("{event} hook (hooks.{event})");
    let fail = |e: String| format!("{show}: {e}");
    let cur = work.get(&path)?.unwrap_or_default();
    match action {
        Action::Install { id, .. } => {
            let (event, group) = hook_shape(kind, id);
            let groups = jsonedit::get(&cur, &[Seg::Key("hooks"), Seg::Key(event)])
                .map_err(|e| fail(e.to_string()))?;
            if let Some(serde_json::Value::Array(gs)) = &groups {
                let desired = group.to_value();
                let ours: usize = gs
                    .iter()
                    .map(|g| {
                        g.get("hooks").and_then(|h| h.as_array()).map_or(0, |hs| {
                            hs.iter()
                                .filter(|h| {
                                    h.get("command")
                                        .and_then(|c| c.as_str())
                                        .is_some_and(is_our_hook_command)
                                })
                                .count()
                        })
                    })
                    .sum();
                if ours == 1 && gs.contains(&desired) {
                    notes.push(format!("{show}: {what} already present"));
                    return Ok(());
                }
            }
            let (text, removed) = remove_our_hooks(&cur, event).map_err(fail)?;
            let new = jsonedit::append(&text, &["hooks", event], &group)
                .map_err(|e| fail(e.to_string()))?;
            notes.push(status_note(&show, &what, removed > 0, true));
            work.put(&path, Some(new));
        }
        Action::Uninstall => {
            let (mut text, removed) = remove_our_hooks(&cur, event).map_err(fail)?;
            if removed == 0 {
                notes.push(format!("{show}: {what} not present"));
                return Ok(());
            }
            for depth in [2, 1] {
                let key = [Seg::Key("hooks"), Seg::Key(event)];
                if jsonedit::is_empty_container(&text, &key[..depth])
                    .map_err(|e| fail(e.to_string()))?
                {
                    if let Some(t) =
                        jsonedit::remove(&text, &key[..depth]).map_err(|e| fail(e.to_string()))?
                    {
                        text = t;
                    }
                }
            }
            notes.push(format!("{show}: {what} removed"));
            work.put(&path, json_leftover(text));
        }
    }
    Ok(())
}

/// The plugin source with its placeholders filled in: `@AGENT_HUB_COMMAND@`, `@AGENT_HUB_AS@`,
/// `@AGENT_HUB_TOKEN_FILE@` (each JSON-string-escaped, for use inside a JS string literal)
/// and `@AGENT_HUB_PORT@`. A source without placeholders is copied as it is.
pub fn render_plugin(src: &str, id: &HubIdentity) -> String {
    let esc = |s: &str| {
        let q = serde_json::Value::String(s.to_owned()).to_string();
        q[1..q.len() - 1].to_owned()
    };
    src.replace("@AGENT_HUB_COMMAND@", &esc(&id.command))
        .replace("@AGENT_HUB_AS@", &esc(&id.name))
        .replace("@AGENT_HUB_TOKEN_FILE@", &esc(&id.token_file))
        .replace("@AGENT_HUB_PORT@", &id.port.to_string())
}

/// A skill as install writes it: the source with its identity marker line replaced by the
/// installing identity (`$HUB` and the client's path, each a shell word), then a stamp line
/// holding the SHA-256 of everything above it, by which install and uninstall recognise a copy
/// nobody has edited. Refuses an identity holding a backtick or a control character, which
/// would break out of the Markdown code span.
pub fn render_skill(src: &str, id: &HubIdentity) -> Result<String, String> {
    for w in [&id.command, &id.name, &id.token_file] {
        if w.chars().any(|c| c.is_control() || c == '`') {
            return Err(format!(
                "{w:?} holds a backtick or a control character and cannot be written into a skill"
            ));
        }
    }
    let line = format!(
        "This copy was placed by `agent-hub install`: for this agent `$HUB` is \
         `--as {} --token-file {} --port {}`, and the client is `{}` (run it by that path when \
         `agent-hub` is not on PATH). Use another identity only when the user gives you one.",
        argv::shell_word(&id.name),
        argv::shell_word(&id.token_file),
        id.port,
        argv::shell_word(&id.command),
    );
    let mut text = src.replace(SKILL_IDENTITY_MARKER, &line);
    if !text.ends_with('\n') {
        text.push('\n');
    }
    Ok(stamp_skill(text))
}

/// `text` (ending in a newline) followed by the stamp line for it.
pub fn stamp_skill(text: String) -> String {
    let digest = Sha256::digest(text.as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("{text}{STAMP_PREFIX}{hex}{STAMP_SUFFIX}\n")
}

/// True when `text` ends with our stamp line and the stamp matches the text above it: a skill
/// file exactly as some install wrote it (this version or an older one, any identity).
pub fn skill_is_pristine(text: &str) -> bool {
    let Some(rest) = text.strip_suffix('\n') else {
        return false;
    };
    let start = rest.rfind('\n').map_or(0, |i| i + 1);
    let (body, last) = text.split_at(start);
    !body.is_empty() && stamp_skill(body.to_owned()).get(start..) == Some(last)
}

fn plan_skills(
    m: &Manifest,
    action: &Action,
    work: &mut Work,
    notes: &mut Vec<String>,
) -> Result<(), String> {
    let Some(dir) = &m.install.skills_dir else {
        return Ok(());
    };
    let dir = expand(dir, &work.home);
    let rendered = |skill: &Skill| match action {
        Action::Install { id, .. } => Some(render_skill(skill.source, id)),
        Action::Uninstall => None,
    };
    if let Action::Install { skills: false, .. } = action {
        notes.push(format!(
            "{}: skills not placed (--no-skills)",
            shown(&dir, &work.home)
        ));
        return Ok(());
    }
    for skill in &SKILLS {
        let path = dir.join(skill.name).join(SKILL_FILE);
        let show = shown(&path, &work.home);
        let what = format!("skill {}", skill.name);
        let cur = work.get(&path)?;
        let edited = || {
            format!(
                "{show}: {what} was edited after it was installed, or was not written by agent-hub; left as it is"
            )
        };
        match (rendered(skill), cur) {
            (Some(Err(e)), _) => notes.push(format!("{show}: {what} not placed: {e}")),
            (Some(Ok(want)), None) => {
                notes.push(status_note(&show, &what, false, true));
                work.put(&path, Some(want));
            }
            (Some(Ok(want)), Some(cur)) if cur == want => {
                notes.push(status_note(&show, &what, true, false));
            }
            (Some(Ok(want)), Some(cur)) if skill_is_pristine(&cur) => {
                notes.push(status_note(&show, &what, true, true));
                work.put(&path, Some(want));
            }
            (Some(Ok(_)), Some(_)) => notes.push(format!(
                "{} (move it away and install again to get this version)",
                edited()
            )),
            (None, None) => notes.push(format!("{show}: {what} not present")),
            (None, Some(cur)) if skill_is_pristine(&cur) => {
                notes.push(format!("{show}: {what} removed"));
                work.put(&path, None);
                work.prune.insert(path);
            }
            (None, Some(_)) => notes.push(edited()),
        }
    }
    Ok(())
}

// ----- IO -----

/// Reads a file for `plan`: `Ok(None)` when it does not exist.
pub fn read_file(path: &Path) -> io::Result<Option<String>> {
    match std::fs::read(path) {
        Ok(bytes) => String::from_utf8(bytes)
            .map(Some)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "not UTF-8 text")),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// The backup path for `path`.
pub fn backup_path(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(BACKUP_SUFFIX);
    PathBuf::from(s)
}

/// Writes `plan`'s changes. First re-reads every file and refuses if any differs from what
/// was planned on (an agent rewrote it meanwhile); then, for an install, keeps a backup of
/// each existing file; then writes. Returns the backups written.
pub fn apply(plan: &AgentPlan, action: &Action, home: &Path) -> Result<Vec<String>, String> {
    for c in &plan.changes {
        let now = read_file(&c.path).map_err(|e| format!("{}: cannot read: {e}", c.shown))?;
        if now != c.before {
            return Err(format!(
                "{} changed while it was being edited; nothing was written, run again",
                c.shown
            ));
        }
    }
    let mut backups = Vec::new();
    for c in &plan.changes {
        if action.is_install() {
            if let Some(before) = &c.before {
                let b = backup_path(&c.path);
                write_atomic(&b, before, mode_of(&c.path))
                    .map_err(|e| format!("{}: cannot write the backup: {e}", shown(&b, home)))?;
                backups.push(shown(&b, home));
            }
        }
        match &c.after {
            Some(text) => {
                let mode = mode_of(&c.path).unwrap_or(0o600);
                write_atomic(&c.path, text, Some(mode))
                    .map_err(|e| format!("{}: cannot write: {e}", c.shown))?;
            }
            None => {
                let target = resolve(&c.path);
                std::fs::remove_file(&target)
                    .or_else(|e| {
                        if e.kind() == io::ErrorKind::NotFound {
                            Ok(())
                        } else {
                            Err(e)
                        }
                    })
                    .map_err(|e| format!("{}: cannot remove: {e}", c.shown))?;
                if c.remove_empty_dir {
                    if let Some(dir) = c.path.parent() {
                        // Fails, and is meant to, when the folder holds anything else (a
                        // backup, the user's own files): then it stays.
                        let _ = std::fs::remove_dir(dir);
                    }
                }
            }
        }
    }
    Ok(backups)
}

fn mode_of(path: &Path) -> Option<u32> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .ok()
        .map(|m| m.permissions().mode() & 0o7777)
}

/// A symlinked config (dotfile managers do this) is written through to its target, so the
/// link survives.
fn resolve(path: &Path) -> PathBuf {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => {
            std::fs::canonicalize(path).unwrap_or_else(|_| path.to_owned())
        }
        _ => path.to_owned(),
    }
}

fn write_atomic(path: &Path, text: &str, mode: Option<u32>) -> io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let target = resolve(path);
    let dir = target
        .parent()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no parent directory"))?;
    std::fs::create_dir_all(dir)?;
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.agent-hub.tmp"));
    let result = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(text.as_bytes())?;
        if let Some(mode) = mode {
            f.set_permissions(std::fs::Permissions::from_mode(mode))?;
        }
        f.sync_all()?;
        std::fs::rename(&tmp, &target)?;
        // Best effort: the rename is durable once the directory is synced.
        if let Ok(d) = std::fs::File::open(dir) {
            let _ = d.sync_all();
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agents::manifest::builtins;
    use std::cell::RefCell;
    use std::collections::HashMap;

    fn id() -> HubIdentity {
        HubIdentity {
            command: "/usr/local/bin/agent-hub".into(),
            name: "worker".into(),
            token_file: "/home/u/.agent-hub/worker.token".into(),
            port: 46110,
        }
    }

    fn manifest(name: &str) -> Manifest {
        builtins().0.into_iter().find(|m| m.name == name).unwrap()
    }

    /// Runs install then uninstall against an in-memory HOME and returns the three states.
    fn round_trip(name: &str, files: &[(&str, &str)]) -> [HashMap<PathBuf, String>; 3] {
        let home = PathBuf::from("/h");
        let fs: RefCell<HashMap<PathBuf, String>> = RefCell::new(
            files
                .iter()
                .map(|(p, t)| (home.join(p), t.to_string()))
                .collect(),
        );
        let before = fs.borrow().clone();
        let m = manifest(name);
        let install = Action::Install {
            id: id(),
            plugin_source: Some("// plugin for @AGENT_HUB_AS@\n".into()),
            skills: true,
        };
        let mut states = Vec::new();
        for action in [&install, &install, &Action::Uninstall] {
            let read = |p: &Path| Ok(fs.borrow().get(p).cloned());
            let plan = plan(&m, action, &home, &read);
            assert_eq!(plan.error, None);
            for c in &plan.changes {
                match &c.after {
                    Some(t) => fs.borrow_mut().insert(c.path.clone(), t.clone()),
                    None => fs.borrow_mut().remove(&c.path),
                };
            }
            states.push(fs.borrow().clone());
        }
        assert_eq!(states[0], states[1], "a second install changes nothing");
        [before, states.remove(0), states.remove(1)]
    }

    #[test]
    fn every_builtin_round_trips_from_nothing() {
        for name in ["claude", "codex", "gemini", "opencode", "droid"] {
            let [before, installed, after] = round_trip(name, &[]);
            assert!(!installed.is_empty(), "{name}");
            assert_eq!(after, before, "{name}");
        }
    }

    #[test]
    fn claude_keeps_other_servers_and_hooks() {
        let claude_json = "{\n  \"numStartups\": 3,\n  \"mcpServers\": {\n    \"github\": {\n      \"command\": \"gh-mcp\"\n    }\n  }\n}\n";
        let settings = "{\n  \"hooks\": {\n    \"Stop\": [\n      {\n        \"hooks\": [\n          {\n            \"type\": \"command\",\n            \"command\": \"say done\"\n          }\n        ]\n      }\n    ]\n  }\n}\n";
        let [before, installed, after] = round_trip(
            "claude",
            &[
                (".claude.json", claude_json),
                (".claude/settings.json", settings),
            ],
        );
        assert_eq!(after, before);
        let s = &installed[&PathBuf::from("/h/.claude/settings.json")];
        let v = jsonedit::value(s).unwrap();
        assert_eq!(v["hooks"]["Stop"].as_array().unwrap().len(), 2);
        assert_eq!(
            v["hooks"]["Stop"][1]["hooks"][0]["command"],
            "/usr/local/bin/agent-hub hook stop --as worker --token-file /home/u/.agent-hub/worker.token --port 46110"
        );
        let c = jsonedit::value(&installed[&PathBuf::from("/h/.claude.json")]).unwrap();
        assert_eq!(c["mcpServers"]["github"]["command"], "gh-mcp");
        assert_eq!(c["mcpServers"]["agent-hub"]["args"][2], "worker");
    }

    #[test]
    fn a_changed_identity_replaces_our_entries_only() {
        let home = PathBuf::from("/h");
        let m = manifest("claude");
        let fs: RefCell<HashMap<PathBuf, String>> = RefCell::new(HashMap::new());
        for (name, port) in [("one", 1), ("two", 2)] {
            let action = Action::Install {
                id: HubIdentity {
                    name: name.into(),
                    port,
                    ..id()
                },
                plugin_source: None,
                skills: true,
            };
            let read = |p: &Path| Ok(fs.borrow().get(p).cloned());
            let plan = plan(&m, &action, &home, &read);
            for c in plan.changes {
                fs.borrow_mut().insert(c.path, c.after.unwrap());
            }
        }
        let s = jsonedit::value(&fs.borrow()[&home.join(".claude/settings.json")]).unwrap();
        let stop = s["hooks"]["Stop"].as_array().unwrap();
        assert_eq!(stop.len(), 1);
        assert!(stop[0]["hooks"][0]["command"]
            .as_str()
            .unwrap()
            .contains("--as two --token-file"));
    }

    #[test]
    fn an_unparseable_file_stops_that_agent_only() {
        let home = PathBuf::from("/h");
        let read = |p: &Path| Ok((p == home.join(".claude.json")).then(|| "{ not json".to_owned()));
        let action = Action::Install {
            id: id(),
            plugin_source: None,
            skills: true,
        };
        let p = plan(&manifest("claude"), &action, &home, &read);
        assert!(p.changes.is_empty());
        assert!(
            p.error
                .as_deref()
                .unwrap()
                .starts_with("~/.claude.json: not valid JSON at line 1"),
            "{p:?}"
        );
        let p = plan(&manifest("codex"), &action, &home, &read);
        assert_eq!(p.error, None);
    }

    #[test]
    fn our_hook_commands_are_recognised() {
        assert!(is_our_hook_command(&id().hook_command()));
        assert!(is_our_hook_command(
            "'/Users/J Doe/bin/agent-hub' hook stop --as x"
        ));
        assert!(is_our_hook_command("agent-hub hook stop"));
        assert!(!is_our_hook_command("agent-hub hook drain"));
        assert!(!is_our_hook_command("/bin/other hook stop"));
        assert!(!is_our_hook_command("say done"));
        assert!(!is_our_hook_command(""));
    }

    #[test]
    fn identities_are_checked() {
        assert_eq!(id().validate(), Ok(()));
        assert!(HubIdentity {
            name: "a b".into(),
            ..id()
        }
        .validate()
        .is_err());
        assert!(HubIdentity {
            name: "HUB".into(),
            ..id()
        }
        .validate()
        .is_err());
        assert!(HubIdentity {
            name: "-x".into(),
            ..id()
        }
        .validate()
        .is_err());
        assert!(HubIdentity {
            command: "agent-hub".into(),
            ..id()
        }
        .validate()
        .is_err());
        assert!(HubIdentity {
            token_file: "t.token".into(),
            ..id()
        }
        .validate()
        .is_err());
        assert!(HubIdentity { port: 0, ..id() }.validate().is_err());
        let spaced = HubIdentity {
            command: "/opt/my hub/agent-hub".into(),
            ..id()
        };
        assert!(spaced
            .hook_command()
            .starts_with("'/opt/my hub/agent-hub' hook stop"));
    }

    #[test]
    fn skills_render_the_identity_and_carry_a_stamp() {
        for skill in &SKILLS {
            assert_eq!(
                skill.source.matches(SKILL_IDENTITY_MARKER).count(),
                1,
                "{}",
                skill.name
            );
            assert!(skill
                .source
                .starts_with(&format!("---\nname: {}\n", skill.name)));
            let out = render_skill(skill.source, &id()).unwrap();
            assert!(!out.contains(SKILL_IDENTITY_MARKER));
            assert!(out.contains(
                "`$HUB` is `--as worker --token-file /home/u/.agent-hub/worker.token --port 46110`, and the client is `/usr/local/bin/agent-hub`"
            ), "{out}");
            assert!(out.starts_with(&format!("---\nname: {}\n", skill.name)));
            assert!(skill_is_pristine(&out));
            assert!(!skill_is_pristine(skill.source), "the source has no stamp");
            // Any edit, anywhere, breaks the stamp.
            assert!(!skill_is_pristine(&out.replacen("worker", "w0rker", 1)));
            assert!(!skill_is_pristine(&format!("{out}\n")));
            assert!(!skill_is_pristine(&out[..out.len() - 1]));
            let last = out.lines().last().unwrap();
            assert!(!skill_is_pristine(&format!("{last}\n")), "a stamp alone");
        }
        let spaced = HubIdentity {
            token_file: "/home/J Doe/w.token".into(),
            ..id()
        };
        assert!(render_skill(SKILLS[0].source, &spaced)
            .unwrap()
            .contains("--token-file '/home/J Doe/w.token' --port"));
        for bad in ["/a`b", "/a\nb"] {
            let bad = HubIdentity {
                token_file: bad.into(),
                ..id()
            };
            assert!(render_skill(SKILLS[0].source, &bad).is_err());
        }
    }

    #[test]
    fn claude_places_the_skills_and_uninstall_takes_only_unedited_ones() {
        let [_, installed, after] = round_trip("claude", &[]);
        assert!(after.is_empty());
        for skill in &SKILLS {
            let p = PathBuf::from(format!("/h/.claude/skills/{}/SKILL.md", skill.name));
            assert_eq!(
                installed[&p],
                render_skill(skill.source, &id()).unwrap(),
                "{}",
                skill.name
            );
        }
        let home = PathBuf::from("/h");
        let edited_path = home.join(".claude/skills/agent-hub-resident/SKILL.md");
        let edited = "---\nname: agent-hub-resident\ndescription: mine\n---\n".to_owned();
        let older = stamp_skill("an older version of ours\n".to_owned());
        let older_path = home.join(".claude/skills/agent-hub-orchestrator/SKILL.md");
        let files: HashMap<PathBuf, String> = [
            (edited_path.clone(), edited.clone()),
            (older_path.clone(), older.clone()),
        ]
        .into();
        let read = |p: &Path| Ok(files.get(p).cloned());
        let m = manifest("claude");
        let install = |skills| Action::Install {
            id: id(),
            plugin_source: None,
            skills,
        };
        let p = plan(&m, &install(true), &home, &read);
        let skill_changes: Vec<&FileChange> = p
            .changes
            .iter()
            .filter(|c| c.path.ends_with(SKILL_FILE))
            .collect();
        assert_eq!(skill_changes.len(), 1, "{p:?}");
        assert_eq!(skill_changes[0].path, older_path);
        assert_eq!(skill_changes[0].before.as_deref(), Some(older.as_str()));
        assert!(p.notes.iter().any(|n| n
            == "~/.claude/skills/agent-hub-orchestrator/SKILL.md: skill agent-hub-orchestrator updated"));
        assert!(p.notes.iter().any(|n| n.starts_with(
            "~/.claude/skills/agent-hub-resident/SKILL.md: skill agent-hub-resident was edited after it was installed"
        )), "{:?}", p.notes);

        let p = plan(&m, &install(false), &home, &read);
        assert!(p.changes.iter().all(|c| !c.path.ends_with(SKILL_FILE)));
        assert!(p
            .notes
            .contains(&"~/.claude/skills: skills not placed (--no-skills)".to_owned()));

        let p = plan(&m, &Action::Uninstall, &home, &read);
        assert_eq!(
            p.changes,
            vec![FileChange {
                path: older_path,
                shown: "~/.claude/skills/agent-hub-orchestrator/SKILL.md".into(),
                before: Some(older),
                after: None,
                remove_empty_dir: true,
            }]
        );
        assert!(
            p.notes.iter().any(|n| n.ends_with("left as it is")),
            "{:?}",
            p.notes
        );
    }

    #[test]
    fn plugin_placeholders() {
        let out = render_plugin(
            "const AS = \"@AGENT_HUB_AS@\"; const P = @AGENT_HUB_PORT@; \"@AGENT_HUB_TOKEN_FILE@\"",
            &HubIdentity {
                token_file: "/a\"b".into(),
                ..id()
            },
        );
        assert_eq!(out, "const AS = \"worker\"; const P = 46110; \"/a\\\"b\"");
    }
}
