//! Finding the hub that runs from a config, and asking it to reload its roster and its agent
//! manifests (SIGHUP, docs/operations.md "Changing the roster", "Reloading agent manifests").
//!
//! A hub is found in /proc (Linux): a process of this user whose executable is
//! `agent-hub-server`, started with `--config PATH` (and no subcommand) or as `demo DIR`,
//! where PATH (resolved against that process's working directory) is the same file as the
//! config asked about. The hub makes itself non-dumpable (issue 29), which hides its
//! `/proc` `exe` and `cwd` links from every non-root process and makes its `/proc` entry
//! root's: so its user is read from `status`, its program from `cmdline`, and a relative
//! PATH whose base cannot be read is matched by the pid the hub wrote in its service log's
//! last start line. The argument scan is pure (`hub_config_arg`, `last_start_pid`) and
//! unit-tested; the rest is IO. Refuses to signal any process that does not pass all of
//! those checks.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long `reload` waits for the hub's service-log line about the reload.
pub const RELOAD_WAIT: Duration = Duration::from_secs(5);

/// What a hub's argv says about its config: `--config PATH`, or `demo DIR` (whose config is
/// `DIR/config.toml`). None for anything else (`roster`, `relay`, `audit` commands, which
/// are not hubs). `args` excludes argv[0].
pub fn hub_config_arg(args: &[String]) -> Option<PathBuf> {
    let mut config = None;
    let mut demo_dir = None;
    let mut in_demo = false;
    let mut i = 0;
    while i < args.len() {
        let a = args[i].as_str();
        if let Some(v) = a.strip_prefix("--config=") {
            config = Some(PathBuf::from(v));
        } else if a == "--config" {
            config = args.get(i + 1).map(PathBuf::from);
            i += 1;
        } else if in_demo && a == "--port" {
            i += 1;
        } else if a.starts_with('-') {
        } else if in_demo {
            if demo_dir.is_none() {
                demo_dir = Some(PathBuf::from(a));
            }
        } else if a == "demo" {
            in_demo = true;
        } else {
            // Any other subcommand runs no hub.
            return None;
        }
        i += 1;
    }
    match (in_demo, demo_dir, config) {
        (true, Some(d), _) => Some(d.join("config.toml")),
        (true, None, _) => None,
        (false, _, c) => c,
    }
}

/// The pid in the last `agent-hub-server … starting; pid N; …` line of a service log.
pub fn last_start_pid(service_log: &str) -> Option<u32> {
    service_log
        .lines()
        .rev()
        .find(|l| l.contains("agent-hub-server ") && l.contains(" starting; pid "))
        .and_then(|l| l.split(" starting; pid ").nth(1))
        .and_then(|rest| rest.split(';').next())
        .and_then(|n| n.trim().parse().ok())
}

/// The real uid on the `Uid:` line of a `/proc/<pid>/status` text.
fn status_uid(status: &str) -> Option<u32> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
}

/// The pids of this user's hubs that run from `config` (Linux; elsewhere none are found).
/// `service_log` is that config's service log, read only for a hub whose relative config
/// path cannot be resolved (see the module doc).
pub fn hubs_for(config: &Path, service_log: Option<&Path>) -> Vec<u32> {
    let Ok(want) = std::fs::canonicalize(config) else {
        return Vec::new();
    };
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    // SAFETY: getuid has no preconditions and cannot fail.
    let me = unsafe { libc::getuid() };
    let own = std::process::id();
    let mut out = Vec::new();
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        if pid == own {
            continue;
        }
        // A process can exit between the listing and these reads: skip it then.
        let base = Path::new("/proc").join(pid.to_string());
        // Its user from `status`: a non-dumpable process's /proc entry is owned by root.
        let uid = std::fs::read_to_string(base.join("status"))
            .ok()
            .and_then(|s| status_uid(&s));
        if uid != Some(me) {
            continue;
        }
        let Ok(cmdline) = std::fs::read(base.join("cmdline")) else {
            continue;
        };
        let args = agent_hub_host::agents::procs::parse_cmdline(&cmdline);
        // Its program from the `exe` link when it can be read, else from argv[0] (a
        // non-dumpable hub's link cannot be, by anyone but root).
        let exe = std::fs::read_link(base.join("exe"))
            .ok()
            .or_else(|| args.first().map(PathBuf::from));
        let exe_name = exe
            .as_deref()
            .and_then(Path::file_name)
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        // A binary rebuilt under a running hub shows as "agent-hub-server (deleted)".
        if !exe_name.starts_with("agent-hub-server") {
            continue;
        }
        let Some(arg) = args.get(1..).and_then(hub_config_arg) else {
            continue;
        };
        let path = if arg.is_absolute() {
            arg
        } else {
            match std::fs::read_link(base.join("cwd")) {
                Ok(cwd) => cwd.join(arg),
                Err(_) => {
                    // Not readable (a non-dumpable hub): the hub that last started on this
                    // config's service log said its pid there.
                    let said = service_log
                        .and_then(|p| std::fs::read_to_string(p).ok())
                        .and_then(|t| last_start_pid(&t));
                    if said == Some(pid) {
                        out.push(pid);
                    }
                    continue;
                }
            }
        };
        if std::fs::canonicalize(&path).is_ok_and(|p| p == want) {
            out.push(pid);
        }
    }
    out.sort_unstable();
    out
}

