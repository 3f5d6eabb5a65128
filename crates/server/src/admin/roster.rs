//! `agent-hub-server roster add|remove|rotate|list` (docs/operations.md, "Changing the
//! roster"): one agent's roster line and token file, then a reload of the running hub.
//!
//! Layout: the roster is the config's `roster_path`; each agent's token is in
//! `tokens/<name>.token` in the roster's folder (the demo's layout), the folder mode 700 and
//! the files mode 600. Every write replaces its file whole (`atomic_file`: temp file, fsync,
//! rename), so a hub reloading at any moment reads the old roster or the new, never a part;
//! the line edits are `roster_edit`'s, which keep every other byte of the operator's file.
//! Two commands on one roster at once take turns on a lock file in the tokens folder, so
//! neither loses the other's edit. Refuses to print a token: output names files.

use super::running::{self, Reload, ReloadError};
use super::say;
use super::token::{self, TokenError};
use agent_hub_host::config::{Config, ConfigError};
use agent_hub_host::roster_edit::{self, RosterEditError};
use agent_hub_host::token_file::{self, TokenFileError};
use std::fmt;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Why a roster command failed. The layers below (config, roster editor, token files, the
/// reload) already say what went wrong in their own words; those are shown as they are.
#[derive(Debug)]
pub enum RosterError {
    /// The hub's config was refused.
    Config(ConfigError),
    /// The roster file exists but could not be read.
    ReadRoster {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The edited roster could not be written.
    WriteRoster {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The tokens folder or a new token could not be made.
    Token(TokenError),
    /// The lock file could not be opened.
    OpenLock {
        path: PathBuf,
        source: std::io::Error,
    },
    /// flock(2) on the lock file failed.
    Lock {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The roster editor refused the name or the edit.
    Edit(RosterEditError),
    /// `roster add` found a token file for the new name already there.
    TokenFileExists(PathBuf),
    /// A token file could not be written.
    TokenFile(TokenFileError),
    /// The running hub could not be asked to reload.
    Reload(ReloadError),
    /// The running hub refused the new roster; `says` is its service-log line's text.
    HubRefused { pid: u32, says: String },
}

impl fmt::Display for RosterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RosterError::Config(e) => write!(f, "{e}"),
            RosterError::ReadRoster { path, source } => {
                write!(f, "cannot read roster {}: {source}", path.display())
            }
            RosterError::WriteRoster { path, source } => {
                write!(f, "cannot write roster {}: {source}", path.display())
            }
            RosterError::Token(e) => write!(f, "{e}"),
            RosterError::OpenLock { path, source } => {
                write!(f, "cannot open lock file {}: {source}", path.display())
            }
            RosterError::Lock { path, source } => {
                write!(f, "cannot lock {}: {source}", path.display())
            }
            RosterError::Edit(e) => write!(f, "{e}"),
            RosterError::TokenFileExists(file) => write!(
                f,
                "token file {} already exists (left from an earlier agent?); remove it or pick another name",
                file.display()
            ),
            RosterError::TokenFile(e) => write!(f, "{e}"),
            RosterError::Reload(e) => write!(f, "{e}"),
            RosterError::HubRefused { pid, says } => {
                write!(f, "the hub (pid {pid}) says: {says}")
            }
        }
    }
}

impl std::error::Error for RosterError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            RosterError::Config(e) => Some(e),
            RosterError::ReadRoster { source, .. }
            | RosterError::WriteRoster { source, .. }
            | RosterError::OpenLock { source, .. }
            | RosterError::Lock { source, .. } => Some(source),
            RosterError::Token(e) => Some(e),
            RosterError::Edit(e) => Some(e),
            RosterError::TokenFile(e) => Some(e),
            RosterError::Reload(e) => Some(e),
            RosterError::TokenFileExists(_) | RosterError::HubRefused { .. } => None,
        }
    }
}

impl From<ConfigError> for RosterError {
    fn from(e: ConfigError) -> Self {
        RosterError::Config(e)
    }
}

impl From<TokenError> for RosterError {
    fn from(e: TokenError) -> Self {
        RosterError::Token(e)
    }
}

impl From<RosterEditError> for RosterError {
    fn from(e: RosterEditError) -> Self {
        RosterError::Edit(e)
    }
}

impl From<TokenFileError> for RosterError {
    fn from(e: TokenFileError) -> Self {
        RosterError::TokenFile(e)
    }
}

impl From<ReloadError> for RosterError {
    fn from(e: ReloadError) -> Self {
        RosterError::Reload(e)
    }
}

/// The files a roster command works on, from the hub's config.
#[derive(Debug, Clone)]
pub struct Layout {
    pub config: PathBuf,
    pub roster: PathBuf,
    pub tokens: PathBuf,
    pub service_log: PathBuf,
    pub port: u16,
}

