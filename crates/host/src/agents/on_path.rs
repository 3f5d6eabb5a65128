//! Finding a program on a PATH, the one way `agent-hub agents`, the task runner's rule
//! (`runnable`) and the sandbox's probe for `bwrap` all do it.
//!
//! Owns `which`. Refuses: empty and relative PATH entries (an empty one would mean the current
//! directory), so a repository cannot plant an "agent" that we then run.

use std::path::{Path, PathBuf};

/// The first executable file named `name` in `path_var`'s directories; `name` itself when it
/// is an absolute path to an executable file.
pub fn which(name: &str, path_var: &str) -> Option<PathBuf> {
    if name.starts_with('/') {
        return is_executable(Path::new(name)).then(|| PathBuf::from(name));
    }
    path_var
        .split(':')
        .filter(|d| d.starts_with('/'))
        .map(|d| Path::new(d).join(name))
        .find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::which;

    #[test]
    fn which_skips_relative_path_entries() {
        // "sh" exists in /bin or /usr/bin everywhere this runs.
        assert!(which("sh", "/usr/bin:/bin").is_some());
        assert!(which("sh", ":.:bin").is_none());
        assert!(which("definitely-not-a-binary-x9", "/usr/bin:/bin").is_none());
    }
}
