//! What the `agent-hub delegate` and `agent-hub task` commands do around the exchange
//! (docs/delegation.md "Clients"): reading the prompt, making `--cwd` absolute, reading
//! `--allow` rules (issue 37), the `task list` table and the lines that show a task's open
//! requests.
//!
//! Owns: the client's own prompt bound and the checks made before any token file is read or
//! connection opened (the wire's own bounds on `allow`, `wire::approval::check_allow`, so a
//! refusal reads the same here and at the hub). Refuses: the hub's checks (agent known, cwd
//! under a root, prompt under `tasks.prompt_max_bytes`, a permission within the operator's
//! bound, who may answer): the hub makes them and its error line is passed through.

use super::task::{RequestView, TaskRecord};
use agent_hub_proto::kernel::text::for_terminal;
use agent_hub_proto::wire::approval::{check_allow, AllowError, MAX_ALLOW_RULES};
use agent_hub_proto::wire::AllowRule;
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
    /// An `--allow` the wire's bounds refuse: the argument as given and why.
    Allow { spec: String, why: AllowError },
    /// More `--allow` than a delegation may carry.
    TooManyAllows(usize),
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
            DelegateInputError::Allow { spec, why } => {
                // The rule's own problem, without the wire's `allow rule N: ` (the argument
                // says which one).
                let why = match why {
                    AllowError::Rule { problem, .. } => problem.to_string(),
                    other => other.to_string(),
                };
                write!(
                    f,
                    "--allow {}: {why} (the form is KIND[,KIND…][:PATH], PATH relative to --cwd)",
                    for_terminal(spec)
                )
            }
            DelegateInputError::TooManyAllows(n) => write!(
                f,
                "--allow is given {n} times; a task takes at most {MAX_ALLOW_RULES} rules"
            ),
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

/// One `--allow KIND[,KIND…][:PATH]` as a rule: the kinds before the first `:`, split at
/// `,`; the path after it, kept as given (the hub normalises it lexically). Checked against
/// the wire's bounds here, before any connection.
pub fn parse_allow(spec: &str) -> Result<AllowRule, DelegateInputError> {
    let (kinds, under) = match spec.split_once(':') {
        Some((k, p)) => (k, Some(p.to_owned())),
        None => (spec, None),
    };
    let kinds = kinds
        .split(',')
        .map(str::trim)
        .filter(|k| !k.is_empty())
        .map(str::to_owned)
        .collect();
    let rule = AllowRule { kinds, under };
    check_allow(std::slice::from_ref(&rule)).map_err(|why| DelegateInputError::Allow {
        spec: spec.to_owned(),
        why,
    })?;
    Ok(rule)
}

/// Every `--allow` of a command line (None without any), at most `MAX_ALLOW_RULES`.
pub fn parse_allows(specs: &[String]) -> Result<Option<Vec<AllowRule>>, DelegateInputError> {
    if specs.is_empty() {
        return Ok(None);
    }
    if specs.len() > MAX_ALLOW_RULES {
        return Err(DelegateInputError::TooManyAllows(specs.len()));
    }
    specs
        .iter()
        .map(|s| parse_allow(s))
        .collect::<Result<_, _>>()
        .map(Some)
}

/// Who may answer a task's request (design §5): said wherever requests are shown, since a
/// record does not name the approvers.
pub const WHO_ANSWERS: &str = "its delegator, or a name in the hub's tasks.approvers";

