//! The README as a new user runs it (issue 35): every fenced `sh` block of README.md, in
//! order, then those of docs/delegation.md "Trying delegation with the fake agent", then, in a
//! second empty folder of their own, those of docs/relay-setup.md "Two hubs on one machine"
//! (two linked hubs, mail both ways). Each block runs in a bash of its own under `set -euo
//! pipefail`, with an empty HOME and the two shipped binaries first on PATH (a folder holding
//! just `agent-hub` and `agent-hub-server`, as `cargo install --path .` leaves
//! `~/.cargo/bin`). So the README cannot drift from what works; a block that fails fails the
//! test, named by file and line with its output and that of the blocks still running in the
//! background.
//!
//! relay-setup.md's other sections are not run: "Two machines" needs a second machine, a
//! tailnet and ssh; "A claudectl peer" needs claudectl installed and writes into the real
//! `~/.claudectl` (relay_setup.rs links keygen's claudectl block with a v0 acceptor, and
//! scripts/claudectl-interop.sh runs the real releases); "When it does not link" reads the log
//! of a link that failed. The one-machine section's fixed ports (24620/24621, 24630/24631) lie
//! below the ephemeral range (32768–60999) the other tests' ports come from, so they run beside
//! it; two runs of this test at once on one machine would clash on them.
//!
//! Owns the annotation scheme, one HTML comment on the line before a block (unseen where the
//! Markdown is rendered):
//! - none: the block runs to its end, which must be exit 0 within `BLOCK_BOUND`;
//! - `<!-- readme-test: expect TEXT -->`: the same, and its stdout or stderr holds TEXT;
//! - `<!-- readme-test: background until TEXT -->`: it keeps running (a hub in a terminal of
//!   its own) once a line of its output holds TEXT, until the test ends (the relay section's
//!   hubs until that section ends: then each gets Ctrl-C, as the guide says, and must exit 0);
//! - `<!-- readme-test: retry until TEXT -->`: a check a person runs again until it shows
//!   TEXT (a status the hub rewrites once a second): run to its end until one run exits 0
//!   with TEXT in its output, within `BLOCK_BOUND`;
//! - `<!-- readme-test: skip: REASON -->`: not run; REASON says why (a build whose binaries
//!   the test already has, the test suite itself, a synopsis).
//!
//! A comment that does not parse, or is not right before a `sh` block, fails the test: no
//! block is left out unseen. Refuses to sleep: a background block is waited for by reading its
//! lines, a foreground one by its exit, each with a deadline; a retried block is rerun after a
//! short pause that paces the reruns, not a wait for a state (its output is the state).
//! Whatever a section left running is stopped when the test ends, failed or not: `Session`'s
//! drop kills each background block's whole process group and reaps it.

use crate::harness::{poll_until, run, TempDir, CLIENT, SERVER};
use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

/// The longest a block may run, or a background block take to print its line: generous, as a
/// first delegated task probes the sandbox (up to 10 s) and the machine is shared.
const BLOCK_BOUND: Duration = Duration::from_secs(120);

/// The docs section whose blocks run after the README's.
const DELEGATION_SECTION: &str = "## Trying delegation with the fake agent";

/// The relay guide's section whose blocks run last, in a folder of their own.
const RELAY_SECTION: &str = "## Two hubs on one machine";

/// Between two runs of a `retry until` block: the relay status file it reads is rewritten at
/// most once a second, so rerunning faster would only spawn processes.
const RETRY_PAUSE: Duration = Duration::from_millis(200);

#[derive(Debug, Clone, PartialEq, Eq)]
enum Mode {
    /// Runs to its end; its output must hold `expect` when given.
    Foreground { expect: Option<String> },
    /// Runs on once a line holds `until`.
    Background { until: String },
    /// Run again until a run exits 0 with `until` in its output.
    Retry { until: String },
    /// Not run, for this reason.
    Skip(String),
}

#[derive(Debug, Clone)]
struct Block {
    /// `README.md:48`: the file and the line of its opening fence.
    at: String,
    text: String,
    mode: Mode,
}

