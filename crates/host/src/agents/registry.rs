//! The set of known agents: the built-in manifests, then the manifests folder's overrides and
//! additions (`--agents-dir`, default `~/.agent-hub/agents/`).
//!
//! Owns reading that folder. A file there named `<name>.toml` replaces the built-in of the same
//! name whole (no merging: what the file says is what the agent is) or adds a new agent. An
//! invalid file is reported with its path and key and skipped — the built-in it meant to
//! replace stays — and never stops the others from loading.
//!
//! A manifest says what the hub executes, so it gets the check the roster and the relay keys
//! get (issue 29): a folder or file that another user could change (not owned by this user
//! or root, or writable by group or others) is refused, with the `chmod`/`chown` that fixes
//! it, and so is every agent it names: such a file does not fall back to the built-in of its
//! name either, since the operator meant to replace it, and a task naming it is refused as
//! an unknown agent until the file is fixed.

use super::manifest::{self, Manifest, ManifestError};
use std::fmt;
use std::path::{Path, PathBuf};

/// Where a manifest came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    Builtin,
    /// The file that added it.
    File(PathBuf),
    /// The file that replaced the built-in of the same name.
    Override(PathBuf),
}

/// The agents this run knows, and every manifest problem found while loading them.
#[derive(Debug, Default)]
pub struct Registry {
    /// Built-ins first in their fixed order, then additions sorted by name.
    pub agents: Vec<(Manifest, Origin)>,
    pub problems: Vec<ManifestError>,
    /// Names whose manifest file was refused for its owner or mode: no agent by that name
    /// is run, whichever folder would supply one.
    pub refused: Vec<String>,
    /// Folders that could not be read, or were refused whole for their owner or mode: none
    /// of their files is in `agents`. A running hub keeps the catalogue it has rather than
    /// take one read without them (`agents::reload`).
    pub failed_folders: Vec<PathBuf>,
}

/// The default manifests folder under `home`.
pub fn default_dir(home: &Path) -> PathBuf {
    home.join(".agent-hub").join("agents")
}

/// The environment variable that names the user's manifests folder instead of the default
/// (read by the server and by the `agents`/`install` verbs alike, so both find the same set).
pub const AGENTS_DIR_ENV: &str = "AGENT_HUB_AGENTS_DIR";

/// The user's manifests folder: `$AGENT_HUB_AGENTS_DIR` when set (the caller reads it and
/// passes it in), else `default_dir(home)`.
pub fn user_dir(home: &Path, env_value: Option<std::ffi::OsString>) -> PathBuf {
    env_value
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| default_dir(home))
}

/// Where one catalogue is read from, in order of precedence (the later replaces an agent of
/// the same name whole): the built-ins, the user's folder, a hub's `tasks.manifests_dir`.
///
/// The hub and `agent-hub agents --config <the hub's config>` both build their catalogue
/// through this one type, from the same environment variables, so that what `agents` lists
/// as able to take delegated work is what `delegate` accepts (issue 35). Built once, from
/// the environment read at the start of the process (`Sources::new`), and kept: the hub
/// reads the same folders again on SIGHUP without looking at its environment again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sources {
    /// The user's folder (`user_dir`); None when there is neither `$AGENT_HUB_AGENTS_DIR`
    /// nor an absolute `$HOME`: then there is no user folder, rather than one relative to
    /// wherever the process happens to run.
    pub user_dir: Option<PathBuf>,
    /// The user's folder was named on purpose (`agents --agents-dir`): missing is reported.
    pub user_explicit: bool,
    /// The hub config's `tasks.manifests_dir` (always explicit: missing is reported).
    pub extra_dir: Option<PathBuf>,
}

impl Sources {
    /// The folders for `home` (`$HOME`) and `agents_dir_env` (`$AGENT_HUB_AGENTS_DIR`) as the
    /// caller read them, plus a hub's `extra_dir`.
    pub fn new(
        home: Option<&Path>,
        agents_dir_env: Option<std::ffi::OsString>,
        extra_dir: Option<PathBuf>,
    ) -> Sources {
        let user_dir = match home.filter(|h| h.is_absolute()) {
            Some(home) => Some(user_dir(home, agents_dir_env)),
            None => agents_dir_env.filter(|v| !v.is_empty()).map(PathBuf::from),
        };
        Sources {
            user_dir,
            user_explicit: false,
            extra_dir,
        }
    }

