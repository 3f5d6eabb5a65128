//! The optional `[tasks]` table: delegated work on ACP agents (issue 11; docs/operations.md
//! "Delegated tasks", docs/acp.md "The runner"). The table absent means delegation is off.
//!
//! Owns parsing and validating the table (every key optional with a default, except
//! `cwd_roots`; every value bounded; the roots canonicalised at startup; the delegation keys
//! of docs/delegation.md "Limits"; the approval keys of issue 37, design §8) and `check_cwd`,
//! the test a task's working directory must pass. Refuses: unknown keys, a root that is relative
//! or missing, a cwd reached through a symlink or `..` that leaves every root.

use super::bounds::{self, Unit};
use super::ConfigError;
use agent_hub_proto::acp::{Limits, PermissionFallback, PermissionPolicy};
use agent_hub_proto::tasks::placement::{self, Floors};
use agent_hub_proto::tasks::settings::{
    ApprovalSettings, DEFAULT_MAX_OPEN_REQUESTS, DEFAULT_MAX_OPEN_REQUESTS_PER_TASK,
    DEFAULT_MAX_REQUEST_BYTES, DEFAULT_PERMISSION, DEFAULT_PERMISSION_TIMEOUT_SECS, MAX_APPROVERS,
    MAX_MAX_OPEN_REQUESTS, MAX_MAX_REQUEST_BYTES, MAX_OPEN_REQUESTS_PER_TASK,
    MAX_PERMISSION_TIMEOUT_SECS, MIN_MAX_REQUEST_BYTES,
};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

/// `tasks.max_concurrent`: each running task is a process group and five threads.
pub const MAX_CONCURRENT_TASKS: u64 = 256;
/// `tasks.queue_max`: a queued task holds its prompt in memory.
pub const MAX_QUEUED_TASKS: u64 = 100_000;
/// `tasks.timeout_secs`: one week, the session's own bound (`acp::config::MAX_TASK_TIMEOUT_MS`);
/// the type and this bound are the core's (`tasks::settings`), re-exported here.
pub use agent_hub_proto::tasks::settings::{SandboxMode, TasksConfig, MAX_TASK_TIMEOUT_SECS};
/// Entries of `tasks.cwd_roots` and of `tasks.agent_permission`.
pub const MAX_CWD_ROOTS: usize = 64;
pub const MAX_AGENT_OVERRIDES: usize = 256;

pub const DEFAULT_MAX_CONCURRENT: u64 = 4;
pub const DEFAULT_QUEUE_MAX: u64 = 64;

/// `tasks.max_per_delegator` when the table says nothing: `max_concurrent + queue_max / 2`
/// (36 with the defaults).
pub fn default_max_per_delegator(max_concurrent: u64, queue_max: u64) -> u64 {
    max_concurrent + queue_max / 2
}
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
    /// One delegator's share: its tasks queued or running at once (issue 29).
    max_per_delegator: Option<u64>,
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
    /// The OS sandbox agents run in (docs/delegation.md "Task identity").
    sandbox: Option<String>,
    // Requests held for a person (issue 37 design §8).
    permission_timeout_secs: Option<u64>,
    permission_fallback: Option<String>,
    max_open_requests_per_task: Option<u64>,
    max_open_requests: Option<u64>,
    max_request_bytes: Option<u64>,
    #[serde(default)]
    approvers: Vec<String>,
    // Follow-up turns (issue 38 design §6).
    session_keep_secs: Option<u64>,
    max_kept_sessions: Option<u64>,
    max_turns: Option<u64>,
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
    /// `[tasks.placement]`: the floors of `delegate --peer auto` (issue 38 design §4).
    placement: Option<RawPlacement>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPlacement {
    min_mem_free_mb: Option<u64>,
    min_disk_free_mb: Option<u64>,
    max_load_per_core: Option<f64>,
}

