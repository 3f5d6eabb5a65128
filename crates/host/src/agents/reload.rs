//! The agent catalogue read again while the hub runs (SIGHUP, `agent-hub-server reload`;
//! docs/operations.md "Reloading agent manifests", issue 35): which catalogue is in force
//! afterwards, and what changed, by agent name.
//!
//! Owns the rules for a reload that finds something wrong, decided on two catalogues already
//! read (`Sources::load`); refuses reading folders itself and anything about tasks (which
//! tasks a change reaches is the executor's: a task takes its argv when it starts).
//!
//! The rules. A bad manifest never takes away a working one:
//! - a folder that cannot be read, or is refused whole for its owner or mode, refuses the
//!   reload: the catalogue in force stays as it is, every agent of it;
//! - a file that fails to load (TOML, a key, its name) is skipped, as at startup, and the
//!   others load; when that file gave the catalogue in force an agent, the agent stays as it
//!   was (a half-saved edit does not take it away) until the file loads again or is removed;
//! - except a file refused for its owner or mode: the hub runs what a manifest says, so a
//!   name whose file someone else could have changed runs nothing, as at startup
//!   (`registry`, issue 29), whatever it ran before.

use super::manifest::ManifestError;
use super::registry::{Origin, Registry};
use std::path::PathBuf;

/// What a reload changed, by manifest name, each list sorted.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Changes {
    pub added: Vec<String>,
    pub removed: Vec<String>,
    /// The manifest differs (any key, or the file it comes from).
    pub changed: Vec<String>,
    /// Agents whose file no longer loads, kept as they were; the file.
    pub kept: Vec<(String, PathBuf)>,
}

impl Changes {
    /// Nothing was added, removed, changed or kept.
    pub fn is_empty(&self) -> bool {
        self.added.is_empty()
            && self.removed.is_empty()
            && self.changed.is_empty()
            && self.kept.is_empty()
    }
}

/// Why a reload left the catalogue in force as it was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// The failed folders' problems (the folder and why), in reading order.
    pub folders: Vec<ManifestError>,
}

