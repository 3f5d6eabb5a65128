//! `agent-hub-server demo DIR` (README, "Start a working hub"; `admin::demo`): a reused
//! folder with a new port (config rewritten, the hub listens there), `--port 0` (the port
//! the hub got is stored and a restart uses it), the default SQLite store (mail survives a
//! restart) and `--memory` (it does not; an existing SQLite folder refuses it); and what a
//! newcomer meets (issue 35): the printed commands run as printed, with the binaries on PATH
//! or not, the orchestrator is the operator, and a taken port names `--port 0` and leaves no
//! folder behind that the run created.

use crate::harness::*;
use std::fs;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Instant;

/// A running demo hub.
struct Demo {
    child: Option<Child>,
    port: u16,
    /// Its stdout up to the ready line.
    said: String,
}

impl Demo {
    /// Starts `demo <dir> <args…>` from `cwd` and waits for the ready line.
    fn start(cwd: &Path, dir: &Path, args: &[&str]) -> Demo {
        let mut cmd = Command::new(SERVER);
        cmd.arg("demo").arg(dir).args(args).current_dir(cwd);
        Demo::spawn(cmd)
    }

    /// Starts a demo command and waits for the ready line.
    fn spawn(mut cmd: Command) -> Demo {
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn the demo");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel::<String>();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let _ = tx.send(line);
            }
        });
        let start = Instant::now();
        let mut said = String::new();
        loop {
            match rx.recv_timeout(DEADLINE.saturating_sub(start.elapsed())) {
                Ok(line) => {
                    said.push_str(&line);
                    said.push('\n');
                    if let Some(port) = parse_ready_line(&line) {
                        return Demo {
                            child: Some(child),
                            port,
                            said,
                        };
                    }
                }
                Err(_) => {
                    let _ = child.kill();
                    let out = child.wait_with_output().unwrap();
                    panic!(
                        "the demo never got ready; stdout:\n{said}\nstderr:\n{}",
                        String::from_utf8_lossy(&out.stderr)
                    );
                }
            }
        }
    }

    /// SIGTERM, and the exit waited for (bounded).
    fn stop(&mut self) {
        let mut child = self.child.take().unwrap();
        // SAFETY: kill(2) on our own child, not yet reaped.
        unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
        let status = poll_until("the demo to exit", || child.try_wait().unwrap());
        assert!(status.success(), "{status:?}");
    }

    /// `agent-hub <verb> --as NAME --token-file DIR/tokens/NAME.token --port PORT <rest…>`.
    fn cli(&self, dir: &Path, verb: &str, name: &str, rest: &[&str]) -> Output {
        let mut cmd = Command::new(CLIENT);
        cmd.arg(verb)
            .args(["--as", name, "--token-file"])
            .arg(dir.join("tokens").join(format!("{name}.token")))
            .args(["--port", &self.port.to_string()])
            .args(rest);
        run(cmd, None)
    }
}

impl Drop for Demo {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn stored_port(dir: &Path) -> u16 {
    let text = fs::read_to_string(dir.join("config.toml")).unwrap();
    agent_hub_host::config::Config::parse(&text, dir)
        .unwrap()
        .port
}

/// A loopback port free right now (nothing listens on it once this returns).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn folder(t: &TempDir) -> (PathBuf, PathBuf) {
    let cwd = t.path.join("work");
    fs::create_dir(&cwd).unwrap();
    (cwd, t.path.join("demo"))
}

#[test]
fn port_0_stores_the_port_the_hub_got_and_a_restart_uses_it() {
    let t = TempDir::new();
    let (cwd, dir) = folder(&t);
    let mut d = Demo::start(&cwd, &dir, &["--port", "0"]);
    assert_ne!(d.port, 0);
    assert_eq!(stored_port(&dir), d.port, "{}", d.said);
    assert!(d.said.contains(&format!("--port {}", d.port)), "{}", d.said);
    let port = d.port;
    d.stop();
    let d = Demo::start(&cwd, &dir, &[]);
    assert_eq!(d.port, port, "{}", d.said);
    assert!(d.said.contains("reusing the demo"), "{}", d.said);
}

