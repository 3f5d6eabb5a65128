//! The client's words for a new user's two commonest mistakes (issue 35), through the real
//! binaries. A recipient that names nobody: `send` exits 0 with the id on stdout and the
//! hub's warning on stderr (SPEC §5.1, asked for by the hello's `warn`, §4.1), and nothing
//! for a roster name, a forwarding peer's address or a live task; against a hub that refuses
//! the key the same envelope goes again without it (SPEC §10.3). A `--port` that is not a
//! hub's client port: a running hub's relay port, a closed port and a server that answers
//! something else are each named in one line, for every verb (SPEC §9.4), and `send` says it
//! retried.
//!
//! Owns those process-level checks and the small in-test servers they need (a 004-like hub,
//! an HTTP-like server, an echo server). The rule behind the warning is simulated in
//! `crates/proto/src/hub/tests/warning.rs`; the MCP `send` tool's warning is in `mcp`.
//! Every read has a timeout; nothing sleeps to wait.

use crate::delegate::manifest;
use crate::harness::*;
use crate::relay::{key_hex, RelayHub, RelaySpec};
use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, Shutdown, TcpListener, TcpStream};
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// `agent-hub <words…> --as alpha --token-file F --port PORT <rest…>`, run in `cwd`.
fn client_at(port: u16, token_file: &Path, cwd: &Path, words: &[&str], rest: &[&str]) -> Output {
    let mut cmd = Command::new(CLIENT);
    cmd.args(words)
        .args(["--as", "alpha", "--token-file"])
        .arg(token_file)
        .args(["--port", &port.to_string()])
        .args(rest)
        .current_dir(cwd);
    run(cmd, None)
}

/// Every verb that talks to a hub, as `(words before the identity, words after it)`.
const VERBS: [(&[&str], &[&str]); 9] = [
    (
        &["send"],
        &["--to", "beta", "--kind", "task", "--body", "{}"],
    ),
    (&["await"], &["--timeout", "0"]),
    (&["status"], &["--id", "e-1"]),
    (&["who"], &[]),
    (
        &["delegate"],
        &["--agent", "fake", "--cwd", ".", "--prompt", "p"],
    ),
    (&["task", "status"], &["--id", "task-0"]),
    (&["task", "list"], &[]),
    (&["task", "cancel"], &["--id", "task-0"]),
    (&["top"], &["--once"]),
];

/// Runs every verb against `port` and checks each says `want` in one line and exits 1
/// (`top --once` too: it exits at once on an error retrying cannot fix).
fn every_verb_says(port: u16, setup: &Setup, want: &str, send_suffix: Option<&str>) {
    let token = setup.path("tokens/alpha.token");
    for (words, rest) in VERBS {
        let out = client_at(port, &token, &setup.path("cwd"), words, rest);
        out.assert_code(1);
        if words == ["top"] {
            // `top` ends at once on a port that is not a hub's (what retrying cannot fix),
            // with the same one line on stderr as every other verb; a port where nothing
            // listens may be a hub restarting, which `top --once` shows in its view (a live
            // `top` retries it, tests/integration/top.rs).
            assert!(
                out.stderr.contains(want) || out.stdout.contains(&format!("hub: {want}")),
                "top: {}\n{}",
                out.stderr,
                out.stdout
            );
            continue;
        }
        match (words, send_suffix) {
            (["send"], Some(suffix)) => {
                let line = out.stderr.strip_suffix('\n').unwrap_or(&out.stderr);
                let tail = line
                    .strip_prefix(&format!("agent-hub: {want}"))
                    .unwrap_or_else(|| panic!("send: {}", out.stderr));
                assert!(tail.contains(suffix), "send: {}", out.stderr);
            }
            _ => assert_eq!(out.stderr, format!("agent-hub: {want}\n"), "{words:?}"),
        }
        assert!(out.stdout.is_empty(), "{words:?}: {}", out.stdout);
    }
}

// ----- small servers that are not this hub -----

/// How a fake server answers one connection: the reader over it, and the lines it saw.
type Answer = fn(&mut BufReader<TcpStream>, &mut Vec<String>);

/// A TCP server on 127.0.0.1 that answers each connection, one at a time, with its `Answer`,
/// and keeps every connection's lines. Stopped when dropped.
pub(crate) struct Fake {
    pub(crate) port: u16,
    seen: Arc<Mutex<Vec<Vec<String>>>>,
    stop: Arc<AtomicBool>,
}

