//! The fast path of client-line decoding (issue 13, docs/performance.md "Design
//! decisions"): a hand-written reader for the lines every operation sends (`hello`, `send`,
//! `await`, `ack`, `status`) that decodes a strict, common subset of JSON exactly and declines
//! everything else.
//!
//! Owns: `client_line`, which returns `Some(payload)` only when `decode`'s serde path would
//! return `Ok` with the same payload, field by field and the body's text byte for byte. Refuses
//! to decide anything: on any input outside its subset it returns `None` and the serde path
//! (`decode::serde_line`) reads the line, so every refusal and every error text still comes
//! from there, unchanged (SPEC §2.4: errors never quote the line).
//!
//! The subset: JSON whitespace (the four bytes serde_json skips) between tokens; keys without
//! escapes, each a known key of its payload at most once (a duplicate, unknown or escaped key
//! declines); string values with the escapes serde_json decodes (a lone or misordered
//! surrogate declines); whole numbers in `u64` with no sign, fraction, exponent or leading zero
//! (anything else declines); `true`, `false`, `null` where the field takes them; every required
//! field present. The envelope's body is read by serde_json itself (a `StreamDeserializer`
//! over the rest of the line, which yields the same borrowed `RawValue` as the serde path's
//! `next_value` and tells where it ended), so the body's validation is serde_json's own and
//! cannot disagree with it. The property is held by the differential tests below and the
//! fuzz target `client_line` (fuzz/drivers/client_line.rs).

use super::decode::{Payload, AWAIT_KEYS, ENVELOPE_KEYS, HELLO_KEYS, ID_KEYS, STATUS_KEYS};
use super::envelope::RawEnvelope;
use super::json_text::stop;
use super::{AwaitRequest, Hello, IdRequest, StatusRequest};
use serde_json::value::RawValue;

/// Reads `text` as one client line of the subset, or declines.
pub(crate) fn client_line(text: &str) -> Option<Payload<'_>> {
    let mut c = Cur { s: text, i: 0 };
    c.eat(b'{')?;
    let tag = c.key()?;
    c.eat(b':')?;
    let p = match tag {
        "hello" => hello(&mut c)?,
        "send" => send(&mut c)?,
        "await" => await_(&mut c)?,
        "ack" => ack(&mut c)?,
        "status" => status(&mut c)?,
        _ => return None,
    };
    c.eat(b'}')?;
    c.ws();
    (c.i == text.len()).then_some(p)
}

/// A position in the line. Every index it stops at is a char boundary: it only ever steps over
/// ASCII bytes one at a time, or over a whole run up to an ASCII byte.
struct Cur<'a> {
    s: &'a str,
    i: usize,
}

impl<'a> Cur<'a> {
    fn ws(&mut self) {
        let b = self.s.as_bytes();
        while let Some(b' ' | b'\n' | b'\t' | b'\r') = b.get(self.i) {
            self.i += 1;
        }
    }

    /// The next byte after whitespace, consumed.
    fn next(&mut self) -> Option<u8> {
        self.ws();
        let b = *self.s.as_bytes().get(self.i)?;
        self.i += 1;
        Some(b)
    }

