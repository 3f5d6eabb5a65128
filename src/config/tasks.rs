//! The optional `[tasks]` table: delegated work on ACP agents (issue 11; docs/operations.md
//! "Delegated tasks", docs/acp.md "The runner"). The table absent means delegation is off.
//!
//! Owns parsing and validating the table (every key optional with a default, except
//! `cwd_roots`; every value bounded; the roots canonicalised at startup; the delegation keys
//! of docs/delegation.md "Limits") and `check_cwd`, the test a task's working directory must
//! pass. Refuses: unknown keys, a root that is relative
//! or missing, a cwd reached through a symlink or `..` that leaves every root.

use super::bounds::{self, Unit};
use super::ConfigError;
use crate::acp::{Limits, PermissionPolicy};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

/// `tasks.max_concurrent`: each running task is a process group and five threads.
pub const MAX_CONCURRENT_TASKS: u64 = 256;
/// `tasks.queue_max`: a queued task holds its prompt in memory.
pub const MAX_QUEUED_TASKS: u64 = 100_000;
/// `tasks.timeout_secs`: one week, the session's own bound (`acp::config::MAX_TASK_TIMEOUT_MS`).
pub const MAX_TASK_TIMEOUT_SECS: u64 = crate::acp::config::MAX_TASK_TIMEOUT_MS / 1000;
/// Entries of `tasks.cwd_roots` and of `tasks.agent_permission`.
pub const MAX_CWD_ROOTS: usize = 64;
pub const MAX_AGENT_OVERRIDES: usize = 256;

pub const DEFAULT_MAX_CONCURRENT: u64 = 4;
pub const DEFAULT_QUEUE_MAX: u64 = 64;
pub const DEFAULT_TIMEOUT_SECS: u64 = 1800;
pub const DEFAULT_PROMPT_MAX_BYTES: u64 = 256 << 10;
/// `tasks.min_progress_secs`: the shortest `progressSecs` a delegator may ask for.
pub const DEFAULT_MIN_PROGRESS_SECS: u64 = 10;
pub const MAX_MIN_PROGRESS_SECS: u64 = 24 * 3600;
/// `tasks.outcome_text_max_bytes`: the agent's final text in the outcome envelope.
pub const DEFAULT_OUTCOME_TEXT_MAX_BYTES: u64 = 64 << 10;
/// Bounded by the session's own text cap bound: more text than the session keeps cannot be
/// sent anyway.
pub const MAX_OUTCOME_TEXT_MAX_BYTES: u64 = Limits::MAX.max_text_bytes as u64;
/// `tasks.history_max`: settled tasks kept for `task_status`/`tasks` (a few hundred bytes
/// each in memory and in the store).
pub const DEFAULT_HISTORY_MAX: u64 = 1000;
pub const MAX_HISTORY: u64 = 1_000_000;
/// Entries of `tasks.may_mail`.
pub const MAX_MAY_MAIL: usize = 256;
/// `tasks.peer_status_secs`: how often a task a relay peer delegated here is reported to it
/// as running (v0 `task_status`, docs/delegation.md "Across hubs").
pub const DEFAULT_PEER_STATUS_SECS: u64 = 30;
pub const MAX_PEER_STATUS_SECS: u64 = 3600;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTasks {
    max_concurrent: Option<u64>,
    queue_max: Option<u64>,
    timeout_secs: Option<u64>,
    prompt_max_bytes: Option<u64>,
    cwd_roots: Vec<PathBuf>,
    permission: Option<String>,
    #[serde(default)]
    agent_permission: BTreeMap<String, String>,
    // Delegation (docs/delegation.md "Limits").
    #[serde(default)]
    may_mail: Vec<String>,
    min_progress_secs: Option<u64>,
    outcome_text_max_bytes: Option<u64>,
    history_max: Option<u64>,
    peer_status_secs: Option<u64>,
    manifests_dir: Option<PathBuf>,
    credentials_dir: Option<PathBuf>,
    env_pass: Option<Vec<String>>,
    /// The headless fallback's stdout cap (docs/delegation.md "Headless tasks").
    headless_stdout_max_bytes: Option<u64>,
    // The session's limits (acp::Limits, docs/acp.md "Limits" and "Deadlines").
    max_line_bytes: Option<u64>,
    max_malformed_lines: Option<u64>,
    max_text_bytes: Option<u64>,
    max_agent_requests: Option<u64>,
    max_log_events: Option<u64>,
    initialize_timeout_ms: Option<u64>,
    session_new_timeout_ms: Option<u64>,
    cancel_grace_ms: Option<u64>,
    progress_interval_ms: Option<u64>,
    eof_exit_wait_ms: Option<u64>,
    stdin_grace_ms: Option<u64>,
    term_grace_ms: Option<u64>,
}

