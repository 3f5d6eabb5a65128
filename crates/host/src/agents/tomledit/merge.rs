//! Merging the keys install owns into a TOML table that may hold keys of the user's (issue 12,
//! docs/agents.md "Reinstall keeps your keys"): Codex's `[mcp_servers.agent-hub]` with a
//! `default_tools_approval_mode` the user added by hand, comments, sub-tables.
//!
//! Owns `merge_table` and the small scanner that finds each `key = value` line in a table's
//! own block (values spanning lines — arrays, multi-line strings — included). A value install
//! owns is replaced where it stands, a missing key is added after the block's last key, and
//! every other byte stays. Like the rest of `tomledit`, the result is parsed again and must be
//! the old document with exactly those keys set, else nothing is written. Refuses IO.

use super::{
    headers, lookup, parse, render_block, render_key, table_set, verify, Result, TomlEditError,
};

/// One `key = value` line (or lines) of a table's block.
#[derive(Debug)]
struct KeyValue {
    /// The key decoded (`a`, `"a"`, `'a'` all give `["a"]`; dotted keys give several).
    key: Vec<String>,
    value_start: usize,
    value_end: usize,
    /// Just past the newline that ends the line holding the value's end (or the text's end).
    line_end: usize,
}

/// End of a string starting at `i` (`"`, `'`, `"""` or `'''`), just past its closing quote.
fn string_end(b: &[u8], i: usize) -> usize {
    let q = b[i];
    let triple = b.get(i..i + 3) == Some(&[q, q, q][..]);
    let mut j = if triple { i + 3 } else { i + 1 };
    while j < b.len() {
        if q == b'"' && b[j] == b'\\' {
            j += 2;
            continue;
        }
        if triple {
            if b.get(j..j + 3) == Some(&[q, q, q][..]) {
                j += 3;
                // A closing delimiter may carry up to two more quotes of the content.
                let mut extra = 0;
                while extra < 2 && b.get(j) == Some(&q) {
                    j += 1;
                    extra += 1;
                }
                return j;
            }
        } else if b[j] == q || b[j] == b'\n' {
            return j + 1;
        }
        j += 1;
    }
    b.len()
}

/// End of the value starting at `i`: a string, an array or inline table (nested, with strings
/// and comments inside), or a bare scalar up to a comment or the line's end.
fn value_end(text: &str, i: usize) -> usize {
    let b = text.as_bytes();
    match b.get(i) {
        Some(b'"' | b'\'') => string_end(b, i),
        Some(b'[' | b'{') => {
            let mut depth = 0usize;
            let mut j = i;
            while j < b.len() {
                match b[j] {
                    b'"' | b'\'' => {
                        j = string_end(b, j);
                        continue;
                    }
                    b'#' => {
                        while j < b.len() && b[j] != b'\n' {
                            j += 1;
                        }
                        continue;
                    }
                    b'[' | b'{' => depth += 1,
                    b']' | b'}' => {
                        depth = depth.saturating_sub(1);
                        if depth == 0 {
                            return j + 1;
                        }
                    }
                    _ => {}
                }
                j += 1;
            }
            b.len()
        }
        _ => {
            let end = text[i..].find(['#', '\n']).map_or(text.len(), |n| i + n);
            i + text[i..end].trim_end().len()
        }
    }
}

/// The `key = value` lines between `from` and `to` (a table's body: after its header line, up
/// to the next header). `None` when a line cannot be read as one, which the caller refuses.
fn key_values(text: &str, from: usize, to: usize) -> Option<Vec<KeyValue>> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = from;
    while i < to {
        while i < to && (b[i] == b' ' || b[i] == b'\t') {
            i += 1;
        }
        if i >= to {
            break;
        }
        if matches!(b[i], b'\n' | b'\r' | b'#') {
            i = text[i..to].find('\n').map_or(to, |n| i + n + 1);
            continue;
        }
        // The key runs to the first `=` outside quotes.
        let key_start = i;
        let mut j = i;
        while j < to && b[j] != b'=' {
            if matches!(b[j], b'"' | b'\'') {
                j = string_end(b, j);
            } else if b[j] == b'\n' {
                return None;
            } else {
                j += 1;
            }
        }
        if j >= to {
            return None;
        }
        let key = super::header_path(text[key_start..j].trim())?;
        let mut v = j + 1;
        while v < to && (b[v] == b' ' || b[v] == b'\t') {
            v += 1;
        }
        let value_end = value_end(text, v);
        if value_end > to || value_end == v {
            return None;
        }
        let line_end = text[value_end..to]
            .find('\n')
            .map_or(to, |n| value_end + n + 1);
        out.push(KeyValue {
            key,
            value_start: v,
            value_end,
            line_end,
        });
        i = line_end;
    }
    Some(out)
}

