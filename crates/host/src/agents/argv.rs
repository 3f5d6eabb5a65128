//! The closed character sets every manifest string passes before it can reach an argv, a path
//! or a hook command line (docs/agents.md "Manifests", the closed character sets).
//!
//! Owns the checks, the `{prompt}` substitution and the quoting of words written into a hook
//! command string. Refuses any other substitution in a run template: `{prompt}` is its only
//! placeholder, it must be a whole argv element, and the prompt travels as exactly one
//! element, never through a shell. `run.headless_mcp` (issue 37 design §6) is the one other
//! template, with its own two placeholders, `{mcp_config}` and `{server}`, which the hub fills
//! with values it made itself (the task's MCP config file, the task-unique server name) and
//! which may sit inside an element (`mcp__{server}__permission_prompt`). Pure: no IO.

use std::fmt;

/// Characters allowed in an argv element from a manifest, for messages.
pub const ARG_CHARSET: &str = "A-Z a-z 0-9 . _ / : = @ + , -";
/// Characters allowed in a binary name, for messages.
pub const NAME_CHARSET: &str = "A-Z a-z 0-9 . _ + -";
/// Characters allowed in a manifest path after its `~/` or `/`, for messages.
pub const PATH_CHARSET: &str = "A-Z a-z 0-9 . _ / @ + -";
/// The one placeholder an argv template may hold, as a whole element.
pub const PROMPT_PLACEHOLDER: &str = "{prompt}";
/// `run.headless_mcp`'s placeholder for the path of the task's MCP config file (exactly once).
pub const MCP_CONFIG_PLACEHOLDER: &str = "{mcp_config}";
/// `run.headless_mcp`'s placeholder for the hub's task-unique MCP server name.
pub const SERVER_PLACEHOLDER: &str = "{server}";

/// Longest argv element, path or name a manifest may hold, in bytes.
pub const MAX_ARG_BYTES: usize = 256;
/// Longest path a manifest may hold, in bytes.
pub const MAX_PATH_BYTES: usize = 512;
/// Longest binary name, in bytes.
pub const MAX_NAME_BYTES: usize = 64;

/// Why a string may not be used. Each message says what is allowed instead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArgvError {
    Empty,
    TooLong {
        max_bytes: usize,
    },
    /// A character outside the closed set; `allowed` is one of the `*_CHARSET` constants.
    BadChar {
        ch: char,
        allowed: &'static str,
    },
    /// A name or program that starts with `-` (an option) or `.` (hidden, `..`).
    BadStart(char),
    /// A path that is neither `~/…` nor absolute.
    NotAnchored,
    /// A path with a `..` component.
    DotDot,
    /// `{prompt}` where none may be, or more than once.
    UnexpectedPlaceholder,
    /// `{prompt}` glued to other text, e.g. `--prompt={prompt}`.
    PlaceholderNotWhole,
    /// A headless template without `{prompt}`.
    MissingPlaceholder,
    /// A prompt holding a NUL byte, which no argv can carry.
    NulInPrompt,
    /// A prompt longer than one argv element may be (`MAX_ARG_STRLEN`).
    PromptTooLong {
        bytes: usize,
    },
    /// A prompt beginning with `-` for a template without `--` before `{prompt}`.
    PromptLooksLikeOption,
    /// A `run.headless_mcp` template whose `{mcp_config}` is missing or given twice.
    McpConfigCount,
}

impl fmt::Display for ArgvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ArgvError::Empty => f.write_str("is empty"),
            ArgvError::TooLong { max_bytes } => write!(f, "is longer than {max_bytes} bytes"),
            ArgvError::BadChar { ch, allowed } => {
                write!(
                    f,
                    "holds {ch:?}, outside the allowed characters [{allowed}]"
                )
            }
            ArgvError::BadStart(c) => write!(f, "must not start with {c:?}"),
            ArgvError::NotAnchored => {
                f.write_str("must start with \"~/\" (the home directory) or \"/\"")
            }
            ArgvError::DotDot => f.write_str("must not have a \"..\" component"),
            ArgvError::UnexpectedPlaceholder => {
                write!(f, "may not hold {PROMPT_PLACEHOLDER} here")
            }
            ArgvError::PlaceholderNotWhole => write!(
                f,
                "holds {PROMPT_PLACEHOLDER} inside other text; it must be a whole element"
            ),
            ArgvError::MissingPlaceholder => {
                write!(f, "needs exactly one element that is {PROMPT_PLACEHOLDER}")
            }
            ArgvError::NulInPrompt => f.write_str("the prompt holds a NUL byte"),
            ArgvError::PromptTooLong { bytes } => write!(
                f,
                "the prompt is {bytes} bytes; the agent takes it on its command line (run.headless), where one argument holds at most {} bytes (MAX_ARG_STRLEN)",
                MAX_ARG_STRLEN - 1
            ),
            ArgvError::PromptLooksLikeOption => f.write_str(
                "the prompt begins with '-' and the agent takes it on its command line (run.headless) with no \"--\" before it, where its option parser would read it as an option; begin the prompt with another character",
            ),
            ArgvError::McpConfigCount => write!(
                f,
                "needs {MCP_CONFIG_PLACEHOLDER} exactly once (where the path of the task's MCP config file goes)"
            ),
        }
    }
}

