//! The one rule for each kind of name the hub handles (issue 30, "a kernel under
//! everything"): agent names a roster command accepts, the names the hub reserves, task
//! identities, relay peer ids and agent manifest names. Before this module the peer id rule
//! was written twice and four `check_name` functions disagreed on what an agent name may hold;
//! every caller now asks here, and keeps only its own error wording.
//!
//! Pure: no IO, and imports nothing from the crate, so any layer may use it.

/// The name the hub signs its own envelopes with (SPEC §3.4); no roster entry may take it, in
/// any case.
pub const HUB_NAME: &str = "hub";

/// Every task id and task identity starts with this (docs/delegation.md "Names"); no roster
/// entry may.
pub const TASK_PREFIX: &str = "task-";

/// Longest agent name a roster command accepts, in characters.
pub const AGENT_NAME_MAX_CHARS: usize = 64;

/// Longest relay peer id, in characters (what claudectl's v0 accepts, docs/relay-protocol.md).
pub const PEER_ID_MAX_CHARS: usize = 128;

/// Longest manifest name, in bytes (docs/agents.md "Manifests").
pub const MANIFEST_NAME_MAX_BYTES: usize = 32;

/// Whether `name` is in the reserved task namespace.
pub fn is_task_name(name: &str) -> bool {
    name.starts_with(TASK_PREFIX)
}

/// Whether `name` is reserved for the hub itself: `hub` in any case, or a task identity. No
/// roster entry, operator or `tasks.may_mail` target may be one.
pub fn is_reserved(name: &str) -> bool {
    name.eq_ignore_ascii_case(HUB_NAME) || is_task_name(name)
}

/// Why a name cannot be an agent's, for a roster command (`roster add`, `install --as`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AgentNameProblem {
    /// Empty, longer than `AGENT_NAME_MAX_CHARS`, a character outside `A-Z a-z 0-9 . _ @ -`,
    /// or a leading `.` or `-` (the name also names `tokens/<name>.token` and follows `--as`).
    Shape,
    /// `hub`, in any case.
    Hub,
    /// Starts with `task-`.
    Task,
}

/// Characters an agent name may hold: `A-Z a-z 0-9 . _ @ -`.
pub fn agent_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '@' | '-')
}

/// The roster commands' rule for a new agent name; None when the name is good.
pub fn agent_name_problem(name: &str) -> Option<AgentNameProblem> {
    if name.is_empty()
        || name.chars().count() > AGENT_NAME_MAX_CHARS
        || !name.chars().all(agent_name_char)
        || name.starts_with(['.', '-'])
    {
        return Some(AgentNameProblem::Shape);
    }
    if name.eq_ignore_ascii_case(HUB_NAME) {
        return Some(AgentNameProblem::Hub);
    }
    if is_task_name(name) {
        return Some(AgentNameProblem::Task);
    }
    None
}

/// Relay peer ids: 1–`PEER_ID_MAX_CHARS` characters of `[A-Za-z0-9_-]`.
pub fn valid_peer_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= PEER_ID_MAX_CHARS
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Manifest names: `[a-z0-9][a-z0-9_-]*`, at most `MANIFEST_NAME_MAX_BYTES`.
pub fn valid_manifest_name(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_lowercase() || c.is_ascii_digit())
        && s.len() <= MANIFEST_NAME_MAX_BYTES
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agent_names() {
        for good in ["a", "worker-1", "Ann.B_c@d", &"x".repeat(64)] {
            assert_eq!(agent_name_problem(good), None, "{good:?}");
        }
        for (bad, why) in [
            ("", AgentNameProblem::Shape),
            (".hidden", AgentNameProblem::Shape),
            ("-opt", AgentNameProblem::Shape),
            ("a b", AgentNameProblem::Shape),
            ("a/b", AgentNameProblem::Shape),
            ("é", AgentNameProblem::Shape),
            (&"x".repeat(65), AgentNameProblem::Shape),
            ("hub", AgentNameProblem::Hub),
            ("HuB", AgentNameProblem::Hub),
            ("task-1", AgentNameProblem::Task),
        ] {
            assert_eq!(agent_name_problem(bad), Some(why), "{bad:?}");
        }
        // Only the exact prefix is reserved: "Task-1" and "tasks" are ordinary names.
        assert_eq!(agent_name_problem("Task-1"), None);
        assert_eq!(agent_name_problem("tasks"), None);
        for reserved in ["hub", "HUB", "task-x"] {
            assert!(is_reserved(reserved), "{reserved}");
        }
        for free in ["hubs", "Task-1", "a@hub"] {
            assert!(!is_reserved(free), "{free}");
        }
    }

    #[test]
    fn peer_ids() {
        assert!(valid_peer_id("a"));
        assert!(valid_peer_id("barrys-mac_74371ce5"));
        assert!(valid_peer_id(&"x".repeat(128)));
        for bad in ["", "a b", "a.b", "a@b", "é", &"x".repeat(129)] {
            assert!(!valid_peer_id(bad), "{bad:?}");
        }
    }

    #[test]
    fn manifest_names() {
        assert!(valid_manifest_name("claude"));
        assert!(valid_manifest_name("0x_a-b"));
        assert!(valid_manifest_name(&"a".repeat(32)));
        for bad in ["", "-a", "_a", "A", "a.b", "a b", &"a".repeat(33)] {
            assert!(!valid_manifest_name(bad), "{bad:?}");
        }
    }
}
