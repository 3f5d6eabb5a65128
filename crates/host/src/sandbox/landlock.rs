//! A `Layout` as Landlock rules (issue 29; docs/delegation.md "Task identity";
//! https://docs.kernel.org/userspace-api/landlock.html).
//!
//! Landlock only allows: a ruleset handles every access right the kernel knows, and grants
//! each one beneath the folders (or on the files) a rule names; there is no "deny beneath".
//! So "everything but the hidden paths" is built as its complement: a folder that holds no
//! hidden path is granted whole; one that holds some is not granted itself, its entries are
//! granted one by one, descending only along the way to each hidden path. What the agent must
//! not change (the read-only paths) is left out of the write rules the same way.
//!
//! Owns that construction and the access-right sets per Landlock ABI. Pure: the caller lists
//! folders (`list`), applies the rules (`landlock_sys`). Refuses: granting through a symlink
//! whose target is, holds or lies inside a hidden path (a rule follows the link).

#![deny(clippy::disallowed_methods, clippy::disallowed_types)]

use super::layout::{Layout, Step};
use std::path::{Path, PathBuf};

/// Access rights (linux/landlock.h `LANDLOCK_ACCESS_FS_*`).
pub mod access {
    pub const EXECUTE: u64 = 1 << 0;
    pub const WRITE_FILE: u64 = 1 << 1;
    pub const READ_FILE: u64 = 1 << 2;
    pub const READ_DIR: u64 = 1 << 3;
    pub const REMOVE_DIR: u64 = 1 << 4;
    pub const REMOVE_FILE: u64 = 1 << 5;
    pub const MAKE_CHAR: u64 = 1 << 6;
    pub const MAKE_DIR: u64 = 1 << 7;
    pub const MAKE_REG: u64 = 1 << 8;
    pub const MAKE_SOCK: u64 = 1 << 9;
    pub const MAKE_FIFO: u64 = 1 << 10;
    pub const MAKE_BLOCK: u64 = 1 << 11;
    pub const MAKE_SYM: u64 = 1 << 12;
    /// ABI 2: renames and links across folders.
    pub const REFER: u64 = 1 << 13;
    /// ABI 3.
    pub const TRUNCATE: u64 = 1 << 14;
    /// ABI 5: ioctl on device files.
    pub const IOCTL_DEV: u64 = 1 << 15;
    /// The rights a rule on a file (not a folder) may carry; the kernel refuses others.
    pub const FILE: u64 = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV;
    /// Reading and running.
    pub const READ: u64 = EXECUTE | READ_FILE | READ_DIR;
}

/// The oldest Landlock ABI the hub uses: ABI 1 refuses every rename or link across folders
/// (no `REFER` right), which agents and their package managers do all the time.
pub const MIN_ABI: u32 = 2;

/// Every file-system right the kernel with this ABI knows: the ruleset handles them all, so
/// what no rule grants is denied.
pub fn handled(abi: u32) -> u64 {
    let mut h = (1u64 << 13) - 1; // ABI 1: EXECUTE ..= MAKE_SYM
    if abi >= 2 {
        h |= access::REFER;
    }
    if abi >= 3 {
        h |= access::TRUNCATE;
    }
    if abi >= 5 {
        h |= access::IOCTL_DEV;
    }
    h
}

/// One entry of a folder, as the caller found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The folder's path joined with the entry's name.
    pub path: PathBuf,
    /// For a symlink, its canonical target (None when it leads nowhere); for anything else,
    /// None too (`symlink` false).
    pub target: Option<PathBuf>,
    pub symlink: bool,
    /// A folder (for a symlink: its target is one).
    pub dir: bool,
}

/// A rule: `access` beneath (or on) `path`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub path: PathBuf,
    pub access: u64,
    pub dir: bool,
}