/// One annotation's meaning, or what is wrong with it.
fn parse_annotation(body: &str) -> Result<Mode, String> {
    let body = body.trim();
    if let Some(reason) = body.strip_prefix("skip:") {
        let reason = reason.trim();
        return if reason.is_empty() {
            Err("skip needs a reason".into())
        } else {
            Ok(Mode::Skip(reason.to_owned()))
        };
    }
    let until = |rest: &str| {
        let t = rest.trim();
        if t.is_empty() {
            Err("`until` needs the text to wait for".to_owned())
        } else {
            Ok(t.to_owned())
        }
    };
    // The words, then nothing or a space: a missing text is named as such.
    let after = |words: &str| {
        body.strip_prefix(words)
            .filter(|rest| rest.is_empty() || rest.starts_with(' '))
    };
    if let Some(rest) = after("background until") {
        return Ok(Mode::Background {
            until: until(rest)?,
        });
    }
    if let Some(rest) = after("retry until") {
        return Ok(Mode::Retry {
            until: until(rest)?,
        });
    }
    if let Some(rest) = after("expect") {
        return Ok(Mode::Foreground {
            expect: Some(until(rest)?),
        });
    }
    Err(format!("unknown annotation {body:?}"))
}

/// The shell blocks of `text` (a Markdown file or a part of it starting at line
/// `first_line`), in order, with their annotations.
fn blocks(file: &str, text: &str, first_line: usize) -> Result<Vec<Block>, String> {
    let mut out = Vec::new();
    let mut pending: Option<(usize, Mode)> = None;
    let mut lines = text.lines().enumerate().map(|(i, l)| (i + first_line, l));
    while let Some((n, line)) = lines.next() {
        let trimmed = line.trim();
        if let Some(rest) = trimmed.strip_prefix("<!-- readme-test:") {
            let body = rest.strip_suffix("-->").ok_or_else(|| {
                format!("{file}:{n}: the annotation must end on its line with -->")
            })?;
            let mode = parse_annotation(body).map_err(|e| format!("{file}:{n}: {e}"))?;
            if let Some((m, _)) = pending {
                return Err(format!(
                    "{file}:{m}: an annotation not followed by a sh block"
                ));
            }
            pending = Some((n, mode));
            continue;
        }
        let fence = trimmed.strip_prefix("```");
        if let Some((m, _)) = pending.as_ref().filter(|_| fence != Some("sh")) {
            return Err(format!(
                "{file}:{m}: an annotation must be right before a ```sh block"
            ));
        }
        let Some(lang) = fence else { continue };
        let mut body = String::new();
        let mut closed = false;
        for (_, l) in lines.by_ref() {
            if l.trim() == "```" {
                closed = true;
                break;
            }
            body.push_str(l);
            body.push('\n');
        }
        if !closed {
            return Err(format!("{file}:{n}: a fence that is never closed"));
        }
        if matches!(lang, "bash" | "shell" | "console") {
            return Err(format!(
                "{file}:{n}: a ```{lang} block: write ```sh, so that this test runs it"
            ));
        }
        if lang == "sh" {
            let mode = pending
                .take()
                .map(|(_, m)| m)
                .unwrap_or(Mode::Foreground { expect: None });
            out.push(Block {
                at: format!("{file}:{n}"),
                text: body,
                mode,
            });
        }
    }
    if let Some((m, _)) = pending {
        return Err(format!(
            "{file}:{m}: an annotation not followed by a sh block"
        ));
    }
    Ok(out)
}

/// The section of `text` under the heading `heading` (up to the next `## `), and the line
/// it starts on.
fn section<'a>(text: &'a str, heading: &str) -> (&'a str, usize) {
    let start = text
        .find(&format!("\n{heading}\n"))
        .unwrap_or_else(|| panic!("no section {heading:?}"))
        + 1;
    let end = text[start + heading.len()..]
        .find("\n## ")
        .map_or(text.len(), |i| start + heading.len() + i + 1);
    (&text[start..end], text[..start].lines().count() + 1)
}

/// A block running in the background, and what it has said so far.
struct Background {
    at: String,
    text: String,
    child: Child,
    said: Arc<Mutex<String>>,
}

