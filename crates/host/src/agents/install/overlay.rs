//! The view of an installed agent's config that a delegated task of that agent gets (issue
//! 29; docs/delegation.md "Task identity"): the user's files as `uninstall` would leave them.
//! A task must run as its own identity only, so the user's `agent-hub` MCP server entry
//! (which logs in as the user's roster name), the delivery and liveness hooks (which would
//! hand the task the user's mail) and the skills (which name the user's identity) are taken
//! out of what the task's agent reads; its own MCP server comes over ACP `session/new`.
//!
//! Owns: computing that view with the uninstall plan (so "ours" means exactly what
//! `uninstall` removes, `mod.rs`), and finding the token files those entries name, which the
//! sandbox hides as well. Pure: the caller reads the files and carries the view out
//! (`sandbox::prepare`: a per-task copy mounted over each changed file). Refuses: changing
//! anything of the user's but agent-hub's own entries.

use super::{plan, Action, PlanError};
use crate::agents::manifest::Manifest;
use std::io;
use std::path::{Path, PathBuf};

/// What a task's agent sees instead of the user's files.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TaskView {
    /// Files whose content the task sees replaced: (the user's file, what the task reads).
    pub replace: Vec<(PathBuf, String)>,
    /// Files and folders the task does not see at all (a removed plugin file, a skill
    /// folder); `true` for a folder.
    pub hide: Vec<(PathBuf, bool)>,
    /// Token files the removed entries named (absolute paths as written there).
    pub token_files: Vec<PathBuf>,
}

/// The view for `m`'s installed files under `home`. `read` returns a file's text, `Ok(None)`
/// when it does not exist. A file that holds nothing of agent-hub's is not in the view.
pub fn task_view(
    m: &Manifest,
    home: &Path,
    read: &dyn Fn(&Path) -> io::Result<Option<String>>,
) -> Result<TaskView, PlanError> {
    let plan = plan(m, &Action::Uninstall, home, read);
    if let Some(e) = plan.error {
        return Err(e);
    }
    let mut view = TaskView::default();
    for c in plan.changes {
        let Some(before) = &c.before else { continue };
        for t in token_files_in(before) {
            if !view.token_files.contains(&t) {
                view.token_files.push(t);
            }
        }
        match c.after {
            Some(text) => view.replace.push((c.path, text)),
            // A skill's own folder: the whole folder goes, as uninstall removes it.
            None if c.remove_empty_dir => {
                if let Some(dir) = c.path.parent() {
                    view.hide.push((dir.to_owned(), true));
                }
            }
            // A config file uninstall would delete (nothing but our entry was in it): the
            // agent reads an empty one of its kind, which it accepts.
            None if is_json(&c.path) => view.replace.push((c.path, "{}\n".into())),
            None if is_toml(&c.path) => view.replace.push((c.path, String::new())),
            None => view.hide.push((c.path, false)),
        }
    }
    Ok(view)
}

fn is_json(p: &Path) -> bool {
    p.extension().is_some_and(|e| e == "json" || e == "jsonc")
}

fn is_toml(p: &Path) -> bool {
    p.extension().is_some_and(|e| e == "toml")
}

