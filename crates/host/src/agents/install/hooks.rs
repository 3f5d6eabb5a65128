//! The delivery hook and the OpenCode plugin an install places (docs/agents.md): which hook
//! commands are ours, the hook's shape per agent, placing and removing it, and the plugin
//! source with its placeholders filled in. Pure: edits the plan's copy of each file.

use super::mcp::json_leftover;
use super::owned::{merge_our_hook, updated_note};
use super::{
    expand, shown, status_note, Action, EditError, HubIdentity, PlanError, Work, HOOK_TIMEOUT_MS,
    HOOK_TIMEOUT_SECS, OPENCODE_PLUGIN_SOURCE,
};
use crate::agents::jsonedit::{self, Seg, J};
use crate::agents::manifest::{HookKind, Manifest, SERVER_NAME};
use std::path::Path;

/// True for a hook command that runs `<…/agent-hub> hook stop …`: ours, whatever its
/// identity or port. Understands the single quotes `shell_word` writes.
pub fn is_our_hook_command(cmd: &str) -> bool {
    let w = hook_words(cmd, 3);
    w.len() == 3
        && Path::new(&w[0])
            .file_name()
            .is_some_and(|n| n == "agent-hub")
        && w[1] == "hook"
        && w[2] == "stop"
}

/// The first `n` words of a hook command, reading the single quotes and backslashes
/// `shell_word` may write: enough to tell agent-hub's hooks (this one and the liveness hooks
/// of `turn_hooks`) from the user's.
pub(super) fn hook_words(cmd: &str, n: usize) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let (mut in_word, mut quoted) = (false, false);
    let mut chars = cmd.chars();
    while let Some(c) = chars.next() {
        if out.len() >= n {
            return out;
        }
        match c {
            '\'' => {
                quoted = !quoted;
                in_word = true;
            }
            c if c.is_whitespace() && !quoted => {
                if std::mem::take(&mut in_word) {
                    out.push(std::mem::take(&mut cur));
                }
            }
            '\\' if !quoted => {
                if let Some(next) = chars.next() {
                    cur.push(next);
                    in_word = true;
                }
            }
            c => {
                cur.push(c);
                in_word = true;
            }
        }
    }
    if in_word && out.len() < n {
        out.push(cur);
    }
    out
}

/// The hook event and the hook object for a stop-style kind.
pub(super) fn hook_shape(kind: HookKind, id: &HubIdentity) -> (&'static str, J) {
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

pub(super) fn event_of(kind: HookKind) -> &'static str {
    if kind == HookKind::GeminiAfterAgent {
        "AfterAgent"
    } else {
        "Stop"
    }
}

/// Removes every hook of ours under `hooks.<event>`: a group holding only ours goes whole,
/// else just our hooks leave it. Returns the new text and how many were removed.
pub(super) fn remove_our_hooks(text: &str, event: &str) -> Result<(String, usize), EditError> {
    remove_hooks_where(text, event, is_our_hook_command)
}

/// `remove_our_hooks` for any kind of hook of ours, told apart by its command line (the
/// Stop hook here, the liveness hooks in `turn_hooks`).
pub(super) fn remove_hooks_where(
    text: &str,
    event: &str,
    ours: fn(&str) -> bool,
) -> Result<(String, usize), EditError> {
    let groups = match jsonedit::get(text, &[Seg::Key("hooks"), Seg::Key(event)])? {
        None => return Ok((text.to_owned(), 0)),
        Some(serde_json::Value::Array(g)) => g,
        Some(_) => {
            return Err(EditError::HooksNotArray {
                event: event.to_owned(),
            })
        }
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
            .filter(|(_, h)| h.get("command").and_then(|c| c.as_str()).is_some_and(ours))
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
        text = edit?.unwrap_or(text);
    }
    Ok((text, removed))
}

pub(super) fn plan_hook(
    m: &Manifest,
    action: &Action,
    work: &mut Work,
    notes: &mut Vec<String>,
) -> Result<(), PlanError> {
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
    let fail = |e: EditError| PlanError::Edit {
        file: show.clone(),
        source: e,
    };
    let cur = work.get(&path)?.unwrap_or_default();
    match action {
        Action::Install { id, .. } => {
            let (event, group) = hook_shape(kind, id);
            // One hook of ours: its owned keys are set where it stands (owned.rs).
            if let Some((new, keys)) = merge_our_hook(&cur, event, &group, is_our_hook_command)
                .map_err(|e| fail(e.into()))?
            {
                if keys.is_empty() {
                    notes.push(format!("{show}: {what} already present"));
                } else {
                    notes.push(updated_note(&show, &what, &keys));
                    work.put(&path, Some(new));
                }
                return Ok(());
            }
            // None or several of ours (an older install's leftovers): replaced by one.
            let (text, removed) = remove_our_hooks(&cur, event).map_err(fail)?;
            let new =
                jsonedit::append(&text, &["hooks", event], &group).map_err(|e| fail(e.into()))?;
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
                if jsonedit::is_empty_container(&text, &key[..depth]).map_err(|e| fail(e.into()))? {
                    if let Some(t) =
                        jsonedit::remove(&text, &key[..depth]).map_err(|e| fail(e.into()))?
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
