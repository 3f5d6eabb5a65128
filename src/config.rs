//! The server config (SPEC §7): strict TOML, every key required, unknown keys fatal, no runtime
//! defaults. Relative paths resolve against the config file's directory.
//!
//! Owns parsing and validation of config text into `Config`. Refuses IO except reading the
//! file in `Config::load`.

pub mod bounds;
pub mod tasks;

use serde::Deserialize;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The hub's limits. Every one is explicit in the config file; `config.example.toml` carries
/// the recommended values.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// Longest accepted line, not counting its `\n`.
    pub max_line_bytes: usize,
    /// Open client connections at once; beyond it a connection gets an error line and is closed.
    pub max_connections: usize,
    /// Deadline for the hello line, from accept.
    pub hello_timeout_ms: u64,
    /// Deadline for the verb line, from the `ok` line.
    pub verb_timeout_ms: u64,
    /// Deadline for a reply or delivery to be taken in full by the peer's socket.
    pub write_timeout_ms: u64,
    /// Envelopes queued for one agent at most.
    pub queue_max_envelopes: usize,
    /// Bytes of envelope text queued for one agent at most.
    pub queue_max_bytes: usize,
    /// Bytes of envelope text queued across all agents at most.
    pub hub_max_bytes: usize,
    /// How long an ack-mode reader has to ack a delivery before it is given to another.
    pub ack_timeout_ms: u64,
    /// How long accepted ids are remembered for idempotent resends and status queries after
    /// the envelope settled (delivered, acked or bounced).
    pub idempotency_window_secs: u64,
    /// Remembered ids at most; past it the oldest settled ones are forgotten early.
    pub idempotency_max_ids: usize,
    /// How many times one envelope may reach a reader in ack mode and come back without an
    /// ack; the delivery that reaches it bounces the envelope instead (SPEC §12.2). Optional:
    /// configs written before it keep loading.
    #[serde(default = "default_max_deliveries")]
    pub max_deliveries: u32,
    /// How many bytes of changes that gate no reply (removals, attempt counts, states,
    /// forgotten ids) a failing queue store may leave waiting before sends are refused until
    /// a commit succeeds (SPEC §12.1). Optional, like `max_deliveries`.
    #[serde(default = "default_store_backlog_max_bytes")]
    pub store_backlog_max_bytes: usize,
    /// How long an answered connection stays open for a line the client wrote before it read
    /// the reply, before the hub ends its side (SPEC §4.3). 0 ends it right after the reply.
    /// Optional, like `max_deliveries`.
    #[serde(default = "default_answer_linger_ms")]
    pub answer_linger_ms: u64,
}

/// `limits.answer_linger_ms` when the config says nothing: far longer than a client that
/// pipelines takes between two writes on one machine, short enough that a client reading
/// until the hub closes is not kept waiting noticeably.
pub const DEFAULT_ANSWER_LINGER_MS: u64 = 500;

fn default_answer_linger_ms() -> u64 {
    DEFAULT_ANSWER_LINGER_MS
}

/// `limits.store_backlog_max_bytes` when the config says nothing (16 MiB, the bound the audit
/// log's held records have).
pub const DEFAULT_STORE_BACKLOG_MAX_BYTES: usize = 16 * 1024 * 1024;
/// Its accepted range: a backlog below 64 KiB would refuse sends after a handful of
/// deliveries; one past 1 GiB is no bound on a hub's memory.
pub const STORE_BACKLOG_BYTES_RANGE: std::ops::RangeInclusive<usize> = 64 * 1024..=1 << 30;

fn default_store_backlog_max_bytes() -> usize {
    DEFAULT_STORE_BACKLOG_MAX_BYTES
}

/// `limits.max_deliveries` when the config says nothing.
pub const DEFAULT_MAX_DELIVERIES: u32 = 10;
/// The largest `limits.max_deliveries` accepted: past this a poison envelope would occupy
/// readers for days at the ack deadline, which is no cap at all.
pub const MAX_MAX_DELIVERIES: u32 = 10_000;

fn default_max_deliveries() -> u32 {
    DEFAULT_MAX_DELIVERIES
}

impl Limits {
    pub fn hello_timeout(&self) -> Duration {
        Duration::from_millis(self.hello_timeout_ms)
    }
    pub fn verb_timeout(&self) -> Duration {
        Duration::from_millis(self.verb_timeout_ms)
    }
    pub fn write_timeout(&self) -> Duration {
        Duration::from_millis(self.write_timeout_ms)
    }
    pub fn ack_timeout(&self) -> Duration {
        Duration::from_millis(self.ack_timeout_ms)
    }
    pub fn answer_linger(&self) -> Duration {
        Duration::from_millis(self.answer_linger_ms)
    }

