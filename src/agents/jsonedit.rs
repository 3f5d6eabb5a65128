//! A lossless JSON editor for agents' config files: set, append or remove one entry and leave
//! every other byte — key order, indentation, comments, trailing commas — as it was.
//!
//! Why not serde_json: without its `preserve_order` feature (not available here) a parse and
//! re-serialise sorts every key of the user's file, and it drops JSONC comments (Gemini and
//! OpenCode accept them). So this parses the text into a tree of byte spans and splices text.
//!
//! Owns parsing JSON/JSONC into spans and the splices. Every edit checks itself: the result
//! is parsed again and must equal, as a value, the old value with exactly that change; if not,
//! the edit is refused (`Verify`) and the caller writes nothing. Refuses IO.

use serde_json::{Map, Value};
use std::fmt;

/// Deepest nesting accepted; deeper input is refused rather than risking the stack.
pub const MAX_DEPTH: usize = 200;

/// A JSON value we write, with its key order as written (serde_json's map would sort it).
#[derive(Debug, Clone, PartialEq)]
pub enum J {
    Bool(bool),
    Num(i64),
    Str(String),
    Arr(Vec<J>),
    Obj(Vec<(String, J)>),
}

impl J {
    pub fn str(s: impl Into<String>) -> J {
        J::Str(s.into())
    }

    pub fn obj(pairs: Vec<(&str, J)>) -> J {
        J::Obj(pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
    }

    pub fn to_value(&self) -> Value {
        match self {
            J::Bool(b) => Value::Bool(*b),
            J::Num(n) => Value::from(*n),
            J::Str(s) => Value::String(s.clone()),
            J::Arr(items) => Value::Array(items.iter().map(J::to_value).collect()),
            J::Obj(pairs) => {
                let mut m = Map::new();
                for (k, v) in pairs {
                    m.insert(k.clone(), v.to_value());
                }
                Value::Object(m)
            }
        }
    }
}

/// One step of a path: an object key or an array index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seg<'a> {
    Key(&'a str),
    Index(usize),
}

fn show_path(path: &[Seg]) -> String {
    let mut s = String::new();
    for seg in path {
        match seg {
            Seg::Key(k) => {
                if !s.is_empty() {
                    s.push('.');
                }
                s.push_str(k);
            }
            Seg::Index(i) => s.push_str(&format!("[{i}]")),
        }
    }
    if s.is_empty() {
        "the top level".into()
    } else {
        s
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JsonEditError {
    /// The file is not JSON (or JSONC): where and why.
    Parse {
        line: usize,
        column: usize,
        message: String,
    },
    /// Something on the path is not the object or array the entry has to go into.
    NotContainer {
        at: String,
        expected: &'static str,
    },
    TooDeep,
    /// The edited text did not come out as exactly the intended change; nothing is written.
    Verify(String),
}

impl fmt::Display for JsonEditError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JsonEditError::Parse {
                line,
                column,
                message,
            } => write!(f, "not valid JSON at line {line}, column {column}: {message}"),
            JsonEditError::NotContainer { at, expected } => {
                write!(f, "{at} is not {expected}, so the entry cannot go there")
            }
            JsonEditError::TooDeep => write!(f, "nested deeper than {MAX_DEPTH} levels"),
            JsonEditError::Verify(m) => write!(
                f,
                "the edit did not come out as intended ({m}); nothing was written, please edit by hand"
            ),
        }
    }
}

impl std::error::Error for JsonEditError {}

type Result<T> = std::result::Result<T, JsonEditError>;

// ----- the span tree -----

#[derive(Debug)]
struct Node {
    start: usize,
    end: usize,
    kind: Kind,
}

#[derive(Debug)]
enum Kind {
    Obj(Vec<Member>),
    Arr(Vec<Node>),
    Str(String),
    /// Number, true, false, null: read back through serde_json from the span.
    Other,
}

#[derive(Debug)]
struct Member {
    key: String,
    key_start: usize,
    key_end: usize,
    value: Node,
}

struct Parser<'a> {
    s: &'a str,
    b: &'a [u8],
    i: usize,
}