    /// Reads the catalogue: the built-ins, then each folder (`Registry::load_with_extra`).
    pub fn load(&self) -> Registry {
        match &self.user_dir {
            Some(dir) => {
                Registry::load_with_extra(dir, self.user_explicit, self.extra_dir.as_deref())
            }
            None => match &self.extra_dir {
                Some(extra) => Registry::builtin().merge(Registry::load(extra, true)),
                None => Registry::builtin(),
            },
        }
    }
}

/// Why a manifest folder or file is refused. `what` names it in the message ("manifests
/// folder", "manifest file").
#[derive(Debug)]
pub enum OwnerModeError {
    /// Its metadata could not be read.
    Unreadable {
        what: &'static str,
        source: std::io::Error,
    },
    /// Owned by `uid`, neither this user (`me`) nor root.
    NotOwner {
        what: &'static str,
        path: PathBuf,
        uid: u32,
        me: u32,
    },
    /// Writable by group or others: the mode found.
    Writable {
        what: &'static str,
        path: PathBuf,
        mode: u32,
    },
}

impl fmt::Display for OwnerModeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OwnerModeError::Unreadable { what, source } => {
                write!(f, "cannot read the {what}: {source}")
            }
            OwnerModeError::NotOwner { what, path, uid, me } => write!(
                f,
                "refused: the {what} is owned by uid {uid}, not by this user (uid {me}) or root, and the hub runs what it says; fix it with: chown {me} {}",
                path.display()
            ),
            OwnerModeError::Writable { what, path, mode } => write!(
                f,
                "refused: the {what} has mode {mode:03o}, writable by group or others, and the hub runs what it says; fix it with: chmod go-w {}",
                path.display()
            ),
        }
    }
}

impl std::error::Error for OwnerModeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            OwnerModeError::Unreadable { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// Refuses a manifest folder or file that someone other than this user (or root, who can
/// replace the hub itself) could change: the hub would run what they wrote.
pub fn check_owner_mode(path: &Path, what: &'static str) -> Result<(), OwnerModeError> {
    use std::os::unix::fs::MetadataExt;
    let meta =
        std::fs::metadata(path).map_err(|source| OwnerModeError::Unreadable { what, source })?;
    // SAFETY: geteuid(2) has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    if meta.uid() != me && meta.uid() != 0 {
        return Err(OwnerModeError::NotOwner {
            what,
            path: path.to_owned(),
            uid: meta.uid(),
            me,
        });
    }
    let mode = meta.mode() & 0o777;
    if mode & 0o022 != 0 {
        return Err(OwnerModeError::Writable {
            what,
            path: path.to_owned(),
            mode,
        });
    }
    Ok(())
}

impl Registry {
    /// The built-ins only.
    pub fn builtin() -> Registry {
        let (ok, problems) = manifest::builtins();
        Registry {
            agents: ok.into_iter().map(|m| (m, Origin::Builtin)).collect(),
            problems,
            refused: Vec::new(),
            failed_folders: Vec::new(),
        }
    }

