//! Starting the agent process and signalling its group (docs/acp.md "The runner").
//!
//! Owns the `Command` (argv exec'd directly, never through a shell; the environment cleared
//! and replaced by the caller's; its own session and process group, agents-acp-mcp.md §1.9
//! step 1, §5.2; all three stdio piped; the Landlock restriction, when the task's sandbox has
//! one, applied between fork and exec) and `kill(2)` on the group. Refuses: looking argv[0]
//! up on a PATH (the caller resolves it; a relative one is refused), inheriting anything of
//! the hub's environment, or its controlling terminal. `spawn_reaped` is the start both
//! drivers (ACP and headless) share: the reaper thread, the agent, its pipes.

use super::pipes::Input;
use agent_hub_proto::acp::sanitize::Secrets;
use agent_hub_proto::acp::{ExitStatus, Failure, Signal, Status};
use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::mpsc::{self, Receiver, SyncSender};

/// Why a task's agent could not be started. Its text becomes the task's `failed` outcome,
/// cleaned of the task's secrets (`spawn_reaped`).
#[derive(Debug)]
pub(super) enum SpawnError {
    EmptyArgv,
    /// argv[0] is relative: `shown` is it as the error may show it (`Secrets::token`), never
    /// the raw text.
    RelativeProgram {
        shown: String,
    },
    /// The task's cwd is not a directory.
    NoCwd(PathBuf),
    /// exec failed (or the pre-exec steps: setsid, Landlock).
    Exec {
        program: PathBuf,
        error: std::io::Error,
    },
    /// The task's sandbox could not be prepared.
    Sandbox(agent_hub_host::sandbox::PrepareError),
}

impl std::fmt::Display for SpawnError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SpawnError::EmptyArgv => write!(f, "the agent's argv is empty"),
            SpawnError::RelativeProgram { shown } => {
                write!(f, "argv[0] {shown:?} is not an absolute path")
            }
            SpawnError::NoCwd(cwd) => {
                write!(f, "the task's cwd {} is not a directory", cwd.display())
            }
            SpawnError::Exec { program, error } => write!(f, "{}: {error}", program.display()),
            SpawnError::Sandbox(e) => write!(f, "the sandbox could not be set up: {e}"),
        }
    }
}

impl std::error::Error for SpawnError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            SpawnError::Exec { error, .. } => Some(error),
            SpawnError::Sandbox(e) => Some(e),
            _ => None,
        }
    }
}

/// Spawns `argv` in `cwd` with exactly `env`. The child leads a new session and process
/// group whose id is its pid. With `landlock`, the child restricts itself to that ruleset
/// (`sandbox::landlock_sys::confine_child`) before it execs; the caller keeps the ruleset
/// open until this returns.
pub(super) fn spawn(
    argv: &[OsString],
    env: &[(OsString, OsString)],
    cwd: &Path,
    landlock: Option<std::os::fd::RawFd>,
) -> Result<Child, SpawnError> {
    let Some((program, args)) = argv.split_first() else {
        return Err(SpawnError::EmptyArgv);
    };
    let program = PathBuf::from(program);
    if !program.is_absolute() {
        // With the environment cleared a PATH lookup would use whatever PATH `env` holds;
        // the manifest layer resolves argv[0] once, checked, instead.
        return Err(SpawnError::RelativeProgram {
            shown: Secrets::default().token(&program.to_string_lossy()),
        });
    }
    if !cwd.is_dir() {
        return Err(SpawnError::NoCwd(cwd.to_owned()));
    }
    let mut cmd = Command::new(&program);
    cmd.args(args)
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .current_dir(cwd)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // SAFETY: setsid(2) and the Landlock steps are system calls only, as a pre_exec hook
    // must make. setsid gives the agent a session of its own: no controlling terminal (the
    // hub's, when it runs in one, could otherwise be fed input with TIOCSTI), and it leads
    // a new process group whose id is its pid, as `process_group(0)` did, so the group
    // signals below reach everything it starts.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setsid() < 0 {
                return Err(std::io::Error::last_os_error());
            }
            if let Some(fd) = landlock {
                agent_hub_host::sandbox::landlock_sys::confine_child(fd)?;
            }
            Ok(())
        });
    }
    cmd.spawn()
        .map_err(|error| SpawnError::Exec { program, error })
}

