//! `agent-hub-server demo DIR` (README, "Start a working hub"): a folder with a config, a
//! roster and two agents' tokens, reused when it is there, and optionally the hub installed
//! into the agent CLIs this machine has, each with its own identity (`--install`).
//!
//! Owns the demo's files and their rules: the port (`--port N` rewrites an existing
//! folder's `port` line and says so; without it the stored port stays; after the bind the
//! port the hub got is stored, so `--port 0` and what install wrote keep working after a
//! restart), the store (SQLite in the folder by default, so mail survives a restart;
//! `--memory` for the in-process store of the 004 contract), the identities
//! (`admin::roster`), and the first agent as the operator (`operators`, SPEC §14
//! "Visibility"), so `agent-hub top` as `orchestrator` sees every agent. Agents are
//! installed through the `agent-hub` binary beside this one, as a subprocess with argv only,
//! so the demo does what a user typing the commands would; the commands it prints name
//! that binary as the user's shell would find it (`admin::program_word`), so each runs as printed.
//! A run that fails leaves no folder behind that it created (`abandon`), so the next run
//! starts afresh instead of reusing a half-made one; a folder that was there is kept.
//! Refuses to change an existing folder's store or operators: it says how instead.

use super::roster::{self, Layout, RosterError};
use super::say;
use super::token::TokenError;
use agent_hub_host::agents::argv::shell_word;
use agent_hub_host::config::{Config, ConfigError, StoreConfig};
use agent_hub_host::roster_edit::RosterEditError;
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The demo's port when none is given: outside Linux's ephemeral range (32768–60999), where
/// a connection left from another program can hold a port (config.example.toml keeps the
/// contract's example, 46110).
pub const DEFAULT_PORT: u16 = 24610;

/// The two agents every demo has. The first is the demo's operator (`operators`).
pub const DEMO_AGENTS: [&str; 2] = ["orchestrator", "worker"];

/// The example config the demo starts from and `agent-hub-server example-config` prints
/// (README, "Running the server yourself"): the repository's own, so the two never differ.
pub const EXAMPLE_CONFIG: &str = include_str!("../../../../config.example.toml");

/// Why the demo could not be set up or finished. Errors of the layers below (config,
/// roster, tokens) are shown in their own words.
#[derive(Debug)]
pub enum DemoError {
    /// A folder could not be made private (the demo folder or its tokens folder).
    Token(TokenError),
    /// A path could not be resolved to an absolute one.
    Resolve {
        path: PathBuf,
        source: std::io::Error,
    },
    /// This process has no working folder to start delegated tasks under.
    NoWorkingFolder(std::io::Error),
    /// The folder the demo was started from is not UTF-8 (TOML needs it to be).
    StartedInNotUtf8,
    /// The demo's config could not be read.
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The demo's config could not be written.
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A config was refused.
    Config(ConfigError),
    /// An existing demo's config was refused: which file.
    ConfigAt { path: PathBuf, source: ConfigError },
    /// `--memory` for an existing folder whose store is SQLite.
    MemoryForSqlite { dir: PathBuf, config: PathBuf },
    /// config.example.toml's `[store]` is not the one `kind = "memory"` line to replace.
    ExampleStore,
    /// config.example.toml has not the one `operators = []` line to replace.
    ExampleOperators,
    /// The config has no top-level `port = N` line.
    NoPortLine,
    /// The rewritten config parsed with another port than the one written.
    PortNotWritten,
    /// The rewritten config differs from the old in more than its port.
    MoreThanPort,
    /// The roster or an identity could not be set up.
    Roster(RosterError),
    /// The roster could not be read to see who is on it.
    RosterEdit(RosterEditError),
    /// This binary's own path is unknown (to find `agent-hub` beside it).
    CurrentExe(std::io::Error),
    /// No `agent-hub` client beside this binary, at the path given.
    NoClient(PathBuf),
    /// `agent-hub <verb>` could not be started.
    RunClient {
        client: PathBuf,
        verb: &'static str,
        source: std::io::Error,
    },
    /// `agent-hub agents` failed; `stderr` is what it wrote (trimmed).
    AgentsFailed { client: PathBuf, stderr: String },
    /// `agent-hub agents --json` wrote something that is not its JSON.
    AgentsOutput(serde_json::Error),
    /// The set-up failed (`cause`) in a folder this run had created, which was then removed
    /// (`removal` None) or could not be.
    Undone {
        cause: Box<DemoError>,
        created: PathBuf,
        removal: Option<std::io::Error>,
    },
}

