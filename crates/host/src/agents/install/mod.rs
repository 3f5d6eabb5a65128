//! `agent-hub install` / `uninstall`: register the hub's MCP server in an agent's user-scope
//! config, place its delivery hook or plugin and (for agents with `install.skills_dir`) the
//! shipped skills; and take exactly those out again.
//!
//! Two halves. `plan` is pure: given a manifest, what to do and a way to read files, it returns
//! each file's text before and after, and what it did in words; it never writes. `apply`
//! does the IO: it re-reads every file (refusing if one changed meanwhile), keeps the first
//! backup `<file>.agent-hub.bak` of each existing file an install changes (never overwritten:
//! it is the user's original), records the folders and files it creates (`state`), and writes
//! atomically (temporary file, fsync, rename; through a symlink to its target; the old mode
//! kept). A reinstall sets only the keys install owns inside our entries (`owned`) and keeps
//! every key the user added there.
//!
//! What is "ours": the MCP entry named `agent-hub`, a hook whose command runs
//! `…/agent-hub hook stop`, the plugin file named in the manifest, and a skill file
//! `<skills_dir>/<skill>/SKILL.md` whose last line is our stamp and still matches the text
//! above it. Uninstall removes only those, then any object or array that removal left empty,
//! then a file left holding nothing but `{}` (or nothing at all), then a skill's folder left
//! empty, then the folders an install created that are empty now. A skill file edited after install (or one we did not write) is never overwritten or
//! removed: it is left as it is and the notes say so. Refuses to forge trust: what the user
//! must approve by hand is printed from the manifest's `install.trust`, never written into the
//! agent's config.
//!
//! One job per file: this one holds the plan's types and `plan` itself; `mcp` the MCP server
//! entry, `hooks` the delivery hook and the OpenCode plugin, `owned` which keys of those are
//! install's and merging them, `skills` the shipped skills and their stamp, `state` the install
//! record, `apply` the IO, `overlay` the view a delegated task of an installed agent gets
//! (the user's files as uninstall would leave them).

mod apply;
mod files;
mod hooks;
mod mcp;
mod overlay;
mod owned;
mod skills;
mod state;
mod turn_hooks;

pub use apply::{apply, backup_path, Applied, ApplyError};
pub use files::read_file;
pub use hooks::{is_our_hook_command, render_plugin};
pub use overlay::{task_view, token_files_in, TaskView};
pub use skills::{
    render_skill, skill_is_pristine, stamp_skill, Skill, SkillError, SKILLS, SKILL_FILE,
    SKILL_IDENTITY_MARKER,
};
pub use state::{
    load_state, save_state, state_path, AgentRecord, InstallState, RecordError, STATE_FILE,
};

use hooks::plan_hook;
use mcp::plan_mcp;
use skills::plan_skills;

use super::argv::{self, ArgvError};
use super::jsonedit::JsonEditError;
use super::manifest::{Manifest, ManifestError};
use super::tomledit::TomlEditError;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
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

/// Why a `HubIdentity` cannot be written into an agent's config. The messages name the
/// command-line option each value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HubIdentityError {
    /// The hub command is not an absolute path.
    CommandNotAbsolute(String),
    /// The token file is not an absolute path.
    TokenFileNotAbsolute(String),
    /// The name is not a safe argv element.
    BadName {
        name: String,
        why: ArgvError,
    },
    /// The name starts with `-` (it would read as an option).
    NameIsOption(String),
    /// The name is `hub` in some case.
    NameIsHub,
    PortZero,
}

impl fmt::Display for HubIdentityError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HubIdentityError::CommandNotAbsolute(c) => {
                write!(f, "the hub command {c:?} must be an absolute path")
            }
            HubIdentityError::TokenFileNotAbsolute(t) => {
                write!(f, "--token-file {t:?} must be an absolute path")
            }
            HubIdentityError::BadName { name, why } => write!(f, "--as {name:?} {why}"),
            HubIdentityError::NameIsOption(n) => write!(f, "--as {n:?} must not start with '-'"),
            HubIdentityError::NameIsHub => {
                f.write_str("--as hub: the name \"hub\" is reserved for the hub itself")
            }
            HubIdentityError::PortZero => f.write_str("--port must be the hub's port, not 0"),
        }
    }
}

impl std::error::Error for HubIdentityError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            HubIdentityError::BadName { why, .. } => Some(why),
            _ => None,
        }
    }
}

