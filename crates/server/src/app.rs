//! `agent-hub-server`: the hub process (SPEC §7); `demo`, which writes (or reuses) a working
//! config, roster and tokens in a folder and runs the hub on them (`admin::demo`); `roster`,
//! which adds, removes and rotates agents of a hub's roster and has the running hub reload
//! it (`admin::roster`, docs/operations.md "Changing the roster"); `reload`, which has the
//! running hub read its roster and agent manifests again (`admin::reload`); `relay keygen`,
//! which writes a link's key and prints both hubs' config lines (`admin::keygen`,
//! docs/relay-setup.md), and `relay peers`; `example-config`, which prints the example config
//! a hand-made config.toml starts from (README, "Running the server yourself").
//!
//! Exit codes: 0 after a clean shutdown (SIGTERM/SIGINT); 1 a fatal startup or runtime
//! error (stderr and the service log say which stage); 2 usage errors. `audit verify`: 0 the
//! chain holds, 1 it breaks (the first broken record is named), 2 usage or an unreadable
//! file (docs/operations.md, "Verifying the audit log"). `roster`: 0 done, 1 refused or
//! failed (the message says why; a running hub that refused the new roster is a failure).
//! `reload`: 0 the hub took both, 1 it refused either, said nothing in time or runs nowhere.
//! `relay keygen` and `relay peers`: 0 done, 1 refused or failed (nothing written).

use crate::admin::{demo, keygen, roster};
use crate::startup;
use clap::{Parser, Subcommand};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "agent-hub-server",
    version,
    about = "The agent-hub server: loopback-only message hub"
)]
struct Cli {
    /// Path to the config file (see config.example.toml).
    #[arg(long, value_name = "PATH")]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Relay helpers: make a peer key, list the running hub's peers.
    #[command(subcommand)]
    Relay(RelayCommand),
    /// Audit log tools.
    #[command(subcommand)]
    Audit(AuditCommand),
    /// Create (or reuse) a demo hub in DIR: config, roster, two agents' tokens; then run it.
    Demo {
        /// Folder for the demo's files; created if missing.
        dir: PathBuf,
        /// Port on 127.0.0.1 (default 24610 for a new folder; an existing folder keeps its
        /// stored port unless this is given, which rewrites it; 0 takes a free port and
        /// stores the one the hub got).
        #[arg(long)]
        port: Option<u16>,
        /// Keep queues in memory (a restart empties them) instead of SQLite in DIR; only
        /// for a new folder.
        #[arg(long)]
        memory: bool,
        /// Install the hub into every agent CLI found on PATH, each with its own identity
        /// (`agent-hub install`).
        #[arg(long)]
        install: bool,
    },
    /// Add, remove or rotate an agent on the roster; the running hub reloads it (SIGHUP).
    #[command(subcommand)]
    Roster(RosterCommand),
    /// Have the hub running from a config read its roster and agent manifests again (SIGHUP)
    /// and print what it says; exit 1 if it refused either or runs nowhere.
    Reload {
        /// The hub's config file.
        #[arg(long, value_name = "PATH")]
        config: Option<PathBuf>,
    },
    /// Print the example config (config.example.toml, every key commented) to start a
    /// config.toml from.
    ExampleConfig {
        /// Write this port instead of the example's 46110 (0: the hub takes a free port and
        /// prints it).
        #[arg(long)]
        port: Option<u16>,
    },
}

#[derive(Subcommand)]
enum RosterCommand {
    /// Add NAME with a new token in tokens/NAME.token (mode 600) beside the roster.
    Add(RosterArgs),
    /// Remove NAME (and its token file); its queued mail stays.
    Remove(RosterArgs),
    /// Give NAME a new token, in its token file and the roster.
    Rotate(RosterArgs),
    /// Print the roster's names and their token files (never tokens).
    List {
        /// The hub's config file (its roster_path is used).
        #[arg(long, value_name = "PATH")]
        config: Option<PathBuf>,
    },
}

#[derive(clap::Args)]
struct RosterArgs {
    /// The agent's name.
    name: String,
    /// The hub's config file (its roster_path is used).
    #[arg(long, value_name = "PATH")]
    config: Option<PathBuf>,
    /// Do not send SIGHUP to the hub running from this config.
    #[arg(long)]
    no_reload: bool,
}

