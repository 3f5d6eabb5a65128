//! What the `agent-hub delegate` and `agent-hub task` commands do around the exchange
//! (docs/delegation.md "Clients"): reading the prompt, making `--cwd` absolute, and the
//! `task list` table.
//!
//! Owns: the client's own prompt bound and the checks made before any token file is read or
//! connection opened. Refuses: the hub's checks (agent known, cwd under a root, prompt under
//! `tasks.prompt_max_bytes`): the hub makes them and its error line is passed through.

use super::task::TaskRecord;
use agent_hub_proto::kernel::text::for_terminal;
use std::io::Read;
use std::path::Path;

/// The largest prompt the client sends (16 MiB); the hub's `tasks.prompt_max_bytes` is
/// usually far lower and refuses with its own error.
pub const PROMPT_MAX_BYTES: u64 = 16 << 20;

/// The prompt of `--prompt TEXT`, or of `--prompt -` read from `stdin` (at most
/// `PROMPT_MAX_BYTES` are read; surrounding whitespace is trimmed, as for `send --body -`).
/// An empty prompt, one over the bound, or stdin that is not UTF-8 is refused here.
pub fn read_prompt(arg: &str, stdin: impl Read) -> Result<String, String> {
    let prompt = if arg == "-" {
        let mut buf = Vec::new();
        stdin
            .take(PROMPT_MAX_BYTES + 1)
            .read_to_end(&mut buf)
            .map_err(|e| format!("cannot read the prompt from stdin: {e}"))?;
        if buf.len() as u64 > PROMPT_MAX_BYTES {
            return Err(too_long());
        }
        String::from_utf8(buf)
            .map_err(|_| "the prompt on stdin is not UTF-8".to_owned())?
            .trim()
            .to_owned()
    } else {
        if arg.len() as u64 > PROMPT_MAX_BYTES {
            return Err(too_long());
        }
        arg.to_owned()
    };
    if prompt.trim().is_empty() {
        return Err("the prompt is empty".into());
    }
    Ok(prompt)
}

fn too_long() -> String {
    format!("the prompt is over {PROMPT_MAX_BYTES} bytes (16 MiB), the client's bound; nothing was sent")
}

/// `--cwd` made absolute against the client's own working directory. Symlinks and `..` are
/// left as written: the hub normalises and checks the path against `tasks.cwd_roots`, and its
/// runner checks it again on the filesystem when the task starts.
pub fn absolute_cwd(dir: &Path) -> Result<String, String> {
    let abs = std::path::absolute(dir).map_err(|e| format!("--cwd {}: {e}", dir.display()))?;
    abs.into_os_string()
        .into_string()
        .map_err(|p| format!("--cwd {} is not UTF-8", Path::new(&p).display()))
}

/// The `task list` table: one row per task, oldest first, as the hub lists them. `now` is the
/// client's clock, for the AGE column (from `createdAt`). Cells go through the one sanitiser
/// (`agent_hub_proto::kernel::text`): a peer's task names its agent and state.
pub fn render_tasks(tasks: &[TaskRecord], now: chrono::DateTime<chrono::Utc>) -> String {
    let mut out = format!(
        "{:<37} {:<12} {:<12} {:<14} {}\n",
        "TASK", "AGENT", "PEER", "STATE", "AGE"
    );
    for t in tasks {
        let state = match (t.state.as_deref(), t.position) {
            (Some(s), Some(p)) => format!("{s} #{p}"),
            (Some(s), None) => s.to_owned(),
            (None, _) => "-".to_owned(),
        };
        out.push_str(&format!(
            "{:<37} {:<12} {:<12} {:<14} {}\n",
            for_terminal(&t.task),
            for_terminal(t.agent.as_deref().unwrap_or("-")),
            for_terminal(t.peer.as_deref().unwrap_or("-")),
            for_terminal(&state),
            t.created_at
                .as_deref()
                .map_or_else(|| "-".to_owned(), |c| age(c, now))
        ));
    }
    out
}

