//! Terminal mode (docs/delivery.md "Terminal: `agent-hub nudge`"): a short notice typed into a tmux
//! pane with `tmux send-keys`. The least safe delivery mode, because it types into a live prompt
//! where a person may be typing too; it is opt-in and carries a notice, never a message body.
//!
//! Owns checking the pane target and name against closed character sets, neutralising the
//! text (control characters stripped, a leading prompt-trigger character such as `/` made
//! inert), and building tmux's argv. Pure: `run.rs` spawns tmux, never through a shell.

use std::fmt;

/// Characters kept of a notice at most: one line, short enough to read at a glance.
pub const MAX_NOTICE_CHARS: usize = 300;
/// What a notice starts with when its own first character could trigger something.
pub const NEUTRAL_PREFIX: &str = "agent-hub: ";

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TerminalError {
    /// The pane target is outside the allowed character set or length.
    BadPane(String),
    /// The agent name is outside the allowed character set or length.
    BadName(String),
    /// Nothing is left of the text after neutralising it.
    EmptyText,
}

impl fmt::Display for TerminalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TerminalError::BadPane(p) => write!(
                f,
                "--pane {p:?} is not a tmux target this command accepts: use 1-128 characters of \
                 A-Z a-z 0-9 _ - . : % @ $ =, not starting with -, such as work:1.0 or %3"
            ),
            TerminalError::BadName(n) => write!(
                f,
                "--as {n:?} cannot be typed into a terminal: use 1-64 characters of A-Z a-z 0-9 _ - . @"
            ),
            TerminalError::EmptyText => f.write_str("the notice is empty after removing control characters"),
        }
    }
}

impl std::error::Error for TerminalError {}

/// A tmux target (`session:window.pane`, `%pane-id`, `@window-id`, `$session-id`, `=exact`)
/// from a closed set, so nothing else can reach tmux's argv.
pub fn check_pane_target(target: &str) -> Result<&str, TerminalError> {
    let ok = !target.is_empty()
        && target.len() <= 128
        && !target.starts_with('-')
        && target
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-.:%@$=".contains(c));
    if ok {
        Ok(target)
    } else {
        Err(TerminalError::BadPane(target.to_owned()))
    }
}

/// An agent name that may appear in a typed notice.
pub fn check_name(name: &str) -> Result<&str, TerminalError> {
    // The agent name characters (`names::agent_name_char`), so a notice can name any
    // roster agent and nothing a terminal would read as a command.
    let ok = !name.is_empty()
        && name.len() <= agent_hub_proto::kernel::names::AGENT_NAME_MAX_CHARS
        && name
            .chars()
            .all(agent_hub_proto::kernel::names::agent_name_char);
    if ok {
        Ok(name)
    } else {
        Err(TerminalError::BadName(name.to_owned()))
    }
}

/// Makes `text` safe to type: control characters (C0, DEL, C1 — newline and escape
/// included, so it can neither submit nor send a key sequence) and bidirectional or
/// invisible formatting characters are dropped, tabs and newlines become spaces, runs of
/// spaces shrink to one, it is cut to `MAX_NOTICE_CHARS`, and if it does not start with a
/// letter or digit it gets `NEUTRAL_PREFIX`, so a leading `/` (slash command), `!` (shell
/// mode), `@` (file mention), `#`, `?` or `-` means nothing to the agent's prompt.
pub fn neutralise(text: &str) -> Result<String, TerminalError> {
    let mut out = String::with_capacity(text.len().min(MAX_NOTICE_CHARS * 4));
    let mut last_space = true; // also trims leading whitespace
    for c in text.chars() {
        let c = if matches!(c, '\n' | '\r' | '\t') {
            ' '
        } else {
            c
        };
        if c.is_control() || is_invisible_format(c) {
            continue;
        }
        if c.is_whitespace() {
            if last_space {
                continue;
            }
            last_space = true;
            out.push(' ');
        } else {
            last_space = false;
            out.push(c);
        }
    }
    let trimmed = out.trim_end();
    if trimmed.is_empty() {
        return Err(TerminalError::EmptyText);
    }
    let starts_plain = trimmed
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphanumeric());
    let full = if starts_plain {
        trimmed.to_owned()
    } else {
        format!("{NEUTRAL_PREFIX}{trimmed}")
    };
    Ok(full
        .chars()
        .take(MAX_NOTICE_CHARS)
        .collect::<String>()
        .trim_end()
        .to_owned())
}

