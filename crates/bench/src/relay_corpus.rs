//! Relay payloads built here, deterministically (a fixed xorshift seed): prose, source, tool
//! output and the synthetic transcript the codec table measures.

use serde_json::json;
use std::fmt::Write as _;

// ----- relay (issue 4): the codec table, a loopback link, heartbeat bytes -----
//
// In process, no hub: the relay's sans-IO pieces (`agent_hub_proto::relay`) measured directly. The
// payloads are built here, deterministically (a fixed xorshift seed), so every run measures the
// same bytes; see `docs/performance.md`, "Relay", for what each one holds.

/// The raw size of the transcript payload (and of a v0 `session_transfer` chunk).
pub(crate) const TRANSCRIPT_BYTES: usize = 512 * 1024;
/// The chunk size of the loopback link's main transfer workload.
pub(crate) const CHUNK_BYTES: usize = 64 * 1024;
/// Agents in the directory of the heartbeat-bytes measurement.
pub(crate) const BEAT_AGENTS: usize = 50;
/// Beats sent per configuration in the heartbeat-bytes measurement (three full-snapshot cycles).
pub(crate) const BEATS: usize = 30;
/// The bench writes what a link's session queues once this much has gathered (the server
/// writes whatever one loop iteration queued; this stands in for that coalescing).
pub(crate) const LINK_WRITE_BYTES: usize = 64 * 1024;
/// A fixed wall clock for the in-memory sessions, so ids and timestamps have the same digits
/// in every run: 2025-09-14T10:00:00Z.
pub(crate) const RELAY_T0_MS: i64 = 1_757_844_000_000;
/// The 29-byte bus body: the measured average body size (docs/performance.md "The payloads").
pub(crate) const BUS_BODY_29: &str = "Tests pass; ready for review.";
/// The 119-byte bus body: the measured largest body (docs/performance.md "The payloads").
pub(crate) const BUS_BODY_119: &str = "Please review PR #142 (relay frames + lz4): frame.rs and session.rs changed; all tests pass, fuzzed 10 min, no crashes.";

/// xorshift64*: the payload generator's only source of variety.
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub(crate) fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    pub(crate) fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + self.below(hi - lo + 1)
    }
    pub(crate) fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.below(xs.len())]
    }
    /// Skewed towards the front of a list, roughly as word frequencies are (Zipf-like).
    pub(crate) fn skewed<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        let u = (self.next() >> 11) as f64 / (1u64 << 53) as f64;
        &xs[((u.powf(2.2) * xs.len() as f64) as usize).min(xs.len() - 1)]
    }
    pub(crate) fn hex(&mut self, n: usize) -> String {
        (0..n)
            .map(|_| char::from(b"0123456789abcdef"[self.below(16)]))
            .collect()
    }
    pub(crate) fn base62(&mut self, n: usize) -> String {
        const A: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
        (0..n).map(|_| char::from(A[self.below(A.len())])).collect()
    }
    pub(crate) fn uuid(&mut self) -> String {
        format!(
            "{}-{}-4{}-a{}-{}",
            self.hex(8),
            self.hex(4),
            self.hex(3),
            self.hex(3),
            self.hex(12)
        )
    }
}