/// The two lines that show one open request (under its task in `task list`, after `task
/// status`): its id, type, tool kind and title; then its options, how long it has waited (the
/// hub's count) and when its fallback answers it (from `expiresAt` on the client's clock).
/// Every value is other parties' text, sanitised.
pub fn request_lines(r: &RequestView, now: chrono::DateTime<chrono::Utc>) -> [String; 2] {
    let id = r.request.as_deref().unwrap_or("-");
    let kind = r.kind.as_deref().unwrap_or("request");
    let tool = r
        .tool_kind
        .as_deref()
        .map(|k| format!(" ({k})"))
        .unwrap_or_default();
    let title = r
        .title
        .as_deref()
        .map(|t| format!(" {:?}", for_terminal(t)))
        .unwrap_or_default();
    let options = if r.options.is_empty() {
        "-".to_owned()
    } else {
        r.options.join(", ")
    };
    let waiting = r
        .waiting_ms
        .map_or_else(|| "-".to_owned(), |ms| short_secs((ms / 1000) as i64));
    let expires = match r
        .expires_at
        .as_deref()
        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
    {
        Some(t) => {
            let left = (t.with_timezone(&chrono::Utc) - now).num_seconds();
            if left > 0 {
                format!("expires in {}", short_secs(left))
            } else {
                "expires now".to_owned()
            }
        }
        None => "expiry unknown".to_owned(),
    };
    [
        for_terminal(&format!("request {id}: {kind}{tool}{title}")).into_owned(),
        for_terminal(&format!("options {options}; waiting {waiting}; {expires}")).into_owned(),
    ]
}

/// The block `task status` prints on stderr when a task waits for answers: each request's
/// lines, then the command that answers it and who may.
pub fn render_open_requests(
    task: &str,
    requests: &[RequestView],
    now: chrono::DateTime<chrono::Utc>,
) -> String {
    let task = for_terminal(task);
    let n = requests.len();
    let mut out = format!(
        "{task} waits for an answer to {n} request{}:\n",
        if n == 1 { "" } else { "s" }
    );
    for r in requests {
        let [a, b] = request_lines(r, now);
        out.push_str(&format!("  {a}\n    {b}\n"));
    }
    let request = match requests {
        [one] => for_terminal(one.request.as_deref().unwrap_or("REQ")).into_owned(),
        _ => "REQ".to_owned(),
    };
    out.push_str(&format!(
        "  answer: agent-hub task answer --id {task} --request {request} --option OPTION ({WHO_ANSWERS})\n"
    ));
    if requests
        .iter()
        .any(|r| r.kind.as_deref() == Some("question"))
    {
        // A question's accept carries the form's content (design §4b); its form (`schema`)
        // is in the task_request envelope.
        out.push_str(QUESTION_HINT);
    }
    out
}

/// How a question is answered, under the answer line when one waits.
const QUESTION_HINT: &str = "  a question: --option accept --message '{...}' with the form's content as a JSON object matching the schema of its task_request envelope; or decline, cancel\n";

/// The `task list` table: one row per task, oldest first, as the hub lists them, each task's
/// open requests under it (`request_lines`) and, when any is open, how to answer one. `now`
/// is the client's clock, for the AGE column (from `createdAt`). Cells go through the one
/// sanitiser (`agent_hub_proto::kernel::text`): a peer's task names its agent and state.
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
        for r in &t.requests {
            let [a, b] = request_lines(r, now);
            out.push_str(&format!("  {a}\n    {b}\n"));
        }
    }
    if tasks.iter().any(|t| !t.requests.is_empty()) {
        out.push_str(&format!(
            "answer one: agent-hub task answer --id TASK --request REQ --option OPTION ({WHO_ANSWERS})\n"
        ));
    }
    out
}

