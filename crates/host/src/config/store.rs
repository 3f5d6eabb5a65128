//! The `[store]` table (SPEC §12.1; docs/operations.md "The durable store"): where queues
//! live, in memory or in a SQLite database, and when a commit reaches the disk.
//!
//! Owns the raw TOML form and its validation into `StoreConfig`. Refuses: a kind other than
//! "memory" or "sqlite", sqlite keys on a memory store, a sqlite store missing one of them,
//! a `max_bytes` outside its bound.

use super::{bounds, ConfigError};
use serde::Deserialize;
use std::path::PathBuf;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawStore {
    kind: String,
    path: Option<PathBuf>,
    max_bytes: Option<u64>,
    sync: Option<String>,
}

/// When a SQLite commit reaches the disk (SPEC §12.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncPolicy {
    /// Every commit is flushed to disk (`fdatasync` of the WAL, on the store's flush thread)
    /// before `accepted` or `acked` is answered; survives power loss.
    Full,
    /// `synchronous=NORMAL` (WAL): commits reach the OS before `accepted` and the disk at
    /// checkpoints; survives a crash of the hub, not of the machine.
    Normal,
}

/// Where queues live (SPEC §12.1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreConfig {
    /// In the process only: a restart empties every queue (the 004 behaviour).
    Memory,
    /// In a SQLite database at `path`, at most `max_bytes` large.
    Sqlite {
        path: PathBuf,
        max_bytes: u64,
        sync: SyncPolicy,
    },
}

/// Validates the `[store]` table; `resolve` makes a path absolute.
pub(super) fn store_config(
    raw: RawStore,
    resolve: &dyn Fn(&str, PathBuf) -> Result<PathBuf, ConfigError>,
) -> Result<StoreConfig, ConfigError> {
    Ok(
        match (raw.kind.as_str(), raw.path, raw.max_bytes, raw.sync) {
            ("memory", None, None, None) => StoreConfig::Memory,
            ("memory", _, _, _) => {
                return Err(ConfigError::Invalid(
                    "store.path, store.max_bytes and store.sync are only for kind = \"sqlite\""
                        .into(),
                ))
            }
            ("sqlite", Some(path), Some(max_bytes), Some(sync)) => {
                let sync = match sync.as_str() {
                    "full" => SyncPolicy::Full,
                    "normal" => SyncPolicy::Normal,
                    other => {
                        return Err(ConfigError::Invalid(format!(
                            "store.sync {other:?} is not \"full\" or \"normal\""
                        )))
                    }
                };
                bounds::check(
                    "store.max_bytes",
                    max_bytes,
                    bounds::MIN_STORE_BYTES,
                    bounds::MAX_STORE_BYTES,
                    bounds::Unit::Bytes,
                )?;
                StoreConfig::Sqlite {
                    path: resolve("store.path", path)?,
                    max_bytes,
                    sync,
                }
            }
            ("sqlite", _, _, _) => {
                return Err(ConfigError::Invalid(
                    "store kind \"sqlite\" needs store.path, store.max_bytes and store.sync".into(),
                ))
            }
            (other, _, _, _) => {
                return Err(ConfigError::Invalid(format!(
                    "store.kind {other:?} is not \"memory\" or \"sqlite\""
                )))
            }
        },
    )
}
