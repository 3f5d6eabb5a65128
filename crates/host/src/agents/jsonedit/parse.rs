//! The span parser of the JSON editor: JSON or JSONC text into a tree of nodes that keep the
//! byte range of every value and key, so an edit can splice text next to them (docs/agents.md).
//!
//! Owns the scanner (whitespace, `//` and `/* */` comments, trailing commas, a leading BOM,
//! the depth cap `MAX_DEPTH`), reading a node back as a `serde_json::Value`, and finding a
//! node by path. Refuses: malformed text, with its line and column.

use super::{JsonEditError, Result, Seg, MAX_DEPTH};
use serde_json::{Map, Value};

#[derive(Debug)]
pub(super) struct Node {
    pub(super) start: usize,
    pub(super) end: usize,
    pub(super) kind: Kind,
}

#[derive(Debug)]
pub(super) enum Kind {
    Obj(Vec<Member>),
    Arr(Vec<Node>),
    Str(String),
    /// Number, true, false, null: read back through serde_json from the span.
    Other,
}

#[derive(Debug)]
pub(super) struct Member {
    pub(super) key: String,
    pub(super) key_start: usize,
    pub(super) key_end: usize,
    pub(super) value: Node,
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
pub(super) fn parse(text: &str) -> Result<Option<Node>> {
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

pub(super) fn to_value(text: &str, node: &Node) -> Result<Value> {
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

/// The child of `node` at `seg`. Duplicate keys: the last one, as every JSON reader takes.
pub(super) fn child<'n>(node: &'n Node, seg: Seg) -> Option<&'n Node> {
    match (&node.kind, seg) {
        (Kind::Obj(members), Seg::Key(k)) => {
            members.iter().rev().find(|m| m.key == k).map(|m| &m.value)
        }
        (Kind::Arr(items), Seg::Index(i)) => items.get(i),
        _ => None,
    }
}

pub(super) fn find<'n>(root: &'n Node, path: &[Seg]) -> Option<&'n Node> {
    path.iter().try_fold(root, |n, &seg| child(n, seg))
}