/// A validated `[tasks]` table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TasksConfig {
    /// Tasks running at once; more wait in the queue, in order.
    pub max_concurrent: usize,
    /// Tasks waiting at most; beyond it a delegation is refused. 0: no queue.
    pub queue_max: usize,
    /// A task's wall-clock budget unless the delegator asks for less.
    pub timeout_secs: u64,
    /// Largest prompt accepted (also the session's `max_prompt_bytes`).
    pub prompt_max_bytes: usize,
    /// Canonical folders; a task's cwd must lie under one (`check_cwd`).
    pub cwd_roots: Vec<PathBuf>,
    /// How permission requests are answered unless an agent has an override.
    pub permission: PermissionPolicy,
    /// Per manifest name.
    pub agent_permission: BTreeMap<String, PermissionPolicy>,
    /// The session limits every task gets.
    pub limits: Limits,
    /// Names a task's identity may mail besides its delegator (roster names).
    pub may_mail: Vec<String>,
    /// The shortest `progressSecs` a delegation may ask for (0 asks for none).
    pub min_progress_secs: u64,
    /// The cap on the agent's final text in a `task_outcome` envelope.
    pub outcome_text_max_bytes: usize,
    /// Settled tasks kept for `task_status` and `tasks`, oldest dropped first.
    pub history_max: usize,
    /// Seconds between `task_status` messages to a peer that delegated a task here.
    pub peer_status_secs: u64,
    /// An extra folder of agent manifests the runner looks in (absolute).
    pub manifests_dir: Option<PathBuf>,
    /// Where task credential files are written (absolute); None: `task-credentials` beside
    /// the audit log (docs/delegation.md "How a task runs").
    pub credentials_dir: Option<PathBuf>,
    /// Environment names (or `PREFIX*`) passed to agents; None: the default list
    /// (docs/delegation.md "The agent's environment").
    pub env_pass: Option<Vec<String>>,
    /// Bytes of a headless agent's stdout kept for its outcome parser; the rest is dropped
    /// and the outcome says `truncated` (docs/delegation.md "Headless tasks").
    pub headless_stdout_max_bytes: usize,
}

impl TasksConfig {
    /// The policy for tasks on `agent` (a manifest name).
    pub fn permission_for(&self, agent: &str) -> PermissionPolicy {
        self.agent_permission
            .get(agent)
            .copied()
            .unwrap_or(self.permission)
    }

    /// `timeout_secs` in milliseconds, as `acp::SessionConfig::task_timeout_ms` takes it.
    pub fn timeout_ms(&self) -> u64 {
        // Exact: timeout_secs is at most a week.
        self.timeout_secs * 1000
    }

    /// `check_cwd` against this table's roots.
    pub fn check_cwd(&self, path: &Path) -> Result<PathBuf, CwdError> {
        check_cwd(&self.cwd_roots, path)
    }

    pub(super) fn from_raw(raw: RawTasks) -> Result<TasksConfig, ConfigError> {
        let count = |key: &str, v: Option<u64>, default: u64, min: u64, max: u64| {
            let v = v.unwrap_or(default);
            bounds::check(key, v, min, max, Unit::Count).map(|()| v)
        };
        let max_concurrent = count(
            "tasks.max_concurrent",
            raw.max_concurrent,
            DEFAULT_MAX_CONCURRENT,
            1,
            MAX_CONCURRENT_TASKS,
        )?;
        let queue_max = count(
            "tasks.queue_max",
            raw.queue_max,
            DEFAULT_QUEUE_MAX,
            0,
            MAX_QUEUED_TASKS,
        )?;
        let timeout_secs = raw.timeout_secs.unwrap_or(DEFAULT_TIMEOUT_SECS);
        bounds::check_duration_secs("tasks.timeout_secs", timeout_secs, MAX_TASK_TIMEOUT_SECS)?;
        let prompt_max_bytes = raw.prompt_max_bytes.unwrap_or(DEFAULT_PROMPT_MAX_BYTES);
        bounds::check_bytes(
            "tasks.prompt_max_bytes",
            prompt_max_bytes,
            Limits::MAX.max_prompt_bytes as u64,
        )?;

        if raw.cwd_roots.is_empty() {
            return Err(ConfigError::Invalid(
                "tasks.cwd_roots must list at least one folder a task may run in".into(),
            ));
        }
        if raw.cwd_roots.len() > MAX_CWD_ROOTS {
            return Err(ConfigError::Invalid(format!(
                "tasks.cwd_roots lists {} folders; at most {MAX_CWD_ROOTS}",
                raw.cwd_roots.len()
            )));
        }
        let mut cwd_roots = Vec::new();
        for root in &raw.cwd_roots {
            let canonical = canonical_root(root)?;
            if !cwd_roots.contains(&canonical) {
                cwd_roots.push(canonical);
            }
        }

        let policy = |key: &str, tag: &str| {
            PermissionPolicy::from_tag(tag).ok_or_else(|| {
                ConfigError::Invalid(format!(
                    "{key} {tag:?} is not one of {}",
                    PermissionPolicy::TAGS.join(", ")
                ))
            })
        };
        let permission = match raw.permission.as_deref() {
            None => PermissionPolicy::default(),
            Some(tag) => policy("tasks.permission", tag)?,
        };
        if raw.agent_permission.len() > MAX_AGENT_OVERRIDES {
            return Err(ConfigError::Invalid(format!(
                "tasks.agent_permission has {} entries; at most {MAX_AGENT_OVERRIDES}",
                raw.agent_permission.len()
            )));
        }
        let mut agent_permission = BTreeMap::new();
        for (agent, tag) in &raw.agent_permission {
            if !crate::agents::manifest::valid_name(agent) {
                return Err(ConfigError::Invalid(format!(
                    "tasks.agent_permission: {agent:?} is not an agent name ([a-z0-9][a-z0-9_-]*, at most 32 bytes)"
                )));
            }
            let p = policy(&format!("tasks.agent_permission.{agent}"), tag)?;
            agent_permission.insert(agent.clone(), p);
        }

        let limits = session_limits(&raw, prompt_max_bytes)?;
        let delegation = delegation_keys(&raw)?;
        let headless_stdout_max_bytes = raw
            .headless_stdout_max_bytes
            .unwrap_or(crate::headless::DEFAULT_STDOUT_MAX_BYTES);
        bounds::check(
            "tasks.headless_stdout_max_bytes",
            headless_stdout_max_bytes,
            1024,
            crate::headless::MAX_STDOUT_MAX_BYTES,
            Unit::Bytes,
        )?;
        Ok(TasksConfig {
            // Each fits: bounded above far below usize::MAX.
            max_concurrent: max_concurrent as usize,
            queue_max: queue_max as usize,
            timeout_secs,
            prompt_max_bytes: prompt_max_bytes as usize,
            cwd_roots,
            permission,
            agent_permission,
            limits,
            may_mail: delegation.may_mail,
            min_progress_secs: delegation.min_progress_secs,
            outcome_text_max_bytes: delegation.outcome_text_max_bytes,
            history_max: delegation.history_max,
            peer_status_secs: delegation.peer_status_secs,
            manifests_dir: delegation.manifests_dir,
            credentials_dir: delegation.credentials_dir,
            env_pass: delegation.env_pass,
            headless_stdout_max_bytes: headless_stdout_max_bytes as usize,
        })
    }
}

