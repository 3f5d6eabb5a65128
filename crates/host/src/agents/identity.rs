//! One identity per agent for `agent-hub install` (issue 12, docs/agents.md "One identity per
//! agent"): which name and token file each chosen agent gets, and how a missing token file
//! comes to exist.
//!
//! `install --all` (or several `--agent`) gives each agent its own name — the agent's
//! manifest name, or `BASE-<agent>` with `--as BASE` — and its own token file `<name>.token`
//! in one folder, so no two agents share a queue. A single `--agent X --as NAME --token-file
//! F` is taken exactly as given. When a token file is missing and the user named a hub config
//! whose roster they can write (`--config`, a hub they operate), install runs
//! `agent-hub-server roster add NAME --config PATH` (the binary beside this one; argv only,
//! the name checked first), which writes `tokens/NAME.token` (mode 600) beside the roster,
//! adds the roster line and reloads the running hub. Otherwise it prints what the hub's
//! operator must do. Roster editing itself is the server's (`agent-hub-server roster`);
//! nothing here writes a roster or a token.

use crate::config::ConfigError;
use crate::roster_edit::RosterEditError;
use std::ffi::OsString;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};

/// Longest agent name, as `agent-hub-server roster add` accepts it (docs/operations.md
/// "Changing the roster").
pub use crate::roster_edit::MAX_NAME_CHARS;

/// Why install's identities cannot be worked out, or a missing one not added to the roster.
#[derive(Debug)]
pub enum IdentityError {
    /// A path given on the command line could not be made absolute.
    Absolute(PathBuf, io::Error),
    /// The hub config named with `--config` would not load.
    Config(PathBuf, ConfigError),
    /// The hub config would not load when read again for its port.
    HubConfig(ConfigError),
    /// This binary's own path could not be found (for the `--command` default).
    CurrentExe(io::Error),
    /// This binary's path could not be found (to find `agent-hub-server` beside it).
    ServerBinary(io::Error),
    /// The command's path is not UTF-8, so no config file can hold it.
    NotUtf8(PathBuf),
    /// The hub config has `port = 0` and no `--port` was given.
    PortZero(PathBuf),
    /// Neither `--port` nor `--config`.
    PortRequired,
    /// `--token-file` with several agents.
    TokenFileWithSeveral,
    /// A name `roster add` would refuse.
    Name(RosterEditError),
    /// `agent-hub-server` could not be run.
    RunServer(PathBuf, io::Error),
    /// `roster add` failed: its exit status and its output lines.
    RosterAddFailed {
        server: PathBuf,
        name: String,
        status: ExitStatus,
        lines: Vec<String>,
    },
    /// `roster add` succeeded but the token file it writes is not there.
    TokenFileMissing {
        server: PathBuf,
        name: String,
        file: PathBuf,
    },
}

impl fmt::Display for IdentityError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IdentityError::Absolute(p, e) => write!(f, "{}: {e}", p.display()),
            IdentityError::Config(p, e) => write!(f, "--config {}: {e}", p.display()),
            IdentityError::HubConfig(e) => write!(f, "{e}"),
            IdentityError::CurrentExe(e) => {
                write!(f, "cannot find this binary's path (pass --command): {e}")
            }
            IdentityError::ServerBinary(e) => write!(f, "cannot find this binary: {e}"),
            IdentityError::NotUtf8(p) => write!(f, "{} is not UTF-8", p.display()),
            IdentityError::PortZero(config) => write!(
                f,
                "{} has port = 0 (the kernel picks one at each start): pass --port with the port the hub got",
                config.display()
            ),
            IdentityError::PortRequired => f.write_str("--port is required without --config"),
            IdentityError::TokenFileWithSeveral => f.write_str(
                "--token-file names one agent's token; with several agents each gets its own <name>.token (use --token-dir DIR or --config PATH)",
            ),
            IdentityError::Name(e) => write!(f, "{e}"),
            IdentityError::RunServer(server, e) => {
                write!(f, "cannot run {}: {e}", server.display())
            }
            IdentityError::RosterAddFailed {
                server,
                name,
                status,
                lines,
            } => {
                write!(
                    f,
                    "{} roster add {name} failed ({status})",
                    server.display()
                )?;
                for l in lines {
                    write!(f, "\n    {l}")?;
                }
                Ok(())
            }
            IdentityError::TokenFileMissing { server, name, file } => write!(
                f,
                "{} roster add {name} succeeded but {} does not exist",
                server.display(),
                file.display()
            ),
        }
    }
}

