//! Which keys of agent-hub's own entries install owns, and merging them into an entry that
//! already exists (issue 12, docs/agents.md "Reinstall keeps your keys").
//!
//! An entry install writes (the MCP server, the delivery hook) has owned keys — the ones that
//! carry the identity, the port and the binary, replaced on every install when they differ —
//! and default keys, written when the entry is created or the key is missing and never
//! replaced afterwards, so a value the user tuned (Claude's `env`, a hook's `timeout`) stays.
//! Every other key inside the entry is the user's (Gemini `"trust": true`, Codex
//! `default_tools_approval_mode`, …) and is never touched by install; uninstall removes the
//! entry whole, those keys with it, since they configure nothing but agent-hub's entry.
//! Pure: edits text.

use crate::agents::jsonedit::{self, JsonEditError, Seg, J};
use crate::agents::manifest::McpFormat;

/// Keys of an MCP entry written only when missing.
pub(super) fn mcp_default_keys(format: McpFormat) -> &'static [&'static str] {
    match format {
        McpFormat::ClaudeJson => &["env"],
        _ => &[],
    }
}

/// Keys of a hook object written only when missing.
pub(super) const HOOK_DEFAULT_KEYS: [&str; 2] = ["timeout", "name"];

/// Key/value pairs of an entry, borrowed from it.
pub(super) type Pairs<'j> = Vec<(&'j str, J)>;

/// An entry's pairs split into (owned, defaults).
pub(super) fn split<'j>(entry: &'j J, defaults: &[&str]) -> (Pairs<'j>, Pairs<'j>) {
    let mut owned = Vec::new();
    let mut def = Vec::new();
    if let J::Obj(pairs) = entry {
        for (k, v) in pairs {
            if defaults.contains(&k.as_str()) {
                def.push((k.as_str(), v.clone()));
            } else {
                owned.push((k.as_str(), v.clone()));
            }
        }
    }
    (owned, def)
}

/// The note for an entry whose owned keys were rewritten.
pub(super) fn updated_note(show: &str, what: &str, keys: &[String]) -> String {
    format!(
        "{show}: {what} updated ({}); every other key in it kept",
        keys.join(", ")
    )
}

/// Where hooks of ours (told apart by `ours` on their command line) sit under
/// `hooks.<event>`: (group index, hook index) pairs.
pub(super) fn our_hooks(
    groups: &[serde_json::Value],
    ours: fn(&str) -> bool,
) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    for (gi, g) in groups.iter().enumerate() {
        let Some(hs) = g.get("hooks").and_then(|h| h.as_array()) else {
            continue;
        };
        for (hi, h) in hs.iter().enumerate() {
            if h.get("command").and_then(|c| c.as_str()).is_some_and(ours) {
                out.push((gi, hi));
            }
        }
    }
    out
}

/// Merges `group`'s one hook into the single hook of ours under `hooks.<event>`, where it
/// stands (with the user's keys beside it, in the user's group). `None` when there is not
/// exactly one hook of ours or it is not an object: then the caller replaces ours whole.
pub(super) fn merge_our_hook(
    text: &str,
    event: &str,
    group: &J,
    ours: fn(&str) -> bool,
) -> Result<Option<(String, Vec<String>)>, JsonEditError> {
    let groups = match jsonedit::get(text, &[Seg::Key("hooks"), Seg::Key(event)])? {
        Some(serde_json::Value::Array(g)) => g,
        _ => return Ok(None),
    };
    let found = our_hooks(&groups, ours);
    let [(gi, hi)] = found[..] else {
        return Ok(None);
    };
    if !groups[gi]["hooks"][hi].is_object() {
        return Ok(None);
    }
    let J::Obj(pairs) = group else {
        return Ok(None);
    };
    let Some((_, J::Arr(hooks))) = pairs.iter().find(|(k, _)| k == "hooks") else {
        return Ok(None);
    };
    let Some(hook) = hooks.first() else {
        return Ok(None);
    };
    let (owned, defaults) = split(hook, &HOOK_DEFAULT_KEYS);
    let path = [
        Seg::Key("hooks"),
        Seg::Key(event),
        Seg::Index(gi),
        Seg::Key("hooks"),
        Seg::Index(hi),
    ];
    jsonedit::merge_object(text, &path, &owned, &defaults).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agents::install::hooks::hook_shape;
    use crate::agents::install::mcp::mcp_entry;
    use crate::agents::install::{is_our_hook_command, HubIdentity};
    use crate::agents::manifest::HookKind;

    fn id(port: u16) -> HubIdentity {
        HubIdentity {
            command: "/bin/agent-hub".into(),
            name: "w".into(),
            token_file: "/t".into(),
            port,
        }
    }

    #[test]
    fn the_one_hook_of_ours_is_merged_in_place_with_the_users_keys_and_timeout_kept() {
        let (_, group) = hook_shape(HookKind::ClaudeStop, &id(1));
        let before = jsonedit::append("{}", &["hooks", "Stop"], &group).unwrap();
        let before = before.replace(
            "\"timeout\": 30",
            "\"timeout\": 90,\n            \"statusMessage\": \"mail?\"",
        );
        let (_, group2) = hook_shape(HookKind::ClaudeStop, &id(2));
        let (after, keys) = merge_our_hook(&before, "Stop", &group2, is_our_hook_command)
            .unwrap()
            .unwrap();
        assert_eq!(keys, ["command"]);
        assert_eq!(after, before.replace("--port 1", "--port 2"));
        let (_, keys) = merge_our_hook(&after, "Stop", &group2, is_our_hook_command)
            .unwrap()
            .unwrap();
        assert!(keys.is_empty());
    }

    #[test]
    fn two_hooks_of_ours_or_none_are_left_to_the_caller() {
        let (_, group) = hook_shape(HookKind::ClaudeStop, &id(1));
        assert_eq!(
            merge_our_hook("{}", "Stop", &group, is_our_hook_command).unwrap(),
            None
        );
        let one = jsonedit::append("{}", &["hooks", "Stop"], &group).unwrap();
        let two = jsonedit::append(&one, &["hooks", "Stop"], &group).unwrap();
        assert_eq!(
            merge_our_hook(&two, "Stop", &group, is_our_hook_command).unwrap(),
            None
        );
    }

    #[test]
    fn claude_env_is_a_default_and_the_rest_is_owned() {
        let entry = mcp_entry(McpFormat::ClaudeJson, &id(1));
        let (owned, defaults) = split(&entry, mcp_default_keys(McpFormat::ClaudeJson));
        let names: Vec<&str> = owned.iter().map(|(k, _)| *k).collect();
        assert_eq!(names, ["type", "command", "args"]);
        assert_eq!(defaults.len(), 1);
        assert_eq!(defaults[0].0, "env");
    }
}