    /// The `[limits]` table as config text (tests and tools that write configs).
    pub fn to_toml(&self) -> String {
        // Invariant: a struct of integers always serialises to TOML.
        format!(
            "[limits]\n{}",
            toml::to_string(self).expect("integers serialise")
        )
    }

    /// The limits of `config.example.toml`, for tests and the demo.
    pub fn example() -> Limits {
        Limits {
            max_line_bytes: 1_048_576,
            max_connections: 1024,
            hello_timeout_ms: 10_000,
            verb_timeout_ms: 10_000,
            write_timeout_ms: 30_000,
            queue_max_envelopes: 10_000,
            queue_max_bytes: 64 * 1024 * 1024,
            hub_max_bytes: 1024 * 1024 * 1024,
            ack_timeout_ms: 30_000,
            idempotency_window_secs: 86_400,
            idempotency_max_ids: 1_000_000,
            max_deliveries: DEFAULT_MAX_DELIVERIES,
            store_backlog_max_bytes: DEFAULT_STORE_BACKLOG_MAX_BYTES,
            answer_linger_ms: DEFAULT_ANSWER_LINGER_MS,
        }
    }

    /// Every limit is positive and within its upper bound (`bounds`).
    fn validate(&self) -> Result<(), ConfigError> {
        use bounds::*;
        let n = |v: usize| v as u64;
        check_bytes(
            "limits.max_line_bytes",
            n(self.max_line_bytes),
            MAX_LINE_BYTES,
        )?;
        check_count(
            "limits.max_connections",
            n(self.max_connections),
            MAX_CONNECTIONS,
        )?;
        for (key, v) in [
            ("limits.hello_timeout_ms", self.hello_timeout_ms),
            ("limits.verb_timeout_ms", self.verb_timeout_ms),
            ("limits.write_timeout_ms", self.write_timeout_ms),
        ] {
            check_duration_ms(key, v, MAX_CLIENT_TIMEOUT_MS)?;
        }
        check_count(
            "limits.queue_max_envelopes",
            n(self.queue_max_envelopes),
            MAX_QUEUE_ENVELOPES,
        )?;
        check_bytes(
            "limits.queue_max_bytes",
            n(self.queue_max_bytes),
            MAX_QUEUE_BYTES,
        )?;
        check_bytes(
            "limits.hub_max_bytes",
            n(self.hub_max_bytes),
            MAX_QUEUE_BYTES,
        )?;
        check_duration_ms(
            "limits.ack_timeout_ms",
            self.ack_timeout_ms,
            MAX_ACK_TIMEOUT_MS,
        )?;
        check_duration_secs(
            "limits.idempotency_window_secs",
            self.idempotency_window_secs,
            MAX_IDEMPOTENCY_WINDOW_SECS,
        )?;
        check_count(
            "limits.idempotency_max_ids",
            n(self.idempotency_max_ids),
            MAX_IDEMPOTENCY_IDS,
        )?;
        // 0 is allowed: the hub ends an answered connection right after its reply.
        check(
            "limits.answer_linger_ms",
            self.answer_linger_ms,
            0,
            MAX_CLIENT_TIMEOUT_MS,
            Unit::Millis,
        )?;
        if !(1..=MAX_MAX_DELIVERIES).contains(&self.max_deliveries) {
            return Err(ConfigError::Invalid(format!(
                "limits.max_deliveries must be between 1 and {MAX_MAX_DELIVERIES}"
            )));
        }
        if !STORE_BACKLOG_BYTES_RANGE.contains(&self.store_backlog_max_bytes) {
            return Err(ConfigError::Invalid(format!(
                "limits.store_backlog_max_bytes must be between {} and {}",
                STORE_BACKLOG_BYTES_RANGE.start(),
                STORE_BACKLOG_BYTES_RANGE.end()
            )));
        }
        Ok(())
    }
}

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
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRelay {
    peer_id: String,
    listen: String,
    heartbeat_interval_ms: u64,
    handshake_timeout_ms: u64,
    reconnect_backoff_ms: Vec<u64>,
    features: Vec<String>,
    status_path: PathBuf,
    #[serde(default = "default_forward_window")]
    forward_window: usize,
    #[serde(default)]
    max_connections: Option<usize>,
    #[serde(default)]
    max_unauthenticated: Option<usize>,
    #[serde(default)]
    max_connections_per_address: Option<usize>,
    #[serde(default)]
    max_peer_agents: Option<usize>,
    #[serde(default)]
    max_peer_directory_bytes: Option<usize>,
    #[serde(default)]
    peers: Vec<RawPeer>,
}