    /// The built-ins plus `dir`'s `*.toml` files. A missing folder is not a problem when it
    /// is the default (`explicit` false); an explicitly named one that is missing is reported.
    pub fn load(dir: &Path, explicit: bool) -> Registry {
        let mut reg = Registry::builtin();
        let entries = match std::fs::read_dir(dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !explicit => return reg,
            Err(e) => {
                reg.problems.push(ManifestError {
                    source: dir.display().to_string(),
                    key: String::new(),
                    problem: format!("cannot read the manifests folder: {e}"),
                });
                reg.failed_folders.push(dir.to_owned());
                return reg;
            }
        };
        let mut files: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "toml"))
            .collect();
        files.sort();
        if let Err(why) = check_owner_mode(dir, "manifests folder") {
            // Every file there is refused, and the built-ins they name with them.
            for path in &files {
                reg.refuse(path);
            }
            reg.problems.push(ManifestError {
                source: dir.display().to_string(),
                key: String::new(),
                problem: format!("{why}; none of its manifests is used"),
            });
            reg.failed_folders.push(dir.to_owned());
            return reg;
        }
        for path in files {
            let source = path.display().to_string();
            if let Err(why) = check_owner_mode(&path, "manifest file") {
                reg.refuse(&path);
                let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("");
                reg.problems.push(ManifestError {
                    source,
                    key: String::new(),
                    problem: format!("{why}; agent {stem:?} is unavailable until then"),
                });
                continue;
            }
            let text = match std::fs::read_to_string(&path) {
                Ok(t) => t,
                Err(e) => {
                    reg.problems.push(ManifestError {
                        source,
                        key: String::new(),
                        problem: format!("cannot read: {e}"),
                    });
                    continue;
                }
            };
            match Manifest::parse(&source, &text) {
                Ok(m) => {
                    // One name, one file: two files can then never claim the same agent.
                    let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("");
                    if stem != m.name {
                        reg.problems.push(ManifestError {
                            source,
                            key: "name".into(),
                            problem: format!(
                                "{:?} does not match the file name; name the file {}.toml",
                                m.name, m.name
                            ),
                        });
                        continue;
                    }
                    reg.add(m, path);
                }
                Err(e) => reg.problems.push(e),
            }
        }
        reg.sort_additions();
        reg
    }

    /// The built-ins, then `user_dir`'s manifests (`load`), then `extra`'s (the server's
    /// `tasks.manifests_dir`, an explicitly named folder: missing is a problem): the later
    /// folder replaces an agent of the same name whole, as a file replaces a built-in.
    pub fn load_with_extra(user_dir: &Path, user_explicit: bool, extra: Option<&Path>) -> Registry {
        let reg = Registry::load(user_dir, user_explicit);
        match extra {
            Some(extra) => reg.merge(Registry::load(extra, true)),
            None => reg,
        }
    }

    /// `more` (a later folder's catalogue, read with `load`) laid over this one: its refused
    /// names are taken out, its files replace agents of the same name whole or add to them.
    fn merge(mut self, more: Registry) -> Registry {
        let reg = &mut self;
        reg.problems.extend(more.problems);
        reg.failed_folders.extend(more.failed_folders);
        for name in &more.refused {
            reg.agents.retain(|(m, _)| &m.name != name);
            if !reg.refused.contains(name) {
                reg.refused.push(name.clone());
            }
        }
        let mut added = Vec::new();
        for (m, origin) in more.agents {
            if reg.refused.contains(&m.name) {
                continue;
            }
            let path = match origin {
                Origin::Builtin => continue,
                Origin::File(p) | Origin::Override(p) => p,
            };
            let builtin = reg
                .agents
                .iter()
                .any(|(a, o)| a.name == m.name && !matches!(o, Origin::File(_)));
            match reg.agents.iter_mut().find(|(a, _)| a.name == m.name) {
                Some(slot) => {
                    *slot = (
                        m,
                        if builtin {
                            Origin::Override(path)
                        } else {
                            Origin::File(path)
                        },
                    )
                }
                None => added.push((m, Origin::File(path))),
            }
        }
        reg.agents.extend(added);
        reg.sort_additions();
        self
    }

    /// Built-ins (and their overrides) first in their fixed order, additions by name.
    pub(crate) fn sort_additions(&mut self) {
        let builtins = self
            .agents
            .iter()
            .take_while(|(_, o)| !matches!(o, Origin::File(_)))
            .count();
        self.agents[builtins..].sort_by(|a, b| a.0.name.cmp(&b.0.name));
    }

    /// Takes the agent `path`'s name names out of the catalogue (a built-in included), so
    /// nothing runs under that name; `refused` remembers it against a later folder adding it.
    fn refuse(&mut self, path: &Path) {
        if let Some(stem) = path.file_stem().and_then(|s| s.to_str()) {
            self.agents.retain(|(m, _)| m.name != stem);
            if !self.refused.iter().any(|r| r == stem) {
                self.refused.push(stem.to_owned());
            }
        }
    }

    fn add(&mut self, m: Manifest, path: PathBuf) {
        match self.agents.iter_mut().find(|(a, _)| a.name == m.name) {
            Some(slot) => *slot = (m, Origin::Override(path)),
            None => self.agents.push((m, Origin::File(path))),
        }
    }

    pub fn get(&self, name: &str) -> Option<&Manifest> {
        self.agents
            .iter()
            .find(|(m, _)| m.name == name)
            .map(|(m, _)| m)
    }

    pub fn manifests(&self) -> impl Iterator<Item = &Manifest> {
        self.agents.iter().map(|(m, _)| m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn temp(tag: &str) -> PathBuf {
        let p = std::env::temp_dir().join(format!("agent-hub-reg-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        p
    }

    fn manifest(name: &str) -> String {
        format!(
            "name = \"{name}\"\ndisplay = \"X\"\nbinaries = [\"x\"]\n[observe]\nsessions = \"none\"\ntranscript = \"none\"\n[run]\nacp = [\"/bin/true\"]\nheadless = []\noutcome = \"exit-code\"\n[deliver]\nmode = \"pull\"\n[install]\nmcp_config = \"\"\nhook = \"none\"\nskills_dir = \"\"\n"
        )
    }

    /// A world-writable manifest is refused, says why and how to fix it, and takes its name
    /// out of the catalogue: the built-in `claude` it meant to replace does not run either.
    #[test]
    fn a_world_writable_manifest_is_refused_and_its_name_runs_nothing() {
        let dir = temp("ww");
        for (name, mode) in [("claude", 0o666), ("mine", 0o644), ("open", 0o646)] {
            let p = dir.join(format!("{name}.toml"));
            std::fs::write(&p, manifest(name)).unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        }
        let reg = Registry::load(&dir, true);
        assert!(reg.get("mine").is_some(), "a private file loads");
        assert!(reg.get("claude").is_none(), "no fallback to the built-in");
        assert!(reg.get("open").is_none());
        assert!(reg.get("codex").is_some(), "other built-ins stay");
        let shown: Vec<String> = reg.problems.iter().map(|p| p.to_string()).collect();
        let claude = shown.iter().find(|p| p.contains("claude.toml")).unwrap();
        assert!(
            claude.contains("mode 666") && claude.contains("chmod go-w"),
            "{claude}"
        );
        assert!(shown
            .iter()
            .any(|p| p.contains("open.toml") && p.contains("mode 646")));
        // The same through the server's extra folder.
        let reg = Registry::load_with_extra(&temp("ww-user"), false, Some(&dir));
        assert!(reg.get("claude").is_none() && reg.get("open").is_none());
        assert!(reg.get("mine").is_some());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_group_writable_manifests_folder_is_refused_whole() {
        let dir = temp("gw");
        std::fs::write(dir.join("codex.toml"), manifest("codex")).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o775)).unwrap();
        let reg = Registry::load(&dir, true);
        assert!(reg.get("codex").is_none());
        assert!(reg.get("claude").is_some());
        assert!(
            reg.problems[0].to_string().contains("mode 775"),
            "{}",
            reg.problems[0]
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The one rule the hub and `agents --config` share (issue 35): the variable, else an
    /// absolute HOME's default folder, else no user folder at all (never a relative one).
    #[test]
    fn sources_take_the_variable_then_an_absolute_home_then_nothing() {
        let extra = Some(PathBuf::from("/srv/hub/manifests"));
        let s = Sources::new(Some(Path::new("/home/u")), Some("/m".into()), extra.clone());
        assert_eq!(s.user_dir, Some(PathBuf::from("/m")));
        assert_eq!(s.extra_dir, extra);
        assert!(!s.user_explicit);
        let s = Sources::new(Some(Path::new("/home/u")), Some("".into()), None);
        assert_eq!(s.user_dir, Some(PathBuf::from("/home/u/.agent-hub/agents")));
        for home in [None, Some(Path::new("")), Some(Path::new("rel/home"))] {
            assert_eq!(Sources::new(home, None, None).user_dir, None, "{home:?}");
        }
        // Without a user folder: the built-ins and the hub's folder.
        let dir = temp("src-extra");
        std::fs::write(dir.join("mine.toml"), manifest("mine")).unwrap();
        std::fs::set_permissions(
            dir.join("mine.toml"),
            std::fs::Permissions::from_mode(0o644),
        )
        .unwrap();
        let reg = Sources::new(None, None, Some(dir.clone())).load();
        assert!(reg.get("mine").is_some() && reg.get("claude").is_some());
        assert!(reg.problems.is_empty(), "{:?}", reg.problems);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_user_folder_follows_the_environment_variable_when_set() {
        let home = Path::new("/home/u");
        assert_eq!(
            user_dir(home, None),
            PathBuf::from("/home/u/.agent-hub/agents")
        );
        assert_eq!(
            user_dir(home, Some("".into())),
            PathBuf::from("/home/u/.agent-hub/agents"),
            "an empty value is no value"
        );
        assert_eq!(
            user_dir(home, Some("/srv/manifests".into())),
            PathBuf::from("/srv/manifests")
        );
    }
}
