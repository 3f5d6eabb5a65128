//! Line edits to a roster file (SPEC §6.1) for `agent-hub-server roster add|remove|rotate`
//! (docs/operations.md, "Changing the roster"): one `name = "token"` line added, removed or
//! given a new token, every other byte (the operator's comments, blank lines, order, quoting)
//! left as it was.
//!
//! Owns the scan of the `[agents]` table into entry lines and the self-check of every edit:
//! the edited text is parsed again and must hold exactly the old entries with that one
//! change, or the edit is refused and nothing is written. A roster written some way this
//! scanner does not take apart line by line (an inline table, dotted keys, a multi-line
//! string) is refused with a message, never guessed at. Also owns the rule for names the
//! commands accept, which is stricter than the roster's own: a name also names its token
//! file. Refuses IO; no error text ever holds a token.

use agent_hub_proto::roster::Roster;
use std::collections::BTreeMap;
use std::fmt;

/// Longest name `roster add` accepts.
pub use agent_hub_proto::kernel::names::AGENT_NAME_MAX_CHARS as MAX_NAME_CHARS;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RosterEditError {
    /// The text is not a roster (TOML error, or keys outside `[agents]`).
    Parse(String),
    /// The roster is valid but not written as `[agents]` lines this editor can take apart.
    NotEditable(String),
    /// The name is not one `roster add` accepts.
    BadName(String),
    Exists(String),
    Missing(String),
    /// Removing the last agent would leave a roster the hub refuses (SPEC §6.1).
    LastAgent(String),
    /// The edited roster would not load (SPEC §6.1), or did not come out as intended.
    Verify(String),
}

impl fmt::Display for RosterEditError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RosterEditError::Parse(m) => write!(f, "the roster cannot be read: {m}"),
            RosterEditError::NotEditable(m) => write!(f, "{m}; please edit the roster by hand"),
            RosterEditError::BadName(m) => write!(f, "{m}"),
            RosterEditError::Exists(n) => write!(f, "{n:?} is already on the roster"),
            RosterEditError::Missing(n) => write!(f, "{n:?} is not on the roster"),
            RosterEditError::LastAgent(n) => write!(
                f,
                "{n:?} is the roster's only agent; a hub with an empty roster refuses to start (add another agent first)"
            ),
            RosterEditError::Verify(m) => {
                write!(f, "the edit did not come out as intended ({m}); nothing was written")
            }
        }
    }
}

impl std::error::Error for RosterEditError {}

type Result<T> = std::result::Result<T, RosterEditError>;

/// A name `roster add` accepts: 1–64 characters of `A-Z a-z 0-9 . _ @ -`, not starting with
/// `.` or `-` (it names `tokens/<name>.token` and is typed after `--as`), and none the
/// roster reserves (`hub` in any case, `task-…`, SPEC §3.4, docs/delegation.md).
pub fn check_name(name: &str) -> Result<()> {
    use agent_hub_proto::kernel::names::AgentNameProblem;
    let why = match agent_hub_proto::kernel::names::agent_name_problem(name) {
        None => return Ok(()),
        Some(AgentNameProblem::Shape) => format!(
            "agent name {name:?} must be 1-{MAX_NAME_CHARS} characters of A-Z a-z 0-9 . _ @ - and not start with . or -"
        ),
        Some(AgentNameProblem::Hub) => format!(
            "agent name {name:?} is reserved: the hub signs its own envelopes as \"hub\""
        ),
        Some(AgentNameProblem::Task) => format!(
            "agent name {name:?} is reserved: names starting with \"task-\" are the hub's task identities"
        ),
    };
    Err(RosterEditError::BadName(why))
}

/// The roster's entries, name to token. Empty text, or an `[agents]` table with no entries,
/// is an empty map (a roster being started with `roster add`); anything else outside
/// `[agents] name = "token"` is refused.
pub fn entries(text: &str) -> Result<BTreeMap<String, String>> {
    let doc: toml::Table = text
        .parse()
        .map_err(|e: toml::de::Error| RosterEditError::Parse(e.message().trim().to_owned()))?;
    let mut out = BTreeMap::new();
    for (key, value) in doc {
        let toml::Value::Table(agents) = value else {
            return Err(RosterEditError::Parse(format!(
                "key {key:?} is outside [agents]"
            )));
        };
        if key != "agents" {
            return Err(RosterEditError::Parse(format!(
                "table {key:?} is not [agents]"
            )));
        }
        for (name, v) in agents {
            let toml::Value::String(token) = v else {
                return Err(RosterEditError::Parse(format!(
                    "entry {name:?} is not a string token"
                )));
            };
            out.insert(name, token);
        }
    }
    Ok(out)
}

