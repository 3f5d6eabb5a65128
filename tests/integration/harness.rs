//! The integration harness: a temp dir per test holding config, roster and token files (and
//! optionally a SQLite queue store); the real server spawned on port 0 and its port learnt from
//! its ready line, and killed (SIGKILL) or stopped and restarted on the same dir and port; raw
//! sockets with a read deadline on every read; the CLI run with captured output and a
//! deadline; and bounded polls of the audit and service logs.
//!
//! Owns process and socket plumbing for the tests. Refuses unconditional sleeps: every wait is
//! either a blocking read with a timeout or a poll of an observable condition with a deadline.
//! Refuses leaks: the server is killed and the temp dir removed on drop.

#![allow(dead_code)] // each test module uses a different subset

use serde_json::Value;
use std::fs;
use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

pub const SERVER: &str = env!("CARGO_BIN_EXE_agent-hub-server");
pub const CLIENT: &str = env!("CARGO_BIN_EXE_agent-hub");

/// The bound on every wait in the suite. Generous: nothing should come near it, and a test
/// that reaches it fails instead of hanging.
pub const DEADLINE: Duration = Duration::from_secs(10);

/// The default roster. Tokens carry a marker so a test can grep logs for any of them.
pub const AGENTS: [(&str, &str); 4] = [
    ("alpha", "tok-alpha-SECRET-1d9e"),
    ("beta", "tok-beta-SECRET-7a21"),
    ("gamma", "tok-gamma-SECRET-c3f0"),
    ("delta", "tok-delta-SECRET-5b88"),
];

pub fn token_of(name: &str) -> &'static str {
    AGENTS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, t)| *t)
        .unwrap_or_else(|| panic!("{name} is not a default agent"))
}

// ----- temp dirs and files -----

/// A directory under the system temp dir, unique per test, removed when the test passes.
pub struct TempDir {
    pub path: PathBuf,
}

impl TempDir {
    pub fn new() -> TempDir {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        // Files the tests write get the modes a careful operator's would whatever umask the
        // runner has (0002 on many desktops and CI images): the hub refuses a manifest
        // writable by group or others (docs/agents.md "Manifests").
        // SAFETY: umask(2) only sets this process's file-creation mask.
        unsafe {
            libc::umask(0o022);
        }
        let test = std::thread::current()
            .name()
            .unwrap_or("test")
            .replace(|c: char| !c.is_ascii_alphanumeric(), "_");
        let tail: String = test
            .chars()
            .rev()
            .take(40)
            .collect::<String>()
            .chars()
            .rev()
            .collect();
        let path = std::env::temp_dir().join(format!(
            "agent-hub-it-{}-{}-{tail}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        fs::create_dir(&path).unwrap_or_else(|e| panic!("cannot create {}: {e}", path.display()));
        fs::set_permissions(&path, fs::Permissions::from_mode(0o700)).unwrap();
        TempDir { path }
    }
}

impl Drop for TempDir {
    /// Removes the dir, except under a failing test: then its config, logs and server stderr
    /// are kept for inspection and the path is printed with the failure.
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("kept for inspection: {}", self.path.display());
            return;
        }
        let _ = fs::remove_dir_all(&self.path);
    }
}

/// Writes `text` to `path` and sets its mode.
pub fn write_file(path: &Path, text: &str, mode: u32) {
    fs::write(path, text).unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
}

pub fn mode_of(path: &Path) -> u32 {
    fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o777
}

// ----- config -----

/// The `[limits]` table: the server's own type, so a new limit needs no change here.
pub use agent_hub_host::config::Limits;

/// A test's files before the server starts. Layout of the temp dir:
/// `config.toml`, `roster.toml`, `tokens/<name>.token`, the two logs (relative paths in the
/// config), and `cwd/`, an empty directory the server is started from so that every test
/// checks that relative paths resolve against the config's directory, not the cwd.
pub struct Setup {
    pub dir: TempDir,
    pub limits: Limits,
    pub audit_log_path: String,
    pub service_log_path: String,
    /// Replaces the generated config text entirely.
    pub config_text: Option<String>,
    /// RLIMIT_NOFILE (soft and hard) for the server process, to exhaust descriptors.
    pub nofile_limit: Option<u64>,
    /// Environment variables set for the server process on top of the test's own.
    pub env: Vec<(String, String)>,
    /// The `[store]` table: None is `kind = "memory"`.
    pub store: Option<SqliteStore>,
    /// The config's `port`: 0 (a free port) until a restart pins the port the hub had.
    pub port: u16,
}

