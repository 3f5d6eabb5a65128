//! The lighter helpers, for the tests (deliver, mcp, the ACP runner and session) that need a
//! real hub but not the whole harness (`harness.rs`): the config text and starting
//! `agent-hub-server` in a folder until it prints its ready line. Never sleeps; every wait has a deadline. `fakes`
//! builds and finds the scripted agents (crates/test-fakes).

use std::fs;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

// Not every binary that includes `common` drives a fake agent.
#[allow(dead_code)]
pub mod fakes;

/// A config for a memory-store hub on a free port, the example limits but `ack_timeout_ms`.
pub fn memory_config(ack_timeout_ms: u64) -> String {
    let limits = agent_hub_host::config::Limits {
        ack_timeout_ms,
        ..agent_hub_host::config::Limits::example()
    };
    format!(
        "port = 0\naudit_log_path = \"audit.jsonl\"\nservice_log_path = \"service.log\"\n\
         roster_path = \"roster.toml\"\n\n[store]\nkind = \"memory\"\n\n{}",
        agent_hub_host::config::limits_to_toml(&limits)
    )
}

/// Starts `server --config <dir>/config.toml` in `dir` and waits (at most `deadline`) for its
/// ready line; returns the child and its port. Stdout is drained to its end on a thread so the
/// server never blocks on a full pipe; stderr goes to `<dir>/server.stderr`.
pub fn start_server(server: &str, dir: &Path, deadline: Duration) -> (Child, u16) {
    let stderr = std::fs::File::create(dir.join("server.stderr")).unwrap();
    let mut child = Command::new(server)
        .arg("--config")
        .arg(dir.join("config.toml"))
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .expect("spawn agent-hub-server");
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            let _ = tx.send(line);
        }
    });
    let started = Instant::now();
    loop {
        let left = deadline.saturating_sub(started.elapsed());
        match rx.recv_timeout(left) {
            Ok(line) => {
                let port = line
                    .strip_prefix("agent-hub-server: listening on 127.0.0.1:")
                    .and_then(|r| r.strip_suffix("; hub ready"))
                    .and_then(|p| p.parse().ok());
                if let Some(p) = port {
                    return (child, p);
                }
            }
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                let err = std::fs::read_to_string(dir.join("server.stderr")).unwrap_or_default();
                panic!("agent-hub-server printed no ready line; stderr:\n{err}");
            }
        }
    }
}

/// A private (700) temp folder, removed on drop unless the test panicked (then its path is
/// printed for inspection).
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(prefix: &str) -> TempDir {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let p = std::env::temp_dir().join(format!(
            "agent-hub-{prefix}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        fs::create_dir_all(&p).unwrap();
        fs::set_permissions(&p, fs::Permissions::from_mode(0o700)).unwrap();
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("kept for inspection: {}", self.0.display());
        } else {
            let _ = fs::remove_dir_all(&self.0);
        }
    }
}

/// Writes a file readable by its owner only (roster, tokens).
pub fn write_private(path: &Path, text: &str) {
    fs::write(path, text).unwrap();
    fs::set_permissions(path, fs::Permissions::from_mode(0o600)).unwrap();
}