/// Spawns a task's agent: inside its sandbox when it has one (`sandbox::prepare` makes the
/// bwrap argv or the Landlock ruleset and the per-task copies, here on the task's thread),
/// else as `spawn` does. Returns the child and, when sandboxed, the line saying what the
/// sandbox hides and shows, for the task's log.
pub(super) fn spawn_task(
    argv: &[OsString],
    env: &[(OsString, OsString)],
    cwd: &Path,
    sandbox: Option<&agent_hub_host::sandbox::TaskSandbox>,
) -> Result<(Child, Option<String>), SpawnError> {
    let Some(sb) = sandbox else {
        return spawn(argv, env, cwd, None).map(|c| (c, None));
    };
    let prepared = agent_hub_host::sandbox::prepare(sb, argv, cwd).map_err(SpawnError::Sandbox)?;
    let mut env: Vec<(OsString, OsString)> = env
        .iter()
        .filter(|(k, _)| !prepared.env.iter().any(|(o, _)| o == k))
        .cloned()
        .collect();
    env.extend(prepared.env.iter().cloned());
    let fd = prepared.ruleset.as_ref().map(|r| r.raw_fd());
    let child = spawn(&prepared.argv, &env, cwd, fd)?;
    // The child holds its own restriction now; the ruleset descriptor is closed here.
    drop(prepared.ruleset);
    Ok((child, Some(prepared.summary)))
}

/// A task's agent, running, its process handed to the reaper thread.
pub(super) struct Spawned {
    /// The agent's pid, which is also its process group's id.
    pub pgid: u32,
    pub stdin: Option<ChildStdin>,
    pub stdout: Option<ChildStdout>,
    pub stderr: Option<ChildStderr>,
    /// What the sandbox hides and shows, for the task's log; None without a sandbox.
    pub sandboxed: Option<String>,
}

/// What both drivers do to get their agent running: the reaper thread first, named
/// `reaper`, so that a child is never left unreaped; then the agent (`spawn_task`); its pipes
/// taken; the child handed to the reaper, whose exit reaches the driver as `Input::Exit` on
/// `exits`. An error is the task's `failed` outcome, cleaned of `secrets`.
pub(super) fn spawn_reaped(
    reaper: &str,
    argv: &[OsString],
    env: &[(OsString, OsString)],
    cwd: &Path,
    sandbox: Option<&agent_hub_host::sandbox::TaskSandbox>,
    secrets: &Secrets,
    exits: SyncSender<Input>,
) -> Result<Spawned, Status> {
    let (child_tx, child_rx) = mpsc::channel::<Child>();
    std::thread::Builder::new()
        .name(reaper.into())
        .spawn(move || reap(child_rx, exits))
        .map_err(|e| Status::Failed(Failure::Spawn(format!("cannot start a thread: {e}"))))?;
    let (mut child, sandboxed) = spawn_task(argv, env, cwd, sandbox)
        .map_err(|why| Status::Failed(Failure::Spawn(secrets.clean(&why.to_string()))))?;
    let pgid = child.id();
    let (stdin, stdout, stderr) = (child.stdin.take(), child.stdout.take(), child.stderr.take());
    if let Err(mpsc::SendError(mut child)) = child_tx.send(child) {
        // Unreachable while the reaper thread lives; reap here rather than leak.
        signal_group(pgid, Signal::Kill);
        let _ = child.wait();
        return Err(Status::Failed(Failure::Spawn(
            "the reaper thread is gone".into(),
        )));
    }
    Ok(Spawned {
        pgid,
        stdin,
        stdout,
        stderr,
        sandboxed,
    })
}

/// Waits for the child the driver hands over and reports its exit.
fn reap(child: Receiver<Child>, tx: SyncSender<Input>) {
    let Ok(mut child) = child.recv() else {
        return;
    };
    let status = match child.wait() {
        Ok(st) => ExitStatus::from(st),
        Err(_) => ExitStatus {
            code: None,
            signal: None,
        },
    };
    let _ = tx.send(Input::Exit(status));
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
