//! The checks a `delegate` passes at the verb, before any task exists (docs/delegation.md
//! "Refusals"), and their refusal texts. Everything here is lexical: the cwd is normalised
//! (`.` and `..` resolved on the text, never on the filesystem) and compared with the roots by
//! whole components. The runner checks the same cwd again with the filesystem, canonicalised
//! (`config::tasks::check_cwd`), so a symlink cannot lead out either; a failure there is a
//! `refused` outcome.
//!
//! Owns `DelegateRefusal` and `lexical_cwd`. Refuses IO. No refusal quotes the client's
//! values (the prompt never, the cwd and agent neither): the asker knows what it sent.

use std::fmt;
use std::path::{Component, Path, PathBuf};

/// The end of an unknown-agent refusal: a manifest added while the hub runs is not an agent
/// it can run until it reads the folders again (issue 35: before, nothing said so while
/// `agent-hub agents` already listed the new agent).
pub const MANIFESTS_HINT: &str = "agent manifests are read when the hub starts and on SIGHUP (agent-hub-server reload --config <the hub's config>)";

/// Why a `delegate` was refused at the verb; no task exists. `Display` is the text of the
/// `{"error":…}` line, always `invalid delegate: …`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DelegateRefusal {
    /// The hub has no `[tasks]` table.
    NotEnabled,
    /// A task's own identity asked: tasks may not delegate (docs/delegation.md "Task identity").
    TaskIdentity,
    /// The agent is not one this hub can run (`runnable` lists those it can).
    UnknownAgent {
        runnable: Vec<String>,
    },
    /// For a peer: not a valid agent name at all.
    InvalidAgentName,
    CwdNotAbsolute,
    CwdNotUtf8OrNul,
    CwdOutsideRoots {
        roots: Vec<String>,
    },
    PromptEmpty,
    PromptTooLarge {
        bytes: usize,
        max_bytes: usize,
    },
    TimeoutOutOfRange {
        max_secs: u64,
    },
    ProgressOutOfRange {
        min_secs: u64,
        max_secs: u64,
    },
    QueueFull {
        queue_max: usize,
    },
    /// The delegator holds its whole share of the queue and the slots already.
    ShareFull {
        held: usize,
        max: usize,
    },
    UnknownPeer,
    /// Issue 37 design §1: `permission` wider than the operator's bound for the agent.
    PermissionWider {
        asked: &'static str,
        agent: String,
        bound: &'static str,
    },
    /// Design §2: `allow` rules where the task would run under `reject`.
    AllowUnderReject {
        agent: String,
    },
    /// `allow` out of its bounds (`wire::approval::check_allow`, the same words as the
    /// decoder's).
    Allow(crate::wire::approval::AllowError),
    /// `permission` or `allow` for a task run on a relay peer: the relay's `delegate_task`
    /// cannot carry them, so the peer would run it under its own bound (design §7 is the
    /// across-hubs change's).
    ApprovalsForPeer,
    /// Issue 38: `keepSecs` above `tasks.session_keep_secs`.
    KeepOutOfRange {
        max_secs: u64,
    },
    /// Issue 38: `requires` without `peer: "auto"`.
    RequiresWithoutAuto,
    /// Issue 38: `requires` empty, over `placement::MAX_REQUIRES`, or a tag not
    /// `[A-Za-z0-9._-]{1,40}`.
    RequiresOutOfBounds,
    /// Issue 38: no place has room and this hub lacks the agent; the rule's whole text
    /// (`placement::Placement::NoRoom`, already `invalid delegate: …`).
    NoRoom(String),
    /// Issue 38 design §1: `maxCostUsd` not over 0 and at most `meter::MAX_COST_USD`.
    MaxCostOutOfRange,
    /// `maxTokens` not 1 to `meter::MAX_TOKENS`.
    MaxTokensOutOfRange,
    /// A limit on a figure the agent does not report (its manifest's `run.reports`), without
    /// `allowUnmetered`: the budget could never cancel it.
    Unmetered {
        agent: String,
        /// `cost` or `tokens`.
        what: &'static str,
        /// What it reports, as `agent-hub agents` shows it.
        reports: String,
    },
    /// Design §7: a budget for a task on a relay peer, which reports usage only in its
    /// handoff, without `allowUnmetered`.
    PeerCannotKeepBudget {
        peer: String,
    },
}

