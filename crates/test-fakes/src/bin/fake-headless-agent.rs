//! Test-only: a scripted headless agent CLI for the headless fallback's integration tests
//! (tests/integration/delegate_headless.rs; docs/delegation.md "Headless tasks"). Never
//! installed, never run by the hub unless a manifest names it.
//!
//! Usage: `fake-headless-agent SCENARIO [ARG] PROMPT` (the prompt is the last argument, as a
//! manifest's `{prompt}` element puts it), or `… -` to read the prompt from stdin to its end
//! (as `run.headless_prompt = "stdin"` gives it, the way `codex exec -` reads it). Before
//! anything else it records what it was given in `fake-headless.json` in its working
//! directory: its argv after the program, the prompt it read from stdin (if any), its cwd,
//! and the names of its environment variables, so a test can check that the prompt arrived
//! as one element (or on stdin, and not on the argv), in the task's cwd, with the
//! allow-listed environment only.
//!
//! Scenarios:
//! - `claude-ok PROMPT`: prints one Claude `--output-format json` result whose text echoes
//!   the prompt, with usage and cost; exit 0.
//! - `codex-ok PROMPT`: prints a `codex exec --json` event stream ending in `turn.completed`.
//! - `fail CODE PROMPT`: writes two lines to stderr (the second holds the value of
//!   `FAKE_SECRET_KEY` when set, to prove redaction) and exits CODE.
//! - `flood BYTES PROMPT`: prints BYTES bytes of `x` on stdout, then exits 0.
//! - `hang PROMPT`: starts a child of its own (same process group) that sleeps, writes that
//!   child's pid to `fake-headless.child`, and sleeps forever; both ignore SIGTERM, so only a
//!   SIGKILL of the group ends them. The child's stdout is not the agent's, so the agent's
//!   end is its own exit.
//! - `sleeper`: (the child of `hang`) sleeps forever.
//! - `ask WHAT … PROMPT`: Claude Code's `--permission-prompt-tool` the way 2.1.197 and 2.1.337
//!   use it (issue 37 design §6, /work/notes/capture37-facts.md §7): reads the server named by
//!   `--permission-prompt-tool mcp__<server>__<tool>` from the `--mcp-config` file the hub
//!   wrote, starts it (its command and args, as Claude does), does the MCP handshake and calls
//!   `<tool>` with exactly `{tool_name, input, tool_use_id}`. WHAT `bash`: about `Bash` with
//!   `{"command":"echo fake > proof.txt"}` (`toolu_fake_1`); on an allow it "runs" the
//!   `updatedInput` it got back by writing its command into `proof.txt` in its cwd. WHAT `own`:
//!   about the hub's own tool `mcp__<server>__whoami`; on an allow it calls `whoami` on the same
//!   server. Prints one Claude result whose text is `asked: allow; ran` (with `; tool whoami:
//!   …` for `own`), `asked: deny: MESSAGE; not run`, or `ask failed: WHY`; exit 0.

use std::io::Write;
use std::time::Duration;

fn record(args: &[String], stdin: Option<&str>) {
    let mut env: Vec<String> = std::env::vars_os()
        .map(|(k, _)| k.to_string_lossy().into_owned())
        .collect();
    env.sort();
    let cwd = std::env::current_dir()
        .map(|d| d.display().to_string())
        .unwrap_or_default();
    let doc = serde_json::json!({"args": args, "stdin": stdin, "cwd": cwd, "env": env});
    let _ = std::fs::write("fake-headless.json", doc.to_string());
}

