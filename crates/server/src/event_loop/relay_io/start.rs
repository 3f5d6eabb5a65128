//! Starting the relay (SPEC §13; docs/relay-protocol.md, docs/relay-setup.md): the peer key
//! files read and checked (mode 600, 64 hex characters), the listener bound and registered,
//! the session config every link clones, the peers' books, and the helper threads (the status
//! file writer, the agent card and headroom probers). Each failure names the file, address or
//! part. Refuses: anything after the start (`mod.rs` and its siblings).

use super::super::relay_gate::{
    Gate, PEER_LOG_BURST, PEER_LOG_REFILL, STRANGER_LOG_BURST, STRANGER_LOG_REFILL,
};
use super::{cards, headroom, wall_clock, PeerBook, RelayIo, RELAY_LISTENER, RELAY_TOKEN_BASE};
use agent_hub_host::config::RelayConfig;
use agent_hub_host::relay_status::StatusWriter;
use agent_hub_proto::relay::heartbeat::{Directory, DirectoryCaps};
use agent_hub_proto::relay::links::{Links, STANDBY_GRACE};
use agent_hub_proto::relay::session::{PeerAuth, SessionConfig};
use agent_hub_proto::relay::throttle::Throttle;
use agent_hub_proto::relay::Feature;
use mio::net::TcpListener;
use mio::{Interest, Registry};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::{self};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Why the relay could not start. Each names the file, address or part that failed.
#[derive(Debug)]
pub enum RelayStartError {
    /// A peer key file was refused (its mode) or could not be read.
    KeyFile(super::super::private_file::FileCheckError),
    /// A peer key file does not hold a key.
    BadKey {
        path: std::path::PathBuf,
        error: agent_hub_proto::relay::auth::KeyError,
    },
    /// Client and relay connections would not fit the descriptor limit.
    Descriptors(super::super::relay_gate::DescriptorError),
    Bind {
        addr: SocketAddr,
        error: io::Error,
    },
    /// The listener could not be registered with the loop's poll.
    Register(io::Error),
    /// The bound listener's address could not be read.
    LocalAddr(io::Error),
    Random(io::Error),
    /// A helper thread could not be started: `what` names it ("relay status writer").
    Thread {
        what: &'static str,
        error: io::Error,
    },
}

impl std::fmt::Display for RelayStartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RelayStartError::KeyFile(e) => write!(f, "{e}"),
            RelayStartError::BadKey { path, error } => {
                write!(f, "relay key file {}: {error}", path.display())
            }
            RelayStartError::Descriptors(e) => write!(f, "{e}"),
            RelayStartError::Bind { addr, error } => {
                write!(f, "cannot bind the relay to {addr}: {error}")
            }
            RelayStartError::Register(e) => write!(f, "{e}"),
            RelayStartError::LocalAddr(e) => write!(f, "the relay's listening address: {e}"),
            RelayStartError::Random(e) => write!(f, "cannot open /dev/urandom: {e}"),
            RelayStartError::Thread { what, error } => {
                write!(f, "cannot start the {what}: {error}")
            }
        }
    }
}

impl std::error::Error for RelayStartError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            RelayStartError::KeyFile(e) => Some(e),
            RelayStartError::BadKey { error, .. } => Some(error),
            RelayStartError::Descriptors(e) => Some(e),
            RelayStartError::Bind { error, .. } | RelayStartError::Thread { error, .. } => {
                Some(error)
            }
            RelayStartError::Register(e)
            | RelayStartError::LocalAddr(e)
            | RelayStartError::Random(e) => Some(e),
        }
    }
}

/// Reads a peer key file: mode 600 or refused, 64 hex chars.
pub fn load_key(path: &std::path::Path) -> Result<[u8; 32], RelayStartError> {
    use super::super::private_file::{check_private, FileCheckError};
    check_private(path, "relay key file").map_err(RelayStartError::KeyFile)?;
    let text = std::fs::read_to_string(path).map_err(|error| {
        RelayStartError::KeyFile(FileCheckError::Unreadable {
            what: "relay key file",
            path: path.to_owned(),
            error,
        })
    })?;
    agent_hub_proto::relay::auth::parse_key(&text).map_err(|error| RelayStartError::BadKey {
        path: path.to_owned(),
        error,
    })
}

