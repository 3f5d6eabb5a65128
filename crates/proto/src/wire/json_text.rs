//! Hand-written pieces of compact JSON text, byte for byte what `serde_json`'s compact
//! serializer writes for the same values, for the lines and records the hub writes on every
//! operation (the envelope's text, `accepted`, audit records: docs/performance.md, issue 13,
//! "Design decisions").
//!
//! Owns: a JSON string literal (`push_str`) and an unsigned integer (`push_u64`) appended to a
//! `String`, without serde's serializer machinery or `core::fmt`; and `stop`, the scan over a
//! run of plain string text that both these writers and the line decoders (`fast`,
//! `envelope_text`) use, so the two sets of bytes that end a run can never differ. Refuses: anything with
//! structure; the callers lay out their own keys, and the tests below hold every byte of
//! output equal to `serde_json`'s.

/// How serde_json escapes a byte of a string, by its value (0: written as is).
const fn escape_of(b: u8) -> u8 {
    match b {
        b'"' => b'"',
        b'\\' => b'\\',
        0x08 => b'b',
        0x09 => b't',
        0x0a => b'n',
        0x0c => b'f',
        0x0d => b'r',
        0x00..=0x1f => b'u',
        _ => 0,
    }
}

const ESCAPES: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = escape_of(i as u8);
        i += 1;
    }
    t
};

const HEX: &[u8; 16] = b"0123456789abcdef";

/// Appends `s` as a JSON string literal: quotes, `\"`, `\\`, the short escapes of
/// `\b \t \n \f \r`, `\u00xx` (lowercase) for the other control characters, everything else
/// (DEL and all of non-ASCII included) as it is, exactly as `serde_json::to_string(s)`.
pub fn push_str(out: &mut String, s: &str) {
    out.reserve(s.len() + 2);
    out.push('"');
    let bytes = s.as_bytes();
    let mut start = 0;
    // The runs between escaped bytes are found eight bytes at a time by the decoder's own
    // scan (`stop`), whose stop set is exactly the bytes `ESCAPES` marks (a test
    // holds them equal): a W1 op writes about 150 bytes of strings into its audit records
    // and the envelope's text (docs/performance.md, "Design decisions").
    loop {
        let i = stop(bytes, start);
        let Some(&b) = bytes.get(i) else {
            break;
        };
        // Every escaped byte is ASCII, so `start..i` and `i + 1..` are char boundaries.
        out.push_str(&s[start..i]);
        match ESCAPES[usize::from(b)] {
            b'u' => {
                out.push_str("\\u00");
                out.push(char::from(HEX[usize::from(b >> 4)]));
                out.push(char::from(HEX[usize::from(b & 15)]));
            }
            e => {
                out.push('\\');
                out.push(char::from(e));
            }
        }
        start = i + 1;
    }
    out.push_str(&s[start..]);
    out.push('"');
}

/// The length of `push_str`'s output for `s`, without writing it.
pub fn str_len(s: &str) -> usize {
    let bytes = s.as_bytes();
    let (mut len, mut start) = (s.len() + 2, 0);
    loop {
        let i = stop(bytes, start);
        let Some(&b) = bytes.get(i) else {
            return len;
        };
        // `\u00xx` is six bytes for one, a short escape two.
        len += if ESCAPES[usize::from(b)] == b'u' {
            5
        } else {
            1
        };
        start = i + 1;
    }
}

/// `text` after a leading `push_str(s)`, if it starts with exactly those bytes: a check that
/// a stored text holds `s` where the canonical form puts it, without writing it anywhere.
pub fn strip_str<'t>(text: &'t str, s: &str) -> Option<&'t str> {
    let mut rest = text.as_bytes().strip_prefix(b"\"")?;
    let bytes = s.as_bytes();
    let mut start = 0;
    loop {
        let i = stop(bytes, start);
        rest = rest.strip_prefix(&bytes[start..i])?;
        let Some(&b) = bytes.get(i) else {
            break;
        };
        let mut esc = [b'\\', b'u', b'0', b'0', 0, 0];
        let esc: &[u8] = match ESCAPES[usize::from(b)] {
            b'u' => {
                esc[4] = HEX[usize::from(b >> 4)];
                esc[5] = HEX[usize::from(b & 15)];
                &esc
            }
            e => {
                esc[1] = e;
                &esc[..2]
            }
        };
        rest = rest.strip_prefix(esc)?;
        start = i + 1;
    }
    rest = rest.strip_prefix(b"\"")?;
    // Everything stripped was ASCII or whole runs of `s`, so the cut is a char boundary.
    Some(&text[text.len() - rest.len()..])
}

/// Appends `n` in decimal, as `Display` and serde_json write it.
pub fn push_u64(out: &mut String, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    for &d in &digits[at..] {
        out.push(char::from(d));
    }
}

/// Appends `true` or `false`.
pub fn push_bool(out: &mut String, b: bool) {
    out.push_str(if b { "true" } else { "false" });
}

