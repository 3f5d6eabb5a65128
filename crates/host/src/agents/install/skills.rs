//! The shipped skills an install places under `install.skills_dir` (docs/agents.md): the
//! skill sources compiled in, each rendered with the installing identity and stamped with the
//! SHA-256 of its text, so an edited copy is recognised and left alone. Pure: edits the plan's
//! copy of each file.

use super::{expand, shown, status_note, Action, HubIdentity, PlanError, Work};
use crate::agents::argv;
use crate::agents::manifest::Manifest;
use sha2::{Digest, Sha256};
use std::fmt;

/// The file name of a skill inside its folder (Claude Code: `~/.claude/skills/<name>/SKILL.md`).
pub const SKILL_FILE: &str = "SKILL.md";
/// The line of a skill source that install replaces with the installing identity.
pub const SKILL_IDENTITY_MARKER: &str = "<!-- agent-hub install: identity -->";
pub(super) const STAMP_PREFIX: &str = "<!-- agent-hub install: sha256 ";
pub(super) const STAMP_SUFFIX: &str = "; an edited copy is left alone by install and uninstall -->";

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
        source: include_str!("../../../../../skills/agent-hub-orchestrator/SKILL.md"),
    },
    Skill {
        name: "agent-hub-resident",
        source: include_str!("../../../../../skills/agent-hub-resident/SKILL.md"),
    },
];

/// Why a skill cannot be rendered for an identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SkillError {
    /// A word of the identity (command, name or token file) holds a backtick or a control
    /// character, which would break out of the Markdown code span.
    UnsafeWord(String),
}

impl fmt::Display for SkillError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SkillError::UnsafeWord(w) => write!(
                f,
                "{w:?} holds a backtick or a control character and cannot be written into a skill"
            ),
        }
    }
}

impl std::error::Error for SkillError {}

/// A skill as install writes it: the source with its identity marker line replaced by the
/// installing identity (`$HUB` and the client's path, each a shell word), then a stamp line
/// holding the SHA-256 of everything above it, by which install and uninstall recognise a copy
/// nobody has edited. Refuses an identity holding a backtick or a control character, which
/// would break out of the Markdown code span.
pub fn render_skill(src: &str, id: &HubIdentity) -> Result<String, SkillError> {
    for w in [&id.command, &id.name, &id.token_file] {
        if w.chars().any(|c| c.is_control() || c == '`') {
            return Err(SkillError::UnsafeWord(w.clone()));
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

pub(super) fn plan_skills(
    m: &Manifest,
    action: &Action,
    work: &mut Work,
    notes: &mut Vec<String>,
) -> Result<(), PlanError> {
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
