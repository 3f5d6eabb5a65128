//! Padded standard base64 (RFC 4648 §4), for `session_transfer`'s `data` on NDJSON links.
//!
//! Strict on decode: only the canonical encoding of some byte string is accepted (padding
//! required, unused trailing bits zero), so base64 → raw → base64 gives back the same text.
//! That is what lets a chunk cross a frame link raw and come out as the same line it went in
//! as (relay-protocol.md §4, "Binary data in frames"). Used only at the line edge: a chunk is
//! decoded when a line's message is checked and encoded when a raw chunk is written as a line,
//! never on a frame link. Refuses: line breaks, URL alphabet.

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Calls of `encode` and `decode` on this thread, counted in test builds only, so the relay's
/// tests can check how many times a chunk is converted on each side of a link.
#[cfg(test)]
pub(crate) mod calls {
    use std::cell::Cell;

    thread_local! {
        pub(crate) static ENCODES: Cell<usize> = const { Cell::new(0) };
        pub(crate) static DECODES: Cell<usize> = const { Cell::new(0) };
    }

    /// (encodes, decodes) so far on this thread.
    pub(crate) fn get() -> (usize, usize) {
        (ENCODES.with(Cell::get), DECODES.with(Cell::get))
    }
}

/// Sextet values by byte; `INVALID` for bytes outside the alphabet (`=` included).
const DECODE: [u8; 256] = {
    let mut t = [INVALID; 256];
    let mut i = 0;
    while i < 64 {
        t[ALPHABET[i] as usize] = i as u8;
        i += 1;
    }
    t
};
const INVALID: u8 = 0xff;

/// Whole 3-byte groups go through a loop over fixed-size chunks (no bounds checks, no per-byte
/// branches); the last 1 or 2 bytes, if any, get their padding after it.
pub fn encode(raw: &[u8]) -> String {
    #[cfg(test)]
    calls::ENCODES.with(|c| c.set(c.get() + 1));
    let sextet = |n: u32, shift: u32| ALPHABET[((n >> shift) & 63) as usize];
    let mut out = vec![0u8; raw.len().div_ceil(3) * 4];
    let groups = raw.chunks_exact(3);
    let rest = groups.remainder();
    let mut quads = out.chunks_exact_mut(4);
    for (g, q) in groups.zip(&mut quads) {
        let n = (u32::from(g[0]) << 16) | (u32::from(g[1]) << 8) | u32::from(g[2]);
        q.copy_from_slice(&[sextet(n, 18), sextet(n, 12), sextet(n, 6), sextet(n, 0)]);
    }
    if let Some(q) = quads.next() {
        let n = (u32::from(rest[0]) << 16) | (u32::from(*rest.get(1).unwrap_or(&0)) << 8);
        q[0] = sextet(n, 18);
        q[1] = sextet(n, 12);
        q[2] = if rest.len() > 1 { sextet(n, 6) } else { b'=' };
        q[3] = b'=';
    }
    // Every byte written is from ALPHABET or '=': ASCII.
    String::from_utf8(out).expect("base64 is ASCII")
}

fn value(c: u8) -> Option<u32> {
    match c {
        b'A'..=b'Z' => Some(u32::from(c - b'A')),
        b'a'..=b'z' => Some(u32::from(c - b'a') + 26),
        b'0'..=b'9' => Some(u32::from(c - b'0') + 52),
        b'+' => Some(62),
        b'/' => Some(63),
        _ => None,
    }
}

/// Why a text is not canonical padded base64.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Base64Error(pub &'static str);

impl std::fmt::Display for Base64Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

/// Every quad but the last goes through a loop over fixed-size chunks with one table lookup per
/// character and one validity test per quad; the last quad (the only one that may be padded)
/// and any error go to `decode_checked`, so the result and the error text are exactly its own.
pub fn decode(text: &str) -> Result<Vec<u8>, Base64Error> {
    #[cfg(test)]
    calls::DECODES.with(|c| c.set(c.get() + 1));
    let bytes = text.as_bytes();
    if bytes.len() % 4 != 0 || bytes.is_empty() {
        return decode_checked(text);
    }
    let body = &bytes[..bytes.len() - 4];
    let mut out = vec![0u8; body.len() / 4 * 3];
    for (q, g) in body.chunks_exact(4).zip(out.chunks_exact_mut(3)) {
        let v = [
            DECODE[q[0] as usize],
            DECODE[q[1] as usize],
            DECODE[q[2] as usize],
            DECODE[q[3] as usize],
        ];
        if (v[0] | v[1] | v[2] | v[3]) & 0x80 != 0 {
            return decode_checked(text);
        }
        let n = (u32::from(v[0]) << 18)
            | (u32::from(v[1]) << 12)
            | (u32::from(v[2]) << 6)
            | u32::from(v[3]);
        g.copy_from_slice(&[(n >> 16) as u8, (n >> 8) as u8, n as u8]);
    }
    // Everything before the last quad is ASCII now, so the last 4 bytes are whole characters.
    match std::str::from_utf8(&bytes[body.len()..]).map(decode_checked) {
        Ok(Ok(tail)) => {
            out.extend_from_slice(&tail);
            Ok(out)
        }
        // An error in the last quad: the whole text's error is the checked decoder's.
        _ => decode_checked(text),
    }
}