impl Fake {
    pub(crate) fn start(answer: Answer) -> Fake {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (seen2, stop2) = (seen.clone(), stop.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                if stop2.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(stream) = stream else { continue };
                stream.set_read_timeout(Some(DEADLINE)).unwrap();
                stream.set_write_timeout(Some(DEADLINE)).unwrap();
                let mut reader = BufReader::new(stream);
                let mut lines = Vec::new();
                answer(&mut reader, &mut lines);
                seen2.lock().unwrap().push(lines);
            }
        });
        Fake { port, seen, stop }
    }

    fn seen(&self) -> Vec<Vec<String>> {
        self.seen.lock().unwrap().clone()
    }
}

impl Drop for Fake {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wakes the accept so the thread sees the flag.
        let _ = TcpStream::connect((Ipv4Addr::LOCALHOST, self.port));
    }
}

/// One line without its `\n`, None at the end or after the read timeout.
fn read_line(r: &mut BufReader<TcpStream>) -> Option<String> {
    let mut line = String::new();
    match r.read_line(&mut line) {
        Ok(n) if n > 0 => Some(line.trim_end_matches('\n').to_owned()),
        _ => None,
    }
}

/// Writes `text`, ends the sending side and reads until the client closes, so the close is
/// never a reset that could destroy what was written (SPEC §4.4's discipline).
fn answer_and_close(r: &mut BufReader<TcpStream>, text: &str) {
    let _ = r.get_ref().write_all(text.as_bytes());
    let _ = r.get_ref().shutdown(Shutdown::Write);
    let _ = r.read_to_end(&mut Vec::new());
}

/// A web server: reads what came and answers with an HTTP status line.
pub(crate) fn as_http(r: &mut BufReader<TcpStream>, seen: &mut Vec<String>) {
    seen.extend(read_line(r));
    answer_and_close(
        r,
        "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
    );
}

/// An echo server: sends back the first line, the client's hello and token.
fn as_echo(r: &mut BufReader<TcpStream>, seen: &mut Vec<String>) {
    let Some(line) = read_line(r) else { return };
    seen.push(line.clone());
    answer_and_close(r, &format!("{line}\n"));
}

/// A prompt: part of a line, then waiting for input until the client gives up and closes.
fn as_prompt(r: &mut BufReader<TcpStream>, seen: &mut Vec<String>) {
    seen.extend(read_line(r));
    let _ = r.get_ref().write_all(b"login: ");
    let _ = r.read_to_end(&mut Vec::new());
}

/// A 004 hub for one send: a hello with any key besides `name` and `token` gets the 004
/// implementation's refusal (its serde text names the key) and its verb is discarded unread
/// (SPEC §4.2); a plain hello gets `ok`, and the send its `accepted` with no other key.
fn as_hub_004(r: &mut BufReader<TcpStream>, seen: &mut Vec<String>) {
    let Some(hello) = read_line(r) else { return };
    seen.push(hello.clone());
    let v: Value = serde_json::from_str(&hello).unwrap_or_default();
    let keys = v["hello"].as_object().map(|o| o.len()).unwrap_or(0);
    if keys != 2 {
        let refusal = serde_json::json!({"error": {"message":
            "malformed line: unknown field `warn`, expected `name` or `token`"}});
        return answer_and_close(r, &format!("{refusal}\n"));
    }
    let _ = r.get_ref().write_all(b"{\"ok\":{}}\n");
    let Some(send) = read_line(r) else { return };
    seen.push(send.clone());
    let v: Value = serde_json::from_str(&send).unwrap_or_default();
    let accepted = serde_json::json!({"accepted": {"id": v["send"]["id"]}});
    answer_and_close(r, &format!("{accepted}\n"));
}

// ----- a recipient that names nobody (SPEC §5.1) -----

fn status_of(hub: &Hub, id: &str) -> Value {
    let out = hub.cli("status", "alpha", &["--id", id]);
    out.assert_code(0);
    serde_json::from_str(out.stdout.trim_end()).unwrap()
}

#[test]
fn a_misspelt_recipient_is_queued_and_the_sender_told_the_name_meant() {
    let hub = Hub::start();
    let out = hub.cli(
        "send",
        "alpha",
        &["--to", "bta", "--kind", "task", "--body", "{}"],
    );
    out.assert_code(0);
    let id = out.stdout.trim_end();
    assert_eq!(out.stdout, format!("{id}\n"));
    assert_eq!(
        out.stderr,
        "agent-hub: warning: no agent named \"bta\" is on this hub's roster (did you mean \"beta\"?); the envelope is queued for that name all the same and waits until an agent of that name connects (status with its id shows where it is)\n"
    );
    let st = status_of(&hub, id);
    assert_eq!(
        (st["state"].as_str(), st["to"].as_str()),
        (Some("queued"), Some("bta"))
    );
}