/// `usage: 120 tokens (input 100, output 20), cost 0.3 USD, context 1200/200000; budget
/// maxCostUsd 2 (passed)` for a person at the terminal (issue 38; docs/delegation.md "Cost and
/// usage"): only what the hub reported, `(partial)` where a figure is a lower bound; None
/// when the record has no figure and no budget.
pub fn usage_line(t: &TaskRecord) -> Option<String> {
    let mut parts = Vec::new();
    if let Some(u) = &t.usage {
        let k = &u.tokens;
        let mut s = match k.total() {
            Some(n) => format!("{n} tokens"),
            None => "tokens".to_owned(),
        };
        let detail: Vec<String> = [("input", k.input_tokens), ("output", k.output_tokens)]
            .into_iter()
            .filter_map(|(n, v)| v.map(|v| format!("{n} {v}")))
            .collect();
        if !detail.is_empty() {
            s.push_str(&format!(" ({})", detail.join(", ")));
        }
        if u.partial {
            s.push_str(" (partial)");
        }
        parts.push(s);
    }
    if let Some(c) = &t.cost {
        let mut s = format!("cost {} {}", c.amount.0, for_terminal(&c.currency));
        if c.partial {
            s.push_str(" (partial)");
        }
        parts.push(s);
    }
    if let Some(c) = &t.context {
        let n = |v: Option<u64>| v.map_or_else(|| "?".to_owned(), |v| v.to_string());
        parts.push(format!("context {}/{}", n(c.used), n(c.size)));
    }
    let mut line = if parts.is_empty() {
        "usage: none reported".to_owned()
    } else {
        format!("usage: {}", parts.join(", "))
    };
    if let Some(b) = &t.budget {
        let mut limits = Vec::new();
        if let Some(c) = b.max_cost_usd {
            limits.push(format!("maxCostUsd {}", c.0));
        }
        if let Some(n) = b.max_tokens {
            limits.push(format!("maxTokens {n}"));
        }
        line.push_str(&format!("; budget {}", limits.join(", ")));
        if let Some(p) = &b.passed {
            line.push_str(&format!(" (passed on {})", for_terminal(p)));
        }
        if !b.kept {
            line.push_str(" (not kept: the agent does not report it)");
        }
    } else if parts.is_empty() {
        return None;
    }
    Some(line)
}

/// `42s`, `7m`, `3h`, `2d` for a count of seconds (0 and below: `0s`).
fn short_secs(secs: i64) -> String {
    match secs.max(0) {
        s if s < 60 => format!("{s}s"),
        s if s < 3600 => format!("{}m", s / 60),
        s if s < 86_400 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86_400),
    }
}