impl std::error::Error for ArgvError {}

fn arg_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '/' | ':' | '=' | '@' | '+' | ',' | '-')
}

fn name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '+' | '-')
}

fn path_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '/' | '@' | '+' | '-')
}

fn check_chars(
    s: &str,
    max_bytes: usize,
    ok: fn(char) -> bool,
    allowed: &'static str,
) -> Result<(), ArgvError> {
    if s.is_empty() {
        return Err(ArgvError::Empty);
    }
    if s.len() > max_bytes {
        return Err(ArgvError::TooLong { max_bytes });
    }
    match s.chars().find(|&c| !ok(c)) {
        Some(ch) => Err(ArgvError::BadChar { ch, allowed }),
        None => Ok(()),
    }
}

/// One argv element (not the program): `[A-Za-z0-9._/:=@+,-]`, 1–256 bytes. No quoting,
/// whitespace, `$`, `~`, globs or braces, so it means the same with or without a shell.
pub fn check_arg(s: &str) -> Result<(), ArgvError> {
    if s.contains(PROMPT_PLACEHOLDER) {
        return Err(if s == PROMPT_PLACEHOLDER {
            ArgvError::UnexpectedPlaceholder
        } else {
            ArgvError::PlaceholderNotWhole
        });
    }
    check_chars(s, MAX_ARG_BYTES, arg_char, ARG_CHARSET)
}

/// A binary name looked up on PATH and matched against process names: `[A-Za-z0-9._+-]`,
/// 1–64 bytes, not starting with `-` or `.`.
pub fn check_binary_name(s: &str) -> Result<(), ArgvError> {
    check_chars(s, MAX_NAME_BYTES, name_char, NAME_CHARSET)?;
    match s.chars().next() {
        Some(c @ ('-' | '.')) => Err(ArgvError::BadStart(c)),
        _ => Ok(()),
    }
}

/// An argv's program: a binary name (looked up on PATH), or an absolute path under the
/// path rules.
pub fn check_program(s: &str) -> Result<(), ArgvError> {
    if s.starts_with('/') {
        check_path(s)
    } else {
        check_binary_name(s)
    }
}

/// A file path from a manifest: `~/…` (under `$HOME`) or absolute, then
/// `[A-Za-z0-9._/@+-]`, no `..` component, at most 512 bytes.
pub fn check_path(s: &str) -> Result<(), ArgvError> {
    check_anchored(s, path_char, PATH_CHARSET)
}

/// A glob from a manifest: a path that may also hold `*` and `?`. Globs are matched by the
/// hub itself and never reach an argv or a shell.
pub fn check_glob(s: &str) -> Result<(), ArgvError> {
    fn glob_char(c: char) -> bool {
        path_char(c) || matches!(c, '*' | '?')
    }
    check_anchored(s, glob_char, "A-Z a-z 0-9 . _ / @ + - * ?")
}

fn check_anchored(s: &str, ok: fn(char) -> bool, allowed: &'static str) -> Result<(), ArgvError> {
    if s.is_empty() {
        return Err(ArgvError::Empty);
    }
    let rest = if let Some(rest) = s.strip_prefix("~/") {
        rest
    } else if let Some(rest) = s.strip_prefix('/') {
        rest
    } else {
        return Err(ArgvError::NotAnchored);
    };
    if s.len() > MAX_PATH_BYTES {
        return Err(ArgvError::TooLong {
            max_bytes: MAX_PATH_BYTES,
        });
    }
    if let Some(ch) = rest.chars().find(|&c| !ok(c)) {
        return Err(ArgvError::BadChar { ch, allowed });
    }
    if rest.split('/').any(|part| part == "..") {
        return Err(ArgvError::DotDot);
    }
    Ok(())
}