    /// The next byte after whitespace, not consumed.
    fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.s.as_bytes().get(self.i).copied()
    }

    fn eat(&mut self, want: u8) -> Option<()> {
        (self.next()? == want).then_some(())
    }

    /// The literal `word` (its first byte already peeked), consumed.
    fn word(&mut self, word: &[u8]) -> Option<()> {
        let end = self.i.checked_add(word.len())?;
        (self.s.as_bytes().get(self.i..end)? == word).then(|| self.i = end)
    }

    /// A key: a string with no escape and no control character, borrowed.
    fn key(&mut self) -> Option<&'a str> {
        self.eat(b'"')?;
        let b = self.s.as_bytes();
        let start = self.i;
        loop {
            self.i = stop(b, self.i);
            match *b.get(self.i)? {
                b'"' => break,
                b'\\' | 0x00..=0x1f => return None,
                _ => self.i += 1,
            }
        }
        let k = self.s.get(start..self.i)?;
        self.i += 1;
        Some(k)
    }

    /// A string value, unescaped as serde_json unescapes it into a `str`.
    fn text(&mut self) -> Option<String> {
        self.eat(b'"')?;
        let b = self.s.as_bytes();
        let mut start = self.i;
        let mut out: Option<String> = None;
        loop {
            self.i = stop(b, self.i);
            match *b.get(self.i)? {
                b'"' => {
                    let tail = self.s.get(start..self.i)?;
                    self.i += 1;
                    return Some(match out {
                        None => tail.to_owned(),
                        Some(mut o) => {
                            o.push_str(tail);
                            o
                        }
                    });
                }
                0x00..=0x1f => return None,
                b'\\' => {
                    let o = out.get_or_insert_with(String::new);
                    o.push_str(self.s.get(start..self.i)?);
                    let letter = *b.get(self.i + 1)?;
                    self.i += 2;
                    let c = match letter {
                        b'"' => '"',
                        b'\\' => '\\',
                        b'/' => '/',
                        b'b' => '\u{8}',
                        b'f' => '\u{c}',
                        b'n' => '\n',
                        b'r' => '\r',
                        b't' => '\t',
                        b'u' => match self.hex4()? {
                            n @ 0xD800..=0xDBFF => {
                                // A leading surrogate: serde_json wants its trailing one next.
                                self.word(b"\\u")?;
                                let m = self.hex4()?;
                                if !(0xDC00..=0xDFFF).contains(&m) {
                                    return None;
                                }
                                char::from_u32(0x10000 + ((n - 0xD800) << 10) + (m - 0xDC00))?
                            }
                            0xDC00..=0xDFFF => return None,
                            n => char::from_u32(n)?,
                        },
                        _ => return None,
                    };
                    o.push(c);
                    start = self.i;
                }
                _ => self.i += 1,
            }
        }
    }

    /// Four hex digits (either case, as serde_json reads them), consumed.
    fn hex4(&mut self) -> Option<u32> {
        let end = self.i.checked_add(4)?;
        let digits = self.s.as_bytes().get(self.i..end)?;
        let mut n = 0u32;
        for &d in digits {
            n = n * 16 + char::from(d).to_digit(16)?;
        }
        self.i = end;
        Some(n)
    }

    /// `null` (outer `Some(None)`) or a string.
    fn opt_text(&mut self) -> Option<Option<String>> {
        if self.peek()? == b'n' {
            self.word(b"null")?;
            return Some(None);
        }
        self.text().map(Some)
    }

    /// `null` or a whole number in `u64`: digits only, no leading zero before another digit,
    /// and no fraction or exponent after them (serde_json reads those as floats, which the
    /// serde path refuses).
    fn secs(&mut self) -> Option<Option<u64>> {
        let b = self.s.as_bytes();
        match self.peek()? {
            b'n' => {
                self.word(b"null")?;
                Some(None)
            }
            b'0' => {
                self.i += 1;
                match b.get(self.i) {
                    Some(b'0'..=b'9' | b'.' | b'e' | b'E') => None,
                    _ => Some(Some(0)),
                }
            }
            b'1'..=b'9' => {
                let mut n = 0u64;
                while let Some(&d @ b'0'..=b'9') = b.get(self.i) {
                    n = n.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
                    self.i += 1;
                }
                match b.get(self.i) {
                    Some(b'.' | b'e' | b'E') => None,
                    _ => Some(Some(n)),
                }
            }
            _ => None,
        }
    }

    /// `null`, `true` or `false`.
    fn flag(&mut self) -> Option<Option<bool>> {
        match self.peek()? {
            b'n' => self.word(b"null").map(|()| None),
            b't' => self.word(b"true").map(|()| Some(true)),
            b'f' => self.word(b"false").map(|()| Some(false)),
            _ => None,
        }
    }

    /// The body: one JSON value read by serde_json itself, borrowed from the line.
    fn raw(&mut self) -> Option<&'a RawValue> {
        let rest = self.s.get(self.i..)?;
        let mut values = serde_json::Deserializer::from_str(rest).into_iter::<&'a RawValue>();
        let v = values.next()?.ok()?;
        self.i += values.byte_offset();
        Some(v)
    }

    /// A payload object: `each` reads the value of the key at index `i` of `names`; each key
    /// at most once. Returns the set of keys seen.
    fn fields(
        &mut self,
        names: &[&str],
        mut each: impl FnMut(&mut Self, usize) -> Option<()>,
    ) -> Option<u32> {
        self.eat(b'{')?;
        let mut seen = 0u32;
        if self.peek()? == b'}' {
            self.i += 1;
            return Some(seen);
        }
        loop {
            let k = self.key()?;
            let i = names.iter().position(|n| *n == k)?;
            if seen & (1 << i) != 0 {
                return None;
            }
            seen |= 1 << i;
            self.eat(b':')?;
            each(self, i)?;
            match self.next()? {
                b',' => {}
                b'}' => return Some(seen),
                _ => return None,
            }
        }
    }
}