impl Layout {
    /// Reads the config as the hub would (so a config the hub refuses is refused here too).
    pub fn of(config: &Path) -> Result<Layout, RosterError> {
        let c = Config::load(config)?;
        // Writes go to the file a symlinked roster points at, not over the link.
        let roster = std::fs::canonicalize(&c.roster_path).unwrap_or(c.roster_path);
        let dir = roster
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from("."));
        Ok(Layout {
            config: config.to_path_buf(),
            tokens: dir.join("tokens"),
            roster,
            service_log: c.service_log_path,
            port: c.port,
        })
    }

    /// `tokens/<name>.token`; `name` passed `roster_edit::check_name`, so it stays inside.
    pub fn token_file(&self, name: &str) -> PathBuf {
        self.tokens.join(format!("{name}.token"))
    }
}

/// The roster's text and mode; missing reads as empty (a roster being started).
fn read_roster(path: &Path) -> Result<(String, Option<u32>), RosterError> {
    match std::fs::read_to_string(path) {
        Ok(t) => {
            let mode = std::fs::metadata(path)
                .ok()
                .map(|m| m.permissions().mode() & 0o777);
            Ok((t, mode))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok((String::new(), None)),
        Err(source) => Err(RosterError::ReadRoster {
            path: path.to_path_buf(),
            source,
        }),
    }
}

fn write_roster(path: &Path, text: &str) -> Result<(), RosterError> {
    agent_hub_host::atomic_file::write_atomic(path, text.as_bytes(), 0o600).map_err(|source| {
        RosterError::WriteRoster {
            path: path.to_path_buf(),
            source,
        }
    })
}

/// An exclusive lock on `tokens/.roster.lock`, held until dropped.
struct Lock {
    _file: File,
}

fn lock(layout: &Layout) -> Result<Lock, RosterError> {
    token::private_dir(&layout.tokens)?;
    let path = layout.tokens.join(".roster.lock");
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(&path)
        .map_err(|source| RosterError::OpenLock {
            path: path.clone(),
            source,
        })?;
    // SAFETY: flock on a descriptor this function owns; it blocks until the lock is ours.
    if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) } != 0 {
        return Err(RosterError::Lock {
            path,
            source: std::io::Error::last_os_error(),
        });
    }
    Ok(Lock { _file: f })
}

fn note_mode(path: &Path, mode: Option<u32>) {
    if let Some(m) = mode.filter(|m| m & 0o077 != 0) {
        say(format_args!(
            "note: {} was mode {m:03o}, which the hub refuses; it is now 600",
            path.display()
        ));
    }
}

/// `roster add NAME`: a new token file and roster line. Returns the token file.
pub fn add(layout: &Layout, name: &str) -> Result<PathBuf, RosterError> {
    roster_edit::check_name(name)?;
    let _lock = lock(layout)?;
    let (text, mode) = read_roster(&layout.roster)?;
    let file = layout.token_file(name);
    let token = token::random_token()?;
    let edited = roster_edit::add(&text, name, &token)?;
    if file.exists() {
        return Err(RosterError::TokenFileExists(file));
    }
    token_file::write(&file, &token)?;
    if let Err(e) = write_roster(&layout.roster, &edited) {
        let _ = std::fs::remove_file(&file);
        return Err(e);
    }
    note_mode(&layout.roster, mode);
    Ok(file)
}

/// `roster remove NAME`: its line, and its token file when it holds that agent's token.
/// Returns what became of the token file, for the message.
pub fn remove(layout: &Layout, name: &str) -> Result<String, RosterError> {
    let _lock = lock(layout)?;
    let (text, mode) = read_roster(&layout.roster)?;
    let old = roster_edit::entries(&text)?;
    let edited = roster_edit::remove(&text, name)?;
    write_roster(&layout.roster, &edited)?;
    note_mode(&layout.roster, mode);
    let file = layout.token_file(name);
    let held = token_file::held(&file);
    Ok(match held {
        None => "no token file to remove".into(),
        Some(t) if Some(&t) == old.get(name) => match std::fs::remove_file(&file) {
            Ok(()) => format!("removed {}", file.display()),
            Err(e) => format!("could not remove {}: {e}", file.display()),
        },
        Some(_) => format!(
            "left {} in place: it does not hold {name:?}'s roster token",
            file.display()
        ),
    })
}

/// `roster rotate NAME`: a new token in its token file and its roster line.
pub fn rotate(layout: &Layout, name: &str) -> Result<PathBuf, RosterError> {
    let _lock = lock(layout)?;
    let (text, mode) = read_roster(&layout.roster)?;
    let token = token::random_token()?;
    let edited = roster_edit::set_token(&text, name, &token)?;
    let file = layout.token_file(name);
    let before = std::fs::read(&file).ok();
    token_file::write(&file, &token)?;
    if let Err(e) = write_roster(&layout.roster, &edited) {
        // Put the old token back, so the agent still matches the roster in force.
        match before {
            Some(b) => {
                let _ = agent_hub_host::atomic_file::write_atomic(&file, &b, 0o600);
            }
            None => {
                let _ = std::fs::remove_file(&file);
            }
        }
        return Err(e);
    }
    note_mode(&layout.roster, mode);
    Ok(file)
}