/// `[store] kind = "sqlite"` with this path (relative to the config's dir, or absolute).
#[derive(Debug, Clone)]
pub struct SqliteStore {
    pub path: String,
    pub max_bytes: u64,
}

impl Setup {
    /// The default roster and tokens written, mode 600.
    pub fn new() -> Setup {
        let dir = TempDir::new();
        fs::create_dir(dir.path.join("cwd")).unwrap();
        fs::create_dir(dir.path.join("tokens")).unwrap();
        let mut roster = String::from("[agents]\n");
        for (name, token) in AGENTS {
            roster.push_str(&format!("{name} = \"{token}\"\n"));
        }
        let s = Setup {
            dir,
            limits: Limits::example(),
            audit_log_path: "audit.jsonl".into(),
            service_log_path: "service.log".into(),
            config_text: None,
            nofile_limit: None,
            env: Vec::new(),
            store: None,
            port: 0,
        };
        s.write_roster(&roster, 0o600);
        for (name, token) in AGENTS {
            s.write_token(name, &format!("{token}\n"), 0o600);
        }
        s
    }

    pub fn with_limits(mut self, tweak: impl FnOnce(&mut Limits)) -> Setup {
        tweak(&mut self.limits);
        self
    }

    /// The SQLite queue store at `queue.db` in the temp dir, capped at `max_bytes`.
    pub fn with_sqlite_store(self, max_bytes: u64) -> Setup {
        self.with_sqlite_store_at("queue.db", max_bytes)
    }

    /// The SQLite queue store at `path` (relative to the temp dir, or absolute).
    pub fn with_sqlite_store_at(mut self, path: &str, max_bytes: u64) -> Setup {
        self.store = Some(SqliteStore {
            path: path.into(),
            max_bytes,
        });
        self
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.path.join(rel)
    }

    pub fn config_path(&self) -> PathBuf {
        self.path("config.toml")
    }

    pub fn write_roster(&self, text: &str, mode: u32) {
        write_file(&self.path("roster.toml"), text, mode);
    }

    /// Writes `tokens/<name>.token` and returns its path.
    pub fn write_token(&self, name: &str, text: &str, mode: u32) -> PathBuf {
        let p = self.path(&format!("tokens/{name}.token"));
        write_file(&p, text, mode);
        p
    }

    /// The config this setup would write (port 0 unless pinned, relative paths).
    pub fn generated_config(&self) -> String {
        let store = match &self.store {
            None => "kind = \"memory\"\n".to_owned(),
            Some(s) => format!(
                "kind = \"sqlite\"\npath = {:?}\nmax_bytes = {}\nsync = \"full\"\n",
                s.path, s.max_bytes
            ),
        };
        format!(
            "port = {}\naudit_log_path = {:?}\nservice_log_path = {:?}\nroster_path = \"roster.toml\"\n\n[store]\n{store}\n{}",
            self.port,
            self.audit_log_path,
            self.service_log_path,
            agent_hub_host::config::limits_to_toml(&self.limits)
        )
    }

    fn write_config(&self) {
        let text = self
            .config_text
            .clone()
            .unwrap_or_else(|| self.generated_config());
        write_file(&self.config_path(), &text, 0o600);
    }