/// The delegation keys of the table, validated.
struct DelegationKeys {
    may_mail: Vec<String>,
    min_progress_secs: u64,
    outcome_text_max_bytes: usize,
    history_max: usize,
    peer_status_secs: u64,
    manifests_dir: Option<PathBuf>,
    credentials_dir: Option<PathBuf>,
    env_pass: Option<Vec<String>>,
}

/// Entries of `tasks.env_pass`.
pub const MAX_ENV_PASS: usize = 256;

fn delegation_keys(raw: &RawTasks) -> Result<DelegationKeys, ConfigError> {
    if raw.may_mail.len() > MAX_MAY_MAIL {
        return Err(ConfigError::Invalid(format!(
            "tasks.may_mail lists {} names; at most {MAX_MAY_MAIL}",
            raw.may_mail.len()
        )));
    }
    let mut may_mail: Vec<String> = Vec::new();
    for name in &raw.may_mail {
        // A roster name (roster::Roster::parse's rule: not blank, not the hub); a task
        // identity is no target, its names being reserved.
        if name.trim().is_empty()
            || name.eq_ignore_ascii_case(crate::roster::HUB_NAME)
            || name.starts_with(crate::tasks::TASK_PREFIX)
        {
            return Err(ConfigError::Invalid(format!(
                "tasks.may_mail: {name:?} is not an agent name a task may mail"
            )));
        }
        if !may_mail.contains(name) {
            may_mail.push(name.clone());
        }
    }
    let min_progress_secs = raw.min_progress_secs.unwrap_or(DEFAULT_MIN_PROGRESS_SECS);
    bounds::check(
        "tasks.min_progress_secs",
        min_progress_secs,
        1,
        MAX_MIN_PROGRESS_SECS,
        Unit::Secs,
    )?;
    let outcome_text_max_bytes = raw
        .outcome_text_max_bytes
        .unwrap_or(DEFAULT_OUTCOME_TEXT_MAX_BYTES);
    bounds::check(
        "tasks.outcome_text_max_bytes",
        outcome_text_max_bytes,
        0,
        MAX_OUTCOME_TEXT_MAX_BYTES,
        Unit::Bytes,
    )?;
    let history_max = raw.history_max.unwrap_or(DEFAULT_HISTORY_MAX);
    bounds::check(
        "tasks.history_max",
        history_max,
        0,
        MAX_HISTORY,
        Unit::Count,
    )?;
    let peer_status_secs = raw.peer_status_secs.unwrap_or(DEFAULT_PEER_STATUS_SECS);
    bounds::check(
        "tasks.peer_status_secs",
        peer_status_secs,
        1,
        MAX_PEER_STATUS_SECS,
        Unit::Secs,
    )?;
    if let Some(dir) = &raw.manifests_dir {
        if !dir.is_absolute() {
            return Err(ConfigError::Invalid(format!(
                "tasks.manifests_dir: {} is not an absolute path",
                dir.display()
            )));
        }
    }
    if let Some(dir) = &raw.credentials_dir {
        if !dir.is_absolute() {
            return Err(ConfigError::Invalid(format!(
                "tasks.credentials_dir: {} is not an absolute path",
                dir.display()
            )));
        }
    }
    if let Some(names) = &raw.env_pass {
        if names.len() > MAX_ENV_PASS {
            return Err(ConfigError::Invalid(format!(
                "tasks.env_pass lists {} names; at most {MAX_ENV_PASS}",
                names.len()
            )));
        }
        for n in names {
            let stem = n.strip_suffix('*').unwrap_or(n);
            let plain =
                !stem.is_empty() && stem.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
            if !plain {
                return Err(ConfigError::Invalid(format!(
                    "tasks.env_pass: {n:?} is not an environment variable name (A-Z, 0-9, _; a trailing * for a prefix)"
                )));
            }
        }
    }
    Ok(DelegationKeys {
        may_mail,
        // Both fit: bounded far below usize::MAX.
        min_progress_secs,
        outcome_text_max_bytes: outcome_text_max_bytes as usize,
        history_max: history_max as usize,
        peer_status_secs,
        manifests_dir: raw.manifests_dir.clone(),
        credentials_dir: raw.credentials_dir.clone(),
        env_pass: raw.env_pass.clone(),
    })
}