/// The rules for `layout` under a kernel with Landlock `abi`. `list` returns a folder's
/// entries, None when it cannot be read (nothing beneath it is granted then).
///
/// - Read (`access::READ`): everything but the hidden paths; inside a hidden folder, the
///   paths shown again (minus any hidden path inside those).
/// - Write (every other handled right): the same, minus the read-only paths too; inside a
///   hidden folder only the paths shown again writable.
///
/// Overlays are not carried out (Landlock cannot redirect a path); the caller makes none in
/// this mode.
pub fn rules(
    layout: &Layout,
    abi: u32,
    list: &mut dyn FnMut(&Path) -> Option<Vec<Entry>>,
) -> Vec<Rule> {
    let h = handled(abi);
    let read = access::READ & h;
    let write = h & !access::READ;
    let hidden: Vec<PathBuf> = layout.hidden().map(|f| f.path.clone()).collect();
    let mut not_written = hidden.clone();
    not_written.extend(layout.read_only().map(|f| f.path.clone()));
    let mut out = Vec::new();
    grant(Path::new("/"), true, read, &hidden, list, &mut out);
    grant(Path::new("/"), true, write, &not_written, list, &mut out);
    for step in &layout.steps {
        if let Step::Show { at, writable } = step {
            grant(&at.path, at.dir, read, &hidden, list, &mut out);
            if *writable {
                grant(&at.path, at.dir, write, &not_written, list, &mut out);
            }
        }
    }
    merge(out)
}

fn grant(
    path: &Path,
    dir: bool,
    rights: u64,
    deny: &[PathBuf],
    list: &mut dyn FnMut(&Path) -> Option<Vec<Entry>>,
    out: &mut Vec<Rule>,
) {
    if deny.iter().any(|d| d == path) {
        return;
    }
    let holds_denied = dir && deny.iter().any(|d| d.starts_with(path) && d != path);
    if !holds_denied {
        let access = if dir { rights } else { rights & access::FILE };
        if access != 0 {
            out.push(Rule {
                path: path.to_owned(),
                access,
                dir,
            });
        }
        return;
    }
    // Not granted itself: that would grant the hidden path beneath it. Its entries are.
    let Some(entries) = list(path) else {
        return;
    };
    for e in entries {
        if e.symlink {
            // A rule is made by opening the path, which follows the link: grant it only
            // when its target is nowhere near a denied path (that target is reached by its
            // own path otherwise).
            let Some(target) = &e.target else { continue };
            let near = deny
                .iter()
                .any(|d| d.starts_with(target) || target.starts_with(d));
            if !near {
                let access = if e.dir { rights } else { rights & access::FILE };
                if access != 0 {
                    out.push(Rule {
                        path: e.path.clone(),
                        access,
                        dir: e.dir,
                    });
                }
            }
            continue;
        }
        grant(&e.path, e.dir, rights, deny, list, out);
    }
}

