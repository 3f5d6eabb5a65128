//! Targeted text edits to a TOML file (Codex's `config.toml`): add, replace or remove one
//! table written with its own `[a.b]` header, leaving every other byte as it was.
//!
//! Why text edits: the `toml` crate we depend on (0.8) has no public document model that keeps
//! comments and layout (`toml_edit` would, but is not a direct dependency). So this finds the
//! table's header lines with a small scanner that knows strings, multi-line strings, comments
//! and multi-line arrays, cuts their blocks out, and appends the new block at the end of the
//! file. Every edit checks itself: the result is parsed and must equal the old document with
//! exactly that change, or nothing is written. A table defined some other way (inline, or with
//! dotted keys) is refused with a message, never guessed at. Refuses IO.

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TomlEditError {
    /// The file is not TOML.
    Parse(String),
    /// The table exists but not as `[header]` blocks this editor can cut out.
    NotEditable(String),
    /// The edited text did not come out as exactly the intended change.
    Verify(String),
}

impl fmt::Display for TomlEditError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TomlEditError::Parse(m) => write!(f, "not valid TOML: {m}"),
            TomlEditError::NotEditable(m) => write!(f, "{m}; please edit it by hand"),
            TomlEditError::Verify(m) => write!(
                f,
                "the edit did not come out as intended ({m}); nothing was written, please edit by hand"
            ),
        }
    }
}

impl std::error::Error for TomlEditError {}

type Result<T> = std::result::Result<T, TomlEditError>;

mod merge;
pub use merge::merge_table;

fn parse(text: &str) -> Result<toml::Table> {
    text.parse::<toml::Table>().map_err(|e| {
        let line = e
            .span()
            .map(|s| {
                format!(
                    " at line {}",
                    text[..s.start.min(text.len())].matches('\n').count() + 1
                )
            })
            .unwrap_or_default();
        TomlEditError::Parse(format!("{}{line}", e.message().trim_end()))
    })
}

fn lookup<'t>(t: &'t toml::Table, path: &[&str]) -> Option<&'t toml::Value> {
    let (first, rest) = path.split_first()?;
    let mut v = t.get(*first)?;
    for k in rest {
        v = v.as_table()?.get(*k)?;
    }
    Some(v)
}

fn table_set(t: &mut toml::Table, path: &[&str], new: toml::Value) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut cur = t;
    for k in parents {
        let slot = cur
            .entry((*k).to_owned())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        if !slot.is_table() {
            *slot = toml::Value::Table(toml::Table::new());
        }
        let toml::Value::Table(next) = slot else {
            return;
        };
        cur = next;
    }
    cur.insert((*last).to_owned(), new);
}

fn table_remove(t: &mut toml::Table, path: &[&str]) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut cur = t;
    for k in parents {
        match cur.get_mut(*k) {
            Some(toml::Value::Table(next)) => cur = next,
            _ => return,
        }
    }
    cur.remove(*last);
}

/// A header line: its byte range (line start to the start of the next line) and its key path.
#[derive(Debug)]
struct Header {
    line_start: usize,
    path: Vec<String>,
}

/// Decodes a header's dotted key (`a."b.c".'d'`) by letting the toml crate parse it as a key.
fn header_path(inner: &str) -> Option<Vec<String>> {
    let doc: toml::Table = format!("{inner} = 0").parse().ok()?;
    let mut path = Vec::new();
    let mut cur = &doc;
    loop {
        if cur.len() != 1 {
            return None;
        }
        let (k, v) = cur.iter().next()?;
        path.push(k.clone());
        match v {
            toml::Value::Table(t) => cur = t,
            _ => return Some(path),
        }
    }
}

