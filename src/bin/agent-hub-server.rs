//! `agent-hub-server`: the hub process (SPEC §7), and `demo`, which writes a working
//! config, roster and tokens into a folder and runs the hub on them.
//!
//! Exit codes: 0 after a clean shutdown (SIGTERM/SIGINT); 1 a fatal startup or runtime
//! error (stderr and the service log say which stage); 2 usage errors. `audit verify`: 0 the
//! chain holds, 1 it breaks (the first broken record is named), 2 usage or an unreadable
//! file (docs/operations.md, "Verifying the audit log").

use agent_hub::server::startup;
use clap::{Parser, Subcommand};
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
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
        /// Port on 127.0.0.1 for a new demo config.
        #[arg(long, default_value_t = 46110)]
        port: u16,
    },
}

#[derive(Subcommand)]
enum RelayCommand {
    /// Write a new 32-byte key for PEER (mode 600) and print the config lines for both hubs.
    Keygen {
        /// The peer this key links with.
        #[arg(long)]
        peer: String,
        /// Where to write the key; refused if the file exists.
        #[arg(long, value_name = "FILE")]
        key_file: PathBuf,
        /// This hub's own peer id, for the lines printed for the other machine.
        #[arg(long, value_name = "ID")]
        local: Option<String>,
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

fn main() -> ExitCode {
    let cli = Cli::parse();
    let (config, demo) = match (cli.command, cli.config) {
        (Some(Command::Relay(cmd)), _) => return relay_command(cmd),
        (Some(Command::Audit(AuditCommand::Verify { paths, anchor })), _) => {
            return audit_verify(&paths, &anchor)
        }
        (Some(Command::Demo { dir, port }), _) => match write_demo(&dir, port) {
            Ok(path) => (path, true),
            Err(e) => {
                eprintln!("agent-hub-server: demo setup failed: {e}");
                return ExitCode::from(1);
            }
        },
        (None, Some(config)) => (config, false),
        (None, None) => {
            eprintln!(
                "agent-hub-server: --config PATH is required (or use: agent-hub-server demo DIR)"
            );
            return ExitCode::from(2);
        }
    };
    serve(&config, demo)
}

fn serve(config: &Path, demo: bool) -> ExitCode {
    let mut started = match startup::start(config, true) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("agent-hub-server: {e}");
            return ExitCode::from(1);
        }
    };
    if demo {
        print_demo_help(
            config.parent().unwrap_or(Path::new(".")),
            started.addr.port(),
        );
    }
    if let Some(relay) = started.relay_addr {
        say(format_args!("agent-hub-server: relay listening on {relay}"));
    }
    say(format_args!(
        "agent-hub-server: listening on {}; hub ready",
        started.addr
    ));
    match started.server.run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            started.server.records().log("ERROR", &e.to_string());
            started.server.records().flush_service();
            eprintln!("agent-hub-server: {e}");
            ExitCode::from(1)
        }
    }
}

const DEMO_AGENTS: [&str; 2] = ["orchestrator", "worker"];

/// Writes the demo files unless a config is already there; returns the config path.
fn write_demo(dir: &Path, port: u16) -> std::io::Result<PathBuf> {
    std::fs::create_dir_all(dir.join("tokens"))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    std::fs::set_permissions(dir.join("tokens"), std::fs::Permissions::from_mode(0o700))?;
    let dir = std::fs::canonicalize(dir)?;
    let config = dir.join("config.toml");
    if !config.exists() {
        let example = include_str!("../../config.example.toml");
        let mut text = example.replace("port = 46110", &format!("port = {port}"));
        text.push_str(&demo_tasks_table(&std::env::current_dir()?)?);
        write_private(&config, &text)?;
        let mut roster = String::from("[agents]\n");
        for name in DEMO_AGENTS {
            let token = uuid::Uuid::new_v4().simple().to_string();
            roster.push_str(&format!("{name} = \"{token}\"\n"));
            write_private(
                &dir.join("tokens").join(format!("{name}.token")),
                &format!("{token}\n"),
            )?;
        }
        write_private(&dir.join("roster.toml"), &roster)?;
    }
    Ok(config)
}