/// Words of an agent's prose, most frequent first.
pub(crate) const WORDS: &[&str] = &[
    "the",
    "to",
    "and",
    "a",
    "of",
    "is",
    "in",
    "that",
    "it",
    "for",
    "this",
    "I",
    "with",
    "on",
    "be",
    "not",
    "test",
    "file",
    "now",
    "so",
    "we",
    "as",
    "from",
    "the",
    "frame",
    "let",
    "me",
    "check",
    "code",
    "when",
    "which",
    "one",
    "session",
    "error",
    "an",
    "if",
    "are",
    "but",
    "should",
    "can",
    "function",
    "by",
    "all",
    "line",
    "at",
    "change",
    "then",
    "relay",
    "fix",
    "heartbeat",
    "message",
    "there",
    "run",
    "build",
    "its",
    "only",
    "each",
    "type",
    "before",
    "new",
    "what",
    "because",
    "value",
    "still",
    "case",
    "tests",
    "passes",
    "returns",
    "first",
    "bytes",
    "peer",
    "link",
    "handshake",
    "read",
    "write",
    "update",
    "cargo",
    "clippy",
    "looks",
    "good",
    "also",
    "need",
    "add",
    "here",
    "after",
    "field",
    "state",
    "decoder",
    "payload",
    "compressed",
    "size",
    "length",
    "check",
    "buffer",
    "socket",
    "closes",
    "would",
    "could",
    "instead",
    "same",
    "other",
    "both",
    "every",
    "into",
    "about",
    "these",
    "current",
    "struct",
    "enum",
    "match",
    "config",
    "server",
    "client",
    "agent",
    "queue",
    "hub",
    "delta",
    "directory",
    "version",
    "feature",
    "negotiated",
    "agreed",
    "proof",
    "nonce",
    "key",
    "mutual",
    "lines",
    "upgrade",
    "limit",
    "cap",
    "allocate",
    "declared",
    "reserved",
    "flag",
    "bit",
    "protocol",
    "docs",
    "issue",
    "commit",
    "branch",
    "review",
    "failing",
    "assertion",
    "expected",
    "got",
    "panic",
    "unwrap",
    "result",
    "option",
    "trait",
    "impl",
    "module",
    "import",
    "crate",
    "dependency",
    "benchmark",
    "measure",
    "median",
    "latency",
    "throughput",
    "loopback",
    "timeout",
    "interval",
    "liveness",
    "reconnect",
    "backoff",
    "dialer",
    "acceptor",
    "challenge",
    "catalogue",
    "fixture",
    "fuzz",
    "target",
    "corpus",
    "truncated",
    "oversized",
    "bomb",
    "safely",
    "exactly",
    "simply",
    "already",
    "probably",
    "actually",
    "seems",
    "means",
    "makes",
];

/// Tool names of an agent transcript with their share of calls.
pub(crate) const TOOLS: &[&str] = &[
    "Read",
    "Read",
    "Read",
    "Bash",
    "Bash",
    "Edit",
    "Grep",
    "Glob",
    "TodoWrite",
];

pub(crate) const PATHS: &[&str] = &[
    "src/relay/frame.rs",
    "src/relay/session.rs",
    "src/relay/heartbeat.rs",
    "src/relay/message.rs",
    "src/relay/auth.rs",
    "src/relay/links.rs",
    "src/server/relay_io.rs",
    "src/bin/agent-hub-bench.rs",
    "docs/relay-protocol.md",
    "docs/performance.md",
    "tests/relay_fixtures.rs",
    "protocol/relay/heartbeat.json",
    "Cargo.toml",
    "src/lib.rs",
];

