//! The install's file primitives, a leaf both `apply` (the plan carried out) and `state` (the
//! install record) use: reading a config that may be missing, writing one whole through a
//! symlink to its target. Its own file so that `apply` and `state` do not import each other in
//! a circle (issue 36).

use std::io;
use std::path::{Path, PathBuf};

/// Reads a file for `plan`: `Ok(None)` when it does not exist.
pub fn read_file(path: &Path) -> io::Result<Option<String>> {
    match std::fs::read(path) {
        Ok(bytes) => String::from_utf8(bytes)
            .map(Some)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "not UTF-8 text")),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// A symlinked config (dotfile managers do this) is written through to its target, so the
/// link survives.
pub(super) fn resolve(path: &Path) -> PathBuf {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => {
            std::fs::canonicalize(path).unwrap_or_else(|_| path.to_owned())
        }
        _ => path.to_owned(),
    }
}

/// Replaces a config whole through `atomic_file` (fsync of the file and its folder): through
/// a symlink to its target, creating its folder, keeping `mode` (new files are 600).
pub(super) fn write_atomic(path: &Path, text: &str, mode: Option<u32>) -> io::Result<()> {
    let target = resolve(path);
    if let Some(dir) = target.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    crate::atomic_file::write_atomic(&target, text.as_bytes(), mode.unwrap_or(0o600))
}
