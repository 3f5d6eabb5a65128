//! The liveness hooks an install places beside the delivery hook (SPEC §14, docs/agents.md
//! "Liveness hooks"): a turn-start hook (`agent-hub hook turn-start`) and a session-end hook
//! (`agent-hub hook session-end`), so `who` can tell busy from idle from gone. The turn's end
//! needs no hook of its own: the delivery hook (`hook stop`) reports it after its decision.
//!
//! Only for agents whose hook events were seen to exist: Claude Code (`UserPromptSubmit`,
//! `SessionEnd`) and Gemini CLI (`BeforeAgent`, `SessionEnd`). Codex is left out: each new
//! hook must be trusted by hand in its TUI, a cost for every user for a state Codex's Stop
//! hook already half gives; Droid's events are unverified. Kept apart from `hooks` (the
//! delivery hook) so that each is placed and removed on its own. Pure, like `hooks`.

use super::mcp::json_leftover;
use super::owned::{merge_our_hook, updated_note};
use super::{expand, shown, status_note, Action, EditError, HubIdentity, PlanError, Work};
use crate::agents::argv;
use crate::agents::jsonedit::{self, Seg, J};
use crate::agents::manifest::{HookKind, Manifest, SERVER_NAME};
use std::path::Path;

/// The liveness hook commands' own bound: the command bounds itself well under this
/// (`deliver::turn`), so the agent's limit only guards against a hung binary.
pub const TURN_HOOK_TIMEOUT_SECS: i64 = 10;

/// The `agent-hub hook` subcommands that are liveness hooks.
const TURN_SUBCOMMANDS: [&str; 3] = ["turn-start", "turn-end", "session-end"];

/// The events and subcommands placed for an agent's hook kind.
pub fn turn_events(kind: HookKind) -> &'static [(&'static str, &'static str)] {
    match kind {
        HookKind::ClaudeStop => &[
            ("UserPromptSubmit", "turn-start"),
            ("SessionEnd", "session-end"),
        ],
        HookKind::GeminiAfterAgent => {
            &[("BeforeAgent", "turn-start"), ("SessionEnd", "session-end")]
        }
        _ => &[],
    }
}

/// True for `<…/agent-hub> hook turn-start|turn-end|session-end …`: ours, whatever its
/// identity or port.
pub fn is_our_turn_hook_command(cmd: &str) -> bool {
    let w = super::hooks::hook_words(cmd, 3);
    w.len() == 3
        && Path::new(&w[0])
            .file_name()
            .is_some_and(|n| n == "agent-hub")
        && w[1] == "hook"
        && TURN_SUBCOMMANDS.contains(&w[2].as_str())
}

/// The liveness hook's command line, run through the agent's shell.
pub fn turn_hook_command(id: &HubIdentity, sub: &str) -> String {
    format!(
        "{} hook {sub} --as {} --token-file {} --port {}",
        argv::shell_word(&id.command),
        argv::shell_word(&id.name),
        argv::shell_word(&id.token_file),
        id.port
    )
}

/// The hook group placed under `hooks.<event>`.
fn turn_group(kind: HookKind, id: &HubIdentity, sub: &str) -> J {
    let command = J::str(turn_hook_command(id, sub));
    let hook = if kind == HookKind::GeminiAfterAgent {
        J::obj(vec![
            ("type", J::str("command")),
            ("name", J::str(format!("{SERVER_NAME}-{sub}"))),
            ("command", command),
            ("timeout", J::Num(TURN_HOOK_TIMEOUT_SECS * 1000)),
        ])
    } else {
        J::obj(vec![
            ("type", J::str("command")),
            ("command", command),
            ("timeout", J::Num(TURN_HOOK_TIMEOUT_SECS)),
        ])
    };
    J::obj(vec![("hooks", J::Arr(vec![hook]))])
}