/// The new user's machine: a working folder, a HOME and a PATH, and the blocks left running.
struct Session {
    cwd: PathBuf,
    home: PathBuf,
    path_var: String,
    running: Vec<Background>,
}

impl Session {
    fn bash(&self, text: &str) -> Command {
        let mut cmd = Command::new("bash");
        cmd.arg("-c")
            .arg(format!("set -euo pipefail\n{text}"))
            .current_dir(&self.cwd)
            .env_clear()
            .env("HOME", &self.home)
            .env("PATH", &self.path_var)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // A group of its own, as a terminal's job is: Ctrl-C (and the clean-up) reach
            // the block's shell and everything it started.
            .process_group(0);
        cmd
    }

    /// What the background blocks have said, for a failure report.
    fn running_said(&self) -> String {
        let mut s = String::new();
        for b in &self.running {
            s.push_str(&format!(
                "--- still running: {} ---\n{}--- it said ---\n{}\n",
                b.at,
                b.text,
                b.said.lock().unwrap()
            ));
        }
        s
    }

    fn fail(&self, b: &Block, what: &str, out: &str) -> ! {
        panic!(
            "{}: {what}\n--- the block ---\n{}--- its output ---\n{out}\n{}",
            b.at,
            b.text,
            self.running_said()
        );
    }

    fn run_block(&mut self, b: &Block) {
        match &b.mode {
            Mode::Skip(_) => {}
            Mode::Foreground { expect } => self.foreground(b, expect.as_deref()),
            Mode::Background { until } => self.background(b, until),
            Mode::Retry { until } => self.retry(b, until),
        }
    }

    /// Runs the block to its end within `bound`: its exit status and what it said (stdout,
    /// then stderr).
    fn run_to_end(&self, b: &Block, bound: Duration) -> (ExitStatus, String) {
        let child = self
            .bash(&b.text)
            .spawn()
            .unwrap_or_else(|e| panic!("{}: cannot start bash: {e}", b.at));
        let pid = child.id();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(child.wait_with_output());
        });
        let out = match rx.recv_timeout(bound) {
            Ok(out) => out.expect("wait for the block"),
            Err(_) => {
                // Not reaped yet (the thread still waits for it), so its group is still its.
                kill_group(pid, libc::SIGKILL);
                self.fail(b, &format!("did not end within {bound:?}"), "");
            }
        };
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status, said)
    }

    fn foreground(&self, b: &Block, expect: Option<&str>) {
        let (status, said) = self.run_to_end(b, BLOCK_BOUND);
        if !status.success() {
            self.fail(b, &format!("failed ({status})"), &said);
        }
        if let Some(text) = expect {
            if !said.contains(text) {
                self.fail(b, &format!("its output does not hold {text:?}"), &said);
            }
        }
    }

    fn retry(&self, b: &Block, until: &str) {
        let start = Instant::now();
        loop {
            let (status, said) = self.run_to_end(b, BLOCK_BOUND.saturating_sub(start.elapsed()));
            if status.success() && said.contains(until) {
                return;
            }
            if start.elapsed() + RETRY_PAUSE >= BLOCK_BOUND {
                self.fail(
                    b,
                    &format!("no run showed {until:?} within {BLOCK_BOUND:?}; the last ({status})"),
                    &said,
                );
            }
            std::thread::sleep(RETRY_PAUSE);
        }
    }

    /// Ends a section as its text says: Ctrl-C (SIGINT to the whole group, as a terminal sends
    /// it) to each block it left running in the background, each of which must then exit 0
    /// within `BLOCK_BOUND`. One that does not stays in `running` for the drop to kill.
    fn stop_section(&mut self, first: usize) {
        for b in &self.running[first..] {
            kill_group(b.child.id(), libc::SIGINT);
        }
        let start = Instant::now();
        while self.running.len() > first {
            let i = self.running.len() - 1;
            let status = loop {
                match self.running[i].child.try_wait() {
                    Ok(Some(status)) => break status,
                    Ok(None) if start.elapsed() < BLOCK_BOUND => {
                        // A pause between looks at the child's state, which is the condition.
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    Ok(None) => panic!(
                        "{}: still running {BLOCK_BOUND:?} after Ctrl-C\n{}",
                        self.running[i].at,
                        self.running_said()
                    ),
                    Err(e) => panic!("{}: cannot wait for it: {e}", self.running[i].at),
                }
            };
            // Reaped: out of `running`, so the drop never signals a group id now free.
            let b = self.running.remove(i);
            let said = b.said.lock().unwrap().clone();
            assert!(
                status.success(),
                "{}: ended {status} on Ctrl-C\n--- the block ---\n{}--- it said ---\n{said}",
                b.at,
                b.text
            );
        }
    }

    fn background(&mut self, b: &Block, until: &str) {
        let mut child = self
            .bash(&b.text)
            .spawn()
            .unwrap_or_else(|e| panic!("{}: cannot start bash: {e}", b.at));
        let said = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = mpsc::channel::<String>();
        let pipes: [Box<dyn Read + Send>; 2] = [
            Box::new(child.stdout.take().unwrap()),
            Box::new(child.stderr.take().unwrap()),
        ];
        // Both pipes are read to their end for as long as the block runs, so it never
        // blocks on a full pipe; when both end, the channel says so.
        for pipe in pipes {
            let (tx, said) = (tx.clone(), said.clone());
            std::thread::spawn(move || {
                for line in BufReader::new(pipe).lines() {
                    let Ok(line) = line else { break };
                    said.lock().unwrap().push_str(&format!("{line}\n"));
                    let _ = tx.send(line);
                }
            });
        }
        drop(tx);
        self.running.push(Background {
            at: b.at.clone(),
            text: b.text.clone(),
            child,
            said: said.clone(),
        });
        let start = Instant::now();
        loop {
            match rx.recv_timeout(BLOCK_BOUND.saturating_sub(start.elapsed())) {
                Ok(line) if line.contains(until) => return,
                Ok(_) => {}
                Err(mpsc::RecvTimeoutError::Timeout) => self.fail(
                    b,
                    &format!("printed no line with {until:?} within {BLOCK_BOUND:?}"),
                    "(above, among the blocks still running)",
                ),
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    let this = self.running.pop().expect("pushed above");
                    let mut child = this.child;
                    let status = child.wait().ok();
                    let said = this.said.lock().unwrap().clone();
                    self.fail(
                        b,
                        &format!("ended ({status:?}) before printing a line with {until:?}"),
                        &said,
                    );
                }
            }
        }
    }
}