#[test]
fn a_reused_folder_with_a_new_port_rewrites_its_config_and_listens_there() {
    let t = TempDir::new();
    let (cwd, dir) = folder(&t);
    let mut d = Demo::start(&cwd, &dir, &["--port", "0"]);
    let first = d.port;
    d.stop();
    let config_before = fs::read_to_string(dir.join("config.toml")).unwrap();
    let new = free_port();
    let mut d = Demo::start(&cwd, &dir, &["--port", &new.to_string()]);
    assert_eq!(d.port, new, "{}", d.said);
    assert_eq!(stored_port(&dir), new);
    assert!(
        d.said
            .contains(&format!("port changed from {first} to {new}")),
        "{}",
        d.said
    );
    let config_after = fs::read_to_string(dir.join("config.toml")).unwrap();
    assert_eq!(
        config_after,
        config_before.replacen(&format!("port = {first}"), &format!("port = {new}"), 1),
        "only the port line changed"
    );
    assert_eq!(mode_of(&dir.join("config.toml")), 0o600);
    d.cli(&dir, "who", "worker", &[]).assert_code(0);
    d.stop();
}

#[test]
fn the_demo_keeps_mail_in_sqlite_and_it_survives_a_restart() {
    let t = TempDir::new();
    let (cwd, dir) = folder(&t);
    let mut d = Demo::start(&cwd, &dir, &["--port", "0"]);
    assert!(d.said.contains("store SQLite"), "{}", d.said);
    let sent = d.cli(
        &dir,
        "send",
        "orchestrator",
        &[
            "--to",
            "worker",
            "--kind",
            "task",
            "--body",
            r#"{"op":"hello"}"#,
        ],
    );
    sent.assert_code(0);
    let id = sent.stdout.trim().to_owned();
    d.stop();
    assert!(dir.join("queue.db").is_file());
    let d = Demo::start(&cwd, &dir, &[]);
    let got = d.cli(&dir, "await", "worker", &["--timeout", "0"]);
    got.assert_code(0);
    assert!(got.stdout.contains(&id), "{}", got.stdout);
}

#[test]
fn memory_keeps_queues_in_the_process_and_an_sqlite_folder_refuses_it() {
    let t = TempDir::new();
    let (cwd, dir) = folder(&t);
    let mut d = Demo::start(&cwd, &dir, &["--port", "0", "--memory"]);
    assert!(d.said.contains("store in memory"), "{}", d.said);
    d.cli(
        &dir,
        "send",
        "orchestrator",
        &["--to", "worker", "--kind", "task", "--body", "{}"],
    )
    .assert_code(0);
    d.stop();
    assert!(!dir.join("queue.db").exists());
    let d = Demo::start(&cwd, &dir, &[]);
    d.cli(&dir, "await", "worker", &["--timeout", "0"])
        .assert_code(2);
    drop(d);

    let other = t.path.join("durable");
    let mut d = Demo::start(&cwd, &other, &["--port", "0"]);
    d.stop();
    let mut cmd = Command::new(SERVER);
    cmd.arg("demo")
        .arg(&other)
        .arg("--memory")
        .current_dir(&cwd);
    let o = run(cmd, None);
    o.assert_code(1);
    assert!(
        o.stderr.contains("keeps its queues in SQLite"),
        "{}",
        o.stderr
    );
}

