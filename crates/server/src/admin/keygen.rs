//! `agent-hub-server relay keygen` (docs/relay-setup.md; SPEC §13.1, §15): one link's shared
//! key, written once into a private folder, and the config lines for both ends of the link,
//! complete enough to be pasted as they are.
//!
//! Owns: where the key goes (`--key-file`, else `keys/<peer>.key` beside `--config`), the folder
//! it makes for it (mode 700) and the key file (mode 600, never over an existing one without
//! `--force`); the `key_file` each side's config will hold, written as that config resolves it
//! (relative to the config's own folder when the key lies under it, else absolute, never
//! relative to the shell's folder); and the two blocks, each between a `# >>> ID` and a
//! `# <<< ID` line so they can be cut out by a person or by `sed`. Everything is checked before
//! anything is written, so a refused command leaves nothing behind.
//!
//! Refuses: printing the key (it reaches the other machine as a copy of the file, never through
//! a terminal's scrollback), an address a peer cannot dial (port 0, `0.0.0.0`, a loopback
//! address paired with a non-loopback one), and a config whose `[relay]` could not take the new
//! peer as printed. The config's meaning stays `agent_hub_host::config`'s: its loader reads
//! `--config`, and the tests paste these blocks into configs that real hubs load.

use super::token::{self, TokenError};
use agent_hub_host::config::{valid_peer_id, Config, ConfigError, RelayConfig};
use std::fmt;
use std::io::Write;
use std::net::SocketAddr;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// The relay features a new `[relay]` table lists: everything a link between two agent-hubs
/// uses (`frame-mac` and `liveness` are added by the config loader, relay.rs). `bus-forward` is
/// offered only to peers with `forward = true`, so listing it costs a claudectl peer nothing.
const FEATURES: &str =
    r#"["unknown-ok", "mutual-auth", "frame-bin", "lz4", "hb-delta", "bus-forward", "agents"]"#;
/// A dead link is noticed after 3 silent intervals: 30 s here (a beat is a few bytes under
/// `hb-delta`), rather than config.example.toml's 90 s.
const HEARTBEAT_INTERVAL_MS: u64 = 10_000;
const HANDSHAKE_TIMEOUT_MS: u64 = 10_000;
/// The first redial comes soon (the other hub is often started a moment later), the rest slower.
const RECONNECT_BACKOFF_MS: &str = "[1000, 5000, 30000]";

/// What the operator asked for, as given on the command line.
#[derive(Debug, Clone, Default)]
pub struct KeygenRequest {
    /// The other side's peer id.
    pub peer: String,
    /// This hub's peer id; may come from `--config`'s `[relay]`.
    pub local: Option<String>,
    /// This hub's config file.
    pub config: Option<PathBuf>,
    /// Where to write the key, relative to the shell's folder.
    pub key_file: Option<PathBuf>,
    /// This hub's relay address (IP:port), which the peer dials; may come from `--config`.
    pub listen: Option<String>,
    /// The peer's relay address, which this hub dials.
    pub peer_listen: String,
    /// The peer is a claudectl relay, not an agent-hub.
    pub claudectl: bool,
    /// Replace an existing key file.
    pub force: bool,
}

