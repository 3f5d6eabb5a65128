//! `frame-mac` (docs/relay-protocol.md §4.1): every frame after a v1 handshake carries a tag
//! that authenticates it under a per-link, per-direction key (`transcript::FrameKeys`) and an
//! implicit sequence number, so a frame modified, dropped, replayed, reordered or injected in
//! flight is detected at the first frame that follows and the link is dropped.
//!
//! ```text
//! ┌──────────────┬───────────┬───────────────────────┬───────────────┐
//! │ len: u32 BE  │ flags: u8 │ payload: len-17 bytes │ tag: 16 bytes │
//! └──────────────┴───────────┴───────────────────────┴───────────────┘
//! tag = HMAC-SHA256(key of this direction, seq: u64 BE ‖ len ‖ flags ‖ payload)[..16]
//! ```
//!
//! `len` counts flags, payload and tag, so it is at least 17 and at most 16 more than
//! `FRAME_CAP_BYTES` (a message that fits a `frame-bin` frame fits this one). `payload` is the frame-bin
//! payload as sent (LZ4 when flagged). `seq` counts this direction's frames from 0, the first
//! frame after the ack; it is never sent. The tag is checked before the payload is
//! decompressed or parsed, so unauthenticated bytes reach neither LZ4 nor JSON. Confidentiality
//! is not provided (the bytes are readable); integrity and ordering are.
//!
//! Also the feature rules: `frame-mac` needs `frame-bin` and `mutual-auth`, and a peer whose
//! `allow_claudectl` is off gets a link only with all three. Refuses: IO, and choosing keys.

use crate::relay::frame::{self, Frame, FrameError, FRAME_CAP_BYTES, HEADER_BYTES, RESERVED_FLAGS};
use crate::relay::transcript::FrameKeys;
use crate::relay::Feature;
use hmac::{Hmac, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// Bytes of the tag after each frame's payload (HMAC-SHA256 truncated to 128 bits).
pub const TAG_BYTES: usize = 16;
/// The largest `len` on a frame-mac link.
pub const MAX_LEN_BYTES: usize = FRAME_CAP_BYTES + TAG_BYTES;

/// Why bytes on a frame-mac link are refused. Each one closes the link.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrameMacError {
    /// The frame is well formed but its tag does not check for this position in the stream.
    BadTag { seq: u64 },
    /// `len` too short to hold flags and a tag.
    TooShort { len_bytes: usize },
    /// `len` over `MAX_LEN_BYTES`.
    TooLong { len_bytes: usize },
    /// A framing error of the authenticated frame (reserved flags, a bad LZ4 block).
    Frame(FrameError),
    /// 2^64 frames in one direction: the sequence would repeat.
    Exhausted,
}

impl std::fmt::Display for FrameMacError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FrameMacError::BadTag { seq } => write!(
                f,
                "frame {seq} failed its frame-mac check: the stream was modified in flight, or a frame was dropped, replayed, reordered or injected"
            ),
            FrameMacError::TooShort { len_bytes } => write!(
                f,
                "frame length {len_bytes} is too short for flags and a {TAG_BYTES}-byte frame-mac tag"
            ),
            FrameMacError::TooLong { len_bytes } => write!(
                f,
                "frame length {len_bytes} exceeds the cap of {MAX_LEN_BYTES} bytes (frame-mac)"
            ),
            FrameMacError::Frame(e) => write!(f, "{e}"),
            FrameMacError::Exhausted => f.write_str("frame sequence numbers exhausted"),
        }
    }
}

impl std::error::Error for FrameMacError {}

#[derive(Clone)]
struct Direction {
    key: [u8; 32],
    seq: u64,
}

impl Direction {
    fn tag(&self, header: &[u8], payload: &[u8]) -> HmacSha256 {
        // HMAC takes a key of any length, so this cannot fail for 32 bytes.
        let mut m = HmacSha256::new_from_slice(&self.key).expect("HMAC takes any key length");
        m.update(&self.seq.to_be_bytes());
        m.update(header);
        m.update(payload);
        m
    }
}