/// Every table header (`[x]` or `[[x]]`) in `text`, in order. Lines inside multi-line strings
/// and multi-line arrays are never mistaken for headers.
fn headers(text: &str) -> Vec<Header> {
    #[derive(PartialEq)]
    enum St {
        Normal,
        MlBasic,
        MlLiteral,
    }
    let b = text.as_bytes();
    let mut st = St::Normal;
    let mut depth: i32 = 0; // open [ and { of a value spanning lines
    let mut out = Vec::new();
    let mut i = 0;
    let mut line_start = true;
    while i < b.len() {
        if line_start && st == St::Normal && depth == 0 {
            let mut j = i;
            while j < b.len() && (b[j] == b' ' || b[j] == b'\t') {
                j += 1;
            }
            if j < b.len() && b[j] == b'[' {
                let line_end = text[i..].find('\n').map_or(text.len(), |n| i + n);
                let line = &text[j..line_end];
                let double = line.starts_with("[[");
                let inner_start = if double { 2 } else { 1 };
                // The closing bracket: the first `]` (or `]]`) outside a quoted key.
                let mut k = inner_start;
                let lb = line.as_bytes();
                let mut quote: Option<u8> = None;
                while k < lb.len() {
                    match (quote, lb[k]) {
                        (None, b'"' | b'\'') => quote = Some(lb[k]),
                        (Some(q), c) if c == q => quote = None,
                        (Some(b'"'), b'\\') => k += 1,
                        (None, b']') => break,
                        _ => {}
                    }
                    k += 1;
                }
                if let Some(path) = line.get(inner_start..k).and_then(header_path) {
                    out.push(Header {
                        line_start: i,
                        path,
                    });
                }
                i = line_end + 1;
                continue;
            }
        }
        line_start = false;
        let rest = &text[i..];
        match st {
            St::MlBasic => {
                if rest.starts_with("\\") {
                    i += 2;
                    continue;
                }
                if rest.starts_with("\"\"\"") {
                    st = St::Normal;
                    i += 3;
                    // A closing delimiter may be followed by up to two more quotes.
                    while text[i..].starts_with('"') {
                        i += 1;
                    }
                    continue;
                }
            }
            St::MlLiteral => {
                if rest.starts_with("'''") {
                    st = St::Normal;
                    i += 3;
                    while text[i..].starts_with('\'') {
                        i += 1;
                    }
                    continue;
                }
            }
            St::Normal => {
                if rest.starts_with("\"\"\"") {
                    st = St::MlBasic;
                    i += 3;
                    continue;
                }
                if rest.starts_with("'''") {
                    st = St::MlLiteral;
                    i += 3;
                    continue;
                }
                match b[i] {
                    b'"' => {
                        i += 1;
                        while i < b.len() && b[i] != b'"' && b[i] != b'\n' {
                            if b[i] == b'\\' {
                                i += 1;
                            }
                            i += 1;
                        }
                    }
                    b'\'' => {
                        i += 1;
                        while i < b.len() && b[i] != b'\'' && b[i] != b'\n' {
                            i += 1;
                        }
                    }
                    b'#' => {
                        while i < b.len() && b[i] != b'\n' {
                            i += 1;
                        }
                        continue;
                    }
                    b'[' | b'{' => depth += 1,
                    b']' | b'}' => depth = (depth - 1).max(0),
                    _ => {}
                }
            }
        }
        if i < b.len() && b[i] == b'\n' {
            line_start = true;
        }
        i += 1;
    }
    out
}

/// Byte ranges of the blocks that define `path` or its sub-tables: from each such header to
/// the next header that is not one of them (or the end).
fn blocks(text: &str, path: &[&str]) -> Vec<(usize, usize)> {
    let hs = headers(text);
    let ours =
        |h: &Header| h.path.len() >= path.len() && h.path.iter().zip(path).all(|(a, b)| a == b);
    let mut out: Vec<(usize, usize)> = Vec::new();
    for (n, h) in hs.iter().enumerate() {
        if !ours(h) {
            continue;
        }
        let end = hs[n + 1..]
            .iter()
            .find(|h| !ours(h))
            .map_or(text.len(), |h| h.line_start);
        match out.last_mut() {
            Some(last) if last.1 >= h.line_start => last.1 = last.1.max(end),
            _ => out.push((h.line_start, end)),
        }
    }
    out
}

/// Cuts the blocks out. A block that runs to the end of the file also takes the one blank
/// line before it, which is the separator `set_table` adds, so install then uninstall gives
/// the file back.
fn cut(text: &str, ranges: &[(usize, usize)]) -> String {
    let mut out = text.to_owned();
    for &(start, end) in ranges.iter().rev() {
        let mut start = start;
        if end == text.len() {
            if text[..start].ends_with("\r\n\r\n") {
                start -= 2;
            } else if text[..start].ends_with("\n\n") {
                start -= 1;
            }
        }
        out.replace_range(start..end, "");
    }
    out
}

