//! The optional `[relay]` table and its `[[relay.peers]]` (SPEC §13, §15;
//! docs/relay-protocol.md "Configuration" and "Limits").
//!
//! Owns the raw TOML form, its validation into `RelayConfig` (peer id syntax, the listen
//! address, feature names and the frame-mac rules, each peer's address and key file) and the
//! relay's caps with their defaults and bounds. Refuses: an unknown feature, a duplicate
//! peer, a cap of 0 or past its bound.

use super::{bounds, ConfigError};
use serde::Deserialize;
use std::path::PathBuf;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRelay {
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
    liveness_update_ms: Option<u64>,
    #[serde(default)]
    tags: Vec<String>,
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
    /// Required, under either name: `allow_v0` is the key's first name (configs written
    /// before claudectl 0.90 spoke v1), kept working; both at once must agree.
    #[serde(default)]
    allow_claudectl: Option<bool>,
    #[serde(default)]
    allow_v0: Option<bool>,
    #[serde(default)]
    forward: bool,
    #[serde(default)]
    delegate: bool,
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
    /// Feature `liveness`: the least time between two beats this hub sends (a change of an
    /// agent's state sends one early); 0: the feature is off (docs/relay-protocol.md §5).
    pub liveness_update_ms: u64,
    /// Caps on connections and on what one peer may make this hub hold.
    pub limits: RelayLimits,
    /// What this machine offers beyond its tools, for claudectl's placement (`--requires
    /// gpu`): sent in `headroom` to claudectl peers that agreed it. Each 1–40 bytes of
    /// `[A-Za-z0-9._-]`, at most 32 (claudectl's own rule for `[relay] tags`).
    pub tags: Vec<String>,
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
            max_peer_agents: agent_hub_proto::relay::heartbeat::DEFAULT_MAX_PEER_AGENTS,
            max_peer_directory_bytes:
                agent_hub_proto::relay::heartbeat::DEFAULT_MAX_PEER_DIRECTORY_BYTES,
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
    /// Link with this peer in claudectl's dialect (docs/relay-protocol.md §2.1): relay v0, or
    /// claudectl's v1 (≥ 0.90: `proto` and `features`, proofs over the nonce alone), neither
    /// with `mutual-auth` or `frame-mac`. Off: only this project's v1 with both. Config key
    /// `allow_claudectl`, or its first name `allow_v0`.
    pub allow_claudectl: bool,
    /// Exchange envelopes with this peer (`bus-forward`, SPEC §15): mail to `name@<id>` is
    /// forwarded to it, and its hub may queue mail for our agents.
    pub forward: bool,
    /// Run the tasks this peer delegates here (`delegate_task`, docs/delegation.md "Across
    /// hubs"). Off by default: a trust decision, the 000 seed's §10.
    pub delegate: bool,
}

/// A peer's `allow_claudectl`, under its name or its first name `allow_v0` (one is required;
/// both must agree, so an edited config cannot say two things).
fn allow_claudectl(p: &RawPeer) -> Result<bool, ConfigError> {
    match (p.allow_claudectl, p.allow_v0) {
        (Some(a), Some(b)) if a != b => Err(ConfigError::Invalid(format!(
            "relay.peers {:?} sets allow_claudectl = {a} and allow_v0 = {b}: allow_v0 is the old name of allow_claudectl, keep one",
            p.id
        ))),
        (Some(a), _) | (None, Some(a)) => Ok(a),
        (None, None) => Err(ConfigError::Invalid(format!(
            "relay.peers {:?} needs allow_claudectl = true or false (true: it may link in claudectl's dialect, relay v0 or claudectl's v1, without mutual-auth or frame-mac; docs/relay-protocol.md §2.1)",
            p.id
        ))),
    }
}

/// The feature names this build knows (relay-protocol.md).
pub const RELAY_FEATURES: [&str; 10] = [
    "unknown-ok",
    "mutual-auth",
    "frame-bin",
    "lz4",
    "hb-delta",
    "bus-forward",
    "frame-mac",
    "agents",
    "liveness",
    "task-approvals",
];

/// `relay.liveness_update_ms` when the config says nothing (at most the heartbeat interval).
pub const DEFAULT_LIVENESS_UPDATE_MS: u64 = 1000;
/// The least `relay.liveness_update_ms` may be when set (0 aside): a flapping agent then costs
/// a link at most 10 beats a second.
pub const MIN_LIVENESS_UPDATE_MS: u64 = 100;

