//! Liveness end to end (SPEC §14, issue 12): a fake agent CLI — `/bin/sh` under the name
//! `claude`, so the hook's ancestor walk recognises it as `agents ps` does — runs the real
//! `agent-hub hook` commands as its hooks would; `who` shows busy, idle and, once the process
//! is killed, gone; a parked await shows waiting. Every wait polls `who` with a deadline.
//! Also the attacks: a report under another name's token is refused and changes nothing, and
//! a hook against a hub that is down exits 0 with nothing printed.

use crate::harness::*;
use agent_hub_proto::wire::{AgentPresence, Presence};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::Instant;

fn who(hub: &Hub) -> Presence {
    let out = hub.cli("who", "gamma", &["--json"]);
    out.assert_code(0);
    serde_json::from_str(out.stdout.trim()).expect("who --json is a presence object")
}

fn entry(hub: &Hub, name: &str) -> AgentPresence {
    who(hub)
        .agents
        .into_iter()
        .find(|a| a.name == name)
        .expect("a roster name is listed")
}

/// Polls `who` until `name` shows `state`; returns its entry. Panics past `DEADLINE`.
fn wait_state(hub: &Hub, name: &str, state: &str) -> AgentPresence {
    let start = Instant::now();
    loop {
        let a = entry(hub, name);
        if a.state == state {
            return a;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "{name} did not become {state} within {DEADLINE:?}; last {a:?}"
        );
        std::thread::yield_now();
    }
}

/// A fake agent: a shell named `claude` that runs one hook per command line it reads and
/// answers `done <cmd>` after each.
struct FakeAgent {
    child: Child,
    stdin: ChildStdin,
    lines: mpsc::Receiver<String>,
}

impl FakeAgent {
    fn start(hub: &Hub, name: &str) -> FakeAgent {
        let bin = hub.setup.path("bin");
        std::fs::create_dir_all(&bin).unwrap();
        let claude = bin.join("claude");
        if !claude.exists() {
            std::os::unix::fs::symlink("/bin/sh", &claude).unwrap();
        }
        let args = format!(
            "--as {name} --token-file {} --port {}",
            hub.token_file(name).display(),
            hub.port
        );
        let script = format!(
            r#"while read cmd; do
  case "$cmd" in
    start) "$CLIENT" hook turn-start {args} </dev/null ;;
    stop) printf '%s' '{{"hook_event_name":"Stop","session_id":"s1","stop_hook_active":false}}' | "$CLIENT" hook stop {args} >/dev/null ;;
    end) "$CLIENT" hook turn-end {args} </dev/null ;;
  esac
  echo "done $cmd"