fn hello<'a>(c: &mut Cur<'a>) -> Option<Payload<'a>> {
    let mut t: [Option<String>; 2] = Default::default();
    let mut warn = None;
    c.fields(HELLO_KEYS, |c, i| {
        match i {
            2 => warn = c.flag()?,
            _ => t[i] = Some(c.text()?),
        }
        Some(())
    })?;
    let [name, token] = t;
    Some(Payload::Hello(Hello {
        name: name?,
        token: token?,
        warn,
    }))
}

fn send<'a>(c: &mut Cur<'a>) -> Option<Payload<'a>> {
    let mut t: [Option<String>; 5] = Default::default();
    let mut correlation = None;
    let mut body = None;
    c.fields(ENVELOPE_KEYS, |c, i| {
        match i {
            5 => correlation = Some(c.opt_text()?),
            6 => body = Some(c.raw()?),
            _ => t[i] = Some(c.text()?),
        }
        Some(())
    })?;
    let [id, from, to, ts, kind] = t;
    Some(Payload::Send(RawEnvelope::from_parts(
        id?,
        from?,
        to?,
        ts?,
        kind?,
        correlation,
        body?,
    )))
}

fn await_<'a>(c: &mut Cur<'a>) -> Option<Payload<'a>> {
    let mut a = AwaitRequest::default();
    c.fields(AWAIT_KEYS, |c, i| {
        match i {
            0 => a.reply_to = c.opt_text()?,
            1 => a.kind = c.opt_text()?,
            2 => a.timeout_secs = c.secs()?,
            3 => a.ack = c.flag()?,
            _ => a.reader = c.opt_text()?,
        }
        Some(())
    })?;
    Some(Payload::Await(a))
}

fn ack<'a>(c: &mut Cur<'a>) -> Option<Payload<'a>> {
    let mut id = None;
    c.fields(ID_KEYS, |c, _| {
        id = Some(c.text()?);
        Some(())
    })?;
    Some(Payload::Ack(IdRequest { id: id? }))
}

fn status<'a>(c: &mut Cur<'a>) -> Option<Payload<'a>> {
    let (mut id, mut wait_for, mut timeout_ms) = (None, None, None);
    c.fields(STATUS_KEYS, |c, i| {
        match i {
            0 => id = Some(c.text()?),
            1 => wait_for = c.opt_text()?,
            _ => timeout_ms = c.secs()?,
        }
        Some(())
    })?;
    Some(Payload::Status(StatusRequest {
        id: id?,
        wait_for,
        timeout_ms,
    }))
}

/// Whether two payloads of the fast path's tags are equal field by field (the body by its
/// text); false for any other tag.
#[cfg(any(test, feature = "fuzzing"))]
fn same(a: &Payload<'_>, b: &Payload<'_>) -> bool {
    match (a, b) {
        (Payload::Hello(x), Payload::Hello(y)) => x == y,
        (Payload::Send(x), Payload::Send(y)) => x.same_as(y),
        (Payload::Await(x), Payload::Await(y)) => x == y,
        (Payload::Ack(x), Payload::Ack(y)) => x == y,
        (Payload::Status(x), Payload::Status(y)) => x == y,
        _ => false,
    }
}

