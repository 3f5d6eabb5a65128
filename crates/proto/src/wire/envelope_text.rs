//! An envelope's canonical text (`Envelope::to_json`) kept without the fields its holder
//! already has: what a queued envelope keeps of its text (docs/performance.md, "Memory per
//! envelope").
//!
//! A queue entry holds the id, sender, recipient, kind and correlation id as shared or inline
//! values for routing and matching; the text repeated all five. A `Tail` keeps only what is
//! nowhere else, the `ts` as its JSON string and the body's raw text, and writes the whole
//! canonical text back from the two, byte for byte, when the envelope is delivered, forwarded
//! or logged. A text read back from a store that is not exactly the canonical text of its
//! row's fields is kept whole (`Tail::verbatim`) and written back as it was.
//!
//! Owns: the canonical layout (key order, `correlationId` always present), writing it from
//! parts, and checking a stored text against it (`split`). Refuses: anything else about an
//! envelope's fields; their rules are `wire::envelope`'s.

use super::json_text::{push_str, str_len, strip_str};
use serde_json::value::RawValue;

/// The fields the holder keeps beside a `Tail`.
#[derive(Debug, Clone, Copy)]
pub struct Parts<'a> {
    pub id: &'a str,
    pub from: &'a str,
    pub to: &'a str,
    pub kind: &'a str,
    pub correlation_id: Option<&'a str>,
}

/// The bytes of the canonical layout outside the field values: `{"id":`, `,"from":`,
/// `,"to":`, `,"ts":`, `,"kind":`, `,"correlationId":`, `,"body":` and `}`.
const FRAME: usize = 6 + 8 + 6 + 6 + 8 + 17 + 8 + 1;

/// Where a stored text's `ts` string and body are (`split`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Split {
    /// The `ts` value as written, quotes included.
    pub ts: (usize, usize),
    /// The body's raw text.
    pub body: (usize, usize),
}

/// Marks a verbatim tail. The canonical form starts with the `ts` string's quote, and no
/// text `split` refuses is rebuilt, so the two forms never meet.
const VERBATIM: char = '\0';

/// What a queued envelope keeps of its text: the `ts` string and the body, or (marked by a
/// leading NUL) a stored text that is not its fields' canonical text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tail(Box<str>);

impl Tail {
    /// The tail of an envelope whose `ts` is `ts` and body's raw text `body`.
    pub fn new(ts: &str, body: &str) -> Tail {
        let mut s = String::with_capacity(str_len(ts) + body.len());
        push_str(&mut s, ts);
        s.push_str(body);
        Tail(s.into_boxed_str())
    }

    /// The tail of `text` cut where `split` found its `ts` and body. A `Split` that does not
    /// fit `text` (never one `split` made for it) keeps the text whole instead of panicking.
    pub fn from_split(text: &str, at: Split) -> Tail {
        let (Some(ts), Some(body)) = (text.get(at.ts.0..at.ts.1), text.get(at.body.0..at.body.1))
        else {
            return Tail::verbatim(text);
        };
        let mut s = String::with_capacity(ts.len() + body.len());
        s.push_str(ts);
        s.push_str(body);
        Tail(s.into_boxed_str())
    }

    /// `text` kept whole, written back exactly as it is.
    pub fn verbatim(text: &str) -> Tail {
        let mut s = String::with_capacity(text.len() + 1);
        s.push(VERBATIM);
        s.push_str(text);
        Tail(s.into_boxed_str())
    }

    /// A stored `text`, cut where `split` found its `ts` and body, or kept whole when it
    /// found none.
    pub fn from_stored(text: &str, cut: Option<Split>) -> Tail {
        match cut {
            Some(at) => Tail::from_split(text, at),
            None => Tail::verbatim(text),
        }
    }

    /// A stored `text` for the envelope of `parts`: cut when it is their canonical text,
    /// kept whole otherwise.
    pub fn of_text(text: &str, parts: &Parts<'_>) -> Tail {
        Tail::from_stored(text, split(text, parts))
    }