/// `[tasks.placement]` with its defaults, each bound checked (issue 38 design §4, §6): a
/// floor of 0 is off; `max_load_per_core` is 0 (no ceiling) or 0.05–1024.
fn placement_keys(raw: Option<&RawPlacement>) -> Result<Floors, ConfigError> {
    let d = Floors::default();
    let Some(raw) = raw else {
        return Ok(d);
    };
    let min_mem_free_mb = raw.min_mem_free_mb.unwrap_or(d.min_mem_free_mb);
    bounds::check(
        "tasks.placement.min_mem_free_mb",
        min_mem_free_mb,
        0,
        placement::MAX_MIN_MEM_FREE_MB,
        Unit::Count,
    )?;
    let min_disk_free_mb = raw.min_disk_free_mb.unwrap_or(d.min_disk_free_mb);
    bounds::check(
        "tasks.placement.min_disk_free_mb",
        min_disk_free_mb,
        0,
        placement::MAX_MIN_DISK_FREE_MB,
        Unit::Count,
    )?;
    let max_load_per_core = raw.max_load_per_core.unwrap_or(d.max_load_per_core);
    let in_bounds = max_load_per_core == 0.0
        || (placement::MIN_MAX_LOAD_PER_CORE..=placement::MAX_MAX_LOAD_PER_CORE)
            .contains(&max_load_per_core);
    if !in_bounds {
        return Err(ConfigError::Invalid(format!(
            "tasks.placement.max_load_per_core = {max_load_per_core} must be 0 (no ceiling) or {}..={}",
            placement::MIN_MAX_LOAD_PER_CORE,
            placement::MAX_MAX_LOAD_PER_CORE
        )));
    }
    Ok(Floors {
        min_mem_free_mb,
        min_disk_free_mb,
        max_load_per_core,
    })
}

/// The table read from TOML, with its defaults filled in and every value checked.
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
    // Default: every runner slot and half the queue, so a lone delegator keeps the slots
    // (they turn over) and another always finds the rest of the waiting room. Above
    // slots + queue it would cap nothing.
    let capacity = max_concurrent + queue_max;
    let max_per_delegator = count(
        "tasks.max_per_delegator",
        raw.max_per_delegator,
        default_max_per_delegator(max_concurrent, queue_max),
        1,
        capacity,
    )
    .map_err(|e| match e {
        ConfigError::Invalid(m) if m.contains("upper bound") => {
            ConfigError::Invalid(format!("{m} (tasks.max_concurrent + tasks.queue_max)"))
        }
        other => other,
    })?;
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
    // Default "ask" (issue 37): the agent's questions go to its delegator.
    let permission = match raw.permission.as_deref() {
        None => DEFAULT_PERMISSION,
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
        if !agent_hub_proto::kernel::names::valid_manifest_name(agent) {
            return Err(ConfigError::Invalid(format!(
                "tasks.agent_permission: {agent:?} is not an agent name ([a-z0-9][a-z0-9_-]*, at most 32 bytes)"
            )));
        }
        let p = policy(&format!("tasks.agent_permission.{agent}"), tag)?;
        agent_permission.insert(agent.clone(), p);
    }

    let limits = session_limits(&raw, prompt_max_bytes)?;
    let delegation = delegation_keys(&raw)?;
    let approvals = approval_keys(&raw)?;
    let follow_ups =
        follow_ups::follow_up_keys(raw.session_keep_secs, raw.max_kept_sessions, raw.max_turns)?;
    let placement = placement_keys(raw.placement.as_ref())?;
    let headless_stdout_max_bytes = raw
        .headless_stdout_max_bytes
        .unwrap_or(agent_hub_proto::headless::DEFAULT_STDOUT_MAX_BYTES);
    bounds::check(
        "tasks.headless_stdout_max_bytes",
        headless_stdout_max_bytes,
        1024,
        agent_hub_proto::headless::MAX_STDOUT_MAX_BYTES,
        Unit::Bytes,
    )?;
    let sandbox = match raw.sandbox.as_deref() {
        None => SandboxMode::default(),
        Some(tag) => SandboxMode::from_tag(tag).ok_or_else(|| {
            ConfigError::Invalid(format!(
                "tasks.sandbox {tag:?} is not one of {}",
                SandboxMode::TAGS.join(", ")
            ))
        })?,
    };
    Ok(TasksConfig {
        sandbox,
        // Each fits: bounded above far below usize::MAX.
        max_concurrent: max_concurrent as usize,
        queue_max: queue_max as usize,
        max_per_delegator: max_per_delegator as usize,
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
        approvals,
        follow_ups,
        placement,
    })
}