#[test]
fn an_address_at_an_unknown_peer_is_queued_and_the_sender_told() {
    let hub = Hub::start();
    let out = hub.cli(
        "send",
        "alpha",
        &["--to", "x@nowhere", "--kind", "task", "--body", "{}"],
    );
    out.assert_code(0);
    let id = out.stdout.trim_end();
    assert_eq!(
        out.stderr,
        "agent-hub: warning: \"nowhere\" is not a relay peer this hub forwards mail to, so nothing will carry \"x@nowhere\" there; the envelope is queued under that address all the same (status with its id shows where it is)\n"
    );
    assert_eq!(status_of(&hub, id)["state"], "queued");
}

#[test]
fn a_roster_name_or_a_forwarding_peers_address_gets_no_warning() {
    let east = RelayHub::start(
        Setup::new(),
        RelaySpec::new("east", "127.0.0.1:0")
            .peer("west", None, &key_hex(0x35), false)
            .forwarding(),
    );
    let hub = &east.hub;
    for to in ["beta", "reviewer@west"] {
        let out = hub.cli(
            "send",
            "alpha",
            &["--to", to, "--kind", "k", "--body", "{}"],
        );
        out.assert_code(0);
        assert_eq!(out.stderr, "", "{to}");
    }
    // A peer id off by one letter is guessed, like a name.
    let out = hub.cli(
        "send",
        "alpha",
        &["--to", "reviewer@wset", "--kind", "k", "--body", "{}"],
    );
    out.assert_code(0);
    assert!(
        out.stderr.starts_with(
            "agent-hub: warning: \"wset\" is not a relay peer this hub forwards mail to (did you mean \"west\"?)"
        ),
        "{}",
        out.stderr
    );
}

#[test]
fn a_live_task_identity_gets_no_warning() {
    let mut setup = Setup::new();
    std::fs::create_dir_all(setup.path("work")).unwrap();
    std::fs::create_dir_all(setup.path("manifests")).unwrap();
    std::fs::write(
        setup.path("manifests/fakehang.toml"),
        manifest("fakehang", &["hang"]),
    )
    .unwrap();
    let root = std::fs::canonicalize(setup.path("work")).unwrap();
    setup.config_text = Some(format!(
        "{}\n[tasks]\ncwd_roots = [{:?}]\nmanifests_dir = {:?}\n",
        setup.generated_config(),
        root.to_str().unwrap(),
        setup.path("manifests").to_str().unwrap(),
    ));
    let hub = setup.start();
    let out = hub.cli(
        "delegate",
        "alpha",
        &[
            "--agent",
            "fakehang",
            "--cwd",
            root.to_str().unwrap(),
            "--prompt",
            "p",
        ],
    );
    out.assert_code(0);
    let task = out.stdout.trim_end().to_owned();
    let out = hub.cli(
        "send",
        "alpha",
        &["--to", &task, "--kind", "note", "--body", "{}"],
    );
    out.assert_code(0);
    assert_eq!(out.stderr, "");
    // The task is cancelled, so its agent does not outlive the test.
    let out = client_at(
        hub.port,
        &hub.token_file("alpha"),
        &hub.setup.path("cwd"),
        &["task", "cancel"],
        &["--id", &task],
    );
    out.assert_code(0);
}

/// SPEC §10.3: against a hub that refuses the hello's `warn` key (as a 004 hub answers it,
/// before reading the verb), the same envelope, same id, goes again with the 004 hello, and
/// the send succeeds with no warning.
#[test]
fn against_a_hub_that_refuses_warn_the_same_envelope_goes_again_without_it() {
    let fake = Fake::start(as_hub_004);
    let setup = Setup::new();
    let out = client_at(
        fake.port,
        &setup.path("tokens/alpha.token"),
        &setup.path("cwd"),
        &["send"],
        &["--to", "bta", "--kind", "task", "--body", "{}"],
    );
    out.assert_code(0);
    assert_eq!(out.stderr, "");
    let id = out.stdout.trim_end();
    // The server files a connection once the client has closed it.
    let seen = poll_until("both connections", || {
        Some(fake.seen()).filter(|s| s.len() == 2)
    });
    let hello = |i: usize| serde_json::from_str::<Value>(&seen[i][0]).unwrap();
    assert_eq!(hello(0)["hello"]["warn"], true);
    assert_eq!(
        seen[0].len(),
        1,
        "the refused connection's send was not read"
    );
    assert_eq!(
        seen[1][0],
        format!(
            "{{\"hello\":{{\"name\":\"alpha\",\"token\":\"{}\"}}}}",
            token_of("alpha")
        ),
        "the 004 hello, byte for byte"
    );
    let sent: Value = serde_json::from_str(&seen[1][1]).unwrap();
    assert_eq!(sent["send"]["id"], id);
}

