//! The peer servers as child processes: found on PATH, started on loopback on a free port the
//! bench picks, in their own temp dir with a config file (the password or token lives there,
//! never on an argv), waited for by polling a connect, and stopped and reaped at the end or on
//! error (`Drop`), or by the signal thread (`HUB_PIDS`, shared with the hub's processes).

use crate::base::Res;
use crate::fixtures::{exited_unreaped, hub_pids, terminate_child, write_private};
use crate::hub_process::cpu_of_pid;
use crate::options::{CONNECT_TIMEOUT, POLL_STEP, READY_TIMEOUT, STOP_TIMEOUT};
use crate::stats::Cpu;
use std::net::{SocketAddr, TcpStream};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Instant;

/// Ports the other benchmarks of this machine use at fixed numbers: never picked.
const RESERVED_PORTS: [u16; 12] = [
    24610, 24611, 24612, 25610, 6390, 6391, 11390, 11391, 4290, 4291, 6379, 4222,
];
/// The lowest port picked. Ports come from below the kernel's ephemeral range, so a client
/// socket of a running workload can never hold the one a new server is about to bind.
const PORT_FLOOR: u16 = 12_000;
/// Tries at starting one server when its port turns out taken after all.
const START_TRIES: usize = 3;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PeerKind {
    Redis,
    Beanstalkd,
    Nats,
}

impl PeerKind {
    pub(crate) fn name(self) -> &'static str {
        match self {
            PeerKind::Redis => "redis",
            PeerKind::Beanstalkd => "beanstalkd",
            PeerKind::Nats => "nats",
        }
    }
    pub(crate) fn binary(self) -> &'static str {
        match self {
            PeerKind::Redis => "redis-server",
            PeerKind::Beanstalkd => "beanstalkd",
            PeerKind::Nats => "nats-server",
        }
    }
    fn version_flag(self) -> &'static str {
        match self {
            PeerKind::Beanstalkd => "-v",
            _ => "--version",
        }
    }
}

/// An executable file named `name` in a directory of `path` (the value of PATH).
pub(crate) fn find_on_path(name: &str, path: Option<&std::ffi::OsStr>) -> Option<PathBuf> {
    std::env::split_paths(path?)
        .filter(|dir| dir.is_absolute())
        .map(|dir| dir.join(name))
        .find(|p| {
            std::fs::metadata(p)
                .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
                .unwrap_or(false)
        })
}

/// The first line the binary prints for its version flag (for the report), if it succeeds.
pub(crate) fn version_of(kind: PeerKind, bin: &Path) -> Option<String> {
    let out = Command::new(bin)
        .arg(kind.version_flag())
        .stdin(Stdio::null())
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8_lossy(if out.stdout.is_empty() {
        &out.stderr
    } else {
        &out.stdout
    })
    .into_owned();
    text.lines().next().map(|l| l.trim().to_owned())
}

/// The bottom of the kernel's ephemeral port range (32768 unless configured).
fn ephemeral_floor() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|p| p.parse().ok()))
        .unwrap_or(32_768)
}

/// A loopback port below the ephemeral range, not reserved, and free right now.
pub(crate) fn pick_port() -> Res<u16> {
    let top = ephemeral_floor();
    if top <= PORT_FLOOR + 100 {
        return Err(format!(
            "the ephemeral port range starts at {top}: no room below it for the peers' ports"
        ));
    }
    let span = u128::from(top - PORT_FLOOR);
    for _ in 0..200 {
        let port = PORT_FLOOR + (uuid::Uuid::new_v4().as_u128() % span) as u16;
        if RESERVED_PORTS.contains(&port) {
            continue;
        }
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return Ok(port);
        }
    }
    Err(format!(
        "no free loopback port found in {PORT_FLOOR}..{top}"
    ))
}

/// A random secret for one server (hex, so it is safe in any config syntax).
pub(crate) fn secret() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

/// A running peer server. Dropping it stops the process (SIGTERM, then SIGKILL).
pub(crate) struct PeerProcess {
    pub(crate) kind: PeerKind,
    child: Option<Child>,
    pub(crate) pid: i32,
    pub(crate) addr: SocketAddr,
    /// Redis's password or NATS's token (beanstalkd has no authentication).
    pub(crate) secret: String,
    log_path: PathBuf,
}