impl Drop for Session {
    /// Whatever still runs is killed with its whole group and reaped.
    fn drop(&mut self) {
        for b in &mut self.running {
            kill_group(b.child.id(), libc::SIGKILL);
            let _ = b.child.wait();
        }
    }
}

fn kill_group(pid: u32, signal: libc::c_int) {
    // SAFETY: kill(2) on the process group of a child this test started (process_group(0)
    // made its pid the group id) and has not reaped yet.
    unsafe { libc::kill(-(pid as libc::pid_t), signal) };
}

fn root_file(rel: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join(rel);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// A new user's machine under `root`: an empty working folder and HOME, and a folder holding
/// just the two shipped binaries first on PATH.
fn new_user(root: &Path) -> Session {
    let (cwd, home, bin) = (root.join("work"), root.join("home"), root.join("bin"));
    for d in [&cwd, &home, &bin] {
        std::fs::create_dir(d).unwrap();
    }
    for (name, exe) in [("agent-hub", CLIENT), ("agent-hub-server", SERVER)] {
        std::os::unix::fs::symlink(exe, bin.join(name)).unwrap();
    }
    Session {
        cwd,
        home,
        path_var: format!("{}:/usr/local/bin:/usr/bin:/bin", bin.display()),
        running: Vec::new(),
    }
}

/// Issue 35: README.md's `sh` blocks, then those of docs/delegation.md "Trying delegation with
/// the fake agent", then, in a folder of their own, docs/relay-setup.md "Two hubs on one
/// machine", run in order as a new user with `cargo install`'s binaries runs them.
#[test]
fn the_readme_runs_as_written_from_an_empty_folder_and_home() {
    let readme = blocks("README.md", &root_file("README.md"), 1).unwrap_or_else(|e| panic!("{e}"));
    let docs = root_file("docs/delegation.md");
    let (part, line) = section(&docs, DELEGATION_SECTION);
    let delegation = blocks("docs/delegation.md", part, line).unwrap_or_else(|e| panic!("{e}"));
    let guide = root_file("docs/relay-setup.md");
    let (part, line) = section(&guide, RELAY_SECTION);
    let relay = blocks("docs/relay-setup.md", part, line).unwrap_or_else(|e| panic!("{e}"));
    for (what, list) in [
        ("README.md", &readme),
        ("the delegation section", &delegation),
        ("the relay section", &relay),
    ] {
        assert!(
            list.iter().any(|b| !matches!(b.mode, Mode::Skip(_))),
            "{what} has no block this test runs"
        );
    }

    let t = TempDir::new();
    let mut s = new_user(&t.path);
    let cwd = s.cwd.clone();
    for b in &readme {
        s.run_block(b);
    }
    // The demo found the client on PATH, so the commands it printed name it plainly
    // (issue 35: they run as printed).
    let demo = s
        .running
        .iter()
        .find(|b| b.text.starts_with("agent-hub-server demo "))
        .expect("the README starts the demo in the background");
    let said = demo.said.lock().unwrap().clone();
    assert!(
        said.contains("\n  agent-hub send --as orchestrator "),
        "{said}"
    );
    assert!(!said.contains("not on PATH"), "{said}");

    // What the skipped `cargo build --release --workspace` leaves that the section uses.
    let release = cwd.join("target/release");
    std::fs::create_dir_all(&release).unwrap();
    std::fs::copy(
        crate::common::fakes::acp_agent(),
        release.join("fake-acp-agent"),
    )
    .unwrap();
    for b in &delegation {
        s.run_block(b);
    }

    // The relay guide starts from nothing: a second empty folder on the same machine, the
    // README's hub still running beside it (its port is another).
    s.cwd = t.path.join("relay");
    std::fs::create_dir(&s.cwd).unwrap();
    let first = s.running.len();
    for b in &relay {
        s.run_block(b);
    }
    assert_eq!(
        s.running.len() - first,
        2,
        "the relay section starts laptop's and mini's hubs in the background"
    );
    s.stop_section(first);
}

/// The README's and `agent-hub mcp --help`'s list of MCP tools is the list `tools/list`
/// gives (issue 35: both said 8 tools, `tools/list` gave 9).
#[test]
fn the_readme_and_mcp_help_name_every_tool_tools_list_gives() {
    let tools = agent_hub_cli::mcp::tools::TOOL_NAMES;
    let listed = agent_hub_cli::mcp::tools::list();
    let listed: Vec<&str> = listed["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(listed, tools);
    let readme = root_file("README.md");
    let bullet = readme
        .split("\n- ")
        .find(|b| b.starts_with("`agent-hub mcp`"))
        .expect("the README's `agent-hub mcp` bullet");
    let words = bullet
        .split_once("with tools")
        .and_then(|(_, rest)| rest.split_once("for any agent CLI"))
        .expect("the bullet lists the tools")
        .0;
    let named: Vec<&str> = words.split('`').skip(1).step_by(2).collect();
    assert_eq!(named, tools, "README.md: {bullet}");
    let mut cmd = Command::new(CLIENT);
    cmd.args(["mcp", "--help"]);
    let help = run(cmd, None);
    help.assert_code(0);
    let first = help.stdout.lines().next().unwrap_or_default();
    assert!(
        first.contains(&format!("(tools {})", tools.join(", "))),
        "{first}"
    );
}

/// The scheme leaves no block out unseen: a comment that does not parse, or stands before
/// anything but a `sh` block, is an error, as is a skip without a reason.
#[test]
fn an_annotation_that_does_not_parse_or_stands_alone_is_refused() {
    let ok = "x\n<!-- readme-test: skip: built already -->\n```sh\ncargo build\n```\n```sh\necho hi\n```\n```text\nnot run\n```\n";
    let b = blocks("t.md", ok, 1).unwrap();
    assert_eq!(b.len(), 2);
    assert_eq!(b[0].mode, Mode::Skip("built already".into()));
    assert_eq!(b[0].at, "t.md:3");
    assert_eq!(b[1].mode, Mode::Foreground { expect: None });
    assert_eq!(
        blocks(
            "t.md",
            "<!-- readme-test: background until hub ready -->\n```sh\nx\n```\n",
            1
        )
        .unwrap()[0]
            .mode,
        Mode::Background {
            until: "hub ready".into(),
        }
    );
    assert_eq!(
        blocks(
            "t.md",
            "<!-- readme-test: retry until bus-forward -->\n```sh\nx\n```\n",
            1
        )
        .unwrap()[0]
            .mode,
        Mode::Retry {
            until: "bus-forward".into(),
        }
    );
    for (bad, why) in [
        (
            "<!-- readme-test: skip: -->\n```sh\nx\n```\n",
            "needs a reason",
        ),
        (
            "<!-- readme-test: retry until  -->\n```sh\nx\n```\n",
            "needs the text",
        ),
        (
            "<!-- readme-test: sometimes -->\n```sh\nx\n```\n",
            "unknown annotation",
        ),
        (
            "<!-- readme-test: background until hub ready -->\n\n```sh\nx\n```\n",
            "right before",
        ),
        (
            "<!-- readme-test: expect ok -->\n```text\nx\n```\n",
            "right before",
        ),
        ("<!-- readme-test: expect ok -->\n", "not followed"),
        (
            "<!-- readme-test: expect ok\n```sh\nx\n```\n",
            "end on its line",
        ),
        ("```bash\nx\n```\n", "write ```sh"),
        ("```sh\nx\n", "never closed"),
    ] {
        let e = blocks("t.md", bad, 1).unwrap_err();
        assert!(e.contains(why), "{bad:?}: {e}");
    }
}

/// The process a background block started stops when a later block fails the test: the
/// drop kills the block's whole group, its children with it (issue 35: a failed run must not
/// leave hubs holding the relay section's fixed ports for the next one).
#[test]
fn a_failing_block_stops_what_the_background_blocks_started() {
    let t = TempDir::new();
    let tail = Mutex::new(None);
    let failed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut s = new_user(&t.path);
        let background = Block {
            at: "t.md:1".into(),
            text: "tail -f /dev/null &\necho \"started $!\"\nwait\n".into(),
            mode: Mode::Background {
                until: "started".into(),
            },
        };
        s.run_block(&background);
        let said = s.running[0].said.lock().unwrap().clone();
        let pid: u32 = said
            .trim()
            .strip_prefix("started ")
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("{said:?}"));
        // Once it is `tail`, its start time tells it from a process that gets its pid later.
        let since = poll_until("the background block's tail to start", || {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
            let started = proc_start(pid)?;
            cmdline.starts_with(b"tail\0").then_some(started)
        });
        *tail.lock().unwrap() = Some((pid, since));
        s.run_block(&Block {
            at: "t.md:9".into(),
            text: "exit 3\n".into(),
            mode: Mode::Foreground { expect: None },
        });
    }))
    .expect_err("the second block fails");
    let why = failed.downcast_ref::<String>().expect("a formatted panic");
    assert!(why.starts_with("t.md:9: failed"), "{why}");
    assert!(why.contains("still running: t.md:1"), "{why}");

    let (pid, since) = tail.lock().unwrap().expect("the tail was seen running");
    // Gone, or a zombie its new parent has not reaped (yet: a container's init may never), or
    // its pid taken since by another process.
    poll_until("the background block's tail to end", || {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let state = stat
            .rsplit_once(") ")
            .and_then(|(_, rest)| rest.chars().next());
        let ended = state.is_none() || state == Some('Z') || proc_start(pid) != Some(since);
        ended.then_some(())
    });
}

/// The start time of process `pid` (field 22 of /proc/PID/stat, in clock ticks since boot).
fn proc_start(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name, which ends at the last ") ", start with the third.
    let (_, rest) = stat.rsplit_once(") ")?;
    rest.split_whitespace().nth(22 - 3)?.parse().ok()
}
