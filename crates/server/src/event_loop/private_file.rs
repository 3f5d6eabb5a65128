//! The operator's private files as the loop and its startup read them (SPEC §6.1, §6.4): the
//! mode check every credential file passes (the roster, a relay key file) and the roster's
//! read, at startup and again on SIGHUP. A leaf below `startup`, `roster_reload` and
//! `relay_io`, so that none of them imports another for it. Refuses: parsing a key
//! (`relay_io::load_key`) and deciding what a new roster means (`hub::roster_reload`).

use agent_hub_proto::roster::{Roster, RosterError};
use std::fmt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// Why a credential file (the roster, a relay key file) was refused. `what` names the kind
/// of file ("roster", "relay key file").
#[derive(Debug)]
pub enum FileCheckError {
    /// Its metadata or its text could not be read.
    Unreadable {
        what: &'static str,
        path: PathBuf,
        error: std::io::Error,
    },
    /// Group or others may read or write it.
    NotPrivate {
        what: &'static str,
        path: PathBuf,
        mode: u32,
    },
    /// The roster's text is not a valid roster.
    Roster(RosterError),
}

impl fmt::Display for FileCheckError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FileCheckError::Unreadable { what, path, error } => {
                write!(f, "cannot read {what} {}: {error}", path.display())
            }
            FileCheckError::NotPrivate { what, path, mode } => write!(
                f,
                "{what} {} has mode {mode:03o}, readable or writable by group or others; fix it with: chmod 600 {}",
                path.display(),
                path.display()
            ),
            FileCheckError::Roster(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for FileCheckError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            FileCheckError::Unreadable { error, .. } => Some(error),
            FileCheckError::NotPrivate { .. } => None,
            FileCheckError::Roster(e) => Some(e),
        }
    }
}

/// Refuses a credential file that group or others may read or write.
pub fn check_private(path: &Path, what: &'static str) -> Result<(), FileCheckError> {
    let meta = std::fs::metadata(path).map_err(|error| FileCheckError::Unreadable {
        what,
        path: path.to_owned(),
        error,
    })?;
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(FileCheckError::NotPrivate {
            what,
            path: path.to_owned(),
            mode,
        });
    }
    Ok(())
}

/// Reads, checks and parses the roster file (SPEC §6.1, §6.4): at startup, and again on
/// SIGHUP. The error names the file and what to fix, never a token.
pub fn read_roster(path: &Path) -> Result<Roster, FileCheckError> {
    check_private(path, "roster")?;
    let text = std::fs::read_to_string(path).map_err(|error| FileCheckError::Unreadable {
        what: "roster",
        path: path.to_owned(),
        error,
    })?;
    Roster::parse(&text).map_err(FileCheckError::Roster)
}
