//! The `[tasks]` keys of follow-up turns (issue 38 design §6; docs/delegation.md
//! "Follow-ups"): `session_keep_secs`, `max_kept_sessions`, `max_turns`, each with its
//! default and bounds from the core (`tasks::turns`). Refuses: a value out of bounds.

use super::super::bounds::{self, Unit};
use super::super::ConfigError;
use agent_hub_proto::tasks::turns::{
    FollowUpSettings, DEFAULT_MAX_KEPT_SESSIONS, DEFAULT_MAX_TURNS, DEFAULT_SESSION_KEEP_SECS,
    MAX_MAX_KEPT_SESSIONS, MAX_MAX_TURNS, MAX_SESSION_KEEP_SECS,
};

/// The three keys as the table gave them, checked.
pub(in crate::config) fn follow_up_keys(
    session_keep_secs: Option<u64>,
    max_kept_sessions: Option<u64>,
    max_turns: Option<u64>,
) -> Result<FollowUpSettings, ConfigError> {
    let keep = session_keep_secs.unwrap_or(DEFAULT_SESSION_KEEP_SECS);
    bounds::check(
        "tasks.session_keep_secs",
        keep,
        0,
        MAX_SESSION_KEEP_SECS,
        Unit::Secs,
    )?;
    let kept = max_kept_sessions.unwrap_or(DEFAULT_MAX_KEPT_SESSIONS);
    bounds::check(
        "tasks.max_kept_sessions",
        kept,
        0,
        MAX_MAX_KEPT_SESSIONS,
        Unit::Count,
    )?;
    let turns = max_turns.unwrap_or(DEFAULT_MAX_TURNS);
    bounds::check("tasks.max_turns", turns, 1, MAX_MAX_TURNS, Unit::Count)?;
    Ok(FollowUpSettings {
        session_keep_secs: keep,
        // Both fit: bounded far below usize::MAX and u32::MAX.
        max_kept_sessions: kept as usize,
        max_turns: turns as u32,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_keep_nothing_and_each_bound_is_checked() {
        assert_eq!(
            follow_up_keys(None, None, None).unwrap(),
            FollowUpSettings::default()
        );
        assert_eq!(FollowUpSettings::default().session_keep_secs, 0);
        let ok = follow_up_keys(Some(86_400), Some(256), Some(1000)).unwrap();
        assert_eq!(
            (ok.session_keep_secs, ok.max_kept_sessions, ok.max_turns),
            (86_400, 256, 1000)
        );
        for (k, m, t, key) in [
            (Some(86_401), None, None, "tasks.session_keep_secs"),
            (None, Some(257), None, "tasks.max_kept_sessions"),
            (None, None, Some(0), "tasks.max_turns"),
            (None, None, Some(1001), "tasks.max_turns"),
        ] {
            let e = follow_up_keys(k, m, t).unwrap_err().to_string();
            assert!(e.contains(key), "{e}");
        }
    }
}