fn render_key(k: &str) -> String {
    if !k.is_empty()
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        k.to_owned()
    } else {
        toml::Value::String(k.to_owned()).to_string()
    }
}

/// The block `set_table` appends: the header, then one `key = value` line per entry.
pub fn render_block(path: &[&str], entries: &[(&str, toml::Value)]) -> String {
    let mut out = format!(
        "[{}]\n",
        path.iter()
            .map(|k| render_key(k))
            .collect::<Vec<_>>()
            .join(".")
    );
    for (k, v) in entries {
        out.push_str(&format!("{} = {}\n", render_key(k), v));
    }
    out
}

/// Makes the table at `path` hold exactly `entries` (scalars and arrays, no sub-tables). No
/// change when it already does. Otherwise its old blocks are cut out and the new block goes
/// at the end of the file, after one blank line.
pub fn set_table(text: &str, path: &[&str], entries: &[(&str, toml::Value)]) -> Result<String> {
    let old = parse(text)?;
    let desired: toml::Table = entries
        .iter()
        .map(|(k, v)| ((*k).to_owned(), v.clone()))
        .collect();
    let current = lookup(&old, path);
    if current == Some(&toml::Value::Table(desired.clone())) {
        return Ok(text.to_owned());
    }
    let mut base = text.to_owned();
    if current.is_some() {
        let ranges = blocks(text, path);
        if ranges.is_empty() {
            return Err(TomlEditError::NotEditable(format!(
                "[{}] is defined inline or with dotted keys, not as its own table",
                path.join(".")
            )));
        }
        base = cut(text, &ranges);
    }
    // Follow the file's line ends.
    let nl = if text.contains("\r\n") { "\r\n" } else { "\n" };
    if !base.is_empty() && !base.ends_with('\n') {
        base.push_str(nl);
    }
    if !base.is_empty() {
        base.push_str(nl);
    }
    base.push_str(&render_block(path, entries).replace('\n', nl));
    let mut expected = old;
    table_set(&mut expected, path, toml::Value::Table(desired));
    verify(&base, &expected)
}

/// Removes the table at `path` and its sub-tables. `Ok(None)` when it is not there.
pub fn remove_table(text: &str, path: &[&str]) -> Result<Option<String>> {
    let old = parse(text)?;
    if lookup(&old, path).is_none() {
        return Ok(None);
    }
    let ranges = blocks(text, path);
    if ranges.is_empty() {
        return Err(TomlEditError::NotEditable(format!(
            "[{}] is defined inline or with dotted keys, not as its own table",
            path.join(".")
        )));
    }
    let new = cut(text, &ranges);
    let mut expected = old;
    table_remove(&mut expected, path);
    verify(&new, &expected).map(Some)
}

/// The value at `path`, if any.
pub fn get(text: &str, path: &[&str]) -> Result<Option<toml::Value>> {
    Ok(lookup(&parse(text)?, path).cloned())
}

/// Drops empty tables, recursively. Cutting `[a.b]` also drops the implicit `a` it created,
/// and an empty table means nothing to the agents reading these files, so the self-check
/// compares documents without them.
fn prune(t: &mut toml::Table) {
    for (_, v) in t.iter_mut() {
        if let toml::Value::Table(inner) = v {
            prune(inner);
        }
    }
    t.retain(|_, v| !matches!(v, toml::Value::Table(inner) if inner.is_empty()));
}