/// Issue 37's keys (design §8): how long a request waits, what it gets when nobody answers,
/// the caps, and who besides the delegator may answer.
fn approval_keys(raw: &RawTasks) -> Result<ApprovalSettings, ConfigError> {
    let permission_timeout_secs = raw
        .permission_timeout_secs
        .unwrap_or(DEFAULT_PERMISSION_TIMEOUT_SECS);
    bounds::check_duration_secs(
        "tasks.permission_timeout_secs",
        permission_timeout_secs,
        MAX_PERMISSION_TIMEOUT_SECS,
    )?;
    let permission_fallback = match raw.permission_fallback.as_deref() {
        None => PermissionFallback::default(),
        Some(tag) => PermissionFallback::from_tag(tag).ok_or_else(|| {
            ConfigError::Invalid(format!(
                "tasks.permission_fallback {tag:?} is not one of {} (there is no allow fallback: nothing is allowed unasked)",
                PermissionFallback::TAGS.join(", ")
            ))
        })?,
    };
    let per_task = raw
        .max_open_requests_per_task
        .unwrap_or(DEFAULT_MAX_OPEN_REQUESTS_PER_TASK.into());
    bounds::check_count(
        "tasks.max_open_requests_per_task",
        per_task,
        MAX_OPEN_REQUESTS_PER_TASK.into(),
    )?;
    let max_open_requests = raw.max_open_requests.unwrap_or(DEFAULT_MAX_OPEN_REQUESTS);
    bounds::check_count(
        "tasks.max_open_requests",
        max_open_requests,
        MAX_MAX_OPEN_REQUESTS,
    )?;
    let max_request_bytes = raw.max_request_bytes.unwrap_or(DEFAULT_MAX_REQUEST_BYTES);
    bounds::check(
        "tasks.max_request_bytes",
        max_request_bytes,
        MIN_MAX_REQUEST_BYTES,
        MAX_MAX_REQUEST_BYTES,
        Unit::Bytes,
    )?;
    if raw.approvers.len() > MAX_APPROVERS {
        return Err(ConfigError::Invalid(format!(
            "tasks.approvers lists {} names; at most {MAX_APPROVERS}",
            raw.approvers.len()
        )));
    }
    let mut approvers: Vec<String> = Vec::new();
    for name in &raw.approvers {
        // A roster name (the roster's own rule, as tasks.may_mail, and printable: it is
        // shown wherever a request waits): a task identity or the hub cannot answer for a
        // person. Whether the roster holds it is checked where the
        // roster is read; a name that leaves it simply never authenticates.
        let roster_name = !name.trim().is_empty()
            && name.len() <= agent_hub_proto::roster::MAX_NAME_BYTES
            && !agent_hub_proto::kernel::names::is_reserved(name)
            && !agent_hub_proto::kernel::text::has_unsafe(name);
        if !roster_name {
            return Err(ConfigError::Invalid(format!(
                "tasks.approvers: {:?} is not a roster name that may answer a task's requests",
                agent_hub_proto::kernel::text::for_terminal(name)
            )));
        }
        if !approvers.contains(name) {
            approvers.push(name.clone());
        }
    }
    Ok(ApprovalSettings {
        permission_timeout_secs,
        permission_fallback,
        // Fits: at most 64.
        max_open_requests_per_task: per_task as u32,
        // Both fit: at most 65536.
        max_open_requests: max_open_requests as usize,
        max_request_bytes: max_request_bytes as usize,
        approvers,
    })
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
        if name.trim().is_empty() || agent_hub_proto::kernel::names::is_reserved(name) {
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

mod follow_ups;
#[cfg(test)]
mod tests;
