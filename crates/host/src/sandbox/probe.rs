//! Which sandbox works on this machine, found at startup by trying it (issue 29;
//! docs/operations.md "Delegated tasks"). A container may ship bwrap and still refuse user
//! namespaces, or a kernel may have Landlock compiled in but not enabled: only running a
//! sandboxed `true` tells, so that is what is done, once, before the hub takes any task.
//!
//! Owns the ranking for `auto` (bubblewrap, then Landlock) and the startup errors: a
//! sandbox that was configured but does not work, or `auto` with neither, stops the hub
//! with what to install; never a silent downgrade. Refuses: running anything but bwrap and
//! `true`.

use super::landlock::{self, MIN_ABI};
use super::layout::Layout;
use super::{bwrap, landlock_sys, Kind, Mode};
use std::fmt;
use std::io;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// How long the bwrap probe may take before it counts as not working.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// What `install bubblewrap` is on the systems we document.
pub const INSTALL_BWRAP: &str =
    "install bubblewrap (Debian, Ubuntu: apt-get install bubblewrap; Fedora: dnf install bubblewrap; Arch: pacman -S bubblewrap)";

/// Why the configured sandbox (or, for `auto`, every sandbox) does not work here: stops the
/// hub at startup.
#[derive(Debug)]
pub enum ProbeError {
    /// `tasks.sandbox = "bwrap"` and bubblewrap failed its trial.
    Bwrap(TrialError),
    /// `tasks.sandbox = "landlock"` and Landlock failed its trial.
    Landlock(TrialError),
    /// `tasks.sandbox = "auto"` and both failed.
    NoneWorks {
        bwrap: TrialError,
        landlock: TrialError,
    },
}

impl fmt::Display for ProbeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProbeError::Bwrap(why) => write!(
                f,
                "tasks.sandbox = \"bwrap\", but bubblewrap does not work here: {why}"
            ),
            ProbeError::Landlock(why) => write!(
                f,
                "tasks.sandbox = \"landlock\", but Landlock does not work here: {why}"
            ),
            ProbeError::NoneWorks { bwrap, landlock } => write!(
                f,
                "no sandbox for delegated agents works here: bubblewrap: {bwrap}; Landlock: {landlock}. {INSTALL_BWRAP}, or set tasks.sandbox = \"none\" to run agents unsandboxed (they can then read the roster and act as any agent)"
            ),
        }
    }
}

impl std::error::Error for ProbeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ProbeError::Bwrap(why) | ProbeError::Landlock(why) => Some(why),
            // Two causes; the first stands for both.
            ProbeError::NoneWorks { bwrap, .. } => Some(bwrap),
        }
    }
}

/// Why one sandbox failed its trial run.
#[derive(Debug)]
pub enum TrialError {
    /// No `bwrap` on the hub's PATH.
    BwrapNotOnPath,
    /// No `true` binary to run under the sandbox.
    NoTrue,
    /// The trial process could not be started.
    Spawn(io::Error),
    /// The thread that waits for it could not be started.
    Thread(io::Error),
    /// Waiting for it failed.
    Wait(io::Error),
    /// It ran past `PROBE_TIMEOUT` (and was killed).
    TimedOut,
    /// bwrap ran and failed: the first line it wrote to stderr (may be empty).
    BwrapFailed { program: PathBuf, stderr: String },
    /// The kernel offers no Landlock.
    NoLandlock,
    /// The kernel's Landlock ABI is older than `MIN_ABI`.
    LandlockTooOld { abi: u32 },
    /// The ruleset could not be made.
    Ruleset(io::Error),
    /// The restricted `true` failed: the first line it wrote to stderr.
    RestrictedFailed { stderr: String },
}

impl fmt::Display for TrialError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TrialError::BwrapNotOnPath => write!(f, "bwrap is not on PATH; {INSTALL_BWRAP}"),
            TrialError::NoTrue => {
                f.write_str("neither /bin/true nor /usr/bin/true exists to try it with")
            }
            TrialError::Spawn(e) | TrialError::Wait(e) | TrialError::Ruleset(e) => {
                write!(f, "{e}")
            }
            TrialError::Thread(e) => write!(f, "cannot start a thread: {e}"),
            TrialError::TimedOut => write!(
                f,
                "it did not finish within {} s",
                PROBE_TIMEOUT.as_secs()
            ),
            TrialError::BwrapFailed { program, stderr } => {
                write!(f, "{} failed", program.display())?;
                if !stderr.is_empty() {
                    write!(f, ": {stderr}")?;
                }
                Ok(())
            }
            TrialError::NoLandlock => f.write_str(
                "the kernel has no Landlock (not built in, or not in the lsm= boot list), or a seccomp filter refuses it",
            ),
            TrialError::LandlockTooOld { abi } => write!(
                f,
                "the kernel's Landlock ABI is {abi}; at least {MIN_ABI} (Linux 5.19) is needed"
            ),
            TrialError::RestrictedFailed { stderr } => {
                write!(f, "a restricted process could not run: {stderr}")
            }
        }
    }
}

impl std::error::Error for TrialError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            TrialError::Spawn(e)
            | TrialError::Thread(e)
            | TrialError::Wait(e)
            | TrialError::Ruleset(e) => Some(e),
            _ => None,
        }
    }
}

