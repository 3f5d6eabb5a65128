//! Rendering and splicing for the JSON editor: new entries are written in the file's own
//! layout (indent unit, pretty or one-line, `:`/`, ` spacing, CRLF) and spliced in or cut out
//! next to their siblings' byte spans (docs/agents.md).
//!
//! Owns the text of each edit; whether the edit is right is checked by the caller
//! (`verify` in jsonedit/mod.rs) on the result.

use super::parse::{Kind, Node};
use super::J;

pub(super) struct Style {
    /// One level of indentation: the first indented line's leading whitespace, else 2 spaces.
    pub(super) unit: String,
    /// The whole file is on one line: insert compactly.
    pub(super) compact: bool,
}

pub(super) fn style_of(text: &str) -> Style {
    let unit = text
        .lines()
        .skip(1)
        .map(|l| &l[..l.len() - l.trim_start_matches([' ', '\t']).len()])
        .find(|ws| !ws.is_empty())
        .map(|ws| {
            if ws.starts_with('\t') {
                "\t".to_owned()
            } else {
                ws.to_owned()
            }
        })
        .unwrap_or_else(|| "  ".to_owned());
    // One line with something in it; a bare `{}` grows into the usual pretty layout.
    let squeezed: String = text
        .chars()
        .filter(|c| !c.is_whitespace() && *c != '\u{feff}')
        .collect();
    Style {
        unit,
        compact: !text.trim_end().contains('\n') && !matches!(squeezed.as_str(), "" | "{}" | "[]"),
    }
}

fn json_str(s: &str) -> String {
    // Serialising a &str cannot fail.
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into())
}

/// Pretty form, nested lines indented from `base` by `unit` (what JSON.stringify(v, null, 2)
/// writes, which is how these agents write their own files).
pub(super) fn render_pretty(j: &J, unit: &str, base: &str, out: &mut String) {
    match j {
        J::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        J::Num(n) => out.push_str(&n.to_string()),
        J::Str(s) => out.push_str(&json_str(s)),
        J::Arr(items) if items.is_empty() => out.push_str("[]"),
        J::Obj(pairs) if pairs.is_empty() => out.push_str("{}"),
        J::Arr(items) => {
            let inner = format!("{base}{unit}");
            out.push_str("[\n");
            for (i, item) in items.iter().enumerate() {
                out.push_str(&inner);
                render_pretty(item, unit, &inner, out);
                out.push_str(if i + 1 < items.len() { ",\n" } else { "\n" });
            }
            out.push_str(base);
            out.push(']');
        }
        J::Obj(pairs) => {
            let inner = format!("{base}{unit}");
            out.push_str("{\n");
            for (i, (k, v)) in pairs.iter().enumerate() {
                out.push_str(&inner);
                out.push_str(&json_str(k));
                out.push_str(": ");
                render_pretty(v, unit, &inner, out);
                out.push_str(if i + 1 < pairs.len() { ",\n" } else { "\n" });
            }
            out.push_str(base);
            out.push('}');
        }
    }
}

/// Separators for compact text: `:` or `: `, `,` or `, `.
#[derive(Clone, Copy)]
pub(super) struct Seps {
    pub(super) colon: &'static str,
    pub(super) comma: &'static str,
}

fn render_compact(j: &J, seps: Seps, out: &mut String) {
    match j {
        J::Arr(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(seps.comma);
                }
                render_compact(item, seps, out);
            }
            out.push(']');
        }
        J::Obj(pairs) => {
            out.push('{');
            for (i, (k, v)) in pairs.iter().enumerate() {
                if i > 0 {
                    out.push_str(seps.comma);
                }
                out.push_str(&json_str(k));
                out.push_str(seps.colon);
                render_compact(v, seps, out);
            }
            out.push('}');
        }
        other => render_pretty(other, "", "", out),
    }
}

pub(super) fn line_indent(text: &str, pos: usize) -> &str {
    let line_start = text[..pos].rfind('\n').map_or(0, |n| n + 1);
    let line = &text[line_start..];
    &line[..line.len() - line.trim_start_matches([' ', '\t']).len()]
}

/// Text to put after an existing child ending at `after`, or into an empty container.
pub(super) enum Splice {
    /// Insert `text` at byte `at`.
    Insert { at: usize, text: String },
    /// Replace bytes `start..end` with `text`.
    Replace {
        start: usize,
        end: usize,
        text: String,
    },
}