/// The absolute paths that follow `--token-file` (an MCP entry's args, a hook command) or
/// `tokenFile` (the OpenCode plugin's settings) in `text`, as install writes them: as JSON or
/// TOML strings, bare shell words or single-quoted ones.
pub fn token_files_in(text: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for needle in ["--token-file", "tokenFile"] {
        let mut rest = text;
        while let Some(at) = rest.find(needle) {
            rest = &rest[at + needle.len()..];
            // Past the separators between the key and its value: quotes, commas, colons,
            // `=`, whitespace. The last quote seen closes the value.
            let mut quote = None;
            let start = rest
                .char_indices()
                .find(|&(_, c)| {
                    if c == '"' || c == '\'' {
                        quote = Some(c);
                        false
                    } else {
                        !(c.is_whitespace() || c == ',' || c == ':' || c == '=')
                    }
                })
                .map(|(i, _)| i);
            let Some(start) = start else { break };
            let value = &rest[start..];
            let end = value
                .char_indices()
                .find(|&(_, c)| match quote {
                    Some(q) => c == q,
                    None => c.is_whitespace() || c == ',' || c == ']' || c == '"' || c == '\'',
                })
                .map_or(value.len(), |(i, _)| i);
            let path = &value[..end];
            if path.starts_with('/') && !out.iter().any(|p: &PathBuf| p == Path::new(path)) {
                out.push(PathBuf::from(path));
            }
            rest = &value[end..];
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agents::install::skills::STAMP_PREFIX;
    use crate::agents::install::{stamp_skill, BACKUP_SUFFIX};
    use crate::agents::registry::Registry;
    use std::collections::BTreeMap;

    /// The files of a fixture tree (protocol/install/AGENT/STAGE), keyed by the path they
    /// stand for under `home`, with `{HOME}` filled in.
    fn fixture(agent: &str, stage: &str, home: &Path) -> BTreeMap<PathBuf, String> {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../..")
            .join("protocol/install")
            .join(agent)
            .join(stage);
        let mut out = BTreeMap::new();
        let mut stack = vec![root.clone()];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).unwrap().flatten() {
                let p = e.path();
                if p.is_dir() {
                    stack.push(p);
                } else if !p.to_string_lossy().ends_with(BACKUP_SUFFIX) {
                    let rel = p.strip_prefix(&root).unwrap();
                    let mut text = std::fs::read_to_string(&p)
                        .unwrap()
                        .replace("{HOME}", &home.display().to_string());
                    // A skill's stamp is written `{SHA256}` in the fixture: the real one
                    // over the text above it, as install wrote it.
                    if let Some(at) = text.rfind(STAMP_PREFIX) {
                        if text[at..].contains("{SHA256}") {
                            text = stamp_skill(text[..at].to_owned());
                        }
                    }
                    out.insert(home.join(rel), text);
                }
            }
        }
        out
    }

    fn view_of(agent: &str, stage: &str) -> (TaskView, BTreeMap<PathBuf, String>) {
        let home = Path::new("/home/u");
        let files = fixture(agent, stage, home);
        let reg = Registry::builtin();
        let m = reg.get(agent).unwrap();
        let read = |p: &Path| Ok(files.get(p).cloned());
        let view = task_view(m, home, &read).unwrap();
        (view, files)
    }

    /// An installed Claude Code: the task sees ~/.claude.json without mcpServers.agent-hub,
    /// settings.json without the Stop hook, no agent-hub skill folders; the user's own
    /// entries stay, byte for byte as uninstall leaves them (the after-uninstall fixture).
    #[test]
    fn an_installed_claude_is_seen_without_the_users_identity() {
        let (view, _) = view_of("claude", "after-install");
        let want = fixture("claude", "after-uninstall", Path::new("/home/u"));
        assert!(!view.replace.is_empty());
        for (path, text) in &view.replace {
            // The user's own mention of the hub (a permission rule) stays; ours goes.
            assert!(
                !text.contains("hook stop") && !text.contains("--token-file"),
                "{}: {text}",
                path.display()
            );
            assert_eq!(Some(text), want.get(path), "{}", path.display());
        }
        let hidden: Vec<&PathBuf> = view.hide.iter().map(|(p, _)| p).collect();
        assert!(hidden
            .iter()
            .any(|p| p.ends_with(".claude/skills/agent-hub-resident")));
        assert!(view.hide.iter().all(|(_, dir)| *dir));
        assert_eq!(
            view.token_files,
            [PathBuf::from("/home/u/.agent-hub/worker.token")]
        );
    }

    #[test]
    fn every_builtin_installed_agent_loses_its_hub_entries_and_names_its_token() {
        for agent in ["codex", "gemini", "opencode", "droid"] {
            let (view, files) = view_of(agent, "after-install");
            assert!(
                !view.replace.is_empty() || !view.hide.is_empty(),
                "{agent}: nothing to take out of {:?}",
                files.keys()
            );
            for (path, text) in &view.replace {
                assert!(
                    !text.contains("--token-file") && !text.contains("hook stop"),
                    "{agent} {}: {text}",
                    path.display()
                );
            }
            assert!(
                view.token_files
                    .iter()
                    .all(|t| t.to_string_lossy().ends_with(".token")),
                "{agent}: {:?}",
                view.token_files
            );
            assert!(!view.token_files.is_empty(), "{agent}");
        }
    }

    #[test]
    fn an_agent_never_installed_has_an_empty_view() {
        let (view, _) = view_of("claude", "before");
        assert_eq!(view, TaskView::default());
    }

    #[test]
    fn token_files_are_found_in_every_shape_install_writes() {
        let text = r#"{"args":["mcp","--as","w","--token-file","/h/.a/w.token","--port","1"],
            "command":"/bin/agent-hub hook stop --as w --token-file '/h/my dir/w.token' --port 1",
            "c2":"/bin/agent-hub hook stop --token-file /h/bare.token --port 1"}
            args = ["mcp", "--token-file", "/h/toml.token"]
            hub: { tokenFile: "/h/plugin.token" }
            --token-file relative.token"#;
        assert_eq!(
            token_files_in(text),
            [
                "/h/.a/w.token",
                "/h/my dir/w.token",
                "/h/bare.token",
                "/h/toml.token",
                "/h/plugin.token"
            ]
            .map(PathBuf::from)
        );
    }
}
