//! The hub under test as a child process: start, wait for READY, stop, and its CPU time and RSS
//! read from `/proc/PID`.

use crate::base::Res;
use crate::fixtures::{exited_unreaped, hub_pids, terminate_child, Fixture};
use crate::options::{StoreKind, READY_TIMEOUT, STOP_TIMEOUT};
use crate::stats::Cpu;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

// ----- the hub process and /proc -----

/// A running hub. Dropping it stops the process (SIGTERM, then SIGKILL after a bounded wait).
pub(crate) struct HubProcess {
    pub(crate) child: Option<Child>,
    pub(crate) pid: i32,
    pub(crate) addr: SocketAddr,
    /// The relay's listen address, when the config has a `[relay]` that listens.
    pub(crate) relay_addr: Option<SocketAddr>,
    pub(crate) ticks_per_sec: u64,
    pub(crate) stderr_path: PathBuf,
}

impl HubProcess {
    pub(crate) fn start_with(server: &Path, config: &Path, stderr_path: &Path) -> Res<HubProcess> {
        HubProcess::start_within(server, config, stderr_path, READY_TIMEOUT)
    }

    /// `start_with`, giving the server `ready` to print its ready line (the scale phase's
    /// store of a million envelopes is loaded before it).
    pub(crate) fn start_within(
        server: &Path,
        config: &Path,
        stderr_path: &Path,
        ready_timeout: Duration,
    ) -> Res<HubProcess> {
        let stderr = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(stderr_path)
            .map_err(|e| e.to_string())?;
        let mut command = Command::new(server);
        // SAFETY: the closure runs between fork and exec and only calls sigprocmask-style
        // pthread_sigmask on a local set, which is async-signal-safe.
        unsafe {
            command.pre_exec(|| {
                // The bench blocks SIGINT/SIGTERM/SIGHUP for its signal thread; the hub must
                // start with them deliverable so that SIGTERM stops it cleanly.
                let mut set: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&mut set);
                libc::pthread_sigmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
                Ok(())
            });
        }
        // Held across the spawn, so a signal arriving meanwhile still finds the new pid.
        let mut pids = hub_pids();
        let mut child = command
            .arg("--config")
            .arg(config)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(stderr))
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", server.display()))?;
        let pid = child.id() as i32;
        pids.push(pid);
        drop(pids);
        let stdout = child.stdout.take().expect("stdout was piped above");
        // SAFETY: sysconf has no preconditions.
        let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        let mut hub = HubProcess {
            child: Some(child),
            pid,
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            relay_addr: None,
            ticks_per_sec: if ticks > 0 { ticks as u64 } else { 100 },
            stderr_path: stderr_path.to_path_buf(),
        };
        // A reader thread owns stdout for the hub's whole life, so the hub can never block on a
        // full pipe; it hands over the ready line (or the end of stdout) once.
        let (tx, rx) = mpsc::channel::<Option<(String, Option<String>)>>();
        std::thread::spawn(move || {
            let mut reader = BufReader::new(stdout);
            let mut line = String::new();
            let mut reported = false;
            // The server prints the relay's address before its ready line.
            let mut relay = None;
            loop {
                line.clear();
                match reader.read_line(&mut line) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {
                        if let Some(at) = line.trim_end().split("relay listening on ").nth(1) {
                            relay = Some(at.to_owned());
                        }
                        if !reported && line.contains("hub ready") {
                            reported = true;
                            let _ = tx.send(Some((line.trim_end().to_owned(), relay.take())));
                        }
                    }
                }
            }
            if !reported {
                let _ = tx.send(None);
            }
        });
        let (ready, relay) = match rx.recv_timeout(ready_timeout) {
            Ok(Some(lines)) => lines,
            Ok(None) | Err(mpsc::RecvTimeoutError::Disconnected) => {
                return Err(format!(
                    "the hub exited before it was ready: {}",
                    hub.stderr_tail()
                ));
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                return Err(format!(
                    "the hub printed no ready line within {ready_timeout:?}: {}",
                    hub.stderr_tail()
                ));
            }
        };
        hub.addr = parse_ready(&ready)?;
        hub.relay_addr = relay
            .map(|a| a.parse().map_err(|e| format!("relay address {a:?}: {e}")))
            .transpose()?;
        Ok(hub)
    }

    /// The hub's CPU time so far (`cpu_of_pid`).
    pub(crate) fn cpu(&self) -> Res<Cpu> {
        cpu_of_pid(self.pid)
    }

    /// The hub's resident set size in bytes, from `VmRSS` in `/proc/PID/status`.
    pub(crate) fn rss_bytes(&self) -> Res<u64> {
        let text = std::fs::read_to_string(format!("/proc/{}/status", self.pid))
            .map_err(|e| format!("hub status: {e}"))?;
        let line = text
            .lines()
            .find(|l| l.starts_with("VmRSS:"))
            .ok_or("hub status: no VmRSS")?;
        let kib: u64 = line
            .split_whitespace()
            .nth(1)
            .and_then(|v| v.parse().ok())
            .ok_or("hub status: VmRSS unreadable")?;
        Ok(kib * 1024)
    }

    /// Open descriptors of the hub: tells when it has closed what the bench closed.
    pub(crate) fn open_fds(&self) -> Res<usize> {
        std::fs::read_dir(format!("/proc/{}/fd", self.pid))
            .map(|d| d.count())
            .map_err(|e| format!("hub fds: {e}"))
    }

    /// Fails when the hub has exited (a crash mid-phase).
    pub(crate) fn check_alive(&mut self) -> Res<()> {
        if let Some(child) = &mut self.child {
            let mut pids = hub_pids();
            if pids.contains(&self.pid) && exited_unreaped(self.pid) {
                pids.retain(|&p| p != self.pid);
                drop(pids);
                let status = child
                    .wait()
                    .map_or_else(|e| e.to_string(), |s| s.to_string());
                self.child = None;
                return Err(format!(
                    "the hub exited during the run ({status}): {}",
                    self.stderr_tail()
                ));
            }
        }
        Ok(())
    }

    /// Clean stop: SIGTERM and a bounded wait for exit 0; the caller learns of a bad exit.
    pub(crate) fn stop(self) -> Res<()> {
        self.stop_within(STOP_TIMEOUT)
    }

    /// `stop`, giving the hub `timeout` to exit (a hub holding a million envelopes frees them
    /// and closes its store first).
    pub(crate) fn stop_within(mut self, timeout: Duration) -> Res<()> {
        let status = self.terminate_within(timeout);
        match status {
            Some(s) if s.success() => Ok(()),
            Some(s) => Err(format!(
                "the hub exited with {s} on SIGTERM: {}",
                self.stderr_tail()
            )),
            None => Err("the hub did not stop on SIGTERM and was killed".into()),
        }
    }

    /// SIGTERM, wait up to `STOP_TIMEOUT`, else SIGKILL. Returns the exit status if it
    /// stopped by itself.
    pub(crate) fn terminate(&mut self) -> Option<std::process::ExitStatus> {
        self.terminate_within(STOP_TIMEOUT)
    }

    fn terminate_within(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let child = self.child.take()?;
        terminate_child(child, self.pid, timeout)
    }

    pub(crate) fn stderr_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.stderr_path).unwrap_or_default();
        let text = text.trim();
        if text.is_empty() {
            "(no stderr)".into()
        } else {
            text.lines()
                .rev()
                .take(5)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect::<Vec<_>>()
                .join(" | ")
        }
    }
}