/// Quad by quad, checking each: the reference decoder, and what names the error when the fast
/// path finds one.
fn decode_checked(text: &str) -> Result<Vec<u8>, Base64Error> {
    let bytes = text.as_bytes();
    if bytes.len() % 4 != 0 {
        return Err(Base64Error(
            "length is not a multiple of 4 (padded base64 expected)",
        ));
    }
    let mut out = Vec::with_capacity(bytes.len() / 4 * 3);
    let quads = bytes.len() / 4;
    for (i, q) in bytes.chunks(4).enumerate() {
        let last = i + 1 == quads;
        let pad = q.iter().rev().take_while(|&&c| c == b'=').count();
        if pad > 2 || (pad > 0 && !last) {
            return Err(Base64Error("padding in the wrong place"));
        }
        let mut n = 0u32;
        for &c in &q[..4 - pad] {
            n = (n << 6)
                | value(c).ok_or(Base64Error("a character outside the base64 alphabet"))?;
        }
        n <<= 6 * pad as u32;
        let b = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
        let keep = 3 - pad;
        // Canonical: the bits a padded quad does not carry must be zero.
        if b[keep..].iter().any(|&x| x != 0) {
            return Err(Base64Error(
                "non-zero bits before the padding (not canonical)",
            ));
        }
        out.extend_from_slice(&b[..keep]);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc4648_vectors_round_trip() {
        for (raw, text) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(encode(raw.as_bytes()), text);
            assert_eq!(decode(text).unwrap(), raw.as_bytes());
        }
        let all: Vec<u8> = (0..=255).collect();
        assert_eq!(decode(&encode(&all)).unwrap(), all);
    }

    /// The encoder this module had first, byte at a time: the reference for the fast one.
    fn encode_reference(raw: &[u8]) -> String {
        let mut out = String::new();
        for chunk in raw.chunks(3) {
            let b = [
                chunk[0],
                *chunk.get(1).unwrap_or(&0),
                *chunk.get(2).unwrap_or(&0),
            ];
            let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
            let sextet = |shift: u32| ALPHABET[((n >> shift) & 63) as usize] as char;
            out.push(sextet(18));
            out.push(sextet(12));
            out.push(if chunk.len() > 1 { sextet(6) } else { '=' });
            out.push(if chunk.len() > 2 { sextet(0) } else { '=' });
        }
        out
    }

    #[test]
    fn the_fast_paths_agree_with_the_reference_on_every_input_tried() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for len in (0..70).chain([1000, 4095, 4096, 4097, 65_536]) {
            let raw: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            let text = encode(&raw);
            assert_eq!(text, encode_reference(&raw), "encode, {len} bytes");
            assert_eq!(decode(&text), Ok(raw.clone()), "decode, {len} bytes");
            assert_eq!(decode(&text), decode_checked(&text));
            // Mutations anywhere (the bulk or the last quad): same result, same error text.
            for _ in 0..20 {
                if text.is_empty() {
                    break;
                }
                let mut m = text.clone().into_bytes();
                let i = next() as usize % m.len();
                m[i] = [b'=', b'-', b'_', b' ', b'\n', b'A', 0xc3][next() as usize % 7];
                if m[i] == 0xc3 {
                    // A two-byte character (é) over two bytes, so the length stays a multiple
                    // of 4 and it may straddle the last quad's start.
                    if i + 1 == m.len() {
                        continue;
                    }
                    m[i + 1] = 0xa9;
                }
                let Ok(m) = String::from_utf8(m) else {
                    continue;
                };
                assert_eq!(decode(&m), decode_checked(&m), "{len} bytes, {i}: {m:?}");
                let mut cut = text.clone();
                cut.truncate(next() as usize % text.len());
                assert_eq!(decode(&cut), decode_checked(&cut));
            }
        }
    }

    #[test]
    fn refuses_non_canonical_and_malformed() {
        for bad in [
            "Zg", "Zh==", "Zm9=", "Z===", "Zg==Zg==", "Zm9v\n", "Zm-v", "====",
        ] {
            assert!(decode(bad).is_err(), "{bad:?} must be refused");
        }
    }
}