/// `42s`, `7m`, `3h`, `2d`; `-` for a time that does not parse, `0s` for one in the future
/// (clocks differ).
fn age(created: &str, now: chrono::DateTime<chrono::Utc>) -> String {
    let Ok(t) = chrono::DateTime::parse_from_rfc3339(created) else {
        return "-".to_owned();
    };
    let secs = (now - t.with_timezone(&chrono::Utc)).num_seconds().max(0);
    match secs {
        s if s < 60 => format!("{s}s"),
        s if s < 3600 => format!("{}m", s / 60),
        s if s < 86_400 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86_400),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prompt_from_argv_and_stdin() {
        assert_eq!(read_prompt("fix it", &b""[..]).unwrap(), "fix it");
        assert_eq!(read_prompt(" keep ", &b""[..]).unwrap(), " keep ");
        assert_eq!(
            read_prompt("-", &b"\n  fix it\nnow\n\n"[..]).unwrap(),
            "fix it\nnow"
        );
        for (arg, stdin) in [("", &b""[..]), ("  \n", b""), ("-", b""), ("-", b" \n\t ")] {
            assert_eq!(read_prompt(arg, stdin).unwrap_err(), "the prompt is empty");
        }
        assert!(read_prompt("-", &b"\xff\xfe"[..])
            .unwrap_err()
            .contains("not UTF-8"));
    }

    #[test]
    fn prompt_bound_is_exact_and_stdin_is_not_read_past_it() {
        let max = PROMPT_MAX_BYTES as usize;
        let at = vec![b'a'; max];
        assert_eq!(read_prompt("-", &at[..]).unwrap().len(), max);
        let over = vec![b'a'; max + 1];
        assert!(read_prompt("-", &over[..]).unwrap_err().contains("16 MiB"));
        assert!(read_prompt(&"b".repeat(max + 1), &b""[..])
            .unwrap_err()
            .contains("nothing was sent"));
        // An endless stdin is cut at the bound, not read to its end.
        let endless = std::io::repeat(b'x');
        assert!(read_prompt("-", endless).unwrap_err().contains("16 MiB"));
    }

    #[test]
    fn cwd_is_made_absolute_without_resolving() {
        let here = std::env::current_dir().unwrap();
        assert_eq!(
            absolute_cwd(Path::new("sub/../x")).unwrap(),
            here.join("sub/../x").to_str().unwrap()
        );
        assert_eq!(absolute_cwd(Path::new("/a/b")).unwrap(), "/a/b");
        assert!(absolute_cwd(Path::new("")).is_err());
        use std::os::unix::ffi::OsStrExt;
        let bad = std::ffi::OsStr::from_bytes(b"/tmp/\xff");
        assert!(absolute_cwd(Path::new(bad)).unwrap_err().contains("UTF-8"));
    }

    #[test]
    fn table_rows_and_ages() {
        let now = chrono::DateTime::parse_from_rfc3339("2026-12-01T12:00:00.000Z")
            .unwrap()
            .with_timezone(&chrono::Utc);
        let rec =
            |task: &str, state: Option<&str>, pos: Option<u64>, created: Option<&str>| TaskRecord {
                task: task.into(),
                agent: Some("codex".into()),
                state: state.map(str::to_owned),
                position: pos,
                created_at: created.map(str::to_owned),
                ..TaskRecord::default()
            };
        let mut peer = rec(
            "task-c",
            Some("running"),
            None,
            Some("2026-11-29T11:00:00Z"),
        );
        peer.peer = Some("lab".into());
        let text = render_tasks(
            &[
                rec(
                    "task-a",
                    Some("queued"),
                    Some(2),
                    Some("2026-12-01T11:59:18.500Z"),
                ),
                rec("task-b", Some("frozen"), None, Some("2026-12-01T09:00:00Z")),
                peer,
                rec("task-d", None, None, None),
                rec(
                    "task-e",
                    Some("completed"),
                    None,
                    Some("2026-12-01T12:00:09Z"),
                ),
                rec("task-f", Some("failed"), None, Some("yesterday")),
                rec("task-g", Some("failed"), None, Some("2026-12-01T11:53:00Z")),
            ],
            now,
        );
        let rows: Vec<Vec<&str>> = text
            .lines()
            .map(|l| l.split_whitespace().collect())
            .collect();
        assert_eq!(rows[0], ["TASK", "AGENT", "PEER", "STATE", "AGE"]);
        assert_eq!(rows[1], ["task-a", "codex", "-", "queued", "#2", "41s"]);
        assert_eq!(rows[2], ["task-b", "codex", "-", "frozen", "3h"]);
        assert_eq!(rows[3], ["task-c", "codex", "lab", "running", "2d"]);
        assert_eq!(rows[4], ["task-d", "codex", "-", "-", "-"]);
        assert_eq!(rows[5], ["task-e", "codex", "-", "completed", "0s"]);
        assert_eq!(rows[6], ["task-f", "codex", "-", "failed", "-"]);
        assert_eq!(rows[7], ["task-g", "codex", "-", "failed", "7m"]);
        assert_eq!(rows.len(), 8);
        assert_eq!(render_tasks(&[], now).lines().count(), 1);
    }
}