/// Source text that `Read` and `Edit` results quote: made-up Rust, generated once from a fixed
/// seed (about 4,100 lines), so the transcript is the same bytes in every build.
pub(crate) fn quoted_source() -> &'static str {
    static SOURCE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    SOURCE.get_or_init(|| {
        const IDENTS: &[&str] = &[
            "frame", "body", "len", "buf", "pos", "msg", "peer", "session", "state", "flags",
            "out", "bytes", "payload", "beat", "directory", "agents", "seq", "base", "ack_id",
            "features", "nonce", "proof", "key", "line", "cap", "raw", "declared", "n", "i",
            "now", "deadline", "interval", "stats", "events", "link", "reason", "version",
        ];
        const TYPES: &[&str] = &[
            "Frame", "Session", "RelayMessage", "Directory", "Beat", "Vec<u8>", "String", "usize",
            "Instant", "Duration", "FrameError", "RelayError", "Feature", "SessionEvent", "u32",
        ];
        const METHODS: &[&str] = &[
            "len", "push", "extend_from_slice", "get", "insert", "remove", "clone", "to_owned",
            "as_str", "is_empty", "contains", "iter", "map_err", "unwrap_or", "encode_json",
            "next_frame", "handle_input", "poll_transmit", "decode_line", "push_back",
        ];
        let mut rng = Rng(0x6A09_E667_F3BC_C908);
        let mut s = String::new();
        // Half the identifiers from the relay's own vocabulary, half any lowercase word.
        let id = |rng: &mut Rng| loop {
            let w = if rng.below(2) == 0 { *rng.skewed(IDENTS) } else { *rng.pick(WORDS) };
            if w.bytes().all(|b| b.is_ascii_lowercase() || b == b'_') {
                break w.to_owned();
            }
        };
        for _ in 0..180 {
            let _ = writeln!(s, "/// {}", prose(&mut rng, 6, 20));
            let (a, b, t, u) = (id(&mut rng), id(&mut rng), *rng.pick(TYPES), *rng.pick(TYPES));
            let _ = writeln!(s, "pub fn {a}_{b}(&mut self, {a}: &{t}) -> Result<{u}, RelayError> {{");
            for _ in 0..rng.range(4, 14) {
                let (x, y, m) = (id(&mut rng), id(&mut rng), *rng.pick(METHODS));
                let _ = match rng.below(8) {
                    0 => writeln!(s, "    let {x} = self.{y}.{m}()?;"),
                    1 => writeln!(s, "    if {x}.{m}() > {} {{\n        return Err(RelayError::BadBody(format!(\"{} {{}}\", {y})));\n    }}", rng.range(1, 4096), prose(&mut rng, 3, 7)),
                    2 => writeln!(s, "    // {}", prose(&mut rng, 5, 14)),
                    3 => writeln!(s, "    self.{x}.{m}(&{y});"),
                    4 => writeln!(s, "    match {x} {{\n        Some({y}) => self.{y} = {y},\n        None => return Ok({}::default()),\n    }}", rng.pick(TYPES)),
                    5 => writeln!(s, "    for {x} in &self.{y} {{\n        out.{m}({x});\n    }}"),
                    6 => writeln!(s, "    let {x}: {} = {y}.{m}().unwrap_or({});", rng.pick(TYPES), rng.below(100)),
                    _ => writeln!(s, "    debug_assert!({x}.{m}() <= {y}, \"{}\");", prose(&mut rng, 3, 6)),
                };
            }
            let _ = writeln!(s, "    Ok({})\n}}\n", id(&mut rng));
            if rng.below(5) == 0 {
                let (a, b) = (id(&mut rng), id(&mut rng));
                let _ = writeln!(s, "#[test]\nfn {a}_{b}_{}() {{\n    let {a} = {}::new();\n    assert_eq!({a}.{}(), {});\n}}\n", id(&mut rng), rng.pick(TYPES), rng.pick(METHODS), rng.below(64));
            }
        }
        s
    })
}

pub(crate) fn prose(rng: &mut Rng, lo: usize, hi: usize) -> String {
    let words = rng.range(lo, hi);
    let mut s = String::new();
    let mut sentence = 0;
    for i in 0..words {
        if i > 0 {
            s.push(' ');
        }
        let w = match rng.below(40) {
            0 => format!("`{}`", rng.pick(PATHS)),
            1 => format!(
                "`{}`",
                rng.pick(&[
                    "decode_frame",
                    "encode_message",
                    "BeatSender::next_beat",
                    "handle_input",
                    "poll_transmit",
                    "FrameDecoder",
                    "Session::send",
                    "intersect"
                ])
            ),
            2 => rng.range(2, 4096).to_string(),
            _ => (*rng.skewed(WORDS)).to_owned(),
        };
        if sentence == 0 {
            let mut c = w.chars();
            if let Some(f) = c.next() {
                s.extend(f.to_uppercase());
                s.push_str(c.as_str());
            }
        } else {
            s.push_str(&w);
        }
        sentence += 1;
        if sentence > 6 && rng.below(9) == 0 {
            s.push(*rng.pick(&['.', '.', '.', ':', ',']));
            sentence = if s.ends_with(',') { 1 } else { 0 };
        }
    }
    s.push('.');
    s
}

/// `n` lines of the quoted source from a random line, as `cat -n` numbers them (the form of a
/// `Read` result).
pub(crate) fn source_slice(rng: &mut Rng, lo: usize, hi: usize, numbered: bool) -> String {
    let n = rng.range(lo, hi);
    let lines: Vec<&str> = quoted_source().lines().collect();
    let start = rng.below(lines.len().saturating_sub(n).max(1));
    let mut s = String::new();
    for (i, l) in lines.iter().skip(start).take(n).enumerate() {
        if numbered {
            let _ = writeln!(s, "{:>6}\u{2192}{l}", start + i + 1);
        } else {
            s.push_str(l);
            s.push('\n');
        }
    }
    s
}