/// `--install` with a fake Claude Code on PATH and a HOME of the test's own: the agent gets
/// an identity of its own on the roster (token file mode 600) and its config points at that
/// token file and at the port the hub got; a second run reuses the identity.
#[test]
fn install_gives_each_agent_found_its_own_identity_and_the_bound_port() {
    use std::os::unix::fs::PermissionsExt;
    let t = TempDir::new();
    let (cwd, dir) = folder(&t);
    let home = t.path.join("home");
    let bin = t.path.join("bin");
    fs::create_dir_all(&home).unwrap();
    fs::create_dir_all(&bin).unwrap();
    let claude = bin.join("claude");
    fs::write(&claude, "#!/bin/sh\necho '1.0.0 (Claude Code)'\n").unwrap();
    fs::set_permissions(&claude, fs::Permissions::from_mode(0o755)).unwrap();
    let start = |args: &[&str]| {
        let mut cmd = Command::new(SERVER);
        cmd.arg("demo")
            .arg(&dir)
            .args(args)
            .current_dir(&cwd)
            .env("HOME", &home)
            .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
            .env_remove("AGENT_HUB_AGENTS_DIR");
        cmd
    };
    let mut d = Demo::spawn(start(&["--port", "0", "--install"]));
    assert!(
        d.said
            .contains("installed the hub into claude as \"claude\""),
        "{}",
        d.said
    );
    assert!(d.said.contains("then start claude"), "{}", d.said);
    let token_file = dir.join("tokens").join("claude.token");
    assert_eq!(mode_of(&token_file), 0o600);
    let token = fs::read_to_string(&token_file).unwrap();
    let roster = fs::read_to_string(dir.join("roster.toml")).unwrap();
    assert!(roster.contains(&format!("claude = \"{}\"", token.trim())));
    let claude_json = fs::read_to_string(home.join(".claude.json")).unwrap();
    assert!(
        claude_json.contains(&token_file.display().to_string()),
        "{claude_json}"
    );
    assert!(claude_json.contains(&d.port.to_string()), "{claude_json}");
    assert!(
        !claude_json.contains(token.trim()),
        "the token itself is not copied"
    );
    assert!(!d.said.contains(token.trim()), "the token is never printed");
    let got = d.cli(&dir, "who", "claude", &[]);
    got.assert_code(0);
    d.stop();
    let d = Demo::spawn(start(&["--install"]));
    assert_eq!(
        fs::read_to_string(&token_file).unwrap(),
        token,
        "identity reused"
    );
    assert_eq!(fs::read_to_string(dir.join("roster.toml")).unwrap(), roster);
    drop(d);
}

/// The folder holding the binaries under test, for a PATH on which they are found the way
/// `cargo install --path .` makes them found.
fn bin_dir() -> PathBuf {
    Path::new(CLIENT).parent().unwrap().to_path_buf()
}

/// The command lines the demo printed (indented by two spaces), each without its `# …`
/// remark.
fn printed_commands(said: &str) -> Vec<String> {
    said.lines()
        .filter_map(|l| l.strip_prefix("  "))
        .map(|l| l.split("   # ").next().unwrap().trim_end().to_owned())
        .collect()
}

/// `sh -c LINE` from `cwd` with `path` as PATH: a command as a user pastes it.
fn shell(line: &str, cwd: &Path, path: &str) -> Output {
    let mut cmd = Command::new("/bin/sh");
    cmd.arg("-c").arg(line).current_dir(cwd).env("PATH", path);
    run(cmd, None)
}

/// Issue 35: the commands the demo prints run as printed, with `agent-hub` on PATH (they
/// say plain `agent-hub`) and without it (they name the binary by its absolute path, and
/// the demo says how to get it on PATH); the send reaches the await.
#[test]
fn the_printed_commands_run_as_printed_with_and_without_the_binaries_on_path() {
    let t = TempDir::new();
    let (cwd, dir) = folder(&t);
    for on_path in [true, false] {
        let path = if on_path {
            format!("{}:/usr/bin:/bin", bin_dir().display())
        } else {
            "/usr/bin:/bin".to_owned()
        };
        let mut cmd = Command::new(SERVER);
        cmd.arg("demo")
            .arg(&dir)
            .args(["--port", "0"])
            .current_dir(&cwd)
            .env("PATH", &path);
        let mut d = Demo::spawn(cmd);
        let lines = printed_commands(&d.said);
        let named = |verb: &str| {
            lines
                .iter()
                .find(|l| l.contains(&format!(" {verb} --as ")))
                .unwrap_or_else(|| panic!("no {verb} line in:\n{}", d.said))
                .clone()
        };
        let (send, await_) = (named("send"), named("await"));
        let program = if on_path {
            "agent-hub".to_owned()
        } else {
            CLIENT.to_owned()
        };
        for l in [&send, &await_, &named("top")] {
            assert!(l.starts_with(&format!("{program} ")), "{l}\n{}", d.said);
        }
        assert_eq!(
            d.said.contains("agent-hub is not on PATH"),
            !on_path,
            "{}",
            d.said
        );
        let sent = shell(&send, &cwd, &path);
        sent.assert_code(0);
        let got = shell(&await_, &cwd, &path);
        got.assert_code(0);
        assert!(got.stdout.contains(sent.stdout.trim()), "{}", got.stdout);
        d.stop();
    }
}

