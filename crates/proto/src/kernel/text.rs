//! The one sanitiser for strings other parties wrote that reach a person's terminal (issue
//! 29): agent names, await filters, envelope ids and kinds, task fields, a peer's names, a
//! process's working directory. A string from another party may hold escape sequences that
//! drive the reader's terminal (OSC 52 writes the clipboard, OSC 0 the window title, `ESC c`
//! clears the screen), or bidirectional overrides that make text read differently from what
//! it is; every human-facing output (`agent-hub who`, `agents ps`, `task list`, `status`,
//! `top`) passes such strings through here.
//!
//! Owns the rule (`is_unsafe`: Unicode control characters — C0, DEL, C1 — and the
//! bidirectional and invisible formatting characters) and its two renderings: `for_terminal`
//! (each unsafe character becomes `?`, for tables and plain text) and `json_for_terminal`
//! (each unsafe character inside a JSON text becomes its `\uXXXX` escape: the same JSON value,
//! byte-safe to print). Imports nothing from the crate, so every layer can use it without an
//! import cycle (the kernel issue 30 plans). Refuses IO and any decision about what to show.

use std::borrow::Cow;

/// Whether `c` must never reach a terminal as it is: a control character (C0 `U+0000–001F`,
/// DEL `U+007F`, C1 `U+0080–009F`), a bidirectional mark, embedding, override or isolate,
/// a zero-width or invisible formatting character, a line or paragraph separator, or the BOM.
pub fn is_unsafe(c: char) -> bool {
    c.is_control()
        || matches!(c,
            '\u{061C}'
            | '\u{200B}'..='\u{200F}'
            | '\u{2028}'..='\u{202E}'
            | '\u{2060}'..='\u{2064}'
            | '\u{2066}'..='\u{2069}'
            | '\u{FEFF}')
}

/// Whether `s` holds any character `is_unsafe` names.
pub fn has_unsafe(s: &str) -> bool {
    s.chars().any(is_unsafe)
}

/// `s` with each unsafe character replaced by `?`: for a table cell or a plain line. Borrows
/// when there is nothing to replace.
pub fn for_terminal(s: &str) -> Cow<'_, str> {
    if !has_unsafe(s) {
        return Cow::Borrowed(s);
    }
    Cow::Owned(
        s.chars()
            .map(|c| if is_unsafe(c) { '?' } else { c })
            .collect(),
    )
}

/// A JSON text with each unsafe character written as its `\uXXXX` escape (a surrogate pair
/// above U+FFFF never occurs: every unsafe character is in the BMP). The result is the same
/// JSON value, so a program reading it sees exactly what the hub sent; a terminal sees no
/// control or bidi character. Outside strings JSON holds only ASCII punctuation, digits,
/// literals and whitespace (space, tab, newline, carriage return), which pass unchanged; so
/// does a text that is not JSON. Borrows when there is nothing to escape.
pub fn json_for_terminal(text: &str) -> Cow<'_, str> {
    if !text
        .chars()
        .any(|c| is_unsafe(c) && !matches!(c, ' ' | '\t' | '\n' | '\r'))
    {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    let mut in_string = false;
    let mut escaped = false;
    for c in text.chars() {
        if in_string && is_unsafe(c) {
            // Inside a string a raw control character is not even valid JSON below U+0020;
            // the escape is the value it stood for.
            out.push_str(&format!("\\u{:04x}", c as u32));
            escaped = false;
            continue;
        }
        if !in_string && is_unsafe(c) && !matches!(c, '\t' | '\n' | '\r') {
            out.push('?');
            continue;
        }
        out.push(c);
        if in_string {
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_string = false,
                _ => {}
            }
        } else if c == '"' {
            in_string = true;
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a hostile name or filter would carry: OSC 52 (clipboard), OSC 0 (title), a
    /// screen clear, an 8-bit CSI, DEL, a right-to-left override and a zero-width space.
    const HOSTILE: &str =
        "a\u{1b}]52;c;ZXZpbA==\u{7}b\u{1b}]0;pwned\u{7}\u{1b}c\u{9b}2J\u{7f}\u{202e}txt.exe\u{200b}z";

    #[test]
    fn every_escape_and_bidi_character_becomes_a_question_mark() {
        let out = for_terminal(HOSTILE);
        assert!(!has_unsafe(&out), "{out:?}");
        assert_eq!(
            out, "a?]52;c;ZXZpbA==?b?]0;pwned??c?2J??txt.exe?z",
            "one ? per character, the rest kept"
        );
        assert!(matches!(for_terminal("plain é 😀"), Cow::Borrowed(_)));
    }

    #[test]
    fn json_keeps_its_value_and_loses_its_raw_controls() {
        let value = serde_json::json!({"name": HOSTILE, "k\u{9b}": ["x\u{202e}", 1]});
        // serde_json escapes C0 but writes DEL, C1 and bidi raw: the case that matters.
        let text = serde_json::to_string(&value).unwrap();
        assert!(text.contains('\u{9b}') && text.contains('\u{202e}'));
        let safe = json_for_terminal(&text);
        assert!(!has_unsafe(&safe), "{safe}");
        let back: serde_json::Value = serde_json::from_str(&safe).unwrap();
        assert_eq!(back, value, "the same JSON value");
        // Escaped quotes and backslashes keep the string state right.
        let tricky = "{\"a\":\"q\\\"\u{7f}\\\\\",\"b\":\"\u{85}\"}";
        let safe = json_for_terminal(tricky);
        assert_eq!(safe, "{\"a\":\"q\\\"\\u007f\\\\\",\"b\":\"\\u0085\"}");
        let pretty = "{\n\t\"a\": 1\r\n}";
        assert!(matches!(json_for_terminal(pretty), Cow::Borrowed(_)));
    }
}