/// Makes the table at `path` hold `owned` (scalars and arrays) and keeps every other key in
/// it, its sub-tables, comments and layout. A missing table is appended at the end of the
/// file after one blank line (as `set_table` does). Returns the new text and the keys written;
/// none means no change.
pub fn merge_table(
    text: &str,
    path: &[&str],
    owned: &[(&str, toml::Value)],
) -> Result<(String, Vec<String>)> {
    let old = parse(text)?;
    let nl = if text.contains("\r\n") { "\r\n" } else { "\n" };
    let not_editable = || {
        TomlEditError::NotEditable(format!(
            "[{}] is defined inline or with dotted keys, not as its own table",
            path.join(".")
        ))
    };
    let current = match lookup(&old, path) {
        None => None,
        Some(toml::Value::Table(t)) => Some(t.clone()),
        Some(_) => return Err(not_editable()),
    };
    let todo: Vec<&(&str, toml::Value)> = owned
        .iter()
        .filter(|(k, v)| current.as_ref().and_then(|t| t.get(*k)) != Some(v))
        .collect();
    if todo.is_empty() {
        return Ok((text.to_owned(), Vec::new()));
    }
    let written: Vec<String> = todo.iter().map(|(k, _)| (*k).to_owned()).collect();
    let mut expected = old;
    for (k, v) in &todo {
        let mut full: Vec<&str> = path.to_vec();
        full.push(k);
        table_set(&mut expected, &full, v.clone());
    }
    let hs = headers(text);
    let own = hs
        .iter()
        .position(|h| h.path.iter().map(String::as_str).eq(path.iter().copied()));
    let Some(own) = own else {
        // No `[path]` header. Only sub-tables (`[path.env]`) define it implicitly: a header
        // for it may still follow them. Anything else (inline, dotted keys) is refused.
        let has_sub = hs
            .iter()
            .any(|h| h.path.len() > path.len() && h.path.iter().zip(path).all(|(a, b)| a == b));
        if current.is_some() && !has_sub {
            return Err(not_editable());
        }
        let mut base = text.to_owned();
        if !base.is_empty() && !base.ends_with('\n') {
            base.push_str(nl);
        }
        if !base.is_empty() {
            base.push_str(nl);
        }
        let entries: Vec<(&str, toml::Value)> = todo.iter().map(|(k, v)| (*k, v.clone())).collect();
        base.push_str(&render_block(path, &entries).replace('\n', nl));
        return verify(&base, &expected).map(|t| (t, written));
    };
    let header_start = hs[own].line_start;
    let body_start = text[header_start..]
        .find('\n')
        .map_or(text.len(), |n| header_start + n + 1);
    let body_end = hs.get(own + 1).map_or(text.len(), |h| h.line_start);
    let kvs = key_values(text, body_start, body_end).ok_or_else(|| {
        TomlEditError::NotEditable(format!(
            "a line of [{}] could not be read as key = value",
            path.join(".")
        ))
    })?;
    // Edits from the end backwards, so earlier offsets stay valid.
    let mut edits: Vec<(usize, usize, String)> = Vec::new();
    let mut added = String::new();
    for (k, v) in &todo {
        match kvs
            .iter()
            .rev()
            .find(|kv| kv.key.len() == 1 && kv.key[0] == *k)
        {
            Some(kv) => edits.push((kv.value_start, kv.value_end, v.to_string())),
            None => {
                if current.as_ref().is_some_and(|t| t.contains_key(*k)) {
                    // Defined as a sub-table or through a dotted key: not ours to rewrite.
                    return Err(not_editable());
                }
                added.push_str(&format!("{} = {v}\n", render_key(k)));
            }
        }
    }
    if !added.is_empty() {
        let at = kvs.last().map_or(body_start, |kv| kv.line_end);
        let needs_nl = at > 0 && !text[..at].ends_with('\n');
        let text_added = if needs_nl {
            format!("\n{added}")
        } else {
            added
        };
        edits.push((at, at, text_added));
    }
    edits.sort_by_key(|e| std::cmp::Reverse(e.0));
    let mut out = text.to_owned();
    for (start, end, t) in edits {
        out.replace_range(start..end, &t.replace('\n', nl));
    }
    verify(&out, &expected).map(|t| (t, written))
}

#[cfg(test)]
mod tests {
    use super::super::remove_table;
    use super::*;

    const P: [&str; 2] = ["mcp_servers", "agent-hub"];

    fn owned(port: &str) -> Vec<(&'static str, toml::Value)> {
        vec![
            ("command", toml::Value::String("/bin/hub".into())),
            (
                "args",
                toml::Value::Array(vec!["mcp".into(), "--port".into(), port.into()]),
            ),
        ]
    }