/// What became of a reload request.
#[derive(Debug)]
pub enum Reload {
    /// No hub runs from this config.
    NoHub,
    /// Not asked (`--no-reload`); the hubs found.
    Skipped(Vec<u32>),
    /// SIGHUP sent; the hub's service-log line about it, when one came within `RELOAD_WAIT`.
    Sent { pid: u32, line: Option<String> },
}

/// Why a reload request could not be made.
#[derive(Debug)]
pub enum ReloadError {
    /// kill(2) failed (the hub exited since it was found, or is not ours to signal).
    Signal { pid: u32, source: std::io::Error },
}

impl fmt::Display for ReloadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReloadError::Signal { pid, source } => {
                write!(f, "cannot send SIGHUP to the hub (pid {pid}): {source}")
            }
        }
    }
}

impl std::error::Error for ReloadError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ReloadError::Signal { source, .. } => Some(source),
        }
    }
}

/// Sends SIGHUP to the hub running from `config` and waits (bounded) for its service-log
/// line saying the roster was reloaded or refused.
pub fn reload(config: &Path, service_log: &Path, send: bool) -> Result<Reload, ReloadError> {
    let pids = hubs_for(config, Some(service_log));
    let Some(&pid) = pids.first() else {
        return Ok(Reload::NoHub);
    };
    if !send {
        return Ok(Reload::Skipped(pids));
    }
    let lines = signal_and_wait(pid, service_log, |lines| {
        lines.iter().any(|l| is_roster_line(l))
    })?;
    Ok(Reload::Sent {
        pid,
        line: lines.into_iter().find(|l| is_roster_line(l)),
    })
}

/// Sends SIGHUP to `pid` and returns the complete service-log lines written after it, once
/// `done` holds for them or `RELOAD_WAIT` has passed (then whatever came).
pub fn signal_and_wait(
    pid: u32,
    service_log: &Path,
    done: impl Fn(&[String]) -> bool,
) -> Result<Vec<String>, ReloadError> {
    let start_len = std::fs::metadata(service_log).map_or(0, |m| m.len());
    // SAFETY: kill(2) with a pid read from /proc and a valid signal number; a process that
    // exited since only makes it fail (ESRCH), which is reported.
    if unsafe { libc::kill(pid as libc::pid_t, libc::SIGHUP) } != 0 {
        return Err(ReloadError::Signal {
            pid,
            source: std::io::Error::last_os_error(),
        });
    }
    let deadline = Instant::now() + RELOAD_WAIT;
    loop {
        let lines = lines_after(service_log, start_len);
        if done(&lines) || Instant::now() >= deadline {
            return Ok(lines);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The complete service-log lines past byte `from`.
fn lines_after(service_log: &Path, from: u64) -> Vec<String> {
    let Ok(bytes) = std::fs::read(service_log) else {
        return Vec::new();
    };
    let Some(tail) = usize::try_from(from).ok().and_then(|f| bytes.get(f..)) else {
        return Vec::new();
    };
    let text = String::from_utf8_lossy(tail);
    let complete = &text[..text.rfind('\n').map_or(0, |i| i + 1)];
    complete.lines().map(str::to_owned).collect()
}

/// A service-log line about a roster reload.
pub fn is_roster_line(line: &str) -> bool {
    line.contains("roster reloaded") || line.contains("roster reload refused")
}

/// True when the reload line says the roster was refused.
pub fn refused(line: &str) -> bool {
    line.contains("roster reload refused")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &[&str]) -> Vec<String> {
        s.iter().map(|a| a.to_string()).collect()
    }

    #[test]
    fn the_last_start_line_names_the_pid_and_status_the_uid() {
        let log = "2026-12-04T10:00:00.000Z INFO agent-hub-server 0.1.0 starting; pid 41; config c.toml\n\
                   2026-12-04T10:00:00.001Z INFO roster loaded: 2 agents\n\
                   2026-12-04T11:00:00.000Z INFO agent-hub-server 0.1.0 starting; pid 977; config c.toml; not dumpable\n";
        assert_eq!(last_start_pid(log), Some(977));
        assert_eq!(last_start_pid("INFO hub stopped\n"), None);
        let status = "Name:\tagent-hub-serve\nUmask:\t0077\nUid:\t1000\t1000\t1000\t1000\n";
        assert_eq!(status_uid(status), Some(1000));
        assert_eq!(status_uid("Name: x\n"), None);
    }

    #[test]
    fn finds_the_config_of_a_hub_and_of_a_demo_and_nothing_else() {
        assert_eq!(
            hub_config_arg(&args(&["--config", "a/c.toml"])),
            Some("a/c.toml".into())
        );
        assert_eq!(
            hub_config_arg(&args(&["--config=/x/c.toml"])),
            Some("/x/c.toml".into())
        );
        assert_eq!(
            hub_config_arg(&args(&["demo", "d", "--port", "0"])),
            Some("d/config.toml".into())
        );
        assert_eq!(
            hub_config_arg(&args(&["demo", "--port", "5", "--memory", "d"])),
            Some("d/config.toml".into())
        );
        for not_a_hub in [
            &["roster", "add", "x", "--config", "c.toml"][..],
            &["relay", "peers", "--config", "c.toml"],
            &["reload", "--config", "c.toml"],
            &["audit", "verify", "a.jsonl"],
            &["demo"],
            &[],
        ] {
            assert_eq!(hub_config_arg(&args(not_a_hub)), None, "{not_a_hub:?}");
        }
    }
}