    /// Whether this tail is a whole stored text rather than the `ts` and body.
    pub fn is_verbatim(&self) -> bool {
        self.0.starts_with(VERBATIM)
    }

    /// The canonical tail's `ts` string and body.
    fn halves(&self) -> (&str, &str) {
        // Every canonical tail starts with a whole JSON string in `push_str`'s spelling
        // (`new`, or `from_split` after `strip_ts`). Should the scan find none all the same,
        // the cut falls at the end, so the text written stays as long as `text_len` says.
        let end = string_end(self.0.as_bytes()).map_or(self.0.len(), |(end, _)| end);
        match self.0.get(end..) {
            Some(body) => (&self.0[..end], body),
            None => (&self.0, ""),
        }
    }

    /// The length of the text `push_text` writes.
    pub fn text_len(&self, parts: &Parts<'_>) -> usize {
        if self.is_verbatim() {
            return self.0.len() - VERBATIM.len_utf8();
        }
        FRAME
            + str_len(parts.id)
            + str_len(parts.from)
            + str_len(parts.to)
            + str_len(parts.kind)
            + parts.correlation_id.map_or(4, str_len)
            + self.0.len()
    }

    /// Appends the envelope's text: its canonical text for `parts`, or the stored text kept.
    /// The caller reserves the room (`text_len`, or a length it holds already).
    pub fn push_text(&self, out: &mut String, parts: &Parts<'_>) {
        if let Some(whole) = self.0.strip_prefix(VERBATIM) {
            out.push_str(whole);
            return;
        }
        let (ts, body) = self.halves();
        out.push_str("{\"id\":");
        push_str(out, parts.id);
        out.push_str(",\"from\":");
        push_str(out, parts.from);
        out.push_str(",\"to\":");
        push_str(out, parts.to);
        out.push_str(",\"ts\":");
        out.push_str(ts);
        out.push_str(",\"kind\":");
        push_str(out, parts.kind);
        out.push_str(",\"correlationId\":");
        match parts.correlation_id {
            Some(c) => push_str(out, c),
            None => out.push_str("null"),
        }
        out.push_str(",\"body\":");
        out.push_str(body);
        out.push('}');
    }

    /// The envelope's text on its own.
    pub fn text(&self, parts: &Parts<'_>) -> String {
        let mut s = String::with_capacity(self.text_len(parts));
        self.push_text(&mut s, parts);
        s
    }

    /// Bytes this tail holds (tests and the docs' memory accounting).
    pub fn held_bytes(&self) -> usize {
        self.0.len()
    }
}

/// Where `text` keeps its `ts` and body, if it is exactly the canonical text
/// (`Envelope::to_json`) of an envelope with `parts`: every field in its place and spelled
/// as `push_str` spells it, the `ts` a JSON string, the body one JSON value with nothing
/// around it. A text this accepts is valid JSON; a text it refuses may still be (another
/// key order, whitespace, other escapes), and is the caller's to check and keep whole.
pub fn split(text: &str, parts: &Parts<'_>) -> Option<Split> {
    let at = |rest: &str| text.len() - rest.len();
    let rest = text.strip_prefix("{\"id\":")?;
    let rest = strip_str(rest, parts.id)?.strip_prefix(",\"from\":")?;
    let rest = strip_str(rest, parts.from)?.strip_prefix(",\"to\":")?;
    let rest = strip_str(rest, parts.to)?.strip_prefix(",\"ts\":")?;
    let ts_start = at(rest);
    let rest = strip_ts(rest)?;
    let ts = (ts_start, at(rest));
    let rest = rest.strip_prefix(",\"kind\":")?;
    let rest = strip_str(rest, parts.kind)?.strip_prefix(",\"correlationId\":")?;
    let rest = match parts.correlation_id {
        Some(c) => strip_str(rest, c)?,
        None => rest.strip_prefix("null")?,
    };
    let rest = rest.strip_prefix(",\"body\":")?;
    let start = at(rest);
    let body = rest.strip_suffix('}')?;
    // One value and nothing around it: serde reads past whitespace, and a raw value's text
    // leaves it out, so a shorter value means the span held more than the value.
    let raw: &RawValue = serde_json::from_str(body).ok()?;
    if raw.get().len() != body.len() {
        return None;
    }
    Some(Split {
        ts,
        body: (start, start + body.len()),
    })
}