impl RelayIo {
    /// Loads keys and binds the listener. Errors name the file or address.
    /// `cards` are the folders and PATH the task runner reads: the agent cards list what it finds.
    /// `task_dir` is where delegated tasks run (the first of `tasks.cwd_roots`): its free
    /// space is the `disk_free_mb` claudectl peers are told.
    pub fn new(
        cfg: RelayConfig,
        cards: cards::CardSource,
        task_dir: std::path::PathBuf,
        registry: &Registry,
        now: Instant,
    ) -> Result<RelayIo, RelayStartError> {
        let mut keys = HashMap::new();
        for p in &cfg.peers {
            keys.insert(
                p.id.clone(),
                PeerAuth {
                    key: load_key(&p.key_file)?,
                    allow_claudectl: p.allow_claudectl,
                    forward: p.forward,
                },
            );
        }
        let features = cfg
            .features
            .iter()
            .filter_map(|f| Feature::parse(f))
            .collect();
        let listener = match cfg.listen {
            None => None,
            Some(addr) => {
                let mut l = TcpListener::bind(addr)
                    .map_err(|error| RelayStartError::Bind { addr, error })?;
                registry
                    .register(&mut l, RELAY_LISTENER, Interest::READABLE)
                    .map_err(RelayStartError::Register)?;
                Some(l)
            }
        };
        // The handshake's `listen_port` tells the peer where to dial back: the port actually
        // bound, not the configured one, which is 0 for "any free port" (found by
        // scripts/claudectl-interop.sh: the hub announced port 0).
        let listen_port = match &listener {
            Some(l) => Some(l.local_addr().map_err(RelayStartError::LocalAddr)?.port()),
            None => None,
        };
        let session_cfg = SessionConfig {
            local_peer: cfg.peer_id.clone(),
            software_version: agent_hub_proto::VERSION.to_owned(),
            features,
            heartbeat_interval: Duration::from_millis(cfg.heartbeat_interval_ms),
            // 0 means the feature is off (not offered), so the value is then never read.
            liveness_update: Duration::from_millis(cfg.liveness_update_ms),
            handshake_timeout: Duration::from_millis(cfg.handshake_timeout_ms),
            listen_port,
            transient: false,
            wall_clock: wall_clock(now),
            // One book for every session this hub runs (each takes a clone of this config).
            nonces: agent_hub_proto::relay::nonces::NonceBook::new(),
        };
        let mut books = BTreeMap::new();
        for p in &cfg.peers {
            let mut book = PeerBook::default();
            book.status.id = p.id.clone();
            book.status.state = if p.address.is_some() {
                "connecting"
            } else {
                "down"
            }
            .to_owned();
            book.next_dial = p.address.map(|_| now);
            books.insert(p.id.clone(), book);
        }
        let directory_caps = DirectoryCaps {
            max_agents: cfg.limits.max_peer_agents,
            max_bytes: cfg.limits.max_peer_directory_bytes,
        };
        let thread = |what: &'static str| move |error| RelayStartError::Thread { what, error };
        let random = std::fs::File::open("/dev/urandom").map_err(RelayStartError::Random)?;
        let status_writer =
            StatusWriter::spawn(cfg.status_path.clone()).map_err(thread("relay status writer"))?;
        // Claudectl peers are told our manifests as `capabilities` tools, so the cards are
        // computed for them too.
        let claudectl_peers = cfg.peers.iter().any(|p| p.allow_claudectl);
        let card_prober = if session_cfg.features.contains(&Feature::Agents) || claudectl_peers {
            Some(cards::CardProber::spawn(cards).map_err(thread("agent card prober"))?)
        } else {
            None
        };
        // Every peer reads our room since issue 38 (design §4), and placement weighs this
        // machine by the same figures.
        let machine_prober = if !cfg.peers.is_empty() {
            Some(headroom::MachineProber::spawn(task_dir).map_err(thread("headroom prober"))?)
        } else {
            None
        };
        Ok(RelayIo {
            machine_prober,
            machine: headroom::Machine::default(),
            task_room: (0, None),
            headroom: None,
            peers_cfg: cfg.peers.clone(),
            registry_links: Links::new(
                cfg.peer_id.clone(),
                Duration::from_millis(cfg.heartbeat_interval_ms),
                STANDBY_GRACE,
            ),
            second_conn_log: Throttle::new(PEER_LOG_BURST, PEER_LOG_REFILL),
            gate: Gate::new(cfg.limits),
            stranger_log: Throttle::new(STRANGER_LOG_BURST, STRANGER_LOG_REFILL),
            accept_paused_until: None,
            read_again: BTreeSet::new(),
            pending: BTreeSet::new(),
            directory_caps,
            cfg,
            session_cfg,
            keys: Arc::new(keys),
            listener,
            links: HashMap::new(),
            books,
            next_token: RELAY_TOKEN_BASE + 1,
            directory: Directory::default(),
            status_dirty: true,
            next_status_write: Some(now),
            status_writer,
            agent_cards: Vec::new(),
            card_prober,
            logs: Vec::new(),
            inbox: Vec::new(),
            random,
        })
    }
}