impl HubIdentity {
    /// Checks what cannot be repaired later: an absolute command and token path, and a name
    /// the hub could have on its roster and that reads the same inside a hook command line.
    pub fn validate(&self) -> Result<(), HubIdentityError> {
        if !self.command.starts_with('/') {
            return Err(HubIdentityError::CommandNotAbsolute(self.command.clone()));
        }
        if !self.token_file.starts_with('/') {
            return Err(HubIdentityError::TokenFileNotAbsolute(
                self.token_file.clone(),
            ));
        }
        argv::check_arg(&self.name).map_err(|why| HubIdentityError::BadName {
            name: self.name.clone(),
            why,
        })?;
        if self.name.starts_with('-') {
            return Err(HubIdentityError::NameIsOption(self.name.clone()));
        }
        if self.name.eq_ignore_ascii_case("hub") {
            return Err(HubIdentityError::NameIsHub);
        }
        if self.port == 0 {
            return Err(HubIdentityError::PortZero);
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

/// Why an agent's install or uninstall cannot be planned; nothing is written for it.
#[derive(Debug)]
pub enum PlanError {
    /// A file could not be read: `file` as messages show it (`~/…` under home).
    Read { file: String, source: io::Error },
    /// The manifest leaves out what the plan needs (`install.mcp_format`).
    Manifest(ManifestError),
    /// A file's text could not be edited as planned: `file` as messages show it.
    Edit { file: String, source: EditError },
}

impl fmt::Display for PlanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PlanError::Read { file, source } => write!(f, "{file}: cannot read: {source}"),
            PlanError::Manifest(e) => write!(f, "{e}"),
            PlanError::Edit { file, source } => write!(f, "{file}: {source}"),
        }
    }
}

impl std::error::Error for PlanError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            PlanError::Read { source, .. } => Some(source),
            PlanError::Manifest(e) => Some(e),
            PlanError::Edit { source, .. } => Some(source),
        }
    }
}

/// Why one edit of a config file's text was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EditError {
    Json(JsonEditError),
    Toml(TomlEditError),
    /// `hooks.<event>` is there but is not an array of hook groups.
    HooksNotArray {
        event: String,
    },
}

impl fmt::Display for EditError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EditError::Json(e) => write!(f, "{e}"),
            EditError::Toml(e) => write!(f, "{e}"),
            EditError::HooksNotArray { event } => write!(f, "hooks.{event} is not an array"),
        }
    }
}

impl std::error::Error for EditError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            EditError::Json(e) => Some(e),
            EditError::Toml(e) => Some(e),
            EditError::HooksNotArray { .. } => None,
        }
    }
}

impl From<JsonEditError> for EditError {
    fn from(e: JsonEditError) -> Self {
        EditError::Json(e)
    }
}

impl From<TomlEditError> for EditError {
    fn from(e: TomlEditError) -> Self {
        EditError::Toml(e)
    }
}

/// What `plan` decided for one agent.
#[derive(Debug, Default)]
pub struct AgentPlan {
    pub agent: String,
    /// Files that change, in the order first touched.
    pub changes: Vec<FileChange>,
    /// One line per entry: what was (or would be) done.
    pub notes: Vec<String>,
    /// Set when the agent cannot be done; then `changes` is empty and nothing is written.
    pub error: Option<PlanError>,
    /// Existing files the plan looked at and leaves byte for byte as they are (`~/…`).
    pub unchanged: Vec<String>,
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
    fn get(&mut self, path: &Path) -> Result<Option<String>, PlanError> {
        if let Some((_, cur)) = self.files.get(path) {
            return Ok(cur.clone());
        }
        let text = (self.read)(path).map_err(|source| PlanError::Read {
            file: shown(path, &self.home),
            source,
        })?;
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

    /// The files that change, and the existing ones that do not (shown).
    fn finish(self) -> (Vec<FileChange>, Vec<String>) {
        let home = self.home;
        let mut files = self.files;
        let mut unchanged = Vec::new();
        let changes = self
            .order
            .into_iter()
            .filter_map(|p| {
                let (before, after) = files.remove(&p)?;
                if before == after {
                    if before.is_some() {
                        unchanged.push(shown(&p, &home));
                    }
                    return None;
                }
                Some(FileChange {
                    shown: shown(&p, &home),
                    remove_empty_dir: self.prune.contains(&p),
                    path: p,
                    before,
                    after,
                })
            })
            .collect();
        (changes, unchanged)
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
        .and_then(|()| turn_hooks::plan_turn_hooks(m, action, &mut work, &mut notes))
        .and_then(|()| plan_skills(m, action, &mut work, &mut notes));
    match result {
        Ok(()) => {
            let (changes, unchanged) = work.finish();
            AgentPlan {
                agent: m.name.clone(),
                changes,
                notes,
                error: None,
                unchanged,
            }
        }
        Err(e) => AgentPlan {
            agent: m.name.clone(),
            changes: Vec::new(),
            notes,
            error: Some(e),
            unchanged: Vec::new(),
        },
    }
}

pub(super) fn status_note(show: &str, what: &str, existed: bool, changed: bool) -> String {
    match (existed, changed) {
        (_, false) => format!("{show}: {what} already present"),
        (true, true) => format!("{show}: {what} updated"),
        (false, true) => format!("{show}: {what} added"),
    }
}

#[cfg(test)]
mod tests;