/// Which kind of argv template is being checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Template {
    /// `run.acp`: the prompt goes over the protocol, so no `{prompt}`.
    Acp,
    /// `run.headless`: exactly one whole element is `{prompt}`.
    Headless,
    /// `run.headless` with `run.headless_prompt = "stdin"`: the prompt goes to the agent's
    /// stdin, so no `{prompt}`.
    HeadlessStdin,
}

/// Checks an argv template. An empty template is allowed (the mode is unavailable). On
/// failure returns the index of the offending element (`None`: the template as a whole).
pub fn check_template(argv: &[String], kind: Template) -> Result<(), (Option<usize>, ArgvError)> {
    let Some(program) = argv.first() else {
        return Ok(());
    };
    check_program(program).map_err(|e| {
        let e = if program.contains(PROMPT_PLACEHOLDER) {
            ArgvError::UnexpectedPlaceholder
        } else {
            e
        };
        (Some(0), e)
    })?;
    let mut prompts = 0;
    for (i, arg) in argv.iter().enumerate().skip(1) {
        if arg == PROMPT_PLACEHOLDER && kind == Template::Headless {
            prompts += 1;
            if prompts > 1 {
                return Err((Some(i), ArgvError::UnexpectedPlaceholder));
            }
            continue;
        }
        check_arg(arg).map_err(|e| (Some(i), e))?;
    }
    if kind == Template::Headless && prompts == 0 {
        return Err((None, ArgvError::MissingPlaceholder));
    }
    Ok(())
}

/// Longest argv element Linux accepts, terminating NUL included (`MAX_ARG_STRLEN`, 32 pages
/// of 4 KiB): a longer prompt would make `execve` fail with E2BIG.
pub const MAX_ARG_STRLEN: usize = 128 << 10;
/// The end-of-options marker: a template that has it before `{prompt}` may pass a prompt
/// that begins with `-`.
pub const END_OF_OPTIONS: &str = "--";

/// Builds the argv for one headless run: the template (already checked with
/// [`check_template`]) with its `{prompt}` element replaced by `prompt`, as one element.
///
/// A prompt is refused, never rewritten, when it could not be passed as it is: it holds a NUL
/// byte (no argv can carry one), it is longer than an argv element may be
/// ([`MAX_ARG_STRLEN`]), or it begins with `-` while the template has no `--` before
/// `{prompt}` — the agent's option parser would then read it as an option (a prompt
/// `--dangerously-skip-permissions` must never become that flag; docs/delegation.md
/// "Headless tasks").
pub fn render(template: &[String], prompt: &str) -> Result<Vec<String>, ArgvError> {
    check_template(template, Template::Headless).map_err(|(_, e)| e)?;
    if prompt.contains('\0') {
        return Err(ArgvError::NulInPrompt);
    }
    if prompt.len() >= MAX_ARG_STRLEN {
        return Err(ArgvError::PromptTooLong {
            bytes: prompt.len(),
        });
    }
    let at = template.iter().position(|a| a == PROMPT_PLACEHOLDER);
    let guarded = at.is_some_and(|i| template[..i].iter().any(|a| a == END_OF_OPTIONS));
    if prompt.starts_with('-') && !guarded {
        return Err(ArgvError::PromptLooksLikeOption);
    }
    Ok(template
        .iter()
        .map(|a| {
            if a == PROMPT_PLACEHOLDER {
                prompt.to_owned()
            } else {
                a.clone()
            }
        })
        .collect())
}

/// Checks a `run.headless_mcp` template: at least one element, each an argv element
/// (`check_arg`) once its `{mcp_config}` and `{server}` are taken out (so they may sit inside
/// an element, and no other brace, `{prompt}` included, may), and `{mcp_config}` exactly once
/// in all. On failure returns the offending element's index (`None`: the template as a whole).
pub fn check_mcp_template(argv: &[String]) -> Result<(), (Option<usize>, ArgvError)> {
    let mut configs = 0;
    for (i, arg) in argv.iter().enumerate() {
        configs += arg.matches(MCP_CONFIG_PLACEHOLDER).count();
        let plain = arg
            .replace(MCP_CONFIG_PLACEHOLDER, "x")
            .replace(SERVER_PLACEHOLDER, "x");
        check_arg(&plain).map_err(|e| (Some(i), e))?;
    }
    if configs != 1 {
        return Err((None, ArgvError::McpConfigCount));
    }
    Ok(())
}