    fn server_command(&self, config_arg: &Path) -> Command {
        let mut cmd = Command::new(SERVER);
        cmd.arg("--config")
            .arg(config_arg)
            .current_dir(self.path("cwd"))
            .envs(self.env.iter().map(|(k, v)| (k, v)));
        if let Some(limit) = self.nofile_limit {
            use std::os::unix::process::CommandExt;
            let lim = libc::rlimit {
                rlim_cur: limit as libc::rlim_t,
                rlim_max: limit as libc::rlim_t,
            };
            // SAFETY: setrlimit is async-signal-safe and only lowers this child's own limits.
            unsafe {
                cmd.pre_exec(move || {
                    if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        cmd
    }

    /// Starts the server and waits for its ready line.
    pub fn start(self) -> Hub {
        let config = self.config_path();
        self.start_with_config_arg(&config)
    }

    /// Starts the server passing `config_arg` (possibly relative to `cwd/`) as `--config`.
    pub fn start_with_config_arg(self, config_arg: &Path) -> Hub {
        let (child, port) = self.launch(config_arg);
        Hub {
            setup: self,
            child: Some(child),
            port,
        }
    }

    /// Writes the config, spawns the server and waits for its ready line. Server stderr is
    /// appended to `server.stderr`, so a restarted server's text follows the previous one's.
    fn launch(&self, config_arg: &Path) -> (Child, u16) {
        self.write_config();
        let stderr = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.path("server.stderr"))
            .unwrap();
        let mut child = self
            .server_command(config_arg)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .expect("spawn agent-hub-server");
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = mpsc::channel::<String>();
        // Reads stdout to its end so the server can never block on a full pipe.
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    // Nobody listens any more; keep draining.
                }
            }
        });
        let start = Instant::now();
        let port = loop {
            let left = DEADLINE.saturating_sub(start.elapsed());
            match rx.recv_timeout(left) {
                Ok(line) => {
                    if let Some(port) = parse_ready_line(&line) {
                        break port;
                    }
                }
                Err(_) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    let err = fs::read_to_string(self.path("server.stderr")).unwrap_or_default();
                    panic!("agent-hub-server never printed its ready line; stderr:\n{err}");
                }
            }
        };
        (child, port)
    }

    /// Starts the server with a stdout pipe that nobody reads (its read end closed before the
    /// spawn) and learns the port from the service log instead.
    pub fn start_with_closed_stdout(self) -> Hub {
        use std::os::fd::{FromRawFd, OwnedFd};
        self.write_config();
        let mut fds = [0 as libc::c_int; 2];
        // SAFETY: pipe2 fills the two-element array; each fd is owned exactly once below.
        let (read_end, write_end) = unsafe {
            assert_eq!(libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC), 0, "pipe2");
            (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1]))
        };
        drop(read_end);
        let stderr = fs::File::create(self.path("server.stderr")).unwrap();
        let child = self
            .server_command(&self.config_path())
            .stdin(Stdio::null())
            .stdout(Stdio::from(write_end))
            .stderr(stderr)
            .spawn()
            .expect("spawn agent-hub-server");
        let log = self.path(&self.service_log_path);
        let port = poll_until("the service log's ready line", || {
            let text = fs::read_to_string(&log).ok()?;
            let line = text.lines().find(|l| l.ends_with("; hub ready"))?;
            let addr = line
                .split_whitespace()
                .find(|w| w.starts_with("127.0.0.1:"))?;
            addr.trim_end_matches(';')
                .strip_prefix("127.0.0.1:")?
                .parse()
                .ok()
        });
        Hub {
            setup: self,
            child: Some(child),
            port,
        }
    }

    /// Runs the server expecting a fatal startup error at `stage` whose text contains `needle`.
    pub fn fails_at(&self, stage: &str, needle: &str) -> Output {
        let out = self.run_expecting_exit();
        out.assert_code(1);
        let prefix = format!("agent-hub-server: startup failed at {stage}: ");
        assert!(
            out.stderr.starts_with(&prefix),
            "expected {prefix:?}…, stderr: {}",
            out.stderr
        );
        assert!(
            out.stderr.contains(needle),
            "expected {needle:?} in stderr: {}",
            out.stderr
        );
        assert!(!out.stdout.contains("hub ready"), "{}", out.stdout);
        out
    }

    /// Runs the server expecting it to exit by itself (a fatal startup error).
    pub fn run_expecting_exit(&self) -> Output {
        self.write_config();
        self.run_server_with(&self.config_path())
    }

    pub fn run_server_with(&self, config_arg: &Path) -> Output {
        run(self.server_command(config_arg), None)
    }
}