/// Adds `name = "token"` after the last entry of `[agents]` (a new `[agents]` table at the
/// end when there is none).
pub fn add(text: &str, name: &str, token: &str) -> Result<String> {
    let scan = Scan::of(text)?;
    if scan.entries.contains_key(name) {
        return Err(RosterEditError::Exists(name.to_owned()));
    }
    let line = format!("{} = {}\n", key_text(name), string_text(token));
    let mut out = String::with_capacity(text.len() + line.len() + 10);
    match scan.insert_at {
        Some(at) => {
            out.push_str(&text[..at]);
            if !out.is_empty() && !out.ends_with('\n') {
                out.push('\n');
            }
            out.push_str(&line);
            out.push_str(&text[at..]);
        }
        None => {
            out.push_str(text);
            if !out.is_empty() && !out.ends_with('\n') {
                out.push('\n');
            }
            out.push_str("[agents]\n");
            out.push_str(&line);
        }
    }
    let mut want = scan.entries;
    want.insert(name.to_owned(), token.to_owned());
    verified(out, &want)
}

/// Removes `name`'s line.
pub fn remove(text: &str, name: &str) -> Result<String> {
    let scan = Scan::of(text)?;
    let Some(&(start, end)) = scan.lines.get(name) else {
        return Err(RosterEditError::Missing(name.to_owned()));
    };
    if scan.entries.len() == 1 {
        return Err(RosterEditError::LastAgent(name.to_owned()));
    }
    let out = format!("{}{}", &text[..start], &text[end..]);
    let mut want = scan.entries;
    want.remove(name);
    verified(out, &want)
}

/// Gives `name` the token `token`, keeping the line's key spelling and trailing comment.
pub fn set_token(text: &str, name: &str, token: &str) -> Result<String> {
    let scan = Scan::of(text)?;
    let Some(&(start, end)) = scan.lines.get(name) else {
        return Err(RosterEditError::Missing(name.to_owned()));
    };
    let line = &text[start..end];
    let (vs, ve) = value_span(line).ok_or_else(|| {
        RosterEditError::NotEditable(format!("the line of {name:?} is not name = \"token\""))
    })?;
    let out = format!(
        "{}{}{}{}",
        &text[..start + vs],
        string_text(token),
        &line[ve..],
        &text[end..]
    );
    let mut want = scan.entries;
    want.insert(name.to_owned(), token.to_owned());
    verified(out, &want)
}

/// The edit's self-check: exactly `want`, and a roster the hub loads (when non-empty).
fn verified(out: String, want: &BTreeMap<String, String>) -> Result<String> {
    let got = entries(&out).map_err(|e| RosterEditError::Verify(e.to_string()))?;
    if &got != want {
        return Err(RosterEditError::Verify(
            "the entries read back differ from the intended ones".into(),
        ));
    }
    Roster::parse(&out).map_err(|e| RosterEditError::Verify(e.to_string()))?;
    Ok(out)
}

/// The roster taken apart: each entry's line (byte range, newline included) and where a new
/// entry goes.
struct Scan {
    entries: BTreeMap<String, String>,
    lines: BTreeMap<String, (usize, usize)>,
    /// After the last entry line of `[agents]`, or after its header; None: no `[agents]`.
    insert_at: Option<usize>,
}

