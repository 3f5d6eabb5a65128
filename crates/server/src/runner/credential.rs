//! A task's private folder and its credential file (issue 11, "its credential lives in a
//! mode-600 file for the task's lifetime, never on an argv, removed at the end"; issue 29, "a
//! per-task folder only that task can see, never a folder shared by all tasks").
//!
//! Owns one folder per task, `<credentials_dir>/<task id>/` (mode 0700, created new), holding
//! the token file `token` (mode 0600, created new: never an existing file, never through a
//! symlink), for a headless task with the hub's MCP server its MCP config file (`write_file`,
//! the same way; issue 37 design §6), and whatever else the task's sandbox puts there (`sandbox::prepare`: the per-task
//! copies of the agent's config, a temporary folder); the whole folder is removed when the
//! value is dropped (the runner drops it when the task ends). The sandbox shows the agent its
//! own folder and none of the others'. Refuses: a credentials folder that is a symlink, not
//! ours, or open to group or others; keeping the token in memory; putting it in an error or
//! a `Debug` line.

use std::fmt;
use std::fs::{DirBuilder, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Longest token accepted (tokens are short random strings; this only stops a mistake).
pub const MAX_TOKEN_BYTES: usize = 4096;

/// The file name of the token inside a task's folder.
pub const TOKEN_FILE_NAME: &str = "token";

/// One task's private folder and, for an ACP task, its token file; removed on drop.
pub struct TaskCredential {
    dir: PathBuf,
    token: Option<PathBuf>,
}

#[derive(Debug)]
pub enum CredentialError {
    /// The file name is not `[A-Za-z0-9_-]{1,64}`.
    BadName,
    /// Empty, too long, or holds whitespace or a control character.
    BadToken,
    /// The folder cannot be used (why, in words).
    Folder(PathBuf, String),
    Io(PathBuf, std::io::Error),
}

impl fmt::Display for CredentialError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CredentialError::BadName => {
                write!(f, "a credential file name must be 1-64 of [A-Za-z0-9_-]")
            }
            CredentialError::BadToken => write!(
                f,
                "a task token must be 1-{MAX_TOKEN_BYTES} bytes without whitespace or control characters"
            ),
            CredentialError::Folder(p, why) => {
                write!(f, "credential folder {}: {why}", p.display())
            }
            CredentialError::Io(p, e) => write!(f, "credential file {}: {e}", p.display()),
        }
    }
}

impl std::error::Error for CredentialError {}

impl TaskCredential {
    /// Makes the task's folder `folder/<name>/` and writes `token` and a newline to its
    /// `token` file. The credentials folder is created with mode 0700 when missing; an
    /// existing one must be a real directory owned by this user with no group or other
    /// permissions. The task's folder must not exist yet.
    pub fn create(
        folder: &Path,
        name: &str,
        token: &str,
    ) -> Result<TaskCredential, CredentialError> {
        if token.is_empty()
            || token.len() > MAX_TOKEN_BYTES
            || token.chars().any(|c| c.is_whitespace() || c.is_control())
        {
            return Err(CredentialError::BadToken);
        }
        let mut cred = TaskCredential::folder_only(folder, name)?;
        let path = cred.dir.join(TOKEN_FILE_NAME);
        let io = |e| CredentialError::Io(path.clone(), e);
        // create_new is O_CREAT|O_EXCL: it fails on any existing entry, a symlink included,
        // so nothing another user planted is ever written through.
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .map_err(io)?;
        cred.token = Some(path.clone());
        // The umask can only take bits away; set the mode explicitly anyway.
        file.set_permissions(std::fs::Permissions::from_mode(0o600))
            .map_err(io)?;
        // No fsync: the agent reads the file through the page cache, and after a crash the
        // token is worthless (the task ends `hub_restarted`, its identity dies with the hub).
        // Syncing cost the event loop up to 8 ms per task start (docs/performance.md).
        file.write_all(token.as_bytes())
            .and_then(|()| file.write_all(b"\n"))
            .map_err(io)?;
        Ok(cred)
    }