/// A checked `run.headless_mcp` template with its placeholders filled in, left to right in
/// one pass (a value is never read again for a placeholder): `mcp_config` and `server` are the
/// hub's own (an absolute path, `agent-hub-` and hex digits), each one element's part.
pub fn render_mcp(template: &[String], mcp_config: &str, server: &str) -> Vec<String> {
    template
        .iter()
        .map(|arg| {
            let mut out = String::with_capacity(arg.len() + mcp_config.len());
            let mut rest = arg.as_str();
            loop {
                let next = [
                    (
                        rest.find(MCP_CONFIG_PLACEHOLDER),
                        MCP_CONFIG_PLACEHOLDER,
                        mcp_config,
                    ),
                    (rest.find(SERVER_PLACEHOLDER), SERVER_PLACEHOLDER, server),
                ]
                .into_iter()
                .filter_map(|(at, ph, value)| at.map(|at| (at, ph, value)))
                .min_by_key(|(at, _, _)| *at);
                let Some((at, ph, value)) = next else {
                    out.push_str(rest);
                    break;
                };
                out.push_str(&rest[..at]);
                out.push_str(value);
                rest = &rest[at + ph.len()..];
            }
            out
        })
        .collect()
}

/// Where a headless argv takes `run.headless_mcp`'s elements: before the end-of-options
/// marker or the `{prompt}` element, whichever comes first (after them an option would be
/// read as the prompt, or as a positional), else at the end. The template is the unrendered
/// one; rendering keeps every element's place.
pub fn mcp_position(template: &[String]) -> usize {
    template
        .iter()
        .enumerate()
        .skip(1)
        .find(|(_, a)| *a == END_OF_OPTIONS || *a == PROMPT_PLACEHOLDER)
        .map_or(template.len(), |(i, _)| i)
}