impl Scan {
    fn of(text: &str) -> Result<Scan> {
        let entries = entries(text)?;
        let mut lines = BTreeMap::new();
        let mut insert_at = None;
        let mut in_agents = false;
        let mut pos = 0;
        for (n, raw) in text.split_inclusive('\n').enumerate() {
            let (start, end) = (pos, pos + raw.len());
            pos = end;
            let body = raw.trim();
            if body.is_empty() || body.starts_with('#') {
                continue;
            }
            let not_editable = |why: &str| {
                RosterEditError::NotEditable(format!("line {} of the roster {why}", n + 1))
            };
            let alone: toml::Table = raw
                .parse()
                .map_err(|_| not_editable("is part of a value spanning lines"))?;
            if body.starts_with('[') {
                let is_agents = alone.len() == 1
                    && alone
                        .get("agents")
                        .and_then(toml::Value::as_table)
                        .is_some_and(toml::Table::is_empty);
                if !is_agents || insert_at.is_some() {
                    return Err(not_editable("is a table header other than [agents]"));
                }
                in_agents = true;
                insert_at = Some(end);
                continue;
            }
            let mut kv = alone.into_iter();
            let (Some((name, toml::Value::String(_))), None) = (kv.next(), kv.next()) else {
                return Err(not_editable("is not one name = \"token\" entry"));
            };
            if !in_agents {
                return Err(not_editable("defines an entry outside an [agents] header"));
            }
            lines.insert(name, (start, end));
            insert_at = Some(end);
        }
        let found: Vec<&String> = lines.keys().collect();
        if found != entries.keys().collect::<Vec<_>>() {
            return Err(RosterEditError::NotEditable(
                "the roster's entries are not one line each".into(),
            ));
        }
        Ok(Scan {
            entries,
            lines,
            insert_at,
        })
    }
}

/// The byte range of the string value in a `key = "value"` line.
fn value_span(line: &str) -> Option<(usize, usize)> {
    let b = line.as_bytes();
    let mut i = b.iter().position(|c| !c.is_ascii_whitespace())?;
    i = match b[i] {
        b'"' => string_end(b, i)?,
        b'\'' => i + 1 + b[i + 1..].iter().position(|&c| c == b'\'')? + 1,
        _ => {
            i + b[i..]
                .iter()
                .position(|&c| c == b'=' || c.is_ascii_whitespace())?
        }
    };
    while b.get(i)?.is_ascii_whitespace() {
        i += 1;
    }
    if b[i] != b'=' {
        return None;
    }
    i += 1;
    while b.get(i)?.is_ascii_whitespace() {
        i += 1;
    }
    let start = i;
    let end = match b[i] {
        b'"' if !line[i..].starts_with("\"\"\"") => string_end(b, i)?,
        b'\'' if !line[i..].starts_with("'''") => {
            i + 1 + b[i + 1..].iter().position(|&c| c == b'\'')? + 1
        }
        _ => return None,
    };
    Some((start, end))
}

/// Just past the closing quote of the basic string opening at `at`.
fn string_end(b: &[u8], at: usize) -> Option<usize> {
    let mut i = at + 1;
    while i < b.len() {
        match b[i] {
            b'\\' => i += 2,
            b'"' => return Some(i + 1),
            _ => i += 1,
        }
    }
    None
}

/// A name as a TOML key: bare when it can be, quoted otherwise (`ops@west`).
fn key_text(name: &str) -> String {
    if !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        name.to_owned()
    } else {
        string_text(name)
    }
}

