//! Server startup (SPEC §7): config, service log, roster, audit log, listener, signals, in
//! that order. Each failure names its stage and cause; the caller prints it and exits 1.
//!
//! Owns the checks on the operator's files (modes, paths; the mode check itself is
//! `event_loop::private_file`'s, which SIGHUP's roster reload and the relay's key files share)
//! and binding to loopback only. It stands above the event loop: it builds the `Server` and
//! hands it what was read here.

use crate::event_loop::environment::HubEnv;
use crate::event_loop::os_ids::OsIds;
use crate::event_loop::private_file::{read_roster, FileCheckError};
use crate::event_loop::records::{self, cut_torn_tail, open_chain, open_record_file, Records};
use crate::event_loop::signal::Signals;
use crate::event_loop::Server;
use crate::store::sqlite::Sqlite;
use crate::store::{Memory, Store};
use agent_hub_host::config::{Config, StoreConfig};
use agent_hub_proto::hub::Hub;
use agent_hub_proto::kernel::now::Now;
use std::fmt;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;

/// A fatal startup error: which stage failed and why.
#[derive(Debug)]
pub struct StartupError {
    pub stage: &'static str,
    pub cause: String,
}

impl fmt::Display for StartupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "startup failed at {}: {}", self.stage, self.cause)
    }
}

impl std::error::Error for StartupError {}

fn fail<E: fmt::Display>(stage: &'static str) -> impl FnOnce(E) -> StartupError {
    move |e| StartupError {
        stage,
        cause: e.to_string(),
    }
}

/// A started server and the address it listens on.
pub struct Started {
    pub server: Server,
    pub addr: SocketAddr,
    /// Where the relay listens, when it is configured to.
    pub relay_addr: Option<SocketAddr>,
}

/// A roster error's text, with the command that fixes it when the roster names nobody yet or
/// is not there at all: the state of every first setup (README, "Running the server
/// yourself"; issue 35). The config is named as the operator gave it, so the command runs
/// from where the hub was started.
fn with_first_agent_hint(e: FileCheckError, config_path: &Path) -> String {
    let first_setup = match &e {
        FileCheckError::Roster(r) => r.names_nobody(),
        FileCheckError::Unreadable { error, .. } => error.kind() == std::io::ErrorKind::NotFound,
        FileCheckError::NotPrivate { .. } => false,
    };
    if !first_setup {
        return e.to_string();
    }
    let word = agent_hub_host::agents::argv::shell_word(&config_path.to_string_lossy());
    format!("{e}; {}", agent_hub_proto::roster::add_agent_hint(&word))
}

/// Makes this process non-dumpable (prctl `PR_SET_DUMPABLE` 0, issue 29): a process of the
/// same user that is not root (a delegated agent run without a sandbox, any local program of
/// the hub's user) can then no longer read `/proc/<hub>/environ`, `mem`, `fd` or `cwd`, nor
/// ptrace the hub, and no core dump holds the roster. `/proc/<hub>/cmdline` stays readable:
/// it carries `--config PATH` and nothing secret. Returns whether it took.
pub fn make_undumpable() -> bool {
    // SAFETY: prctl with integer arguments only.
    unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) == 0 }
}

/// Loads everything and binds. With `install_signals` the process's SIGTERM/SIGINT handlers
/// are taken over (the binary); tests pass false.
pub fn start(config_path: &Path, install_signals: bool) -> Result<Started, StartupError> {
    let undumpable = install_signals && make_undumpable();
    let config = Config::load(config_path).map_err(fail("config"))?;
    let service = open_record_file(&config.service_log_path)
        .map_err(|e| {
            format!(
                "cannot open service log {}: {e}",
                config.service_log_path.display()
            )
        })
        .map_err(fail("service log"))?;
    let audit_result = open_record_file(&config.audit_log_path).map_err(|e| {
        format!(
            "cannot open audit log {}: {e}",
            config.audit_log_path.display()
        )
    });
    // The service log is open from here on; later failures are written to it as well.
    let mut records = Records::new(Box::new(audit_placeholder()), Box::new(service));
    // The pid is here for `agent-hub-server roster`, which finds the running hub to reload:
    // a non-dumpable hub's /proc cwd cannot be read, so a relative --config is matched by
    // this line instead (admin::running).
    records.log(
        "INFO",
        &format!(
            "agent-hub-server {} starting; pid {}; config {}{}",
            agent_hub_proto::VERSION,
            std::process::id(),
            config_path.display(),
            if undumpable { "; not dumpable" } else { "" }
        ),
    );
    match start_rest(
        &config,
        config_path,
        audit_result,
        &mut records,
        install_signals,
    ) {
        Ok((listener, addr, signals, hub, store)) => {
            let mut server = Server::new(
                listener,
                signals,
                hub,
                config.limits.clone(),
                records,
                store,
            )
            .map_err(fail("event loop"))?;
            server.set_roster_path(config.roster_path.clone());
            // HOME, PATH, $AGENT_HUB_AGENTS_DIR, the variables `tasks.env_pass` chooses from
            // and this program's path are read here, once: the executor, the relay's agent
            // cards and every manifests reload use what was read now.
            let env =
                HubEnv::from_process(config.tasks.as_ref().and_then(|t| t.manifests_dir.clone()));
            server.set_agent_env(env.agents.clone());
            if config.tasks.is_none() {
                server.warn_stored_tasks();
            }
            if config.tasks.is_some() {
                // The agent catalogue too: a SIGHUP reads the same folders again (`manifests`).
                let reg = env.agents.sources.load();
                if let Err(cause) = server.start_tasks(&config, config_path, addr.port(), &env, reg)
                {
                    let e = StartupError {
                        stage: "tasks",
                        cause: cause.to_string(),
                    };
                    server.records().log("ERROR", &e.to_string());
                    server.records().flush_service();
                    return Err(e);
                }
            }
            let relay_addr = match config.relay.clone() {
                None => None,
                Some(relay) => {
                    let peer_id = relay.peer_id.clone();
                    match server.start_relay(relay) {
                        Ok(a) => {
                            let at = a.map_or("(dialling only)".to_owned(), |a| a.to_string());
                            server.records().log(
                                "INFO",
                                &format!("relay started as {peer_id}, listening on {at}"),
                            );
                            server.records().flush_service();
                            a
                        }
                        Err(cause) => {
                            let e = StartupError {
                                stage: "relay",
                                cause: cause.to_string(),
                            };
                            server.records().log("ERROR", &e.to_string());
                            server.records().flush_service();
                            return Err(e);
                        }
                    }
                }
            };
            Ok(Started {
                server,
                addr,
                relay_addr,
            })
        }
        Err(e) => {
            records.log("ERROR", &e.to_string());
            records.flush_service();
            Err(e)
        }
    }
}