pub(crate) fn tool_output(rng: &mut Rng, command: &str) -> String {
    let mut s = String::new();
    match command {
        "cargo test" => {
            let _ = writeln!(s, "   Compiling agent-hub v0.1.0 (/home/dev/agent-hub)\n    Finished `test` profile [unoptimized + debuginfo] target(s) in {}.{:02}s\n     Running unittests src/lib.rs (target/debug/deps/agent_hub-{})\n\nrunning {} tests", rng.range(3, 40), rng.below(100), rng.hex(16), rng.range(20, 60));
            for _ in 0..rng.range(20, 60) {
                let module = rng.pick(&[
                    "relay::frame",
                    "relay::session",
                    "relay::heartbeat",
                    "relay::message",
                    "relay::tests",
                    "relay::auth",
                    "store::sqlite",
                    "hub::core",
                ]);
                let name: Vec<&str> = (0..rng.range(3, 8)).map(|_| *rng.skewed(WORDS)).collect();
                let _ = writeln!(
                    s,
                    "test {module}::tests::{} ... ok",
                    name.join("_").to_lowercase()
                );
            }
            let _ = writeln!(s, "\ntest result: ok. {} passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in {}.{:02}s", rng.range(20, 60), rng.below(3), rng.below(100));
        }
        "git status" => {
            let _ = writeln!(s, "On branch relay-v1\nChanges not staged for commit:\n  (use \"git add <file>...\" to update what will be committed)");
            for _ in 0..rng.range(1, 6) {
                let _ = writeln!(s, "\tmodified:   {}", rng.pick(PATHS));
            }
        }
        _ => {
            for _ in 0..rng.range(3, 25) {
                let line = source_slice(rng, 1, 1, false);
                let _ = write!(s, "{}:{}:{}", rng.pick(PATHS), rng.range(1, 1200), line);
            }
        }
    }
    s
}

