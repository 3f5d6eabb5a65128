//! `agent-hub-bench --peers` (issue 13) with the real binaries: a PATH without Redis,
//! beanstalkd and NATS skips each with a line saying so and still measures agent-hub; a peer
//! that is on PATH but cannot start is recorded as failed and the run goes on. Short windows,
//! and no assertion about any figure's size (speed is never asserted in tests).
//!
//! The server is the root package's binary, found where the bench finds it: beside the bench
//! in the workspace's target folder. `cargo test --workspace` (the README's test command)
//! builds both; a run of this package alone after a fresh clone needs `cargo build` first, and
//! says so.

use serde_json::Value;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::Duration;

const BENCH: &str = env!("CARGO_BIN_EXE_agent-hub-bench");

/// `agent-hub-server` beside the bench (the same profile's folder of the same target dir).
fn server() -> PathBuf {
    let server = Path::new(BENCH).with_file_name("agent-hub-server");
    assert!(
        server.is_file(),
        "{} is not built: run the workspace's tests (cargo test --release --workspace) or \
         cargo build first, with the same profile",
        server.display()
    );
    server
}

/// A fresh folder under the system temp dir, removed when dropped.
struct TempDir {
    path: PathBuf,
}

impl TempDir {
    fn new() -> TempDir {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let path = std::env::temp_dir().join(format!(
            "agent-hub-bench-test-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        fs::create_dir_all(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        TempDir { path }
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.path);
    }
}

fn write_file(path: &Path, text: &str, mode: u32) {
    fs::write(path, text).unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
}
/// The bench starts a hub and runs four short workloads: generous, since the suite may run
/// beside builds on a small machine; a run that reaches it fails instead of hanging.
const BENCH_DEADLINE: Duration = Duration::from_secs(180);

/// Runs the bench with `PATH` set to `path` and the smallest workloads; returns the exit
/// code, stdout and stderr.
fn bench_peers(path: &Path, work: &Path) -> (i32, String, String) {
    let mut cmd = Command::new(BENCH);
    cmd.env("PATH", path)
        .args(["--peers", "--json", "--reps", "1", "--peer-secs", "0.2"])
        .args([
            "--peer-clients",
            "1",
            "--peer-handoffs",
            "3",
            "--peer-waiters",
            "10",
        ])
        .args(["--pairs", "1", "--server"])
        .arg(server())
        .arg("--work-dir")
        .arg(work)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = cmd.spawn().expect("spawn agent-hub-bench");
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(BENCH_DEADLINE) {
        Ok(out) => {
            let out = out.expect("wait for the bench");
            (
                out.status.code().unwrap_or(-1),
                String::from_utf8_lossy(&out.stdout).into_owned(),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            )
        }
        Err(_) => {
            // SAFETY: kill(2) on a child the waiting thread has not reaped yet.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
            panic!("agent-hub-bench --peers did not finish within {BENCH_DEADLINE:?}");
        }
    }
}

fn target<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["peers"]["targets"]
        .as_array()
        .expect("targets")
        .iter()
        .find(|t| t["name"] == name)
        .unwrap_or_else(|| panic!("no target {name} in {report}"))
}

/// The hub's figures are there, one run of each workload, and nothing failed.
fn assert_hub_measured(report: &Value) {
    let hub = target(report, "agent-hub");
    assert_eq!(hub["failures"], serde_json::json!([]), "{hub}");
    assert_eq!(hub["w1_sends"][0]["clients"], 1);
    assert_eq!(hub["w1_sends"][0]["runs"].as_array().unwrap().len(), 1);
    assert!(hub["w1_sends"][0]["runs"][0]["ops"].is_u64());
    assert_eq!(hub["w2_handoff"]["runs"][0]["handoffs"], 3);
    assert!(hub["w2_handoff"]["median"]["p50_us"].is_f64());
    assert_eq!(hub["w3_parked"]["runs"][0]["waiters"], 10);
    assert_eq!(hub["w4_pairs"]["runs"][0]["pairs"], 1);
    let table = report["peers"]["table_markdown"].as_str().unwrap();
    assert!(table.contains("| agent-hub |"), "{table}");
}

#[test]
fn bench_peers_skips_absent_peers_and_measures_the_hub() {
    let dir = TempDir::new();
    let empty = dir.path.join("empty-bin");
    std::fs::create_dir(&empty).unwrap();
    let (code, stdout, stderr) = bench_peers(&empty, &dir.path);
    assert_eq!(code, 0, "stdout:\n{stdout}\nstderr:\n{stderr}");
    for (name, binary) in [
        ("redis", "redis-server"),
        ("beanstalkd", "beanstalkd"),
        ("nats", "nats-server"),
    ] {
        let line = format!("peers: {name} skipped: {binary} not found on PATH");
        assert!(stderr.contains(&line), "no {line:?} in:\n{stderr}");
    }
    let report: Value = serde_json::from_str(&stdout).expect("one JSON object on stdout");
    let skipped: Vec<&str> = report["peers"]["skipped"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(skipped, ["redis", "beanstalkd", "nats"]);
    assert_eq!(report["peers"]["targets"].as_array().unwrap().len(), 1);
    assert_hub_measured(&report);
    // Nothing of the run is left behind in the work dir (the bench's temp dir is removed).
    let left: Vec<_> = std::fs::read_dir(&dir.path)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n != "empty-bin")
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

#[test]
fn bench_peers_records_a_peer_that_cannot_start_and_goes_on() {
    let dir = TempDir::new();
    let bin = dir.path.join("bin");
    std::fs::create_dir(&bin).unwrap();
    // On PATH, executable, and exits at once: as a server whose port or config is refused.
    write_file(
        &bin.join("redis-server"),
        "#!/bin/sh\necho refusing to start >&2\nexit 1\n",
        0o700,
    );
    let (code, stdout, stderr) = bench_peers(&bin, &dir.path);
    assert_eq!(code, 0, "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stderr.contains("redis did not start"), "{stderr}");
    let report: Value = serde_json::from_str(&stdout).expect("one JSON object on stdout");
    let redis = target(&report, "redis");
    let failures = redis["failures"].as_array().unwrap();
    assert_eq!(failures.len(), 1, "{redis}");
    assert!(
        failures[0].as_str().unwrap().contains("refusing to start"),
        "{redis}"
    );
    assert_eq!(redis["w2_handoff"]["runs"], serde_json::json!([]));
    assert_hub_measured(&report);
}