#[derive(Subcommand)]
enum RelayCommand {
    /// Link with another hub: write a new 32-byte key for PEER (mode 600, in a folder made
    /// mode 700) and print the config lines for both hubs and how to copy the key
    /// (docs/relay-setup.md).
    Keygen {
        /// The other hub's peer id (its relay.peer_id).
        #[arg(long, value_name = "ID")]
        peer: String,
        /// The other hub's relay address, which this hub dials (e.g. its tailnet IP:port).
        #[arg(long, value_name = "IP:PORT")]
        peer_listen: String,
        /// This hub's config file: the key goes to keys/PEER.key beside it (unless --key-file
        /// says otherwise), and the printed key_file is relative to its folder. If it has a
        /// [relay] table already, only the new peer entry is printed for it.
        #[arg(long, value_name = "PATH")]
        config: Option<PathBuf>,
        /// This hub's peer id (the name the other hub knows it by); default: --config's.
        #[arg(long, value_name = "ID")]
        local: Option<String>,
        /// This hub's relay address, which the other hub dials; default: --config's.
        #[arg(long, value_name = "IP:PORT")]
        listen: Option<String>,
        /// Where to write the key (relative to this shell's folder); printed as an absolute
        /// path unless it lies under --config's folder. Refused if the file exists (see --force).
        #[arg(long, value_name = "FILE")]
        key_file: Option<PathBuf>,
        /// The other side is a claudectl relay (0.64 or 0.90+), not an agent-hub: its own
        /// dialect, no forwarding, and its files instead of a config block.
        #[arg(long)]
        claudectl: bool,
        /// Replace an existing key file (the other side needs the new copy too).
        #[arg(long)]
        force: bool,
    },
    /// Print the running hub's relay peers (state, features, last heartbeat, bytes, reconnects).
    Peers {
        /// The hub's config file (its [relay] status_path is read).
        #[arg(long, value_name = "PATH")]
        config: PathBuf,
    },
}

#[derive(Subcommand)]
enum AuditCommand {
    /// Check the hash chain of audit log files: prints OK with the record count and the head
    /// hash, or the first record where the chain breaks and why. Exit 0 the chain holds, 1 it
    /// breaks, 2 usage error or a file that cannot be read.
    Verify {
        /// Audit log files, oldest first (a rotated file before the one that followed it).
        #[arg(required = true, value_name = "PATH")]
        paths: Vec<PathBuf>,
        /// A record hash kept somewhere else (the service log's "audit chain head at stop"
        /// line, the head an earlier verify printed): that record must be in the files.
        #[arg(long, value_name = "SHA256")]
        anchor: Vec<String>,
    },
}

/// The program: parses argv, runs the command, returns its exit code (above).
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let (config, demo) = match (cli.command, cli.config) {
        (Some(Command::Relay(cmd)), top) => return relay_command(cmd, top),
        (Some(Command::Audit(AuditCommand::Verify { paths, anchor })), _) => {
            return audit_verify(&paths, &anchor)
        }
        (Some(Command::Roster(cmd)), top) => return roster_command(cmd, top),
        (Some(Command::Reload { config }), top) => return reload_command(config.or(top)),
        (Some(Command::ExampleConfig { port }), _) => return example_config(port),
        (
            Some(Command::Demo {
                dir,
                port,
                memory,
                install,
            }),
            _,
        ) => {
            let opts = demo::DemoOptions {
                dir,
                port,
                memory,
                install,
            };
            match demo::prepare(&opts) {
                Ok(p) => (p.config.clone(), Some(p)),
                Err(e) => {
                    eprintln!("agent-hub-server: demo setup failed: {e}");
                    return ExitCode::from(1);
                }
            }
        }
        (None, Some(config)) => (config, None),
        (None, None) => {
            eprintln!(
                "agent-hub-server: --config PATH is required (or use: agent-hub-server demo DIR)"
            );
            return ExitCode::from(2);
        }
    };
    serve(&config, demo)
}

fn serve(config: &Path, demo: Option<demo::Prepared>) -> ExitCode {
    let mut started = match startup::start(config, true) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("agent-hub-server: {e}");
            if let Some(p) = &demo {
                demo::abandon(p, Some(e.stage));
            }
            return ExitCode::from(1);
        }
    };
    if let Some(p) = &demo {
        if let Err(e) = demo::after_bind(p, started.addr.port()) {
            eprintln!("agent-hub-server: demo: {e}");
            started.server.records().log("ERROR", &format!("demo: {e}"));
            started.server.records().flush_service();
            demo::abandon(p, None);
            return ExitCode::from(1);
        }
    }
    if let Some(relay) = started.relay_addr {
        say(format_args!("agent-hub-server: relay listening on {relay}"));
    }
    say(format_args!(
        "agent-hub-server: listening on {}; hub ready",
        started.addr
    ));
    match started.server.run() {
        Ok(()) => {
            // Everything is committed, flushed and logged; the rest of the server (store,
            // logs, threads) still closes in order as it is dropped.
            started.server.forget_held_at_exit();
            ExitCode::SUCCESS
        }
        Err(e) => {
            started.server.records().log("ERROR", &e.to_string());
            started.server.records().flush_service();
            eprintln!("agent-hub-server: {e}");
            ExitCode::from(1)
        }
    }
}