/// The session limits: each key optional with `acp::Limits::default()`, bounded as
/// `acp::Limits::validate` bounds it (checked on the u64 before any narrowing cast).
fn session_limits(raw: &RawTasks, prompt_max_bytes: u64) -> Result<Limits, ConfigError> {
    let d = Limits::default();
    let m = &Limits::MAX;
    let key = |k: &str, v: Option<u64>, default: u64, min: u64, max: u64| {
        let unit = if k.ends_with("_ms") {
            Unit::Millis
        } else if k.ends_with("_bytes") {
            Unit::Bytes
        } else {
            Unit::Count
        };
        let v = v.unwrap_or(default);
        bounds::check(&format!("tasks.{k}"), v, min, max, unit).map(|()| v)
    };
    let limits = Limits {
        max_line_bytes: key(
            "max_line_bytes",
            raw.max_line_bytes,
            d.max_line_bytes as u64,
            1024,
            m.max_line_bytes as u64,
        )? as usize,
        max_malformed_lines: key(
            "max_malformed_lines",
            raw.max_malformed_lines,
            d.max_malformed_lines.into(),
            0,
            m.max_malformed_lines.into(),
        )? as u32,
        max_text_bytes: key(
            "max_text_bytes",
            raw.max_text_bytes,
            d.max_text_bytes as u64,
            0,
            m.max_text_bytes as u64,
        )? as usize,
        max_prompt_bytes: prompt_max_bytes as usize,
        max_agent_requests: key(
            "max_agent_requests",
            raw.max_agent_requests,
            d.max_agent_requests,
            0,
            m.max_agent_requests,
        )?,
        max_log_events: key(
            "max_log_events",
            raw.max_log_events,
            d.max_log_events.into(),
            0,
            m.max_log_events.into(),
        )? as u32,
        initialize_timeout_ms: key(
            "initialize_timeout_ms",
            raw.initialize_timeout_ms,
            d.initialize_timeout_ms,
            1,
            m.initialize_timeout_ms,
        )?,
        session_new_timeout_ms: key(
            "session_new_timeout_ms",
            raw.session_new_timeout_ms,
            d.session_new_timeout_ms,
            1,
            m.session_new_timeout_ms,
        )?,
        cancel_grace_ms: key(
            "cancel_grace_ms",
            raw.cancel_grace_ms,
            d.cancel_grace_ms,
            0,
            m.cancel_grace_ms,
        )?,
        progress_interval_ms: key(
            "progress_interval_ms",
            raw.progress_interval_ms,
            d.progress_interval_ms,
            0,
            m.progress_interval_ms,
        )?,
        eof_exit_wait_ms: key(
            "eof_exit_wait_ms",
            raw.eof_exit_wait_ms,
            d.eof_exit_wait_ms,
            0,
            m.eof_exit_wait_ms,
        )?,
        stdin_grace_ms: key(
            "stdin_grace_ms",
            raw.stdin_grace_ms,
            d.stdin_grace_ms,
            0,
            m.stdin_grace_ms,
        )?,
        term_grace_ms: key(
            "term_grace_ms",
            raw.term_grace_ms,
            d.term_grace_ms,
            0,
            m.term_grace_ms,
        )?,
    };
    // The session's own check, so the two can never disagree silently.
    limits
        .validate()
        .map_err(|e| ConfigError::Invalid(format!("tasks: {e}")))?;
    Ok(limits)
}

fn canonical_root(root: &Path) -> Result<PathBuf, ConfigError> {
    if !root.is_absolute() {
        return Err(ConfigError::Invalid(format!(
            "tasks.cwd_roots: {} is not an absolute path",
            root.display()
        )));
    }
    let canonical = std::fs::canonicalize(root)
        .map_err(|e| ConfigError::Invalid(format!("tasks.cwd_roots: {}: {e}", root.display())))?;
    if !canonical.is_dir() {
        return Err(ConfigError::Invalid(format!(
            "tasks.cwd_roots: {} is not a directory",
            root.display()
        )));
    }
    Ok(canonical)
}