/// `agent-hub-server: listening on 127.0.0.1:PORT; hub ready` → PORT.
pub fn parse_ready_line(line: &str) -> Option<u16> {
    let rest = line.strip_prefix("agent-hub-server: listening on 127.0.0.1:")?;
    rest.strip_suffix("; hub ready")?.parse().ok()
}

// ----- the running server -----

pub struct Hub {
    pub setup: Setup,
    child: Option<Child>,
    pub port: u16,
}

impl Hub {
    /// Starts a server with the default setup.
    pub fn start() -> Hub {
        Setup::new().start()
    }

    pub fn with_limits(tweak: impl FnOnce(&mut Limits)) -> Hub {
        Setup::new().with_limits(tweak).start()
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("server running").id()
    }

    pub fn token_file(&self, name: &str) -> PathBuf {
        self.setup.path(&format!("tokens/{name}.token"))
    }

    pub fn endpoint(&self, name: &str) -> agent_hub_cli::client::Endpoint {
        agent_hub_cli::client::Endpoint {
            name: name.into(),
            token: token_of(name).into(),
            port: self.port,
        }
    }

    // --- raw sockets ---

    pub fn raw(&self) -> Raw {
        Raw::connect(self.port)
    }

    /// A connection authenticated as `name` (hello, then the ok line read).
    pub fn login(&self, name: &str) -> Raw {
        let mut r = self.raw();
        r.write(&hello_line(name, token_of(name)));
        r.expect_line(OK);
        r
    }

    /// A parked await. Hello and await go out in ONE write, so the hub reads both lines in
    /// one read and handles them in order before it flushes anything: by the time the ok line
    /// arrives, the await line has been handled and (with nothing queued) is parked. Panics if
    /// anything other than ok arrives.
    pub fn park(&self, name: &str, await_json: &str) -> Raw {
        let mut r = self.raw();
        r.write(&format!(
            "{}{await_json}\n",
            hello_line(name, token_of(name))
        ));
        r.expect_line(OK);
        r
    }

    /// The same as `park`, on a socket whose receive buffer is `rcvbuf_bytes` (set before
    /// connecting, so the advertised window is small from the start).
    pub fn park_small_rcvbuf(&self, name: &str, await_json: &str, rcvbuf_bytes: i32) -> Raw {
        let mut r = Raw::connect_with_rcvbuf(self.port, rcvbuf_bytes);
        r.write(&format!(
            "{}{await_json}\n",
            hello_line(name, token_of(name))
        ));
        r.expect_line(OK);
        r
    }

    /// Sends one envelope over a raw connection and returns the accepted id.
    pub fn send(&self, from: &str, to: &str, kind: &str, corr: Option<&str>, body: &str) -> String {
        let id = uuid::Uuid::new_v4().to_string();
        let mut r = self.raw();
        r.write(&format!(
            "{}{}",
            hello_line(from, token_of(from)),
            send_line(&id, to, kind, corr, body)
        ));
        r.expect_line(OK);
        let reply = r.json();
        assert_eq!(
            reply,
            serde_json::json!({"accepted": {"id": id}}),
            "send {id} from {from} to {to}"
        );
        id
    }

    /// An await with timeout 0 over a raw connection: the envelope, or None on timeout.
    pub fn poll_envelope(&self, name: &str, await_json: &str) -> Option<Value> {
        let mut r = self.raw();
        r.write(&format!(
            "{}{await_json}\n",
            hello_line(name, token_of(name))
        ));
        r.expect_line(OK);
        let reply = r.json();
        if reply == serde_json::json!({"timeout": {}}) {
            return None;
        }
        Some(
            reply
                .get("envelope")
                .unwrap_or_else(|| panic!("expected envelope or timeout, got {reply}"))
                .clone(),
        )
    }

    /// Ids of everything queued for `name`, drained with timeout-0 awaits, in order.
    pub fn drain(&self, name: &str) -> Vec<String> {
        let mut ids = Vec::new();
        while let Some(env) = self.poll_envelope(name, AWAIT_NOW) {
            ids.push(env["id"].as_str().unwrap().to_owned());
        }
        ids
    }

