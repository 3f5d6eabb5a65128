//! The server config (SPEC §7): strict TOML, every key required, unknown keys fatal, no runtime
//! defaults. Relative paths resolve against the config file's directory.
//!
//! Owns parsing and validation of config text into `Config`. Refuses IO except reading the
//! file in `Config::load`. Each table has its own file: `limits.rs` ([limits]), `store.rs`
//! ([store]), `relay.rs` ([relay] and its peers), `tasks.rs` ([tasks]), `leases.rs`
//! ([leases]); `bounds.rs` holds the
//! upper bound of every value. Their public items are re-exported here, so
//! `crate::config::Limits` and the rest resolve as they did before the split.

pub mod bounds;
mod leases;
mod limits;
mod relay;
mod store;
pub mod tasks;

pub use limits::{
    to_toml as limits_to_toml, Limits, DEFAULT_ANSWER_LINGER_MS, DEFAULT_CONNECTION_SHARE_DIVISOR,
    DEFAULT_IDEMPOTENCY_MAX_BYTES, DEFAULT_MAX_DELIVERIES, DEFAULT_MAX_STATUS_WAITS,
    DEFAULT_SERVICE_LOG_FLUSH_MS, DEFAULT_STORE_BACKLOG_MAX_BYTES, IDEMPOTENCY_BYTES_RANGE,
    MAX_MAX_DELIVERIES, MAX_SERVICE_LOG_FLUSH_MS, STORE_BACKLOG_BYTES_RANGE,
};
pub use relay::{
    valid_peer_id, PeerConfig, RelayConfig, RelayLimits, DEFAULT_FORWARD_WINDOW,
    MAX_PEER_AGENTS_BOUND, MAX_PEER_DIRECTORY_BYTES_BOUND, MAX_RELAY_CONNECTIONS_BOUND,
    RELAY_FEATURES,
};
pub use store::{StoreConfig, SyncPolicy};

use relay::RawRelay;
use serde::Deserialize;
use std::fmt;
use std::path::{Path, PathBuf};
use store::RawStore;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    port: u16,
    audit_log_path: PathBuf,
    service_log_path: PathBuf,
    roster_path: PathBuf,
    store: RawStore,
    limits: Limits,
    #[serde(default)]
    relay: Option<RawRelay>,
    /// Optional: absent, delegation is off (config/tasks.rs).
    #[serde(default)]
    tasks: Option<tasks::RawTasks>,
    /// Optional: roster names whose `who` and `activity` show everything (SPEC §14).
    #[serde(default)]
    operators: Vec<String>,
    /// Optional: the leases' TTLs, caps and guard (config/leases.rs); absent, the defaults.
    #[serde(default)]
    leases: Option<leases::RawLeases>,
}

/// A validated config with absolute paths.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// TCP port on 127.0.0.1; 0 asks the kernel for a free one (tests, demos).
    pub port: u16,
    pub audit_log_path: PathBuf,
    pub service_log_path: PathBuf,
    pub roster_path: PathBuf,
    pub store: StoreConfig,
    pub limits: Limits,
    /// None: no relay (this hub links with no other machine).
    pub relay: Option<RelayConfig>,
    /// None: delegated tasks are off (the `[tasks]` table is absent).
    pub tasks: Option<tasks::TasksConfig>,
    /// Roster names that get the operator's view of `who` and `activity`: every agent's
    /// parked filters, every recent envelope, every unfinished task (SPEC §14 "Visibility").
    /// Anyone else sees those of its own only. Empty when the key is absent.
    pub operators: Vec<String>,
    /// The `[leases]` table (issue 39, docs/leases.md); its defaults when absent.
    pub leases: agent_hub_proto::hub::leases::LeaseConfig,
}

/// Names `operators` may list at most.
pub const MAX_OPERATORS: usize = 256;