fn forever() -> ! {
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let scenario = args.first().cloned().unwrap_or_default();
    if scenario == "sleeper" {
        forever();
    }
    let stdin = (args.last().map(String::as_str) == Some("-")).then(|| {
        let mut text = String::new();
        let _ = std::io::Read::read_to_string(&mut std::io::stdin(), &mut text);
        text
    });
    record(&args, stdin.as_deref());
    let prompt = stdin.unwrap_or_else(|| args.last().cloned().unwrap_or_default());
    let mut out = std::io::stdout().lock();
    match scenario.as_str() {
        "claude-ok" => {
            let doc = serde_json::json!({
                "type": "result", "subtype": "success", "is_error": false,
                "duration_ms": 12, "num_turns": 1,
                "result": format!("echo: {prompt}"),
                "stop_reason": "end_turn", "session_id": "fake-session",
                "total_cost_usd": 0.0042,
                "usage": {"input_tokens": 11, "output_tokens": 7,
                          "cache_read_input_tokens": 3, "cache_creation_input_tokens": 0},
                "permission_denials": []
            });
            let _ = writeln!(out, "{doc}");
        }
        "codex-ok" => {
            let lines = [
                serde_json::json!({"type": "thread.started", "thread_id": "fake-thread"}),
                serde_json::json!({"type": "turn.started"}),
                serde_json::json!({"type": "item.completed", "item": {"id": "item_0", "type": "agent_message", "text": "thinking out loud"}}),
                serde_json::json!({"type": "item.completed", "item": {"id": "item_1", "type": "agent_message", "text": format!("done: {prompt}")}}),
                serde_json::json!({"type": "turn.completed", "usage": {"input_tokens": 100, "cached_input_tokens": 40, "output_tokens": 9}}),
            ];
            for l in lines {
                let _ = writeln!(out, "{l}");
            }
        }
        "fail" => {
            let code: i32 = args.get(1).and_then(|c| c.parse().ok()).unwrap_or(1);
            let secret = std::env::var("FAKE_SECRET_KEY").unwrap_or_default();
            eprintln!("fake-headless-agent: starting");
            eprintln!("fatal: the provider refused key {secret}");
            std::process::exit(code);
        }
        "flood" => {
            let n: usize = args.get(1).and_then(|c| c.parse().ok()).unwrap_or(0);
            let chunk = vec![b'x'; 64 << 10];
            let mut left = n;
            while left > 0 {
                let k = left.min(chunk.len());
                if out.write_all(&chunk[..k]).is_err() {
                    std::process::exit(3);
                }
                left -= k;
            }
        }
        "hang" => {
            // SAFETY: setting a signal's disposition to SIG_IGN touches no memory of ours.
            // Set before the child starts, which keeps it ignored across its exec.
            unsafe {
                libc::signal(libc::SIGTERM, libc::SIG_IGN);
            }
            let me = std::env::current_exe().unwrap_or_default();
            let child = std::process::Command::new(me)
                .arg("sleeper")
                .stdout(std::process::Stdio::null())
                .spawn();
            if let Ok(c) = &child {
                let _ = std::fs::write("fake-headless.child", c.id().to_string());
            }
            forever();
        }
        "ask" => {
            let what = args.get(1).map(String::as_str).unwrap_or("bash");
            let text = ask(&args, what).unwrap_or_else(|e| format!("ask failed: {e}"));
            let doc = serde_json::json!({
                "type": "result", "subtype": "success", "is_error": false,
                "duration_ms": 12, "num_turns": 2, "result": text,
                "stop_reason": "end_turn", "session_id": "fake-session",
                "usage": {"input_tokens": 1, "output_tokens": 1}
            });
            let _ = writeln!(out, "{doc}");
        }
        other => {
            eprintln!("fake-headless-agent: unknown scenario {other:?}");
            std::process::exit(2);
        }
    }
    let _ = out.flush();
}

/// The value after `flag` in the argv.
fn flag<'a>(args: &'a [String], flag: &str) -> Result<&'a str, String> {
    args.iter()
        .position(|a| a == flag)
        .and_then(|i| args.get(i + 1))
        .map(String::as_str)
        .ok_or_else(|| format!("no {flag} on the command line"))
}