/// `42s`, `7m`, `3h`, `2d`; `-` for a time that does not parse, `0s` for one in the future
/// (clocks differ).
fn age(created: &str, now: chrono::DateTime<chrono::Utc>) -> String {
    let Ok(t) = chrono::DateTime::parse_from_rfc3339(created) else {
        return "-".to_owned();
    };
    short_secs((now - t.with_timezone(&chrono::Utc)).num_seconds())
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
    fn allow_arguments_become_rules_or_are_refused_before_sending() {
        let r = parse_allow("read,search").unwrap();
        assert_eq!(
            (r.kinds, r.under),
            (vec!["read".to_owned(), "search".into()], None)
        );
        let r = parse_allow("edit:src/").unwrap();
        assert_eq!(
            (r.kinds, r.under.as_deref()),
            (vec!["edit".to_owned()], Some("src/"))
        );
        // The path keeps every `:` after the first.
        let r = parse_allow("edit, delete:a:b").unwrap();
        assert_eq!((r.kinds.len(), r.under.as_deref()), (2, Some("a:b")));
        for (spec, why) in [
            ("", "kinds must name at least one tool kind"),
            (":src", "kinds must name at least one tool kind"),
            ("red", "kinds must be among read, edit, delete, move, search, execute, think, fetch, switch_mode, other"),
            ("read,read", "kinds names a kind twice"),
            ("edit:/etc", "under must be a path relative to the task's cwd"),
            ("edit:../x", "under must not leave the task's cwd"),
            ("edit:", "under must not be empty (leave it out for anywhere)"),
        ] {
            let e = parse_allow(spec).unwrap_err().to_string();
            assert_eq!(
                e,
                format!("--allow {spec}: {why} (the form is KIND[,KIND…][:PATH], PATH relative to --cwd)")
            );
        }
        // The argument is the user's own, but it is shown on their terminal: sanitised.
        let e = parse_allow("edit:a\u{1b}]0;x\u{7}")
            .unwrap_err()
            .to_string();
        assert!(!e.contains('\u{1b}') && e.contains("control"), "{e}");
        assert_eq!(parse_allows(&[]).unwrap(), None);
        let nine: Vec<String> = vec!["read".into(); 9];
        assert_eq!(
            parse_allows(&nine).unwrap_err().to_string(),
            "--allow is given 9 times; a task takes at most 8 rules"
        );
        assert_eq!(parse_allows(&nine[..8]).unwrap().unwrap().len(), 8);
    }

    fn request() -> RequestView {
        RequestView {
            request: Some("req-0123456789abcdef".into()),
            kind: Some("permission".into()),
            title: Some("Run cargo test".into()),
            tool_kind: Some("execute".into()),
            options: vec!["allow".into(), "reject".into()],
            opened_at: Some("2026-12-01T11:59:00.000Z".into()),
            expires_at: Some("2026-12-01T12:09:00.000Z".into()),
            waiting_ms: Some(64_500),
        }
    }

    #[test]
    fn an_open_request_shows_its_id_type_title_kind_options_wait_and_expiry() {
        let now = chrono::DateTime::parse_from_rfc3339("2026-12-01T12:00:00.000Z")
            .unwrap()
            .with_timezone(&chrono::Utc);
        let [a, b] = request_lines(&request(), now);
        assert_eq!(
            a,
            "request req-0123456789abcdef: permission (execute) \"Run cargo test\""
        );
        assert_eq!(b, "options allow, reject; waiting 1m; expires in 9m");
        // Past its expiry on this clock, or with nothing known: said so, never a panic.
        let mut late = request();
        late.expires_at = Some("2026-12-01T11:00:00Z".into());
        assert!(request_lines(&late, now)[1].ends_with("expires now"));
        let [a, b] = request_lines(&RequestView::default(), now);
        assert_eq!(a, "request -: request");
        assert_eq!(b, "options -; waiting -; expiry unknown");
        // A hostile title cannot drive the terminal.
        let mut evil = request();
        evil.title = Some("x\u{1b}]52;c;ZXZpbA==\u{7}\u{202e}y".into());
        let [a, _] = request_lines(&evil, now);
        assert!(
            !a.chars().any(agent_hub_proto::kernel::text::is_unsafe),
            "{a:?}"
        );
        let block = render_open_requests("task-1", &[request()], now);
        assert_eq!(
            block,
            "task-1 waits for an answer to 1 request:\n  request req-0123456789abcdef: permission (execute) \"Run cargo test\"\n    options allow, reject; waiting 1m; expires in 9m\n  answer: agent-hub task answer --id task-1 --request req-0123456789abcdef --option OPTION (its delegator, or a name in the hub's tasks.approvers)\n"
        );
        assert!(!block.contains("a question:"), "{block}");
        let mut q = request();
        q.kind = Some("question".into());
        let asked = render_open_requests("task-1", &[q], now);
        assert!(
            asked.ends_with("  a question: --option accept --message '{...}' with the form's content as a JSON object matching the schema of its task_request envelope; or decline, cancel\n"),
            "{asked}"
        );
        let two = render_open_requests("task-1", &[request(), request()], now);
        assert!(two.starts_with("task-1 waits for an answer to 2 requests:"));
        assert!(two.contains("--request REQ --option OPTION"));
    }

    #[test]
    fn the_table_lists_each_tasks_open_requests_under_it_and_how_to_answer() {
        let now = chrono::DateTime::parse_from_rfc3339("2026-12-01T12:00:00.000Z")
            .unwrap()
            .with_timezone(&chrono::Utc);
        let waiting = TaskRecord {
            task: "task-a".into(),
            agent: Some("claude".into()),
            state: Some("running".into()),
            created_at: Some("2026-12-01T11:58:00Z".into()),
            requests: vec![request()],
            ..TaskRecord::default()
        };
        let quiet = TaskRecord {
            task: "task-b".into(),
            state: Some("running".into()),
            ..TaskRecord::default()
        };
        let text = render_tasks(&[waiting, quiet.clone()], now);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 6, "{text}");
        assert!(lines[1].starts_with("task-a "));
        assert_eq!(
            lines[2],
            "  request req-0123456789abcdef: permission (execute) \"Run cargo test\""
        );
        assert_eq!(
            lines[3],
            "    options allow, reject; waiting 1m; expires in 9m"
        );
        assert!(lines[4].starts_with("task-b "));
        assert_eq!(
            lines[5],
            "answer one: agent-hub task answer --id TASK --request REQ --option OPTION (its delegator, or a name in the hub's tasks.approvers)"
        );
        assert_eq!(
            render_tasks(&[quiet], now).lines().count(),
            2,
            "no requests, no footer"
        );
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