impl std::error::Error for IdentityError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            IdentityError::Absolute(_, e)
            | IdentityError::CurrentExe(e)
            | IdentityError::ServerBinary(e)
            | IdentityError::RunServer(_, e) => Some(e),
            IdentityError::Config(_, e) | IdentityError::HubConfig(e) => Some(e),
            IdentityError::Name(e) => Some(e),
            _ => None,
        }
    }
}

impl From<RosterEditError> for IdentityError {
    fn from(e: RosterEditError) -> Self {
        IdentityError::Name(e)
    }
}

/// How the chosen agents' names are made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NameRule {
    /// One agent, this name (`--as NAME`).
    Exact(String),
    /// Each agent its own: `BASE-<agent>`, or the agent's manifest name without a base.
    PerAgent { base: Option<String> },
}

/// Where the chosen agents' token files are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenRule {
    /// One agent, this file (`--token-file F`), used as given.
    Exact(PathBuf),
    /// `<dir>/<name>.token`; a missing one is only reported, with the operator's steps.
    Dir(PathBuf),
    /// The hub config the user operates: `tokens/<name>.token` beside its roster, a missing
    /// one created with `agent-hub-server roster add` when the roster is writable.
    Hub(HubRoster),
}

/// Who an install authenticates as (docs/agents.md "One identity per agent").
#[derive(Debug, Clone)]
pub struct Identities {
    /// The `agent-hub` binary agents run: an absolute path.
    pub command: String,
    pub port: u16,
    pub names: NameRule,
    pub tokens: TokenRule,
}

/// A hub config named with `--config`, as install needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HubRoster {
    /// Absolute.
    pub config: PathBuf,
    pub roster: PathBuf,
    /// `tokens/` beside the roster (the demo's layout, the one `roster add` writes).
    pub tokens: PathBuf,
    /// The roster file and its folder are writable by this user.
    pub writable: bool,
}

impl HubRoster {
    /// Reads the config at `config` as the server would; `roster_path` decides where tokens are.
    pub fn of(config: &Path) -> Result<HubRoster, IdentityError> {
        let config = std::path::absolute(config)
            .map_err(|e| IdentityError::Absolute(config.to_owned(), e))?;
        let cfg = crate::config::Config::load(&config)
            .map_err(|e| IdentityError::Config(config.clone(), e))?;
        let dir = cfg
            .roster_path
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from("/"));
        let writable = writable(&cfg.roster_path) && writable(&dir);
        Ok(HubRoster {
            tokens: dir.join("tokens"),
            roster: cfg.roster_path,
            config,
            writable,
        })
    }
}

/// True when this user may write `path` (access(2) with W_OK, which tests the real ids).
fn writable(path: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: `c` is a valid NUL-terminated string that lives across the call.
    unsafe { libc::access(c.as_ptr(), libc::W_OK) == 0 }
}

/// The name an agent gets under `rule`.
pub fn name_for(rule: &NameRule, agent: &str) -> String {
    match rule {
        NameRule::Exact(n) => n.clone(),
        NameRule::PerAgent { base: Some(b) } => format!("{b}-{agent}"),
        NameRule::PerAgent { base: None } => agent.to_owned(),
    }
}