/// The end (past its closing quote) of the JSON string `b` starts with, and whether it holds
/// an escape; None when `b` does not start with a quote, ends first, or holds a raw control
/// character (not JSON). The closing quote is the first one no backslash escapes.
fn string_end(b: &[u8]) -> Option<(usize, bool)> {
    if b.first() != Some(&b'"') {
        return None;
    }
    let (mut i, mut escaped) = (1, false);
    loop {
        i = super::json_text::stop(b, i);
        match b.get(i)? {
            b'"' => return Some((i + 1, escaped)),
            b'\\' => {
                escaped = true;
                i += 2;
            }
            _ => return None,
        }
    }
}

/// `rest` after a JSON string at its start, if that string is spelled as `push_str` spells
/// its value.
fn strip_ts(rest: &str) -> Option<&str> {
    let (end, escaped) = string_end(rest.as_bytes())?;
    // The closing quote is ASCII, so `end` is a char boundary.
    let (token, after) = rest.split_at(end);
    if escaped {
        // Rare: read the value, and take the token only if it is the canonical spelling.
        let value: String = serde_json::from_str(token).ok()?;
        strip_str(token, &value).filter(|left| left.is_empty())?;
    }
    Some(after)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::Envelope;

    fn env(id: &str, to: &str, kind: &str, corr: Option<&str>, ts: &str, body: &str) -> Envelope {
        Envelope::new(
            id.into(),
            "alice\u{1}".into(),
            to.into(),
            ts.into(),
            kind.into(),
            corr.map(str::to_owned),
            body.into(),
        )
        .unwrap()
    }

    fn parts(e: &Envelope) -> Parts<'_> {
        Parts {
            id: &e.id,
            from: &e.from,
            to: &e.to,
            kind: &e.kind,
            correlation_id: e.correlation_id.as_deref(),
        }
    }

    fn cases() -> Vec<Envelope> {
        vec![
            env(
                "e1",
                "bob",
                "note",
                None,
                "2026-12-03T10:00:00Z",
                "{\"b\":1}",
            ),
            env(
                "e\"2\\",
                "b\nb",
                "k\t",
                Some("c\u{7f}\u{2028}"),
                "2026-12-03T10:00:00.123456+01:00",
                "[1, 2 ,{\"z\":0,\"a\":\"\\u0041\"}]",
            ),
            env(
                "😀",
                "x",
                "k",
                Some(""),
                "2026-12-03T10:00:00Z",
                " \"x\" ".trim(),
            ),
            env(
                "00000000-0000-4000-8000-000000000001",
                "y",
                "kind",
                None,
                "2026-12-03T10:00:00Z",
                "1.0e+3",
            ),
        ]
    }

    /// A tail made from an envelope's fields writes back its canonical text, and measures it.
    #[test]
    fn a_tail_writes_the_canonical_text() {
        for e in cases() {
            let t = Tail::new(&e.ts, e.body.get());
            let p = parts(&e);
            assert_eq!(t.text(&p), e.to_json());
            assert_eq!(t.text_len(&p), e.to_json().len());
            assert!(!t.is_verbatim());
            assert!(t.held_bytes() < e.to_json().len());
        }
    }

    /// The canonical text splits, and the cut tail is the one made from the fields.
    #[test]
    fn a_canonical_text_splits_into_its_tail() {
        for e in cases() {
            let text = e.to_json();
            let p = parts(&e);
            let at = split(&text, &p).expect("canonical");
            assert_eq!(Tail::from_split(&text, at), Tail::new(&e.ts, e.body.get()));
            assert_eq!(Tail::of_text(&text, &p).text(&p), text);
        }
    }

    /// Every other spelling of the same envelope, and every text that does not belong to
    /// the fields, is kept whole and written back as it was.
    #[test]
    fn any_other_text_is_kept_whole() {
        let e = &cases()[0];
        let p = parts(e);
        let canon = e.to_json();
        let others = [
            canon.replace("{\"id\"", "{ \"id\""),
            canon.replace(",\"body\":{\"b\":1}}", ",\"body\":{\"b\":1} }"),
            canon.replace(",\"body\":{", ",\"body\": {"),
            canon.replace("\"bob\"", "\"\\u0062ob\""),
            canon.replace("10:00:00Z", "10:00:00\\u005a"),
            canon.replace("{\"b\":1}}", "{\"b\":1},\"x\":2}"),
            canon.replace("{\"b\":1}}", "1,\"x\":2}"),
            canon.replace("\"note\"", "\"other\""),
            canon.replace("null", "\"c\""),
            canon.replace("\"e1\"", "\"e2\""),
            canon.replace("\"ts\":\"2026-12-03T10:00:00Z\"", "\"ts\":7"),
            canon.replace("{\"b\":1}}", "{\"b\":1"),
            canon.clone() + " ",
            String::new(),
            "\"looks like a tail\"1".into(),
        ];
        for text in &others {
            assert_eq!(split(text, &p), None, "{text}");
            let t = Tail::of_text(text, &p);
            assert!(t.is_verbatim());
            assert_eq!(t.text(&p), *text);
            assert_eq!(t.text_len(&p), text.len());
        }
    }

    /// Every one-byte change of every case's canonical text, to each byte a JSON text turns
    /// on: a text that still splits is JSON with the fields in their places and writes back
    /// exactly; every text, split or kept whole, comes back as it was.
    #[test]
    fn no_one_byte_change_is_misread() {
        let mut split_changed = 0;
        for e in cases() {
            let p = parts(&e);
            let canon = e.to_json();
            for at in 0..canon.len() {
                if !canon.is_char_boundary(at) || !canon.is_char_boundary(at + 1) {
                    continue;
                }
                for c in ["\"", "\\", " ", ",", "}", "{", ":", "x", "\n", "0", ""] {
                    let text = format!("{}{c}{}", &canon[..at], &canon[at + 1..]);
                    let kept = Tail::of_text(&text, &p);
                    assert_eq!(kept.text(&p), text);
                    assert_eq!(kept.text_len(&p), text.len());
                    if let Some(cut) = split(&text, &p) {
                        let v: serde_json::Value = serde_json::from_str(&text).expect("JSON");
                        assert_eq!(v["id"], *e.id, "{text}");
                        assert_eq!(v["to"], *e.to, "{text}");
                        assert_eq!(Tail::from_split(&text, cut).text(&p), text);
                        split_changed += usize::from(text != canon);
                    }
                }
            }
        }
        // Changes inside the ts or the body that keep them a string and one value still split.
        assert!(split_changed > 0);
    }

    /// A cut that does not fit its text, past its end or inside a character, keeps the text
    /// whole: no panic, and the text comes back as it was.
    #[test]
    fn a_split_that_does_not_fit_keeps_the_text_whole() {
        let e = &cases()[0];
        let p = parts(e);
        for (text, at) in [
            ("{}", (0, 9), (1, 2)),
            ("é", (0, 1), (1, 2)),
            ("ab", (2, 1), (0, 0)),
        ]
        .map(|(t, ts, body)| (t, Split { ts, body }))
        {
            let t = Tail::from_split(text, at);
            assert!(t.is_verbatim(), "{text}");
            assert_eq!(t.text(&p), text);
        }
    }

    /// A `ts` with escapes splits only when they are `push_str`'s own.
    #[test]
    fn an_escaped_ts_splits_only_in_its_canonical_spelling() {
        let mut e = cases()[0].clone();
        e.ts = "2026\"12\\03\n".into();
        let p = parts(&e);
        let text = e.to_json();
        let at = split(&text, &p).expect("canonical escapes");
        assert_eq!(Tail::from_split(&text, at).text(&p), text);
        let other = text.replace("\\n", "\\u000a");
        assert_eq!(split(&other, &p), None);
        // the tail's own cut finds the closing quote past the escaped ones
        assert_eq!(Tail::new(&e.ts, e.body.get()).text(&p), text);
    }
}