/// Writes one line to stdout, ignoring failure. Nobody reading stdout (a supervisor that
/// closed the pipe after learning the port) must not kill a running hub: `println!` would
/// panic on the broken pipe. The service log is the durable record of readiness.
fn say(line: std::fmt::Arguments<'_>) {
    let mut out = std::io::stdout().lock();
    let _ = out
        .write_fmt(line)
        .and_then(|()| out.write_all(b"\n"))
        .and_then(|()| out.flush());
}

/// `reload`: 0 both reloads in force, 1 refused, silent or no hub, 2 no `--config`.
fn reload_command(config: Option<PathBuf>) -> ExitCode {
    let Some(config) = config else {
        eprintln!("agent-hub-server: reload: --config PATH is required (the hub's config file)");
        return ExitCode::from(2);
    };
    match crate::admin::reload::reload_command(&config) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("agent-hub-server: reload: {e}");
            ExitCode::from(1)
        }
    }
}

/// `example-config`: the example on stdout; 1 when it cannot be written there.
fn example_config(port: Option<u16>) -> ExitCode {
    let text = match demo::example_config(port) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("agent-hub-server: example-config: {e}");
            return ExitCode::from(1);
        }
    };
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("agent-hub-server: example-config: cannot write to stdout: {e}");
            ExitCode::from(1)
        }
    }
}

fn roster_command(cmd: RosterCommand, top: Option<PathBuf>) -> ExitCode {
    match cmd {
        RosterCommand::Add(a) => with_layout(a.config.or(top), |l| {
            roster::add_command(l, &a.name, !a.no_reload)
        }),
        RosterCommand::Remove(a) => with_layout(a.config.or(top), |l| {
            roster::remove_command(l, &a.name, !a.no_reload)
        }),
        RosterCommand::Rotate(a) => with_layout(a.config.or(top), |l| {
            roster::rotate_command(l, &a.name, !a.no_reload)
        }),
        RosterCommand::List { config } => with_layout(config.or(top), roster::list),
    }
}

fn with_layout(
    config: Option<PathBuf>,
    run: impl FnOnce(&roster::Layout) -> Result<(), roster::RosterError>,
) -> ExitCode {
    let Some(config) = config else {
        eprintln!("agent-hub-server: roster: --config PATH is required (the hub's config file)");
        return ExitCode::from(2);
    };
    match roster::Layout::of(&config).and_then(|l| run(&l)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("agent-hub-server: roster: {e}");
            ExitCode::from(1)
        }
    }
}

fn relay_command(cmd: RelayCommand, top: Option<PathBuf>) -> ExitCode {
    // Each command's own error, boxed only to be printed.
    let result: Result<(), Box<dyn std::error::Error>> = match cmd {
        RelayCommand::Keygen {
            peer,
            peer_listen,
            config,
            local,
            listen,
            key_file,
            claudectl,
            force,
        } => keygen::run(&keygen::KeygenRequest {
            peer,
            local,
            config: config.or(top),
            key_file,
            listen,
            peer_listen,
            claudectl,
            force,
        })
        .map_err(Into::into),
        RelayCommand::Peers { config } => {
            agent_hub_host::relay_status::print_peers(&config).map_err(Into::into)
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("agent-hub-server: {e}");
            ExitCode::from(1)
        }
    }
}

fn audit_verify(paths: &[PathBuf], anchors: &[String]) -> ExitCode {
    use crate::event_loop::audit_chain::{hex, parse_hex, verify_files};
    let mut expected = Vec::new();
    for a in anchors {
        match parse_hex(&a.to_ascii_lowercase()) {
            Some(h) => expected.push((h, format!("--anchor {a}"))),
            None => {
                eprintln!("agent-hub-server: audit verify: --anchor {a:?} is not a SHA-256 hex digest (64 hex digits)");
                return ExitCode::from(2);
            }
        }
    }
    match verify_files(paths, &expected) {
        Err(e) => {
            eprintln!("agent-hub-server: audit verify: {e}");
            ExitCode::from(2)
        }
        Ok(Err(b)) => {
            let file = paths
                .get(b.file)
                .map_or("?".into(), |p| p.display().to_string());
            say(format_args!("BROKEN at {file} line {}: {}", b.line, b.why));
            ExitCode::from(1)
        }
        Ok(Ok(s)) => {
            let files = if paths.len() == 1 { "file" } else { "files" };
            say(format_args!(
                "OK: {} records in {} {files} ({} chained, {} from before audit format 3)",
                s.records,
                paths.len(),
                s.chained,
                s.legacy
            ));
            if let Some(h) = s.head {
                say(format_args!("head sha256 {}", hex(&h)));
            }
            for n in &s.notes {
                say(format_args!("note: {n}"));
            }
            ExitCode::SUCCESS
        }
    }
}