/// The token file for `name` under `rule`.
pub fn token_for(rule: &TokenRule, name: &str) -> PathBuf {
    match rule {
        TokenRule::Exact(p) => p.clone(),
        TokenRule::Dir(d) => d.join(format!("{name}.token")),
        TokenRule::Hub(h) => h.tokens.join(format!("{name}.token")),
    }
}

/// A name that can be a roster entry, a token file's name and an argv word: the rule
/// `agent-hub-server roster add` applies (`roster_edit::check_name`), so install refuses
/// exactly what the roster would.
pub fn check_name(name: &str) -> Result<(), RosterEditError> {
    crate::roster_edit::check_name(name)
}

/// What `agent-hub install` was told about identities, as given on its command line.
#[derive(Debug, Clone, Default)]
pub struct IdentityArgs {
    /// The `agent-hub` binary agents run (`--command`); the running binary when absent.
    pub command: Option<PathBuf>,
    /// More than one agent is being installed (`--all` or several names).
    pub several: bool,
    pub name: Option<String>,
    pub port: Option<u16>,
    pub token_file: Option<PathBuf>,
    pub token_dir: Option<PathBuf>,
    /// The hub's config (`--config`): its roster gets each agent's entry and its port is used.
    pub config: Option<PathBuf>,
}

/// Turns install's identity arguments into the identities it writes: an absolute binary, the
/// port (from `--port`, else the hub's config, never its `port = 0`), one name per agent when
/// there are several, and where each token comes from. `home` is the user's home, where the
/// default token folder lies.
pub fn resolve_identities(a: IdentityArgs, home: &Path) -> Result<Identities, IdentityError> {
    let command = match a.command {
        Some(c) => c,
        None => std::env::current_exe().map_err(IdentityError::CurrentExe)?,
    };
    let abs = |p: &Path| -> Result<PathBuf, IdentityError> {
        std::path::absolute(p).map_err(|e| IdentityError::Absolute(p.to_owned(), e))
    };
    let command = abs(&command)?
        .to_str()
        .map(str::to_owned)
        .ok_or_else(|| IdentityError::NotUtf8(command.clone()))?;
    let hub = a.config.as_deref().map(HubRoster::of).transpose()?;
    let port = match (a.port, &hub) {
        (Some(p), _) => p,
        (None, Some(h)) => {
            let cfg = crate::config::Config::load(&h.config).map_err(IdentityError::HubConfig)?;
            if cfg.port == 0 {
                return Err(IdentityError::PortZero(h.config.clone()));
            }
            cfg.port
        }
        (None, None) => return Err(IdentityError::PortRequired),
    };
    let names = match (a.name, a.several) {
        (Some(n), false) => NameRule::Exact(n),
        (base, _) => NameRule::PerAgent { base },
    };
    let tokens = match (a.token_file, a.token_dir, hub) {
        (Some(_), _, _) if a.several => return Err(IdentityError::TokenFileWithSeveral),
        (Some(f), _, _) => TokenRule::Exact(abs(&f)?),
        (None, _, Some(h)) => TokenRule::Hub(h),
        (None, Some(d), None) => TokenRule::Dir(abs(&d)?),
        (None, None, None) => TokenRule::Dir(home.join(".agent-hub/tokens")),
    };
    Ok(Identities {
        command,
        port,
        names,
        tokens,
    })
}

/// `agent-hub-server` beside the running binary (where a release and `cargo build` put it).
pub fn server_binary() -> Result<PathBuf, IdentityError> {
    let me = std::env::current_exe().map_err(IdentityError::ServerBinary)?;
    Ok(me.with_file_name("agent-hub-server"))
}

/// The argv of `agent-hub-server roster add NAME --config PATH`: words, never a shell line.
pub fn roster_add_argv(name: &str, config: &Path) -> Vec<OsString> {
    vec![
        "roster".into(),
        "add".into(),
        name.into(),
        "--config".into(),
        config.as_os_str().to_owned(),
    ]
}

