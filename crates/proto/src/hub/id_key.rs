//! `Id`, an envelope id as the queues and the ledger hold it (docs/performance.md "Memory per
//! envelope"): almost every id is a UUID in its canonical text (lowercase,
//! hyphenated: what `agent-hub send` and the hub make, `kernel::ids`), and those are kept as
//! their 16 bytes inline instead of a 52-byte heap block of text; any other string a client
//! chose is kept as its text, byte for byte.
//!
//! The two forms must never meet: an id is a UUID here exactly when its text is the canonical
//! form, so one text has one form and renders back to itself. Tables are keyed by `key`, the
//! bytes an id compares and hashes by: a text id's own UTF-8, a UUID's 16 bytes behind a 0xFF
//! byte, which UTF-8 never contains, so no text id can equal a UUID's key. A lookup by a
//! client's text builds the same key on the stack (`Key::of`) without allocating.
//!
//! Owns the type and its key. Refuses IO.

use std::borrow::Borrow;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

/// Bytes of a canonical UUID's text: 8-4-4-4-12 hex digits.
const UUID_TEXT: usize = 36;
/// A UUID's key: the 0xFF marker, then its 16 bytes.
const UUID_KEY: usize = 17;

/// An envelope id: a canonical UUID's bytes, or any other text.
#[derive(Clone)]
pub enum Id {
    /// `[0xFF, 16 bytes]`: the key itself.
    Uuid([u8; UUID_KEY]),
    Text(Arc<str>),
}

/// The 16 bytes of `text` when it is a UUID in canonical form (lowercase hex, hyphens at 8,
/// 13, 18 and 23), else None: upper case, braces or any other shape stay text.
fn canonical_uuid(text: &str) -> Option<[u8; 16]> {
    let b = text.as_bytes();
    if b.len() != UUID_TEXT {
        return None;
    }
    let mut out = [0u8; 16];
    let mut n = 0;
    let mut i = 0;
    while i < UUID_TEXT {
        if matches!(i, 8 | 13 | 18 | 23) {
            if b[i] != b'-' {
                return None;
            }
            i += 1;
            continue;
        }
        let digit = |c: u8| match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            _ => None,
        };
        out[n] = (digit(b[i])? << 4) | digit(b[i + 1])?;
        n += 1;
        i += 2;
    }
    Some(out)
}

impl Id {
    pub fn new(text: &str) -> Id {
        match canonical_uuid(text) {
            Some(bytes) => Id::Uuid(uuid_key(&bytes)),
            None => Id::Text(Arc::from(text)),
        }
    }

    /// The bytes this id compares and hashes by (module doc).
    pub fn key(&self) -> &[u8] {
        match self {
            Id::Uuid(k) => k,
            Id::Text(t) => t.as_bytes(),
        }
    }

    /// Whether this is the id a client wrote as `text`.
    pub fn is(&self, text: &str) -> bool {
        self.key() == Key::of(text).bytes()
    }

    /// The id's text, as the client wrote it; `f` sees it without an allocation.
    pub fn with_text<R>(&self, f: impl FnOnce(&str) -> R) -> R {
        match self {
            Id::Text(t) => f(t),
            Id::Uuid(k) => {
                let mut buf = [0u8; UUID_TEXT];
                f(render(k, &mut buf))
            }
        }
    }
}

fn uuid_key(bytes: &[u8; 16]) -> [u8; UUID_KEY] {
    let mut k = [0xFF; UUID_KEY];
    k[1..].copy_from_slice(bytes);
    k
}

/// A UUID key's canonical text, in `buf` (the uuid crate's lowercase hyphenated form, which
/// `canonical_uuid` accepts and nothing else).
fn render<'b>(k: &[u8; UUID_KEY], buf: &'b mut [u8; UUID_TEXT]) -> &'b str {
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&k[1..]);
    uuid::Uuid::from_bytes(bytes).hyphenated().encode_lower(buf)
}