// ----- a --port that is not a hub's client port (SPEC §9.4) -----

/// The relay port given where the client port belongs: the relay speaks first, with its
/// handshake, and every verb says whose port that is.
#[test]
fn a_hubs_relay_port_is_named_as_such_by_every_verb() {
    let east = RelayHub::start(
        Setup::new(),
        RelaySpec::new("east", "127.0.0.1:0").peer("west", None, &key_hex(0x35), false),
    );
    let p = east.relay_addr.port();
    assert_eq!(east.relay_addr.ip(), Ipv4Addr::LOCALHOST);
    let want = format!(
        "127.0.0.1:{p} is an agent-hub relay port (it opened with a relay handshake), not a hub's client port: --port takes the `port` of the hub's config, not the port of its [relay] listen"
    );
    every_verb_says(p, &east.hub.setup, &want, None);
}

#[test]
fn a_closed_port_says_nothing_listens_and_send_says_it_retried() {
    let setup = Setup::new();
    let p = dead_port();
    let want = format!(
        "cannot connect to the hub at 127.0.0.1:{p}: nothing listens there (connection refused); is agent-hub-server running, and is {p} the `port` in its config?"
    );
    every_verb_says(p, &setup, &want, Some(" (tried 5 times over "));
    // The resends are told with how long they took: at least the backoff's 1.5 s.
    let out = client_at(
        p,
        &setup.path("tokens/alpha.token"),
        &setup.path("cwd"),
        &["send"],
        &["--to", "beta", "--kind", "task", "--body", "{}"],
    );
    let secs: f64 = out
        .stderr
        .split(" (tried 5 times over ")
        .nth(1)
        .and_then(|t| t.strip_suffix(" s, each with the same envelope id)\n"))
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("{}", out.stderr));
    assert!(secs >= 1.5, "{secs}");
}

#[test]
fn a_server_that_answers_something_else_is_not_taken_for_a_hub() {
    let setup = Setup::new();
    let http = Fake::start(as_http);
    let p = http.port;
    let want = format!(
        "127.0.0.1:{p} is not an agent-hub client port: it answered as an HTTP server where a hub answers a hello with ok; is {p} the `port` in the hub's config?"
    );
    // `send`'s line is exactly that too: it is not resent to something that is not a hub.
    every_verb_says(p, &setup, &want, None);

    // What answered is never quoted: an echo server sends back the hello and its token.
    let echo = Fake::start(as_echo);
    let out = client_at(
        echo.port,
        &setup.path("tokens/alpha.token"),
        &setup.path("cwd"),
        &["who"],
        &[],
    );
    out.assert_code(1);
    assert_eq!(
        out.stderr,
        format!(
            "agent-hub: 127.0.0.1:{0} is not an agent-hub client port: it answered with JSON of another protocol where a hub answers a hello with ok; is {0} the `port` in the hub's config?\n",
            echo.port
        )
    );
    let seen = poll_until("the echoed connection", || echo.seen().pop());
    assert!(seen[0].contains(token_of("alpha")), "it did echo");
}

/// Part of a line and then silence is named too, once the client's deadline passes: `top`'s
/// is 5 s a refresh, where the other verbs wait 30 s for a hub (SPEC §9.6).
#[test]
fn a_prompt_that_waits_for_input_is_not_taken_for_a_hub() {
    let setup = Setup::new();
    let prompt = Fake::start(as_prompt);
    let out = client_at(
        prompt.port,
        &setup.path("tokens/alpha.token"),
        &setup.path("cwd"),
        &["top"],
        &["--once"],
    );
    out.assert_code(1);
    let p = prompt.port;
    assert!(
        out.stderr.contains(&format!(
            "127.0.0.1:{p} is not an agent-hub client port: it answered with something that is not JSON where a hub answers a hello with ok; is {p} the `port` in the hub's config?"
        )),
        "{}\n{}",
        out.stderr,
        out.stdout
    );
}
