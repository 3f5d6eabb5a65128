//! The bubblewrap command line for one task (issue 29; docs/delegation.md "Task identity"):
//! the argv that runs the agent's argv inside new user, PID and IPC namespaces and a mount
//! namespace that carries out a `Layout`.
//!
//! Owns the choice of bwrap options and their order. Pure: the argv is computed from the
//! layout, the bwrap path and the agent's argv, never run here (the runner execs it, the
//! startup probe tries it). Refuses: a path that is not absolute (bwrap would resolve it
//! against its own cwd), which the layout never holds.

#![deny(clippy::disallowed_methods, clippy::disallowed_types)]

use super::layout::{Layout, Step};
use std::ffi::OsString;
use std::path::Path;

/// The options every sandboxed task gets, before the layout's mounts. Why each:
/// - `--unshare-user`: the agent's capabilities, if any, are those of a new user namespace,
///   worthless outside it; as an ordinary user this is what lets bwrap work at all.
/// - `--unshare-pid` with `--proc /proc`: a /proc that shows only the task's own processes,
///   so `/proc/<hub>/cmdline`, `environ`, `fd` and the other tasks' processes do not exist
///   for it; when the agent's first process ends, the kernel ends every process left in
///   the namespace (an MCP server in a process group of its own included).
/// - `--unshare-ipc`: no System V shared memory or queues with the rest of the machine.
/// - `--die-with-parent`: the sandbox dies with the runner thread that started it, so a hub
///   that crashes leaves no agent running.
/// - `--cap-drop ALL`: no capability inside either (the hub running as root included).
/// - `--bind / /`: the machine as the agent saw it without a sandbox (the network too: the
///   agent needs its model's API and the hub's port), then the layout's steps on top.
/// - `--dev /dev`: a minimal /dev (null, zero, random, tty, pts, shm) instead of the host's,
///   so no raw disk is reachable even with the file modes of root.
///
/// No `--new-session`: the runner already starts the agent in a new session with no
/// controlling terminal (`setsid`), so the TIOCSTI escape it guards against is closed, and the
/// agent's processes stay in the runner's process group for its TERM and KILL.
pub const BASE_OPTIONS: &[&str] = &[
    "--unshare-user",
    "--unshare-pid",
    "--unshare-ipc",
    "--die-with-parent",
    "--cap-drop",
    "ALL",
    "--bind",
    "/",
    "/",
    "--dev",
    "/dev",
    "--proc",
    "/proc",
];

/// The whole argv: `bwrap`, its options, the layout's mounts, `--chdir CWD`, `--`, then the
/// agent's argv unchanged (its argv[0] already absolute, which stays valid inside since the
/// root is bound as it is).
pub fn argv(bwrap: &Path, layout: &Layout, agent: &[OsString]) -> Vec<OsString> {
    let mut out: Vec<OsString> = vec![bwrap.as_os_str().to_owned()];
    out.extend(BASE_OPTIONS.iter().map(OsString::from));
    let mut hidden_dirs = Vec::new();
    for step in &layout.steps {
        match step {
            Step::Hide(f) if f.dir => {
                push(&mut out, &["--tmpfs"], &[&f.path]);
                hidden_dirs.push(f.path.clone());
            }
            // /dev/null stands in for a hidden file. Mounted from inside the user namespace
            // the mount is `nodev`, so opening it fails (EACCES); it cannot be written,
            // renamed or removed either (a mount point).
            Step::Hide(f) => push(&mut out, &["--ro-bind"], &[Path::new("/dev/null"), &f.path]),
            Step::Show { at, writable } => {
                let opt = if *writable { "--bind" } else { "--ro-bind" };
                push(&mut out, &[opt], &[&at.path, &at.path]);
            }
            Step::ReadOnly(f) => push(&mut out, &["--ro-bind"], &[&f.path, &f.path]),
            // bwrap reads a bind's source from the old root, so the copy is found in the
            // task's folder even though that folder is hidden inside the sandbox.
            Step::Overlay { copy, original } => {
                push(&mut out, &["--bind"], &[copy.as_path(), original.as_path()])
            }
        }
    }
    // Last, so the paths shown inside them could still be created as mount points: an
    // empty hidden folder that cannot be written to (EROFS rather than a write that
    // vanishes with the sandbox).
    for d in &hidden_dirs {
        push(&mut out, &["--remount-ro"], &[d]);
    }
    push(&mut out, &["--chdir"], &[&layout.cwd]);
    out.push("--".into());
    out.extend(agent.iter().cloned());
    out
}