/// One word for a POSIX shell command line, as the hook commands that agents run through
/// `sh -c` need: left bare when every character is in the argv set, else single-quoted
/// (a `'` inside becomes `'\''`). Hook commands are where our words meet a shell that runs
/// them (the agent's, not the hub's); the commands the demo and `roster add` print for a
/// person to paste are quoted the same way.
pub fn shell_word(s: &str) -> String {
    if !s.is_empty() && s.chars().all(arg_char) {
        return s.to_owned();
    }
    let mut out = String::with_capacity(s.len() + 2);
    out.push('\'');
    for c in s.chars() {
        if c == '\'' {
            out.push_str("'\\''");
        } else {
            out.push(c);
        }
    }
    out.push('\'');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    /// `run.headless_mcp` (issue 37 design §6): the built-in claude's template passes and
    /// renders with both placeholders filled in one pass, also inside an element; a template
    /// without `{mcp_config}`, with it twice, with `{prompt}`, another brace or a character
    /// outside the set is refused, naming the element.
    #[test]
    fn mcp_templates_are_checked_and_rendered() {
        let claude = v(&[
            "--mcp-config",
            "{mcp_config}",
            "--permission-prompt-tool",
            "mcp__{server}__permission_prompt",
        ]);
        assert_eq!(check_mcp_template(&claude), Ok(()));
        assert_eq!(
            render_mcp(
                &claude,
                "/run/creds/task-1/mcp.json",
                "agent-hub-3f2a9c1b7d4e"
            ),
            v(&[
                "--mcp-config",
                "/run/creds/task-1/mcp.json",
                "--permission-prompt-tool",
                "mcp__agent-hub-3f2a9c1b7d4e__permission_prompt",
            ])
        );
        // A value holding a placeholder's text is not read again.
        assert_eq!(
            render_mcp(&v(&["--c={mcp_config},{server}"]), "/p/{server}", "s"),
            v(&["--c=/p/{server},s"])
        );
        let cases: [(&[&str], Option<usize>, ArgvError); 6] = [
            (&["--mcp-config"], None, ArgvError::McpConfigCount),
            (
                &["{mcp_config}", "--again={mcp_config}"],
                None,
                ArgvError::McpConfigCount,
            ),
            (
                &["{mcp_config}", "{prompt}"],
                Some(1),
                ArgvError::UnexpectedPlaceholder,
            ),
            (
                &["{mcp_config}", "{serverx}"],
                Some(1),
                ArgvError::BadChar {
                    ch: '{',
                    allowed: ARG_CHARSET,
                },
            ),
            (
                &["{mcp_config}", "a b"],
                Some(1),
                ArgvError::BadChar {
                    ch: ' ',
                    allowed: ARG_CHARSET,
                },
            ),
            (&["{mcp_config}", ""], Some(1), ArgvError::Empty),
        ];
        for (t, i, e) in cases {
            assert_eq!(check_mcp_template(&v(t)), Err((i, e)), "{t:?}");
        }
        assert_eq!(
            check_mcp_template(&[]),
            Err((None, ArgvError::McpConfigCount))
        );
    }

    /// The elements go before `--` or `{prompt}`, whichever comes first, else at the end.
    #[test]
    fn mcp_elements_go_before_the_prompt() {
        assert_eq!(
            mcp_position(&v(&["claude", "-p", "--output-format", "json"])),
            4
        );
        assert_eq!(mcp_position(&v(&["claude", "-p", "{prompt}"])), 2);
        assert_eq!(mcp_position(&v(&["codex", "exec", "--", "{prompt}"])), 2);
        assert_eq!(mcp_position(&v(&["x"])), 1);
    }

    #[test]
    fn args_in_the_closed_set_pass() {
        for ok in [
            "exec",
            "--output-format",
            "json",
            "-p",
            "--flag=value",
            "a,b",
            "x@y:1",
            "/usr/bin/x",
        ] {
            assert_eq!(check_arg(ok), Ok(()), "{ok}");
        }
    }

    #[test]
    fn shell_metacharacters_are_refused() {
        for (bad, ch) in [
            ("a b", ' '),
            ("a;b", ';'),
            ("$(id)", '$'),
            ("`id`", '`'),
            ("a|b", '|'),
            ("a&b", '&'),
            ("a>b", '>'),
            ("'x'", '\''),
            ("\"x\"", '"'),
            ("a\\b", '\\'),
            ("~/x", '~'),
            ("*.rs", '*'),
            ("a\nb", '\n'),
            ("a\0b", '\0'),
            ("é", 'é'),
        ] {
            assert_eq!(
                check_arg(bad),
                Err(ArgvError::BadChar {
                    ch,
                    allowed: ARG_CHARSET
                }),
                "{bad:?}"
            );
        }
        assert_eq!(check_arg(""), Err(ArgvError::Empty));
        assert_eq!(
            check_arg(&"a".repeat(257)),
            Err(ArgvError::TooLong { max_bytes: 256 })
        );
    }

    #[test]
    fn binary_names() {
        assert_eq!(check_binary_name("claude"), Ok(()));
        assert_eq!(check_binary_name("codex-acp"), Ok(()));
        assert_eq!(check_binary_name("python3.11"), Ok(()));
        assert_eq!(check_binary_name("-rf"), Err(ArgvError::BadStart('-')));
        assert_eq!(check_binary_name(".."), Err(ArgvError::BadStart('.')));
        assert!(matches!(
            check_binary_name("bin/claude"),
            Err(ArgvError::BadChar { ch: '/', .. })
        ));
        assert!(matches!(
            check_binary_name("claude;id"),
            Err(ArgvError::BadChar { ch: ';', .. })
        ));
    }

    #[test]
    fn programs_are_names_or_absolute_paths() {
        assert_eq!(check_program("gemini"), Ok(()));
        assert_eq!(check_program("/opt/codex/bin/codex-acp"), Ok(()));
        assert_eq!(check_program("/opt/../bin/sh"), Err(ArgvError::DotDot));
        assert!(check_program("./codex").is_err());
        assert!(check_program("~/bin/codex").is_err());
    }

    #[test]
    fn paths() {
        assert_eq!(check_path("~/.claude.json"), Ok(()));
        assert_eq!(check_path("~/.config/opencode/opencode.json"), Ok(()));
        assert_eq!(check_path("/etc/agent-hub/x.toml"), Ok(()));
        assert_eq!(
            check_path(".codex/config.toml"),
            Err(ArgvError::NotAnchored)
        );
        assert_eq!(check_path("~user/x"), Err(ArgvError::NotAnchored));
        assert_eq!(check_path("~/../etc/passwd"), Err(ArgvError::DotDot));
        assert_eq!(check_path("~/a/../../b"), Err(ArgvError::DotDot));
        assert_eq!(check_path("~/a/..b"), Ok(()));
        assert!(matches!(
            check_path("~/My Documents/x"),
            Err(ArgvError::BadChar { ch: ' ', .. })
        ));
        assert!(matches!(
            check_path("~/$HOME/x"),
            Err(ArgvError::BadChar { ch: '$', .. })
        ));
        assert_eq!(check_path(""), Err(ArgvError::Empty));
        assert_eq!(
            check_glob("~/.codex/sessions/*/*/*/rollout-*.jsonl"),
            Ok(())
        );
        assert!(check_path("~/.codex/*.jsonl").is_err());
    }

    #[test]
    fn templates() {
        assert_eq!(check_template(&[], Template::Acp), Ok(()));
        assert_eq!(
            check_template(&v(&["gemini", "--acp"]), Template::Acp),
            Ok(())
        );
        assert_eq!(
            check_template(
                &v(&["claude", "-p", "{prompt}", "--output-format", "json"]),
                Template::Headless
            ),
            Ok(())
        );
        assert_eq!(
            check_template(&v(&["opencode", "acp", "{prompt}"]), Template::Acp),
            Err((Some(2), ArgvError::UnexpectedPlaceholder))
        );
        assert_eq!(
            check_template(&v(&["claude", "-p"]), Template::Headless),
            Err((None, ArgvError::MissingPlaceholder))
        );
        assert_eq!(
            check_template(&v(&["claude", "{prompt}", "{prompt}"]), Template::Headless),
            Err((Some(2), ArgvError::UnexpectedPlaceholder))
        );
        assert_eq!(
            check_template(&v(&["claude", "--prompt={prompt}"]), Template::Headless),
            Err((Some(1), ArgvError::PlaceholderNotWhole))
        );
        assert_eq!(
            check_template(&v(&["{prompt}"]), Template::Headless),
            Err((Some(0), ArgvError::UnexpectedPlaceholder))
        );
        assert!(matches!(
            check_template(&v(&["sh", "-c", "claude $X"]), Template::Acp),
            Err((Some(2), ArgvError::BadChar { ch: ' ', .. }))
        ));
    }

    #[test]
    fn the_prompt_is_one_element_whatever_it_holds() {
        let t = v(&["claude", "-p", "{prompt}", "--output-format", "json"]);
        let prompt = "fix it; rm -rf ~ && echo $(id) `x` \"q\" 'r'\n{prompt}";
        let argv = render(&t, prompt).unwrap();
        assert_eq!(argv.len(), 5);
        assert_eq!(argv[2], prompt);
        assert_eq!(argv[4], "json");
    }

    #[test]
    fn a_prompt_that_looks_like_a_flag_is_refused_unless_after_the_end_of_options() {
        let t = v(&["claude", "-p", "{prompt}"]);
        for attack in [
            "--dangerously-skip-permissions",
            "-",
            "-p",
            "--output-format=text",
        ] {
            assert_eq!(
                render(&t, attack),
                Err(ArgvError::PromptLooksLikeOption),
                "{attack}"
            );
        }
        // Not at the start: an ordinary prompt.
        assert_eq!(render(&t, "fix --this").unwrap()[2], "fix --this");
        // `--` after the prompt does not guard it; `--` before it does.
        assert!(render(&v(&["x", "{prompt}", "--"]), "-rf").is_err());
        let guarded = v(&["codex", "exec", "--json", "--", "{prompt}"]);
        let argv = render(&guarded, "--dangerously-bypass-approvals-and-sandbox").unwrap();
        assert_eq!(argv[4], "--dangerously-bypass-approvals-and-sandbox");
        assert_eq!(render(&t, "a\0b"), Err(ArgvError::NulInPrompt));
        assert!(render(&v(&["claude", "-p"]), "x").is_err());
    }

    #[test]
    fn a_prompt_past_the_argv_element_limit_is_refused_exactly() {
        let t = v(&["claude", "-p", "{prompt}"]);
        let fits = "a".repeat(MAX_ARG_STRLEN - 1);
        assert_eq!(render(&t, &fits).unwrap()[2].len(), MAX_ARG_STRLEN - 1);
        let over = "a".repeat(MAX_ARG_STRLEN);
        assert_eq!(
            render(&t, &over),
            Err(ArgvError::PromptTooLong {
                bytes: MAX_ARG_STRLEN
            })
        );
    }

    #[test]
    fn shell_words() {
        assert_eq!(
            shell_word("/usr/local/bin/agent-hub"),
            "/usr/local/bin/agent-hub"
        );
        assert_eq!(
            shell_word("/Users/J Doe/bin/agent-hub"),
            "'/Users/J Doe/bin/agent-hub'"
        );
        assert_eq!(shell_word("it's"), "'it'\\''s'");
        assert_eq!(shell_word("$(id)"), "'$(id)'");
        assert_eq!(shell_word(""), "''");
    }
}