/// What the stages after the service log hand the server: the client listener and its
/// address, the signal pipe, the hub on the roster with what the store held, and the store.
type Stages = (
    mio::net::TcpListener,
    SocketAddr,
    Option<Signals>,
    Hub,
    Box<dyn Store>,
);

fn start_rest(
    config: &Config,
    config_path: &Path,
    audit: Result<std::fs::File, String>,
    records: &mut Records,
    install_signals: bool,
) -> Result<Stages, StartupError> {
    let roster = read_roster(&config.roster_path)
        .map_err(|e| with_first_agent_hint(e, config_path))
        .map_err(fail("roster"))?;
    records.log(
        "INFO",
        &format!("roster loaded: {} agents", roster.names().len()),
    );
    let audit = audit.map_err(fail("audit log"))?;
    match cut_torn_tail(&config.audit_log_path, &audit) {
        Ok(0) => {}
        Ok(n) => {
            let msg = format!(
                "audit log ended in a partial record ({n} bytes, from a crash during a write); \
                 cut back to its last complete line"
            );
            records.log("WARN", &msg);
        }
        Err(e) => records.log(
            "WARN",
            &format!("cannot check the audit log for a partial last record: {e}"),
        ),
    }
    let (chain, notes) = open_chain(&config.audit_log_path, &audit)
        .map_err(|e| {
            format!(
                "cannot read the last record of {} to continue its hash chain: {e}",
                config.audit_log_path.display()
            )
        })
        .map_err(fail("audit log"))?;
    for (level, line) in notes {
        records.log(level, &line);
    }
    let (mut store, what): (Box<dyn Store>, String) = match &config.store {
        StoreConfig::Memory => (
            Box::new(Memory),
            "in memory (queues do not survive a restart)".into(),
        ),
        StoreConfig::Sqlite {
            path,
            max_bytes,
            sync,
        } => (
            Box::new(Sqlite::open_with(path, *max_bytes, *sync).map_err(fail("store"))?),
            format!("SQLite at {} (cap {max_bytes} bytes)", path.display()),
        ),
    };
    // The rows go straight from the store's cursor into the hub's queues and ledger, with no
    // owned copy of the whole store in between (docs/performance.md "How cost grows with
    // work", "Restart").
    let now = Now {
        mono: std::time::Instant::now(),
        wall: chrono::Utc::now(),
    };
    let mut hub = Hub::new(roster, config.limits.clone(), Box::new(OsIds))
        .with_durable(store.is_durable())
        .with_operators(config.operators.clone())
        .with_leases(config.leases.clone());
    let mut sink = hub.restoring(now);
    store.load_rows(&mut sink).map_err(fail("store"))?;
    let (envelopes, ids) = sink.counts();
    records.log(
        "INFO",
        &format!("queue store {what}: {envelopes} envelopes and {ids} remembered ids restored"),
    );
    raise_fd_limit(records);
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, config.port));
    let listener = mio::net::TcpListener::bind(addr)
        .map_err(|e| format!("cannot bind {addr}: {e}"))
        .map_err(fail("listen"))?;
    let addr = listener.local_addr().map_err(fail("listen"))?;
    let signals = if install_signals {
        Some(Signals::install().map_err(fail("signals"))?)
    } else {
        None
    };
    records.set_audit(Box::new(audit), chain);
    records.log("INFO", &format!("limits: {:?}", config.limits));
    records.log("INFO", &format!("listener bound {addr}; hub ready"));
    records.flush_service();
    Ok((listener, addr, signals, hub, store))
}

/// A sink for the moment before the audit log is open; nothing is ever written to it.
fn audit_placeholder() -> std::io::Sink {
    std::io::sink()
}

impl records::Sink for std::io::Sink {
    fn append(&mut self, _bytes: &[u8]) -> std::io::Result<()> {
        Ok(())
    }
    fn truncate(&mut self, _len: u64) -> std::io::Result<()> {
        Ok(())
    }
    fn len(&mut self) -> std::io::Result<u64> {
        Ok(0)
    }
}

/// Parked awaits each hold a descriptor; take the hard limit so the connection cap, not the
/// default soft limit of 1024, decides how many there can be.
fn raise_fd_limit(records: &mut Records) {
    // SAFETY: getrlimit/setrlimit with a valid pointer to a local rlimit struct.
    unsafe {
        let mut lim: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            let old = lim.rlim_cur;
            lim.rlim_cur = lim.rlim_max;
            if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) == 0 {
                records.log(
                    "INFO",
                    &format!(
                        "file descriptor limit raised from {old} to {}",
                        lim.rlim_max
                    ),
                );
            }
        }
    }
}