/// Applies a splice. In a file with CRLF line ends the inserted lines get CRLF too.
pub(super) fn apply(text: &str, s: Splice) -> String {
    let crlf = |t: String| {
        if text.contains("\r\n") {
            t.replace('\n', "\r\n")
        } else {
            t
        }
    };
    match s {
        Splice::Insert { at, text: t } => format!("{}{}{}", &text[..at], crlf(t), &text[at..]),
        Splice::Replace {
            start,
            end,
            text: t,
        } => format!("{}{}{}", &text[..start], crlf(t), &text[end..]),
    }
}

/// Where each child of a container starts and ends: (start, end) pairs, plus for objects the
/// end of each key (to read the `:` style).
fn children(node: &Node) -> Vec<(usize, usize, Option<usize>)> {
    match &node.kind {
        Kind::Obj(ms) => ms
            .iter()
            .map(|m| (m.key_start, m.value.end, Some(m.key_end)))
            .collect(),
        Kind::Arr(items) => items.iter().map(|n| (n.start, n.end, None)).collect(),
        _ => Vec::new(),
    }
}

/// The splice that adds one child (`entry`: `"key": value` or a bare value, rendered by
/// `render(base_indent, compact_seps)`) at the end of `container`.
pub(super) fn add_child(
    text: &str,
    container: &Node,
    style: &Style,
    render: &dyn Fn(&str, Option<Seps>) -> String,
) -> Splice {
    let kids = children(container);
    let (open, close) = match container.kind {
        Kind::Obj(_) => ('{', '}'),
        _ => ('[', ']'),
    };
    let Some(&(_, last_end, _)) = kids.last() else {
        let t = if style.compact {
            format!(
                "{open}{}{close}",
                render(
                    "",
                    Some(Seps {
                        colon: ":",
                        comma: ","
                    })
                )
            )
        } else {
            let ind = line_indent(text, container.start);
            let inner = format!("{ind}{}", style.unit);
            format!("{open}\n{inner}{}\n{ind}{close}", render(&inner, None))
        };
        return Splice::Replace {
            start: container.start,
            end: container.end,
            text: t,
        };
    };
    let (first_start, first_end, first_key_end) = kids[0];
    let multiline = text[container.start..first_start].contains('\n');
    if multiline && !style.compact {
        let ind = line_indent(text, kids[kids.len() - 1].0);
        Splice::Insert {
            at: last_end,
            text: format!(",\n{ind}{}", render(ind, None)),
        }
    } else {
        let colon = match first_key_end {
            Some(ke)
                if text[ke..].trim_start().starts_with(':') && text[ke..].starts_with(": ") =>
            {
                ": "
            }
            _ => ":",
        };
        let comma = match kids.get(1) {
            Some(&(second_start, _, _)) if text[first_end..second_start].contains(' ') => ", ",
            _ => ",",
        };
        let seps = Seps { colon, comma };
        Splice::Insert {
            at: last_end,
            text: format!("{comma}{}", render("", Some(seps))),
        }
    }
}

pub(super) fn render_entry(
    key: Option<&str>,
    j: &J,
    unit: &str,
    base: &str,
    seps: Option<Seps>,
) -> String {
    let mut out = String::new();
    if let Some(k) = key {
        out.push_str(&json_str(k));
        out.push_str(seps.map_or(": ", |s| s.colon));
    }
    match seps {
        Some(s) => render_compact(j, s, &mut out),
        None => render_pretty(j, unit, base, &mut out),
    }
    out
}

/// The splice that removes child `index` of `container`, with its separator.
pub(super) fn remove_child(container: &Node, index: usize) -> Splice {
    let kids = children(container);
    if kids.len() == 1 {
        return Splice::Replace {
            start: container.start + 1,
            end: container.end - 1,
            text: String::new(),
        };
    }
    if index + 1 < kids.len() {
        Splice::Replace {
            start: kids[index].0,
            end: kids[index + 1].0,
            text: String::new(),
        }
    } else {
        Splice::Replace {
            start: kids[index - 1].1,
            end: kids[index].1,
            text: String::new(),
        }
    }
}

pub(super) fn nest(path: &[&str], j: &J) -> J {
    path.iter()
        .rev()
        .fold(j.clone(), |inner, k| J::Obj(vec![((*k).to_owned(), inner)]))
}
