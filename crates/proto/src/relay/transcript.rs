//! The v1 handshake's proofs and the link's frame keys (docs/relay-protocol.md §2.2): each
//! is an HMAC-SHA256, keyed with the peer's 32-byte key, over one labelled, length-prefixed
//! transcript of the handshake, so a proof made for one direction, one pair of peers, one
//! pair of nonces or one offer is worth nothing for any other.
//!
//! v0's proof is the HMAC over the 64 ASCII hex characters of a nonce (`auth::proof`), so a
//! hub that signs every challenge it receives is a signing oracle: an attacker answering our
//! dial hands us our own challenge and replays our answer to our listener. Here every input
//! begins with a 4-byte big-endian length (its first byte is 0x00, never a hex digit), so no
//! v1 input is ever a v0 input, and each use has its own label, so no v1 input is another's.
//!
//! The transcript, every field a byte string written as `u32 BE length ‖ bytes`:
//!
//! | # | field |
//! |---|---|
//! | 1 | label: `agent-hub relay v1 dialer proof`, `… acceptor proof`, `… frame key dialer to acceptor` or `… frame key acceptor to dialer` |
//! | 2 | the dialer's peer id (the handshake's `from_peer`) |
//! | 3 | the acceptor's peer id (the challenge's `peer`, the id the dialer dialled) |
//! | 4 | the challenge's `nonce` (64 hex characters as text) |
//! | 5 | the handshake's `nonce` (text; empty when it has none) |
//! | 6 | the handshake's `proto`, decimal |
//! | 7 | how many `features` the handshake lists, decimal; then one field per name, in its order |
//! | 8 | the handshake's `version` |
//! | 9 | the handshake's `transient`: `1` or `0` |
//! | 10 | the handshake's `listen_port`, decimal; empty when absent |
//!
//! and, for the acceptor's proof and both frame keys, after them:
//!
//! | # | field |
//! |---|---|
//! | 11 | the ack's `proto`, decimal |
//! | 12 | how many `features` the ack lists (the agreed set), decimal; then one field per name |
//! | 13 | the ack's `version` |
//!
//! So the dialer's proof covers its whole offer, and the acceptor's proof and the frame keys
//! cover the offer and the answer: a man in the middle who strips a feature from either (to
//! turn off `frame-mac` or `mutual-auth`) makes the proof fail. The frame keys use the peer's
//! key as an HKDF pseudo-random key (it is 32 uniformly random bytes, so no extract step is
//! needed) and the transcript as HKDF-Expand's info, one label per direction: one HMAC block
//! each. Refuses: IO, randomness, deciding whether a link is acceptable (`session` does),
//! and formatting a key, a proof or a frame key into any text.

use crate::relay::auth::{decode_proof, to_hex, KEY_BYTES};
use crate::relay::message::{Handshake, HandshakeAck};
use hmac::{Hmac, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

pub const LABEL_DIALER_PROOF: &str = "agent-hub relay v1 dialer proof";
pub const LABEL_ACCEPTOR_PROOF: &str = "agent-hub relay v1 acceptor proof";
pub const LABEL_KEY_DIALER_TO_ACCEPTOR: &str = "agent-hub relay v1 frame key dialer to acceptor";
pub const LABEL_KEY_ACCEPTOR_TO_DIALER: &str = "agent-hub relay v1 frame key acceptor to dialer";

/// What both proofs are bound to: the challenge and the dialer's handshake.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transcript {
    pub dialer: String,
    pub acceptor: String,
    pub acceptor_nonce: String,
    /// Empty when the handshake carried no nonce.
    pub dialer_nonce: String,
    pub proto: u32,
    /// The feature names as the handshake lists them (unknown ones too, in their order).
    pub offered: Vec<String>,
    pub dialer_version: String,
    pub transient: bool,
    pub listen_port: Option<u16>,
}

/// What the acceptor's proof and the frame keys add: its answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AckFields {
    pub proto: u32,
    /// The agreed names as the ack lists them.
    pub agreed: Vec<String>,
    pub acceptor_version: String,
}