impl fmt::Display for DemoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DemoError::Token(e) => write!(f, "{e}"),
            DemoError::Resolve { path, source } => {
                write!(f, "cannot resolve {}: {source}", path.display())
            }
            DemoError::NoWorkingFolder(e) => write!(f, "no working folder: {e}"),
            DemoError::StartedInNotUtf8 => {
                write!(f, "the folder the demo was started from is not UTF-8")
            }
            DemoError::Read { path, source } => {
                write!(f, "cannot read {}: {source}", path.display())
            }
            DemoError::Write { path, source } => {
                write!(f, "cannot write {}: {source}", path.display())
            }
            DemoError::Config(e) => write!(f, "{e}"),
            DemoError::ConfigAt { path, source } => write!(f, "{}: {source}", path.display()),
            DemoError::MemoryForSqlite { dir, config } => write!(
                f,
                "{} keeps its queues in SQLite ([store] in {}); --memory only chooses the store of a new demo folder: use another DIR, or edit [store] by hand",
                dir.display(),
                config.display()
            ),
            DemoError::ExampleStore => write!(
                f,
                "config.example.toml's [store] is not the one line the demo expects"
            ),
            DemoError::ExampleOperators => write!(
                f,
                "config.example.toml has not the one `operators = []` line the demo expects"
            ),
            DemoError::NoPortLine => write!(
                f,
                "the config has no top-level `port = N` line to rewrite; edit it by hand"
            ),
            DemoError::PortNotWritten => write!(
                f,
                "the rewritten config does not hold the new port; edit it by hand"
            ),
            DemoError::MoreThanPort => write!(
                f,
                "rewriting the port changed more than the port; edit it by hand"
            ),
            DemoError::Roster(e) => write!(f, "{e}"),
            DemoError::RosterEdit(e) => write!(f, "{e}"),
            DemoError::CurrentExe(e) => write!(f, "cannot find this binary: {e}"),
            DemoError::NoClient(client) => write!(
                f,
                "--install needs the agent-hub client beside this binary, at {}",
                client.display()
            ),
            DemoError::RunClient {
                client,
                verb,
                source,
            } => write!(f, "cannot run {} {verb}: {source}", client.display()),
            DemoError::AgentsFailed { client, stderr } => {
                write!(f, "{} agents failed: {stderr}", client.display())
            }
            DemoError::AgentsOutput(e) => {
                write!(f, "cannot read the output of agent-hub agents --json: {e}")
            }
            DemoError::Undone {
                cause,
                created,
                removal: None,
            } => write!(
                f,
                "{cause} (removed {}, which this run had created)",
                created.display()
            ),
            DemoError::Undone {
                cause,
                created,
                removal: Some(e),
            } => write!(
                f,
                "{cause} (could not remove {}, which this run had created: {e})",
                created.display()
            ),
        }
    }
}

impl std::error::Error for DemoError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            DemoError::Token(e) => Some(e),
            DemoError::Resolve { source, .. }
            | DemoError::Read { source, .. }
            | DemoError::Write { source, .. }
            | DemoError::RunClient { source, .. } => Some(source),
            DemoError::NoWorkingFolder(e) | DemoError::CurrentExe(e) => Some(e),
            DemoError::Config(e) | DemoError::ConfigAt { source: e, .. } => Some(e),
            DemoError::Roster(e) => Some(e),
            DemoError::RosterEdit(e) => Some(e),
            DemoError::AgentsOutput(e) => Some(e),
            DemoError::Undone { cause, .. } => Some(cause.as_ref()),
            DemoError::StartedInNotUtf8
            | DemoError::ExampleStore
            | DemoError::ExampleOperators
            | DemoError::NoPortLine
            | DemoError::PortNotWritten
            | DemoError::MoreThanPort
            | DemoError::MemoryForSqlite { .. }
            | DemoError::NoClient(_)
            | DemoError::AgentsFailed { .. } => None,
        }
    }
}