/// Why a task's cwd was refused. The delegator sees the message.
#[derive(Debug)]
pub enum CwdError {
    NotAbsolute(PathBuf),
    /// Canonicalising failed: missing, unreadable, or a dangling symlink.
    Unresolvable(PathBuf, std::io::Error),
    NotADirectory(PathBuf),
    NotUtf8(PathBuf),
    /// The canonical path is under none of the roots.
    OutsideRoots {
        path: PathBuf,
        canonical: PathBuf,
        roots: Vec<PathBuf>,
    },
}

impl fmt::Display for CwdError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CwdError::NotAbsolute(p) => {
                write!(f, "the task's cwd {} must be an absolute path", p.display())
            }
            CwdError::Unresolvable(p, e) => {
                write!(f, "the task's cwd {} cannot be resolved: {e}", p.display())
            }
            CwdError::NotADirectory(p) => {
                write!(f, "the task's cwd {} is not a directory", p.display())
            }
            CwdError::NotUtf8(p) => write!(f, "the task's cwd {} is not UTF-8", p.display()),
            CwdError::OutsideRoots {
                path,
                canonical,
                roots,
            } => {
                let roots: Vec<String> = roots.iter().map(|r| r.display().to_string()).collect();
                if path == canonical {
                    write!(f, "the task's cwd {} ", path.display())?;
                } else {
                    write!(
                        f,
                        "the task's cwd {} resolves to {}, which ",
                        path.display(),
                        canonical.display()
                    )?;
                }
                write!(f, "is under none of tasks.cwd_roots ({})", roots.join(", "))
            }
        }
    }
}

impl std::error::Error for CwdError {}