    // --- the CLI ---

    /// `agent-hub <verb> --as NAME --token-file tokens/NAME.token --port PORT <rest…>`.
    pub fn cli(&self, verb: &str, name: &str, rest: &[&str]) -> Output {
        self.cli_stdin(verb, name, rest, None)
    }

    pub fn cli_stdin(&self, verb: &str, name: &str, rest: &[&str], stdin: Option<&[u8]>) -> Output {
        run(self.cli_command(verb, name, rest), stdin)
    }

    pub fn cli_command(&self, verb: &str, name: &str, rest: &[&str]) -> Command {
        let mut cmd = Command::new(CLIENT);
        cmd.arg(verb)
            .arg("--as")
            .arg(name)
            .arg("--token-file")
            .arg(self.token_file(name))
            .arg("--port")
            .arg(self.port.to_string())
            .args(rest)
            .current_dir(self.setup.path("cwd"));
        cmd
    }

    /// `agent-hub send`, asserting success; returns the printed id.
    pub fn cli_send(&self, from: &str, to: &str, kind: &str, body: &str) -> String {
        let out = self.cli("send", from, &["--to", to, "--kind", kind, "--body", body]);
        out.assert_code(0);
        out.stdout.trim_end().to_owned()
    }

    // --- records ---

    pub fn audit_path(&self) -> PathBuf {
        self.setup.path(&self.setup.audit_log_path)
    }

    pub fn service_log_path(&self) -> PathBuf {
        self.setup.path(&self.setup.service_log_path)
    }

    /// Every complete audit line, parsed. A line being appended right now is left out.
    pub fn audit(&self) -> Vec<Value> {
        let text = fs::read_to_string(self.audit_path()).unwrap_or_default();
        complete_lines(&text)
            .map(|l| {
                serde_json::from_str(l)
                    .unwrap_or_else(|e| panic!("audit line is not JSON ({e}): {l}"))
            })
            .collect()
    }

    pub fn audit_events(&self, event: &str) -> Vec<Value> {
        self.audit()
            .into_iter()
            .filter(|v| v["event"] == event)
            .collect()
    }

    pub fn service_log(&self) -> String {
        fs::read_to_string(self.service_log_path()).unwrap_or_default()
    }

    /// Polls the audit log until `pred` holds on it.
    pub fn wait_audit(&self, what: &str, pred: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        poll_until(what, || {
            let a = self.audit();
            pred(&a).then_some(a)
        })
    }

    /// Polls the service log until `pred` holds on it.
    pub fn wait_service_log(&self, what: &str, pred: impl Fn(&str) -> bool) -> String {
        poll_until(what, || {
            let s = self.service_log();
            pred(&s).then_some(s)
        })
    }

    /// The server's stderr so far.
    pub fn stderr(&self) -> String {
        fs::read_to_string(self.setup.path("server.stderr")).unwrap_or_default()
    }

    /// Resident set size and its peak, in KiB, from /proc/PID/status.
    pub fn rss_kib(&self) -> (u64, u64) {
        let status = fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap();
        let field = |key: &str| -> u64 {
            let line = status
                .lines()
                .find(|l| l.starts_with(key))
                .unwrap_or_else(|| panic!("no {key} in status"));
            line[key.len()..]
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse()
                .unwrap()
        };
        (field("VmRSS:"), field("VmHWM:"))
    }

    /// Sends SIGTERM and waits (bounded) for the exit.
    pub fn terminate(&mut self) -> ExitStatus {
        self.signal(libc::SIGTERM);
        self.wait_exit()
    }

    pub fn signal(&self, sig: libc::c_int) {
        let pid = self.pid() as libc::pid_t;
        // SAFETY: kill(2) on our own child's pid, which is not yet reaped (we hold the Child).
        assert_eq!(unsafe { libc::kill(pid, sig) }, 0, "kill({pid}, {sig})");
    }

    /// SIGKILL: the server dies wherever it is, as in a crash or an OOM kill. Waits for it.
    pub fn kill(&mut self) -> ExitStatus {
        let mut child = self.child.take().expect("server running");
        child.kill().expect("SIGKILL the server");
        child.wait().expect("reap the server")
    }