/// Removes our liveness hooks from `hooks.<event>`: a group holding only ours goes whole,
/// else only our hooks leave it. Returns the new text and how many went.
fn remove_ours(text: &str, event: &str) -> Result<(String, usize), EditError> {
    super::hooks::remove_hooks_where(text, event, is_our_turn_hook_command)
}

/// Places (install) or removes (uninstall) the agent's liveness hooks in its hook config.
pub(super) fn plan_turn_hooks(
    m: &Manifest,
    action: &Action,
    work: &mut Work,
    notes: &mut Vec<String>,
) -> Result<(), PlanError> {
    let events = turn_events(m.install.hook);
    let Some(config) = m
        .install
        .hook_config
        .as_ref()
        .filter(|_| !events.is_empty())
    else {
        return Ok(());
    };
    let path = expand(config, &work.home);
    let show = shown(&path, &work.home);
    let fail = |e: EditError| PlanError::Edit {
        file: show.clone(),
        source: e,
    };
    let start = work.get(&path)?.unwrap_or_default();
    let mut text = start.clone();
    for &(event, sub) in events {
        let what = format!("{sub} hook (hooks.{event})");
        match action {
            Action::Install { id, .. } => {
                let group = turn_group(m.install.hook, id, sub);
                // One hook of ours: its owned keys are set where it stands, the user's keys
                // beside them kept (owned.rs), as for the delivery hook.
                if let Some((merged, keys)) =
                    merge_our_hook(&text, event, &group, is_our_turn_hook_command)
                        .map_err(|e| fail(e.into()))?
                {
                    if keys.is_empty() {
                        notes.push(format!("{show}: {what} already present"));
                    } else {
                        notes.push(updated_note(&show, &what, &keys));
                        text = merged;
                    }
                    continue;
                }
                let (t, removed) = remove_ours(&text, event).map_err(fail)?;
                text =
                    jsonedit::append(&t, &["hooks", event], &group).map_err(|e| fail(e.into()))?;
                notes.push(status_note(&show, &what, removed > 0, true));
            }
            Action::Uninstall => {
                let (mut t, removed) = remove_ours(&text, event).map_err(fail)?;
                if removed == 0 {
                    continue;
                }
                for depth in [2, 1] {
                    let key = [Seg::Key("hooks"), Seg::Key(event)];
                    if jsonedit::is_empty_container(&t, &key[..depth])
                        .map_err(|e| fail(e.into()))?
                    {
                        if let Some(pruned) =
                            jsonedit::remove(&t, &key[..depth]).map_err(|e| fail(e.into()))?
                        {
                            t = pruned;
                        }
                    }
                }
                notes.push(format!("{show}: {what} removed"));
                text = t;
            }
        }
    }
    if text != start {
        let text = match action {
            Action::Uninstall => json_leftover(text),
            Action::Install { .. } => Some(text),
        };
        work.put(&path, text);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn our_turn_hook_commands_are_recognised_and_no_others() {
        for cmd in [
            "/usr/local/bin/agent-hub hook turn-start --as a --token-file /t --port 1",
            "'/opt/my tools/agent-hub' hook session-end --as a",
            "agent-hub hook turn-end",
        ] {
            assert!(is_our_turn_hook_command(cmd), "{cmd}");
        }
        for cmd in [
            "/usr/local/bin/agent-hub hook stop --as a",
            "agent-hub hooks turn-start",
            "/bin/other hook turn-start",
            "agent-hub hook",
            "",
        ] {
            assert!(!is_our_turn_hook_command(cmd), "{cmd}");
        }
    }

    #[test]
    fn only_agents_with_seen_turn_events_get_hooks() {
        assert_eq!(turn_events(HookKind::ClaudeStop).len(), 2);
        assert_eq!(turn_events(HookKind::GeminiAfterAgent).len(), 2);
        for k in [
            HookKind::CodexStop,
            HookKind::DroidStop,
            HookKind::OpencodePlugin,
            HookKind::None,
        ] {
            assert!(turn_events(k).is_empty());
        }
    }
}