fn verify(new_text: &str, expected: &toml::Table) -> Result<String> {
    let mut got = parse(new_text)
        .map_err(|e| TomlEditError::Verify(format!("the result does not parse: {e}")))?;
    let mut expected = expected.clone();
    prune(&mut got);
    prune(&mut expected);
    if got != expected {
        return Err(TomlEditError::Verify(
            "the result differs from the intended value".into(),
        ));
    }
    Ok(new_text.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries() -> Vec<(&'static str, toml::Value)> {
        vec![
            ("command", toml::Value::String("/bin/hub".into())),
            (
                "args",
                toml::Value::Array(vec!["mcp".into(), "--as".into(), "codex".into()]),
            ),
        ]
    }
    const P: [&str; 2] = ["mcp_servers", "agent-hub"];

    #[test]
    fn append_then_remove_round_trips() {
        let before =
            "# my config\nmodel = \"o3\"  # fast\n\n[mcp_servers.other]\ncommand = \"x\"\n";
        let after = set_table(before, &P, &entries()).unwrap();
        assert_eq!(
            after,
            format!("{before}\n[mcp_servers.agent-hub]\ncommand = \"/bin/hub\"\nargs = [\"mcp\", \"--as\", \"codex\"]\n")
        );
        assert_eq!(
            set_table(&after, &P, &entries()).unwrap(),
            after,
            "idempotent"
        );
        assert_eq!(remove_table(&after, &P).unwrap().unwrap(), before);
        assert_eq!(remove_table(before, &P).unwrap(), None);
    }

    #[test]
    fn empty_and_unterminated_files() {
        let after = set_table("", &P, &entries()).unwrap();
        assert!(after.starts_with("[mcp_servers.agent-hub]\n"));
        assert_eq!(remove_table(&after, &P).unwrap().unwrap(), "");
        let after = set_table("a = 1", &P, &entries()).unwrap();
        assert!(after.starts_with("a = 1\n\n[mcp_servers.agent-hub]\n"));
        assert_eq!(remove_table(&after, &P).unwrap().unwrap(), "a = 1\n");
    }

    #[test]
    fn a_changed_entry_is_replaced_where_it_was_cut() {
        let before = "[mcp_servers.agent-hub]\ncommand = \"/old\"\n\n[mcp_servers.agent-hub.env]\nX = \"1\"\n\n[profiles.a]\nmodel = \"m\"\n";
        let after = set_table(before, &P, &entries()).unwrap();
        assert_eq!(
            after,
            "[profiles.a]\nmodel = \"m\"\n\n[mcp_servers.agent-hub]\ncommand = \"/bin/hub\"\nargs = [\"mcp\", \"--as\", \"codex\"]\n"
        );
    }

    #[test]
    fn look_alike_lines_inside_values_are_not_headers() {
        let before = "notes = \"\"\"\n[mcp_servers.agent-hub]\n\"\"\"\nlist = [\n  [1, 2],\n]\nraw = '''\n[x]\n'''\n";
        let after = set_table(before, &P, &entries()).unwrap();
        assert!(after.starts_with(before));
        assert_eq!(remove_table(&after, &P).unwrap().unwrap(), before);
    }

    #[test]
    fn quoted_header_keys_are_found() {
        let before = "[mcp_servers.\"agent-hub\"] # ours\ncommand = \"/old\"\n[other]\nk = 1\n";
        assert_eq!(
            remove_table(before, &P).unwrap().unwrap(),
            "[other]\nk = 1\n"
        );
    }

    #[test]
    fn inline_definitions_are_refused() {
        let inline = "mcp_servers = { agent-hub = { command = \"/old\" } }\n";
        assert!(matches!(
            set_table(inline, &P, &entries()),
            Err(TomlEditError::NotEditable(_))
        ));
        assert!(matches!(
            remove_table(inline, &P),
            Err(TomlEditError::NotEditable(_))
        ));
        let dotted = "[mcp_servers]\nagent-hub.command = \"/old\"\n";
        assert!(matches!(
            remove_table(dotted, &P),
            Err(TomlEditError::NotEditable(_))
        ));
        // An inline parent makes the appended header invalid: caught by the self-check.
        let parent = "mcp_servers = {}\n";
        assert!(matches!(
            set_table(parent, &P, &entries()),
            Err(TomlEditError::Verify(_))
        ));
    }

    #[test]
    fn invalid_toml_is_reported() {
        assert!(matches!(
            set_table("a = ", &P, &entries()),
            Err(TomlEditError::Parse(_))
        ));
    }

    #[test]
    fn crlf_files_stay_crlf() {
        let before = "a = 1\r\n";
        let after = set_table(before, &P, &entries()).unwrap();
        assert!(
            after.starts_with("a = 1\r\n\r\n[mcp_servers.agent-hub]\r\ncommand"),
            "{after:?}"
        );
        assert!(!after.replace("\r\n", "").contains('\n'));
        assert_eq!(remove_table(&after, &P).unwrap().unwrap(), before);
    }

    #[test]
    fn odd_keys_are_quoted() {
        assert_eq!(render_block(&["a", "b c"], &[]), "[a.\"b c\"]\n");
    }
}