    /// Starts the server again on the same temp dir, config, store and port, after it was
    /// stopped (`kill`, `terminate`). The port is pinned so that clients holding it (retrying
    /// senders, reader loops) reach the new server.
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "stop the server before restarting it");
        self.setup.port = self.port;
        let (child, port) = self.setup.launch(&self.setup.config_path());
        assert_eq!(port, self.port);
        self.child = Some(child);
    }

    /// Waits for the server to exit by itself, bounded by `DEADLINE`.
    pub fn wait_exit(&mut self) -> ExitStatus {
        let child = self.child.as_mut().expect("server running");
        let status = poll_until("the server to exit", || child.try_wait().unwrap());
        self.child = None;
        status
    }
}

impl Drop for Hub {
    /// Kills the server, then checks the records every test leaves behind: each audit line is
    /// JSON with `"v":4` (or 3 or 2, written before by the test), the log verifies as one hash
    /// chain, and the service log holds no token (every roster token carries the
    /// marker `SECRET`). Skipped while a test is already failing, and for a special-file audit
    /// log (`/dev/full`).
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if std::thread::panicking() {
            return;
        }
        if self.audit_path().is_file() {
            /// The fields every record has. Parsed this way rather than as a `Value`, since a
            /// body may hold numbers (`1e400`) that are valid JSON but beyond an f64.
            #[derive(serde::Deserialize)]
            struct Head {
                v: u64,
                #[allow(dead_code)]
                ts: String,
                #[allow(dead_code)]
                event: String,
            }
            let audit = fs::read_to_string(self.audit_path()).unwrap_or_default();
            for line in complete_lines(&audit) {
                let head: Head = serde_json::from_str(line)
                    .unwrap_or_else(|e| panic!("audit record shape ({e}): {line}"));
                assert!(
                    (2..=4).contains(&head.v),
                    "audit record of version {}: {line}",
                    head.v
                );
            }
            assert!(!audit.contains("SECRET"), "a token reached the audit log");
            // Every test's log is one unbroken hash chain (a line torn by a SIGKILL at the
            // very end aside: the next start would cut it).
            match agent_hub_server::event_loop::audit_chain::verify_files(&[self.audit_path()], &[])
            {
                Ok(Ok(_)) => {}
                Ok(Err(b)) if b.why.contains("incomplete") => {}
                Ok(Err(b)) => panic!("the audit chain breaks at line {}: {}", b.line, b.why),
                Err(e) => panic!("cannot verify the audit log: {e}"),
            }
        }
        let log = self.service_log();
        assert!(
            !log.contains("SECRET"),
            "a token reached the service log:\n{log}"
        );
    }
}

fn complete_lines(text: &str) -> impl Iterator<Item = &str> {
    let end = text.rfind('\n').map_or(0, |i| i + 1);
    text[..end].lines()
}

// ----- lines -----

pub const OK: &str = r#"{"ok":{}}"#;
pub const TIMEOUT: &str = r#"{"timeout":{}}"#;
/// An unfiltered await that waits forever.
pub const AWAIT: &str = r#"{"await":{}}"#;
/// An unfiltered await that polls.
pub const AWAIT_NOW: &str = r#"{"await":{"timeoutSecs":0}}"#;
/// A timestamp the hub accepts.
pub const TS: &str = "2026-07-21T06:40:51Z";

pub fn hello_line(name: &str, token: &str) -> String {
    format!(
        "{}\n",
        serde_json::json!({"hello": {"name": name, "token": token}})
    )
}

/// A send line with `\n`. `from` is forged on purpose: the hub must stamp it.
pub fn send_line(id: &str, to: &str, kind: &str, corr: Option<&str>, body: &str) -> String {
    format!(
        "{{\"send\":{{\"id\":{},\"from\":\"forged\",\"to\":{},\"ts\":\"{TS}\",\"kind\":{},\"correlationId\":{},\"body\":{body}}}}}\n",
        serde_json::json!(id),
        serde_json::json!(to),
        serde_json::json!(kind),
        serde_json::json!(corr),
    )
}

