//! Relay authentication primitives (docs/relay-protocol.md §2): the
//! 32-byte pre-shared keys, challenge nonces, the HMAC-SHA256 proof and its constant-time
//! check, and peer-id syntax.
//!
//! The proof is computed over the ASCII text of the nonce's 64 lowercase hex characters, not
//! over the 32 decoded bytes: that is what v0 peers do, and a proof over the bytes would never
//! verify against them. Refuses: reading key files (the server does, and checks their mode),
//! generating randomness (nonces are passed in), and ever formatting a key or a proof into an
//! error message.

use hmac::{Hmac, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// Bytes in a key and in a nonce.
pub const KEY_BYTES: usize = 32;
/// Hex characters in a key file, a nonce and a proof.
pub const HEX_CHARS: usize = 64;

/// Why a key file's text is not a key. Never carries the text itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyError {
    /// Not exactly 64 characters once a trailing newline is removed.
    Length { chars: usize },
    /// A character that is not a hex digit, at this 0-based position.
    NotHex { position: usize },
}

impl std::fmt::Display for KeyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KeyError::Length { chars } => write!(
                f,
                "a relay key is 64 hex characters (32 bytes), this one has {chars}; make a new one with `agent-hub-server relay keygen`"
            ),
            KeyError::NotHex { position } => write!(
                f,
                "a relay key is 64 hex characters, character {} is not 0-9 or a-f",
                position + 1
            ),
        }
    }
}

impl std::error::Error for KeyError {}

fn hex_value(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// Parses a key file's text: 64 hex characters (either case), one trailing `\n` or `\r\n`
/// tolerated (editors add one).
pub fn parse_key(text: &str) -> Result<[u8; KEY_BYTES], KeyError> {
    let text = text.strip_suffix('\n').unwrap_or(text);
    let text = text.strip_suffix('\r').unwrap_or(text);
    decode_hex32(text)
}

fn decode_hex32(text: &str) -> Result<[u8; KEY_BYTES], KeyError> {
    let bytes = text.as_bytes();
    if bytes.len() != HEX_CHARS {
        return Err(KeyError::Length {
            chars: text.chars().count(),
        });
    }
    let mut out = [0u8; KEY_BYTES];
    for (i, pair) in bytes.chunks(2).enumerate() {
        let hi = hex_value(pair[0]).ok_or(KeyError::NotHex { position: 2 * i })?;
        let lo = hex_value(pair[1]).ok_or(KeyError::NotHex {
            position: 2 * i + 1,
        })?;
        out[i] = (hi << 4) | lo;
    }
    Ok(out)
}

/// A received proof's 32 bytes (64 hex digits of either case); None for anything else.
pub fn decode_proof(text: &str) -> Option<[u8; KEY_BYTES]> {
    decode_hex32(text).ok()
}

/// Lowercase hex of any bytes.
pub fn to_hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 2);
    push_hex(bytes, &mut s);
    s
}

/// Appends `bytes` as lowercase hex to `out`: a digit table, no `format!` per byte (it runs
/// for every audit record too, `event_loop::audit_chain`; docs/performance.md, issue 13).
pub fn push_hex(bytes: &[u8], out: &mut String) {
    // Both digits of every byte value, so each byte is one table read.
    const PAIRS: [[u8; 2]; 256] = {
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        let mut t = [[0u8; 2]; 256];
        let mut i = 0;
        while i < 256 {
            t[i] = [DIGITS[i >> 4], DIGITS[i & 15]];
            i += 1;
        }
        t
    };
    out.reserve(bytes.len() * 2);
    // 32 bytes at a time into a stack buffer, one `push_str` each: `String::push` per digit
    // was 2 % of the hub's user time under connection-per-op sends (docs/performance.md).
    let mut buf = [0u8; 64];
    for chunk in bytes.chunks(32) {
        for (pair, &b) in buf.chunks_exact_mut(2).zip(chunk) {
            pair.copy_from_slice(&PAIRS[usize::from(b)]);
        }
        // Invariant: every byte written is an ASCII hex digit.
        out.push_str(std::str::from_utf8(&buf[..2 * chunk.len()]).expect("ASCII hex digits"));
    }
}

/// The text of a key file for a key: 64 lowercase hex characters and a newline (keygen).
pub fn key_file_text(key: &[u8; KEY_BYTES]) -> String {
    let mut s = to_hex(key);
    s.push('\n');
    s
}

/// A nonce as it travels: 64 lowercase hex characters of 32 random bytes.
pub fn nonce_hex(nonce: &[u8; KEY_BYTES]) -> String {
    to_hex(nonce)
}

/// Whether a received nonce has the exact v0 form (64 lowercase hex). A peer is only ever
/// asked to sign text of this form, so a proof cannot be made over arbitrary chosen text.
pub fn is_nonce_hex(text: &str) -> bool {
    text.len() == HEX_CHARS && text.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'))
}

fn mac(key: &[u8; KEY_BYTES], nonce_hex: &str) -> HmacSha256 {
    // HMAC accepts keys of any length, so this cannot fail for 32 bytes.
    let mut mac = HmacSha256::new_from_slice(key).expect("HMAC takes a key of any length");
    mac.update(nonce_hex.as_bytes());
    mac
}