    /// Makes the task's folder `folder/<name>/` (mode 0700, new) without a token: a headless
    /// task has no MCP server, but its sandbox still keeps its copies there.
    pub fn folder_only(folder: &Path, name: &str) -> Result<TaskCredential, CredentialError> {
        let plain = !name.is_empty()
            && name.len() <= 64
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if !plain {
            return Err(CredentialError::BadName);
        }
        private_folder(folder)?;
        let dir = folder.join(name);
        // DirBuilder::create is mkdir(2): it fails on any existing entry, a symlink included.
        DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .map_err(|e| CredentialError::Io(dir.clone(), e))?;
        Ok(TaskCredential { dir, token: None })
    }

    /// Makes sure `folder` can hold task folders: created with mode 0700 when missing, else
    /// a real directory owned by this user with no group or other permissions (startup
    /// checks it once, before the sandbox probe hides it).
    pub fn check_folder(folder: &Path) -> Result<(), CredentialError> {
        private_folder(folder)
    }

    /// Writes `text` to a new file `name` in the task's folder (mode 0600, created
    /// exclusively, as the token: never an existing entry, never through a symlink) and
    /// returns its path. For what the agent reads beside its token: a headless task's MCP
    /// config (`agent-hub mcp` as the task identity, its token file and the hub's port).
    pub fn write_file(&self, name: &str, text: &str) -> Result<PathBuf, CredentialError> {
        let plain = !name.is_empty()
            && name.len() <= 64
            && name != TOKEN_FILE_NAME
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
            && !name.starts_with('.');
        if !plain {
            return Err(CredentialError::BadName);
        }
        let path = self.dir.join(name);
        let io = |e| CredentialError::Io(path.clone(), e);
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .map_err(io)?;
        file.set_permissions(std::fs::Permissions::from_mode(0o600))
            .map_err(io)?;
        file.write_all(text.as_bytes()).map_err(io)?;
        Ok(path)
    }

    /// Where the token is: what goes on the agent's side as `--token-file`. None for a
    /// folder made without one.
    pub fn path(&self) -> Option<&Path> {
        self.token.as_deref()
    }

    /// The task's private folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for TaskCredential {
    fn drop(&mut self) {
        // Nothing to report to: a folder already gone is the goal. remove_dir_all does not
        // follow symlinks, so a link an agent left in its temporary folder removes the link.
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl fmt::Debug for TaskCredential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TaskCredential")
            .field("dir", &self.dir)
            .field("token", &self.token)
            .finish()
    }
}

