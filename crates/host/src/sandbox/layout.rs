//! What a delegated agent may not see, may not change, and sees in place of the user's own
//! files, as data (issue 29; docs/delegation.md "Task identity"). Both sandboxes carry out the
//! same `Layout`: bubblewrap as mounts (`bwrap.rs`), Landlock as access rules (`landlock.rs`).
//!
//! Owns the rule that decides what is hidden whole: the folder of each of the hub's files
//! (config, roster, logs, store, relay keys and status) when it is a folder the agent can do
//! without, else just the file; the hub's own folders (the task credentials, the roster's
//! tokens) always; and the paths shown again inside a hidden folder (the task roots, the
//! client binary, the task's own token). Refuses: touching the disk. The caller (`prepare`)
//! passes only paths that exist, canonical, so the layout never names a path a mount would
//! have to create on the host.

#![deny(clippy::disallowed_methods, clippy::disallowed_types)]

use std::path::{Path, PathBuf};

/// A path that exists, canonical, and whether it is a folder.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Found {
    pub path: PathBuf,
    pub dir: bool,
}

impl Found {
    pub fn dir(p: impl Into<PathBuf>) -> Found {
        Found {
            path: p.into(),
            dir: true,
        }
    }
    pub fn file(p: impl Into<PathBuf>) -> Found {
        Found {
            path: p.into(),
            dir: false,
        }
    }
}

/// What the layout is computed from. Every path canonical and existing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Facts {
    /// The hub's files: the config, the roster, the audit log and its `.head`, the service
    /// log, the queue store and its companions, relay keys, the relay status file, and the
    /// token files the user's agent configs name. Each is hidden, with its folder when the
    /// folder passes `hideable`.
    pub secret_files: Vec<Found>,
    /// Folders that hold only the hub's secrets (`tasks.credentials_dir`, the roster's
    /// `tokens/`): hidden whole whatever they hold.
    pub secret_dirs: Vec<Found>,
    /// Visible but not writable: the hub's binaries (an agent that could rewrite them would
    /// run as the hub at its next start) and the manifest folders (what the hub executes).
    pub read_only: Vec<Found>,
    /// What the agent needs even inside a hidden folder, and whether it may write there: the
    /// task roots (read-write), the client binary it runs as its MCP server, its own token.
    pub needed: Vec<(Found, bool)>,
    /// Folders no hidden folder may hold or be: HOME, every PATH entry, the agent program's
    /// folder. A hub file in one of these, or in an ancestor, is hidden alone.
    pub keep_whole: Vec<PathBuf>,
    /// A per-task copy (in the task's own folder) standing in for an agent config file
    /// (`overlay.rs`): `(copy, original)`. Carried out by bubblewrap only.
    pub overlays: Vec<(PathBuf, PathBuf)>,
    /// The task's working directory.
    pub cwd: PathBuf,
}

/// One step, in the order the sandbox applies them (shallowest path first, so a deeper step
/// always applies inside what a shallower one left).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Nothing of it is visible: a folder becomes an empty read-only one, a file one that
    /// cannot be opened.
    Hide(Found),
    /// Shown again inside a hidden folder, read-write when `writable`.
    Show { at: Found, writable: bool },
    /// Visible, not writable.
    ReadOnly(Found),
    /// `original` shows the content of `copy` (read-write: the agent's writes go to the copy).
    Overlay { copy: PathBuf, original: PathBuf },
}

/// The computed layout.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Layout {
    pub steps: Vec<Step>,
    pub cwd: PathBuf,
}

impl Layout {
    /// The hidden paths, in order.
    pub fn hidden(&self) -> impl Iterator<Item = &Found> {
        self.steps.iter().filter_map(|s| match s {
            Step::Hide(f) => Some(f),
            _ => None,
        })
    }

    /// The paths shown again inside hidden folders, with whether they are writable.
    pub fn shown(&self) -> impl Iterator<Item = (&Found, bool)> {
        self.steps.iter().filter_map(|s| match s {
            Step::Show { at, writable } => Some((at, *writable)),
            _ => None,
        })
    }