/// Feature `liveness` (docs/relay-protocol.md §5 "Liveness"): offered whenever
/// `liveness_update_ms` is not 0 (it need not be listed; it adds no type, and a peer that does
/// not know it ignores the name). Set, the key must lie in 100..=heartbeat_interval_ms; left
/// out it is 1000 ms or the interval if that is shorter. Returns the value in effect.
fn settle_liveness(
    features: &mut Vec<String>,
    raw: Option<u64>,
    heartbeat_interval_ms: u64,
) -> Result<u64, ConfigError> {
    let ms = match raw {
        None => DEFAULT_LIVENESS_UPDATE_MS.min(heartbeat_interval_ms),
        Some(0) => 0,
        Some(v) if v < MIN_LIVENESS_UPDATE_MS || v > heartbeat_interval_ms => {
            return Err(ConfigError::Invalid(format!(
                "relay.liveness_update_ms is {v}; it must be 0 (off) or from {MIN_LIVENESS_UPDATE_MS} to relay.heartbeat_interval_ms ({heartbeat_interval_ms})"
            )))
        }
        Some(v) => v,
    };
    let listed = features.iter().any(|f| f == "liveness");
    if ms == 0 && listed {
        return Err(ConfigError::Invalid(
            "relay.features lists \"liveness\", but relay.liveness_update_ms = 0 turns it off"
                .into(),
        ));
    }
    if ms > 0 && !listed {
        features.push("liveness".into());
    }
    Ok(ms)
}

/// The relay's frame-mac rules (docs/relay-protocol.md §3): `frame-mac` needs `frame-bin` and
/// `mutual-auth`, and is offered whenever both are (it need not be listed: integrity is on by
/// default between v1 peers); so is `task-approvals`, which needs `frame-mac`. A peer with `allow_claudectl = false` links only with all three, so
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
                "relay.peers {p:?} has allow_claudectl = false, which links only with mutual-auth and frame-mac: relay.features must list \"mutual-auth\" and \"frame-bin\""
            )));
        }
    }
    if prerequisites && !has(features, "frame-mac") {
        features.push("frame-mac".into());
    }
    // `task-approvals` (issue 37 design §7) rides only on a link with `frame-mac`: offered
    // whenever frame-mac is, as frame-mac is whenever its own prerequisites are, so a
    // delegated task's requests reach its delegator between two hubs of this project
    // without a config change; a claudectl link never gets it.
    if has(features, "task-approvals") && !prerequisites {
        return Err(ConfigError::Invalid(
            "relay.features lists \"task-approvals\", which needs \"frame-bin\" and \"mutual-auth\" too (it rides only on a link with frame-mac)"
                .into(),
        ));
    }
    if prerequisites && !has(features, "task-approvals") {
        features.push("task-approvals".into());
    }
    Ok(())
}

/// The peer id rule (`names::valid_peer_id`), where the config's readers look for it.
pub use agent_hub_proto::kernel::names::valid_peer_id;

/// Validates the `[relay]` table into its config; `resolve` makes a path absolute.
pub(super) fn relay_config(
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
    if raw.tags.len() > agent_hub_proto::relay::worker::MAX_TAGS {
        return Err(bad(format!(
            "relay.tags lists {} tags; at most {} are sent",
            raw.tags.len(),
            agent_hub_proto::relay::worker::MAX_TAGS
        )));
    }
    if let Some(t) = raw
        .tags
        .iter()
        .find(|t| !agent_hub_proto::relay::worker::valid_tag(t))
    {
        return Err(bad(format!(
            "relay.tags: {t:?} is not 1-40 characters of A-Z a-z 0-9 . _ -"
        )));
    }
    bounds::check_count(
        "relay.forward_window",
        raw.forward_window as u64,
        bounds::MAX_FORWARD_WINDOW,
    )?;
    let mut features = raw.features;
    let mut dialect = Vec::with_capacity(raw.peers.len());
    for p in &raw.peers {
        dialect.push(allow_claudectl(p)?);
    }
    let strict: Vec<&str> = raw
        .peers
        .iter()
        .zip(&dialect)
        .filter(|(_, &allowed)| !allowed)
        .map(|(p, _)| p.id.as_str())
        .collect();
    let liveness_update_ms = settle_liveness(
        &mut features,
        raw.liveness_update_ms,
        raw.heartbeat_interval_ms,
    )?;
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
    for (p, allow_claudectl) in raw.peers.into_iter().zip(dialect) {
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
        if p.id == agent_hub_proto::tasks::placement::AUTO {
            // `delegate --peer auto` asks for a placement (issue 38 design §4); a peer so
            // named could never be named.
            return Err(bad(
                "relay.peers: \"auto\" is reserved for delegate --peer auto".to_owned(),
            ));
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
            allow_claudectl,
            forward: p.forward,
            delegate: p.delegate,
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
        liveness_update_ms,
        limits,
        tags: raw.tags,
        peers,
    })
}