/// The `ask` scenario (see the header): one permission prompt, as Claude Code asks it.
fn ask(args: &[String], what: &str) -> Result<String, String> {
    use serde_json::{json, Value};
    let tool_flag = flag(args, "--permission-prompt-tool")?;
    let (server, tool) = tool_flag
        .strip_prefix("mcp__")
        .and_then(|rest| rest.split_once("__"))
        .ok_or_else(|| format!("--permission-prompt-tool {tool_flag} is not mcp__SERVER__TOOL"))?;
    let config_path = flag(args, "--mcp-config")?;
    let config: Value = serde_json::from_str(
        &std::fs::read_to_string(config_path).map_err(|e| format!("read {config_path}: {e}"))?,
    )
    .map_err(|e| format!("parse {config_path}: {e}"))?;
    let entry = &config["mcpServers"][server];
    let command = entry["command"]
        .as_str()
        .ok_or_else(|| format!("no server {server} in {config_path}"))?;
    let server_args: Vec<&str> = entry["args"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut cmd = std::process::Command::new(command);
    cmd.args(&server_args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit());
    for (k, v) in entry["env"].as_object().into_iter().flatten() {
        cmd.env(k, v.as_str().unwrap_or_default());
    }
    let mut child = cmd.spawn().map_err(|e| format!("spawn {command}: {e}"))?;
    let mut stdin = child.stdin.take().ok_or("no stdin")?;
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(
        child.stdout.take().ok_or("no stdout")?,
    ));
    let mut call = move |v: Value, want: Option<u64>| -> Result<Value, String> {
        writeln!(stdin, "{v}").map_err(|e| e.to_string())?;
        stdin.flush().map_err(|e| e.to_string())?;
        let Some(want) = want else {
            return Ok(Value::Null);
        };
        loop {
            let line = lines
                .next()
                .ok_or("the server closed its stdout")?
                .map_err(|e| e.to_string())?;
            let r: Value = serde_json::from_str(&line).map_err(|e| e.to_string())?;
            if r["id"] == json!(want) {
                return Ok(r);
            }
        }
    };
    call(
        json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"claude-code","version":"fake"}}}),
        Some(0),
    )?;
    call(
        json!({"jsonrpc":"2.0","method":"notifications/initialized"}),
        None,
    )?;
    let (tool_name, input, tool_use_id) = match what {
        "own" => (format!("mcp__{server}__whoami"), json!({}), "toolu_fake_2"),
        _ => (
            "Bash".to_owned(),
            json!({"command": "echo fake > proof.txt"}),
            "toolu_fake_1",
        ),
    };
    let r = call(
        json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":tool,
            "arguments":{"tool_name":tool_name,"input":input,"tool_use_id":tool_use_id},
            "_meta":{"claudecode/toolUseId":tool_use_id,"progressToken":1}}}),
        Some(1),
    )?;
    if r["result"]["isError"] != json!(false) {
        return Err(format!("the tool failed: {r}"));
    }
    let text = r["result"]["content"][0]["text"].as_str().unwrap_or("");
    let said: Value =
        serde_json::from_str(text).map_err(|_| format!("not a permission result: {text}"))?;
    let out = match said["behavior"].as_str() {
        // As 2.1.197: an allow without updatedInput is refused; the updated input is run.
        Some("allow") => {
            let updated = said
                .get("updatedInput")
                .filter(|u| u.is_object())
                .ok_or_else(|| format!("an allow without updatedInput: {text}"))?;
            if what == "own" {
                let r = call(
                    json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"whoami","arguments":updated}}),
                    Some(2),
                )?;
                let got = r["result"]["content"][0]["text"].as_str().unwrap_or("");
                format!("asked: allow; tool whoami: {got}")
            } else {
                let command = updated["command"].as_str().unwrap_or_default();
                std::fs::write("proof.txt", command).map_err(|e| e.to_string())?;
                "asked: allow; ran".to_owned()
            }
        }
        Some("deny") => format!(
            "asked: deny: {}; not run",
            said["message"].as_str().unwrap_or_default()
        ),
        _ => return Err(format!("not a permission result: {text}")),
    };
    drop(call);
    let _ = child.kill();
    let _ = child.wait();
    Ok(out)
}