/// Issue 35: the demo's first agent is its operator (SPEC §14 "Visibility"): `who` as the
/// orchestrator shows the worker's parked filter, `who` as the worker would not show the
/// orchestrator's. A folder whose config names no operator is left so, with a note on how.
#[test]
fn the_orchestrator_is_the_operator_and_an_older_folder_is_told_how() {
    let t = TempDir::new();
    let (cwd, dir) = folder(&t);
    let mut d = Demo::start(&cwd, &dir, &["--port", "0"]);
    let park = |name: &str, kind: &str| {
        let mut cmd = Command::new(CLIENT);
        cmd.args(["await", "--as", name, "--token-file"])
            .arg(dir.join("tokens").join(format!("{name}.token")))
            .args(["--port", &d.port.to_string(), "--kind", kind]);
        spawn(cmd)
    };
    let mut parked = [park("worker", "only-this"), park("orchestrator", "mine")];
    // Whether `asker`'s `who` shows `filter`, once both agents are `waiting` (a state every
    // asker sees) and so both awaits parked.
    let sees = |asker: &str, filter: &str| {
        poll_until("both awaits to park", || {
            let who = d.cli(&dir, "who", asker, &["--json"]);
            who.assert_code(0);
            let v: serde_json::Value = serde_json::from_str(&who.stdout).unwrap();
            let agents = v["agents"].as_array().unwrap();
            agents
                .iter()
                .all(|a| a["state"] == "waiting")
                .then(|| who.stdout.contains(filter))
        })
    };
    assert!(
        sees("orchestrator", "only-this"),
        "the operator sees the worker's filter"
    );
    assert!(
        !sees("worker", "mine"),
        "the worker does not see the orchestrator's"
    );
    for c in &mut parked {
        let _ = c.kill();
        let _ = c.wait();
    }
    d.stop();

    let config = dir.join("config.toml");
    let text = fs::read_to_string(&config).unwrap();
    assert!(
        text.contains("\noperators = [\"orchestrator\"]\n"),
        "{text}"
    );
    fs::write(
        &config,
        text.replace("\noperators = [\"orchestrator\"]\n", "\n"),
    )
    .unwrap();
    let d = Demo::start(&cwd, &dir, &[]);
    assert!(d.said.contains("names no operators"), "{}", d.said);
    assert!(
        d.said.contains("operators = [\"orchestrator\"]"),
        "the note gives the line: {}",
        d.said
    );
    let after = fs::read_to_string(&config).unwrap();
    assert!(
        !after.contains("operators ="),
        "the user's config is left as it is"
    );
}

/// Issue 35: a port that is taken fails the demo with the way out named (`--port N`,
/// `--port 0`), and takes away the folder this run created (its new parent included); a
/// folder that was there before is kept, with what it held.
#[test]
fn a_taken_port_names_port_0_and_removes_only_a_folder_this_run_created() {
    let t = TempDir::new();
    let (cwd, _) = folder(&t);
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let fresh = t.path.join("new");
    let mut cmd = Command::new(SERVER);
    cmd.arg("demo")
        .arg(fresh.join("hub"))
        .args(["--port", &port])
        .current_dir(&cwd);
    let o = run(cmd, None);
    o.assert_code(1);
    assert!(
        o.stderr.contains("startup failed at listen"),
        "{}",
        o.stderr
    );
    assert!(
        o.stderr.contains("--port N") && o.stderr.contains("--port 0"),
        "{}",
        o.stderr
    );
    assert!(!fresh.exists(), "the folder this run created is gone");
    assert!(
        o.stderr.contains(&format!("removed {}", fresh.display())),
        "{}",
        o.stderr
    );

    let kept = t.path.join("kept");
    fs::create_dir(&kept).unwrap();
    fs::write(kept.join("mine.txt"), "the user's").unwrap();
    let mut cmd = Command::new(SERVER);
    cmd.arg("demo")
        .arg(&kept)
        .args(["--port", &port])
        .current_dir(&cwd);
    let o = run(cmd, None);
    o.assert_code(1);
    assert!(o.stderr.contains("--port 0"), "{}", o.stderr);
    assert!(!o.stderr.contains("removed"), "{}", o.stderr);
    assert_eq!(
        fs::read_to_string(kept.join("mine.txt")).unwrap(),
        "the user's"
    );
    drop(taken);
}