/// A synthetic agent transcript: JSON lines shaped like a coding agent's session file (user
/// prompts, assistant text, tool calls and their results with quoted source and command
/// output, token usage, uuids), exactly `bytes` long (the last line is cut).
pub(crate) fn synthetic_transcript(bytes: usize) -> Vec<u8> {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let session_id = rng.uuid();
    let cwd = "/home/dev/agent-hub";
    let mut parent = serde_json::Value::Null;
    let mut ms: i64 = RELAY_T0_MS;
    let mut out = Vec::with_capacity(bytes + 64 * 1024);
    let mut cache_read: u64 = 12_000;
    while out.len() < bytes {
        ms += rng.range(200, 20_000) as i64;
        let ts = chrono::DateTime::from_timestamp_millis(ms)
            .map(|t| t.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string())
            .unwrap_or_default();
        let uuid = rng.uuid();
        let envelope = |kind: &str,
                        message: serde_json::Value,
                        parent: &serde_json::Value,
                        uuid: &str,
                        ts: &str| {
            json!({
                "parentUuid": parent, "isSidechain": false, "userType": "external", "cwd": cwd,
                "sessionId": session_id, "version": "1.0.83", "gitBranch": "relay-v1",
                "type": kind, "message": message, "uuid": uuid, "timestamp": ts,
            })
        };
        cache_read += rng.range(100, 3000) as u64;
        let usage = json!({
            "input_tokens": rng.range(1, 12), "cache_creation_input_tokens": rng.range(0, 4000),
            "cache_read_input_tokens": cache_read, "output_tokens": rng.range(20, 900),
            "service_tier": "standard",
        });
        let assistant = |rng: &mut Rng, content: serde_json::Value| {
            json!({
                "id": format!("msg_01{}", rng.base62(22)), "type": "message", "role": "assistant",
                "model": "claude-sonnet-4-5-20250929", "content": content,
                "stop_reason": null, "stop_sequence": null, "usage": usage,
            })
        };
        let mut lines = Vec::new();
        match rng.below(20) {
            0 => {
                let text = prose(&mut rng, 15, 70);
                lines.push(envelope(
                    "user",
                    json!({"role": "user", "content": text}),
                    &parent,
                    &uuid,
                    &ts,
                ));
            }
            1..=6 => {
                let text = prose(&mut rng, 10, 140);
                let m = assistant(&mut rng, json!([{"type": "text", "text": text}]));
                let mut l = envelope("assistant", m, &parent, &uuid, &ts);
                l["requestId"] = json!(format!("req_011{}", rng.base62(21)));
                lines.push(l);
            }
            _ => {
                let tool = *rng.pick(TOOLS);
                let id = format!("toolu_01{}", rng.base62(22));
                let path = format!("{cwd}/{}", rng.pick(PATHS));
                let (input, result, extra) = match tool {
                    "Read" => {
                        let n = rng.range(20, 160);
                        let text = source_slice(&mut rng, n, n, true);
                        // The result object holds the same lines without their numbers.
                        let plain: String = text
                            .lines()
                            .map(|l| l.split_once('\u{2192}').map_or(l, |(_, code)| code))
                            .fold(String::new(), |mut acc, l| {
                                acc.push_str(l);
                                acc.push('\n');
                                acc
                            });
                        (
                            json!({"file_path": path, "offset": rng.range(1, 900), "limit": n}),
                            text,
                            json!({"type": "text", "file": {"filePath": path, "content": plain, "numLines": n, "startLine": rng.range(1, 900), "totalLines": rng.range(900, 2300)}}),
                        )
                    }
                    "Bash" => {
                        let command =
                            *rng.pick(&["cargo test", "cargo test", "git status", "rg -n"]);
                        let out = tool_output(&mut rng, command);
                        (
                            json!({"command": format!("{command} 2>&1 | tail -80"), "description": prose(&mut rng, 3, 9)}),
                            out.clone(),
                            json!({"stdout": out, "stderr": "", "interrupted": false, "isImage": false}),
                        )
                    }
                    "Edit" => {
                        let old = source_slice(&mut rng, 2, 12, false);
                        let new = source_slice(&mut rng, 2, 14, false);
                        let shown = source_slice(&mut rng, 8, 20, true);
                        (
                            json!({"file_path": path, "old_string": old, "new_string": new}),
                            format!("The file {path} has been updated. Here's the result of running `cat -n` on a snippet of the edited file:\n{shown}"),
                            json!({"filePath": path, "oldString": old, "newString": new, "userModified": false, "replaceAll": false}),
                        )
                    }
                    "Grep" | "Glob" => {
                        let out = tool_output(&mut rng, "rg -n");
                        (
                            json!({"pattern": *rng.skewed(WORDS), "path": cwd, "output_mode": "content", "-n": true}),
                            out.clone(),
                            json!({"mode": "content", "numFiles": rng.range(1, 9), "content": out}),
                        )
                    }
                    _ => {
                        let todos: Vec<serde_json::Value> = (0..rng.range(3, 7))
                            .map(|_| json!({"content": prose(&mut rng, 6, 6), "status": *rng.pick(&["pending", "in_progress", "completed"]), "activeForm": prose(&mut rng, 5, 5)}))
                            .collect();
                        (
                            json!({"todos": todos}),
                            "Todos have been modified successfully. Ensure that you continue to use the todo list to track your progress. Please proceed with the current tasks if applicable".to_owned(),
                            json!({"oldTodos": [], "newTodos": todos}),
                        )
                    }
                };
                let m = assistant(
                    &mut rng,
                    json!([{"type": "tool_use", "id": id, "name": tool, "input": input}]),
                );
                let mut call = envelope("assistant", m, &parent, &uuid, &ts);
                call["requestId"] = json!(format!("req_011{}", rng.base62(21)));
                lines.push(call);
                let result_uuid = rng.uuid();
                let r = json!({"role": "user", "content": [{"tool_use_id": id, "type": "tool_result", "content": result}]});
                let mut l = envelope("user", r, &json!(uuid), &result_uuid, &ts);
                l["toolUseResult"] = extra;
                lines.push(l);
            }
        }
        for l in lines {
            parent = l["uuid"].clone();
            out.extend_from_slice(&serde_json::to_vec(&l).expect("json"));
            out.push(b'\n');
        }
    }
    out.truncate(bytes);
    out
}