fn line_col(s: &str, at: usize) -> (usize, usize) {
    let before = &s[..at.min(s.len())];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

impl<'a> Parser<'a> {
    fn err(&self, message: impl Into<String>) -> JsonEditError {
        let (line, column) = line_col(self.s, self.i);
        JsonEditError::Parse {
            line,
            column,
            message: message.into(),
        }
    }

    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    /// Skips whitespace and `//` / `/* */` comments.
    fn ws(&mut self) -> Result<()> {
        loop {
            match self.peek() {
                Some(b' ' | b'\t' | b'\n' | b'\r') => self.i += 1,
                Some(b'/') if self.b.get(self.i + 1) == Some(&b'/') => {
                    while !matches!(self.peek(), None | Some(b'\n')) {
                        self.i += 1;
                    }
                }
                Some(b'/') if self.b.get(self.i + 1) == Some(&b'*') => {
                    match self.s[self.i + 2..].find("*/") {
                        Some(n) => self.i += 2 + n + 2,
                        None => return Err(self.err("unterminated /* comment")),
                    }
                }
                _ => return Ok(()),
            }
        }
    }

    fn value(&mut self, depth: usize) -> Result<Node> {
        if depth > MAX_DEPTH {
            return Err(JsonEditError::TooDeep);
        }
        let start = self.i;
        match self.peek() {
            Some(b'{') => {
                self.i += 1;
                let mut members = Vec::new();
                loop {
                    self.ws()?;
                    match self.peek() {
                        Some(b'}') => {
                            self.i += 1;
                            break;
                        }
                        Some(b'"') => {}
                        _ => return Err(self.err("expected a key or }")),
                    }
                    let key_start = self.i;
                    let key = self.string()?;
                    let key_end = self.i;
                    self.ws()?;
                    if self.peek() != Some(b':') {
                        return Err(self.err("expected :"));
                    }
                    self.i += 1;
                    self.ws()?;
                    let value = self.value(depth + 1)?;
                    members.push(Member {
                        key,
                        key_start,
                        key_end,
                        value,
                    });
                    self.ws()?;
                    match self.peek() {
                        // A trailing comma (JSONC) is accepted: the next turn sees `}`.
                        Some(b',') => self.i += 1,
                        Some(b'}') => {
                            self.i += 1;
                            break;
                        }
                        _ => return Err(self.err("expected , or }")),
                    }
                }
                Ok(Node {
                    start,
                    end: self.i,
                    kind: Kind::Obj(members),
                })
            }
            Some(b'[') => {
                self.i += 1;
                let mut items = Vec::new();
                loop {
                    self.ws()?;
                    if self.peek() == Some(b']') {
                        self.i += 1;
                        break;
                    }
                    items.push(self.value(depth + 1)?);
                    self.ws()?;
                    match self.peek() {
                        Some(b',') => self.i += 1,
                        Some(b']') => {
                            self.i += 1;
                            break;
                        }
                        _ => return Err(self.err("expected , or ]")),
                    }
                }
                Ok(Node {
                    start,
                    end: self.i,
                    kind: Kind::Arr(items),
                })
            }
            Some(b'"') => {
                let s = self.string()?;
                Ok(Node {
                    start,
                    end: self.i,
                    kind: Kind::Str(s),
                })
            }
            Some(b't' | b'f' | b'n') => {
                let word = ["true", "false", "null"]
                    .into_iter()
                    .find(|w| self.s[self.i..].starts_with(w))
                    .ok_or_else(|| self.err("expected a value"))?;
                self.i += word.len();
                if self.peek().is_some_and(|c| c.is_ascii_alphanumeric()) {
                    return Err(self.err("expected a value"));
                }
                Ok(Node {
                    start,
                    end: self.i,
                    kind: Kind::Other,
                })
            }
            Some(b'-' | b'0'..=b'9') => {
                while self.peek().is_some_and(|c| {
                    c.is_ascii_digit() || matches!(c, b'-' | b'+' | b'.' | b'e' | b'E')
                }) {
                    self.i += 1;
                }
                if serde_json::from_str::<serde_json::Number>(&self.s[start..self.i]).is_err() {
                    self.i = start;
                    return Err(self.err("invalid number"));
                }
                Ok(Node {
                    start,
                    end: self.i,
                    kind: Kind::Other,
                })
            }
            None => Err(self.err("unexpected end of file")),
            Some(_) => Err(self.err("expected a value")),
        }
    }

    /// A string token at `self.i`, decoded.
    fn string(&mut self) -> Result<String> {
        let start = self.i;
        self.i += 1;
        loop {
            match self.peek() {
                None => return Err(self.err("unterminated string")),
                Some(b'"') => {
                    self.i += 1;
                    break;
                }
                Some(b'\\') => self.i += 2,
                Some(c) if c < 0x20 => return Err(self.err("control character inside a string")),
                Some(_) => self.i += 1,
            }
        }
        if self.i > self.b.len() {
            return Err(self.err("unterminated string"));
        }
        serde_json::from_str::<String>(&self.s[start..self.i]).map_err(|e| {
            self.i = start;
            self.err(format!("invalid string: {e}"))
        })
    }
}

/// Parses JSON or JSONC. `Ok(None)` for a document with no value (empty, or only comments).
fn parse(text: &str) -> Result<Option<Node>> {
    let mut p = Parser {
        s: text,
        b: text.as_bytes(),
        i: if text.starts_with('\u{feff}') { 3 } else { 0 },
    };
    p.ws()?;
    if p.peek().is_none() {
        return Ok(None);
    }
    let root = p.value(0)?;
    p.ws()?;
    if p.peek().is_some() {
        return Err(p.err("unexpected text after the value"));
    }
    Ok(Some(root))
}

fn to_value(text: &str, node: &Node) -> Result<Value> {
    Ok(match &node.kind {
        Kind::Obj(members) => {
            let mut m = Map::new();
            for mem in members {
                m.insert(mem.key.clone(), to_value(text, &mem.value)?);
            }
            Value::Object(m)
        }
        Kind::Arr(items) => Value::Array(
            items
                .iter()
                .map(|n| to_value(text, n))
                .collect::<Result<Vec<_>>>()?,
        ),
        Kind::Str(s) => Value::String(s.clone()),
        Kind::Other => serde_json::from_str(&text[node.start..node.end])
            .map_err(|e| JsonEditError::Verify(e.to_string()))?,
    })
}

/// The whole document as a value (an empty document is `null`).
pub fn value(text: &str) -> Result<Value> {
    match parse(text)? {
        None => Ok(Value::Null),
        Some(root) => to_value(text, &root),
    }
}

/// The value at `path`, if there is one.
pub fn get(text: &str, path: &[Seg]) -> Result<Option<Value>> {
    let Some(root) = parse(text)? else {
        return Ok(None);
    };
    match find(&root, path) {
        Some(n) => Ok(Some(to_value(text, n)?)),
        None => Ok(None),
    }
}

/// The child of `node` at `seg`. Duplicate keys: the last one, as every JSON reader takes.
fn child<'n>(node: &'n Node, seg: Seg) -> Option<&'n Node> {
    match (&node.kind, seg) {
        (Kind::Obj(members), Seg::Key(k)) => {
            members.iter().rev().find(|m| m.key == k).map(|m| &m.value)
        }
        (Kind::Arr(items), Seg::Index(i)) => items.get(i),
        _ => None,
    }
}