fn push(out: &mut Vec<OsString>, opts: &[&str], paths: &[&Path]) {
    out.extend(opts.iter().map(OsString::from));
    out.extend(paths.iter().map(|p| p.as_os_str().to_owned()));
}

/// The argv the startup probe runs: the same namespaces and base mounts as a task, one hidden
/// folder, and `true` (so a kernel or container that refuses any of them is found at
/// startup, not at the first task).
pub fn probe_argv(bwrap: &Path, hide: &Path, true_bin: &Path) -> Vec<OsString> {
    let layout = Layout {
        steps: vec![Step::Hide(super::layout::Found::dir(hide))],
        cwd: "/".into(),
    };
    argv(bwrap, &layout, &[true_bin.as_os_str().to_owned()])
}

#[cfg(test)]
mod tests {
    use super::super::layout::{layout, Facts, Found};
    use super::*;

    fn s(v: &[OsString]) -> Vec<String> {
        v.iter().map(|a| a.to_string_lossy().into_owned()).collect()
    }

    /// The test hub's layout (everything in one temp folder with the task root inside),
    /// turned into bwrap options in a safe order.
    #[test]
    fn the_argv_hides_then_shows_then_remounts_read_only() {
        let facts = Facts {
            secret_files: vec![Found::file("/tmp/it/roster.toml")],
            secret_dirs: vec![Found::dir("/tmp/it/creds")],
            read_only: vec![Found::file("/opt/ah/agent-hub")],
            needed: vec![
                (Found::dir("/tmp/it/work"), true),
                (Found::file("/tmp/it/creds/task-1/token"), false),
            ],
            keep_whole: vec!["/root".into()],
            overlays: vec![(
                "/tmp/it/creds/task-1/overlay-0".into(),
                "/root/.claude.json".into(),
            )],
            cwd: "/tmp/it/work/sub".into(),
        };
        let agent: Vec<OsString> = vec!["/usr/bin/claude-agent-acp".into(), "--x".into()];
        let got = s(&argv(Path::new("/usr/bin/bwrap"), &layout(&facts), &agent));
        let mut want: Vec<String> = vec!["/usr/bin/bwrap".into()];
        want.extend(BASE_OPTIONS.iter().map(|s| s.to_string()));
        want.extend(
            [
                "--tmpfs",
                "/tmp/it",
                "--bind",
                "/tmp/it/work",
                "/tmp/it/work",
                "--ro-bind",
                "/tmp/it/creds/task-1/token",
                "/tmp/it/creds/task-1/token",
                "--bind",
                "/tmp/it/creds/task-1/overlay-0",
                "/root/.claude.json",
                "--ro-bind",
                "/opt/ah/agent-hub",
                "/opt/ah/agent-hub",
                "--remount-ro",
                "/tmp/it",
                "--chdir",
                "/tmp/it/work/sub",
                "--",
                "/usr/bin/claude-agent-acp",
                "--x",
            ]
            .map(String::from),
        );
        assert_eq!(got, want);
    }

    #[test]
    fn a_hidden_file_becomes_dev_null_and_the_agent_argv_follows_the_separator_untouched() {
        let l = Layout {
            steps: vec![Step::Hide(Found::file("/etc/hub/roster.toml"))],
            cwd: "/w".into(),
        };
        // An agent argument that looks like a bwrap option stays the agent's.
        let agent: Vec<OsString> = vec!["/bin/a".into(), "--bind".into(), "/".into()];
        let got = s(&argv(Path::new("/bwrap"), &l, &agent));
        let sep = got.iter().position(|a| a == "--").unwrap();
        assert_eq!(&got[sep + 1..], ["/bin/a", "--bind", "/"]);
        let hide = got.iter().position(|a| a == "/dev/null").unwrap();
        assert_eq!(got[hide - 1], "--ro-bind");
        assert_eq!(got[hide + 1], "/etc/hub/roster.toml");
        assert!(!got.contains(&"--remount-ro".to_owned()));
    }

    #[test]
    fn the_probe_runs_true_under_the_same_options() {
        let got = s(&probe_argv(
            Path::new("/usr/bin/bwrap"),
            Path::new("/tmp/p"),
            Path::new("/bin/true"),
        ));
        for o in BASE_OPTIONS {
            assert!(got.iter().any(|a| a == o), "{o}");
        }
        assert_eq!(got.last().unwrap(), "/bin/true");
        assert!(got.windows(2).any(|w| w == ["--tmpfs", "/tmp/p"]));
    }
}