pub fn await_line(reply_to: Option<&str>, kind: Option<&str>, timeout_secs: Option<u64>) -> String {
    serde_json::json!({"await": {"replyTo": reply_to, "kind": kind, "timeoutSecs": timeout_secs}})
        .to_string()
}

pub fn error_line(message: &str) -> String {
    serde_json::json!({"error": {"message": message}}).to_string()
}

// ----- raw sockets -----

/// A client connection with a read deadline on every read.
pub struct Raw {
    reader: BufReader<TcpStream>,
}

impl Raw {
    pub fn connect(port: u16) -> Raw {
        let stream =
            TcpStream::connect_timeout(&SocketAddr::from((Ipv4Addr::LOCALHOST, port)), DEADLINE)
                .unwrap_or_else(|e| panic!("connect to 127.0.0.1:{port}: {e}"));
        Raw::from_stream(stream)
    }

    fn from_stream(stream: TcpStream) -> Raw {
        stream.set_read_timeout(Some(DEADLINE)).unwrap();
        stream.set_write_timeout(Some(DEADLINE)).unwrap();
        stream.set_nodelay(true).unwrap();
        Raw {
            reader: BufReader::new(stream),
        }
    }

    /// Connects with SO_RCVBUF set before the handshake.
    pub fn connect_with_rcvbuf(port: u16, rcvbuf_bytes: i32) -> Raw {
        use std::os::fd::FromRawFd;
        // SAFETY: plain socket calls on a descriptor this function owns until it is handed to
        // TcpStream; every pointer is to a live local of the size passed alongside it.
        unsafe {
            let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
            assert!(fd >= 0, "socket: {}", std::io::Error::last_os_error());
            let rc = libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_RCVBUF,
                (&rcvbuf_bytes as *const i32).cast(),
                std::mem::size_of::<i32>() as libc::socklen_t,
            );
            assert_eq!(
                rc,
                0,
                "setsockopt SO_RCVBUF: {}",
                std::io::Error::last_os_error()
            );
            let addr = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: port.to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from(Ipv4Addr::LOCALHOST).to_be(),
                },
                sin_zero: [0; 8],
            };
            let rc = libc::connect(
                fd,
                (&addr as *const libc::sockaddr_in).cast(),
                std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
            );
            assert_eq!(rc, 0, "connect: {}", std::io::Error::last_os_error());
            Raw::from_stream(TcpStream::from_raw_fd(fd))
        }
    }

    pub fn stream(&self) -> &TcpStream {
        self.reader.get_ref()
    }

    pub fn write(&mut self, text: &str) {
        self.write_bytes(text.as_bytes());
    }

    pub fn write_bytes(&mut self, bytes: &[u8]) {
        self.stream()
            .write_all(bytes)
            .unwrap_or_else(|e| panic!("write to the hub: {e}"));
    }

    /// The next line without its `\n`; panics on EOF, timeout or a missing newline.
    pub fn line(&mut self) -> String {
        match self.try_line() {
            Ok(Some(l)) => l,
            Ok(None) => panic!("the hub closed the connection where a line was expected"),
            Err(e) => panic!("no line from the hub within {DEADLINE:?}: {e}"),
        }
    }

    /// The next line, None at EOF.
    pub fn try_line(&mut self) -> std::io::Result<Option<String>> {
        let mut buf = Vec::new();
        let n = self.reader.read_until(b'\n', &mut buf)?;
        if n == 0 {
            return Ok(None);
        }
        assert_eq!(
            buf.pop(),
            Some(b'\n'),
            "line cut short: {:?}",
            String::from_utf8_lossy(&buf)
        );
        Ok(Some(String::from_utf8(buf).expect("hub lines are UTF-8")))
    }

    pub fn json(&mut self) -> Value {
        let l = self.line();
        serde_json::from_str(&l).unwrap_or_else(|e| panic!("hub line is not JSON ({e}): {l}"))
    }

    pub fn expect_line(&mut self, want: &str) {
        let got = self.line();
        assert_eq!(got, want, "unexpected line from the hub");
    }

    /// Reads one error line and returns its message.
    pub fn error(&mut self) -> String {
        let v = self.json();
        v["error"]["message"]
            .as_str()
            .unwrap_or_else(|| panic!("expected an error line, got {v}"))
            .to_owned()
    }

    /// Reads one envelope line and returns the bare envelope.
    pub fn envelope(&mut self) -> Value {
        let v = self.json();
        v.get("envelope")
            .unwrap_or_else(|| panic!("expected an envelope line, got {v}"))
            .clone()
    }

    /// Asserts the hub has nothing more to say: the client says it is done (shuts down its
    /// sending side, as a client does once it has read its reply; the hub waits for that
    /// after an answer, SPEC §4.3) and the hub closes without another line.
    pub fn expect_eof(&mut self) {
        self.shutdown_write();
        self.expect_hub_close();
    }

    /// Asserts the hub closes the connection by itself, with nothing more to say.
    pub fn expect_hub_close(&mut self) {
        match self.try_line() {
            Ok(None) => {}
            Ok(Some(l)) => panic!("expected the hub to close, got another line: {l}"),
            Err(e) if e.kind() == ErrorKind::ConnectionReset => {}
            Err(e) => panic!("expected the hub to close within {DEADLINE:?}: {e}"),
        }
    }

    pub fn shutdown_write(&self) {
        let _ = self.stream().shutdown(std::net::Shutdown::Write);
    }
}