    pub fn read_only(&self) -> impl Iterator<Item = &Found> {
        self.steps.iter().filter_map(|s| match s {
            Step::ReadOnly(f) => Some(f),
            _ => None,
        })
    }

    /// Whether `path` is visible once every step applied: the deepest hidden or shown step at
    /// or above it decides, and a path under no step is visible.
    pub fn visible(&self, path: &Path) -> bool {
        self.state(path).0
    }

    /// (visible, writable) for `path` after the hidden and shown steps: the deepest such
    /// step at or above it decides; under none, a path is as it was (visible, writable as
    /// the file modes allow).
    pub fn state(&self, path: &Path) -> (bool, bool) {
        let mut best: Option<(usize, bool, bool)> = None;
        for s in &self.steps {
            let (at, vis, w) = match s {
                Step::Hide(f) => (&f.path, false, false),
                Step::Show { at, writable } => (&at.path, true, *writable),
                _ => continue,
            };
            if path.starts_with(at) {
                let d = depth(at);
                if best.map_or(true, |(bd, _, _)| d >= bd) {
                    best = Some((d, vis, w));
                }
            }
        }
        best.map_or((true, true), |(_, v, w)| (v, w))
    }
}

/// Top-level folders, and folders shared by everything on the machine, are never hidden whole
/// (an agent needs them; the hub's files there are hidden one by one).
const SHARED: &[&str] = &[
    "/usr",
    "/nix",
    "/gnu",
    "/opt/homebrew",
    "/var/lib",
    "/var/cache",
    "/var/tmp",
    "/var/run",
    "/run/user",
    "/proc",
    "/sys",
    "/dev",
    "/snap",
];

/// Path components below `/`: `/` is 0, `/etc` 1, `/etc/agent-hub` 2.
pub fn depth(p: &Path) -> usize {
    p.components()
        .filter(|c| matches!(c, std::path::Component::Normal(_)))
        .count()
}

/// Whether a folder that holds one of the hub's files may be hidden whole: at least two levels
/// deep, not shared by the system, not HOME, a PATH entry or the agent's folder or one of
/// their ancestors, and not itself a path the agent needs (a task root; one inside it is
/// shown again instead).
pub fn hideable(dir: &Path, facts: &Facts) -> bool {
    depth(dir) >= 2
        && !SHARED.iter().any(|s| dir.starts_with(s))
        && !facts.keep_whole.iter().any(|k| k.starts_with(dir))
        && !facts.needed.iter().any(|(n, _)| n.path == dir)
}

/// Computes the layout. The result names each path at most once per kind and only where it
/// changes something: a hidden path inside another hidden one (and not shown again between)
/// is left out, a needed path already visible is not shown again, a read-only path or an
/// overlay inside a hidden folder is left out (hidden is stronger).
pub fn layout(facts: &Facts) -> Layout {
    let mut hide: Vec<Found> = Vec::new();
    for d in &facts.secret_dirs {
        hide.push(d.clone());
    }
    for f in &facts.secret_files {
        match f.path.parent() {
            Some(dir) if hideable(dir, facts) => hide.push(Found::dir(dir)),
            _ => hide.push(f.clone()),
        }
    }
    hide.sort();
    hide.dedup_by(|a, b| a.path == b.path);

    // First the hidden and shown steps, shallowest first: a step is kept only when it
    // changes what is visible at that point.
    let mut cand: Vec<Step> = hide.into_iter().map(Step::Hide).collect();
    for (n, w) in &facts.needed {
        cand.push(Step::Show {
            at: n.clone(),
            writable: *w,
        });
    }
    cand.sort_by(|a, b| {
        let (pa, pb) = (step_path(a), step_path(b));
        (depth(pa), pa).cmp(&(depth(pb), pb))
    });
    let mut out = Layout {
        steps: Vec::new(),
        cwd: facts.cwd.clone(),
    };
    for s in cand {
        let p = step_path(&s).to_path_buf();
        let (now_visible, now_writable) = out.state(&p);
        match &s {
            Step::Hide(_) if now_visible => out.steps.push(s),
            // Shown again where hidden, or writable inside a read-only shown path (the
            // task's temporary folder inside its own folder).
            Step::Show { writable, .. } if !now_visible || (*writable && !now_writable) => {
                // A needed path equal to a hidden one: the hidden step is replaced, never
                // stacked (a root the agent needs is never hidden).
                out.steps.retain(|o| step_path(o) != p);
                out.steps.push(s);
            }
            _ => {}
        }
    }
    // Then read-only and overlays, only where visible (and not already shown read-write:
    // a writable root that is also a manifest folder stays writable only if shown so).
    let mut rest: Vec<Step> = Vec::new();
    for r in &facts.read_only {
        if out.visible(&r.path) {
            rest.push(Step::ReadOnly(r.clone()));
        }
    }
    for (copy, original) in &facts.overlays {
        if out.visible(original) {
            rest.push(Step::Overlay {
                copy: copy.clone(),
                original: original.clone(),
            });
        }
    }
    rest.sort_by(|a, b| {
        let (pa, pb) = (step_path(a), step_path(b));
        (depth(pa), pa).cmp(&(depth(pb), pb))
    });
    rest.dedup_by(|a, b| step_path(a) == step_path(b));
    out.steps.extend(rest);
    out
}