impl From<TokenError> for DemoError {
    fn from(e: TokenError) -> Self {
        DemoError::Token(e)
    }
}

impl From<ConfigError> for DemoError {
    fn from(e: ConfigError) -> Self {
        DemoError::Config(e)
    }
}

impl From<RosterError> for DemoError {
    fn from(e: RosterError) -> Self {
        DemoError::Roster(e)
    }
}

impl From<RosterEditError> for DemoError {
    fn from(e: RosterEditError) -> Self {
        DemoError::RosterEdit(e)
    }
}

/// The demo's config written whole (mode 600), or the error naming it.
fn write_config(path: &Path, text: &str) -> Result<(), DemoError> {
    agent_hub_host::atomic_file::write_atomic(path, text.as_bytes(), 0o600).map_err(|source| {
        DemoError::Write {
            path: path.to_path_buf(),
            source,
        }
    })
}

/// The demo's config read, or the error naming it.
fn read_config(path: &Path) -> Result<String, DemoError> {
    std::fs::read_to_string(path).map_err(|source| DemoError::Read {
        path: path.to_path_buf(),
        source,
    })
}

/// `path` resolved (symlinks and `..` gone), or the error naming it.
fn resolve(path: &Path) -> Result<PathBuf, DemoError> {
    std::fs::canonicalize(path).map_err(|source| DemoError::Resolve {
        path: path.to_path_buf(),
        source,
    })
}

/// What the user asked for.
#[derive(Debug, Clone)]
pub struct DemoOptions {
    pub dir: PathBuf,
    /// None: a new folder gets `DEFAULT_PORT`, an existing one keeps its stored port.
    pub port: Option<u16>,
    pub memory: bool,
    pub install: bool,
}

/// The folder ready to serve, and what `after_bind` still has to do.
#[derive(Debug)]
pub struct Prepared {
    pub dir: PathBuf,
    pub config: PathBuf,
    /// The outermost folder this run created for DIR (None: DIR was there), which
    /// `abandon` removes when the run fails.
    created: Option<PathBuf>,
    layout: Layout,
    /// Agents to install after the bind: (manifest name, identity, token file).
    installs: Vec<(String, String, PathBuf)>,
    store: String,
}

/// Before the hub starts: the folder, config and roster, the port rewritten when asked, and
/// for `--install` an identity on the roster for each agent found (the hub must load them
/// at startup).
pub fn prepare(opts: &DemoOptions) -> Result<Prepared, DemoError> {
    let created = outermost_missing(&opts.dir);
    match (prepare_in(opts, created.clone()), created) {
        (Err(cause), Some(created)) => Err(DemoError::Undone {
            cause: Box::new(cause),
            removal: std::fs::remove_dir_all(&created).err(),
            created,
        }),
        (prepared, _) => prepared,
    }
}

/// The outermost of `dir` and its parents that does not exist yet: what creating `dir` will
/// create, and so what a failed run takes away again. None when `dir` exists.
fn outermost_missing(dir: &Path) -> Option<PathBuf> {
    let joined = if dir.is_absolute() {
        dir.to_path_buf()
    } else {
        std::env::current_dir().ok()?.join(dir)
    };
    // `./demo-hub` is named as `<cwd>/demo-hub` in what the demo says.
    let absolute: PathBuf = joined
        .components()
        .filter(|c| *c != std::path::Component::CurDir)
        .collect();
    absolute
        .ancestors()
        .take_while(|p| !p.as_os_str().is_empty() && std::fs::symlink_metadata(p).is_err())
        .last()
        .map(Path::to_path_buf)
}

fn prepare_in(opts: &DemoOptions, created: Option<PathBuf>) -> Result<Prepared, DemoError> {
    super::token::private_dir(&opts.dir)?;
    let dir = resolve(&opts.dir)?;
    super::token::private_dir(&dir.join("tokens"))?;
    let config = dir.join("config.toml");
    if config.exists() {
        reuse(&dir, &config, opts)?;
    } else {
        create(&dir, &config, opts)?;
    }
    let layout = Layout::of(&config)?;
    let parsed = Config::load(&config)?;
    let store = match &parsed.store {
        StoreConfig::Memory => "in memory (queues end with the hub)".to_owned(),
        StoreConfig::Sqlite { path, .. } => {
            format!("SQLite at {} (mail survives a restart)", path.display())
        }
    };
    let installs = if opts.install {
        identities(&layout)?
    } else {
        Vec::new()
    };
    Ok(Prepared {
        dir,
        config,
        created,
        layout,
        installs,
        store,
    })
}