/// One link's frame-mac state: the key and next sequence number of each direction.
#[derive(Clone)]
pub struct FrameMac {
    tx: Direction,
    rx: Direction,
}

impl std::fmt::Debug for FrameMac {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FrameMac")
            .field("sent", &self.tx.seq)
            .field("received", &self.rx.seq)
            .finish_non_exhaustive()
    }
}

impl FrameMac {
    /// The dialer's side: it sends under the dialer-to-acceptor key.
    pub fn for_dialer(keys: &FrameKeys) -> FrameMac {
        FrameMac::new(keys.dialer_to_acceptor, keys.acceptor_to_dialer)
    }

    pub fn for_acceptor(keys: &FrameKeys) -> FrameMac {
        FrameMac::new(keys.acceptor_to_dialer, keys.dialer_to_acceptor)
    }

    fn new(send: [u8; 32], receive: [u8; 32]) -> FrameMac {
        FrameMac {
            tx: Direction { key: send, seq: 0 },
            rx: Direction {
                key: receive,
                seq: 0,
            },
        }
    }

    /// Frames sent and received so far (the next sequence numbers).
    pub fn counts(&self) -> (u64, u64) {
        (self.tx.seq, self.rx.seq)
    }

    /// Adds the tag to one frame-bin frame (`frame::encode_frame`'s output) and takes the
    /// next sequence number.
    pub fn seal(&mut self, mut frame: Vec<u8>) -> Result<Vec<u8>, FrameMacError> {
        let next = self.tx.seq.checked_add(1).ok_or(FrameMacError::Exhausted)?;
        if frame.len() < HEADER_BYTES {
            return Err(FrameMacError::TooShort {
                len_bytes: frame.len(),
            });
        }
        let len = frame.len() - 4 + TAG_BYTES;
        if len > MAX_LEN_BYTES {
            return Err(FrameMacError::TooLong { len_bytes: len });
        }
        // len ≤ MAX_LEN_BYTES, far below u32::MAX.
        frame[..4].copy_from_slice(&(len as u32).to_be_bytes());
        let tag = self
            .tx
            .tag(&frame[..HEADER_BYTES], &frame[HEADER_BYTES..])
            .finalize()
            .into_bytes();
        frame.extend_from_slice(&tag[..TAG_BYTES]);
        self.tx.seq = next;
        Ok(frame)
    }

    /// The frame at the start of `buf`, authenticated: `Ok(Some((frame, bytes consumed)))`,
    /// `Ok(None)` for "need more bytes", or the error as soon as the bytes so far prove one.
    pub fn open(&mut self, buf: &[u8]) -> Result<Option<(Frame, usize)>, FrameMacError> {
        if buf.len() < 4 {
            return Ok(None);
        }
        let len = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
        if len < 1 + TAG_BYTES {
            return Err(FrameMacError::TooShort { len_bytes: len });
        }
        if len > MAX_LEN_BYTES {
            return Err(FrameMacError::TooLong { len_bytes: len });
        }
        let Some(&flags) = buf.get(4) else {
            return Ok(None);
        };
        if flags & RESERVED_FLAGS != 0 {
            return Err(FrameMacError::Frame(FrameError::ReservedBits { flags }));
        }
        let total = 4 + len;
        if buf.len() < total {
            return Ok(None);
        }
        let tag_at = total - TAG_BYTES;
        let next = self.rx.seq.checked_add(1).ok_or(FrameMacError::Exhausted)?;
        let checks = self
            .rx
            .tag(&buf[..HEADER_BYTES], &buf[HEADER_BYTES..tag_at])
            .verify_truncated_left(&buf[tag_at..total])
            .is_ok();
        if !checks {
            return Err(FrameMacError::BadTag { seq: self.rx.seq });
        }
        self.rx.seq = next;
        let frame =
            frame::open_payload(flags, &buf[HEADER_BYTES..tag_at]).map_err(FrameMacError::Frame)?;
        Ok(Some((frame, total)))
    }
}

