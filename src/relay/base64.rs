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

pub fn encode(raw: &[u8]) -> String {
    #[cfg(test)]
    calls::ENCODES.with(|c| c.set(c.get() + 1));
    let mut out = String::with_capacity(raw.len().div_ceil(3) * 4);
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

pub fn decode(text: &str) -> Result<Vec<u8>, Base64Error> {
    #[cfg(test)]
    calls::DECODES.with(|c| c.set(c.get() + 1));
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

    #[test]
    fn refuses_non_canonical_and_malformed() {
        for bad in [
            "Zg", "Zh==", "Zm9=", "Z===", "Zg==Zg==", "Zm9v\n", "Zm-v", "====",
        ] {
            assert!(decode(bad).is_err(), "{bad:?} must be refused");
        }
    }
}
