//! What the `agent-hub delegate` and `agent-hub task` commands do around the exchange
//! (docs/delegation.md "Clients"): reading the prompt, making `--cwd` absolute, and the
//! `task list` table.
//!
//! Owns: the client's own prompt bound and the checks made before any token file is read or
//! connection opened. Refuses: the hub's checks (agent known, cwd under a root, prompt under
//! `tasks.prompt_max_bytes`): the hub makes them and its error line is passed through.

use super::task::TaskRecord;
use agent_hub_proto::kernel::text::for_terminal;
use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};

/// The largest prompt the client sends (16 MiB); the hub's `tasks.prompt_max_bytes` is
/// usually far lower and refuses with its own error.
pub const PROMPT_MAX_BYTES: u64 = 16 << 20;

/// Why the client refused `--prompt` or `--cwd` before sending anything.
#[derive(Debug)]
pub enum DelegateInputError {
    /// `--prompt -`: stdin could not be read.
    ReadStdin(std::io::Error),
    /// `--prompt -`: stdin is not UTF-8.
    PromptNotUtf8,
    /// The prompt is over `PROMPT_MAX_BYTES`.
    PromptTooLong,
    /// The prompt is empty or only whitespace.
    PromptEmpty,
    /// `--cwd` could not be made absolute (the client's own working directory is unknown, or
    /// the path is empty).
    Cwd {
        path: PathBuf,
        source: std::io::Error,
    },
    /// `--cwd`, made absolute, is not UTF-8 (the wire carries text).
    CwdNotUtf8(PathBuf),
}

impl fmt::Display for DelegateInputError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DelegateInputError::ReadStdin(e) => {
                write!(f, "cannot read the prompt from stdin: {e}")
            }
            DelegateInputError::PromptNotUtf8 => f.write_str("the prompt on stdin is not UTF-8"),
            DelegateInputError::PromptTooLong => write!(
                f,
                "the prompt is over {PROMPT_MAX_BYTES} bytes (16 MiB), the client's bound; nothing was sent"
            ),
            DelegateInputError::PromptEmpty => f.write_str("the prompt is empty"),
            DelegateInputError::Cwd { path, source } => {
                write!(f, "--cwd {}: {source}", path.display())
            }
            DelegateInputError::CwdNotUtf8(path) => {
                write!(f, "--cwd {} is not UTF-8", path.display())
            }
        }
    }
}

impl std::error::Error for DelegateInputError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            DelegateInputError::ReadStdin(e) | DelegateInputError::Cwd { source: e, .. } => Some(e),
            _ => None,
        }
    }
}

/// The prompt of `--prompt TEXT`, or of `--prompt -` read from `stdin` (at most
/// `PROMPT_MAX_BYTES` are read; surrounding whitespace is trimmed, as for `send --body -`).
/// An empty prompt, one over the bound, or stdin that is not UTF-8 is refused here.
pub fn read_prompt(arg: &str, stdin: impl Read) -> Result<String, DelegateInputError> {
    let prompt = if arg == "-" {
        let mut buf = Vec::new();
        stdin
            .take(PROMPT_MAX_BYTES + 1)
            .read_to_end(&mut buf)
            .map_err(DelegateInputError::ReadStdin)?;
        if buf.len() as u64 > PROMPT_MAX_BYTES {
            return Err(DelegateInputError::PromptTooLong);
        }
        String::from_utf8(buf)
            .map_err(|_| DelegateInputError::PromptNotUtf8)?
            .trim()
            .to_owned()
    } else {
        if arg.len() as u64 > PROMPT_MAX_BYTES {
            return Err(DelegateInputError::PromptTooLong);
        }
        arg.to_owned()
    };
    if prompt.trim().is_empty() {
        return Err(DelegateInputError::PromptEmpty);
    }
    Ok(prompt)
}

/// `--cwd` made absolute against the client's own working directory. Symlinks and `..` are
/// left as written: the hub normalises and checks the path against `tasks.cwd_roots`, and its
/// runner checks it again on the filesystem when the task starts.
pub fn absolute_cwd(dir: &Path) -> Result<String, DelegateInputError> {
    let abs = std::path::absolute(dir).map_err(|source| DelegateInputError::Cwd {
        path: dir.to_path_buf(),
        source,
    })?;
    abs.into_os_string()
        .into_string()
        .map_err(|p| DelegateInputError::CwdNotUtf8(PathBuf::from(p)))
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
            let err = read_prompt(arg, stdin).unwrap_err();
            assert!(matches!(err, DelegateInputError::PromptEmpty));
            assert_eq!(err.to_string(), "the prompt is empty");
        }
        assert!(read_prompt("-", &b"\xff\xfe"[..])
            .unwrap_err()
            .to_string()
            .contains("not UTF-8"));
    }

    #[test]
    fn prompt_bound_is_exact_and_stdin_is_not_read_past_it() {
        let max = PROMPT_MAX_BYTES as usize;
        let at = vec![b'a'; max];
        assert_eq!(read_prompt("-", &at[..]).unwrap().len(), max);
        let over = vec![b'a'; max + 1];
        assert!(read_prompt("-", &over[..])
            .unwrap_err()
            .to_string()
            .contains("16 MiB"));
        assert!(read_prompt(&"b".repeat(max + 1), &b""[..])
            .unwrap_err()
            .to_string()
            .contains("nothing was sent"));
        // An endless stdin is cut at the bound, not read to its end.
        let endless = std::io::repeat(b'x');
        assert!(read_prompt("-", endless)
            .unwrap_err()
            .to_string()
            .contains("16 MiB"));
    }

    #[test]
    fn refusals_read_as_before() {
        // docs/delegation.md quotes the bound's message; users and scripts see these texts.
        assert_eq!(
            DelegateInputError::PromptTooLong.to_string(),
            "the prompt is over 16777216 bytes (16 MiB), the client's bound; nothing was sent"
        );
        assert_eq!(
            DelegateInputError::PromptNotUtf8.to_string(),
            "the prompt on stdin is not UTF-8"
        );
        assert_eq!(
            DelegateInputError::CwdNotUtf8(PathBuf::from("/x")).to_string(),
            "--cwd /x is not UTF-8"
        );
        let e = std::io::Error::other("gone");
        assert_eq!(
            DelegateInputError::ReadStdin(e).to_string(),
            "cannot read the prompt from stdin: gone"
        );
        let cwd = DelegateInputError::Cwd {
            path: PathBuf::from("x"),
            source: std::io::Error::other("no cwd"),
        };
        assert_eq!(cwd.to_string(), "--cwd x: no cwd");
        assert!(std::error::Error::source(&cwd).is_some());
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
        assert!(absolute_cwd(Path::new(bad))
            .unwrap_err()
            .to_string()
            .contains("UTF-8"));
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