/// The fast path's property for one line, for the fuzz target `client_line` and the tests:
/// `Ok(true)` when the fast path read the line and the serde path reads the same payload,
/// `Ok(false)` when it declined, `Err` (naming what differed, never the line's values) when
/// it read a line the serde path refuses or reads otherwise.
#[cfg(any(test, feature = "fuzzing"))]
pub fn check(text: &str) -> Result<bool, String> {
    let Some(fast) = client_line(text) else {
        return Ok(false);
    };
    match super::decode::serde_line(text) {
        Ok(slow) if same(&fast, &slow) => Ok(true),
        Ok(_) => Err("the fast path read a different payload".to_owned()),
        Err(e) => Err(format!("the fast path read a line serde refuses: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    /// Every string in the hub's protocol fixtures that looks like a line (client lines, the
    /// transcripts' sent lines, the hub lines, which the fast path must decline or read alike).
    fn fixture_lines() -> Vec<String> {
        fn strings(v: &Value, out: &mut Vec<String>) {
            match v {
                Value::String(s) => {
                    for l in s.split('\n') {
                        if l.trim_start().starts_with('{') {
                            out.push(l.to_owned());
                        }
                    }
                }
                Value::Array(a) => a.iter().for_each(|x| strings(x, out)),
                Value::Object(m) => m.values().for_each(|x| strings(x, out)),
                _ => {}
            }
        }
        let mut out = Vec::new();
        for text in [
            include_str!("../../../../protocol/hub/client-lines.json"),
            include_str!("../../../../protocol/hub/transcripts.json"),
            include_str!("../../../../protocol/hub/hub-lines.json"),
        ] {
            strings(
                &serde_json::from_str(text).expect("a fixture is JSON"),
                &mut out,
            );
        }
        out
    }

    const SEND: &str = r#"{"send":{"id":"e1","from":"a","to":"b","ts":"2026-01-01T00:00:00Z","kind":"note","body":{"text":"hi","n":[1,2.5e3,-0,true,null]}}}"#;

    /// Hand-made lines at every edge of the subset: each must hold the property, whichever
    /// side of the subset it falls on.
    fn edge_lines() -> Vec<String> {
        let mut v: Vec<String> = [
            r#"{"hello":{"name":"mneme","token":"s3cret"}}"#,
            r#"{"hello":{"token":"s3cret","name":"mneme"}}"#,
            " \t\r\n{ \"hello\" :\n{ \"name\" : \"a\" , \"token\" : \"b\" } }\r\n ",
            r#"{"hello":{"name":"","token":""}}"#,
            r#"{"hello":{"name":"a"}}"#,
            r#"{"hello":{"name":"a","token":"b","name":"c"}}"#,
            r#"{"hello":{"name":"a","token":"b","x":1}}"#,
            r#"{"hello":{"name":"a","token":"b"},"who":{}}"#,
            r#"{"hello":{"name":"a","token":"b"}}x"#,
            r#"{"hello":{"name":"a","token":"b"}} {}"#,
            r#"{"hello":{"name":"a","token":"b",}}"#,
            r#"{"hello":{"name":"a","token":"b"}"#,
            r#"{"hello":{"name":"a","token":null}}"#,
            r#"{"hello":{"name":"a","token":5}}"#,
            r#"{"hello":{"n\u0061me":"a","token":"b"}}"#,
            r#"{"hell\u006f":{"name":"a","token":"b"}}"#,
            r#"{"hello":{"name":"a\"b\\c\/d\be\ff\ng\rh\ti","token":"b"}}"#,
            r#"{"hello":{"name":"\u0041\u00e9\u20AC\uFFFF\u0000","token":"b"}}"#,
            r#"{"hello":{"name":"\uD83D\uDE00","token":"\ud83d\ude00x"}}"#,
            r#"{"hello":{"name":"\uD83D","token":"b"}}"#,
            r#"{"hello":{"name":"\uDE00","token":"b"}}"#,
            r#"{"hello":{"name":"\uD83D\u0041","token":"b"}}"#,
            r#"{"hello":{"name":"\uD83Dx","token":"b"}}"#,
            r#"{"hello":{"name":"\uD83D\n","token":"b"}}"#,
            r#"{"hello":{"name":"\u00G1","token":"b"}}"#,
            r#"{"hello":{"name":"\u00","token":"b"}}"#,
            r#"{"hello":{"name":"\x","token":"b"}}"#,
            "{\"hello\":{\"name\":\"a\tb\",\"token\":\"b\"}}",
            "{\"hello\":{\"name\":\"a\u{7f}\u{80}é😀\",\"token\":\"b\"}}",
            r#"{"hello":{"name":"a","token":"b"}}   "#,
            r#"{"hello":{"name":"a","token":"b","warn":true}}"#,
            r#"{"hello":{"warn":false,"name":"a","token":"b"}}"#,
            r#"{"hello":{"name":"a","token":"b","warn":null}}"#,
            r#"{"hello":{"name":"a","token":"b","warn":1}}"#,
            r#"{"hello":{"name":"a","token":"b","warn":"true"}}"#,
            r#"{"hello":{"name":"a","token":"b","warn":tru}}"#,
            r#"{"hello":{"name":"a","token":"b","warn":true,"warn":true}}"#,
            r#"{"hello":{"warn":true}}"#,
            r#"{"hello":[]}"#,
            r#"{"hello":{}}"#,
            r#"{}"#,
            r#""#,
            r#"{"hello""#,
            r#"{"await":{}}"#,
            r#"{"await":{ }}"#,
            r#"{"await":{"replyTo":"r","kind":null,"timeoutSecs":5,"ack":true,"reader":"mcp"}}"#,
            r#"{"await":{"replyTo":null,"kind":"k","timeoutSecs":null,"ack":false,"reader":null}}"#,
            r#"{"await":{"ack":null}}"#,
            r#"{"await":{"ack":tru}}"#,
            r#"{"await":{"ack":truex}}"#,
            r#"{"await":{"ack":nul}}"#,
            r#"{"await":{"ack":1}}"#,
            r#"{"await":{"timeoutSecs":0}}"#,
            r#"{"await":{"timeoutSecs":00}}"#,
            r#"{"await":{"timeoutSecs":01}}"#,
            r#"{"await":{"timeoutSecs":-0}}"#,
            r#"{"await":{"timeoutSecs":-1}}"#,
            r#"{"await":{"timeoutSecs":1e5}}"#,
            r#"{"await":{"timeoutSecs":1E5}}"#,
            r#"{"await":{"timeoutSecs":1.0}}"#,
            r#"{"await":{"timeoutSecs":0.5}}"#,
            r#"{"await":{"timeoutSecs":0e0}}"#,
            r#"{"await":{"timeoutSecs":18446744073709551615}}"#,
            r#"{"await":{"timeoutSecs":18446744073709551616}}"#,
            r#"{"await":{"timeoutSecs":99999999999999999999999}}"#,
            r#"{"await":{"timeoutSecs":5 }}"#,
            r#"{"await":{"timeoutSecs":5x}}"#,
            r#"{"await":{"timeoutSecs":"5"}}"#,
            r#"{"await":{"kind":"a","kind":"b"}}"#,
            r#"{"await":{"kind":null,"kind":null}}"#,
            r#"{"await":{"replyTo":""}}"#,
            r#"{"await":{"reader":"nobody"}}"#,
            r#"{"await":{"timeoutSecs":5,}}"#,
            r#"{"await":{,}}"#,
            r#"{"ack":{"id":"e1"}}"#,
            r#"{"ack":{"id":""}}"#,
            r#"{"ack":{}}"#,
            r#"{"ack":{"id":"a","id":"b"}}"#,
            r#"{"status":{"id":"e1"}}"#,
            r#"{"status":{"id":"e1","waitFor":"delivered","timeoutMs":100}}"#,
            r#"{"status":{"timeoutMs":100,"waitFor":null,"id":"e"}}"#,
            r#"{"status":{"waitFor":"x"}}"#,
            r#"{"who":{}}"#,
            r#"{"tasks":{}}"#,
            r#"{"task_answer":{"task":"t","request":"req-1","option":"allow","message":"m"}}"#,
            r#"{"task_answer":{"task":"","option":"allow"}}"#,
            r#"{"task_permission":{"toolName":"Bash","toolUseId":"toolu_1","input":{"command":"make"}}}"#,
            r#"{"task_permission":{"input":[1],"toolUseId":"","toolName":"Bash"}}"#,
            r#"{"task_permission":{"toolName":"Bash","toolUseId":"t","input":{"a":1,}}}"#,
            r#"{"delegate":{"agent":"a","cwd":"/","prompt":"p","permission":"ask","allow":[{"kinds":["read"],"under":"src"}]}}"#,
            r#"{"ping":{}}"#,
            SEND,
            r#"{"send":{"body":{"a": [1]},"kind":"k","ts":"t","to":"b","from":"a","id":"e","correlationId":null}}"#,
            r#"{"send":{"id":"e","from":"a","to":"b","ts":"t","kind":"k","correlationId":"c","body":1}}"#,
            r#"{"send":{"id":"e","from":"a","to":"b","ts":"t","kind":"k","correlationId":"c","body":1 }}"#,
            r#"{"send":{"id":"e","from":"a","to":"b","ts":"t","kind":"k","body":  "x"  }}"#,
            r#"{"send":{"id":"e","from":"a","to":"b","ts":"t","kind":"k","body":-0}}"#,
            r#"{"send":{"id":"e","from":"a","to":"b","ts":"t","kind":"k","body":01}}"#,
            r#"{"send":{"id":"e","from":"a","to":"b","ts":"t","kind":"k","body":1.}}"#,
            r#"{"send":{"id":"e","from":"a","to":"b","ts":"t","kind":"k","body":1e}}"#,
            r#"{"send":{"id":"e","from":"a","to":"b","ts":"t","kind":"k","body":1e+}}"#,
            r#"{"send":{"id":"e","from":"a","to":"b","ts":"t","kind":"k","body":-1.5E-7}}"#,
            r#"{"send":{"id":"e","from":"a","to":"b","ts":"t","kind":"k","body":123456789012345678901234567890}}"#,
            r#"{"send":{"id":"e","from":"a","to":"b","ts":"t","kind":"k","body":nul}}"#,
            r#"{"send":{"id":"e","from":"a","to":"b","ts":"t","kind":"k","body":true}}"#,
            r#"{"send":{"id":"e","from":"a","to":"b","ts":"t","kind":"k","body":{"a":1,}}}"#,
            r#"{"send":{"id":"e","from":"a","to":"b","ts":"t","kind":"k","body":{"a":1}x}}"#,
            r#"{"send":{"id":"e","from":"a","to":"b","ts":"t","kind":"k","body":{"a":"\ud800"}}}"#,
            r#"{"send":{"id":"e","from":"a","to":"b","ts":"t","kind":"k","body":{"a":"\q"}}}"#,
            r#"{"send":{"id":"e","from":"a","to":"b","ts":"t","kind":"k","body":[1 2]}}"#,
            r#"{"send":{"id":"e","from":"a","to":"b","ts":"t","kind":"k","body":{1:2}}}"#,
            r#"{"send":{"id":"e","from":"a","to":"b","ts":"t","kind":"k","body":}}"#,
            r#"{"send":{"id":"e","from":"a","to":"b","ts":"t","kind":"k","body":{}}"#,
            r#"{"send":{"id":"e","from":"a","to":"b","ts":"t","kind":"k"}}"#,
            r#"{"send":{"id":"e","from":"a","to":"b","ts":"t","body":{}}}"#,
            r#"{"send":{"id":"e","from":"a","to":"b","ts":"t","kind":"k","body":{},"body":{}}}"#,
            r#"{"send":{"id":"e","from":"a","to":"b","ts":"t","kind":"k","body":{},"correlationId":"a","correlationId":"b"}}"#,
            r#"{"send":{"id":"e","from":"a","to":"b","ts":"t","kind":"k","correlationId":5,"body":{}}}"#,
            r#"{"send":{"id":"","from":"","to":"","ts":"","kind":"","correlationId":"","body":""}}"#,
            r#"{"send":{"id":"e","from":"a","to":"b","ts":"t","kind":"bounce","body":{}}}"#,
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
        // Nesting in the body around serde_json's recursion limit of 128 (which its
        // `RawValue` scan does not apply) and far beyond it, and in the payload itself.
        for depth in [1, 126, 127, 128, 129, 130, 1000] {
            let body = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
            v.push(SEND.replace(r#"{"text":"hi","n":[1,2.5e3,-0,true,null]}"#, &body));
            let body = format!("{}1{}", r#"{"a":"#.repeat(depth), "}".repeat(depth));
            v.push(SEND.replace(r#"{"text":"hi","n":[1,2.5e3,-0,true,null]}"#, &body));
            let open = format!("{}1{}", "[".repeat(depth), "]".repeat(depth - 1));
            v.push(SEND.replace(r#"{"text":"hi","n":[1,2.5e3,-0,true,null]}"#, &open));
        }
        v
    }

    fn holds(line: &str) -> bool {
        match check(line) {
            Ok(taken) => taken,
            Err(e) => panic!("{line:?}: {e}"),
        }
    }

    /// Small changes to a line: every prefix, each byte dropped, each byte replaced by a byte
    /// that matters to JSON, whitespace and a doubled byte at every position.
    fn variants(line: &str, out: &mut Vec<String>) {
        let b = line.as_bytes();
        let mut push = |v: Vec<u8>| {
            if let Ok(s) = String::from_utf8(v) {
                out.push(s);
            }
        };
        for i in 0..=b.len() {
            push(b[..i].to_vec());
            if i < b.len() {
                let mut d = b.to_vec();
                d.remove(i);
                push(d);
                let mut d = b.to_vec();
                d.insert(i, b[i]);
                push(d);
                for r in *b"\"\\{}[],:0-.eEtnu \x01\xc3" {
                    let mut d = b.to_vec();
                    d[i] = r;
                    push(d);
                }
            }
            for w in [" ", "\n", "\u{a0}", "\u{c}"] {
                let mut d = b.to_vec();
                d.splice(i..i, w.bytes());
                push(d);
            }
        }
    }

    /// `stop` against a byte-at-a-time scan: every byte value at every position of a run
    /// longer than two words, over a background of plain ASCII and of non-ASCII bytes, and
    /// two hits at once.
    #[test]
    fn stop_finds_the_first_end_of_plain_text() {
        let naive = |b: &[u8], i: usize| {
            (i..b.len())
                .find(|&j| b[j] == b'"' || b[j] == b'\\' || b[j] < 0x20)
                .unwrap_or(b.len())
        };
        for fill in [b'a', 0x7f, 0x80, 0xff, 0x21, 0x5d, 0x23] {
            for len in [0usize, 1, 7, 8, 9, 16, 23] {
                for at in 0..len {
                    for v in 0u8..=255 {
                        let mut b = vec![fill; len];
                        b[at] = v;
                        for from in [0, 1, at] {
                            assert_eq!(stop(&b, from), naive(&b, from), "{b:?} from {from}");
                        }
                        if at + 1 < len {
                            b[at + 1] = b'"';
                            assert_eq!(stop(&b, 0), naive(&b, 0), "{b:?}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn every_fixture_line_reads_alike_or_is_declined() {
        let lines = fixture_lines();
        assert!(lines.len() > 150, "{} fixture lines", lines.len());
        let taken = lines.iter().filter(|l| holds(l)).count();
        // Most of the fixtures' valid hot lines are in the subset.
        assert!(taken > 40, "the fast path read only {taken} fixture lines");
    }

    #[test]
    fn every_edge_case_reads_alike_or_is_declined() {
        for l in edge_lines() {
            holds(&l);
        }
    }

    #[test]
    fn small_changes_to_every_line_read_alike_or_are_declined() {
        let mut bases = edge_lines();
        bases.retain(|l| l.len() < 300);
        bases.extend(fixture_lines().into_iter().filter(|l| l.len() < 300));
        let mut lines = Vec::new();
        for b in &bases {
            variants(b, &mut lines);
        }
        assert!(lines.len() > 100_000, "{} variants", lines.len());
        let taken = lines.iter().filter(|l| holds(l)).count();
        assert!(taken > 1_000, "{taken} variants read by the fast path");
    }

    /// The common shapes of the hot lines are read by the fast path (else it saves nothing),
    /// with every field and the body's text as sent.
    #[test]
    fn the_hot_lines_take_the_fast_path() {
        for l in [
            r#"{"hello":{"name":"mneme","token":"s3cret"}}"#,
            r#"{"hello":{"name":"mneme","token":"s3cret","warn":true}}"#,
            SEND,
            r#"{"send":{"id":"e","from":"a","to":"b","ts":"t","kind":"k","correlationId":null,"body":  {"a" : [ 1 ] } }}"#,
            r#"{"await":{"replyTo":"r","kind":null,"timeoutSecs":5,"ack":true,"reader":"mcp"}}"#,
            r#"{"await":{}}"#,
            r#"{"ack":{"id":"e1"}}"#,
            r#"{"status":{"id":"e1","waitFor":"delivered","timeoutMs":100}}"#,
            r#"{"hello":{"name":"\uD83D\uDE00 \u00e9\n","token":"t"}}"#,
            r#"{"await":{"timeoutSecs":18446744073709551615}}"#,
        ] {
            assert!(holds(l), "{l} declined");
        }
        let Some(Payload::Send(env)) = client_line(
            r#"{"send":{"id":"e","from":"a","to":"b","ts":"t","kind":"k","correlationId":null,"body":  {"a" : [ 1 ] } }}"#,
        ) else {
            panic!("a send")
        };
        assert!(env.has_correlation_key());
        let serde = super::super::decode::serde_line(
            r#"{"send":{"id":"e","from":"a","to":"b","ts":"t","kind":"k","correlationId":null,"body":  {"a" : [ 1 ] } }}"#,
        );
        let Ok(Payload::Send(slow)) = serde else {
            panic!("serde reads the send")
        };
        assert!(env.same_as(&slow));
    }

    /// What the fast path must leave to serde: each of these is refused there, or read only
    /// through escapes the subset excludes; the fast path declines every one.
    #[test]
    fn refusals_are_left_to_the_serde_path() {
        for l in [
            r#"{"hello":{"name":"a","token":"b","name":"c"}}"#,
            r#"{"hello":{"n\u0061me":"a","token":"b"}}"#,
            r#"{"hello":{"name":"\uD83D","token":"b"}}"#,
            r#"{"await":{"timeoutSecs":-0}}"#,
            r#"{"await":{"timeoutSecs":1e5}}"#,
            r#"{"await":{"timeoutSecs":18446744073709551616}}"#,
            r#"{"hello":{"name":"a","token":"b"}}x"#,
            r#"{"send":{"id":"e","from":"a","to":"b","ts":"t","kind":"k","body":{"a":1,}}}"#,
            r#"{"who":{}}"#,
            // The verbs that are not hot (issue 37's among them) are the serde path's alone.
            r#"{"task_answer":{"task":"t","option":"allow"}}"#,
            r#"{"delegate":{"agent":"a","cwd":"/","prompt":"p","allow":[{"kinds":["read"]}]}}"#,
            r#"{"task_permission":{"toolName":"Bash","toolUseId":"toolu_1","input":{}}}"#,
        ] {
            assert!(client_line(l).is_none(), "{l} taken");
        }
    }
}