/// The demo accepts delegated work out of the box (docs/delegation.md): on the agents this
/// machine has (the DELEGATE column of `agent-hub agents`), in working directories under the
/// folder the demo was started from, with permission requests rejected (the default).
fn demo_tasks_table(started_in: &Path) -> std::io::Result<String> {
    let root = std::fs::canonicalize(started_in)?;
    let root = root.to_str().ok_or_else(|| {
        std::io::Error::other("the folder the demo was started from is not UTF-8")
    })?;
    Ok(format!(
        "\n# Written by `agent-hub-server demo`: delegated tasks may run in folders under the one\n# the demo was started from.\n[tasks]\ncwd_roots = [{}]\n",
        toml::Value::String(root.to_owned())
    ))
}

fn print_demo_help(dir: &Path, port: u16) {
    let d = dir.display();
    say(format_args!(
        "agent-hub demo in {d}: agents {}; tokens in {d}/tokens/",
        DEMO_AGENTS.join(", ")
    ));
    say(format_args!("try, in another terminal:"));
    say(format_args!(
        "  agent-hub await --as worker --token-file {d}/tokens/worker.token --port {port}"
    ));
    say(format_args!(
        "  agent-hub send --as orchestrator --token-file {d}/tokens/orchestrator.token --port {port} --to worker --kind task --body '{{\"op\":\"hello\"}}'"
    ));
    say(format_args!(
        "  agent-hub delegate --as orchestrator --token-file {d}/tokens/orchestrator.token --port {port} --agent AGENT --cwd . --prompt '...' --wait   (agents: agent-hub agents, column DELEGATE)"
    ));
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

fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(text.as_bytes())
}

fn relay_command(cmd: RelayCommand) -> ExitCode {
    let result = match cmd {
        RelayCommand::Keygen {
            peer,
            key_file,
            local,
        } => keygen(&peer, &key_file, local.as_deref()),
        RelayCommand::Peers { config } => agent_hub::server::relay_status::print_peers(&config),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("agent-hub-server: {e}");
            ExitCode::from(1)
        }
    }
}

fn keygen(peer: &str, key_file: &Path, local: Option<&str>) -> Result<(), String> {
    if !agent_hub::config::valid_peer_id(peer) {
        return Err(format!(
            "peer id {peer:?} must be 1-128 characters of A-Z a-z 0-9 _ -"
        ));
    }
    if let Some(l) = local.filter(|l| !agent_hub::config::valid_peer_id(l)) {
        return Err(format!(
            "local peer id {l:?} must be 1-128 characters of A-Z a-z 0-9 _ -"
        ));
    }
    let mut key = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut key))
        .map_err(|e| format!("cannot read random bytes: {e}"))?;
    let hex: String = key.iter().map(|b| format!("{b:02x}")).collect();
    write_private(key_file, &format!("{hex}\n"))
        .map_err(|e| format!("cannot write {}: {e}", key_file.display()))?;
    let local = local.unwrap_or("THIS-HUB");
    say(format_args!(
        "wrote {} (mode 600)\n\n\
         # On this machine, in the hub's config.toml:\n\
         [[relay.peers]]\n\
         id = \"{peer}\"\n\
         address = \"PEER-RELAY-IP:PORT\"   # leave out to only accept {peer}'s connections\n\
         key_file = \"{}\"\n\
         allow_v0 = false\n\n\
         # On {peer}: store the same key, readable only by its hub's user:\n\
         umask 077; printf '%s\\n' '{hex}' > keys/{local}.key\n\
         # and in {peer}'s config.toml:\n\
         [[relay.peers]]\n\
         id = \"{local}\"\n\
         address = \"THIS-RELAY-IP:PORT\"\n\
         key_file = \"keys/{local}.key\"\n\
         allow_v0 = false\n\n\
         # The key is shown once, here; move it over a channel you trust and clear your scrollback.",
        key_file.display(),
        key_file.display(),
    ));
    Ok(())
}

fn audit_verify(paths: &[PathBuf], anchors: &[String]) -> ExitCode {
    use agent_hub::server::audit_chain::{hex, parse_hex, verify_files};
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