/// After the hub failed to start (or the demo to finish after the bind), on stderr below
/// the error: what to do about a port that is taken, and the folder taken away when this run
/// created it (a folder that was there stays, with whatever it held). `stage` is the startup
/// stage that failed (`startup`), if any.
pub fn abandon(p: &Prepared, stage: Option<&str>) {
    if stage == Some("listen") {
        let port = Config::load(&p.config)
            .map(|c| format!(" {}", c.port))
            .unwrap_or_default();
        eprintln!(
            "agent-hub-server: demo: cannot listen on port{port}: start the demo with --port N for another port, or --port 0 for a free one (the demo stores the port it got)"
        );
    }
    if let Some(c) = &p.created {
        match std::fs::remove_dir_all(c) {
            Ok(()) => eprintln!(
                "agent-hub-server: demo: removed {}, which this run had created",
                c.display()
            ),
            Err(e) => eprintln!(
                "agent-hub-server: demo: could not remove {}, which this run had created: {e}",
                c.display()
            ),
        }
    }
}

fn create(dir: &Path, config: &Path, opts: &DemoOptions) -> Result<(), DemoError> {
    let port = opts.port.unwrap_or(DEFAULT_PORT);
    let started_in = std::env::current_dir().map_err(DemoError::NoWorkingFolder)?;
    let text = new_config_text(port, !opts.memory, &started_in)?;
    write_config(config, &text)?;
    let layout = Layout::of(config)?;
    for name in DEMO_AGENTS {
        roster::add(&layout, name)?;
    }
    say(format_args!("created the demo in {}", dir.display()));
    Ok(())
}

fn reuse(dir: &Path, config: &Path, opts: &DemoOptions) -> Result<(), DemoError> {
    let text = read_config(config)?;
    let parsed = Config::parse(&text, dir).map_err(|source| DemoError::ConfigAt {
        path: config.to_path_buf(),
        source,
    })?;
    if opts.memory && parsed.store != StoreConfig::Memory {
        return Err(DemoError::MemoryForSqlite {
            dir: dir.to_path_buf(),
            config: config.to_path_buf(),
        });
    }
    // A folder made before the demo named an operator, or whose operators someone emptied:
    // the two cannot be told apart, and `operators` decides who sees every agent's awaits
    // and tasks, so the demo leaves it to the user and says how.
    if parsed.operators.is_empty() {
        say(format_args!(
            "note: {} names no operators, so `agent-hub top` as {} sees only its own awaits and tasks; to see every agent, add the line operators = [\"{}\"] before its first [table]",
            config.display(),
            DEMO_AGENTS[0],
            DEMO_AGENTS[0]
        ));
    }
    if let Some(port) = opts.port.filter(|&p| p != parsed.port) {
        let new = set_port(&text, port, dir)?;
        write_config(config, &new)?;
        say(format_args!(
            "reusing the demo in {}; port changed from {} to {port} in {}",
            dir.display(),
            parsed.port,
            config.display()
        ));
    } else {
        say(format_args!(
            "reusing the demo in {} (port {} from its config)",
            dir.display(),
            parsed.port
        ));
    }
    Ok(())
}