impl PeerProcess {
    /// Starts `kind` from `bin` in `dir` (created here), retrying on another port when the
    /// server exits at once (its port taken in between).
    pub(crate) fn start(
        kind: PeerKind,
        bin: &Path,
        dir: &Path,
        max_clients: usize,
    ) -> Res<PeerProcess> {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let mut last = String::new();
        for _ in 0..START_TRIES {
            let port = pick_port()?;
            match Self::start_on(kind, bin, dir, port, max_clients) {
                Ok(p) => return Ok(p),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    fn start_on(
        kind: PeerKind,
        bin: &Path,
        dir: &Path,
        port: u16,
        max_clients: usize,
    ) -> Res<PeerProcess> {
        let secret = secret();
        let dir_text = dir
            .to_str()
            .filter(|d| !d.contains(['"', '\n', '\\']))
            .ok_or_else(|| {
                format!(
                    "{}: a temp dir path the peers' configs cannot quote",
                    dir.display()
                )
            })?;
        let mut command = Command::new(bin);
        match kind {
            PeerKind::Redis => {
                // What ../shared/bench/servers.sh passes on the command line, in a file.
                let conf = dir.join("redis.conf");
                let _ = std::fs::remove_file(&conf);
                write_private(
                    &conf,
                    &format!(
                        "port {port}\nbind 127.0.0.1\nprotected-mode yes\nsave \"\"\nappendonly no\n\
                         requirepass {secret}\nmaxclients {max_clients}\ndaemonize no\n\
                         dir \"{dir_text}\"\nlogfile \"{dir_text}/redis.log\"\n"
                    ),
                )?;
                command.arg(conf);
            }
            PeerKind::Beanstalkd => {
                // No binlog: in memory, as the in-memory hub.
                command.args(["-l", "127.0.0.1", "-p", &port.to_string()]);
            }
            PeerKind::Nats => {
                let conf = dir.join("nats.conf");
                let _ = std::fs::remove_file(&conf);
                write_private(
                    &conf,
                    &format!("listen: \"127.0.0.1:{port}\"\nauthorization {{\n  token: \"{secret}\"\n}}\n"),
                )?;
                command.arg("-c").arg(conf);
            }
        }
        let log_path = dir.join(format!("{}.out", kind.name()));
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(&log_path)
            .map_err(|e| e.to_string())?;
        let log2 = log.try_clone().map_err(|e| e.to_string())?;
        // SAFETY: between fork and exec only pthread_sigmask on a local set, which is
        // async-signal-safe: the server must get SIGTERM although the bench blocks it.
        unsafe {
            command.pre_exec(|| {
                let mut set: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&mut set);
                libc::pthread_sigmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
                Ok(())
            });
        }
        // Held across the spawn, so the signal thread always finds the new pid.
        let mut pids = hub_pids();
        let child = command
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(log2))
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", bin.display()))?;
        let pid = child.id() as i32;
        pids.push(pid);
        drop(pids);
        let mut p = PeerProcess {
            kind,
            child: Some(child),
            pid,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            secret,
            log_path,
        };
        // Ready once it accepts a connection; a bounded poll, failing early if it exits.
        let until = Instant::now() + READY_TIMEOUT;
        loop {
            if TcpStream::connect_timeout(&p.addr, CONNECT_TIMEOUT).is_ok() {
                return Ok(p);
            }
            if exited_unreaped(p.pid) || Instant::now() >= until {
                let why = format!(
                    "{} on port {port} did not come up: {}",
                    kind.binary(),
                    p.log_tail()
                );
                p.terminate();
                return Err(why);
            }
            std::thread::sleep(POLL_STEP);
        }
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log_path).unwrap_or_default();
        let lines: Vec<&str> = text.trim().lines().collect();
        let tail = lines[lines.len().saturating_sub(3)..].join(" | ");
        if tail.is_empty() {
            "(no output)".into()
        } else {
            tail
        }
    }

    /// Fails when the server has died (a crash during a workload).
    pub(crate) fn check_alive(&self) -> Res<()> {
        if self.child.is_some() && hub_pids().contains(&self.pid) && exited_unreaped(self.pid) {
            return Err(format!(
                "{} exited during the run: {}",
                self.kind.binary(),
                self.log_tail()
            ));
        }
        Ok(())
    }

    /// SIGTERM, a bounded wait, then SIGKILL (`fixtures::terminate_child`, as for the hub).
    pub(crate) fn terminate(&mut self) {
        if let Some(child) = self.child.take() {
            terminate_child(child, self.pid, STOP_TIMEOUT);
        }
    }
}

impl Drop for PeerProcess {
    fn drop(&mut self) {
        self.terminate();
    }
}

/// What the bench reads of any server process from `/proc/PID`: CPU (the `Cpu` of
/// `hub_process`), write syscalls, and descriptors.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct ProcSnap {
    pub(crate) cpu: Cpu,
    /// `syscw` of `/proc/PID/io`: write(2)-family calls (not send/sendmsg); None when the
    /// kernel does not let us read it.
    pub(crate) syscw: Option<u64>,
}

pub(crate) fn snap(pid: i32) -> Res<ProcSnap> {
    Ok(ProcSnap {
        cpu: cpu_of_pid(pid)?,
        syscw: syscw_of(pid),
    })
}

pub(crate) fn syscw_of(pid: i32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/io")).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("syscw:"))
        .and_then(|v| v.trim().parse().ok())
}

pub(crate) fn rss_of(pid: i32) -> Res<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .map_err(|e| format!("/proc/{pid}/status: {e}"))?;
    let kib: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| format!("/proc/{pid}/status: no VmRSS"))?;
    Ok(kib * 1024)
}

pub(crate) fn fds_of(pid: i32) -> Res<usize> {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .map_err(|e| format!("/proc/{pid}/fd: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_lookup_finds_only_executables_in_absolute_dirs() {
        let dir = std::env::temp_dir().join(format!("ahb-path-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir(&dir).unwrap();
        let exe = dir.join("fake-server");
        std::fs::write(&exe, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o700)).unwrap();
        std::fs::write(dir.join("plain-file"), "x").unwrap();
        let path = std::env::join_paths([Path::new("relative/dir"), &dir]).unwrap();
        assert_eq!(find_on_path("fake-server", Some(&path)), Some(exe));
        assert_eq!(find_on_path("plain-file", Some(&path)), None);
        assert_eq!(find_on_path("absent", Some(&path)), None);
        assert_eq!(find_on_path("fake-server", None), None);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn picked_ports_avoid_the_reserved_and_the_ephemeral() {
        for _ in 0..20 {
            let p = pick_port().unwrap();
            assert!(p >= PORT_FLOOR && p < ephemeral_floor());
            assert!(!RESERVED_PORTS.contains(&p));
        }
    }
}
