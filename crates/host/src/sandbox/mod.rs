//! The OS sandbox delegated agents run in (issue 29; docs/delegation.md "Task identity";
//! PLAN.md §12). A delegated agent is a program the hub starts as its own user: without a
//! sandbox it could read the hub's config, roster and logs, the other tasks' credentials and
//! `/proc/<hub>`, and so speak as anyone. With one, it sees the machine as before except
//! those, and runs its own identity only.
//!
//! Two ways, chosen by `tasks.sandbox` (`Mode`), the strongest available by default:
//! bubblewrap (`bwrap`: new user, PID and mount namespaces; hidden paths do not exist for the
//! agent, and `/proc` shows only its own processes) or, where user namespaces are refused,
//! Landlock (a kernel access-control list; hidden paths exist but cannot be opened, and
//! `/proc/<hub>/cmdline` stays readable; `ptrace` and `/proc/<hub>/environ` are refused by
//! Landlock's own rule). `none` only when configured, with a warning.
//!
//! One job per file: `layout` decides what is hidden, shown again and read-only (pure);
//! `bwrap` turns a layout into a bubblewrap argv (pure); `landlock` turns it into Landlock
//! rules (pure) and `landlock_sys` makes the system calls; `probe` finds at startup which
//! sandbox works here by trying it; `prepare` does one task's IO (which paths exist, the
//! per-task copies of the agent's config without the user's agent-hub entries) and hands
//! the runner what to exec.

pub mod bwrap;
pub mod landlock;
pub mod landlock_sys;
pub mod layout;
mod prepare;
pub mod probe;

pub use agent_hub_proto::tasks::settings::SandboxMode as Mode;
pub use prepare::{prepare, PrepareError, Prepared};

use crate::agents::manifest::Manifest;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The sandbox tasks run in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// bubblewrap at this absolute path.
    Bwrap {
        program: PathBuf,
    },
    /// Landlock with this kernel ABI.
    Landlock {
        abi: u32,
    },
    None,
}

impl Kind {
    pub fn tag(&self) -> &'static str {
        match self {
            Kind::Bwrap { .. } => "bwrap",
            Kind::Landlock { .. } => "landlock",
            Kind::None => "none",
        }
    }
}

/// The warning a hub with `tasks.sandbox = "none"` logs at startup and `agent-hub agents`
/// prints.
pub const NONE_WARNING: &str = "tasks.sandbox = \"none\": delegated agents run unsandboxed as this user and can read the hub's config, roster, logs and every running task's credential, and so act as any agent";

/// What every task is kept from, as the hub knows it at startup. Paths as configured: which
/// exist is checked at each task's start (a file such as the relay status file may appear
/// later).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HubPaths {
    /// The config, roster, audit log and its `.head`, service log, queue store and its
    /// companions, relay keys and status file.
    pub secret_files: Vec<PathBuf>,
    /// `tasks.credentials_dir` and the roster's `tokens/`.
    pub secret_dirs: Vec<PathBuf>,
    /// The hub's own binaries and the manifest folders.
    pub read_only: Vec<PathBuf>,
    /// The task roots (read-write) and the client binary (read-only), shown even inside a
    /// hidden folder.
    pub needed: Vec<(PathBuf, bool)>,
    /// HOME and the PATH entries: never hidden whole.
    pub keep_whole: Vec<PathBuf>,
    /// HOME, where the agents' config files are.
    pub home: PathBuf,
}

/// What `HubPaths::new` is built from (the config and the process's facts).
#[derive(Debug, Clone)]
pub struct HubFiles<'a> {
    pub config: &'a Path,
    pub roster: &'a Path,
    pub audit_log: &'a Path,
    pub service_log: &'a Path,
    pub store: Option<&'a Path>,
    pub relay_status: Option<&'a Path>,
    pub relay_keys: Vec<&'a Path>,
    pub credentials_dir: &'a Path,
    pub server_binary: Option<&'a Path>,
    pub client_binary: &'a Path,
    pub manifest_dirs: Vec<&'a Path>,
    pub cwd_roots: &'a [PathBuf],
    pub home: &'a Path,
    pub path_var: &'a str,
}

impl HubPaths {
    /// Pure: the lists from the hub's files.
    pub fn new(f: &HubFiles) -> HubPaths {
        let with = |p: &Path, suffix: &str| {
            let mut s = p.as_os_str().to_owned();
            s.push(suffix);
            PathBuf::from(s)
        };
        let mut secret_files = vec![
            f.config.to_owned(),
            f.roster.to_owned(),
            f.audit_log.to_owned(),
            with(f.audit_log, ".head"),
            f.service_log.to_owned(),
        ];
        if let Some(db) = f.store {
            for suffix in ["", "-wal", "-shm", "-journal", ".lock"] {
                secret_files.push(with(db, suffix));
            }
        }
        secret_files.extend(f.relay_status.map(Path::to_owned));
        secret_files.extend(f.relay_keys.iter().map(|p| p.to_path_buf()));
        let mut secret_dirs = vec![f.credentials_dir.to_owned()];
        if let Some(dir) = f.roster.parent() {
            secret_dirs.push(dir.join("tokens"));
        }
        let mut read_only: Vec<PathBuf> = f.server_binary.iter().map(|p| p.to_path_buf()).collect();
        read_only.push(f.client_binary.to_owned());
        read_only.extend(f.manifest_dirs.iter().map(|p| p.to_path_buf()));
        let mut needed: Vec<(PathBuf, bool)> =
            f.cwd_roots.iter().map(|r| (r.clone(), true)).collect();
        needed.push((f.client_binary.to_owned(), false));
        let mut keep_whole = vec![f.home.to_owned()];
        keep_whole.extend(
            f.path_var
                .split(':')
                .filter(|p| p.starts_with('/'))
                .map(PathBuf::from),
        );
        HubPaths {
            secret_files,
            secret_dirs,
            read_only,
            needed,
            keep_whole,
            home: f.home.to_owned(),
        }
    }
}

/// The hub's sandbox: which one, and what it keeps from every task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sandbox {
    pub kind: Kind,
    pub paths: HubPaths,
}

/// One task's sandbox, for the runner (`prepare` does its IO on the task's own thread).
#[derive(Debug, Clone)]
pub struct TaskSandbox {
    pub hub: Arc<Sandbox>,
    /// The task's private folder (`runner::TaskCredential::dir`): its token, the per-task
    /// copies of the agent's config, its temporary folder under Landlock.
    pub task_dir: PathBuf,
    /// The task's token file (absent for a headless task without the hub's MCP server).
    pub token_file: Option<PathBuf>,
    /// Other files of the task's folder the agent reads (a headless task's MCP config, issue
    /// 37 design §6): shown read-only, as the token is.
    pub shown_files: Vec<PathBuf>,
    /// The agent's manifest, for the copies of its installed config files.
    pub manifest: Option<Manifest>,
}