/// The demo's config: config.example.toml with the port, the first demo agent as the
/// operator, the store (SQLite in the folder unless `sqlite` is false) and a `[tasks]` table
/// (delegated work runs in folders under the one the demo was started from,
/// docs/delegation.md).
pub fn new_config_text(port: u16, sqlite: bool, started_in: &Path) -> Result<String, DemoError> {
    let mut text = set_port(EXAMPLE_CONFIG, port, Path::new("/"))?;
    let no_operators = "\noperators = []\n";
    if text.matches(no_operators).count() != 1 {
        return Err(DemoError::ExampleOperators);
    }
    text = text.replacen(
        no_operators,
        &format!(
            "\n# Written by `agent-hub-server demo`: the orchestrator sees every agent's awaits and tasks\n# (`agent-hub top --as {0}`).\noperators = [\"{0}\"]\n",
            DEMO_AGENTS[0]
        ),
        1,
    );
    if sqlite {
        let memory = "\nkind = \"memory\"\n";
        if text.matches(memory).count() != 1 {
            return Err(DemoError::ExampleStore);
        }
        text = text.replacen(
            memory,
            "\n# Written by `agent-hub-server demo`: queues in SQLite in this folder, so mail survives a\n# restart (`demo --memory` makes a folder that keeps them in memory).\nkind = \"sqlite\"\npath = \"queue.db\"\nmax_bytes = 1073741824\nsync = \"full\"\n",
            1,
        );
    }
    let root = resolve(started_in)?;
    let root = root.to_str().ok_or(DemoError::StartedInNotUtf8)?;
    text.push_str(&format!(
        "\n# Written by `agent-hub-server demo`: delegated tasks may run in folders under the one\n# the demo was started from.\n[tasks]\ncwd_roots = [{}]\n",
        toml::Value::String(root.to_owned())
    ));
    Ok(text)
}

/// `agent-hub-server example-config [--port N]`: the example config, with `port` when given
/// (README, "Running the server yourself").
pub fn example_config(port: Option<u16>) -> Result<String, DemoError> {
    match port {
        None => Ok(EXAMPLE_CONFIG.to_owned()),
        Some(p) => set_port(EXAMPLE_CONFIG, p, Path::new("/")),
    }
}

/// `text` with its top-level `port = N` line given `port`, every other byte kept; checked
/// by parsing both (relative paths against `base`): only the port may differ.
pub fn set_port(text: &str, port: u16, base: &Path) -> Result<String, DemoError> {
    let mut out = String::with_capacity(text.len() + 8);
    let mut done = false;
    for line in text.split_inclusive('\n') {
        let body = line.trim_start();
        if !done && body.starts_with('[') {
            break;
        }
        if !done {
            if let Some(rest) = body.strip_prefix("port") {
                let rest = rest.trim_start();
                if let Some(value) = rest.strip_prefix('=') {
                    let value = value.trim_start();
                    let digits =
                        value.len() - value.trim_start_matches(|c: char| c.is_ascii_digit()).len();
                    if digits > 0 {
                        let at = line.len() - value.len();
                        out.push_str(&line[..at]);
                        out.push_str(&port.to_string());
                        out.push_str(&value[digits..]);
                        done = true;
                        continue;
                    }
                }
            }
        }
        out.push_str(line);
    }
    if !done {
        return Err(DemoError::NoPortLine);
    }
    let before = Config::parse(text, base)?;
    let mut after = Config::parse(&out, base)?;
    if after.port != port {
        return Err(DemoError::PortNotWritten);
    }
    after.port = before.port;
    if after != before {
        return Err(DemoError::MoreThanPort);
    }
    Ok(out)
}

/// For `--install`: the installed agent CLIs (`agent-hub agents`), each given an identity
/// of its own name on the roster (added when missing, reused when there).
fn identities(layout: &Layout) -> Result<Vec<(String, String, PathBuf)>, DemoError> {
    let client = client_binary()?;
    let out = Command::new(&client)
        .args(["agents", "--json", "--no-version"])
        .output()
        .map_err(|source| DemoError::RunClient {
            client: client.clone(),
            verb: "agents",
            source,
        })?;
    if !out.status.success() {
        return Err(DemoError::AgentsFailed {
            client,
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        });
    }
    let rows: Vec<serde_json::Value> =
        serde_json::from_slice(&out.stdout).map_err(DemoError::AgentsOutput)?;
    let text = std::fs::read_to_string(&layout.roster).unwrap_or_default();
    let on_roster = agent_hub_host::roster_edit::entries(&text)?;
    let mut found = Vec::new();
    for row in rows {
        let (Some(agent), Some(true)) = (row["name"].as_str(), row["installed"].as_bool()) else {
            continue;
        };
        if let Err(e) = agent_hub_host::roster_edit::check_name(agent) {
            say(format_args!("skipping {agent:?}: {e}"));
            continue;
        }
        let file = if on_roster.contains_key(agent) {
            let file = layout.token_file(agent);
            if !file.is_file() {
                say(format_args!(
                    "skipping {agent:?}: it is on the roster but {} is missing (agent-hub-server roster rotate {agent} --config {} writes a new one)",
                    file.display(),
                    layout.config.display()
                ));
                continue;
            }
            file
        } else {
            roster::add(layout, agent)?
        };
        found.push((agent.to_owned(), agent.to_owned(), file));
    }
    if found.is_empty() {
        say(format_args!(
            "--install: no agent CLI found on PATH (`agent-hub agents` lists the ones agent-hub knows); nothing installed"
        ));
    }
    Ok(found)
}