impl Drop for HubProcess {
    fn drop(&mut self) {
        self.terminate();
    }
}

pub(crate) fn parse_ready(line: &str) -> Res<SocketAddr> {
    let rest = line
        .strip_prefix("agent-hub-server: listening on ")
        .ok_or_else(|| format!("unexpected ready line {line:?}"))?;
    let addr = rest.split(';').next().unwrap_or_default();
    addr.parse()
        .map_err(|e| format!("ready line {line:?}: bad address: {e}"))
}

/// A process's CPU time so far (user + system): from `/proc/PID/stat` in clock ticks, and from
/// the process CPU clock in nanoseconds as a cross-check at fine grain. Any server the bench
/// started (the hub, or a peer of `--peers`).
pub(crate) fn cpu_of_pid(pid: i32) -> Res<Cpu> {
    // SAFETY: the call gets a valid pointer to a local; a failure is reported, not assumed.
    let clock = unsafe {
        let mut id: libc::clockid_t = 0;
        (libc::clock_getcpuclockid(pid, &mut id) == 0).then_some(id)
    };
    cpu_of_stat(&format!("/proc/{pid}/stat"), clock)
}

/// CPU time from one `stat` file of proc(5) (a process's, or a single thread's under
/// `task/` or `thread-self/`) and, when given, the matching CPU clock.
fn cpu_of_stat(path: &str, clock: Option<libc::clockid_t>) -> Res<Cpu> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("server stat: {e}"))?;
    let (stat, user) = stat_times(&text)?;
    Ok(Cpu {
        stat,
        user,
        clock: clock.and_then(read_cpu_clock),
    })
}

/// A CPU clock's reading, or None when the kernel refuses it.
fn read_cpu_clock(id: libc::clockid_t) -> Option<Duration> {
    // SAFETY: the call gets a valid pointer to a local; a failure is reported, not assumed.
    unsafe {
        let mut ts: libc::timespec = std::mem::zeroed();
        (libc::clock_gettime(id, &mut ts) == 0)
            .then(|| Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32))
    }
}

