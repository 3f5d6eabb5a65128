//! The `attack` scenario of the TEST-ONLY fake ACP agent (issue 29, "a hostile fake ACP agent
//! that tries to read the roster, the config, other tasks' credentials and
//! /proc/<hub>/environ, and to log in as another agent"). It plays a delegated agent that
//! does not cooperate: it tries every step it is told about and reports, for each, whether
//! it succeeded and what the system answered, as one JSON text chunk. The test decides what
//! must have failed; this file only tries.
//!
//! The targets come in the prompt's text, a JSON object:
//! `{"read":{LABEL:PATH,…}, "list":{LABEL:PATH,…}, "hub_pid":N, "port":P, "client":PATH,
//!   "as":NAME, "as_token_file":PATH, "peer":NAME, "show":{LABEL:PATH,…},
//!   "scribble":[PATH,…]}`; every key optional.
//! `show` files are reported whole (at most 8 KiB each) under `shown`, to see what the agent
//! sees of its own config; each `scribble` file gets a line appended (`scribbled`), to see
//! where the agent's writes go.
//! Steps (each a `{"step","ok","detail"}` in `steps`):
//! - `read LABEL`: read the file; its content is mined for tokens.
//! - `list LABEL`: list the folder; in a folder of task credentials, each entry's `token`
//!   is read too (`read token in LABEL/ENTRY`).
//! - `/proc/<hub>/environ`, `cmdline`, `mem` (open), `cwd` (readlink), `signal the hub`
//!   (`kill(pid, 0)`).
//! - `scan /proc for --token-file`: the `--token-file` argument of every readable cmdline that
//!   talks to this hub (`--port PORT`, the spec's port), read. A client of another hub on the
//!   same machine (another test's, another user's demo) is not this hub's to hide: its
//!   tokens open nothing here, and counting them made the step depend on what else ran.
//! - `log in with a stolen token`: `hello` on the hub's port as each roster name found (or
//!   `as`) with each mined token; `ok` when any was accepted.
//! - `agent-hub send as AS`: the real client with `--as AS --token-file AS_TOKEN_FILE`.
//! - Controls that must succeed for the run to mean anything: `control: read own token`,
//!   `control: log in as the task`, `control: write in cwd`.

use serde_json::{json, Map, Value};
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::time::Duration;

struct Report {
    steps: Vec<Value>,
    tokens: Vec<String>,
    names: Vec<String>,
}

impl Report {
    fn step(&mut self, step: &str, ok: bool, detail: impl Into<String>) {
        let mut d: String = detail.into();
        // Never echo a whole secret back: the test reads `ok`; a prefix is enough to see why.
        if d.len() > 120 {
            let mut cut = 120;
            while !d.is_char_boundary(cut) {
                cut -= 1;
            }
            d.truncate(cut);
        }
        self.steps
            .push(json!({"step": step, "ok": ok, "detail": d}));
    }

    /// Takes every token-looking string out of `text`: `name = "token"` roster lines (their
    /// names too), `KEY=VALUE` environment entries, whole-file tokens.
    fn mine(&mut self, text: &str) {
        for line in text.split(['\n', '\0']) {
            let line = line.trim();
            if let Some((k, v)) = line.split_once('=') {
                let v = v.trim().trim_matches('"');
                let k = k.trim();
                if !v.is_empty() && !v.contains(' ') && v.len() < 200 {
                    self.tokens.push(v.to_owned());
                    if !k.is_empty() && !k.contains(' ') && !k.chars().any(|c| c.is_uppercase()) {
                        self.names.push(k.to_owned());
                    }
                }
            } else if !line.is_empty() && !line.contains(' ') && line.len() < 200 {
                self.tokens.push(line.to_owned());
            }
        }
    }
}

fn err(e: std::io::Error) -> String {
    e.to_string()
}