/// The key of a client's id text, built on the stack for a lookup.
pub enum Key<'a> {
    Uuid([u8; UUID_KEY]),
    Text(&'a str),
}

impl<'a> Key<'a> {
    pub fn of(text: &'a str) -> Key<'a> {
        match canonical_uuid(text) {
            Some(bytes) => Key::Uuid(uuid_key(&bytes)),
            None => Key::Text(text),
        }
    }

    pub fn bytes(&self) -> &[u8] {
        match self {
            Key::Uuid(k) => k,
            Key::Text(t) => t.as_bytes(),
        }
    }
}

impl Borrow<[u8]> for Id {
    fn borrow(&self) -> &[u8] {
        self.key()
    }
}

impl PartialEq for Id {
    fn eq(&self, other: &Id) -> bool {
        self.key() == other.key()
    }
}

impl Eq for Id {}

impl PartialOrd for Id {
    fn partial_cmp(&self, other: &Id) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Id {
    fn cmp(&self, other: &Id) -> std::cmp::Ordering {
        self.key().cmp(other.key())
    }
}

impl Hash for Id {
    // As the key hashes, which `Borrow<[u8]>` requires.
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.key().hash(state)
    }
}

impl fmt::Display for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.with_text(|t| f.write_str(t))
    }
}

impl fmt::Debug for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.with_text(|t| fmt::Debug::fmt(t, f))
    }
}

impl From<&str> for Id {
    fn from(text: &str) -> Id {
        Id::new(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    const U: &str = "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d";

    #[test]
    fn a_canonical_uuid_is_held_inline_and_renders_back() {
        let id = Id::new(U);
        assert!(matches!(id, Id::Uuid(_)));
        assert_eq!(id.to_string(), U);
        assert!(id.is(U));
        assert!(std::mem::size_of::<Id>() <= 24);
    }

    /// Every shape that is not the canonical text stays text, byte for byte, so an id is
    /// always given back exactly as it was written.
    #[test]
    fn anything_else_stays_text() {
        let upper = U.to_uppercase();
        let braced = format!("{{{U}}}");
        let simple = U.replace('-', "");
        let mut shifted = U.to_string();
        shifted.replace_range(8..10, "0-"); // a hyphen one place early
        for text in [
            upper.as_str(),
            braced.as_str(),
            simple.as_str(),
            shifted.as_str(),
            &U[..35],
            "e1",
            "",
            "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4g",
            "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4é",
        ] {
            let id = Id::new(text);
            assert!(matches!(id, Id::Text(_)), "{text:?}");
            assert_eq!(id.to_string(), text);
            assert!(id.is(text));
        }
    }

    /// A text id cannot be made to land on a UUID's record: not its upper-case twin, and not
    /// a text whose bytes are the UUID's key without the marker.
    #[test]
    fn no_text_id_equals_a_uuid() {
        let uuid = Id::new(U);
        let mut table = HashMap::new();
        table.insert(uuid.clone(), "uuid");
        let raw = String::from_utf8_lossy(&uuid.key()[1..]).into_owned();
        for text in [U.to_uppercase(), raw, String::from("\u{FF}")] {
            let other = Id::new(&text);
            assert_ne!(other, uuid, "{text:?}");
            assert!(!table.contains_key(Key::of(&text).bytes()), "{text:?}");
        }
        assert_eq!(table.get(Key::of(U).bytes()), Some(&"uuid"));
    }

    /// Every byte value at every place: render after parse gives the text back.
    #[test]
    fn every_byte_round_trips() {
        for v in 0..=255u8 {
            for place in 0..16 {
                let mut bytes = [0x5Au8; 16];
                bytes[place] = v;
                let mut buf = [0u8; UUID_TEXT];
                let text = render(&uuid_key(&bytes), &mut buf).to_string();
                assert_eq!(canonical_uuid(&text), Some(bytes), "{text}");
                assert_eq!(Id::new(&text).to_string(), text);
            }
        }
    }
}