fn string_text(s: &str) -> String {
    toml::Value::String(s.to_owned()).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    const USER: &str = "# Operator's roster\n\n[agents]\n# the lead\nlead = \"t-lead\"  # since May\n\"ops@west\" = 't-ops'\n\n# end\n";

    #[test]
    fn add_goes_after_the_last_entry_and_keeps_every_other_byte() {
        let out = add(USER, "coder", "t-new").unwrap();
        assert_eq!(
            out,
            "# Operator's roster\n\n[agents]\n# the lead\nlead = \"t-lead\"  # since May\n\"ops@west\" = 't-ops'\ncoder = \"t-new\"\n\n# end\n"
        );
        let out = add(&out, "a@b", "t-ab").unwrap();
        assert!(
            out.contains("coder = \"t-new\"\n\"a@b\" = \"t-ab\"\n"),
            "{out}"
        );
    }

    #[test]
    fn add_starts_a_roster_from_nothing_and_from_a_header_alone() {
        assert_eq!(add("", "a", "t").unwrap(), "[agents]\na = \"t\"\n");
        assert_eq!(
            add("# mine", "a", "t").unwrap(),
            "# mine\n[agents]\na = \"t\"\n"
        );
        assert_eq!(
            add("[agents]\n", "a", "t").unwrap(),
            "[agents]\na = \"t\"\n"
        );
        assert_eq!(
            add("[agents]\nb = \"u\"", "a", "t").unwrap(),
            "[agents]\nb = \"u\"\na = \"t\"\n"
        );
    }

    #[test]
    fn remove_takes_only_its_line() {
        let out = remove(USER, "lead").unwrap();
        assert_eq!(
            out,
            "# Operator's roster\n\n[agents]\n# the lead\n\"ops@west\" = 't-ops'\n\n# end\n"
        );
        assert_eq!(
            remove(&out, "ops@west").unwrap_err(),
            RosterEditError::LastAgent("ops@west".into())
        );
        assert_eq!(
            remove(USER, "ghost").unwrap_err(),
            RosterEditError::Missing("ghost".into())
        );
    }

    #[test]
    fn set_token_keeps_the_key_spelling_and_the_comment() {
        let out = set_token(USER, "lead", "t-rot").unwrap();
        assert!(out.contains("lead = \"t-rot\"  # since May\n"), "{out}");
        let out = set_token(&out, "ops@west", "t-ops2").unwrap();
        assert!(out.contains("\"ops@west\" = \"t-ops2\"\n"), "{out}");
        assert_eq!(out.lines().count(), USER.lines().count());
        assert_eq!(entries(&out).unwrap()["lead"], "t-rot");
        let odd = "[agents]\n\"a=b\" = \"x\\\"y\" # c = \"d\"\n";
        let out = set_token(odd, "a=b", "new").unwrap();
        assert_eq!(out, "[agents]\n\"a=b\" = \"new\" # c = \"d\"\n");
    }

    #[test]
    fn refuses_what_it_cannot_take_apart_and_what_would_not_load() {
        let cases = [
            "agents = { a = \"t\" }\n",
            "agents.a = \"t\"\n",
            "[agents]\na = \"\"\"t\nu\"\"\"\n",
            "[agents]\na = \"t\"; b = \"u\"\n",
        ];
        for text in cases {
            let e = add(text, "z", "tz").unwrap_err();
            assert!(
                matches!(
                    e,
                    RosterEditError::NotEditable(_) | RosterEditError::Parse(_)
                ),
                "{text:?}: {e:?}"
            );
        }
        assert!(matches!(
            add("[other]\nx = \"t\"\n", "z", "tz"),
            Err(RosterEditError::Parse(_))
        ));
        assert!(matches!(
            add("[agents]\na = 5\n", "z", "tz"),
            Err(RosterEditError::Parse(_))
        ));
        assert!(matches!(
            add("[agents\n", "z", "tz"),
            Err(RosterEditError::Parse(_))
        ));
        assert_eq!(
            add(USER, "lead", "t").unwrap_err(),
            RosterEditError::Exists("lead".into())
        );
        // A token equal to another agent's: the roster would not load.
        let e = add(USER, "twin", "t-lead").unwrap_err();
        assert!(matches!(e, RosterEditError::Verify(_)), "{e:?}");
        assert!(!e.to_string().contains("t-lead"), "{e}");
    }

    #[test]
    fn names_that_could_escape_the_tokens_folder_or_are_reserved_are_refused() {
        for bad in [
            "", "../x", "a/b", ".hidden", "-flag", "hub", "HUB", "task-1", "a b", "é", "a\nb",
        ] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
        assert!(check_name(&"x".repeat(65)).is_err());
        for good in ["coder", "ops@west", "claude-code.2", "A_b", &"x".repeat(64)] {
            assert!(check_name(good).is_ok(), "{good:?}");
        }
    }

    #[test]
    fn no_error_text_holds_a_token() {
        let text = "[agents]\na = \"SECRET-1\"\n";
        for e in [
            add(text, "b", "SECRET-1").unwrap_err(),
            remove(text, "a").unwrap_err(),
            set_token("[agents]\na = \"SECRET-1\"\nb = \"x\"\n", "a", "x").unwrap_err(),
        ] {
            assert!(!e.to_string().contains("SECRET"), "{e}");
        }
    }
}