fn step_path(s: &Step) -> &Path {
    match s {
        Step::Hide(f) | Step::ReadOnly(f) => &f.path,
        Step::Show { at, .. } => &at.path,
        Step::Overlay { original, .. } => original,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The integration tests' layout: everything of the hub in one temp folder that also
    /// holds the task root.
    fn test_hub() -> Facts {
        Facts {
            secret_files: vec![
                Found::file("/tmp/it/config.toml"),
                Found::file("/tmp/it/roster.toml"),
                Found::file("/tmp/it/audit.jsonl"),
                Found::file("/tmp/it/service.log"),
            ],
            secret_dirs: vec![
                Found::dir("/tmp/it/task-creds"),
                Found::dir("/tmp/it/tokens"),
            ],
            read_only: vec![
                Found::file("/src/target/debug/agent-hub"),
                Found::dir("/tmp/it/manifests"),
            ],
            needed: vec![
                (Found::dir("/tmp/it/work"), true),
                (Found::file("/src/target/debug/agent-hub"), false),
                (Found::file("/tmp/it/task-creds/task-1/token"), false),
            ],
            keep_whole: vec![
                "/root".into(),
                "/usr/bin".into(),
                "/src/target/debug".into(),
            ],
            overlays: Vec::new(),
            cwd: "/tmp/it/work/sub".into(),
        }
    }

    #[test]
    fn the_hub_folder_is_hidden_whole_and_the_root_and_own_token_shown_again() {
        let l = layout(&test_hub());
        assert_eq!(
            l.steps,
            vec![
                Step::Hide(Found::dir("/tmp/it")),
                Step::Show {
                    at: Found::dir("/tmp/it/work"),
                    writable: true
                },
                Step::Show {
                    at: Found::file("/tmp/it/task-creds/task-1/token"),
                    writable: false
                },
                Step::ReadOnly(Found::file("/src/target/debug/agent-hub")),
            ]
        );
        for p in [
            "/tmp/it/roster.toml",
            "/tmp/it/tokens/alpha.token",
            "/tmp/it/task-creds/task-2/token",
            "/tmp/it/manifests/fake.toml",
        ] {
            assert!(!l.visible(Path::new(p)), "{p}");
        }
        for p in [
            "/tmp/it/work/sub/f",
            "/tmp/it/task-creds/task-1/token",
            "/tmp/x",
        ] {
            assert!(l.visible(Path::new(p)), "{p}");
        }
    }

    #[test]
    fn a_hub_file_in_home_or_a_shared_folder_is_hidden_alone() {
        let mut f = test_hub();
        f.secret_files = vec![
            Found::file("/root/hub.toml"),
            Found::file("/var/lib/hub.db"),
            Found::file("/etc/roster.toml"),
        ];
        f.secret_dirs.clear();
        f.needed.truncate(1);
        f.read_only.clear();
        let l = layout(&f);
        let hidden: Vec<&Found> = l.hidden().collect();
        assert_eq!(
            hidden,
            [
                &Found::file("/etc/roster.toml"),
                &Found::file("/root/hub.toml"),
                &Found::file("/var/lib/hub.db"),
            ]
        );
        assert!(l.visible(Path::new("/root/.claude.json")));
    }

    #[test]
    fn a_folder_holding_a_path_entry_or_equal_to_a_root_is_not_hidden_whole() {
        let mut f = test_hub();
        f.keep_whole.push("/tmp/it/bin".into());
        let l = layout(&f);
        assert!(l
            .hidden()
            .any(|h| h.path == Path::new("/tmp/it/roster.toml")));
        assert!(!l.hidden().any(|h| h.path == Path::new("/tmp/it")));
        // The root itself never: the config sits in the root.
        let mut f = test_hub();
        f.secret_files = vec![Found::file("/tmp/it/work/config.toml")];
        let l = layout(&f);
        assert!(l
            .hidden()
            .any(|h| h.path == Path::new("/tmp/it/work/config.toml")));
        assert!(l.visible(Path::new("/tmp/it/work/sub")));
    }

    #[test]
    fn a_secret_inside_a_shown_root_is_hidden_again_after_it() {
        let mut f = test_hub();
        f.secret_dirs.push(Found::dir("/tmp/it/work/.secrets"));
        let l = layout(&f);
        let at = |p: &str| {
            l.steps
                .iter()
                .position(|s| step_path(s) == Path::new(p))
                .unwrap_or_else(|| panic!("{p} not in {:?}", l.steps))
        };
        assert!(at("/tmp/it") < at("/tmp/it/work"));
        assert!(at("/tmp/it/work") < at("/tmp/it/work/.secrets"));
        assert!(!l.visible(Path::new("/tmp/it/work/.secrets/x")));
    }

    #[test]
    fn overlays_and_read_only_paths_inside_hidden_folders_are_left_out() {
        let mut f = test_hub();
        f.overlays = vec![
            (
                "/tmp/it/task-creds/task-1/o0".into(),
                "/root/.claude.json".into(),
            ),
            (
                "/tmp/it/task-creds/task-1/o1".into(),
                "/tmp/it/x.json".into(),
            ),
        ];
        let l = layout(&f);
        let overlays: Vec<&Step> = l
            .steps
            .iter()
            .filter(|s| matches!(s, Step::Overlay { .. }))
            .collect();
        assert_eq!(
            overlays,
            [&Step::Overlay {
                copy: "/tmp/it/task-creds/task-1/o0".into(),
                original: "/root/.claude.json".into()
            }]
        );
        assert!(!l
            .read_only()
            .any(|r| r.path.starts_with("/tmp/it/manifests")));
    }

    #[test]
    fn a_writable_path_inside_a_read_only_shown_one_is_shown_again() {
        let mut f = test_hub();
        f.needed = vec![
            (Found::dir("/tmp/it/task-creds/task-1"), false),
            (Found::dir("/tmp/it/task-creds/task-1/tmp"), true),
            (Found::dir("/tmp/it/task-creds/task-1/tmp/x"), true),
        ];
        let l = layout(&f);
        let shown: Vec<(&Path, bool)> = l.shown().map(|(f, w)| (f.path.as_path(), w)).collect();
        assert_eq!(
            shown,
            [
                (Path::new("/tmp/it/task-creds/task-1"), false),
                (Path::new("/tmp/it/task-creds/task-1/tmp"), true),
            ]
        );
        assert_eq!(
            l.state(Path::new("/tmp/it/task-creds/task-1/tmp/f")),
            (true, true)
        );
        assert_eq!(
            l.state(Path::new("/tmp/it/task-creds/task-1/token")),
            (true, false)
        );
    }

    #[test]
    fn depth_and_shared_folders() {
        assert_eq!(depth(Path::new("/")), 0);
        assert_eq!(depth(Path::new("/etc/agent-hub")), 2);
        let f = Facts::default();
        assert!(!hideable(Path::new("/etc"), &f));
        assert!(hideable(Path::new("/etc/agent-hub"), &f));
        assert!(!hideable(Path::new("/var/lib"), &f));
        assert!(!hideable(Path::new("/usr/local/etc"), &f));
    }
}
