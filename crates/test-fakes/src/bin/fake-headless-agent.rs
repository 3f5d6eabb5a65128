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
        other => {
            eprintln!("fake-headless-agent: unknown scenario {other:?}");
            std::process::exit(2);
        }
    }
    let _ = out.flush();
}