fn find<'n>(root: &'n Node, path: &[Seg]) -> Option<&'n Node> {
    path.iter().try_fold(root, |n, &seg| child(n, seg))
}

// ----- rendering -----

/// How the file is laid out, so inserted text looks like its neighbours.
struct Style {
    /// One level of indentation: the first indented line's leading whitespace, else 2 spaces.
    unit: String,
    /// The whole file is on one line: insert compactly.
    compact: bool,
}

fn style_of(text: &str) -> Style {
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
fn render_pretty(j: &J, unit: &str, base: &str, out: &mut String) {
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
struct Seps {
    colon: &'static str,
    comma: &'static str,
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

fn line_indent(text: &str, pos: usize) -> &str {
    let line_start = text[..pos].rfind('\n').map_or(0, |n| n + 1);
    let line = &text[line_start..];
    &line[..line.len() - line.trim_start_matches([' ', '\t']).len()]
}

/// Text to put after an existing child ending at `after`, or into an empty container.
enum Splice {
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
fn apply(text: &str, s: Splice) -> String {
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
fn add_child(
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

fn render_entry(key: Option<&str>, j: &J, unit: &str, base: &str, seps: Option<Seps>) -> String {
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
fn remove_child(container: &Node, index: usize) -> Splice {
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

fn nest(path: &[&str], j: &J) -> J {
    path.iter()
        .rev()
        .fold(j.clone(), |inner, k| J::Obj(vec![((*k).to_owned(), inner)]))
}

// ----- value-level twins of the edits, for the self-check -----

fn value_set(v: &mut Value, path: &[&str], new: Value) {
    if !v.is_object() {
        *v = Value::Object(Map::new());
    }
    let Some((first, rest)) = path.split_first() else {
        *v = new;
        return;
    };
    let Value::Object(m) = v else { return };
    let slot = m.entry((*first).to_owned()).or_insert(Value::Null);
    if rest.is_empty() {
        *slot = new;
    } else {
        value_set(slot, rest, new);
    }
}

fn value_remove(v: &mut Value, path: &[Seg]) {
    let Some((last, parent)) = path.split_last() else {
        return;
    };
    let mut cur = v;
    for seg in parent {
        cur = match (cur, seg) {
            (Value::Object(m), Seg::Key(k)) => match m.get_mut(*k) {
                Some(c) => c,
                None => return,
            },
            (Value::Array(a), Seg::Index(i)) => match a.get_mut(*i) {
                Some(c) => c,
                None => return,
            },
            _ => return,
        };
    }
    match (cur, last) {
        (Value::Object(m), Seg::Key(k)) => {
            m.remove(*k);
        }
        (Value::Array(a), Seg::Index(i)) if *i < a.len() => {
            a.remove(*i);
        }
        _ => {}
    }
}

fn verify(new_text: &str, expected: &Value) -> Result<String> {
    let got = value(new_text)
        .map_err(|e| JsonEditError::Verify(format!("the result does not parse: {e}")))?;
    if &got != expected {
        return Err(JsonEditError::Verify(
            "the result differs from the intended value".into(),
        ));
    }
    Ok(new_text.to_owned())
}

// ----- the edits -----

/// Sets `path` (object keys) to `j`, creating the objects on the way. Replaces an existing
/// value in place; adds a missing key after its last sibling.
pub fn set(text: &str, path: &[&str], j: &J) -> Result<String> {
    if path.is_empty() {
        return Err(JsonEditError::NotContainer {
            at: "the top level".into(),
            expected: "replaceable",
        });
    }
    let style = style_of(text);
    let Some(root) = parse(text)? else {
        // No document yet: write one, after whatever comments were there.
        let mut out = String::new();
        if !text.trim().is_empty() {
            out.push_str(text.trim_end());
            out.push('\n');
        }
        render_pretty(&nest(path, j), &style.unit, "", &mut out);
        out.push('\n');
        let mut expected = Value::Null;
        value_set(&mut expected, path, j.to_value());
        return verify(&out, &expected);
    };
    let mut expected = to_value(text, &root)?;
    let mut node = &root;
    let mut splice = None;
    for (depth, key) in path.iter().enumerate() {
        let Kind::Obj(members) = &node.kind else {
            let segs: Vec<Seg> = path[..depth].iter().map(|k| Seg::Key(k)).collect();
            return Err(JsonEditError::NotContainer {
                at: show_path(&segs),
                expected: "an object",
            });
        };
        match members.iter().rev().find(|m| m.key == *key) {
            Some(m) if depth + 1 == path.len() => {
                let inline =
                    style.compact || !text[node.start..members[0].key_start].contains('\n');
                let rendered = if inline {
                    let seps = Seps {
                        colon: ":",
                        comma: if text[m.value.start..m.value.end].contains(", ") {
                            ", "
                        } else {
                            ","
                        },
                    };
                    render_entry(None, j, "", "", Some(seps))
                } else {
                    render_entry(None, j, &style.unit, line_indent(text, m.key_start), None)
                };
                splice = Some(Splice::Replace {
                    start: m.value.start,
                    end: m.value.end,
                    text: rendered,
                });
                break;
            }
            Some(m) => node = &m.value,
            None => {
                let rest = nest(&path[depth + 1..], j);
                let unit = style.unit.clone();
                let render = |base: &str, seps: Option<Seps>| {
                    render_entry(Some(key), &rest, &unit, base, seps)
                };
                splice = Some(add_child(text, node, &style, &render));
                break;
            }
        }
    }
    let Some(splice) = splice else {
        return Err(JsonEditError::NotContainer {
            at: show_path(&path.iter().map(|k| Seg::Key(k)).collect::<Vec<_>>()),
            expected: "an object",
        });
    };
    value_set(&mut expected, path, j.to_value());
    verify(&apply(text, splice), &expected)
}

/// Appends `j` to the array at `path` (object keys), creating the array (and the objects on
/// the way) when it is missing.
pub fn append(text: &str, path: &[&str], j: &J) -> Result<String> {
    let segs: Vec<Seg> = path.iter().map(|k| Seg::Key(k)).collect();
    let root = parse(text)?;
    let existing = root.as_ref().and_then(|r| find(r, &segs));
    let Some(arr) = existing else {
        return set(text, path, &J::Arr(vec![j.clone()]));
    };
    let Kind::Arr(_) = arr.kind else {
        return Err(JsonEditError::NotContainer {
            at: show_path(&segs),
            expected: "an array",
        });
    };
    let style = style_of(text);
    let unit = style.unit.clone();
    let render = |base: &str, seps: Option<Seps>| render_entry(None, j, &unit, base, seps);
    let splice = add_child(text, arr, &style, &render);
    let Some(root) = root.as_ref() else {
        return Err(JsonEditError::Verify("no document".into()));
    };
    let mut expected = to_value(text, root)?;
    let mut items = match get(text, &segs)? {
        Some(Value::Array(items)) => items,
        _ => Vec::new(),
    };
    items.push(j.to_value());
    value_set(&mut expected, path, Value::Array(items));
    verify(&apply(text, splice), &expected)
}

/// Removes the entry at `path` (a member or an array element). `Ok(None)` when there is none.
pub fn remove(text: &str, path: &[Seg]) -> Result<Option<String>> {
    let Some((last, parent_path)) = path.split_last() else {
        return Ok(None);
    };
    let Some(root) = parse(text)? else {
        return Ok(None);
    };
    let Some(parent) = find(&root, parent_path) else {
        return Ok(None);
    };
    let index = match (&parent.kind, last) {
        (Kind::Obj(ms), Seg::Key(k)) => ms.iter().rposition(|m| m.key == *k),
        (Kind::Arr(items), Seg::Index(i)) => (*i < items.len()).then_some(*i),
        _ => None,
    };
    let Some(index) = index else {
        return Ok(None);
    };
    let mut expected = to_value(text, &root)?;
    value_remove(&mut expected, path);
    verify(&apply(text, remove_child(parent, index)), &expected).map(Some)
}

/// True when the value at `path` is an empty object or array.
pub fn is_empty_container(text: &str, path: &[Seg]) -> Result<bool> {
    Ok(match get(text, path)? {
        Some(Value::Object(m)) => m.is_empty(),
        Some(Value::Array(a)) => a.is_empty(),
        _ => false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry() -> J {
        J::obj(vec![
            ("command", J::str("/bin/hub")),
            ("args", J::Arr(vec![J::str("mcp")])),
        ])
    }

    #[test]
    fn set_adds_after_the_last_sibling_keeping_order_and_comments() {
        let before = "{\n  // mine\n  \"zeta\": 1,\n  \"alpha\": [1, 2],\n  \"mcpServers\": {\n    \"other\": {\"command\": \"x\"}\n  }\n}\n";
        let after = set(before, &["mcpServers", "agent-hub"], &entry()).unwrap();
        assert_eq!(
            after,
            "{\n  // mine\n  \"zeta\": 1,\n  \"alpha\": [1, 2],\n  \"mcpServers\": {\n    \"other\": {\"command\": \"x\"},\n    \"agent-hub\": {\n      \"command\": \"/bin/hub\",\n      \"args\": [\n        \"mcp\"\n      ]\n    }\n  }\n}\n"
        );
        let back = remove(&after, &[Seg::Key("mcpServers"), Seg::Key("agent-hub")])
            .unwrap()
            .unwrap();
        assert_eq!(back, before);
    }

    #[test]
    fn set_creates_missing_objects_and_remove_reverses_it() {
        let before = "{\n    \"theme\": \"dark\"\n}";
        let after = set(before, &["hooks", "Stop"], &J::Arr(vec![])).unwrap();
        assert_eq!(
            after,
            "{\n    \"theme\": \"dark\",\n    \"hooks\": {\n        \"Stop\": []\n    }\n}"
        );
        assert_eq!(
            remove(&after, &[Seg::Key("hooks")]).unwrap().unwrap(),
            before
        );
    }

    #[test]
    fn empty_documents_and_empty_objects() {
        assert_eq!(set("", &["a"], &J::Num(1)).unwrap(), "{\n  \"a\": 1\n}\n");
        let after = set("{}\n", &["a"], &J::Num(1)).unwrap();
        assert_eq!(after, "{\n  \"a\": 1\n}\n");
        assert_eq!(remove(&after, &[Seg::Key("a")]).unwrap().unwrap(), "{}\n");
        assert_eq!(remove("{}", &[Seg::Key("a")]).unwrap(), None);
        assert_eq!(remove("", &[Seg::Key("a")]).unwrap(), None);
    }

    #[test]
    fn replacing_an_existing_value_leaves_its_neighbours() {
        let before = "{\n  \"a\": {\"old\": true},\n  \"b\": 2\n}\n";
        let after = set(before, &["a"], &J::obj(vec![("new", J::Bool(true))])).unwrap();
        assert_eq!(
            after,
            "{\n  \"a\": {\n    \"new\": true\n  },\n  \"b\": 2\n}\n"
        );
    }

    #[test]
    fn compact_files_stay_compact() {
        let after = set("{\"a\":1,\"b\":{}}", &["c"], &entry()).unwrap();
        assert_eq!(
            after,
            "{\"a\":1,\"b\":{},\"c\":{\"command\":\"/bin/hub\",\"args\":[\"mcp\"]}}"
        );
        let after = set("{\"a\": 1, \"b\": 2}", &["c"], &J::Num(3)).unwrap();
        assert_eq!(after, "{\"a\": 1, \"b\": 2, \"c\": 3}");
    }

    #[test]
    fn append_and_remove_elements() {
        let before = "{\n  \"Stop\": [\n    {\"x\": 1}\n  ]\n}\n";
        let after = append(before, &["Stop"], &J::obj(vec![("y", J::Num(2))])).unwrap();
        assert_eq!(
            after,
            "{\n  \"Stop\": [\n    {\"x\": 1},\n    {\n      \"y\": 2\n    }\n  ]\n}\n"
        );
        assert_eq!(
            remove(&after, &[Seg::Key("Stop"), Seg::Index(1)])
                .unwrap()
                .unwrap(),
            before
        );
        let first_gone = remove(&after, &[Seg::Key("Stop"), Seg::Index(0)])
            .unwrap()
            .unwrap();
        assert_eq!(
            first_gone,
            "{\n  \"Stop\": [\n    {\n      \"y\": 2\n    }\n  ]\n}\n"
        );
        let created = append("{}", &["hooks", "Stop"], &J::Num(1)).unwrap();
        assert_eq!(
            value(&created).unwrap(),
            serde_json::json!({"hooks": {"Stop": [1]}})
        );
    }

    #[test]
    fn middle_member_removal() {
        let t = "{\n  \"a\": 1,\n  \"b\": 2,\n  \"c\": 3\n}";
        assert_eq!(
            remove(t, &[Seg::Key("b")]).unwrap().unwrap(),
            "{\n  \"a\": 1,\n  \"c\": 3\n}"
        );
        assert_eq!(
            remove(t, &[Seg::Key("a")]).unwrap().unwrap(),
            "{\n  \"b\": 2,\n  \"c\": 3\n}"
        );
    }

    #[test]
    fn tabs_and_crlf_are_followed() {
        let before = "{\r\n\t\"a\": 1\r\n}\r\n";
        let after = set(before, &["b"], &J::Num(2)).unwrap();
        assert_eq!(value(&after).unwrap(), serde_json::json!({"a": 1, "b": 2}));
        assert_eq!(after, "{\r\n\t\"a\": 1,\r\n\t\"b\": 2\r\n}\r\n");
        assert_eq!(remove(&after, &[Seg::Key("b")]).unwrap().unwrap(), before);
    }

    #[test]
    fn jsonc_trailing_commas_and_block_comments() {
        let before = "{\n  /* block */ \"a\": 1, // line\n}\n";
        let after = set(before, &["b"], &J::Num(2)).unwrap();
        assert_eq!(value(&after).unwrap(), serde_json::json!({"a": 1, "b": 2}));
        assert_eq!(remove(&after, &[Seg::Key("b")]).unwrap().unwrap(), before);
    }

    #[test]
    fn strings_with_escapes_and_unicode_survive() {
        let before = "{\"k\\\"ey\": \"v\\u00e9\\n\", \"ü\": \"✓\"}";
        let after = set(before, &["z"], &J::str("a\"b")).unwrap();
        let v = value(&after).unwrap();
        assert_eq!(v["k\"ey"], "vé\n");
        assert_eq!(v["ü"], "✓");
        assert_eq!(v["z"], "a\"b");
    }

    #[test]
    fn errors() {
        assert!(matches!(
            set("{\"a\": }", &["b"], &J::Num(1)),
            Err(JsonEditError::Parse {
                line: 1,
                column: 7,
                ..
            })
        ));
        assert!(matches!(
            set("[1]", &["b"], &J::Num(1)),
            Err(JsonEditError::NotContainer { .. })
        ));
        assert!(matches!(
            set("{\"hooks\": 3}", &["hooks", "Stop"], &J::Num(1)),
            Err(JsonEditError::NotContainer { .. })
        ));
        assert!(matches!(
            append("{\"a\": {}}", &["a"], &J::Num(1)),
            Err(JsonEditError::NotContainer { .. })
        ));
        assert!(matches!(
            value("{\"a\": 1} x"),
            Err(JsonEditError::Parse { .. })
        ));
        assert!(matches!(value("\"abc"), Err(JsonEditError::Parse { .. })));
        assert!(matches!(value("/* x"), Err(JsonEditError::Parse { .. })));
        assert!(matches!(value("nul"), Err(JsonEditError::Parse { .. })));
        assert!(matches!(value("01x"), Err(JsonEditError::Parse { .. })));
        assert_eq!(value(&"[".repeat(500)), Err(JsonEditError::TooDeep));
    }

    #[test]
    fn duplicate_keys_are_refused_rather_than_guessed() {
        // Removing the last "a" would resurface the first: not the intended change.
        let t = "{\"a\": 1, \"a\": 2}";
        assert!(matches!(
            remove(t, &[Seg::Key("a")]),
            Err(JsonEditError::Verify(_))
        ));
    }

    #[test]
    fn a_bom_is_kept() {
        let before = "\u{feff}{\n  \"a\": 1\n}\n";
        let after = set(before, &["b"], &J::Num(2)).unwrap();
        assert!(after.starts_with('\u{feff}'));
        assert_eq!(remove(&after, &[Seg::Key("b")]).unwrap().unwrap(), before);
    }
}