/// One rule per path, its rights the union of all rules on it; in path order.
fn merge(mut rules: Vec<Rule>) -> Vec<Rule> {
    rules.sort_by(|a, b| a.path.cmp(&b.path));
    let mut out: Vec<Rule> = Vec::new();
    for r in rules {
        match out.last_mut() {
            Some(last) if last.path == r.path => last.access |= r.access,
            _ => out.push(r),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::layout::{layout, Facts, Found};
    use super::*;
    use std::collections::BTreeMap;

    /// One entry: name, folder, symlink target.
    type Item = (&'static str, bool, Option<&'static str>);

    /// A small file tree: folder → entries.
    struct Tree(BTreeMap<&'static str, Vec<Item>>);

    impl Tree {
        fn list(&self, p: &Path) -> Option<Vec<Entry>> {
            let key = p.to_str()?;
            let entries = self.0.get(key)?;
            Some(
                entries
                    .iter()
                    .map(|(name, dir, target)| Entry {
                        path: p.join(name),
                        target: target.map(PathBuf::from),
                        symlink: target.is_some(),
                        dir: *dir,
                    })
                    .collect(),
            )
        }
    }

    fn tree() -> Tree {
        Tree(BTreeMap::from([
            (
                "/",
                vec![
                    ("usr", true, None),
                    ("tmp", true, None),
                    ("root", true, None),
                    ("lib", true, Some("/usr/lib")),
                ],
            ),
            (
                "/tmp",
                vec![
                    ("it", true, None),
                    ("other", true, None),
                    ("sneaky", true, Some("/tmp/it")),
                    ("sneaky2", false, Some("/tmp/it/roster.toml")),
                    ("f", false, None),
                ],
            ),
            (
                "/tmp/it",
                vec![
                    ("roster.toml", false, None),
                    ("work", true, None),
                    ("creds", true, None),
                ],
            ),
            (
                "/tmp/it/creds",
                vec![("task-1", true, None), ("task-2", true, None)],
            ),
            (
                "/root",
                vec![(".claude", true, None), (".agent-hub", true, None)],
            ),
        ]))
    }

    fn facts() -> Facts {
        Facts {
            secret_files: vec![Found::file("/tmp/it/roster.toml")],
            secret_dirs: vec![Found::dir("/tmp/it/creds")],
            read_only: vec![Found::dir("/root/.agent-hub")],
            needed: vec![
                (Found::dir("/tmp/it/work"), true),
                (Found::dir("/tmp/it/creds/task-1"), false),
            ],
            keep_whole: vec!["/root".into(), "/usr/bin".into()],
            overlays: Vec::new(),
            cwd: "/tmp/it/work".into(),
        }
    }

    fn rights_of(rules: &[Rule], p: &str) -> Option<u64> {
        rules
            .iter()
            .find(|r| r.path == Path::new(p))
            .map(|r| r.access)
    }

    /// What the kernel allows on `p`: the union of the rules on it and its ancestors.
    fn effective(rules: &[Rule], p: &str) -> u64 {
        rules
            .iter()
            .filter(|r| Path::new(p).starts_with(&r.path))
            .fold(0, |a, r| a | r.access)
    }

    #[test]
    fn the_complement_grants_around_hidden_paths_and_shows_the_needed_ones() {
        let t = tree();
        let l = layout(&facts());
        let rules = rules(&l, 3, &mut |p| t.list(p));
        let all = handled(3);
        let write = all & !access::READ;
        // Whole where nothing is hidden beneath.
        assert_eq!(rights_of(&rules, "/usr"), Some(all));
        assert_eq!(rights_of(&rules, "/tmp/other"), Some(all));
        assert_eq!(rights_of(&rules, "/tmp/f"), Some(all & access::FILE));
        assert_eq!(effective(&rules, "/root/.claude/settings.json"), all);
        // Never on a folder that holds a hidden path, nor on a hidden path.
        for p in [
            "/",
            "/tmp",
            "/tmp/it",
            "/tmp/it/roster.toml",
            "/tmp/it/creds",
        ] {
            assert_eq!(rights_of(&rules, p), None, "{p}");
        }
        for p in [
            "/tmp/it/roster.toml",
            "/tmp/it/creds/task-2/token",
            "/tmp/it/x",
        ] {
            assert_eq!(effective(&rules, p), 0, "{p}");
        }
        // Shown again: the root read-write, the own folder read-only.
        assert_eq!(effective(&rules, "/tmp/it/work/f"), all);
        assert_eq!(
            effective(&rules, "/tmp/it/creds/task-1/token"),
            access::READ
        );
        // Read-only: read, no write; HOME, which holds it, cannot be written to directly.
        assert_eq!(
            effective(&rules, "/root/.agent-hub/agents/x.toml"),
            access::READ
        );
        assert_eq!(effective(&rules, "/root") & write, 0);
        assert_ne!(effective(&rules, "/root") & access::READ_DIR, 0);
        assert_eq!(write & access::READ, 0);
        // Symlinks: one to a safe target is granted, one into (or onto) a hidden path is not.
        assert_eq!(rights_of(&rules, "/lib"), Some(all));
        assert_eq!(rights_of(&rules, "/tmp/sneaky"), None);
        assert_eq!(rights_of(&rules, "/tmp/sneaky2"), None);
    }

    #[test]
    fn a_folder_that_cannot_be_listed_grants_nothing_beneath() {
        let t = tree();
        let l = layout(&facts());
        let rules = rules(&l, 2, &mut |p| {
            if p == Path::new("/tmp") {
                None
            } else {
                t.list(p)
            }
        });
        assert!(rules
            .iter()
            .all(|r| !r.path.starts_with("/tmp") || r.path.starts_with("/tmp/it/")));
        assert_eq!(rights_of(&rules, "/usr"), Some(handled(2)));
    }

    #[test]
    fn rights_follow_the_abi() {
        assert_eq!(handled(2) & access::TRUNCATE, 0);
        assert_ne!(handled(3) & access::TRUNCATE, 0);
        assert_eq!(handled(4) & access::IOCTL_DEV, 0);
        assert_ne!(handled(5) & access::IOCTL_DEV, 0);
        assert_ne!(handled(2) & access::REFER, 0);
    }
}