/// The canonical form of `path` if it is an existing directory under one of `roots` (which
/// must be canonical, as `TasksConfig::cwd_roots` are). Canonicalising first resolves every
/// symlink and `..`, so neither can lead out of a root; the comparison is by whole path
/// components (`/srv/ab` is not under `/srv/a`). The task runs in the returned path.
pub fn check_cwd(roots: &[PathBuf], path: &Path) -> Result<PathBuf, CwdError> {
    if !path.is_absolute() {
        return Err(CwdError::NotAbsolute(path.to_owned()));
    }
    let canonical =
        std::fs::canonicalize(path).map_err(|e| CwdError::Unresolvable(path.to_owned(), e))?;
    if !canonical.is_dir() {
        return Err(CwdError::NotADirectory(path.to_owned()));
    }
    if canonical.to_str().is_none() {
        return Err(CwdError::NotUtf8(path.to_owned()));
    }
    if !roots.iter().any(|r| canonical.starts_with(r)) {
        return Err(CwdError::OutsideRoots {
            path: path.to_owned(),
            canonical,
            roots: roots.to_vec(),
        });
    }
    Ok(canonical)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    struct Dir(PathBuf);
    impl Dir {
        fn new(tag: &str) -> Dir {
            let p =
                std::env::temp_dir().join(format!("agent-hub-tasks-{tag}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&p);
            std::fs::create_dir_all(&p).unwrap();
            Dir(std::fs::canonicalize(&p).unwrap())
        }
    }
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn parse(body: &str) -> Result<TasksConfig, ConfigError> {
        let raw: RawTasks = toml::from_str(body).map_err(|e| ConfigError::Toml(e.to_string()))?;
        TasksConfig::from_raw(raw)
    }

    fn err(body: &str) -> String {
        parse(body).unwrap_err().to_string()
    }

    #[test]
    fn defaults() {
        let d = Dir::new("defaults");
        let t = parse(&format!("cwd_roots = [{:?}]", d.0)).unwrap();
        assert_eq!(t.max_concurrent, 4);
        assert_eq!(t.queue_max, 64);
        assert_eq!(t.timeout_secs, 1800);
        assert_eq!(t.timeout_ms(), 1_800_000);
        assert_eq!(t.prompt_max_bytes, 262_144);
        assert_eq!(t.permission, PermissionPolicy::Reject);
        assert_eq!(t.permission_for("claude"), PermissionPolicy::Reject);
        let want = Limits {
            max_prompt_bytes: 262_144,
            ..Limits::default()
        };
        assert_eq!(t.limits, want);
        assert_eq!(t.cwd_roots, vec![d.0.clone()]);
        assert!(t.may_mail.is_empty());
        assert_eq!(t.min_progress_secs, 10);
        assert_eq!(t.outcome_text_max_bytes, 65_536);
        assert_eq!(t.history_max, 1000);
        assert_eq!(t.manifests_dir, None);
        assert_eq!(t.headless_stdout_max_bytes, 8 << 20);
    }

    #[test]
    fn the_headless_stdout_cap_is_read_and_bounded() {
        let d = Dir::new("headless");
        let root = format!("cwd_roots = [{:?}]\n", d.0);
        let t = parse(&format!("{root}headless_stdout_max_bytes = 4096")).unwrap();
        assert_eq!(t.headless_stdout_max_bytes, 4096);
        for (line, want) in [
            (
                "headless_stdout_max_bytes = 1023",
                "tasks.headless_stdout_max_bytes must be at least 1024",
            ),
            (
                "headless_stdout_max_bytes = 268435457",
                "tasks.headless_stdout_max_bytes = 268435457 is above its upper bound of 268435456",
            ),
        ] {
            let e = err(&format!("{root}{line}"));
            assert!(e.contains(want), "{line}: {e}");
        }
    }

    #[test]
    fn delegation_keys_are_read_and_bounded() {
        let d = Dir::new("delegation");
        let root = format!("cwd_roots = [{:?}]\n", d.0);
        let t = parse(&format!(
            "{root}may_mail = [\"critic\", \"scribe\", \"critic\"]\nmin_progress_secs = 1\noutcome_text_max_bytes = 0\nhistory_max = 0\nmanifests_dir = \"/opt/manifests\"\n"
        ))
        .unwrap();
        assert_eq!(t.may_mail, vec!["critic".to_owned(), "scribe".to_owned()]);
        assert_eq!(
            (t.min_progress_secs, t.outcome_text_max_bytes, t.history_max),
            (1, 0, 0)
        );
        assert_eq!(t.manifests_dir, Some(PathBuf::from("/opt/manifests")));
        let cases = [
            ("min_progress_secs = 0", "tasks.min_progress_secs must be greater than 0"),
            ("min_progress_secs = 86401", "tasks.min_progress_secs = 86401 is above its upper bound of 86400 (1 day)"),
            ("outcome_text_max_bytes = 16777217", "tasks.outcome_text_max_bytes = 16777217 is above its upper bound of 16777216 (16 MiB)"),
            ("history_max = 1000001", "tasks.history_max = 1000001 is above its upper bound of 1000000"),
            ("manifests_dir = \"relative\"", "tasks.manifests_dir: relative is not an absolute path"),
            ("may_mail = [\"hub\"]", "tasks.may_mail: \"hub\" is not an agent name a task may mail"),
            ("may_mail = [\"HUB\"]", "is not an agent name a task may mail"),
            ("may_mail = [\"task-0123\"]", "is not an agent name a task may mail"),
            ("may_mail = [\" \"]", "is not an agent name a task may mail"),
            ("may_mail = \"critic\"", "invalid type"),
            ("history_max = -1", "invalid value"),
        ];
        for (line, want) in cases {
            let e = err(&format!("{root}{line}"));
            assert!(e.contains(want), "{line}: {e}");
        }
        let many: Vec<String> = (0..=MAX_MAY_MAIL).map(|i| format!("\"a{i}\"")).collect();
        let e = err(&format!("{root}may_mail = [{}]", many.join(",")));
        assert!(
            e.contains("tasks.may_mail lists 257 names; at most 256"),
            "{e}"
        );
    }

    #[test]
    fn every_key_is_read_and_overrides_apply() {
        let d = Dir::new("keys");
        let t = parse(&format!(
            r#"
            max_concurrent = 2
            queue_max = 0
            timeout_secs = 60
            prompt_max_bytes = 1000
            cwd_roots = [{:?}, {:?}]
            permission = "allow"
            agent_permission = {{ codex = "reject" }}
            max_line_bytes = 2048
            max_malformed_lines = 1
            max_text_bytes = 10
            max_agent_requests = 5
            max_log_events = 6
            initialize_timeout_ms = 7
            session_new_timeout_ms = 8
            cancel_grace_ms = 9
            progress_interval_ms = 0
            eof_exit_wait_ms = 11
            stdin_grace_ms = 12
            term_grace_ms = 13
            "#,
            d.0, d.0
        ))
        .unwrap();
        assert_eq!((t.max_concurrent, t.queue_max, t.timeout_secs), (2, 0, 60));
        assert_eq!(t.cwd_roots.len(), 1, "duplicate roots are kept once");
        assert_eq!(t.permission_for("claude"), PermissionPolicy::Allow);
        assert_eq!(t.permission_for("codex"), PermissionPolicy::Reject);
        let l = &t.limits;
        assert_eq!(
            (
                l.max_line_bytes,
                l.max_malformed_lines,
                l.max_text_bytes,
                l.max_prompt_bytes
            ),
            (2048, 1, 10, 1000)
        );
        assert_eq!((l.max_agent_requests, l.max_log_events), (5, 6));
        assert_eq!(
            (
                l.initialize_timeout_ms,
                l.session_new_timeout_ms,
                l.cancel_grace_ms,
                l.progress_interval_ms,
                l.eof_exit_wait_ms,
                l.stdin_grace_ms,
                l.term_grace_ms
            ),
            (7, 8, 9, 0, 11, 12, 13)
        );
    }

    #[test]
    fn bounds_are_checked() {
        let d = Dir::new("bounds");
        let root = format!("cwd_roots = [{:?}]\n", d.0);
        let cases = [
            (
                "max_concurrent = 0",
                "tasks.max_concurrent must be greater than 0",
            ),
            (
                "max_concurrent = 257",
                "tasks.max_concurrent = 257 is above its upper bound of 256",
            ),
            ("queue_max = 100001", "tasks.queue_max = 100001"),
            (
                "timeout_secs = 0",
                "tasks.timeout_secs must be greater than 0",
            ),
            ("timeout_secs = 604801", "upper bound of 604800 (7 days)"),
            (
                "prompt_max_bytes = 0",
                "tasks.prompt_max_bytes must be greater than 0",
            ),
            (
                "prompt_max_bytes = 16777217",
                "upper bound of 16777216 (16 MiB)",
            ),
            (
                "max_line_bytes = 1023",
                "tasks.max_line_bytes must be at least 1024",
            ),
            (
                "max_line_bytes = 268435457",
                "tasks.max_line_bytes = 268435457",
            ),
            // Past u32: must be refused, not wrapped into range by a cast.
            (
                "max_malformed_lines = 4294967297",
                "tasks.max_malformed_lines = 4294967297",
            ),
            (
                "max_log_events = 4294967296",
                "tasks.max_log_events = 4294967296",
            ),
            (
                "initialize_timeout_ms = 0",
                "tasks.initialize_timeout_ms must be greater than 0",
            ),
            (
                "session_new_timeout_ms = 3600001",
                "upper bound of 3600000 (1 hour)",
            ),
            ("term_grace_ms = 600001", "tasks.term_grace_ms = 600001"),
            ("max_agent_requests = 10000001", "tasks.max_agent_requests"),
            (
                "permission = \"yolo\"",
                "tasks.permission \"yolo\" is not one of reject, allow",
            ),
            (
                "agent_permission = { \"../x\" = \"allow\" }",
                "is not an agent name",
            ),
            (
                "agent_permission = { claude = \"maybe\" }",
                "tasks.agent_permission.claude",
            ),
            ("surprise = 1", "unknown field"),
        ];
        for (line, want) in cases {
            let e = err(&format!("{root}{line}"));
            assert!(e.contains(want), "{line}: {e}");
        }
    }

    #[test]
    fn roots_are_checked_at_startup() {
        let d = Dir::new("roots");
        assert!(err("cwd_roots = []").contains("at least one folder"));
        assert!(err("max_concurrent = 1").contains("cwd_roots"));
        assert!(err("cwd_roots = [\"relative/dir\"]").contains("not an absolute path"));
        let missing = d.0.join("missing");
        assert!(err(&format!("cwd_roots = [{missing:?}]")).contains("missing"));
        let file = d.0.join("file");
        std::fs::write(&file, "x").unwrap();
        assert!(err(&format!("cwd_roots = [{file:?}]")).contains("not a directory"));
        // A root given through a symlink is kept in its canonical form.
        let real = d.0.join("real");
        std::fs::create_dir(&real).unwrap();
        let link = d.0.join("link");
        symlink(&real, &link).unwrap();
        let t = parse(&format!("cwd_roots = [{link:?}]")).unwrap();
        assert_eq!(t.cwd_roots, vec![real]);
    }

    #[test]
    fn cwd_checks_refuse_escapes() {
        let d = Dir::new("cwd");
        let root = d.0.join("root");
        let inside = root.join("project");
        std::fs::create_dir_all(&inside).unwrap();
        let outside = d.0.join("outside");
        std::fs::create_dir(&outside).unwrap();
        let sibling = d.0.join("rootling");
        std::fs::create_dir(&sibling).unwrap();
        let roots = vec![root.clone()];

        assert_eq!(check_cwd(&roots, &inside).unwrap(), inside);
        assert_eq!(check_cwd(&roots, &root).unwrap(), root);
        // `..` that stays inside is fine, and the canonical path is what runs.
        let dotdot_in = inside.join("..").join("project");
        assert_eq!(check_cwd(&roots, &dotdot_in).unwrap(), inside);
        // `..` that leaves the root.
        let dotdot_out = root.join("..").join("outside");
        let e = check_cwd(&roots, &dotdot_out).unwrap_err();
        assert!(matches!(e, CwdError::OutsideRoots { .. }), "{e}");
        assert!(e.to_string().contains("resolves to"), "{e}");
        // A symlink inside the root pointing out of it.
        let escape = inside.join("escape");
        symlink(&outside, &escape).unwrap();
        let e = check_cwd(&roots, &escape).unwrap_err();
        assert!(
            e.to_string()
                .contains(&format!("resolves to {}", outside.display())),
            "{e}"
        );
        // A symlink under the root into the root is fine.
        let back = outside.join("back");
        symlink(&inside, &back).unwrap();
        assert_eq!(check_cwd(&roots, &back).unwrap(), inside);
        // A name that merely starts like the root is not under it.
        assert!(matches!(
            check_cwd(&roots, &sibling),
            Err(CwdError::OutsideRoots { .. })
        ));
        // Missing, relative, a file, a dangling link.
        assert!(matches!(
            check_cwd(&roots, &root.join("nope")),
            Err(CwdError::Unresolvable(..))
        ));
        assert!(matches!(
            check_cwd(&roots, Path::new("root/project")),
            Err(CwdError::NotAbsolute(_))
        ));
        let file = inside.join("file.txt");
        std::fs::write(&file, "x").unwrap();
        assert!(matches!(
            check_cwd(&roots, &file),
            Err(CwdError::NotADirectory(_))
        ));
        let dangling = inside.join("dangling");
        symlink(d.0.join("gone"), &dangling).unwrap();
        assert!(matches!(
            check_cwd(&roots, &dangling),
            Err(CwdError::Unresolvable(..))
        ));
    }
}

#[cfg(test)]
mod whole_config {
    use crate::config::Config;
    use std::path::Path;

    const EXAMPLE: &str = include_str!("../../config.example.toml");

    #[test]
    fn a_peer_may_delegate_only_to_a_hub_with_tasks_and_statuses_are_bounded() {
        let base = Path::new("/etc/agent-hub");
        let relay = "\n[relay]\npeer_id = \"me\"\nlisten = \"127.0.0.2:46111\"\nheartbeat_interval_ms = 30000\nhandshake_timeout_ms = 10000\nreconnect_backoff_ms = [10000]\nfeatures = [\"unknown-ok\"]\nstatus_path = \"s.json\"\n\n[[relay.peers]]\nid = \"lab\"\nkey_file = \"k\"\nallow_v0 = true\ndelegate = true\n";
        let e = Config::parse(&format!("{EXAMPLE}{relay}"), base).unwrap_err();
        assert!(
            e.to_string()
                .contains("\"lab\" sets delegate = true, but there is no [tasks] table"),
            "{e}"
        );
        let tmp = std::fs::canonicalize(std::env::temp_dir()).unwrap();
        let tasks =
            |extra: &str| format!("{EXAMPLE}{relay}\n[tasks]\ncwd_roots = [{tmp:?}]\n{extra}");
        let c = Config::parse(&tasks(""), base).unwrap();
        assert!(c.relay.unwrap().peers[0].delegate);
        assert_eq!(
            c.tasks.unwrap().peer_status_secs,
            super::DEFAULT_PEER_STATUS_SECS
        );
        assert_eq!(
            Config::parse(&tasks("peer_status_secs = 1\n"), base)
                .unwrap()
                .tasks
                .unwrap()
                .peer_status_secs,
            1
        );
        for bad in ["peer_status_secs = 0\n", "peer_status_secs = 3601\n"] {
            let e = Config::parse(&tasks(bad), base).unwrap_err();
            assert!(e.to_string().contains("tasks.peer_status_secs"), "{e}");
        }
    }

    #[test]
    fn the_table_is_optional_and_hooks_into_the_config() {
        let base = Path::new("/etc/agent-hub");
        assert_eq!(Config::parse(EXAMPLE, base).unwrap().tasks, None);
        let tmp = std::fs::canonicalize(std::env::temp_dir()).unwrap();
        let text = format!("{EXAMPLE}\n[tasks]\ncwd_roots = [{tmp:?}]\nmax_concurrent = 2\n");
        let t = Config::parse(&text, base).unwrap().tasks.unwrap();
        assert_eq!(t.max_concurrent, 2);
        assert_eq!(t.cwd_roots, vec![tmp]);
        let bad = format!("{EXAMPLE}\n[tasks]\ncwd_roots = [\"/\"]\nqueue_max = -1\n");
        assert!(Config::parse(&bad, base).is_err());
    }

    #[test]
    fn the_examples_commented_table_uncommented_is_valid_and_says_the_defaults() {
        let tmp = std::fs::canonicalize(std::env::temp_dir()).unwrap();
        let table: String = EXAMPLE
            .lines()
            .skip_while(|l| !l.starts_with("# [tasks]"))
            .take_while(|l| !l.is_empty())
            .filter_map(|l| l.strip_prefix("# "))
            .filter(|l| !l.starts_with('#'))
            .map(|l| format!("{l}\n"))
            .collect::<String>()
            .replace("/home/me/src", tmp.to_str().unwrap());
        assert!(table.starts_with("[tasks]\n"), "{table}");
        let c = Config::parse(&format!("{EXAMPLE}\n{table}"), Path::new("/d")).unwrap();
        let t = c.tasks.unwrap();
        assert_eq!(
            (t.max_concurrent, t.queue_max, t.timeout_secs),
            (4, 64, 1800)
        );
        assert_eq!(t.prompt_max_bytes, super::DEFAULT_PROMPT_MAX_BYTES as usize);
        assert_eq!(
            (t.min_progress_secs, t.outcome_text_max_bytes, t.history_max),
            (10, 65_536, 1000)
        );
        assert!(t.may_mail.is_empty());
        assert_eq!(
            t.permission_for("claude"),
            crate::acp::PermissionPolicy::Allow
        );
        assert_eq!(
            t.permission_for("codex"),
            crate::acp::PermissionPolicy::Reject
        );
    }
}