    #[test]
    fn a_missing_table_is_appended_and_a_second_merge_changes_nothing() {
        let before = "model = \"o3\"\n";
        let (after, keys) = merge_table(before, &P, &owned("1")).unwrap();
        assert_eq!(keys, ["command", "args"]);
        assert_eq!(
            after,
            "model = \"o3\"\n\n[mcp_servers.agent-hub]\ncommand = \"/bin/hub\"\nargs = [\"mcp\", \"--port\", \"1\"]\n"
        );
        let (again, keys) = merge_table(&after, &P, &owned("1")).unwrap();
        assert!(keys.is_empty());
        assert_eq!(again, after);
        assert_eq!(remove_table(&after, &P).unwrap().unwrap(), before);
    }

    #[test]
    fn a_new_port_rewrites_only_args_and_keeps_the_users_keys_comments_and_sub_tables() {
        let before = "[mcp_servers.agent-hub]\n# mine: run unattended\ndefault_tools_approval_mode = \"approve\"\ncommand = \"/bin/hub\"  # ours\nargs = [\n  \"mcp\",\n  \"--port\", \"1\", # old\n]\nstartup_timeout_sec = 20\n\n[mcp_servers.agent-hub.env]\nRUST_LOG = \"debug\"\n\n[profiles.a]\nmodel = \"m\"\n";
        let (after, keys) = merge_table(before, &P, &owned("2")).unwrap();
        assert_eq!(keys, ["args"]);
        assert_eq!(
            after,
            before.replace(
                "[\n  \"mcp\",\n  \"--port\", \"1\", # old\n]",
                "[\"mcp\", \"--port\", \"2\"]"
            )
        );
    }

    #[test]
    fn missing_owned_keys_go_after_the_last_key_of_the_block() {
        let before = "[mcp_servers.agent-hub]\ndefault_tools_approval_mode = \"approve\"\n\n# next\n[other]\nk = 1\n";
        let (after, _) = merge_table(before, &P, &owned("1")).unwrap();
        assert_eq!(
            after,
            "[mcp_servers.agent-hub]\ndefault_tools_approval_mode = \"approve\"\ncommand = \"/bin/hub\"\nargs = [\"mcp\", \"--port\", \"1\"]\n\n# next\n[other]\nk = 1\n"
        );
        // An empty block, at the end of a file without a final newline.
        let (after, _) = merge_table("[mcp_servers.agent-hub]", &P, &owned("1")).unwrap();
        assert_eq!(
            after,
            "[mcp_servers.agent-hub]\ncommand = \"/bin/hub\"\nargs = [\"mcp\", \"--port\", \"1\"]\n"
        );
    }

    #[test]
    fn a_user_value_under_an_owned_key_is_replaced_quoted_keys_too() {
        let before = "[mcp_servers.\"agent-hub\"]\n\"command\" = '/home/u/wrap.sh'\nargs = [\"mcp\", \"--port\", \"1\"]\ntrust = true\n";
        let (after, keys) = merge_table(before, &P, &owned("1")).unwrap();
        assert_eq!(keys, ["command"]);
        assert_eq!(after, before.replace("'/home/u/wrap.sh'", "\"/bin/hub\""));
    }

    #[test]
    fn only_sub_tables_then_the_header_is_appended() {
        let before = "[mcp_servers.agent-hub.env]\nA = \"1\"\n";
        let (after, _) = merge_table(before, &P, &owned("1")).unwrap();
        assert!(after.starts_with(before), "{after}");
        assert!(after.ends_with("\n[mcp_servers.agent-hub]\ncommand = \"/bin/hub\"\nargs = [\"mcp\", \"--port\", \"1\"]\n"));
    }

    #[test]
    fn inline_and_dotted_definitions_are_refused() {
        for before in [
            "mcp_servers = { agent-hub = { command = \"/old\" } }\n",
            "[mcp_servers]\nagent-hub.command = \"/old\"\n",
            "[mcp_servers.agent-hub]\ncommand.x = 1\n",
        ] {
            assert!(
                matches!(
                    merge_table(before, &P, &owned("1")),
                    Err(TomlEditError::NotEditable(_))
                ),
                "{before}"
            );
        }
    }

    #[test]
    fn crlf_files_stay_crlf() {
        let before = "[mcp_servers.agent-hub]\r\ntrust = true\r\nargs = []\r\n";
        let (after, _) = merge_table(before, &P, &owned("2")).unwrap();
        assert_eq!(
            after,
            "[mcp_servers.agent-hub]\r\ntrust = true\r\nargs = [\"mcp\", \"--port\", \"2\"]\r\ncommand = \"/bin/hub\"\r\n"
        );
    }

    #[test]
    fn look_alike_lines_in_multi_line_strings_are_values() {
        let before =
            "[mcp_servers.agent-hub]\nnote = \"\"\"\nargs = [\"x\"]\n\"\"\"\nargs = [\"mcp\"]\n";
        let (after, _) = merge_table(before, &P, &owned("1")).unwrap();
        assert!(after.starts_with("[mcp_servers.agent-hub]\nnote = \"\"\"\nargs = [\"x\"]\n\"\"\"\nargs = [\"mcp\", \"--port\", \"1\"]\n"), "{after}");
    }
}
