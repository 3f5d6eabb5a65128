//! The set of known agents: the built-in manifests, then the manifests folder's overrides and
//! additions (`--agents-dir`, default `~/.agent-hub/agents/`).
//!
//! Owns reading that folder. A file there named `<name>.toml` replaces the built-in of the same
//! name whole (no merging: what the file says is what the agent is) or adds a new agent. An
//! invalid file is reported with its path and key and skipped — the built-in it meant to
//! replace stays — and never stops the others from loading.

use super::manifest::{self, Manifest, ManifestError};
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

impl Registry {
    /// The built-ins only.
    pub fn builtin() -> Registry {
        let (ok, problems) = manifest::builtins();
        Registry {
            agents: ok.into_iter().map(|m| (m, Origin::Builtin)).collect(),
            problems,
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
                return reg;
            }
        };
        let mut files: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "toml"))
            .collect();
        files.sort();
        for path in files {
            let source = path.display().to_string();
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
        let builtins = reg
            .agents
            .iter()
            .take_while(|(_, o)| !matches!(o, Origin::File(_)))
            .count();
        reg.agents[builtins..].sort_by(|a, b| a.0.name.cmp(&b.0.name));
        reg
    }

    /// The built-ins, then `user_dir`'s manifests (`load`), then `extra`'s (the server's
    /// `tasks.manifests_dir`, an explicitly named folder: missing is a problem): the later
    /// folder replaces an agent of the same name whole, as a file replaces a built-in.
    pub fn load_with_extra(user_dir: &Path, user_explicit: bool, extra: Option<&Path>) -> Registry {
        let mut reg = Registry::load(user_dir, user_explicit);
        let Some(extra) = extra else {
            return reg;
        };
        let more = Registry::load(extra, true);
        reg.problems.extend(more.problems);
        let mut added = Vec::new();
        for (m, origin) in more.agents {
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
        let builtins = reg
            .agents
            .iter()
            .take_while(|(_, o)| !matches!(o, Origin::File(_)))
            .count();
        reg.agents[builtins..].sort_by(|a, b| a.0.name.cmp(&b.0.name));
        reg
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