/// The catalogue to use from now on, and what it changed; or why the one in force stays.
/// `fresh` is the catalogue just read from the same sources as `current` was. Every problem
/// of `fresh` stays in the returned registry's `problems` for the caller to report.
pub fn reload(current: &Registry, mut fresh: Registry) -> Result<(Registry, Changes), Refused> {
    if !fresh.failed_folders.is_empty() {
        let failed: Vec<String> = fresh
            .failed_folders
            .iter()
            .map(|d| d.display().to_string())
            .collect();
        let folders = fresh
            .problems
            .into_iter()
            .filter(|p| failed.contains(&p.source))
            .collect();
        return Err(Refused { folders });
    }
    let mut kept = Vec::new();
    for (m, origin) in &current.agents {
        let path = match origin {
            Origin::Builtin => continue,
            Origin::File(p) | Origin::Override(p) => p,
        };
        if fresh.refused.contains(&m.name) {
            continue;
        }
        let source = path.display().to_string();
        if !fresh.problems.iter().any(|p| p.source == source) {
            continue;
        }
        let entry = (m.clone(), origin.clone());
        match fresh.agents.iter_mut().find(|(a, _)| a.name == m.name) {
            Some(slot) => *slot = entry,
            None => fresh.agents.push(entry),
        }
        kept.push((m.name.clone(), path.clone()));
    }
    fresh.sort_additions();
    let mut changes = Changes {
        kept,
        ..Changes::default()
    };
    for (m, origin) in &fresh.agents {
        match current.agents.iter().find(|(a, _)| a.name == m.name) {
            None => changes.added.push(m.name.clone()),
            Some((a, o)) if a != m || o != origin => changes.changed.push(m.name.clone()),
            Some(_) => {}
        }
    }
    for (m, _) in &current.agents {
        if fresh.get(&m.name).is_none() {
            changes.removed.push(m.name.clone());
        }
    }
    changes.added.sort();
    changes.removed.sort();
    changes.changed.sort();
    changes.kept.sort();
    Ok((fresh, changes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agents::registry::Sources;
    use std::os::unix::fs::PermissionsExt;
    use std::path::Path;

    fn temp(tag: &str) -> PathBuf {
        let p = std::env::temp_dir().join(format!("agent-hub-reload-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        p
    }

    fn manifest(name: &str, program: &str) -> String {
        format!(
            "name = \"{name}\"\ndisplay = \"X\"\nbinaries = [\"x\"]\n[observe]\nsessions = \"none\"\ntranscript = \"none\"\n[run]\nacp = [\"{program}\"]\nheadless = []\noutcome = \"exit-code\"\n[deliver]\nmode = \"pull\"\n[install]\nmcp_config = \"\"\nhook = \"none\"\nskills_dir = \"\"\n"
        )
    }

    fn write(dir: &Path, name: &str, text: &str) {
        let p = dir.join(format!("{name}.toml"));
        std::fs::write(&p, text).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
    }

    fn sources(user: &Path, extra: &Path) -> Sources {
        Sources {
            user_dir: Some(user.to_owned()),
            user_explicit: false,
            extra_dir: Some(extra.to_owned()),
        }
    }

    #[test]
    fn added_removed_and_changed_are_named_and_the_later_folder_wins() {
        let (user, extra) = (temp("acr-user"), temp("acr-extra"));
        write(&user, "mine", &manifest("mine", "/bin/true"));
        write(&extra, "gone", &manifest("gone", "/bin/true"));
        write(&extra, "same", &manifest("same", "/bin/true"));
        let src = sources(&user, &extra);
        let current = src.load();
        assert!(current.problems.is_empty(), "{:?}", current.problems);
        std::fs::remove_file(extra.join("gone.toml")).unwrap();
        write(&extra, "new", &manifest("new", "/bin/true"));
        // The hub's folder replaces the user's agent of the same name.
        write(&extra, "mine", &manifest("mine", "/bin/false"));
        let (reg, changes) = reload(&current, src.load()).unwrap();
        assert_eq!(changes.added, ["new"]);
        assert_eq!(changes.removed, ["gone"]);
        assert_eq!(changes.changed, ["mine"]);
        assert!(changes.kept.is_empty());
        assert_eq!(reg.get("mine").unwrap().run.acp, ["/bin/false"]);
        assert!(reg.get("same").is_some() && reg.get("claude").is_some());
        // Read again with nothing changed: nothing to say.
        let (_, again) = reload(&reg, src.load()).unwrap();
        assert!(again.is_empty(), "{again:?}");
        for d in [user, extra] {
            let _ = std::fs::remove_dir_all(d);
        }
    }

    /// A working manifest edited into a broken one keeps its agent as it was; a broken new
    /// one is skipped; both are among the problems; the others load.
    #[test]
    fn a_bad_manifest_never_takes_away_a_working_one() {
        let (user, extra) = (temp("bad-user"), temp("bad-extra"));
        write(&extra, "work", &manifest("work", "/bin/true"));
        write(&extra, "other", &manifest("other", "/bin/true"));
        // Overrides the built-in codex; broken later, the override stays, not the built-in.
        write(&extra, "codex", &manifest("codex", "/bin/true"));
        let src = sources(&user, &extra);
        let current = src.load();
        write(&extra, "work", "name = \"work\"\n[run\n");
        write(&extra, "codex", "name = 7\n");
        write(&extra, "broken", "not toml at all [");
        write(&extra, "added", &manifest("added", "/bin/true"));
        let (reg, changes) = reload(&current, src.load()).unwrap();
        assert_eq!(reg.get("work"), current.get("work"));
        assert_eq!(reg.get("codex"), current.get("codex"));
        assert_eq!(reg.get("codex").unwrap().run.acp, ["/bin/true"]);
        assert!(reg.get("broken").is_none());
        assert!(reg.get("other").is_some());
        assert_eq!(changes.added, ["added"]);
        assert!(changes.removed.is_empty() && changes.changed.is_empty());
        let kept: Vec<&str> = changes.kept.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(kept, ["codex", "work"]);
        let shown: Vec<String> = reg.problems.iter().map(|p| p.to_string()).collect();
        for file in ["work.toml", "codex.toml", "broken.toml"] {
            assert!(shown.iter().any(|p| p.contains(file)), "{file}: {shown:?}");
        }
        // Removing the broken file removes its agent: removal is what the operator meant.
        std::fs::remove_file(extra.join("work.toml")).unwrap();
        let (reg, changes) = reload(&reg, src.load()).unwrap();
        assert!(reg.get("work").is_none());
        assert_eq!(changes.removed, ["work"]);
        for d in [user, extra] {
            let _ = std::fs::remove_dir_all(d);
        }
    }

    /// Someone else could have written it: the security rule wins over keeping.
    #[test]
    fn a_file_refused_for_its_mode_takes_its_agent_away() {
        let (user, extra) = (temp("mode-user"), temp("mode-extra"));
        write(&extra, "work", &manifest("work", "/bin/true"));
        let src = sources(&user, &extra);
        let current = src.load();
        std::fs::set_permissions(
            extra.join("work.toml"),
            std::fs::Permissions::from_mode(0o666),
        )
        .unwrap();
        let (reg, changes) = reload(&current, src.load()).unwrap();
        assert!(reg.get("work").is_none());
        assert_eq!(changes.removed, ["work"]);
        assert!(changes.kept.is_empty());
        for d in [user, extra] {
            let _ = std::fs::remove_dir_all(d);
        }
    }

    #[test]
    fn a_folder_that_cannot_be_read_keeps_the_catalogue_in_force() {
        let (user, extra) = (temp("dir-user"), temp("dir-extra"));
        write(&extra, "work", &manifest("work", "/bin/true"));
        let src = sources(&user, &extra);
        let current = src.load();
        std::fs::remove_dir_all(&extra).unwrap();
        let refused = reload(&current, src.load()).unwrap_err();
        assert_eq!(refused.folders.len(), 1);
        let why = refused.folders[0].to_string();
        assert!(
            why.contains(&extra.display().to_string()) && why.contains("cannot read"),
            "{why}"
        );
        // Refused whole for its mode: the same.
        std::fs::create_dir_all(&extra).unwrap();
        write(&extra, "work", &manifest("work", "/bin/true"));
        std::fs::set_permissions(&extra, std::fs::Permissions::from_mode(0o777)).unwrap();
        let refused = reload(&current, src.load()).unwrap_err();
        assert!(
            refused.folders[0].to_string().contains("mode 777"),
            "{:?}",
            refused.folders
        );
        for d in [user, extra] {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}
