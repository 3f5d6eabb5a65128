//! Tokens for the roster (SPEC §6): 32 bytes from the kernel's random source as 64 hex
//! digits, and the private folder that holds their files (mode 700; SPEC §6.4); the files
//! themselves are read and written by `agent_hub_host::token_file`.
//! Owns nothing else; no function here returns a token in an error or prints one.

use std::fmt;
use std::io::Read;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Why a token could not be made or its folder readied: the OS's error, and the folder.
#[derive(Debug)]
pub enum TokenError {
    /// /dev/urandom could not be opened or read.
    Random(std::io::Error),
    /// The private folder could not be created.
    CreateDir {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The new folder could not be given mode 700.
    MakePrivate {
        path: PathBuf,
        source: std::io::Error,
    },
}

impl fmt::Display for TokenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TokenError::Random(e) => {
                write!(f, "cannot read random bytes from /dev/urandom: {e}")
            }
            TokenError::CreateDir { path, source } => {
                write!(f, "cannot create {}: {source}", path.display())
            }
            TokenError::MakePrivate { path, source } => {
                write!(f, "cannot make {} private: {source}", path.display())
            }
        }
    }
}

impl std::error::Error for TokenError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            TokenError::Random(e)
            | TokenError::CreateDir { source: e, .. }
            | TokenError::MakePrivate { source: e, .. } => Some(e),
        }
    }
}

/// A new token: 256 bits from /dev/urandom, hex.
pub fn random_token() -> Result<String, TokenError> {
    let mut key = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut key))
        .map_err(TokenError::Random)?;
    Ok(key.iter().map(|b| format!("{b:02x}")).collect())
}

/// Creates `dir` (mode 700) when missing. An existing folder is left as it is.
pub fn private_dir(dir: &Path) -> Result<(), TokenError> {
    if dir.is_dir() {
        return Ok(());
    }
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|source| TokenError::CreateDir {
            path: dir.to_path_buf(),
            source,
        })?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(|source| {
        TokenError::MakePrivate {
            path: dir.to_path_buf(),
            source,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_64_hex_digits_and_differ() {
        let a = random_token().unwrap();
        let b = random_token().unwrap();
        assert_eq!(a.len(), 64);
        assert!(a.chars().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }
}