/// User + system and user alone from a `stat` line of proc(5).
fn stat_times(text: &str) -> Res<(Duration, Duration)> {
    // Fields after the parenthesised command name start at field 3 (state); utime and
    // stime are fields 14 and 15 (proc(5)).
    let rest = text
        .rsplit_once(')')
        .map(|(_, r)| r)
        .ok_or("server stat: no command field")?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |i: usize| -> Res<u64> {
        fields
            .get(i)
            .and_then(|f| f.parse().ok())
            .ok_or_else(|| format!("server stat: field {} unreadable", i + 3))
    };
    let (user, system) = (field(11)?, field(12)?);
    // SAFETY: sysconf has no preconditions.
    let per_sec = match unsafe { libc::sysconf(libc::_SC_CLK_TCK) } {
        t if t > 0 => t as u64,
        _ => 100,
    };
    let ticks = |t: u64| Duration::from_nanos(t * 1_000_000_000 / per_sec);
    Ok((ticks(user + system), ticks(user)))
}

/// Runs one phase on a fresh hub and stops it cleanly. When the phase fails, says whether the
/// hub crashed, which is the more useful error.
pub(crate) fn with_hub<T>(
    server: &Path,
    fx: &Fixture,
    kind: StoreKind,
    phase: impl FnOnce(&HubProcess) -> Res<T>,
) -> Res<T> {
    with_hub_config(server, fx, kind, fx.config(kind), phase)
}

/// `with_hub` on another config of the same fixture (the delegation phase's, with `[tasks]`).
pub(crate) fn with_hub_config<T>(
    server: &Path,
    fx: &Fixture,
    kind: StoreKind,
    config: &Path,
    phase: impl FnOnce(&HubProcess) -> Res<T>,
) -> Res<T> {
    if kind == StoreKind::Sqlite {
        // A fresh database per phase, like a fresh hub: no queue or remembered id carries over.
        fx.remove_db()?;
    }
    let mut hub = HubProcess::start_with(server, config, &fx.stderr_path)?;
    match phase(&hub) {
        Ok(v) => {
            hub.stop()?;
            Ok(v)
        }
        Err(e) => match hub.check_alive() {
            Err(crash) => Err(format!("{e}; {crash}")),
            Ok(()) => Err(e),
        },
    }
}

/// The CPU of every hub in `hubs` together (one or a linked pair).
pub(crate) fn cpu_of(hubs: &[&HubProcess]) -> Res<Cpu> {
    let mut total = Cpu {
        stat: Duration::ZERO,
        user: Duration::ZERO,
        clock: Some(Duration::ZERO),
    };
    for h in hubs {
        let c = h.cpu()?;
        total.stat += c.stat;
        total.user += c.user;
        total.clock = total.clock.zip(c.clock).map(|(a, b)| a + b);
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_times_reads_user_and_system_apart() {
        // A command name with a space and a parenthesis, as proc(5) allows.
        let line = "4242 (a (b) c) S 1 2 3 4 5 6 7 8 9 10 300 200 0 0 20 0 1 0 99 1000 10\n";
        let (total, user) = stat_times(line).expect("parses");
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
        assert_eq!(user, Duration::from_nanos(300 * 1_000_000_000 / hz));
        assert_eq!(total, Duration::from_nanos(500 * 1_000_000_000 / hz));
        assert!(stat_times("4242 no-paren S 1 2").is_err());
        assert!(stat_times("4242 (x) S 1 2 3").is_err());
    }

    #[test]
    fn user_time_is_counted_as_user_time() {
        // Spin in user mode for 200 ms of this thread's CPU clock; its user ticks must grow by
        // most of it (tick accounting samples, so allow half), and the split must say so. The
        // thread's own stat file and clock are read, not the process's: the test harness runs
        // other tests in parallel threads of this process, and their system time (sockets,
        // proc reads) would otherwise count against this one (a CI run failed that way).
        let read = || {
            cpu_of_stat(
                "/proc/thread-self/stat",
                Some(libc::CLOCK_THREAD_CPUTIME_ID),
            )
            .expect("own stat")
        };
        let a = read();
        let mut x = 1u64;
        loop {
            for _ in 0..1_000_000 {
                x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
            }
            let spent = read()
                .clock
                .expect("thread clock")
                .saturating_sub(a.clock.expect("thread clock"));
            if spent >= Duration::from_millis(200) {
                break;
            }
        }
        let d = read().saturating_sub(a);
        assert!(
            d.user >= Duration::from_millis(100),
            "user {:?} of {:?}",
            d.user,
            d.stat
        );
        let (user, kernel) = d.split_us_per(1).expect("one op");
        assert!(user >= 100_000.0 && kernel >= 0.0, "{user} {kernel}");
        assert_eq!(Cpu::default().split_us_per(0), None);
    }
}