/// Why `relay keygen` wrote no key.
#[derive(Debug)]
pub enum KeygenError {
    /// A peer id is not 1–128 characters of `A-Z a-z 0-9 _ -`; `what` names the option.
    BadId { what: &'static str, id: String },
    /// `--peer` and this hub's id are the same.
    SameId(String),
    /// Neither `--local` nor a `[relay] peer_id` in `--config`.
    NoLocal,
    /// Neither `--listen` nor a `[relay] listen` in `--config`.
    NoListen,
    /// Neither `--key-file` nor `--config`.
    NoKeyFile,
    /// An address option that is not one a peer can dial.
    BadAddress {
        what: &'static str,
        given: String,
        why: &'static str,
    },
    /// `--listen` and `--peer-listen` are the same address.
    SameAddress(SocketAddr),
    /// One address is loopback and the other is not: the two hubs could never reach each other.
    LoopbackMix {
        loopback: &'static str,
        other: &'static str,
    },
    /// The config's `[relay]` says otherwise than an option.
    Disagrees {
        config: PathBuf,
        key: &'static str,
        has: String,
        option: &'static str,
        given: String,
    },
    /// The config's `[relay]` lists the peer already.
    AlreadyPeer { config: PathBuf, peer: String },
    /// The config's `[relay] features` lacks a feature the new peer entry needs.
    MissingFeature {
        config: PathBuf,
        feature: &'static str,
        why: &'static str,
    },
    /// The config could not be read or was refused.
    Config { path: PathBuf, source: ConfigError },
    /// A path that cannot be written into a TOML config (not UTF-8), or that names no file.
    BadPath { path: PathBuf, why: &'static str },
    /// The key file's folder could not be made or resolved.
    Folder(TokenError),
    /// The key file's folder could not be resolved to an absolute path.
    Resolve {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The key file exists and `--force` was not given.
    Exists(PathBuf),
    /// /dev/urandom could not be read.
    Random(TokenError),
    /// The key file could not be written.
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

impl fmt::Display for KeygenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeygenError::BadId { what, id } => {
                write!(f, "{what} {id:?} must be 1-128 characters of A-Z a-z 0-9 _ -")
            }
            KeygenError::SameId(id) => write!(
                f,
                "--peer {id:?} is this hub's own peer id: --peer names the other hub"
            ),
            KeygenError::NoLocal => write!(
                f,
                "give --local ID, this hub's peer id (the name the other hub will know it by), or --config PATH of a config whose [relay] has a peer_id"
            ),
            KeygenError::NoListen => write!(
                f,
                "give --listen IP:PORT, the address this hub's relay listens on and the other hub dials, or --config PATH of a config whose [relay] has a listen"
            ),
            KeygenError::NoKeyFile => write!(
                f,
                "give --config PATH (the key goes to keys/PEER.key beside it) or --key-file FILE"
            ),
            KeygenError::BadAddress { what, given, why } => {
                write!(f, "{what} {given:?} {why}")
            }
            KeygenError::SameAddress(a) => write!(
                f,
                "--listen and --peer-listen are both {a}: each hub's relay needs its own address"
            ),
            KeygenError::LoopbackMix { loopback, other } => write!(
                f,
                "{loopback} is a loopback address and {other} is not: a hub on another machine cannot reach 127.0.0.1; for two machines give both hubs' tailnet or WireGuard addresses, for one machine two loopback ones"
            ),
            KeygenError::Disagrees {
                config,
                key,
                has,
                option,
                given,
            } => write!(
                f,
                "{} has relay.{key} = {has:?} but {option} is {given:?}; leave {option} out to use the config's, or change the config first",
                config.display()
            ),
            KeygenError::AlreadyPeer { config, peer } => write!(
                f,
                "{} already lists peer {peer:?} in [[relay.peers]]; remove that entry first to link with it anew",
                config.display()
            ),
            KeygenError::MissingFeature {
                config,
                feature,
                why,
            } => write!(
                f,
                "{}'s relay.features does not list {feature:?}, which {why}: add it, then run this again",
                config.display()
            ),
            KeygenError::Config { path, source } => write!(f, "{}: {source}", path.display()),
            KeygenError::BadPath { path, why } => write!(f, "{}: {why}", path.display()),
            KeygenError::Folder(e) | KeygenError::Random(e) => write!(f, "{e}"),
            KeygenError::Resolve { path, source } => {
                write!(f, "cannot resolve {}: {source}", path.display())
            }
            KeygenError::Exists(path) => write!(
                f,
                "{} already exists, and a link's key is replaced only on purpose: --force writes a new one (then copy it to the peer again)",
                path.display()
            ),
            KeygenError::Write { path, source } => {
                write!(f, "cannot write {}: {source}", path.display())
            }
        }
    }
}

impl std::error::Error for KeygenError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            KeygenError::Config { source, .. } => Some(source),
            KeygenError::Folder(e) | KeygenError::Random(e) => Some(e),
            KeygenError::Resolve { source, .. } | KeygenError::Write { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// Everything the two blocks say, settled before anything is written.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Plan {
    local: String,
    peer: String,
    /// This hub's relay address; None when its config's relay only dials.
    listen: Option<SocketAddr>,
    peer_listen: SocketAddr,
    /// The config names a `[relay]` already: this side gets the peer entry only.
    has_relay: bool,
    /// `--config` as typed, for the prose (None: "this hub's config.toml").
    config_shown: Option<String>,
    /// The key file, absolute.
    key_abs: PathBuf,
    /// The `key_file` value this side's config gets.
    key_in_config: String,
    claudectl: bool,
}

/// The command: checks, makes the folder, writes the key, prints both blocks.
pub fn run(req: &KeygenRequest) -> Result<(), KeygenError> {
    let relay = match &req.config {
        None => None,
        Some(path) => Config::load(path)
            .map_err(|source| KeygenError::Config {
                path: path.clone(),
                source,
            })?
            .relay
            .map(|r| (path.as_path(), r)),
    };
    let settled = settle(req, relay.as_ref().map(|(p, r)| (*p, r)))?;
    let config_dir = match &req.config {
        Some(c) => Some(config_folder(c)?),
        None => None,
    };
    let key_file = match (&req.key_file, &config_dir) {
        (Some(k), _) => k.clone(),
        (None, Some(dir)) => dir.join("keys").join(format!("{}.key", settled.peer)),
        (None, None) => return Err(KeygenError::NoKeyFile),
    };
    let name = key_file
        .file_name()
        .ok_or(KeygenError::BadPath {
            path: key_file.clone(),
            why: "names a folder, not a key file",
        })?
        .to_owned();
    let folder = match key_file.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let made = if folder.is_dir() {
        None
    } else {
        token::private_dir(&folder).map_err(KeygenError::Folder)?;
        Some(folder.clone())
    };
    let key_abs = std::fs::canonicalize(&folder)
        .map_err(|source| KeygenError::Resolve {
            path: folder.clone(),
            source,
        })?
        .join(name);
    let key_in_config = config_value(&key_abs, config_dir.as_deref())?;
    let plan = Plan {
        key_abs,
        key_in_config,
        config_shown: req.config.as_ref().map(|c| c.display().to_string()),
        ..settled
    };
    if !req.force && plan.key_abs.exists() {
        return Err(KeygenError::Exists(plan.key_abs));
    }
    let text = format!("{}\n", token::random_token().map_err(KeygenError::Random)?);
    write_key(&plan.key_abs, &text, req.force)?;
    let made = made.map_or(String::new(), |m| {
        format!("; made its folder {}, mode 700", m.display())
    });
    super::say(format_args!(
        "wrote {} (mode 600{made})\n\n{}",
        plan.key_abs.display(),
        render(&plan)
    ));
    Ok(())
}

/// The folder a config's relative paths resolve against, as `Config::load` finds it.
fn config_folder(config: &Path) -> Result<PathBuf, KeygenError> {
    let dir = match config.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    std::fs::canonicalize(&dir).map_err(|source| KeygenError::Resolve { path: dir, source })
}

/// The `key_file` value for a config in `config_dir`: relative to it when the key lies under
/// it (the config moves with its folder), else absolute (right from any config).
fn config_value(key_abs: &Path, config_dir: Option<&Path>) -> Result<String, KeygenError> {
    let shown = match config_dir.and_then(|d| key_abs.strip_prefix(d).ok()) {
        Some(rel) => rel,
        None => key_abs,
    };
    shown
        .to_str()
        .map(str::to_owned)
        .ok_or(KeygenError::BadPath {
            path: key_abs.to_path_buf(),
            why: "is not UTF-8, which a TOML config cannot hold",
        })
}

/// Creates the key file with mode 600, refusing an existing one; with `force`, replaces it
/// whole (a hub reading it at that moment sees the old key or the new).
fn write_key(path: &Path, text: &str, force: bool) -> Result<(), KeygenError> {
    let result = if force {
        agent_hub_host::atomic_file::write_atomic(path, text.as_bytes(), 0o600)
    } else {
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
            .and_then(|mut f| f.write_all(text.as_bytes()).and_then(|()| f.sync_all()))
    };
    result.map_err(|source| {
        if source.kind() == std::io::ErrorKind::AlreadyExists {
            KeygenError::Exists(path.to_path_buf())
        } else {
            KeygenError::Write {
                path: path.to_path_buf(),
                source,
            }
        }
    })
}

/// Checks the ids and addresses against each other and against the config's `[relay]`, if it
/// has one; returns the plan without its key paths.
fn settle(req: &KeygenRequest, relay: Option<(&Path, &RelayConfig)>) -> Result<Plan, KeygenError> {
    if !valid_peer_id(&req.peer) {
        return Err(KeygenError::BadId {
            what: "--peer",
            id: req.peer.clone(),
        });
    }
    if let Some(l) = req.local.as_ref().filter(|l| !valid_peer_id(l)) {
        return Err(KeygenError::BadId {
            what: "--local",
            id: l.clone(),
        });
    }
    let given_listen = req
        .listen
        .as_deref()
        .map(|a| dialable("--listen", a))
        .transpose()?;
    let peer_listen = dialable("--peer-listen", &req.peer_listen)?;
    let (local, listen) = match relay {
        None => (
            req.local.clone().ok_or(KeygenError::NoLocal)?,
            Some(given_listen.ok_or(KeygenError::NoListen)?),
        ),
        Some((path, r)) => {
            if let Some(l) = req.local.as_ref().filter(|l| **l != r.peer_id) {
                return Err(KeygenError::Disagrees {
                    config: path.to_path_buf(),
                    key: "peer_id",
                    has: r.peer_id.clone(),
                    option: "--local",
                    given: l.clone(),
                });
            }
            if let Some(l) = given_listen.filter(|l| Some(*l) != r.listen) {
                return Err(KeygenError::Disagrees {
                    config: path.to_path_buf(),
                    key: "listen",
                    has: r.listen.map_or(String::new(), |a| a.to_string()),
                    option: "--listen",
                    given: l.to_string(),
                });
            }
            if let Some(a) = r.listen {
                dialable_addr("relay.listen", a)?;
            }
            if r.peers.iter().any(|p| p.id == req.peer) {
                return Err(KeygenError::AlreadyPeer {
                    config: path.to_path_buf(),
                    peer: req.peer.clone(),
                });
            }
            let needs: &[(&'static str, &'static str)] = if req.claudectl {
                &[]
            } else {
                &[
                    (
                        "bus-forward",
                        "forward = true needs (mail to name@peer, SPEC §15)",
                    ),
                    (
                        "mutual-auth",
                        "allow_claudectl = false needs (docs/relay-protocol.md §2.1)",
                    ),
                    (
                        "frame-bin",
                        "allow_claudectl = false needs (docs/relay-protocol.md §3)",
                    ),
                ]
            };
            if let Some((feature, why)) = needs
                .iter()
                .find(|(f, _)| !r.features.iter().any(|x| x == f))
            {
                return Err(KeygenError::MissingFeature {
                    config: path.to_path_buf(),
                    feature,
                    why,
                });
            }
            (r.peer_id.clone(), r.listen)
        }
    };
    if local == req.peer {
        return Err(KeygenError::SameId(local));
    }
    if let Some(l) = listen {
        if l == peer_listen {
            return Err(KeygenError::SameAddress(l));
        }
        match (l.ip().is_loopback(), peer_listen.ip().is_loopback()) {
            (true, false) => {
                return Err(KeygenError::LoopbackMix {
                    loopback: "this hub's relay address",
                    other: "--peer-listen",
                })
            }
            (false, true) => {
                return Err(KeygenError::LoopbackMix {
                    loopback: "--peer-listen",
                    other: "this hub's relay address",
                })
            }
            _ => {}
        }
    }
    Ok(Plan {
        local,
        peer: req.peer.clone(),
        listen,
        peer_listen,
        has_relay: relay.is_some(),
        config_shown: None,
        key_abs: PathBuf::new(),
        key_in_config: String::new(),
        claudectl: req.claudectl,
    })
}

/// An address the other side can dial: IP:port, a port, a real IP.
fn dialable(what: &'static str, given: &str) -> Result<SocketAddr, KeygenError> {
    let addr: SocketAddr = given.parse().map_err(|_| KeygenError::BadAddress {
        what,
        given: given.to_owned(),
        why: "is not IP:PORT (e.g. 100.64.0.2:46111, or 127.0.0.1:46111 to try on one machine)",
    })?;
    dialable_addr(what, addr)
}

fn dialable_addr(what: &'static str, addr: SocketAddr) -> Result<SocketAddr, KeygenError> {
    let why = if addr.port() == 0 {
        "has port 0: the other hub dials this address, so it needs the real port"
    } else if addr.ip().is_unspecified() {
        "is not an address the other hub can dial: give the one it reaches this machine at (a tailnet or WireGuard IP)"
    } else {
        return Ok(addr);
    };
    Err(KeygenError::BadAddress {
        what,
        given: addr.to_string(),
        why,
    })
}

/// A TOML string holding `s`, quoted and escaped by the toml crate itself.
fn toml_str(s: &str) -> String {
    toml::Value::String(s.to_owned()).to_string()
}

/// A `[relay]` table for a hub with this id and listen address.
fn relay_table(id: &str, listen: SocketAddr) -> String {
    format!(
        "# The relay (docs/relay-setup.md): this hub is {id:?} to its peers.\n\
         [relay]\n\
         peer_id = {id:?}\n\
         listen = \"{listen}\"\n\
         heartbeat_interval_ms = {HEARTBEAT_INTERVAL_MS}\n\
         handshake_timeout_ms = {HANDSHAKE_TIMEOUT_MS}\n\
         reconnect_backoff_ms = {RECONNECT_BACKOFF_MS}\n\
         features = {FEATURES}\n\
         status_path = \"relay-status.json\"\n\n"
    )
}

/// A `[[relay.peers]]` entry for another agent-hub that exchanges mail with this one.
fn hub_peer(id: &str, address: Option<SocketAddr>, key_file: &str) -> String {
    let address = match address {
        Some(a) => format!("address = \"{a}\"\n"),
        None => format!("# No address: {id}'s relay only dials, so this hub waits for it.\n"),
    };
    format!(
        "# The hub {id:?}: mail to NAME@{id} goes there, and {id}'s mail comes here.\n\
         [[relay.peers]]\n\
         id = {id:?}\n\
         {address}\
         key_file = {}\n\
         allow_claudectl = false\n\
         forward = true\n",
        toml_str(key_file)
    )
}

/// The whole text after the "wrote" line.
fn render(p: &Plan) -> String {
    let this_config = p
        .config_shown
        .clone()
        .unwrap_or_else(|| "this hub's config.toml".to_owned());
    let (local, peer) = (p.local.as_str(), p.peer.as_str());
    let mut this_block = format!("# >>> {local}\n");
    match (p.has_relay, p.listen) {
        (false, Some(l)) => this_block.push_str(&relay_table(local, l)),
        _ => this_block.push_str(&format!(
            "# (the [relay] table of {this_config} stays as it is; this adds one peer)\n"
        )),
    }
    if p.claudectl {
        this_block.push_str(&format!(
            "# The claudectl relay {peer:?}: it speaks its own dialect (relay v0, or its v1 from\n\
             # 0.90), with no mutual authentication and no frame integrity: run this link only\n\
             # over WireGuard or a tailnet (docs/relay-protocol.md §12).\n\
             [[relay.peers]]\n\
             id = {peer:?}\n\
             address = \"{}\"\n\
             key_file = {}\n\
             allow_claudectl = true\n\
             # true (and a [tasks] table) runs the tasks {peer} delegates here.\n\
             delegate = false\n",
            p.peer_listen,
            toml_str(&p.key_in_config)
        ));
    } else {
        this_block.push_str(&hub_peer(peer, Some(p.peer_listen), &p.key_in_config));
    }
    this_block.push_str(&format!("# <<< {local}\n"));

    let key = p.key_abs.display();
    let check = format!(
        "Then start (or restart) both; `agent-hub-server relay peers --config {this_config}` shows\n\
         {peer} \"up\" once they have linked (docs/relay-setup.md, \"When it does not link\")."
    );
    if p.claudectl {
        return render_claudectl(p, &this_block, &this_config, &check);
    }
    let peer_block = format!(
        "# >>> {peer}\n\
         # If {peer}'s config already has a [relay] table, keep it and add only the\n\
         # [[relay.peers]] table below; its features must list \"bus-forward\", \"mutual-auth\"\n\
         # and \"frame-bin\".\n\
         {}{}# <<< {peer}\n",
        relay_table(peer, p.peer_listen),
        hub_peer(local, p.listen, &format!("keys/{local}.key")),
    );
    format!(
        "1. Add these lines to the end of {this_config}:\n\n\
         {this_block}\n\
         2. Copy the key file to {peer}, as keys/{local}.key in the folder of {peer}'s config.toml\n   \
            (folder mode 700, file mode 600), over a channel you trust; it is never printed. With\n   \
            PEERDIR that folder:\n   \
            on this machine:  mkdir -p -m 700 PEERDIR/keys && cp {key} PEERDIR/keys/{local}.key\n   \
            on another one:   ssh HOST 'mkdir -p -m 700 PEERDIR/keys' && scp -p {key} HOST:PEERDIR/keys/{local}.key\n\n\
         3. Add these lines to the end of {peer}'s config.toml:\n\n\
         {peer_block}\n\
         {check}\n\
         Mail crosses by address: `agent-hub send --to NAME@{peer} …` here, NAME@{local} there.\n"
    )
}

/// Steps 2 and 3 for a claudectl relay: its files, as claudectl 0.64 and 0.92 keep them
/// (docs/relay-protocol.md §13; scripts/claudectl-interop.sh writes the same).
fn render_claudectl(p: &Plan, this_block: &str, this_config: &str, check: &str) -> String {
    let (local, peer) = (p.local.as_str(), p.peer.as_str());
    let key = p.key_abs.display();
    let meta = match p.listen {
        Some(l) => format!(
            "   - where to reach this hub, for its `relay delegate` and `relay interrupt`:\n     \
               printf '{{\"addr\":\"{l}\",\"last_seen\":0}}' > ~/.claudectl/relay/peers/{local}.meta\n"
        ),
        None => format!(
            "   - (this hub's relay only dials, so {peer} cannot delegate to it or interrupt its tasks)\n"
        ),
    };
    format!(
        "1. Add these lines to the end of {this_config}:\n\n\
         {this_block}\n\
         2. On {peer}, the claudectl machine, as the user who runs its relay:\n   \
            - its peer id must be {peer:?}: `cat ~/.claudectl/relay/identity` (if it has none:\n     \
              printf '{peer}' > ~/.claudectl/relay/identity)\n   \
            - the key: copy {key} there over a channel you trust (it is never\n     \
              printed) and keep its 64 characters, without the newline, mode 600:\n     \
              mkdir -p -m 700 ~/.claudectl/relay/peers\n     \
              (umask 077; head -c 64 COPY-OF-THE-KEY-FILE > ~/.claudectl/relay/peers/{local}.key)\n\
         {meta}   \
            - its relay listens where this hub dials, in ~/.config/claudectl/config.toml:\n     \
              [relay]\n     \
              listen_addr = \"{}\"\n   \
            - then: claudectl relay serve --port {}\n\n\
         {check}\n",
        p.peer_listen.ip(),
        p.peer_listen.port(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(local: &str, listen: &str, peer: &str, peer_listen: &str) -> KeygenRequest {
        KeygenRequest {
            peer: peer.into(),
            local: Some(local.into()),
            listen: Some(listen.into()),
            peer_listen: peer_listen.into(),
            ..KeygenRequest::default()
        }
    }

    fn plan(r: &KeygenRequest) -> Plan {
        let mut p = settle(r, None).unwrap();
        p.key_abs = PathBuf::from("/srv/laptop/keys/mini.key");
        p.key_in_config = "keys/mini.key".into();
        p.config_shown = Some("laptop/config.toml".into());
        p
    }

    /// The lines between `# >>> id` and `# <<< id`, both included: what a person pastes.
    fn block(text: &str, id: &str) -> String {
        let start = text.find(&format!("# >>> {id}\n")).unwrap();
        let end_marker = format!("# <<< {id}\n");
        let end = text[start..].find(&end_marker).unwrap() + start + end_marker.len();
        text[start..end].to_owned()
    }

    const BASE: &str = "port = 0\naudit_log_path = \"a.jsonl\"\nservice_log_path = \"s.log\"\nroster_path = \"r.toml\"\n[store]\nkind = \"memory\"\n[limits]\nmax_line_bytes = 1048576\nmax_connections = 64\nhello_timeout_ms = 1000\nverb_timeout_ms = 1000\nwrite_timeout_ms = 1000\nqueue_max_envelopes = 10\nqueue_max_bytes = 100000\nhub_max_bytes = 1000000\nack_timeout_ms = 1000\nidempotency_window_secs = 10\nidempotency_max_ids = 10\n";

    #[test]
    fn both_blocks_load_as_configs_that_forward_to_each_other() {
        let text = render(&plan(&req(
            "laptop",
            "127.0.0.1:46111",
            "mini",
            "127.0.0.1:46121",
        )));
        let base = Path::new("/srv/laptop");
        let laptop = Config::parse(&format!("{BASE}\n{}", block(&text, "laptop")), base)
            .unwrap()
            .relay
            .unwrap();
        assert_eq!(laptop.peer_id, "laptop");
        assert_eq!(laptop.listen, Some("127.0.0.1:46111".parse().unwrap()));
        let p = &laptop.peers[0];
        assert_eq!(
            (p.id.as_str(), p.forward, p.allow_claudectl),
            ("mini", true, false)
        );
        assert_eq!(p.address, Some("127.0.0.1:46121".parse().unwrap()));
        assert_eq!(p.key_file, Path::new("/srv/laptop/keys/mini.key"));
        let mini = Config::parse(
            &format!("{BASE}\n{}", block(&text, "mini")),
            Path::new("/srv/mini"),
        )
        .unwrap()
        .relay
        .unwrap();
        assert_eq!(mini.peer_id, "mini");
        assert_eq!(mini.listen, Some("127.0.0.1:46121".parse().unwrap()));
        let q = &mini.peers[0];
        assert_eq!((q.id.as_str(), q.forward), ("laptop", true));
        assert_eq!(q.address, Some("127.0.0.1:46111".parse().unwrap()));
        assert_eq!(q.key_file, Path::new("/srv/mini/keys/laptop.key"));
        for r in [&laptop, &mini] {
            assert!(r.features.iter().any(|f| f == "bus-forward"));
        }
    }

    #[test]
    fn the_key_is_never_in_the_text_and_the_copy_names_both_paths() {
        let text = render(&plan(&req(
            "laptop",
            "100.64.0.2:46111",
            "mini",
            "100.64.0.3:46111",
        )));
        assert!(text.contains("cp /srv/laptop/keys/mini.key PEERDIR/keys/laptop.key"));
        assert!(text.contains("relay peers --config laptop/config.toml"));
        assert!(!text.contains("THIS-HUB") && !text.contains("PEER-RELAY-IP"));
    }

    #[test]
    fn a_config_with_relay_gets_the_peer_entry_only() {
        let r = Config::parse(
            &format!(
                "{BASE}\n[relay]\npeer_id = \"laptop\"\nlisten = \"100.64.0.2:46111\"\nheartbeat_interval_ms = 1000\nhandshake_timeout_ms = 1000\nreconnect_backoff_ms = [100]\nfeatures = {FEATURES}\nstatus_path = \"st.json\"\n"
            ),
            Path::new("/srv/laptop"),
        )
        .unwrap()
        .relay
        .unwrap();
        let cfg = Path::new("laptop/config.toml");
        let mut ask = KeygenRequest {
            peer: "mini".into(),
            peer_listen: "100.64.0.3:46111".into(),
            ..KeygenRequest::default()
        };
        let mut p = settle(&ask, Some((cfg, &r))).unwrap();
        assert_eq!(p.local, "laptop");
        assert!(p.has_relay);
        p.key_in_config = "keys/mini.key".into();
        let text = render(&p);
        let mine = block(&text, "laptop");
        assert!(!mine.contains("[relay]\n"), "{mine}");
        // Appended to that config, it loads.
        let full = format!(
            "{BASE}\n[relay]\npeer_id = \"laptop\"\nlisten = \"100.64.0.2:46111\"\nheartbeat_interval_ms = 1000\nhandshake_timeout_ms = 1000\nreconnect_backoff_ms = [100]\nfeatures = {FEATURES}\nstatus_path = \"st.json\"\n{mine}"
        );
        let again = Config::parse(&full, Path::new("/srv/laptop"))
            .unwrap()
            .relay
            .unwrap();
        assert_eq!(again.peers[0].id, "mini");

        ask.local = Some("other".into());
        let e = settle(&ask, Some((cfg, &r))).unwrap_err().to_string();
        assert!(e.contains("relay.peer_id = \"laptop\""), "{e}");
        ask.local = None;
        ask.listen = Some("100.64.0.2:1".into());
        let e = settle(&ask, Some((cfg, &r))).unwrap_err().to_string();
        assert!(e.contains("relay.listen"), "{e}");
    }

    #[test]
    fn a_config_without_the_features_a_hub_peer_needs_is_named() {
        let r = Config::parse(
            &format!(
                "{BASE}\n[relay]\npeer_id = \"laptop\"\nlisten = \"100.64.0.2:46111\"\nheartbeat_interval_ms = 1000\nhandshake_timeout_ms = 1000\nreconnect_backoff_ms = [100]\nfeatures = [\"unknown-ok\", \"mutual-auth\", \"frame-bin\"]\nstatus_path = \"st.json\"\n\n[[relay.peers]]\nid = \"old\"\nkey_file = \"k\"\nallow_claudectl = false\n"
            ),
            Path::new("/srv/laptop"),
        )
        .unwrap()
        .relay
        .unwrap();
        let cfg = Path::new("laptop/config.toml");
        let mut ask = KeygenRequest {
            peer: "mini".into(),
            peer_listen: "100.64.0.3:46111".into(),
            ..KeygenRequest::default()
        };
        let e = settle(&ask, Some((cfg, &r))).unwrap_err().to_string();
        assert!(e.contains("\"bus-forward\""), "{e}");
        // A claudectl peer needs none of them.
        ask.claudectl = true;
        assert!(settle(&ask, Some((cfg, &r))).is_ok());
        ask.peer = "old".into();
        let e = settle(&ask, Some((cfg, &r))).unwrap_err().to_string();
        assert!(e.contains("already lists peer \"old\""), "{e}");
    }

    #[test]
    fn addresses_a_peer_cannot_dial_are_refused() {
        let cases = [
            (("127.0.0.1:46111", "127.0.0.1:0"), "port 0"),
            (("0.0.0.0:46111", "100.64.0.3:1"), "tailnet"),
            (("127.0.0.1:46111", "100.64.0.3:46111"), "loopback"),
            (("100.64.0.2:46111", "[::1]:46111"), "loopback"),
            (("127.0.0.1:46111", "127.0.0.1:46111"), "its own address"),
            (("laptop:46111", "127.0.0.1:1"), "not IP:PORT"),
        ];
        for ((listen, peer_listen), needle) in cases {
            let e = settle(&req("laptop", listen, "mini", peer_listen), None)
                .unwrap_err()
                .to_string();
            assert!(e.contains(needle), "{listen} {peer_listen}: {e}");
        }
        let e = settle(&req("mini", "127.0.0.1:1", "mini", "127.0.0.1:2"), None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("own peer id"), "{e}");
        let mut r = req("laptop", "127.0.0.1:1", "mini", "127.0.0.1:2");
        r.local = None;
        assert!(matches!(settle(&r, None), Err(KeygenError::NoLocal)));
        let mut r = req("laptop", "127.0.0.1:1", "mini", "127.0.0.1:2");
        r.listen = None;
        assert!(matches!(settle(&r, None), Err(KeygenError::NoListen)));
    }

    #[test]
    fn key_file_is_relative_under_the_config_folder_else_absolute() {
        let dir = Path::new("/srv/laptop");
        assert_eq!(
            config_value(Path::new("/srv/laptop/keys/mini.key"), Some(dir)).unwrap(),
            "keys/mini.key"
        );
        assert_eq!(
            config_value(Path::new("/srv/keys/mini.key"), Some(dir)).unwrap(),
            "/srv/keys/mini.key"
        );
        assert_eq!(
            config_value(Path::new("/srv/laptop/keys/mini.key"), None).unwrap(),
            "/srv/laptop/keys/mini.key"
        );
        // A path TOML must escape is quoted by the toml crate and reads back the same.
        let odd = "/srv/a \"b\"\\c/k.key";
        let v: toml::Value = toml::from_str(&format!("k = {}", toml_str(odd))).unwrap();
        assert_eq!(v["k"].as_str(), Some(odd));
    }

    #[test]
    fn a_claudectl_peer_gets_its_dialect_and_its_own_files() {
        let mut r = req("laptop", "127.0.0.1:46111", "ctl", "127.0.0.1:9847");
        r.claudectl = true;
        let text = render(&plan(&r));
        let mine = block(&text, "laptop");
        let relay = Config::parse(&format!("{BASE}\n{mine}"), Path::new("/srv/laptop"))
            .unwrap()
            .relay
            .unwrap();
        let p = &relay.peers[0];
        assert!(p.allow_claudectl && !p.forward && !p.delegate);
        assert_eq!(p.address, Some("127.0.0.1:9847".parse().unwrap()));
        assert!(!text.contains("# >>> ctl"));
        for needle in [
            "head -c 64 COPY-OF-THE-KEY-FILE > ~/.claudectl/relay/peers/laptop.key",
            "printf '{\"addr\":\"127.0.0.1:46111\",\"last_seen\":0}' > ~/.claudectl/relay/peers/laptop.meta",
            "listen_addr = \"127.0.0.1\"",
            "claudectl relay serve --port 9847",
        ] {
            assert!(text.contains(needle), "{needle}\n{text}");
        }
    }
}