/// `agent-hub` beside this binary: the client the demo's agents run.
fn client_binary() -> Result<PathBuf, DemoError> {
    let me = std::env::current_exe().map_err(DemoError::CurrentExe)?;
    let client = me.with_file_name("agent-hub");
    if client.is_file() {
        Ok(client)
    } else {
        Err(DemoError::NoClient(client))
    }
}

/// After the bind: the port the hub got stored in the config, the agents installed, and
/// the commands to type next.
pub fn after_bind(p: &Prepared, bound: u16) -> Result<(), DemoError> {
    let text = read_config(&p.config)?;
    let stored = Config::parse(&text, &p.dir)?.port;
    if stored != bound {
        let new = set_port(&text, bound, &p.dir)?;
        write_config(&p.config, &new)?;
        say(format_args!(
            "stored port {bound} (the one the hub got) in {}",
            p.config.display()
        ));
    }
    let mut installed = Vec::new();
    if !p.installs.is_empty() {
        let client = client_binary()?;
        for (agent, name, file) in &p.installs {
            let out = Command::new(&client)
                .arg("install")
                .arg("--agent")
                .arg(agent)
                .arg("--as")
                .arg(name)
                .arg("--token-file")
                .arg(file)
                .arg("--port")
                .arg(bound.to_string())
                .output()
                .map_err(|source| DemoError::RunClient {
                    client: client.clone(),
                    verb: "install",
                    source,
                })?;
            for line in String::from_utf8_lossy(&out.stdout).lines() {
                say(format_args!("  {line}"));
            }
            for line in String::from_utf8_lossy(&out.stderr).lines() {
                say(format_args!("  {line}"));
            }
            if out.status.success() {
                say(format_args!(
                    "installed the hub into {agent} as {name:?} (token {})",
                    file.display()
                ));
                installed.push(agent.as_str());
            } else {
                say(format_args!(
                    "installing into {agent} failed (above); the others go on"
                ));
            }
        }
    }
    help(p, bound, &installed);
    Ok(())
}

fn help(p: &Prepared, port: u16, installed: &[&str]) {
    let (hub, on_path) = super::program_word("agent-hub");
    let (server, _) = super::program_word("agent-hub-server");
    let shown = p.dir.display();
    let d = shell_word(&p.dir.to_string_lossy());
    let token = |name: &str| format!("{d}/tokens/{name}.token");
    let [boss, worker] = DEMO_AGENTS;
    say(format_args!(
        "agent-hub demo in {shown}: agents {}; {boss} is the operator (it sees every agent); tokens in {shown}/tokens/; store {}",
        p.layout_names().join(", "),
        p.store
    ));
    if !on_path {
        say(format_args!(
            "agent-hub is not on PATH, so the commands below name it by its path; `cargo install --path .` in the repository puts agent-hub and agent-hub-server on PATH (in ~/.cargo/bin)"
        ));
    }
    // Every command line runs as printed; what is said about one follows a `#`, so a line
    // pasted whole is still one command.
    say(format_args!("try, in another terminal:"));
    say(format_args!(
        "  {hub} await --as {worker} --token-file {} --port {port}",
        token(worker)
    ));
    say(format_args!(
        "  {hub} send --as {boss} --token-file {} --port {port} --to {worker} --kind task --body '{{\"op\":\"hello\"}}'",
        token(boss)
    ));
    say(format_args!(
        "  {hub} top --as {boss} --token-file {} --port {port}   # every agent's state, queue and awaits; q quits",
        token(boss)
    ));
    if let Some(first) = installed.first() {
        say(format_args!(
            "then start {first} in a project folder and ask it: \"check your agent-hub mail\"; send it work with:"
        ));
        say(format_args!(
            "  {hub} send --as {boss} --token-file {} --port {port} --to {first} --kind task --body '{{\"op\":\"hello\"}}'",
            token(boss)
        ));
    } else {
        say(format_args!(
            "  {hub} delegate --as {boss} --token-file {} --port {port} --agent AGENT --cwd . --prompt 'say hello' --wait   # AGENT: one that `{hub} agents` lists with DELEGATE acp or headless (docs/delegation.md \"Trying delegation with the fake agent\")",
            token(boss)
        ));
    }
    say(format_args!(
        "states: an agent is `waiting` while one of its awaits is parked; `busy`, `idle` and `gone` come from the hooks that `agent-hub install` (or demo --install) sets up in an agent CLI; until those report it is `unknown` (SPEC §14.1)"
    ));
    if installed.is_empty() {
        say(format_args!(
            "give an agent its own identity: {server} roster add NAME --config {}",
            shell_word(&p.config.to_string_lossy())
        ));
    }
}