impl AckFields {
    /// The fields of an ack as it is (or will be) on the wire; its `proof` is not one of them.
    pub fn of(ack: &HandshakeAck) -> AckFields {
        AckFields {
            proto: ack.proto.unwrap_or(0),
            agreed: ack.features.clone().unwrap_or_default(),
            acceptor_version: ack.version.clone().unwrap_or_default(),
        }
    }
}

/// One key per direction for `frame-mac`.
#[derive(Clone, PartialEq, Eq)]
pub struct FrameKeys {
    pub dialer_to_acceptor: [u8; 32],
    pub acceptor_to_dialer: [u8; 32],
}

impl std::fmt::Debug for FrameKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FrameKeys(<redacted>)")
    }
}

fn put(out: &mut Vec<u8>, bytes: &[u8]) {
    // Every field is bounded by the 16 KiB handshake line cap, so its length fits a u32.
    let len = u32::try_from(bytes.len()).unwrap_or(u32::MAX);
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(bytes);
}

fn put_list(out: &mut Vec<u8>, names: &[String]) {
    put(out, names.len().to_string().as_bytes());
    for n in names {
        put(out, n.as_bytes());
    }
}

fn mac(key: &[u8; KEY_BYTES], input: &[u8]) -> HmacSha256 {
    // HMAC takes a key of any length, so this cannot fail for 32 bytes.
    let mut m = HmacSha256::new_from_slice(key).expect("HMAC takes a key of any length");
    m.update(input);
    m
}

fn verify(key: &[u8; KEY_BYTES], input: &[u8], received: &str) -> bool {
    match decode_proof(received) {
        Some(tag) => mac(key, input).verify_slice(&tag).is_ok(),
        None => {
            // The same HMAC work for a malformed proof, so timing tells nothing new.
            let _ = mac(key, input).finalize();
            false
        }
    }
}

impl Transcript {
    /// The transcript of a handshake: `dialer` is its `from_peer`, `acceptor` and
    /// `acceptor_nonce` come from the challenge it answers.
    pub fn new(dialer: &str, acceptor: &str, acceptor_nonce: &str, hs: &Handshake) -> Transcript {
        Transcript {
            dialer: dialer.to_owned(),
            acceptor: acceptor.to_owned(),
            acceptor_nonce: acceptor_nonce.to_owned(),
            dialer_nonce: hs.nonce.clone().unwrap_or_default(),
            proto: hs.proto.unwrap_or(0),
            offered: hs.features.clone().unwrap_or_default(),
            dialer_version: hs.version.clone(),
            transient: hs.transient == Some(true),
            listen_port: hs.listen_port,
        }
    }

    /// The exact bytes MACed for `label` (fields 1–10, then 11–13 when `ack` is given).
    pub fn encode(&self, label: &str, ack: Option<&AckFields>) -> Vec<u8> {
        let mut out = Vec::with_capacity(256);
        put(&mut out, label.as_bytes());
        put(&mut out, self.dialer.as_bytes());
        put(&mut out, self.acceptor.as_bytes());
        put(&mut out, self.acceptor_nonce.as_bytes());
        put(&mut out, self.dialer_nonce.as_bytes());
        put(&mut out, self.proto.to_string().as_bytes());
        put_list(&mut out, &self.offered);
        put(&mut out, self.dialer_version.as_bytes());
        put(&mut out, if self.transient { b"1" } else { b"0" });
        let port = self.listen_port.map(|p| p.to_string()).unwrap_or_default();
        put(&mut out, port.as_bytes());
        if let Some(a) = ack {
            put(&mut out, a.proto.to_string().as_bytes());
            put_list(&mut out, &a.agreed);
            put(&mut out, a.acceptor_version.as_bytes());
        }
        out
    }

    /// The dialer's `proof`, lowercase hex.
    pub fn dialer_proof(&self, key: &[u8; KEY_BYTES]) -> String {
        let input = self.encode(LABEL_DIALER_PROOF, None);
        to_hex(&mac(key, &input).finalize().into_bytes())
    }

    /// Checks a handshake's `proof` in constant time.
    pub fn verify_dialer_proof(&self, key: &[u8; KEY_BYTES], proof: &str) -> bool {
        verify(key, &self.encode(LABEL_DIALER_PROOF, None), proof)
    }