/// `operators`: at most `MAX_OPERATORS` names, each a possible roster name (not blank, at
/// most 256 bytes, printable, not `hub`, not in the task namespace), none twice. Whether each
/// is on the roster is not checked: the roster is read later and reloaded on SIGHUP, and a
/// name that is not on it simply never authenticates.
fn check_operators(names: &[String]) -> Result<(), ConfigError> {
    if names.len() > MAX_OPERATORS {
        return Err(ConfigError::Invalid(format!(
            "operators lists {} names, more than {MAX_OPERATORS}",
            names.len()
        )));
    }
    for (i, n) in names.iter().enumerate() {
        let bad = |why: &str| ConfigError::Invalid(format!("operators[{i}] {why}"));
        if n.trim().is_empty() {
            return Err(bad("is blank"));
        }
        if n.len() > agent_hub_proto::wire::envelope::MAX_NAME_BYTES
            || agent_hub_proto::kernel::text::has_unsafe(n)
        {
            return Err(bad(
                "is not a roster name (at most 256 bytes, no control or formatting characters)",
            ));
        }
        if agent_hub_proto::kernel::names::is_reserved(n) {
            return Err(bad("names the hub or a task identity, never an operator"));
        }
        if names[..i].contains(n) {
            return Err(bad("is listed twice"));
        }
    }
    Ok(())
}

#[derive(Debug)]
pub enum ConfigError {
    Read(PathBuf, std::io::Error),
    Toml(String),
    Invalid(String),
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::Read(p, e) => write!(f, "cannot read config {}: {e}", p.display()),
            ConfigError::Toml(e) => write!(f, "config is invalid: {e}"),
            ConfigError::Invalid(e) => write!(f, "config is invalid: {e}"),
        }
    }
}

impl std::error::Error for ConfigError {}

impl Config {
    /// Reads and validates the config at `path`.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text =
            std::fs::read_to_string(path).map_err(|e| ConfigError::Read(path.to_owned(), e))?;
        let base = path.parent().map(Path::to_path_buf).unwrap_or_default();
        let base = if base.as_os_str().is_empty() {
            PathBuf::from(".")
        } else {
            base
        };
        let base = std::fs::canonicalize(&base).unwrap_or(base);
        Config::parse(&text, &base)
    }

    /// Parses config text; relative paths are joined onto `base`.
    pub fn parse(text: &str, base: &Path) -> Result<Config, ConfigError> {
        let raw: RawConfig =
            toml::from_str(text).map_err(|e| ConfigError::Toml(e.message().trim().to_owned()))?;
        limits::validate(&raw.limits)?;
        check_operators(&raw.operators)?;
        let resolve = |key: &str, p: PathBuf| -> Result<PathBuf, ConfigError> {
            if p.as_os_str().is_empty() {
                return Err(ConfigError::Invalid(format!("{key} must not be empty")));
            }
            Ok(if p.is_absolute() { p } else { base.join(p) })
        };
        let store = store::store_config(raw.store, &resolve)?;
        let relay = match raw.relay {
            None => None,
            Some(r) => Some(relay::relay_config(r, &resolve)?),
        };
        let tasks = raw.tasks.map(tasks::from_raw).transpose()?;
        let leases = leases::from_raw(raw.leases)?;
        // A peer allowed to delegate needs somewhere for its tasks to run.
        if let (Some(r), None) = (&relay, &tasks) {
            if let Some(p) = r.peers.iter().find(|p| p.delegate) {
                return Err(ConfigError::Invalid(format!(
                    "relay.peers {:?} sets delegate = true, but there is no [tasks] table to run its tasks",
                    p.id
                )));
            }
        }
        Ok(Config {
            port: raw.port,
            relay,
            store,
            audit_log_path: resolve("audit_log_path", raw.audit_log_path)?,
            service_log_path: resolve("service_log_path", raw.service_log_path)?,
            roster_path: resolve("roster_path", raw.roster_path)?,
            limits: raw.limits,
            tasks,
            operators: raw.operators,
            leases,
        })
    }
}

#[cfg(test)]
mod tests;
