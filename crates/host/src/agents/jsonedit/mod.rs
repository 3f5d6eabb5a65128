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

mod merge;
mod parse;
mod splice;

pub use merge::{merge_object, set_member};

use parse::{find, parse, to_value, Kind};
use splice::{
    add_child, apply, nest, remove_child, render_entry, render_pretty, style_of, Seps, Splice,
};

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
                splice = Some(Splice::Replace {
                    start: m.value.start,
                    end: m.value.end,
                    text: merge::replacement(text, &style, node, m.key_start, &m.value, j),
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
mod tests;