/// The proof for a challenge: lowercase hex of HMAC-SHA256 keyed with the 32 raw key bytes,
/// over the ASCII text of the nonce hex.
pub fn proof(key: &[u8; KEY_BYTES], nonce_hex: &str) -> String {
    to_hex(&mac(key, nonce_hex).finalize().into_bytes())
}

/// Checks a received proof in constant time (the comparison of the MAC; decoding the hex
/// only depends on the received text, never on the key). Hex digits of either case are read.
pub fn verify(key: &[u8; KEY_BYTES], nonce_hex: &str, received_proof: &str) -> bool {
    match decode_hex32(received_proof) {
        Ok(tag) => mac(key, nonce_hex).verify_slice(&tag).is_ok(),
        Err(_) => {
            // Spend the same HMAC work on a malformed proof, so timing tells nothing new.
            let _ = mac(key, nonce_hex).finalize();
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vector_key() -> [u8; 32] {
        let mut k = [0u8; 32];
        for (i, b) in k.iter_mut().enumerate() {
            *b = i as u8;
        }
        k
    }

    /// The v0 test vector of docs/relay-protocol.md §2.1, exactly.
    #[test]
    fn proof_matches_the_v0_test_vector() {
        let nonce = "ab".repeat(32);
        let expected = "583630234f7e60ecfa2a6ae2e98ee37876e3ff6344457723cb4b42fcf77f7fc0";
        assert_eq!(proof(&vector_key(), &nonce), expected);
        assert!(verify(&vector_key(), &nonce, expected));
        assert!(verify(&vector_key(), &nonce, &expected.to_uppercase()));
        // Over the decoded bytes instead of the text it would differ: the text is what counts.
        let mut wrong = HmacSha256::new_from_slice(&vector_key()).unwrap();
        wrong.update(&[0xab; 32]);
        assert_ne!(to_hex(&wrong.finalize().into_bytes()), expected);
    }

    #[test]
    fn verify_refuses_wrong_key_nonce_and_malformed_proofs() {
        let nonce = "ab".repeat(32);
        let good = proof(&vector_key(), &nonce);
        let mut other = vector_key();
        other[31] ^= 1;
        assert!(!verify(&other, &nonce, &good));
        assert!(!verify(&vector_key(), &"cd".repeat(32), &good));
        assert!(!verify(&vector_key(), &nonce, &good[..62]));
        assert!(!verify(&vector_key(), &nonce, ""));
        assert!(!verify(&vector_key(), &nonce, &format!("{good}00")));
        let mut flipped = good.clone().into_bytes();
        flipped[0] = if flipped[0] == b'0' { b'1' } else { b'0' };
        assert!(!verify(
            &vector_key(),
            &nonce,
            std::str::from_utf8(&flipped).unwrap()
        ));
        assert!(!verify(&vector_key(), &nonce, &"zz".repeat(32)));
    }

    #[test]
    fn parse_key_trims_one_trailing_newline_only() {
        let hex = to_hex(&vector_key());
        assert_eq!(parse_key(&hex).unwrap(), vector_key());
        assert_eq!(parse_key(&format!("{hex}\n")).unwrap(), vector_key());
        assert_eq!(parse_key(&format!("{hex}\r\n")).unwrap(), vector_key());
        assert_eq!(parse_key(&hex.to_uppercase()).unwrap(), vector_key());
        assert_eq!(
            parse_key(&key_file_text(&vector_key())).unwrap(),
            vector_key()
        );
        assert_eq!(
            parse_key(&format!("{hex}\n\n")),
            Err(KeyError::Length { chars: 65 })
        );
        assert_eq!(
            parse_key(&format!(" {hex}")),
            Err(KeyError::Length { chars: 65 })
        );
        assert_eq!(parse_key(&hex[..62]), Err(KeyError::Length { chars: 62 }));
        let mut bad = hex.clone().into_bytes();
        bad[10] = b'g';
        assert_eq!(
            parse_key(std::str::from_utf8(&bad).unwrap()),
            Err(KeyError::NotHex { position: 10 })
        );
        // The message never echoes the key text.
        let msg = parse_key(&format!("{hex}x")).unwrap_err().to_string();
        assert!(!msg.contains(&hex[..16]), "{msg}");
    }

    #[test]
    fn nonce_form() {
        let n = nonce_hex(&[0xab; 32]);
        assert_eq!(n, "ab".repeat(32));
        assert!(is_nonce_hex(&n));
        assert!(!is_nonce_hex(&n.to_uppercase()));
        assert!(!is_nonce_hex(&n[..63]));
        assert!(!is_nonce_hex(&format!("{}g", &n[..63])));
    }

    #[test]
    fn peer_ids() {
        use crate::kernel::names::valid_peer_id;
        assert!(valid_peer_id("a"));
        assert!(valid_peer_id("barrys-mac_74371ce5"));
        assert!(valid_peer_id(&"x".repeat(128)));
        assert!(!valid_peer_id(""));
        assert!(!valid_peer_id(&"x".repeat(129)));
        for bad in ["a b", "a.b", "a@b", "é", "a/b", "a\n"] {
            assert!(!valid_peer_id(bad), "{bad:?}");
        }
    }
}