fn private_folder(folder: &Path) -> Result<(), CredentialError> {
    let bad = |why: String| Err(CredentialError::Folder(folder.to_owned(), why));
    if !folder.is_absolute() {
        return bad("must be an absolute path".into());
    }
    match std::fs::symlink_metadata(folder) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(folder)
                .map_err(|e| CredentialError::Io(folder.to_owned(), e))?;
        }
        Err(e) => return Err(CredentialError::Io(folder.to_owned(), e)),
        Ok(_) => {}
    }
    let meta =
        std::fs::symlink_metadata(folder).map_err(|e| CredentialError::Io(folder.to_owned(), e))?;
    if meta.file_type().is_symlink() {
        return bad("is a symlink; give the real folder".into());
    }
    if !meta.is_dir() {
        return bad("is not a directory".into());
    }
    // SAFETY: geteuid(2) has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    if meta.uid() != me {
        return bad(format!("is owned by uid {}, not by this user", meta.uid()));
    }
    let mode = meta.mode() & 0o777;
    if mode & 0o077 != 0 {
        return bad(format!(
            "has mode {mode:03o}; it must be private: chmod 700 {}",
            folder.display()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(tag: &str) -> PathBuf {
        let p = std::env::temp_dir().join(format!("agent-hub-cred-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        p
    }

    #[test]
    fn file_is_0600_in_a_0700_folder_and_removed_on_drop() {
        let dir = temp("ok").join("tokens");
        let c = TaskCredential::create(&dir, "task-1", "tok-abcdef123456").unwrap();
        let token = c.path().unwrap().to_owned();
        assert_eq!(token, dir.join("task-1").join(TOKEN_FILE_NAME));
        let meta = std::fs::metadata(&token).unwrap();
        assert_eq!(meta.mode() & 0o777, 0o600);
        assert_eq!(std::fs::metadata(&dir).unwrap().mode() & 0o777, 0o700);
        assert_eq!(std::fs::metadata(c.dir()).unwrap().mode() & 0o777, 0o700);
        assert_eq!(
            std::fs::read_to_string(&token).unwrap(),
            "tok-abcdef123456\n"
        );
        assert!(!format!("{c:?}").contains("tok-abcdef"));
        // The hub's own reader accepts it.
        assert_eq!(
            agent_hub_host::token_file::read(&token).unwrap(),
            "tok-abcdef123456"
        );
        // The sandbox's copies go into the task's folder and leave with it.
        std::fs::write(c.dir().join("config-0"), "{}").unwrap();
        let task_dir = c.dir().to_owned();
        drop(c);
        assert!(!token.exists());
        assert!(!task_dir.exists());
        assert!(dir.exists(), "the credentials folder itself stays");
        let _ = std::fs::remove_dir_all(dir.parent().unwrap());
    }

    /// A headless task's MCP config beside its token (issue 37 design §6): mode 0600, never
    /// over an existing entry or through a planted symlink, never in place of the token, a
    /// name that is one plain file name; gone with the folder.
    #[test]
    fn a_file_beside_the_token_is_private_new_and_goes_with_the_folder() {
        let dir = temp("file").join("tokens");
        let c = TaskCredential::create(&dir, "task-2", "tok-abcdef123456").unwrap();
        let path = c.write_file("mcp.json", "{\"mcpServers\":{}}").unwrap();
        assert_eq!(path, c.dir().join("mcp.json"));
        assert_eq!(std::fs::metadata(&path).unwrap().mode() & 0o777, 0o600);
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "{\"mcpServers\":{}}"
        );
        assert!(matches!(
            c.write_file("mcp.json", "again"),
            Err(CredentialError::Io(..))
        ));
        let elsewhere = temp("file-target");
        std::os::unix::fs::symlink(&elsewhere, c.dir().join("planted.json")).unwrap();
        assert!(c.write_file("planted.json", "x").is_err());
        assert!(!elsewhere.exists(), "not written through a symlink");
        for bad in ["token", "", "../x", "a/b", ".hidden", &"n".repeat(65)] {
            assert!(
                matches!(c.write_file(bad, "x"), Err(CredentialError::BadName)),
                "{bad:?}"
            );
        }
        drop(c);
        assert!(!path.exists());
        let _ = std::fs::remove_dir_all(dir.parent().unwrap());
    }

    #[test]
    fn refuses_open_folders_symlinks_existing_files_and_bad_input() {
        let root = temp("bad");
        std::fs::create_dir_all(&root).unwrap();
        let open = root.join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o755)).unwrap();
        let e = TaskCredential::create(&open, "t", "tok-abcdef").unwrap_err();
        assert!(e.to_string().contains("mode 755"), "{e}");
        let private = root.join("private");
        DirBuilder::new().mode(0o700).create(&private).unwrap();
        let link = root.join("link");
        std::os::unix::fs::symlink(&private, &link).unwrap();
        let e = TaskCredential::create(&link, "t", "tok-abcdef").unwrap_err();
        assert!(e.to_string().contains("symlink"), "{e}");
        // A planted symlink in place of the task's folder is not written through.
        let target = root.join("target");
        std::os::unix::fs::symlink(&target, private.join("t")).unwrap();
        let e = TaskCredential::create(&private, "t", "tok-abcdef").unwrap_err();
        assert!(matches!(e, CredentialError::Io(..)), "{e}");
        assert!(!target.exists());
        // Nor a folder that is there already (another task's, or planted).
        std::fs::create_dir(private.join("taken")).unwrap();
        assert!(matches!(
            TaskCredential::create(&private, "taken", "tok-abcdef"),
            Err(CredentialError::Io(..))
        ));
        assert!(!e.to_string().contains("tok-abcdef"));
        for name in ["", "../x", "a/b", "a b"] {
            assert!(matches!(
                TaskCredential::create(&private, name, "tok"),
                Err(CredentialError::BadName)
            ));
        }
        for tok in ["", "two words", "line\nbreak"] {
            assert!(matches!(
                TaskCredential::create(&private, "u", tok),
                Err(CredentialError::BadToken)
            ));
        }
        assert!(TaskCredential::create(Path::new("rel"), "u", "tok").is_err());
        let _ = std::fs::remove_dir_all(&root);
    }
}