/// Bidirectional overrides and isolates, zero-width characters and the BOM: they can make the
/// typed text read differently from what it is.
fn is_invisible_format(c: char) -> bool {
    matches!(c,
        '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2060}'..='\u{2064}'
        | '\u{2066}'..='\u{2069}' | '\u{FEFF}' | '\u{061C}')
}

/// The default notice: who has mail and the command that reads it.
pub fn default_notice(name: &str, drain_hint: Option<(&str, u16)>) -> String {
    match drain_hint {
        Some((token_file, port)) => format!(
            "agent-hub: new mail for {name}. Read it with: agent-hub drain --as {name} --token-file {token_file} --port {port}"
        ),
        None => format!("agent-hub: new mail for {name}. Read it with your agent-hub tools."),
    }
}

/// tmux invocations, each an argv without the program name: type `text` literally (`-l`,
/// after `--` so it can never be read as an option), then, only when asked, press Enter.
pub fn tmux_argv(pane: &str, text: &str, submit: bool) -> Vec<Vec<String>> {
    let mut calls = vec![vec![
        "send-keys".to_owned(),
        "-t".to_owned(),
        pane.to_owned(),
        "-l".to_owned(),
        "--".to_owned(),
        text.to_owned(),
    ]];
    if submit {
        calls.push(vec![
            "send-keys".to_owned(),
            "-t".to_owned(),
            pane.to_owned(),
            "Enter".to_owned(),
        ]);
    }
    calls
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pane_targets() {
        for ok in ["work:1.0", "%3", "@2", "$1", "=main:0", "a_b-c.d"] {
            assert_eq!(check_pane_target(ok), Ok(ok));
        }
        for bad in [
            "",
            "-t",
            "a b",
            "a;b",
            "x\n",
            "{last}",
            "a'b",
            &"x".repeat(129),
        ] {
            assert!(check_pane_target(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn names() {
        assert!(check_name("codex-1").is_ok());
        assert!(check_name("me@host").is_ok());
        for bad in ["", "a b", "a/b", "é", "x\u{1b}"] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn leading_slash_is_neutralised() {
        assert_eq!(neutralise("/clear").unwrap(), "agent-hub: /clear");
        assert_eq!(neutralise("   /clear").unwrap(), "agent-hub: /clear");
        assert_eq!(neutralise("\n/compact").unwrap(), "agent-hub: /compact");
        for trigger in ["!rm -rf x", "@file", "#remember", "?", "-x", "\u{202E}/x"] {
            assert!(
                neutralise(trigger).unwrap().starts_with(NEUTRAL_PREFIX),
                "{trigger:?}"
            );
        }
        assert_eq!(neutralise("mail for beta").unwrap(), "mail for beta");
    }

    #[test]
    fn control_characters_are_stripped() {
        let t = neutralise("a\u{1b}[31mred\u{7}\u{7f}\u{9b}x\r\nnext\tline\0").unwrap();
        assert_eq!(t, "a[31mredx next line");
        assert!(!t.chars().any(|c| c.is_control()));
        assert_eq!(neutralise("a\u{202E}b\u{200B}c").unwrap(), "abc");
    }

    #[test]
    fn newlines_cannot_submit_and_spaces_collapse() {
        let t = neutralise("one\n\n\ntwo   three\n").unwrap();
        assert_eq!(t, "one two three");
    }

    #[test]
    fn empty_after_stripping_is_refused() {
        assert_eq!(neutralise("\u{1b}\n\t "), Err(TerminalError::EmptyText));
    }

    #[test]
    fn long_text_is_cut() {
        let t = neutralise(&"x".repeat(1000)).unwrap();
        assert_eq!(t.chars().count(), MAX_NOTICE_CHARS);
    }

    #[test]
    fn default_notice_is_already_neutral() {
        let n = default_notice("beta", Some(("/home/u/.hub/beta.token", 46110)));
        assert_eq!(neutralise(&n).unwrap(), n);
        assert!(n.contains(
            "agent-hub drain --as beta --token-file /home/u/.hub/beta.token --port 46110"
        ));
        let n = default_notice("beta", None);
        assert_eq!(neutralise(&n).unwrap(), n);
    }

    #[test]
    fn argv_types_literally_and_submits_only_when_asked() {
        let calls = tmux_argv("work:1.0", "agent-hub: hi", false);
        assert_eq!(
            calls,
            vec![vec![
                "send-keys",
                "-t",
                "work:1.0",
                "-l",
                "--",
                "agent-hub: hi"
            ]]
        );
        let calls = tmux_argv("%3", "x", true);
        assert_eq!(calls.len(), 2);
        assert_eq!(calls[1], vec!["send-keys", "-t", "%3", "Enter"]);
    }
}