fn default_forward_window() -> usize {
    DEFAULT_FORWARD_WINDOW
}

/// `bus_forward` messages in flight (sent, not yet acked) per peer when the config says
/// nothing.
pub const DEFAULT_FORWARD_WINDOW: usize = 64;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPeer {
    id: String,
    address: Option<String>,
    key_file: PathBuf,
    allow_v0: bool,
    #[serde(default)]
    forward: bool,
}

/// The relay's settings (SPEC §13): who we are, where we listen, whom we link with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelayConfig {
    pub peer_id: String,
    /// Where the relay listens; None to only dial. May be a non-loopback address (a tailnet
    /// IP): the client port stays on loopback whatever this says.
    pub listen: Option<std::net::SocketAddr>,
    pub heartbeat_interval_ms: u64,
    pub handshake_timeout_ms: u64,
    /// Waits before each redial after a dialled link drops; the last repeats.
    pub reconnect_backoff_ms: Vec<u64>,
    /// Features we advertise, by their wire names.
    pub features: Vec<String>,
    /// Where the running hub writes its peer table for `agent-hub-server relay peers`.
    pub status_path: PathBuf,
    /// `bus_forward` messages sent and not yet acked, per peer (SPEC §15).
    pub forward_window: usize,
    /// Caps on connections and on what one peer may make this hub hold.
    pub limits: RelayLimits,
    pub peers: Vec<PeerConfig>,
}

/// The relay's caps (docs/relay-protocol.md, "Limits"): optional keys of `[relay]`, each with
/// a default and an upper bound checked at startup.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RelayLimits {
    /// Accepted relay connections open at once, in any state.
    pub max_connections: usize,
    /// Accepted relay connections that have not finished their handshake.
    pub max_unauthenticated: usize,
    /// Accepted relay connections open at once from one source IP address.
    pub max_connections_per_address: usize,
    /// Agents one peer's heartbeat directory may hold here.
    pub max_peer_agents: usize,
    /// Bytes one peer's directory may hold here (names + 8 per agent + the version).
    pub max_peer_directory_bytes: usize,
}

/// The most `relay.max_connections` may be.
pub const MAX_RELAY_CONNECTIONS_BOUND: usize = 65_536;
/// The most `relay.max_peer_agents` may be: a full or delta heartbeat of that many agents
/// stays well inside a message's JSON value budget (`relay::json_budget::MAX_JSON_VALUES`).
pub const MAX_PEER_AGENTS_BOUND: usize = 4096;
/// The most `relay.max_peer_directory_bytes` may be (a link keeps up to 17 directories: the
/// current one and the delta history).
pub const MAX_PEER_DIRECTORY_BYTES_BOUND: usize = 1 << 20;

impl RelayLimits {
    fn validate(&self) -> Result<(), ConfigError> {
        let within = |key: &str, v: usize, max: usize, why: &str| {
            if v == 0 || v > max {
                return Err(ConfigError::Invalid(format!(
                    "relay.{key} is {v}; it must be from 1 to {max}{why}"
                )));
            }
            Ok(())
        };
        within(
            "max_connections",
            self.max_connections,
            MAX_RELAY_CONNECTIONS_BOUND,
            "",
        )?;
        within(
            "max_unauthenticated",
            self.max_unauthenticated,
            self.max_connections,
            " (relay.max_connections)",
        )?;
        within(
            "max_connections_per_address",
            self.max_connections_per_address,
            self.max_connections,
            " (relay.max_connections)",
        )?;
        within(
            "max_peer_agents",
            self.max_peer_agents,
            MAX_PEER_AGENTS_BOUND,
            "",
        )?;
        within(
            "max_peer_directory_bytes",
            self.max_peer_directory_bytes,
            MAX_PEER_DIRECTORY_BYTES_BOUND,
            "",
        )
    }
}

