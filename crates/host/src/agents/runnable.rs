//! Which agents can take delegated work, and the checked run spec of one (docs/agents.md
//! "Delegated work"; issue 11, 000 seed §5.3, §10).
//!
//! Owns the rule that a delegated task names its agent by **manifest name only** (never a path,
//! a program or an argv fragment, whoever asks: a local delegator or a relay peer), the choice
//! between a manifest's `run.acp` argv and its headless template (the fallback), and resolving
//! the chosen argv's program on PATH exactly as `agent-hub agents` does (`on_path::which`:
//! absolute PATH entries only, an executable file). Every manifest string is checked again by
//! `argv.rs` here, so a spec this module returns is safe to exec without a shell. Refuses
//! running anything: it stats files, it never starts a process.

use super::argv::{self, ArgvError, Template};
use super::manifest::{self, Manifest, Outcome};
use super::on_path;
use super::registry::Registry;
use serde::Serialize;
use std::fmt;

/// Longest agent name a task may carry, in bytes; names are checked before any lookup.
pub const MAX_AGENT_NAME_BYTES: usize = 64;

/// How an agent takes delegated work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Delegate {
    /// Through the Agent Client Protocol: `run.acp`.
    Acp,
    /// Its headless template (`run.headless`, read back by `run.outcome`): the fallback.
    Headless,
    /// Not at all: neither argv is in the manifest, or neither program is on PATH.
    No,
}

impl Delegate {
    pub fn tag(self) -> &'static str {
        match self {
            Delegate::Acp => "acp",
            Delegate::Headless => "headless",
            Delegate::No => "no",
        }
    }
}

/// What the runner executes for one task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunSpec {
    pub agent: String,
    /// `Acp` or `Headless`, never `No`.
    pub mode: Delegate,
    /// The manifest's argv with argv[0] replaced by the absolute path PATH resolved it to.
    /// Headless: still holds its one `{prompt}` element (`argv::render` substitutes it).
    pub argv: Vec<String>,
    /// How a headless run's output is read; meaningless for ACP.
    pub outcome: Outcome,
    /// Where a headless run's prompt goes; meaningless for ACP.
    pub prompt_via: manifest::PromptVia,
    /// A headless run's `run.headless_mcp` (checked, placeholders still in); None for ACP and
    /// for a manifest without it.
    pub headless_mcp: Option<Vec<String>>,
}

/// Why a name does not give a run spec. Each message is safe to show the asker: it quotes
/// nothing but what the check allows through (a rejected name is never echoed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunnableError {
    /// The name is empty, too long or holds a character outside `[a-z0-9._-]`, or starts with
    /// `.` or `-`: it cannot be a manifest name, so it is not looked up at all.
    BadName(String),
    /// A well-formed name that no manifest has.
    Unknown(String),
    /// The manifest exists but cannot take delegated work; says why.
    NotRunnable { agent: String, why: String },
    /// A manifest string failed its check (cannot happen for a manifest that parsed: kept so
    /// a hand-built manifest can never reach an exec).
    BadManifest { agent: String, why: String },
}

impl fmt::Display for RunnableError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RunnableError::BadName(why) => {
                write!(f, "the agent must be named by its manifest name: {why}")
            }
            RunnableError::Unknown(n) => write!(f, "no agent manifest is named {n:?}"),
            RunnableError::NotRunnable { agent, why } => {
                write!(f, "agent {agent:?} cannot take delegated work: {why}")
            }
            RunnableError::BadManifest { agent, why } => {
                write!(f, "agent {agent:?}'s manifest is unusable: {why}")
            }
        }
    }
}

impl std::error::Error for RunnableError {}

/// Checks that `name` could be a manifest name before it is looked up: 1–64 bytes of
/// `[a-z0-9._-]`, not starting with `.` or `-`, and then the manifest name rule
/// (`manifest::valid_name`). A path (`/bin/sh`, `../x`), an argv fragment (`claude --foo`)
/// or anything else fails here, whatever manifests exist.
pub fn check_name(name: &str) -> Result<(), RunnableError> {
    let bad = |why: &str| Err(RunnableError::BadName(why.to_owned()));
    if name.is_empty() {
        return bad("the name is empty");
    }
    if name.len() > MAX_AGENT_NAME_BYTES {
        return bad(&format!(
            "the name is longer than {MAX_AGENT_NAME_BYTES} bytes"
        ));
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'_' | b'-'))
    {
        return bad(
            "the name holds a character outside [a-z0-9._-] (paths and options are refused)",
        );
    }
    if name.starts_with('.') || name.starts_with('-') {
        return bad("the name starts with '.' or '-'");
    }
    if !manifest::valid_name(name) {
        return bad("no manifest can have that name ([a-z0-9][a-z0-9_-]*, at most 32 bytes)");
    }
    Ok(())
}

/// Why `choose` found nothing to run.
enum Unrunnable {
    /// A template failed `argv.rs`'s check.
    Template(String),
    /// Neither argv is in the manifest, or neither program is on PATH.
    Unavailable(String),
}

