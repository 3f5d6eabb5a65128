//! The MCP server entry an install puts in an agent's config (docs/agents.md): its JSON or
//! TOML shape per manifest format, placing it and taking it out again, and the file left when
//! removal empties it. Pure: edits the plan's copy of each file, never the disk.

use super::owned::{mcp_default_keys, split, updated_note};
use super::{expand, shown, status_note, Action, EditError, HubIdentity, PlanError, Work};
use crate::agents::jsonedit::{self, Seg, J};
use crate::agents::manifest::{Manifest, McpConfig, McpFormat, SERVER_NAME};
use crate::agents::tomledit;

/// The MCP server entry for `format`, as JSON.
pub(super) fn mcp_entry(format: McpFormat, id: &HubIdentity) -> J {
    let args = J::Arr(id.mcp_args().into_iter().map(J::Str).collect());
    match format {
        McpFormat::ClaudeJson => J::obj(vec![
            ("type", J::str("stdio")),
            ("command", J::str(&id.command)),
            ("args", args),
            ("env", J::Obj(Vec::new())),
        ]),
        McpFormat::GeminiJson => J::obj(vec![("command", J::str(&id.command)), ("args", args)]),
        McpFormat::DroidJson => J::obj(vec![
            ("type", J::str("stdio")),
            ("command", J::str(&id.command)),
            ("args", args),
        ]),
        McpFormat::OpencodeJson => {
            let mut argv = vec![J::str(&id.command)];
            argv.extend(id.mcp_args().into_iter().map(J::Str));
            J::obj(vec![("type", J::str("local")), ("command", J::Arr(argv))])
        }
        // Not JSON; handled by `plan_mcp` directly.
        McpFormat::CodexToml => J::Obj(Vec::new()),
    }
}

pub(super) fn mcp_parent(format: McpFormat) -> &'static str {
    match format {
        McpFormat::OpencodeJson => "mcp",
        McpFormat::CodexToml => "mcp_servers",
        _ => "mcpServers",
    }
}

/// A JSON file left as nothing but `{}` after an uninstall goes away (see the module doc).
pub(super) fn json_leftover(text: String) -> Option<String> {
    (text.trim() != "{}").then_some(text)
}

pub(super) fn plan_mcp(
    m: &Manifest,
    action: &Action,
    work: &mut Work,
    notes: &mut Vec<String>,
) -> Result<(), PlanError> {
    if let Some(e) = m.mcp_format_missing() {
        // No format given and none told by the file name (docs/agents.md "Defaults"). `cmd`
        // asks before an install starts; this guards the pure plan on its own. An uninstall
        // needs the format only when there is a file to look in.
        if let (Action::Uninstall, Some(mcp)) = (action, &m.install.mcp) {
            let path = expand(&mcp.path, &work.home);
            if work.get(&path)?.is_none() {
                let show = shown(&path, &work.home);
                notes.push(format!("{show}: MCP server {SERVER_NAME:?} not present"));
                return Ok(());
            }
        }
        return Err(PlanError::Manifest(e));
    }
    let Some(McpConfig {
        path,
        format: Some(format),
    }) = &m.install.mcp
    else {
        return Ok(());
    };
    let path = expand(path, &work.home);
    let show = shown(&path, &work.home);
    let parent = mcp_parent(*format);
    let what = format!("MCP server {SERVER_NAME:?} ({parent}.{SERVER_NAME})");
    let text = work.get(&path)?;
    let fail = |e: EditError| PlanError::Edit {
        file: show.clone(),
        source: e,
    };
    if *format == McpFormat::CodexToml {
        let key = [parent, SERVER_NAME];
        let cur = text.clone().unwrap_or_default();
        match action {
            Action::Install { id, .. } => {
                let args = toml::Value::Array(
                    id.mcp_args().into_iter().map(toml::Value::String).collect(),
                );
                let entries = [
                    ("command", toml::Value::String(id.command.clone())),
                    ("args", args),
                ];
                let existed = tomledit::get(&cur, &key)
                    .map_err(|e| fail(e.into()))?
                    .is_some();
                let (new, keys) =
                    tomledit::merge_table(&cur, &key, &entries).map_err(|e| fail(e.into()))?;
                notes.push(if existed && !keys.is_empty() {
                    updated_note(&show, &what, &keys)
                } else {
                    status_note(&show, &what, existed, !keys.is_empty())
                });
                work.put(&path, Some(new));
            }
            Action::Uninstall => {
                match tomledit::remove_table(&cur, &key).map_err(|e| fail(e.into()))? {
                    None => notes.push(format!("{show}: {what} not present")),
                    Some(new) => {
                        notes.push(format!("{show}: {what} removed"));
                        let new = if new.trim().is_empty() {
                            None
                        } else {
                            Some(new)
                        };
                        work.put(&path, new);
                    }
                }
            }
        }
        return Ok(());
    }
    let key = [Seg::Key(parent), Seg::Key(SERVER_NAME)];
    let cur = text.unwrap_or_default();
    match action {
        Action::Install { id, .. } => {
            let entry = mcp_entry(*format, id);
            let existing = jsonedit::get(&cur, &key).map_err(|e| fail(e.into()))?;
            if let Some(serde_json::Value::Object(_)) = existing {
                // Ours already: set only the keys install owns, keep the user's (owned.rs).
                let (owned, defaults) = split(&entry, mcp_default_keys(*format));
                let (new, keys) = jsonedit::merge_object(&cur, &key, &owned, &defaults)
                    .map_err(|e| fail(e.into()))?;
                if keys.is_empty() {
                    notes.push(format!("{show}: {what} already present"));
                } else {
                    notes.push(updated_note(&show, &what, &keys));
                    work.put(&path, Some(new));
                }
                return Ok(());
            }
            // Missing, or not an object (nothing of the user's can be inside): written whole.
            let new =
                jsonedit::set(&cur, &[parent, SERVER_NAME], &entry).map_err(|e| fail(e.into()))?;
            notes.push(status_note(&show, &what, existing.is_some(), true));
            work.put(&path, Some(new));
        }
        Action::Uninstall => match jsonedit::remove(&cur, &key).map_err(|e| fail(e.into()))? {
            None => notes.push(format!("{show}: {what} not present")),
            Some(mut new) => {
                if jsonedit::is_empty_container(&new, &key[..1]).map_err(|e| fail(e.into()))? {
                    if let Some(pruned) =
                        jsonedit::remove(&new, &key[..1]).map_err(|e| fail(e.into()))?
                    {
                        new = pruned;
                    }
                }
                notes.push(format!("{show}: {what} removed"));
                work.put(&path, json_leftover(new));
            }
        },
    }
    Ok(())
}