/// A port on 127.0.0.1 where nothing listens (bound, read, released).
pub fn dead_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

// ----- processes -----

/// A finished process: exit code and captured output.
#[derive(Debug)]
pub struct Output {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
}

impl Output {
    pub fn assert_code(&self, code: i32) {
        assert_eq!(
            self.code, code,
            "exit code; stdout:\n{}\nstderr:\n{}",
            self.stdout, self.stderr
        );
    }
}

/// Runs `cmd` to completion, feeding `stdin` if given; kills it and panics past `DEADLINE`.
pub fn run(mut cmd: Command, stdin: Option<&[u8]>) -> Output {
    let started = Instant::now();
    cmd.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}"));
    if let Some(bytes) = stdin {
        let mut pipe = child.stdin.take().unwrap();
        pipe.write_all(bytes).unwrap();
    }
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(DEADLINE) {
        Ok(out) => {
            let out = out.expect("wait for the child");
            Output {
                code: out.status.code().unwrap_or(-1),
                stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
                stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
                elapsed: started.elapsed(),
            }
        }
        Err(_) => {
            // SAFETY: kill(2) on a child the waiting thread has not reaped (it is still waiting).
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
            panic!("{cmd:?} did not finish within {DEADLINE:?}");
        }
    }
}

/// Spawns a child with piped stdout and stderr (for processes the test kills).
pub fn spawn(mut cmd: Command) -> Child {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn")
}

/// Polls `f` until it yields a value; panics after `DEADLINE`. The short pause between tries
/// is a yield, not a wait for a state: the state is the condition `f` checks.
pub fn poll_until<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "timed out after {DEADLINE:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Reads everything left on a child's pipe.
pub fn read_all(mut r: impl Read) -> String {
    let mut s = String::new();
    let _ = r.read_to_string(&mut s);
    s
}

impl Raw {
    /// Everything until EOF (or a reset), for a delivery the hub cut short.
    pub fn read_until_closed(&mut self) -> Vec<u8> {
        let mut all = Vec::new();
        let mut chunk = vec![0u8; 64 * 1024];
        loop {
            match self.reader.read(&mut chunk) {
                Ok(0) => return all,
                Ok(n) => all.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == ErrorKind::ConnectionReset => return all,
                Err(e) => panic!(
                    "reading until the hub closes: {e} after {} bytes",
                    all.len()
                ),
            }
        }
    }
}

/// Writes, ignoring failures: for a socket the hub may already have closed.
pub trait WriteIgnoringErrors {
    fn write_all_ignoring_errors(&self, text: &str);
}

impl WriteIgnoringErrors for TcpStream {
    fn write_all_ignoring_errors(&self, text: &str) {
        let mut s = self;
        let _ = s.write_all(text.as_bytes());
    }
}