impl fmt::Display for DelegateRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let DelegateRefusal::NoRoom(text) = self {
            return f.write_str(text);
        }
        f.write_str("invalid delegate: ")?;
        match self {
            DelegateRefusal::NotEnabled => f.write_str("delegation is not enabled on this hub"),
            DelegateRefusal::TaskIdentity => f.write_str("a task may not delegate"),
            DelegateRefusal::UnknownAgent { runnable } if runnable.is_empty() => write!(
                f,
                "unknown agent; this hub has no agent that can take delegated work; {MANIFESTS_HINT}"
            ),
            DelegateRefusal::UnknownAgent { runnable } => write!(
                f,
                "unknown agent; this hub can run: {}; {MANIFESTS_HINT}",
                runnable.join(", ")
            ),
            DelegateRefusal::InvalidAgentName => f.write_str(
                "agent is not an agent name ([a-z0-9][a-z0-9_-]*, at most 32 bytes)",
            ),
            DelegateRefusal::CwdNotAbsolute => f.write_str("cwd must be an absolute path"),
            DelegateRefusal::CwdNotUtf8OrNul => f.write_str("cwd must not contain a NUL byte"),
            DelegateRefusal::CwdOutsideRoots { roots } => write!(
                f,
                "cwd is under none of tasks.cwd_roots ({})",
                roots.join(", ")
            ),
            DelegateRefusal::PromptEmpty => f.write_str("prompt must not be empty"),
            DelegateRefusal::PromptTooLarge { bytes, max_bytes } => write!(
                f,
                "prompt is {bytes} bytes, over tasks.prompt_max_bytes ({max_bytes})"
            ),
            DelegateRefusal::TimeoutOutOfRange { max_secs } => {
                write!(f, "timeoutSecs must be 1..={max_secs} (tasks.timeout_secs)")
            }
            DelegateRefusal::ProgressOutOfRange { min_secs, max_secs } => write!(
                f,
                "progressSecs must be 0 (no progress envelopes) or {min_secs}..={max_secs} (tasks.min_progress_secs)"
            ),
            DelegateRefusal::QueueFull { queue_max } => write!(
                f,
                "the task queue is full (tasks.queue_max = {queue_max}); try again later"
            ),
            DelegateRefusal::ShareFull { held, max } => write!(
                f,
                "you hold {held} tasks queued or running, the most one delegator may (tasks.max_per_delegator = {max}); try again when one ends"
            ),
            DelegateRefusal::UnknownPeer => {
                f.write_str("unknown peer, or a peer this hub does not delegate to")
            }
            DelegateRefusal::PermissionWider {
                asked,
                agent,
                bound,
            } => write!(
                f,
                "permission \"{asked}\" is wider than this hub allows for {agent} ({bound})"
            ),
            DelegateRefusal::AllowUnderReject { agent } => write!(
                f,
                "the operator's permission for {agent} is reject; allow rules cannot widen it"
            ),
            DelegateRefusal::Allow(e) => write!(f, "{e}"),
            DelegateRefusal::KeepOutOfRange { max_secs } => write!(
                f,
                "{}",
                super::turns::KeepOutOfRange {
                    max_secs: *max_secs
                }
            ),
            DelegateRefusal::RequiresWithoutAuto => {
                f.write_str("requires needs peer \"auto\"")
            }
            DelegateRefusal::RequiresOutOfBounds => write!(
                f,
                "requires takes 1 to {} tags, each 1-40 bytes of [A-Za-z0-9._-]",
                crate::tasks::placement::MAX_REQUIRES
            ),
            // Written whole above.
            DelegateRefusal::NoRoom(text) => f.write_str(text),
            DelegateRefusal::ApprovalsForPeer => f.write_str(
                "permission and allow cannot be carried to a peer; a task run on a peer is answered by that hub's own permission",
            ),
            DelegateRefusal::MaxCostOutOfRange => f.write_str(
                "maxCostUsd must be a number over 0 and at most 1000000",
            ),
            DelegateRefusal::MaxTokensOutOfRange => {
                f.write_str("maxTokens must be 1..=1000000000000")
            }
            DelegateRefusal::Unmetered {
                agent,
                what,
                reports,
            } => {
                let key = if *what == "cost" {
                    "maxCostUsd"
                } else {
                    "maxTokens"
                };
                write!(
                    f,
                    "agent {agent} does not report its {what} (run.reports: {reports}), so {key} cannot be kept; set allowUnmetered to run it without that limit"
                )
            }
            DelegateRefusal::PeerCannotKeepBudget { peer } => write!(
                f,
                "peer {peer} cannot keep a budget (it reports usage only when the task ends)"
            ),
        }
    }
}

impl std::error::Error for DelegateRefusal {}

/// `cwd` made absolute-and-normal on its text (`.` dropped, `..` taking off the component
/// before it, `/..` staying `/`), if it lies under one of `roots` by whole components: the
/// path the runner is asked to use (and re-checks with the filesystem). `roots` are the
/// configured (canonical) roots.
pub fn lexical_cwd(roots: &[PathBuf], cwd: &str) -> Result<PathBuf, DelegateRefusal> {
    if cwd.contains('\0') {
        return Err(DelegateRefusal::CwdNotUtf8OrNul);
    }
    let path = Path::new(cwd);
    if !path.is_absolute() {
        return Err(DelegateRefusal::CwdNotAbsolute);
    }
    let mut normal = PathBuf::from("/");
    for c in path.components() {
        match c {
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
            Component::ParentDir => {
                normal.pop();
            }
            Component::Normal(part) => normal.push(part),
        }
    }
    // `Path::starts_with` compares whole components: `/srv/ab` is not under `/srv/a`.
    if roots.iter().any(|r| normal.starts_with(r)) {
        Ok(normal)
    } else {
        Err(DelegateRefusal::CwdOutsideRoots {
            roots: roots.iter().map(|r| r.display().to_string()).collect(),
        })
    }
}

/// A cwd for a task on a peer: absolute and free of NUL, `.` and `..` resolved on the text.
/// The peer checks it against its own `tasks.cwd_roots` on its own filesystem.
pub(super) fn remote_cwd(cwd: &str) -> Result<PathBuf, DelegateRefusal> {
    if cwd.contains('\0') {
        return Err(DelegateRefusal::CwdNotUtf8OrNul);
    }
    let p = Path::new(cwd);
    if !p.is_absolute() {
        return Err(DelegateRefusal::CwdNotAbsolute);
    }
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other.as_os_str()),
        }
    }
    Ok(out)
}