    /// The acceptor's `proof` in its ack, lowercase hex.
    pub fn acceptor_proof(&self, ack: &AckFields, key: &[u8; KEY_BYTES]) -> String {
        let input = self.encode(LABEL_ACCEPTOR_PROOF, Some(ack));
        to_hex(&mac(key, &input).finalize().into_bytes())
    }

    /// Checks an ack's `proof` in constant time.
    pub fn verify_acceptor_proof(
        &self,
        ack: &AckFields,
        key: &[u8; KEY_BYTES],
        proof: &str,
    ) -> bool {
        verify(key, &self.encode(LABEL_ACCEPTOR_PROOF, Some(ack)), proof)
    }

    /// The link's two `frame-mac` keys.
    pub fn frame_keys(&self, ack: &AckFields, key: &[u8; KEY_BYTES]) -> FrameKeys {
        let derive = |label: &str| -> [u8; 32] {
            mac(key, &self.encode(label, Some(ack)))
                .finalize()
                .into_bytes()
                .into()
        };
        FrameKeys {
            dialer_to_acceptor: derive(LABEL_KEY_DIALER_TO_ACCEPTOR),
            acceptor_to_dialer: derive(LABEL_KEY_ACCEPTOR_TO_DIALER),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::relay::auth;

    fn vector_key() -> [u8; 32] {
        let mut k = [0u8; 32];
        for (i, b) in k.iter_mut().enumerate() {
            *b = i as u8;
        }
        k
    }

    /// The test vector of protocol/relay/auth/v1_vectors.json.
    pub(crate) fn vector() -> (Transcript, AckFields) {
        let t = Transcript {
            dialer: "laptop".into(),
            acceptor: "mini".into(),
            acceptor_nonce: "ab".repeat(32),
            dialer_nonce: "cd".repeat(32),
            proto: 1,
            offered: ["unknown-ok", "mutual-auth", "frame-bin", "frame-mac"]
                .map(String::from)
                .to_vec(),
            dialer_version: "0.1.0".into(),
            transient: false,
            listen_port: Some(46111),
        };
        let a = AckFields {
            proto: 1,
            agreed: ["mutual-auth", "frame-bin", "frame-mac"]
                .map(String::from)
                .to_vec(),
            acceptor_version: "0.1.0".into(),
        };
        (t, a)
    }

    #[test]
    fn the_encoding_is_labelled_and_length_prefixed_exactly() {
        let (t, a) = vector();
        let bytes = t.encode("L", Some(&a));
        let mut want = Vec::new();
        for f in [
            &b"L"[..],
            b"laptop",
            b"mini",
            "ab".repeat(32).as_bytes(),
            "cd".repeat(32).as_bytes(),
            b"1",
            b"4",
            b"unknown-ok",
            b"mutual-auth",
            b"frame-bin",
            b"frame-mac",
            b"0.1.0",
            b"0",
            b"46111",
            b"1",
            b"3",
            b"mutual-auth",
            b"frame-bin",
            b"frame-mac",
            b"0.1.0",
        ] {
            want.extend_from_slice(&(f.len() as u32).to_be_bytes());
            want.extend_from_slice(f);
        }
        assert_eq!(bytes, want);
        // Without the ack: the first ten fields only.
        assert!(bytes.starts_with(&t.encode("L", None)));
        // Domain separation from v0: a v0 proof's input is 64 hex characters; every v1 input
        // starts with a zero byte.
        assert_eq!(t.encode(LABEL_DIALER_PROOF, None)[0], 0);
    }

    #[test]
    fn proofs_verify_only_for_their_own_direction_and_transcript() {
        let (t, a) = vector();
        let key = vector_key();
        let dp = t.dialer_proof(&key);
        let ap = t.acceptor_proof(&a, &key);
        assert!(t.verify_dialer_proof(&key, &dp));
        assert!(t.verify_dialer_proof(&key, &dp.to_uppercase()));
        assert!(t.verify_acceptor_proof(&a, &key, &ap));
        // Reflection: one direction's proof is not the other's.
        assert!(!t.verify_dialer_proof(&key, &ap));
        assert!(!t.verify_acceptor_proof(&a, &key, &dp));
        // Not a v0 proof of either nonce, and a v0 proof is not a v1 proof.
        for n in [&t.acceptor_nonce, &t.dialer_nonce] {
            assert_ne!(dp, auth::proof(&key, n));
            assert!(!t.verify_dialer_proof(&key, &auth::proof(&key, n)));
            assert!(!t.verify_acceptor_proof(&a, &key, &auth::proof(&key, n)));
        }
        // Every field counts.
        type Change = Box<dyn Fn(&mut Transcript, &mut AckFields)>;
        let changes: Vec<(&str, Change)> = vec![
            (
                "ids swapped",
                Box::new(|t, _| std::mem::swap(&mut t.dialer, &mut t.acceptor)),
            ),
            (
                "nonces swapped",
                Box::new(|t, _| std::mem::swap(&mut t.acceptor_nonce, &mut t.dialer_nonce)),
            ),
            ("proto", Box::new(|t, _| t.proto = 2)),
            (
                "an offer stripped",
                Box::new(|t, _| {
                    t.offered.pop();
                }),
            ),
            ("the version", Box::new(|t, _| t.dialer_version.push('x'))),
            ("transient", Box::new(|t, _| t.transient = true)),
            ("listen port", Box::new(|t, _| t.listen_port = None)),
            (
                "agreed stripped",
                Box::new(|_, a| {
                    a.agreed.retain(|f| f != "frame-mac");
                }),
            ),
            ("ack proto", Box::new(|_, a| a.proto = 0)),
            ("ack version", Box::new(|_, a| a.acceptor_version.clear())),
            // Moving a name between lists must not give the same bytes (count fields).
            (
                "a name moved",
                Box::new(|t, a| {
                    let f = t.offered.pop().unwrap();
                    a.agreed.insert(0, f);
                }),
            ),
        ];
        for (what, change) in changes {
            let (mut t2, mut a2) = vector();
            change(&mut t2, &mut a2);
            assert!(
                !t2.verify_acceptor_proof(&a2, &key, &ap),
                "{what}: the acceptor proof must change"
            );
            assert_ne!(t2.frame_keys(&a2, &key), t.frame_keys(&a, &key), "{what}");
            if t2 != t {
                assert!(!t2.verify_dialer_proof(&key, &dp), "{what}");
            }
        }
        let mut other = key;
        other[0] ^= 1;
        assert!(!t.verify_dialer_proof(&other, &dp));
        assert!(!t.verify_dialer_proof(&key, "zz"));
        assert!(!t.verify_dialer_proof(&key, &dp[..62]));
    }

    #[test]
    fn frame_keys_differ_per_direction_and_from_the_proofs() {
        let (t, a) = vector();
        let key = vector_key();
        let k = t.frame_keys(&a, &key);
        assert_ne!(k.dialer_to_acceptor, k.acceptor_to_dialer);
        assert_ne!(
            auth::to_hex(&k.dialer_to_acceptor),
            t.acceptor_proof(&a, &key)
        );
        assert_eq!(format!("{k:?}"), "FrameKeys(<redacted>)");
    }

    #[test]
    fn a_transcript_from_a_handshake_takes_its_fields_as_sent() {
        let hs = Handshake {
            proof: String::new(),
            version: "0.1.0".into(),
            listen_port: Some(46111),
            transient: None,
            proto: Some(1),
            features: Some(vec![
                "unknown-ok".into(),
                "mutual-auth".into(),
                "frame-bin".into(),
                "frame-mac".into(),
            ]),
            nonce: Some("cd".repeat(32)),
        };
        assert_eq!(
            Transcript::new("laptop", "mini", &"ab".repeat(32), &hs),
            vector().0
        );
        let ack = HandshakeAck {
            status: crate::relay::message::HandshakeStatus::Ok,
            proto: Some(1),
            features: Some(vec![
                "mutual-auth".into(),
                "frame-bin".into(),
                "frame-mac".into(),
            ]),
            proof: Some("ignored".into()),
            version: Some("0.1.0".into()),
        };
        assert_eq!(AckFields::of(&ack), vector().1);
    }
}