/// The sandbox for `mode`, and the log lines that explain the choice. `scratch` is a folder
/// the bwrap probe hides (any existing folder); `path_var` the hub's PATH.
pub fn detect(
    mode: Mode,
    path_var: &str,
    scratch: &Path,
) -> Result<(Kind, Vec<String>), ProbeError> {
    let mut notes = Vec::new();
    match mode {
        Mode::None => Ok((Kind::None, notes)),
        Mode::Bwrap => try_bwrap(path_var, scratch)
            .map(|program| (Kind::Bwrap { program }, notes))
            .map_err(ProbeError::Bwrap),
        Mode::Landlock => try_landlock()
            .map(|abi| (Kind::Landlock { abi }, notes))
            .map_err(ProbeError::Landlock),
        Mode::Auto => {
            let bw = match try_bwrap(path_var, scratch) {
                Ok(program) => return Ok((Kind::Bwrap { program }, notes)),
                Err(why) => why,
            };
            match try_landlock() {
                Ok(abi) => {
                    notes.push(format!(
                        "tasks.sandbox = \"auto\": bubblewrap does not work here ({bw}); using Landlock (ABI {abi}), which hides files but not /proc/<hub>/cmdline and cannot take the user's agent-hub entries out of an installed agent's config (docs/delegation.md \"Task identity\"); {INSTALL_BWRAP} for the stronger sandbox"
                    ));
                    Ok((Kind::Landlock { abi }, notes))
                }
                Err(ll) => Err(ProbeError::NoneWorks {
                    bwrap: bw,
                    landlock: ll,
                }),
            }
        }
    }
}

/// The absolute path of `bwrap` on `path_var`, once a sandboxed `true` ran under it.
fn try_bwrap(path_var: &str, scratch: &Path) -> Result<PathBuf, TrialError> {
    let program =
        crate::agents::on_path::which("bwrap", path_var).ok_or(TrialError::BwrapNotOnPath)?;
    let true_bin = ["/bin/true", "/usr/bin/true"]
        .iter()
        .map(Path::new)
        .find(|p| p.is_file())
        .ok_or(TrialError::NoTrue)?;
    let scratch = std::fs::canonicalize(scratch).unwrap_or_else(|_| scratch.to_owned());
    let argv = bwrap::probe_argv(&program, &scratch, true_bin);
    let out = run_bounded(
        Command::new(&argv[0])
            .args(&argv[1..])
            .env_clear()
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped()),
    )?;
    if out.0 {
        Ok(program)
    } else {
        Err(TrialError::BwrapFailed {
            program,
            stderr: out.1,
        })
    }
}

/// Runs `cmd` to its end or `PROBE_TIMEOUT`; (succeeded, first stderr line).
fn run_bounded(cmd: &mut Command) -> Result<(bool, String), TrialError> {
    let child = cmd.spawn().map_err(TrialError::Spawn)?;
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("sandbox-probe".into())
        .spawn(move || {
            let _ = tx.send(child.wait_with_output());
        })
        .map_err(TrialError::Thread)?;
    match rx.recv_timeout(PROBE_TIMEOUT) {
        Ok(Ok(out)) => {
            let err = String::from_utf8_lossy(&out.stderr);
            let first = err.lines().next().unwrap_or("").trim().to_owned();
            Ok((out.status.success(), first))
        }
        Ok(Err(e)) => Err(TrialError::Wait(e)),
        Err(_) => {
            // SAFETY: kill(2) on the pid of the child spawned above, not yet reaped (the
            // thread's wait holds it), so the pid cannot have been reused.
            unsafe {
                libc::kill(pid as libc::pid_t, libc::SIGKILL);
            }
            Err(TrialError::TimedOut)
        }
    }
}

/// The Landlock ABI, once a process restricted by a ruleset ran `true`.
fn try_landlock() -> Result<u32, TrialError> {
    let abi = landlock_sys::abi().ok_or(TrialError::NoLandlock)?;
    if abi < MIN_ABI {
        return Err(TrialError::LandlockTooOld { abi });
    }
    let true_bin = ["/bin/true", "/usr/bin/true"]
        .iter()
        .map(Path::new)
        .find(|p| p.is_file())
        .ok_or(TrialError::NoTrue)?;
    // Everything granted: this tries the mechanism (a seccomp profile may refuse
    // landlock_restrict_self), not a layout.
    let rules = landlock::rules(&Layout::default(), abi, &mut |_| None);
    let ruleset = landlock_sys::build(&rules, abi).map_err(TrialError::Ruleset)?;
    let mut cmd = Command::new(true_bin);
    cmd.env_clear()
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let fd = ruleset.raw_fd();
    // SAFETY: confine_child makes system calls only (prctl, capset, landlock_restrict_self),
    // as a pre_exec hook must; `ruleset` outlives the spawn.
    unsafe {
        cmd.pre_exec(move || landlock_sys::confine_child(fd));
    }
    let (ok, err) = run_bounded(&mut cmd)?;
    drop(ruleset);
    if ok {
        Ok(abi)
    } else {
        Err(TrialError::RestrictedFailed { stderr: err })
    }
}