impl Default for RelayLimits {
    fn default() -> RelayLimits {
        RelayLimits {
            max_connections: 64,
            max_unauthenticated: 16,
            max_connections_per_address: 8,
            max_peer_agents: crate::relay::heartbeat::DEFAULT_MAX_PEER_AGENTS,
            max_peer_directory_bytes: crate::relay::heartbeat::DEFAULT_MAX_PEER_DIRECTORY_BYTES,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerConfig {
    pub id: String,
    /// Dial this address; None to only accept this peer's connections.
    pub address: Option<std::net::SocketAddr>,
    /// 64 hex chars, mode 600.
    pub key_file: PathBuf,
    /// Accept a v0 link (no mutual authentication, no features) with this peer.
    pub allow_v0: bool,
    /// Exchange envelopes with this peer (`bus-forward`, SPEC §15): mail to `name@<id>` is
    /// forwarded to it, and its hub may queue mail for our agents.
    pub forward: bool,
}

/// The feature names this build knows (relay-protocol.md).
pub const RELAY_FEATURES: [&str; 8] = [
    "unknown-ok",
    "mutual-auth",
    "frame-bin",
    "lz4",
    "hb-delta",
    "bus-forward",
    "frame-mac",
    "agents",
];

/// The relay's frame-mac rules (docs/relay-protocol.md §3): `frame-mac` needs `frame-bin` and
/// `mutual-auth`, and is offered whenever both are (it need not be listed: integrity is on by
/// default between v1 peers). A peer with `allow_v0 = false` links only with all three, so
/// `features` must then list `mutual-auth` and `frame-bin`, or that peer could never link.
fn settle_frame_mac(features: &mut Vec<String>, strict_peers: &[&str]) -> Result<(), ConfigError> {
    let has = |f: &[String], name: &str| f.iter().any(|x| x == name);
    let prerequisites = has(features, "mutual-auth") && has(features, "frame-bin");
    if has(features, "frame-mac") && !prerequisites {
        return Err(ConfigError::Invalid(
            "relay.features lists \"frame-mac\", which needs \"frame-bin\" and \"mutual-auth\" too"
                .into(),
        ));
    }
    if let Some(p) = strict_peers.first() {
        if !prerequisites {
            return Err(ConfigError::Invalid(format!(
                "relay.peers {p:?} has allow_v0 = false, which links only with mutual-auth and frame-mac: relay.features must list \"mutual-auth\" and \"frame-bin\""
            )));
        }
    }
    if prerequisites && !has(features, "frame-mac") {
        features.push("frame-mac".into());
    }
    Ok(())
}

/// 1–128 chars of `[A-Za-z0-9_-]`, as v0 peers require of peer ids.
pub fn valid_peer_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 128
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

fn relay_config(
    raw: RawRelay,
    resolve: &dyn Fn(&str, PathBuf) -> Result<PathBuf, ConfigError>,
) -> Result<RelayConfig, ConfigError> {
    let bad = |m: String| ConfigError::Invalid(m);
    if !valid_peer_id(&raw.peer_id) {
        return Err(bad(format!(
            "relay.peer_id {:?} must be 1-128 characters of A-Z a-z 0-9 _ -",
            raw.peer_id
        )));
    }
    let listen = if raw.listen.is_empty() {
        None
    } else {
        Some(raw.listen.parse().map_err(|_| {
            bad(format!(
                "relay.listen {:?} is not an IP:port address",
                raw.listen
            ))
        })?)
    };
    bounds::check_duration_ms(
        "relay.heartbeat_interval_ms",
        raw.heartbeat_interval_ms,
        bounds::MAX_HEARTBEAT_INTERVAL_MS,
    )?;
    bounds::check_duration_ms(
        "relay.handshake_timeout_ms",
        raw.handshake_timeout_ms,
        bounds::MAX_HANDSHAKE_TIMEOUT_MS,
    )?;
    if raw.reconnect_backoff_ms.is_empty() || raw.reconnect_backoff_ms.contains(&0) {
        return Err(bad(
            "relay.reconnect_backoff_ms must list at least one wait, each greater than 0".into(),
        ));
    }
    if raw.reconnect_backoff_ms.len() as u64 > bounds::MAX_BACKOFF_STEPS {
        return Err(bad(format!(
            "relay.reconnect_backoff_ms lists {} waits, more than its upper bound of {}",
            raw.reconnect_backoff_ms.len(),
            bounds::MAX_BACKOFF_STEPS
        )));
    }
    for &wait in &raw.reconnect_backoff_ms {
        bounds::check_duration_ms("relay.reconnect_backoff_ms", wait, bounds::MAX_BACKOFF_MS)?;
    }
    for f in &raw.features {
        if !RELAY_FEATURES.contains(&f.as_str()) {
            return Err(bad(format!(
                "relay.features: unknown feature {f:?} (known: {})",
                RELAY_FEATURES.join(", ")
            )));
        }
    }
    bounds::check_count(
        "relay.forward_window",
        raw.forward_window as u64,
        bounds::MAX_FORWARD_WINDOW,
    )?;
    let mut features = raw.features;
    let strict: Vec<&str> = raw
        .peers
        .iter()
        .filter(|p| !p.allow_v0)
        .map(|p| p.id.as_str())
        .collect();
    settle_frame_mac(&mut features, &strict)?;
    // A key left out takes its default; the two capped by max_connections take at most it,
    // so lowering max_connections alone is a valid config.
    let d = RelayLimits::default();
    let max_connections = raw.max_connections.unwrap_or(d.max_connections);
    let limits = RelayLimits {
        max_connections,
        max_unauthenticated: raw
            .max_unauthenticated
            .unwrap_or(d.max_unauthenticated.min(max_connections)),
        max_connections_per_address: raw
            .max_connections_per_address
            .unwrap_or(d.max_connections_per_address.min(max_connections)),
        max_peer_agents: raw.max_peer_agents.unwrap_or(d.max_peer_agents),
        max_peer_directory_bytes: raw
            .max_peer_directory_bytes
            .unwrap_or(d.max_peer_directory_bytes),
    };
    limits.validate()?;
    let mut peers = Vec::new();
    for p in raw.peers {
        if p.forward && !features.iter().any(|f| f == "bus-forward") {
            return Err(bad(format!(
                "relay.peers {:?} sets forward = true, but relay.features does not list \"bus-forward\"",
                p.id
            )));
        }
        if !valid_peer_id(&p.id) {
            return Err(bad(format!(
                "relay.peers id {:?} must be 1-128 characters of A-Z a-z 0-9 _ -",
                p.id
            )));
        }
        if p.id == raw.peer_id {
            return Err(bad(format!(
                "relay.peers lists {:?}, which is this hub's own peer_id",
                p.id
            )));
        }
        if peers.iter().any(|q: &PeerConfig| q.id == p.id) {
            return Err(bad(format!("relay.peers lists {:?} twice", p.id)));
        }
        let address = match p.address {
            None => None,
            Some(a) => Some(a.parse().map_err(|_| {
                bad(format!(
                    "relay.peers {:?}: address {a:?} is not IP:port",
                    p.id
                ))
            })?),
        };
        peers.push(PeerConfig {
            key_file: resolve("relay.peers.key_file", p.key_file)?,
            id: p.id,
            address,
            allow_v0: p.allow_v0,
            forward: p.forward,
        });
    }
    Ok(RelayConfig {
        peer_id: raw.peer_id,
        listen,
        heartbeat_interval_ms: raw.heartbeat_interval_ms,
        handshake_timeout_ms: raw.handshake_timeout_ms,
        reconnect_backoff_ms: raw.reconnect_backoff_ms,
        features,
        status_path: resolve("relay.status_path", raw.status_path)?,
        forward_window: raw.forward_window,
        limits,
        peers,
    })
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStore {
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
        raw.limits.validate()?;
        let resolve = |key: &str, p: PathBuf| -> Result<PathBuf, ConfigError> {
            if p.as_os_str().is_empty() {
                return Err(ConfigError::Invalid(format!("{key} must not be empty")));
            }
            Ok(if p.is_absolute() { p } else { base.join(p) })
        };
        let store = match (
            raw.store.kind.as_str(),
            raw.store.path,
            raw.store.max_bytes,
            raw.store.sync,
        ) {
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
        };
        let relay = match raw.relay {
            None => None,
            Some(r) => Some(relay_config(r, &resolve)?),
        };
        let tasks = raw.tasks.map(tasks::TasksConfig::from_raw).transpose()?;
        Ok(Config {
            port: raw.port,
            relay,
            store,
            audit_log_path: resolve("audit_log_path", raw.audit_log_path)?,
            service_log_path: resolve("service_log_path", raw.service_log_path)?,
            roster_path: resolve("roster_path", raw.roster_path)?,
            limits: raw.limits,
            tasks,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = include_str!("../config.example.toml");

    #[test]
    fn example_config_parses_to_example_limits() {
        let c = Config::parse(EXAMPLE, Path::new("/etc/hub")).unwrap();
        assert_eq!(c.limits, Limits::example());
        assert_eq!(c.port, 46110);
        assert_eq!(c.roster_path, PathBuf::from("/etc/hub/roster.toml"));
    }

    #[test]
    fn missing_and_unknown_keys_are_fatal() {
        let missing = EXAMPLE.replace("port = 46110", "");
        let e = Config::parse(&missing, Path::new("/"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("missing field `port`"), "{e}");
        let unknown = format!("colour = \"red\"\n{EXAMPLE}");
        let e = Config::parse(&unknown, Path::new("/"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown field `colour`"), "{e}");
        let missing_limit = EXAMPLE.replace("write_timeout_ms = 30000", "");
        let e = Config::parse(&missing_limit, Path::new("/"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("write_timeout_ms"), "{e}");
    }

    #[test]
    fn limits_to_toml_round_trips() {
        let mut l = Limits::example();
        l.ack_timeout_ms = 1234;
        let text = EXAMPLE[..EXAMPLE.find("[limits]").unwrap()].to_owned() + &l.to_toml();
        assert_eq!(Config::parse(&text, Path::new("/")).unwrap().limits, l);
    }

    #[test]
    fn zero_limits_are_refused() {
        let zero = EXAMPLE.replace("max_connections = 1024", "max_connections = 0");
        let e = Config::parse(&zero, Path::new("/"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("limits.max_connections must be greater than 0"),
            "{e}"
        );
    }

    #[test]
    fn store_kinds_and_their_keys() {
        let sqlite = EXAMPLE.replace(
            "kind = \"memory\"",
            "kind = \"sqlite\"\npath = \"q.db\"\nmax_bytes = 1073741824\nsync = \"full\"",
        );
        let c = Config::parse(&sqlite, Path::new("/d")).unwrap();
        assert_eq!(
            c.store,
            StoreConfig::Sqlite {
                path: PathBuf::from("/d/q.db"),
                max_bytes: 1 << 30,
                sync: SyncPolicy::Full,
            }
        );
        let normal = sqlite.replace("\"full\"", "\"normal\"");
        assert!(matches!(
            Config::parse(&normal, Path::new("/d")).unwrap().store,
            StoreConfig::Sqlite {
                sync: SyncPolicy::Normal,
                ..
            }
        ));
        let odd = sqlite.replace("\"full\"", "\"off\"");
        assert!(Config::parse(&odd, Path::new("/"))
            .unwrap_err()
            .to_string()
            .contains("store.sync"));
        let half = EXAMPLE.replace("kind = \"memory\"", "kind = \"sqlite\"");
        assert!(Config::parse(&half, Path::new("/"))
            .unwrap_err()
            .to_string()
            .contains("needs store.path"));
        let stray = EXAMPLE.replace("kind = \"memory\"", "kind = \"memory\"\npath = \"q.db\"");
        assert!(Config::parse(&stray, Path::new("/"))
            .unwrap_err()
            .to_string()
            .contains("only for kind"));
        let odd = EXAMPLE.replace("kind = \"memory\"", "kind = \"redis\"");
        assert!(Config::parse(&odd, Path::new("/"))
            .unwrap_err()
            .to_string()
            .contains("\"redis\""));
    }

    const RELAY: &str = r#"
[relay]
peer_id = "laptop"
listen = "127.0.0.2:46111"
heartbeat_interval_ms = 30000
handshake_timeout_ms = 10000
reconnect_backoff_ms = [10000, 20000, 40000, 60000]
features = ["unknown-ok", "mutual-auth", "frame-bin", "lz4", "hb-delta"]
status_path = "relay-status.json"

[[relay.peers]]
id = "mini"
address = "127.0.0.3:46111"
key_file = "keys/mini.key"
allow_v0 = true
"#;

    #[test]
    fn relay_table_is_optional_and_strict() {
        assert_eq!(Config::parse(EXAMPLE, Path::new("/d")).unwrap().relay, None);
        let c = Config::parse(&format!("{EXAMPLE}{RELAY}"), Path::new("/d")).unwrap();
        let r = c.relay.unwrap();
        assert_eq!(r.peer_id, "laptop");
        assert_eq!(r.listen, Some("127.0.0.2:46111".parse().unwrap()));
        assert_eq!(r.peers[0].key_file, PathBuf::from("/d/keys/mini.key"));
        assert!(!r.peers[0].forward, "forwarding is opt-in per peer");
        assert_eq!(r.forward_window, DEFAULT_FORWARD_WINDOW);
        // The example's commented relay table, uncommented, is a valid config.
        let uncommented: String = EXAMPLE
            .lines()
            .skip_while(|l| !l.starts_with("# [relay]"))
            .filter_map(|l| l.strip_prefix("# "))
            .filter(|l| !l.starts_with('#'))
            .map(|l| format!("{l}\n"))
            .collect();
        let c = Config::parse(&format!("{EXAMPLE}{uncommented}"), Path::new("/d")).unwrap();
        let r = c.relay.unwrap();
        assert!(r.peers[0].forward && r.features.contains(&"bus-forward".to_owned()));
        assert_eq!(r.forward_window, 64);
        let cases = [
            (
                RELAY.replace("peer_id = \"laptop\"", "peer_id = \"lap top\""),
                "relay.peer_id",
            ),
            (
                RELAY.replace("\"hb-delta\"]", "\"hb-delta\", \"telepathy\"]"),
                "unknown feature",
            ),
            (
                RELAY.replace("id = \"mini\"", "id = \"laptop\""),
                "own peer_id",
            ),
            (
                RELAY.replace("address = \"127.0.0.3:46111\"", "address = \"mini:46111\""),
                "not IP:port",
            ),
            (
                RELAY.replace(
                    "reconnect_backoff_ms = [10000, 20000, 40000, 60000]",
                    "reconnect_backoff_ms = []",
                ),
                "at least one",
            ),
            (RELAY.replace("allow_v0 = true", ""), "allow_v0"),
            (
                RELAY.replace("allow_v0 = true", "allow_v0 = true\nforward = true"),
                "does not list \"bus-forward\"",
            ),
            (
                RELAY.replace(
                    "status_path = \"relay-status.json\"",
                    "status_path = \"relay-status.json\"\nforward_window = 0",
                ),
                "forward_window must be greater than 0",
            ),
        ];
        for (relay, want) in cases {
            let e = Config::parse(&format!("{EXAMPLE}{relay}"), Path::new("/d"))
                .unwrap_err()
                .to_string();
            assert!(e.contains(want), "{want}: {e}");
        }
    }

    #[test]
    fn frame_mac_is_implied_by_its_prerequisites_and_required_without_v0() {
        let parse = |relay: &str| Config::parse(&format!("{EXAMPLE}{relay}"), Path::new("/d"));
        let r = parse(RELAY).unwrap().relay.unwrap();
        assert_eq!(
            r.features.last().map(String::as_str),
            Some("frame-mac"),
            "{:?}",
            r.features
        );
        let listed = RELAY.replace("\"hb-delta\"]", "\"hb-delta\", \"frame-mac\"]");
        let r = parse(&listed).unwrap().relay.unwrap();
        assert_eq!(r.features.iter().filter(|f| *f == "frame-mac").count(), 1);
        let no_bin = RELAY.replace("\"frame-bin\", ", "");
        let r = parse(&no_bin).unwrap().relay.unwrap();
        assert!(
            !r.features.contains(&"frame-mac".to_owned()),
            "{:?}",
            r.features
        );
        let e = parse(&no_bin.replace("\"hb-delta\"]", "\"hb-delta\", \"frame-mac\"]"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("needs \"frame-bin\" and \"mutual-auth\""), "{e}");
        let strict = RELAY
            .replace("allow_v0 = true", "allow_v0 = false")
            .replace("\"mutual-auth\", ", "");
        let e = parse(&strict).unwrap_err().to_string();
        assert!(
            e.contains("\"mini\" has allow_v0 = false") && e.contains("must list"),
            "{e}"
        );
        assert!(parse(&RELAY.replace("allow_v0 = true", "allow_v0 = false")).is_ok());
    }

    #[test]
    fn relay_limits_are_optional_with_defaults_and_bounded() {
        let parse = |extra: &str| {
            let relay = RELAY.replace(
                "status_path = \"relay-status.json\"",
                &format!("status_path = \"relay-status.json\"\n{extra}"),
            );
            Config::parse(&format!("{EXAMPLE}{relay}"), Path::new("/d"))
        };
        let r = parse("").unwrap().relay.unwrap();
        assert_eq!(r.limits, RelayLimits::default());
        assert_eq!(
            (
                r.limits.max_connections,
                r.limits.max_unauthenticated,
                r.limits.max_connections_per_address,
                r.limits.max_peer_agents,
                r.limits.max_peer_directory_bytes
            ),
            (64, 16, 8, 1024, 131_072)
        );
        let set =
            "max_connections = 10\nmax_unauthenticated = 4\nmax_connections_per_address = 2\n\
                   max_peer_agents = 4096\nmax_peer_directory_bytes = 1048576";
        let r = parse(set).unwrap().relay.unwrap();
        assert_eq!(
            r.limits,
            RelayLimits {
                max_connections: 10,
                max_unauthenticated: 4,
                max_connections_per_address: 2,
                max_peer_agents: 4096,
                max_peer_directory_bytes: 1 << 20,
            }
        );
        // The example's commented caps are the defaults.
        let example: String = EXAMPLE
            .lines()
            .skip_while(|l| !l.starts_with("# [relay]"))
            .filter_map(|l| l.strip_prefix("# max_").map(|k| format!("max_{k}\n")))
            .collect();
        assert_eq!(example.lines().count(), 5, "{example}");
        assert_eq!(
            parse(&example).unwrap().relay.unwrap().limits,
            RelayLimits::default()
        );
        // Lowering max_connections alone lowers the defaults it bounds.
        let r = parse("max_connections = 4").unwrap().relay.unwrap();
        assert_eq!(
            (
                r.limits.max_unauthenticated,
                r.limits.max_connections_per_address
            ),
            (4, 4)
        );
        let refused = [
            ("max_connections = 0", "relay.max_connections is 0"),
            ("max_connections = 65537", "from 1 to 65536"),
            ("max_unauthenticated = 0", "relay.max_unauthenticated is 0"),
            (
                "max_unauthenticated = 65",
                "from 1 to 64 (relay.max_connections)",
            ),
            (
                "max_connections = 4\nmax_connections_per_address = 5",
                "relay.max_connections_per_address is 5",
            ),
            ("max_peer_agents = 4097", "from 1 to 4096"),
            (
                "max_peer_directory_bytes = 0",
                "max_peer_directory_bytes is 0",
            ),
            ("max_peer_directory_bytes = 1048577", "from 1 to 1048576"),
            ("max_peer_agents = -1", "expected usize"),
            ("max_connexions = 3", "unknown field"),
        ];
        for (extra, want) in refused {
            let e = parse(extra).unwrap_err().to_string();
            assert!(e.contains(want), "{extra}: {e}");
        }
    }

    #[test]
    fn absolute_paths_stay() {
        let abs = EXAMPLE.replace(
            "audit_log_path = \"audit.jsonl\"",
            "audit_log_path = \"/var/log/a.jsonl\"",
        );
        let c = Config::parse(&abs, Path::new("/etc/hub")).unwrap();
        assert_eq!(c.audit_log_path, PathBuf::from("/var/log/a.jsonl"));
    }

    /// `max_deliveries` is optional (older configs load with the default) and bounded.
    #[test]
    fn max_deliveries_defaults_and_is_bounded() {
        let without = EXAMPLE.replace("max_deliveries = 10\n", "");
        assert_ne!(without, EXAMPLE, "the example config sets it");
        let c = Config::parse(&without, Path::new("/")).unwrap();
        assert_eq!(c.limits.max_deliveries, DEFAULT_MAX_DELIVERIES);
        for (v, ok) in [("1", true), ("10000", true), ("0", false), ("10001", false)] {
            let text = EXAMPLE.replace("max_deliveries = 10\n", &format!("max_deliveries = {v}\n"));
            match Config::parse(&text, Path::new("/")) {
                Ok(c) => assert!(ok, "{v} accepted: {:?}", c.limits.max_deliveries),
                Err(e) => {
                    assert!(!ok, "{v} refused: {e}");
                    assert!(
                        e.to_string()
                            .contains("limits.max_deliveries must be between 1 and 10000"),
                        "{e}"
                    );
                }
            }
        }
        let negative = EXAMPLE.replace("max_deliveries = 10\n", "max_deliveries = -1\n");
        assert!(Config::parse(&negative, Path::new("/")).is_err());
    }

    #[test]
    fn store_backlog_max_bytes_defaults_and_is_bounded() {
        let key = "store_backlog_max_bytes = 16777216\n";
        let without = EXAMPLE.replace(key, "");
        assert_ne!(without, EXAMPLE, "the example config sets it");
        let c = Config::parse(&without, Path::new("/")).unwrap();
        assert_eq!(
            c.limits.store_backlog_max_bytes,
            DEFAULT_STORE_BACKLOG_MAX_BYTES
        );
        for (v, ok) in [
            ("65536", true),
            ("1073741824", true),
            ("65535", false),
            ("1073741825", false),
            ("0", false),
        ] {
            let text = EXAMPLE.replace(key, &format!("store_backlog_max_bytes = {v}\n"));
            match Config::parse(&text, Path::new("/")) {
                Ok(_) => assert!(ok, "{v} accepted"),
                Err(e) => {
                    assert!(!ok, "{v} refused: {e}");
                    assert!(
                        e.to_string().contains(
                            "limits.store_backlog_max_bytes must be between 65536 and 1073741824"
                        ),
                        "{e}"
                    );
                }
            }
        }
    }
}