/// `roster list`: names, each with its token file when there is one. Never tokens.
pub fn list(layout: &Layout) -> Result<(), RosterError> {
    let (text, _) = read_roster(&layout.roster)?;
    let entries = roster_edit::entries(&text)?;
    if entries.is_empty() {
        say(format_args!("{}: no agents", layout.roster.display()));
    }
    for name in entries.keys() {
        let file = roster_edit::check_name(name)
            .ok()
            .map(|()| layout.token_file(name))
            .filter(|f| f.is_file());
        match file {
            Some(f) => say(format_args!("{name}\t{}", f.display())),
            None => say(format_args!(
                "{name}\t(no token file in {})",
                layout.tokens.display()
            )),
        }
    }
    Ok(())
}

/// Asks the running hub to reload (unless `send` is false) and says what happened and what
/// to do next. Err when the hub refused the new roster.
pub fn reload_and_report(layout: &Layout, send: bool) -> Result<(), RosterError> {
    match running::reload(&layout.config, &layout.service_log, send)? {
        Reload::NoHub => say(format_args!(
            "no running hub found for {}; a hub started from it reads the new roster. A hub running elsewhere picks it up with: kill -HUP <pid of agent-hub-server>",
            layout.config.display()
        )),
        Reload::Skipped(pids) => {
            for pid in pids {
                say(format_args!(
                    "not reloaded (--no-reload); the hub (pid {pid}) picks up the new roster with: kill -HUP {pid}"
                ));
            }
        }
        Reload::Sent { pid, line: None } => say(format_args!(
            "sent SIGHUP to the hub (pid {pid}); it logged nothing about the roster within {} s: check {}",
            running::RELOAD_WAIT.as_secs(),
            layout.service_log.display()
        )),
        Reload::Sent {
            pid,
            line: Some(line),
        } => {
            // `<ts> <LEVEL> <text>`: the text is the hub's own words.
            let what = line.splitn(3, ' ').nth(2).unwrap_or(line.as_str());
            if running::refused(&line) {
                return Err(RosterError::HubRefused {
                    pid,
                    says: what.to_owned(),
                });
            }
            say(format_args!("the hub (pid {pid}) says: {what}"));
        }
    }
    Ok(())
}

/// The whole `roster add` command: the edit, the reload, the next steps.
pub fn add_command(layout: &Layout, name: &str, send: bool) -> Result<(), RosterError> {
    let file = add(layout, name)?;
    say(format_args!(
        "added {name:?} to {}; its token is in {} (mode 600)",
        layout.roster.display(),
        file.display()
    ));
    reload_and_report(layout, send)?;
    // Commands as the user's shell runs them (issue 35): the client by the name PATH finds,
    // else by its path, and a port of 0 (the hub takes a free one at each start) left for the
    // user to fill in from the hub's ready line.
    let (hub, _) = super::program_word("agent-hub");
    let f = agent_hub_host::agents::argv::shell_word(&file.to_string_lossy());
    let port = match layout.port {
        0 => "PORT".to_owned(),
        p => p.to_string(),
    };
    say(format_args!(
        "next: {hub} await --as {name} --token-file {f} --port {port}"
    ));
    say(format_args!(
        "  or give it to an agent: {hub} install --agent AGENT --as {name} --token-file {f} --port {port}"
    ));
    if layout.port == 0 {
        say(format_args!(
            "  PORT: the one the hub prints when it starts (`listening on 127.0.0.1:PORT`); the config's port is 0, a free one at each start"
        ));
    }
    Ok(())
}

pub fn remove_command(layout: &Layout, name: &str, send: bool) -> Result<(), RosterError> {
    let token_note = remove(layout, name)?;
    say(format_args!(
        "removed {name:?} from {}; {token_note}",
        layout.roster.display()
    ));
    reload_and_report(layout, send)?;
    say(format_args!(
        "mail already queued for {name:?} stays queued; adding the name again gives it back"
    ));
    Ok(())
}

pub fn rotate_command(layout: &Layout, name: &str, send: bool) -> Result<(), RosterError> {
    let file = rotate(layout, name)?;
    say(format_args!(
        "new token for {name:?} in {} (mode 600) and {}",
        file.display(),
        layout.roster.display()
    ));
    reload_and_report(layout, send)?;
    say(format_args!(
        "the old token is refused once the hub has reloaded; what {name:?} had open with it is closed"
    ));
    Ok(())
}