/// The index of the first byte at or after `i` that ends a run of plain string text: `"`,
/// `\\` or a control character (`b.len()` if none). Eight bytes at a time: each of the three
/// tests below marks the high bit of a byte that hits, and of no byte below the first hit
/// (a borrow only runs upwards from a true hit), so the lowest mark is the first hit.
pub(crate) fn stop(b: &[u8], mut i: usize) -> usize {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    while let Some(chunk) = b.get(i..i.saturating_add(8)) {
        let Ok(bytes) = <[u8; 8]>::try_from(chunk) else {
            break;
        };
        let x = u64::from_le_bytes(bytes);
        let quote = x ^ (ONES * u64::from(b'"'));
        let slash = x ^ (ONES * u64::from(b'\\'));
        let hit = ((quote.wrapping_sub(ONES) & !quote)
            | (slash.wrapping_sub(ONES) & !slash)
            | (x.wrapping_sub(ONES * 0x20) & !x))
            & HIGH;
        if hit != 0 {
            return i + (hit.trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    while let Some(&c) = b.get(i) {
        if c == b'"' || c == b'\\' || c < 0x20 {
            break;
        }
        i += 1;
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `push_str` skips what `stop` passes over: the two sets must be one.
    #[test]
    fn the_scan_stops_at_exactly_the_escaped_bytes() {
        for b in 0..=255u8 {
            let stops = stop(&[b], 0) == 0;
            assert_eq!(stops, ESCAPES[usize::from(b)] != 0, "byte {b:#04x}");
            // and inside a word, at every place
            for at in 0..9 {
                let mut v = vec![b'a'; 9];
                v[at] = b;
                let want = if stops { at } else { 9 };
                assert_eq!(stop(&v, 0), want, "byte {b:#04x} at {at}");
            }
        }
    }

    /// `str_len` and `strip_str` agree with `push_str` on every ASCII byte at every place,
    /// and `strip_str` refuses every other spelling of the same string.
    #[test]
    fn length_and_strip_follow_push_str() {
        let mut cases: Vec<String> = vec![String::new(), "é😀\u{2028}".into(), "a".repeat(40)];
        for c in (0u8..=0x7f).map(char::from) {
            cases.push(format!("{c}"));
            cases.push(format!("0123456789{c}ab{c}"));
        }
        for s in &cases {
            let t = text(s);
            assert_eq!(str_len(s), t.len(), "{s:?}");
            assert_eq!(strip_str(&format!("{t},rest"), s), Some(",rest"), "{s:?}");
            assert_eq!(strip_str(&t[..t.len() - 1], s), None, "{s:?} cut");
            // serde reads `\u0041` as `A`, but it is not the canonical spelling
            let other: String = serde_json::from_str(&t).unwrap();
            assert_eq!(&other, s);
        }
        assert_eq!(strip_str("\"\\u0041\"", "A"), None);
        assert_eq!(strip_str("\"A\"", "B"), None);
        assert_eq!(strip_str("\"\\/\"", "/"), None);
        assert_eq!(strip_str("\"a\"", "a"), Some(""));
    }

    fn text(s: &str) -> String {
        let mut out = String::new();
        push_str(&mut out, s);
        out
    }

    /// Every ASCII byte alone, inside text and at both ends, and non-ASCII text: serde_json's
    /// bytes.
    #[test]
    fn strings_are_serde_json_byte_for_byte() {
        for c in (0u8..=0x7f).map(char::from) {
            for s in [
                c.to_string(),
                format!("a{c}b"),
                format!("{c}{c}xy"),
                format!("xy{c}"),
            ] {
                assert_eq!(text(&s), serde_json::to_string(&s).unwrap(), "{s:?}");
            }
        }
        // Longer than a word, so the eight-byte scan runs: every ASCII byte at every place
        // of a 20-byte text, beside non-ASCII text.
        for c in (0u8..=0x7f).map(char::from) {
            for at in 0..20 {
                let mut s: String = "abcdefghijklmnopqrst".into();
                s.replace_range(at..at + 1, &c.to_string());
                let t = format!("{s}é{s}");
                assert_eq!(text(&t), serde_json::to_string(&t).unwrap(), "{t:?}");
            }
        }
        for s in [
            "",
            "plain",
            "ümlaut \u{7f} \u{80} \u{2028} \u{2029} \u{feff} 😀",
            "\u{1}\u{1f}\"\\\u{8}\u{c}\n\r\t/",
            "tab\there \"quoted\" back\\slash",
        ] {
            assert_eq!(text(s), serde_json::to_string(s).unwrap(), "{s:?}");
        }
    }

    #[test]
    fn numbers_and_flags_are_display_text() {
        for n in [
            0u64,
            1,
            9,
            10,
            99,
            100,
            12345,
            u64::from(u32::MAX),
            u64::MAX,
        ] {
            let mut out = String::from("x");
            push_u64(&mut out, n);
            assert_eq!(out, format!("x{n}"));
        }
        let mut out = String::new();
        push_bool(&mut out, true);
        push_bool(&mut out, false);
        assert_eq!(out, "truefalse");
    }
}