// ----- feature rules -----

/// What a link with a peer whose `allow_claudectl` is off must agree: the acceptor's proof (which
/// commits the agreed set) and frame MACs, which need frames.
pub const REQUIRED_WITHOUT_V0: [Feature; 3] =
    [Feature::MutualAuth, Feature::FrameBin, Feature::FrameMac];

/// `frame-mac` needs `frame-bin` (its tag lives in frames) and `mutual-auth` (its keys need
/// the dialer's nonce, and only the acceptor's proof commits the agreed set).
pub fn prerequisites_met(features: &[Feature]) -> bool {
    features.contains(&Feature::FrameBin) && features.contains(&Feature::MutualAuth)
}

/// An agreed set made coherent: `frame-mac` dropped when its prerequisites are not agreed.
pub fn settle(mut agreed: Vec<Feature>) -> Vec<Feature> {
    if !prerequisites_met(&agreed) {
        agreed.retain(|&f| f != Feature::FrameMac);
    }
    agreed
}

/// The features of `REQUIRED_WITHOUT_V0` missing from an agreed set.
pub fn missing_without_v0(agreed: &[Feature]) -> Vec<Feature> {
    REQUIRED_WITHOUT_V0
        .into_iter()
        .filter(|f| !agreed.contains(f))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::relay::frame::{decode_frame, encode_frame, FLAG_LZ4};

    fn keys() -> FrameKeys {
        FrameKeys {
            dialer_to_acceptor: [1; 32],
            acceptor_to_dialer: [2; 32],
        }
    }

    fn pair() -> (FrameMac, FrameMac) {
        (
            FrameMac::for_dialer(&keys()),
            FrameMac::for_acceptor(&keys()),
        )
    }

    fn sealed(m: &mut FrameMac, body: &[u8]) -> Vec<u8> {
        m.seal(encode_frame(body, true).unwrap()).unwrap()
    }

    #[test]
    fn frames_round_trip_in_order_each_direction_its_own_key() {
        let (mut d, mut a) = pair();
        let small = sealed(&mut d, b"{\"x\":1}");
        assert_eq!(small.len(), 4 + 1 + 7 + TAG_BYTES);
        assert_eq!(
            u32::from_be_bytes(small[..4].try_into().unwrap()) as usize,
            small.len() - 4
        );
        let big_body = vec![b'a'; 8192];
        let big = sealed(&mut d, &big_body);
        assert_eq!(big[4], FLAG_LZ4, "compressed as in frame-bin");
        let mut both = small.clone();
        both.extend_from_slice(&big);
        let (f1, n1) = a.open(&both).unwrap().unwrap();
        assert_eq!((f1.body.as_slice(), n1), (&b"{\"x\":1}"[..], small.len()));
        let (f2, n2) = a.open(&both[n1..]).unwrap().unwrap();
        assert_eq!((f2.body, n2), (big_body, big.len()));
        assert_eq!(a.counts(), (0, 2));
        assert_eq!(d.counts(), (2, 0));
        // The acceptor's own frames go the other way under the other key.
        let back = sealed(&mut a, b"{}");
        assert!(d.open(&back).unwrap().is_some());
        let (mut d2, _) = pair();
        let reflected = sealed(&mut d2, b"{}");
        let mut d3 = FrameMac::for_dialer(&keys());
        assert_eq!(
            d3.open(&reflected),
            Err(FrameMacError::BadTag { seq: 0 }),
            "a frame reflected back to its sender fails"
        );
        // Not a frame-bin frame any more: the plain decoder would misread it.
        assert_ne!(decode_frame(&small).unwrap().unwrap().0.body, b"{\"x\":1}");
    }

    #[test]
    fn incomplete_is_not_an_error_at_any_split() {
        let (mut d, mut a) = pair();
        let f = sealed(&mut d, b"{\"y\":2}");
        for cut in 0..f.len() {
            assert_eq!(a.clone().open(&f[..cut]), Ok(None), "cut {cut}");
        }
        assert!(a.open(&f).unwrap().is_some());
    }

    #[test]
    fn modified_dropped_replayed_reordered_and_injected_frames_fail() {
        let (mut d, a) = pair();
        let frames: Vec<Vec<u8>> = (0..3)
            .map(|i| sealed(&mut d, format!("{{\"n\":{i}}}").as_bytes()))
            .collect();
        // Every single-bit change anywhere in the frame (len changes may only be incomplete).
        for i in 0..frames[0].len() {
            for bit in 0..8 {
                let mut m = frames[0].clone();
                m[i] ^= 1 << bit;
                let r = a.clone().open(&m);
                assert!(
                    r.is_err() || (i < 4 && r == Ok(None)),
                    "byte {i} bit {bit}: {r:?}"
                );
            }
        }
        // Dropped: the second frame arrives first.
        assert_eq!(
            a.clone().open(&frames[1]),
            Err(FrameMacError::BadTag { seq: 0 })
        );
        // Replayed: the first frame twice.
        let mut r = a.clone();
        r.open(&frames[0]).unwrap().unwrap();
        assert_eq!(r.open(&frames[0]), Err(FrameMacError::BadTag { seq: 1 }));
        // Reordered: 0, 2, 1.
        let mut r = a.clone();
        r.open(&frames[0]).unwrap().unwrap();
        assert_eq!(r.open(&frames[2]), Err(FrameMacError::BadTag { seq: 1 }));
        // Injected: a frame made with another key, or a plain frame-bin frame.
        let mut stranger = FrameMac::for_dialer(&FrameKeys {
            dialer_to_acceptor: [9; 32],
            acceptor_to_dialer: [9; 32],
        });
        assert_eq!(
            a.clone().open(&sealed(&mut stranger, b"{}")),
            Err(FrameMacError::BadTag { seq: 0 })
        );
        let plain = encode_frame(b"{\"n\":0}", false).unwrap();
        assert!(a.clone().open(&plain).is_err());
        // Length bounds, checked from the header alone.
        let mut short = vec![0, 0, 0, 16, 0];
        short.extend_from_slice(&[0; 16]);
        assert_eq!(
            a.clone().open(&short),
            Err(FrameMacError::TooShort { len_bytes: 16 })
        );
        let long = ((MAX_LEN_BYTES + 1) as u32).to_be_bytes();
        assert_eq!(
            a.clone().open(&long),
            Err(FrameMacError::TooLong {
                len_bytes: MAX_LEN_BYTES + 1
            })
        );
        assert_eq!(
            a.clone().open(&[0, 0, 1, 0, 0x80]),
            Err(FrameMacError::Frame(FrameError::ReservedBits {
                flags: 0x80
            }))
        );
    }

    #[test]
    fn a_frame_bin_frame_at_the_cap_still_fits() {
        let (mut d, mut a) = pair();
        let body = vec![b'x'; FRAME_CAP_BYTES - 1];
        let f = d.seal(encode_frame(&body, false).unwrap()).unwrap();
        assert_eq!(f.len(), 4 + MAX_LEN_BYTES);
        assert_eq!(a.open(&f).unwrap().unwrap().0.body.len(), body.len());
    }

    #[test]
    fn feature_rules() {
        use Feature::*;
        assert_eq!(settle(vec![FrameBin, FrameMac]), vec![FrameBin]);
        assert_eq!(settle(vec![MutualAuth, FrameMac]), vec![MutualAuth]);
        assert_eq!(
            settle(vec![MutualAuth, FrameBin, FrameMac]),
            vec![MutualAuth, FrameBin, FrameMac]
        );
        assert_eq!(
            missing_without_v0(&[MutualAuth, FrameBin, FrameMac, Lz4]),
            vec![]
        );
        assert_eq!(missing_without_v0(&[FrameBin]), vec![MutualAuth, FrameMac]);
    }
}