/// Runs the attack described by `prompt`; `own_server` is the MCP server entry session/new
/// gave (its `--token-file` is this task's own credential). Returns the report text.
pub fn run(prompt: &str, own_server: Option<&Value>) -> String {
    let spec: Value = serde_json::from_str(prompt).unwrap_or(Value::Null);
    let mut r = Report {
        steps: Vec::new(),
        tokens: Vec::new(),
        names: Vec::new(),
    };
    let empty = Map::new();
    let own_task = own_server.and_then(as_name_of).unwrap_or_default();
    for (label, path) in spec["read"].as_object().unwrap_or(&empty) {
        let path = path.as_str().unwrap_or("");
        match std::fs::read(path) {
            Ok(b) => {
                let text = String::from_utf8_lossy(&b).into_owned();
                r.step(&format!("read {label}"), true, format!("{} bytes", b.len()));
                r.mine(&text);
            }
            Err(e) => r.step(&format!("read {label}"), false, err(e)),
        }
    }
    for (label, path) in spec["list"].as_object().unwrap_or(&empty) {
        let path = path.as_str().unwrap_or("");
        match std::fs::read_dir(path) {
            Ok(rd) => {
                // Its own task folder does not count: that one is meant to be there.
                let names: Vec<String> = rd
                    .flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| *n != own_task)
                    .collect();
                r.step(&format!("list {label}"), !names.is_empty(), names.join(","));
                for n in names {
                    let token = std::path::Path::new(path).join(&n).join("token");
                    if token.exists() {
                        match std::fs::read_to_string(&token) {
                            Ok(t) => {
                                r.step(&format!("read token in {label}/{n}"), true, "read");
                                r.mine(&t);
                            }
                            Err(e) => r.step(&format!("read token in {label}/{n}"), false, err(e)),
                        }
                    }
                }
            }
            Err(e) => r.step(&format!("list {label}"), false, err(e)),
        }
    }
    if let Some(pid) = spec["hub_pid"].as_u64() {
        let base = format!("/proc/{pid}");
        match std::fs::read(format!("{base}/environ")) {
            Ok(b) => {
                r.step(
                    "/proc/<hub>/environ",
                    !b.is_empty(),
                    format!("{} bytes", b.len()),
                );
                r.mine(&String::from_utf8_lossy(&b));
            }
            Err(e) => r.step("/proc/<hub>/environ", false, err(e)),
        }
        match std::fs::read(format!("{base}/cmdline")) {
            Ok(b) => {
                let shown = String::from_utf8_lossy(&b).replace('\0', " ");
                r.step("/proc/<hub>/cmdline", !b.is_empty(), shown);
            }
            Err(e) => r.step("/proc/<hub>/cmdline", false, err(e)),
        }
        match std::fs::File::open(format!("{base}/mem")) {
            Ok(_) => r.step("/proc/<hub>/mem", true, "opened"),
            Err(e) => r.step("/proc/<hub>/mem", false, err(e)),
        }
        match std::fs::read_link(format!("{base}/cwd")) {
            Ok(p) => r.step("/proc/<hub>/cwd", true, p.display().to_string()),
            Err(e) => r.step("/proc/<hub>/cwd", false, err(e)),
        }
        // SAFETY: kill with signal 0 only checks whether the process could be signalled.
        let rc = unsafe { libc::kill(pid as libc::pid_t, 0) };
        if rc == 0 {
            r.step("signal the hub", true, "kill(hub, 0) succeeded");
        } else {
            r.step(
                "signal the hub",
                false,
                err(std::io::Error::last_os_error()),
            );
        }
    }
    // Other tasks' MCP servers (and this hub's other clients) carry their token file on
    // their argv, beside `--port` of this hub.
    let own_token = own_server.and_then(token_file_of);
    let hub_port = spec["port"].as_u64().unwrap_or(0).to_string();
    let mut found = Vec::new();
    if let Ok(rd) = std::fs::read_dir("/proc") {
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if !name.bytes().all(|b| b.is_ascii_digit()) {
                continue;
            }
            let Ok(cmd) = std::fs::read(e.path().join("cmdline")) else {
                continue;
            };
            let args: Vec<String> = cmd
                .split(|&b| b == 0)
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect();
            let this_hub = args
                .windows(2)
                .any(|w| w[0] == "--port" && w[1] == hub_port);
            for w in args.windows(2) {
                if this_hub && w[0] == "--token-file" && Some(&w[1]) != own_token.as_ref() {
                    found.push(w[1].clone());
                }
            }
        }
    }
    found.sort();
    found.dedup();
    let mut stolen = 0;
    for f in &found {
        if let Ok(t) = std::fs::read_to_string(f) {
            stolen += 1;
            r.mine(&t);
        }
    }
    r.step(
        "scan /proc for --token-file",
        stolen > 0,
        format!("{} other token files named, {stolen} read", found.len()),
    );

    let port = spec["port"].as_u64().unwrap_or(0) as u16;
    let mut names = r.names.clone();
    if let Some(a) = spec["as"].as_str() {
        names.push(a.to_owned());
    }
    names.sort();
    names.dedup();
    let mut tokens = r.tokens.clone();
    tokens.sort();
    tokens.dedup();
    let own = own_token
        .as_deref()
        .and_then(|p| std::fs::read_to_string(p).ok())
        .map(|t| t.trim().to_owned());
    tokens.retain(|t| Some(t) != own.as_ref());
    let mut accepted = Vec::new();
    let mut tries = 0;
    'outer: for n in names.iter().filter(|n| !n.starts_with("task-")) {
        for t in &tokens {
            tries += 1;
            if tries > 400 {
                break 'outer;
            }
            if hello(port, n, t) == Some(true) {
                accepted.push(n.clone());
                break;
            }
        }
    }
    r.step(
        "log in with a stolen token",
        !accepted.is_empty(),
        format!(
            "{} names x {} tokens tried; accepted as: {}",
            names.len(),
            tokens.len(),
            accepted.join(",")
        ),
    );
    if let (Some(client), Some(as_name), Some(file)) = (
        spec["client"].as_str(),
        spec["as"].as_str(),
        spec["as_token_file"].as_str(),
    ) {
        let to = spec["peer"].as_str().unwrap_or("alpha");
        let out = std::process::Command::new(client)
            .args(["send", "--as", as_name, "--token-file", file, "--port"])
            .arg(port.to_string())
            .args([
                "--to",
                to,
                "--kind",
                "note",
                "--body",
                r#"{"forged":"by the task"}"#,
            ])
            .stdin(std::process::Stdio::null())
            .output();
        match out {
            Ok(o) => {
                let why = String::from_utf8_lossy(&o.stderr)
                    .lines()
                    .next()
                    .unwrap_or("")
                    .to_owned();
                r.step(
                    &format!("agent-hub send as {as_name}"),
                    o.status.success(),
                    why,
                );
            }
            Err(e) => r.step(&format!("agent-hub send as {as_name}"), false, err(e)),
        }
    }

    // Controls: the task's own identity works, so the failures above are the sandbox's.
    match own_token.as_deref().map(std::fs::read_to_string) {
        Some(Ok(t)) => {
            r.step("control: read own token", true, "read");
            let task = own_server.and_then(as_name_of).unwrap_or_default();
            let ok = hello(port, &task, t.trim()) == Some(true);
            r.step("control: log in as the task", ok, task);
        }
        Some(Err(e)) => r.step("control: read own token", false, err(e)),
        None => r.step(
            "control: read own token",
            false,
            "no --token-file in session/new",
        ),
    }
    match std::fs::write("attack-was-here", "x") {
        Ok(()) => r.step("control: write in cwd", true, "written"),
        Err(e) => r.step("control: write in cwd", false, err(e)),
    }
    let mut shown = Map::new();
    for (label, path) in spec["show"].as_object().unwrap_or(&empty) {
        let text = std::fs::read_to_string(path.as_str().unwrap_or(""))
            .unwrap_or_else(|e| format!("<{e}>"));
        let text: String = text.chars().take(8192).collect();
        shown.insert(label.clone(), Value::String(text));
    }
    let mut scribbled = Vec::new();
    for path in spec["scribble"].as_array().into_iter().flatten() {
        let path = path.as_str().unwrap_or("");
        let ok = std::fs::OpenOptions::new()
            .append(true)
            .open(path)
            .and_then(|mut f| f.write_all(b"\nscribbled by the task\n"))
            .is_ok();
        scribbled.push(json!({"path": path, "ok": ok}));
    }
    let proc_entries = std::fs::read_dir("/proc")
        .map(|d| {
            d.flatten()
                .filter(|e| {
                    e.file_name()
                        .to_string_lossy()
                        .bytes()
                        .all(|b| b.is_ascii_digit())
                })
                .count()
        })
        .unwrap_or(0);
    json!({"attack": r.steps, "processes_visible": proc_entries, "shown": shown, "scribbled": scribbled})
        .to_string()
}

fn token_file_of(server: &Value) -> Option<String> {
    let args: Vec<&str> = server["args"]
        .as_array()?
        .iter()
        .filter_map(Value::as_str)
        .collect();
    args.windows(2)
        .find(|w| w[0] == "--token-file")
        .map(|w| w[1].to_owned())
}

fn as_name_of(server: &Value) -> Option<String> {
    let args: Vec<&str> = server["args"]
        .as_array()?
        .iter()
        .filter_map(Value::as_str)
        .collect();
    args.windows(2)
        .find(|w| w[0] == "--as")
        .map(|w| w[1].to_owned())
}

/// Some(true) when the hub answered `{"ok":{}}` to a hello as `name` with `token`.
fn hello(port: u16, name: &str, token: &str) -> Option<bool> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    let line = json!({"hello": {"name": name, "token": token}});
    writeln!(s, "{line}").ok()?;
    let mut reply = String::new();
    BufReader::new(&s).read_line(&mut reply).ok()?;
    Some(reply.trim() == r#"{"ok":{}}"#)
}