/// Runs `roster add` for `name` (checked first). Returns its output lines (it prints no
/// token); an error holds its output too, so the user sees why.
pub fn roster_add(
    server: &Path,
    name: &str,
    hub: &HubRoster,
) -> Result<Vec<String>, IdentityError> {
    check_name(name)?;
    let out = Command::new(server)
        .args(roster_add_argv(name, &hub.config))
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| IdentityError::RunServer(server.to_owned(), e))?;
    let lines: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .chain(String::from_utf8_lossy(&out.stderr).lines())
        .map(str::to_owned)
        .collect();
    if !out.status.success() {
        return Err(IdentityError::RosterAddFailed {
            server: server.to_owned(),
            name: name.to_owned(),
            status: out.status,
            lines,
        });
    }
    let file = hub.tokens.join(format!("{name}.token"));
    if !file.is_file() {
        return Err(IdentityError::TokenFileMissing {
            server: server.to_owned(),
            name: name.to_owned(),
            file,
        });
    }
    Ok(lines)
}

/// What the hub's operator must do so that `name` can connect with `token_file`, as lines
/// to print (two-space indented by the caller). `config`: the hub's config when known.
pub fn operator_steps(name: &str, token_file: &Path, config: Option<&Path>) -> Vec<String> {
    let cfg = config.map_or_else(
        || "<the hub's config>".to_owned(),
        |c| c.display().to_string(),
    );
    let tf = token_file.display();
    vec![
        format!("{name}: the hub does not know this identity yet; its token file {tf} is missing. The hub's operator either runs"),
        format!("    agent-hub-server roster add {name} --config {cfg}"),
        format!("  (it writes tokens/{name}.token, mode 600, beside the roster, adds the roster line and reloads the running hub) and puts a copy of that file at {tf} (mode 600); or, by hand, adds under [agents] in the hub's roster the line"),
        format!("    {name} = \"<a new random token, e.g. the output of: od -An -tx1 -N32 /dev/urandom | tr -d ' \\n'>\""),
        format!("  writes the same token and a newline to {tf} (chmod 600 {tf}), and reloads the hub: kill -HUP <the hub's pid>"),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_per_agent_and_exact() {
        let per = NameRule::PerAgent { base: None };
        assert_eq!(name_for(&per, "codex"), "codex");
        let based = NameRule::PerAgent {
            base: Some("me".into()),
        };
        assert_eq!(name_for(&based, "codex"), "me-codex");
        assert_eq!(name_for(&NameRule::Exact("w".into()), "codex"), "w");
        assert_eq!(
            token_for(&TokenRule::Dir("/t".into()), "me-codex"),
            PathBuf::from("/t/me-codex.token")
        );
    }

    #[test]
    fn names_the_roster_would_refuse_are_refused() {
        for bad in [
            "", "a b", "a/b", "../x", "-x", ".x", "hub", "HUB", "task-1", "a;b", "é",
        ] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
        assert!(check_name(&"a".repeat(65)).is_err());
        for good in ["claude", "me-codex", "w@host", "a.b_c", &"a".repeat(64)] {
            assert!(check_name(good).is_ok(), "{good:?}");
        }
    }

    #[test]
    fn the_roster_add_argv_is_words() {
        let argv = roster_add_argv("me-codex", Path::new("/h/config toml"));
        assert_eq!(
            argv,
            ["roster", "add", "me-codex", "--config", "/h/config toml"].map(OsString::from)
        );
    }

    #[test]
    fn operator_steps_name_the_command_the_file_and_the_reload() {
        let s = operator_steps("me-codex", Path::new("/t/me-codex.token"), None).join("\n");
        assert!(s.contains("agent-hub-server roster add me-codex --config <the hub's config>"));
        assert!(s.contains("chmod 600 /t/me-codex.token"));
        assert!(s.contains("kill -HUP"));
        assert!(s.contains("me-codex = \""));
    }
}
