//! Starting the agent process and signalling its group (docs/acp.md "The runner").
//!
//! Owns the `Command` (argv exec'd directly, never through a shell; the environment cleared
//! and replaced by the caller's; its own process group, agents-acp-mcp.md §1.9 step 1, §5.2;
//! all three stdio piped) and `kill(2)` on the group. Refuses: looking argv[0] up on a PATH
//! (the caller resolves it; a relative one is refused), inheriting anything of the hub's
//! environment.

use crate::acp::Signal;
use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// Spawns `argv` in `cwd` with exactly `env`. The child leads a new process group whose id
/// is its pid.
pub(super) fn spawn(
    argv: &[OsString],
    env: &[(OsString, OsString)],
    cwd: &Path,
) -> Result<Child, String> {
    let Some((program, args)) = argv.split_first() else {
        return Err("the agent's argv is empty".into());
    };
    let program = PathBuf::from(program);
    if !program.is_absolute() {
        // With the environment cleared a PATH lookup would use whatever PATH `env` holds;
        // the manifest layer resolves argv[0] once, checked, instead.
        return Err(format!(
            "argv[0] {:?} is not an absolute path",
            crate::acp::sanitize::Secrets::default().token(&program.to_string_lossy())
        ));
    }
    if !cwd.is_dir() {
        return Err(format!(
            "the task's cwd {} is not a directory",
            cwd.display()
        ));
    }
    Command::new(&program)
        .args(args)
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .current_dir(cwd)
        .process_group(0)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("{}: {e}", program.display()))
}

/// Sends `signal` to every process of group `pgid`. ESRCH (the group is empty) is fine.
///
/// The group id is the leader's pid. After the leader was reaped, the id stays taken while
/// any member of its group lives; once the group is empty a new group could in principle get
/// the same id, so the driver signals the group only until the session's `Finished`, which
/// comes right after the reap (docs/acp.md "The runner").
pub(super) fn signal_group(pgid: u32, signal: Signal) {
    let Ok(pgid) = i32::try_from(pgid) else {
        return;
    };
    if pgid <= 1 {
        // Never kill(-1) or kill(0): that would signal every process we may signal, or our
        // own group. A child's pid is never 0 or 1.
        return;
    }
    let sig = match signal {
        Signal::Term => libc::SIGTERM,
        Signal::Kill => libc::SIGKILL,
    };
    // SAFETY: kill(2) has no memory preconditions; -pgid names only the group we created
    // with process_group(0) at spawn.
    unsafe {
        libc::kill(-pgid, sig);
    }
}
