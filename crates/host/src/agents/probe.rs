//! What `agent-hub agents` finds out about each manifest: is the binary on PATH, which
//! version is it, are its ACP and headless programs there.
//!
//! Owns running `<binary> --version` (the PATH search is `on_path`'s, which the task runner's
//! rule in `runnable` shares). That run uses no shell, takes its
//! program from the PATH search (an absolute path), gets stdin from /dev/null, runs in its
//! own process group, and is killed — the whole group — when it outlives
//! `VERSION_TIMEOUT`; its output is capped and stripped of control characters.

use super::manifest::Manifest;
use serde::Serialize;
use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long `<binary> --version` may take (Node-based CLIs take a second or two cold).
pub const VERSION_TIMEOUT: Duration = Duration::from_secs(5);
/// Most bytes of `--version` output read.
const VERSION_MAX_BYTES: u64 = 16 * 1024;
/// Longest version string kept, in characters.
const VERSION_MAX_CHARS: usize = 80;

/// The first line of `program --version`'s stdout (or stderr when stdout is empty), cleaned;
/// None when it fails, prints nothing or times out.
pub fn version(program: &Path) -> Option<String> {
    let out = run_capture(program, &["--version"], VERSION_TIMEOUT, VERSION_MAX_BYTES)?;
    if !out.success {
        return None;
    }
    first_line(&out.stdout).or_else(|| first_line(&out.stderr))
}

/// What a finished `run_capture` child left.
pub struct Captured {
    pub success: bool,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

/// Runs `program args…` with no shell, stdin from /dev/null, in its own process group, and
/// collects at most `max_bytes` of each output. None when it cannot start or outlives
/// `timeout` (then its whole group is killed).
pub fn run_capture(
    program: &Path,
    args: &[&str],
    timeout: Duration,
    max_bytes: u64,
) -> Option<Captured> {
    use std::os::unix::process::CommandExt;
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .env("NO_COLOR", "1")
        .process_group(0)
        .spawn()
        .ok()?;
    let pid = child.id() as libc::pid_t;
    let stdout = child.stdout.take()?;
    let stderr = child.stderr.take()?;
    // Readers report through a channel, so a grandchild that keeps a pipe open (a daemon
    // started by --version) can delay us by at most the deadline, never hang us.
    let (tx, rx) = std::sync::mpsc::channel();
    for (which, pipe) in [
        (0usize, Box::new(stdout) as Box<dyn Read + Send>),
        (1, Box::new(stderr)),
    ] {
        let tx = tx.clone();
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = pipe.take(max_bytes).read_to_end(&mut buf);
            let _ = tx.send((which, buf));
        });
    }
    drop(tx);
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break Some(s),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            _ => {
                // SAFETY: kill(2) on the process group we created; no memory is involved.
                unsafe {
                    libc::kill(-pid, libc::SIGKILL);
                }
                let _ = child.wait();
                break None;
            }
        }
    }?;
    let mut outputs: [Vec<u8>; 2] = [Vec::new(), Vec::new()];
    for _ in 0..2 {
        let left = deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(100));
        match rx.recv_timeout(left) {
            Ok((which, buf)) => outputs[which] = buf,
            Err(_) => break,
        }
    }
    let [stdout, stderr] = outputs;
    Some(Captured {
        success: status.success(),
        stdout,
        stderr,
    })
}

/// The first non-blank line, control characters removed, at most `VERSION_MAX_CHARS`.
pub fn first_line(bytes: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(bytes);
    let line = text.lines().map(str::trim).find(|l| !l.is_empty())?;
    let clean: String = strip_ansi(line)
        .chars()
        .filter(|c| !c.is_control())
        .take(VERSION_MAX_CHARS)
        .collect();
    (!clean.is_empty()).then_some(clean)
}

fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            if chars.peek() == Some(&'[') {
                chars.next();
                for n in chars.by_ref() {
                    if n.is_ascii_alphabetic() {
                        break;
                    }
                }
            }
            continue;
        }
        out.push(c);
    }
    out
}

/// One row of `agent-hub agents`.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct AgentInfo {
    pub name: String,
    pub display: String,
    pub installed: bool,
    /// The first of the manifest's binaries found on PATH.
    pub binary: Option<String>,
    pub version: Option<String>,
    /// The ACP launch argv, when the manifest has one.
    pub acp: Option<Vec<String>>,
    /// Whether the ACP argv's program is on PATH.
    pub acp_available: bool,
    pub headless: Option<Vec<String>>,
    pub headless_available: bool,
    /// How it takes delegated work: `acp`, `headless` (the fallback) or `no`
    /// (`runnable::delegate_mode`, the rule the task runner applies).
    pub delegate: super::runnable::Delegate,
    /// What its tasks report of their usage in that mode (`tokens,cost,context`, `-` for
    /// nothing; issue 38 design §1): a budget on a figure it does not report is refused.
    pub reports: String,
    pub deliver: String,
    /// "builtin", or the manifest file that added or overrode it.
    pub manifest: String,
}

/// Probes one manifest against `path_var`. `with_version` false skips running the binary.
pub fn probe(
    m: &Manifest,
    manifest_origin: String,
    path_var: &str,
    with_version: bool,
) -> AgentInfo {
    let binary = m
        .binaries
        .iter()
        .find_map(|b| super::on_path::which(b, path_var));
    let version = match (&binary, with_version) {
        (Some(b), true) => version(b),
        _ => None,
    };
    // The same rule the task runner applies (`runnable::modes`), so a column never says a
    // mode runs that a task would be refused for.
    let modes = super::runnable::modes(m, path_var);
    AgentInfo {
        name: m.name.clone(),
        display: m.display.clone(),
        installed: binary.is_some(),
        binary: binary.map(|b| b.display().to_string()),
        version,
        acp: (!m.run.acp.is_empty()).then(|| m.run.acp.clone()),
        acp_available: modes.acp,
        headless: (!m.run.headless.is_empty()).then(|| m.run.headless.clone()),
        headless_available: modes.headless,
        delegate: super::runnable::delegate_mode(m, path_var),
        reports: m
            .reports(super::runnable::delegate_mode(m, path_var))
            .to_string(),
        deliver: m.deliver.tag().to_owned(),
        manifest: manifest_origin,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_lines() {
        assert_eq!(
            first_line(b"\n  2.1.197 (Claude Code)\nmore\n").as_deref(),
            Some("2.1.197 (Claude Code)")
        );
        assert_eq!(
            first_line(b"\x1b[1mcodex-cli 0.171.0\x1b[0m\n").as_deref(),
            Some("codex-cli 0.171.0")
        );
        assert_eq!(first_line(b"a\x07b\n").as_deref(), Some("ab"));
        assert_eq!(first_line(b"   \n"), None);
        assert_eq!(first_line(&[b'9'; 500]).map(|s| s.len()), Some(80));
    }
}
