//! The token files of SPEC §6.4: the one reader every client-side command uses (it refuses a
//! file readable by group or others, or empty, and trims the trailing newline), the writer
//! (mode 600, whole or not at all, through `atomic_file`), and the lenient look the roster
//! editor takes before it removes a file. No function here puts a token in an error or a log.

use std::fmt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// Why a token file cannot be used. The `Display` text names the file and what to do about
/// it, never its content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenFileError {
    /// The file could not be read (missing, a folder, no permission): the OS's reason.
    Unreadable { path: PathBuf, reason: String },
    /// Group or others may read it (SPEC §6.4): the mode found.
    TooOpen { path: PathBuf, mode: u32 },
    /// It holds nothing but whitespace.
    Empty { path: PathBuf },
    /// Writing it failed: the OS's reason.
    Unwritable { path: PathBuf, reason: String },
}

impl fmt::Display for TokenFileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TokenFileError::Unreadable { path, reason } => {
                write!(f, "cannot read token file {}: {reason}", path.display())
            }
            TokenFileError::TooOpen { path, mode } => write!(
                f,
                "token file {} has mode {mode:03o}, readable by group or others; fix it with: chmod 600 {}",
                path.display(),
                path.display()
            ),
            TokenFileError::Empty { path } => write!(f, "token file {} is empty", path.display()),
            TokenFileError::Unwritable { path, reason } => {
                write!(f, "cannot write token file {}: {reason}", path.display())
            }
        }
    }
}

impl std::error::Error for TokenFileError {}

/// Reads a token file: refuses one readable by group or others or empty, trims trailing
/// whitespace (SPEC §6.4).
pub fn read(path: &Path) -> Result<String, TokenFileError> {
    let unreadable = |e: std::io::Error| TokenFileError::Unreadable {
        path: path.to_owned(),
        reason: e.to_string(),
    };
    let meta = std::fs::metadata(path).map_err(unreadable)?;
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(TokenFileError::TooOpen {
            path: path.to_owned(),
            mode,
        });
    }
    let text = std::fs::read_to_string(path).map_err(unreadable)?;
    let token = text.trim_end().to_owned();
    if token.trim().is_empty() {
        return Err(TokenFileError::Empty {
            path: path.to_owned(),
        });
    }
    Ok(token)
}

/// The token a file holds, trimmed as `read` trims it, whatever its mode; None when it is
/// missing or unreadable. For the roster editor, which only compares it with the roster's.
pub fn held(path: &Path) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    Some(text.trim_end().to_owned())
}

/// Writes `token` and a newline to `path`, mode 600, replacing it whole (`atomic_file`).
pub fn write(path: &Path, token: &str) -> Result<(), TokenFileError> {
    crate::atomic_file::write_atomic(path, format!("{token}\n").as_bytes(), 0o600).map_err(|e| {
        TokenFileError::Unwritable {
            path: path.to_owned(),
            reason: e.to_string(),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("ah-token-file-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn a_written_file_reads_back_and_is_private() {
        let p = temp("rw").join("tok");
        write(&p, "abc123").unwrap();
        assert_eq!(
            std::fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert_eq!(read(&p).unwrap(), "abc123");
        assert_eq!(held(&p).as_deref(), Some("abc123"));
    }

    #[test]
    fn an_open_an_empty_and_a_missing_file_are_refused_without_their_content() {
        let d = temp("bad");
        let open = d.join("open");
        std::fs::write(&open, "secret-token-value\n").unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = read(&open).unwrap_err();
        assert!(
            matches!(e, TokenFileError::TooOpen { mode: 0o644, .. }),
            "{e:?}"
        );
        assert!(!e.to_string().contains("secret-token-value"));
        assert!(e.to_string().contains("chmod 600"));
        // The roster editor still sees what it holds, to compare it.
        assert_eq!(held(&open).as_deref(), Some("secret-token-value"));

        let empty = d.join("empty");
        std::fs::write(&empty, " \n").unwrap();
        std::fs::set_permissions(&empty, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(matches!(read(&empty), Err(TokenFileError::Empty { .. })));

        let missing = d.join("missing");
        assert!(matches!(
            read(&missing),
            Err(TokenFileError::Unreadable { .. })
        ));
        assert_eq!(held(&missing), None);
    }
}