/// Whether (and how) `m` can take delegated work with `path_var` as PATH, and the argv with
/// its program resolved; the reason when it cannot.
fn choose(m: &Manifest, path_var: &str) -> Result<(Delegate, Vec<String>), Unrunnable> {
    let mut missing = Vec::new();
    for (mode, argv, kind, key) in [
        (Delegate::Acp, &m.run.acp, Template::Acp, "run.acp"),
        (
            Delegate::Headless,
            &m.run.headless,
            m.run.headless_prompt.template(),
            "run.headless",
        ),
    ] {
        let Some(program) = argv.first() else {
            continue;
        };
        argv::check_template(argv, kind)
            .map_err(|(i, e)| Unrunnable::Template(bad_template(key, i, e)))?;
        match on_path::which(program, path_var) {
            Some(path) => {
                let Some(abs) = path.to_str().filter(|p| p.starts_with('/')) else {
                    missing.push(format!(
                        "{key}'s {program} resolves to a path that is not absolute UTF-8"
                    ));
                    continue;
                };
                let mut resolved = argv.clone();
                resolved[0] = abs.to_owned();
                return Ok((mode, resolved));
            }
            None => missing.push(format!("{key}'s {program} is not on PATH")),
        }
    }
    Err(Unrunnable::Unavailable(if missing.is_empty() {
        "its manifest has neither run.acp nor run.headless".into()
    } else {
        missing.join("; ")
    }))
}

fn bad_template(key: &str, i: Option<usize>, e: ArgvError) -> String {
    match i {
        Some(i) => format!("{key}[{i}] {e}"),
        None => format!("{key} {e}"),
    }
}

/// Which modes of `m` can run on this machine: each is its template passing `argv.rs`'s check
/// and its program found on PATH, exactly as `resolve` decides. The `ACP`/`HEADLESS` columns
/// of `agent-hub agents` and the relay agent cards' `acp`/`headless` booleans are these.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Modes {
    pub acp: bool,
    pub headless: bool,
}

pub fn modes(m: &Manifest, path_var: &str) -> Modes {
    let usable = |argv: &[String], kind: Template| {
        argv.first().is_some_and(|program| {
            argv::check_template(argv, kind).is_ok()
                && on_path::which(program, path_var)
                    .is_some_and(|p| p.to_str().is_some_and(|p| p.starts_with('/')))
        })
    };
    Modes {
        acp: usable(&m.run.acp, Template::Acp),
        headless: usable(&m.run.headless, m.run.headless_prompt.template()),
    }
}

/// How `m` takes delegated work (the `agent-hub agents` column): ACP first, headless second.
pub fn delegate_mode(m: &Manifest, path_var: &str) -> Delegate {
    choose(m, path_var).map_or(Delegate::No, |(mode, _)| mode)
}

/// Every agent of the catalogue with how it takes delegated work, in the catalogue's order.
pub fn list(reg: &Registry, path_var: &str) -> Vec<(String, Delegate)> {
    reg.manifests()
        .map(|m| (m.name.clone(), delegate_mode(m, path_var)))
        .collect()
}

/// What each runnable agent's tasks report of their usage (issue 38 design §1), by the mode
/// they run in on this PATH, in `reg`'s order.
pub fn reports(reg: &Registry, path_var: &str) -> Vec<(String, agent_hub_proto::acp::Reports)> {
    reg.manifests()
        .map(|m| (m.name.clone(), m.reports(delegate_mode(m, path_var))))
        .collect()
}

/// The run spec of the agent `name` names: its `run.acp` argv if that program is on PATH,
/// else its headless template if that one is, with argv[0] made absolute.
pub fn resolve(reg: &Registry, name: &str, path_var: &str) -> Result<RunSpec, RunnableError> {
    check_name(name)?;
    let m = reg
        .get(name)
        .ok_or_else(|| RunnableError::Unknown(name.to_owned()))?;
    match choose(m, path_var) {
        Ok((mode, argv)) => {
            let headless_mcp = match (mode, &m.run.headless_mcp) {
                (Delegate::Headless, Some(t)) => {
                    argv::check_mcp_template(t).map_err(|(i, e)| RunnableError::BadManifest {
                        agent: m.name.clone(),
                        why: bad_template("run.headless_mcp", i, e),
                    })?;
                    Some(t.clone())
                }
                _ => None,
            };
            Ok(RunSpec {
                agent: m.name.clone(),
                mode,
                argv,
                outcome: m.run.outcome,
                prompt_via: m.run.headless_prompt,
                headless_mcp,
            })
        }
        Err(Unrunnable::Template(why)) => Err(RunnableError::BadManifest {
            agent: m.name.clone(),
            why,
        }),
        Err(Unrunnable::Unavailable(why)) => Err(RunnableError::NotRunnable {
            agent: m.name.clone(),
            why,
        }),
    }
}

#[cfg(test)]
mod tests;