impl Prepared {
    /// The roster's names, for the summary line.
    fn layout_names(&self) -> Vec<String> {
        let text = std::fs::read_to_string(&self.layout.roster).unwrap_or_default();
        agent_hub_host::roster_edit::entries(&text)
            .map(|e| e.into_keys().collect())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_port_changes_only_the_port_line() {
        let text = "# c\nport = 46110   # the port\naudit_log_path = \"a\"\nservice_log_path = \"s\"\nroster_path = \"r\"\n[store]\nkind = \"memory\"\n";
        let limits =
            agent_hub_host::config::limits_to_toml(&agent_hub_host::config::Limits::example());
        let text = format!("{text}\n{limits}");
        let out = set_port(&text, 24610, Path::new("/")).unwrap();
        assert_eq!(out, text.replace("port = 46110 ", "port = 24610 "));
        let out = set_port(&out, 0, Path::new("/")).unwrap();
        assert!(out.contains("\nport = 0   # the port\n"), "{out}");
        assert!(matches!(
            set_port("[store]\nport = 5\n", 1, Path::new("/")),
            Err(DemoError::NoPortLine)
        ));
    }

    #[test]
    fn the_new_config_has_the_port_sqlite_and_tasks() {
        let base = std::env::temp_dir();
        let text = new_config_text(24610, true, &base).unwrap();
        let c = Config::parse(&text, Path::new("/demo")).unwrap();
        assert_eq!(c.port, 24610);
        assert!(
            matches!(&c.store, StoreConfig::Sqlite { path, .. } if path == Path::new("/demo/queue.db")),
            "{:?}",
            c.store
        );
        assert!(c.tasks.is_some());
        assert_eq!(
            c.operators,
            [DEMO_AGENTS[0]],
            "the first agent is the operator"
        );
        let text = new_config_text(0, false, &base).unwrap();
        let c = Config::parse(&text, Path::new("/demo")).unwrap();
        assert_eq!((c.port, c.store), (0, StoreConfig::Memory));
    }

    #[test]
    fn the_example_config_is_printed_as_it_is_or_with_a_port() {
        assert_eq!(example_config(None).unwrap(), EXAMPLE_CONFIG);
        let text = example_config(Some(0)).unwrap();
        let c = Config::parse(&text, Path::new("/x")).unwrap();
        let example = Config::parse(EXAMPLE_CONFIG, Path::new("/x")).unwrap();
        assert_eq!((c.port, example.port), (0, 46110));
        assert_eq!(text, EXAMPLE_CONFIG.replacen("port = 46110", "port = 0", 1));
    }

    #[test]
    fn the_outermost_missing_folder_is_what_a_run_creates() {
        let base = std::env::temp_dir().join(format!("demo-missing-{}", std::process::id()));
        std::fs::create_dir_all(&base).unwrap();
        assert_eq!(outermost_missing(&base), None);
        assert_eq!(
            outermost_missing(&base.join("a/./b/c")),
            Some(base.join("a"))
        );
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn the_default_port_is_outside_the_ephemeral_range() {
        assert!(!(32768..=60999).contains(&DEFAULT_PORT));
    }
}