done"#
        );
        let mut child = Command::new(&claude)
            .arg("-c")
            .arg(script)
            .env("CLIENT", CLIENT)
            .env("HOME", hub.setup.path("home"))
            .env_remove("XDG_STATE_HOME")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("the fake agent starts");
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        FakeAgent {
            child,
            stdin,
            lines,
        }
    }

    /// Runs one hook and waits for it to finish.
    fn run(&mut self, cmd: &str) {
        writeln!(self.stdin, "{cmd}").unwrap();
        self.stdin.flush().unwrap();
        let want = format!("done {cmd}");
        loop {
            match self.lines.recv_timeout(DEADLINE) {
                Ok(l) if l == want => return,
                Ok(_) => continue,
                Err(e) => panic!("the fake agent did not finish {cmd}: {e}"),
            }
        }
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for FakeAgent {
    fn drop(&mut self) {
        self.kill();
    }
}

#[test]
fn an_agent_started_turning_idle_and_killed_shows_each_state_in_who() {
    let hub = Hub::start();
    assert_eq!(entry(&hub, "alpha").state, "unknown");
    let mut agent = FakeAgent::start(&hub, "alpha");
    agent.run("start");
    let a = wait_state(&hub, "alpha", "busy");
    assert_eq!(a.source.as_deref(), Some("hook"));
    assert!(a.since.is_some());
    // `hook stop` with no mail lets the agent stop: idle.
    agent.run("stop");
    wait_state(&hub, "alpha", "idle");
    // With mail waiting the Stop hook blocks: the agent goes on with it, so still busy.
    agent.run("start");
    wait_state(&hub, "alpha", "busy");
    hub.cli_send("beta", "alpha", "note", r#"{"m":"hi"}"#);
    agent.run("stop");
    assert_eq!(
        entry(&hub, "alpha").state,
        "busy",
        "a block keeps the turn going"
    );
    agent.run("end");
    wait_state(&hub, "alpha", "idle");
    // The process is killed: gone, from the hub's own process check.
    agent.kill();
    let a = wait_state(&hub, "alpha", "gone");
    assert_eq!(a.source.as_deref(), Some("process"));
    assert!(hub
        .wait_service_log("the exit", |l| l.contains("liveness: name=alpha"))
        .contains("exited; state gone"));
    // Others were never touched.
    assert_eq!(entry(&hub, "beta").state, "unknown");
}

#[test]
fn a_parked_await_shows_waiting_and_a_session_end_shows_gone() {
    let hub = Hub::start();
    let r = hub.park("beta", &await_line(None, None, None));
    let a = wait_state(&hub, "beta", "waiting");
    assert_eq!(a.source.as_deref(), Some("await"));
    // gamma asks: another agent's parked awaits are not shown to it (SPEC §14 "Visibility"),
    // its state is; beta's own `who` lists its await.
    assert!(a.parked.is_empty(), "{a:?}");
    let out = hub.cli("who", "beta", &["--json"]);
    out.assert_code(0);
    let own: Presence = serde_json::from_str(out.stdout.trim()).unwrap();
    let own = own.agents.into_iter().find(|a| a.name == "beta").unwrap();
    assert_eq!(own.parked.len(), 1);
    // The await's end uncovers what else is known: nothing.
    drop(r);
    wait_state(&hub, "beta", "unknown");
    let run_hook = |sub: &str| {
        let mut cmd = Command::new(CLIENT);
        cmd.args(["hook", sub, "--as", "beta", "--token-file"])
            .arg(hub.token_file("beta"))
            .args(["--port", &hub.port.to_string()])
            .env("HOME", hub.setup.path("home"))
            .stdin(Stdio::null());
        cmd.output().expect("the hook runs")
    };
    let out = run_hook("turn-start");
    assert!(out.status.success());
    assert!(out.stdout.is_empty(), "a turn hook prints nothing");
    // Run from this test, the hook has no agent ancestor: the state is known, no process is
    // watched (never a guess).
    let a = wait_state(&hub, "beta", "busy");
    assert_eq!(a.source.as_deref(), Some("hook"));
    let out = run_hook("session-end");
    assert!(out.status.success() && out.stdout.is_empty());
    wait_state(&hub, "beta", "gone");
}

/// Attack: a hook that presents another agent's token under a name (or the right token
/// under another name) is refused at hello; the name's state does not move. The hook still
/// exits 0 and prints nothing, so a misconfigured hook never breaks its agent's turn.
#[test]
fn a_report_with_another_agents_token_is_refused_and_changes_nothing() {
    let hub = Hub::start();
    let mut agent = FakeAgent::start(&hub, "alpha");
    agent.run("start");
    wait_state(&hub, "alpha", "busy");
    // beta's hook configured with alpha's name and beta's token file.
    let out = Command::new(CLIENT)
        .args(["hook", "session-end", "--as", "alpha", "--token-file"])
        .arg(hub.token_file("beta"))
        .args(["--port", &hub.port.to_string()])
        .env("HOME", hub.setup.path("home"))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(out.stdout.is_empty() && out.stderr.is_empty());
    hub.wait_service_log("the refused hello", |l| l.contains("authentication failed"));
    assert_eq!(entry(&hub, "alpha").state, "busy");
    let out = hub.cli("who", "gamma", &["--json"]);
    assert!(!out.stdout.contains("tok-"), "no token in who");
}

#[test]
fn a_turn_hook_against_a_hub_that_is_down_exits_0_quietly() {
    let mut hub = Hub::start();
    let (port, token) = (hub.port, hub.token_file("alpha"));
    hub.terminate();
    for sub in ["turn-start", "turn-end", "session-end"] {
        let out = Command::new(CLIENT)
            .args(["hook", sub, "--as", "alpha", "--token-file"])
            .arg(&token)
            .args(["--port", &port.to_string()])
            .env("HOME", hub.setup.path("home"))
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(out.status.success(), "{sub}");
        assert!(out.stdout.is_empty() && out.stderr.is_empty(), "{sub}");
    }
}
